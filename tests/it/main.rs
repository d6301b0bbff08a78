//! The integration suite, one test crate: a module per concern, one binary to build and link
//! (22 binaries took about three times as long to rebuild after an edit: benches/RESULTS.md).

mod common;

mod a2a;
mod admin;
mod agent;
mod big_body;
mod bridge;
mod check;
mod cli_edges;
mod connections;
mod contracts;
mod cost;
mod deploy;
mod faults;
mod fleet;
mod fuzz_props;
mod hub;
mod injected;
mod inspect;
mod intercept;
mod interop;
mod limits;
mod live_vs_check;
mod mcp_checks;
mod otel;
mod probe;
mod proxy;
mod record;
mod stdio;
mod transports;
mod tui_e2e;
mod tui_snapshots;
mod websocket;
mod wire;
