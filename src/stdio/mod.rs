//! The stdio transport: a stdio MCP (or any newline-delimited JSON-RPC) server as a child
//! process, its two pipes relayed and inspected (the subcommand's wiring is `app::stdio`).
//!
//! rpctap spawns the command and relays its own stdin to the child's stdin and the child's
//! stdout to its own stdout, byte for byte and as soon as bytes arrive (a partial line is passed
//! on before its newline); the child's stderr is the child's own (inherited). Each direction is
//! split into lines on a copy and every line goes through the one inspector, in one scope (the
//! session `stdio-PID`). A line is inspected *before* the bytes that complete it are passed on,
//! so a reply can never be seen before the call it answers.
//!
//! The relays are two plain threads doing blocking reads and writes: the fewest hops between
//! the pipes (a runtime's stdio goes through its blocking pool). The runtime keeps signals,
//! the admin listener, the log and the recorder.
//!
//! Rate limits: with rules in force, the client's lines are passed on whole (a line is held
//! until its newline, so a refused call can be taken out); a refused call's JSON-RPC error is
//! written to the client's stdout between two of the server's lines — the one case where rpctap
//! writes into the stream. A batch with refused members is passed on without them, and their
//! errors go to the client as one array line of their own. Concurrency rules
//! (`max_concurrent`) do not apply on stdio: there is no exchange to hold a permit for.
//!
//! Process handling: SIGINT, SIGTERM and SIGHUP are forwarded to the child; when the client
//! closes stdin the child's stdin is closed; the child gets SIGTERM if rpctap dies (Linux
//! `PR_SET_PDEATHSIG`, so no orphan); rpctap always reaps it (no zombie) and exits with its
//! status (128+N for a signal, as a shell reports it). Calls still pending when the child has
//! exited end `MISSING_RESPONSE` with the exit status as the reason.

//!
//! Its rooms: `framing` (a byte stream split into lines on a copy), `relay` (the two relay
//! threads, and rpctap's own lines written between the server's), `child` (spawning, signals,
//! how it exited).

pub mod child;
pub mod framing;
pub mod relay;

pub use child::{describe_exit, exit_code};
pub use framing::{Lines, Piece};
