//! What reads recordings after the fact: `check` as a CI gate (`gate`), what changed between two
//! sessions (`diff`), and the recordings served to an AI agent (`agent`). The checks themselves
//! are the live inspector's (`inspect::offline`, `inspect::recorded`); regression runs and mocks
//! are `replay`'s; the servers' trusted tools (`crate::baseline`) are read live too.

pub mod agent;
pub mod diff;
pub mod gate;
