//! rpctap: a transparent, inspecting reverse proxy for JSON-RPC 2.0 and MCP.
//!
//! Module map:
//! - [`cli`] — the command line (clap), converted once into validated options by [`config`].
//! - [`config`] — the TOML config file merged with flags, validated once.
//! - [`server`] — listener, connection tasks, graceful shutdown (shared by proxy and demo).
//! - [`proxy`] — the exchange pipeline: request → upstream → streamed, teed reply.
//! - [`rpc`] — JSON-RPC envelopes: parsing without a full tree, ids kept exactly.
//! - [`inspect`] — SSE decoder, correlator, anomaly codes; one implementation, live and offline.
//! - [`events`] — event types and the never-blocking bus observers subscribe to.
//! - [`logsink`] — the headless log printer (`--log text|json`).
//! - [`demo`] — the embedded demo upstream: JSON-RPC test methods and a small MCP server.
//! - [`app`] — the subcommands wired together (what `main` calls).
//! - [`alloc`] — the global allocator (mimalloc, entered through its fastest functions).

pub mod alloc;
pub mod app;
pub mod cli;
pub mod config;
pub mod demo;
pub mod events;
pub mod inspect;
pub mod limit;
pub mod logsink;
pub mod media;
pub mod proxy;
pub mod record;
pub mod redact;
pub mod replay;
pub mod rpc;
pub mod server;
pub mod tui;
