//! rpctap: a transparent, inspecting reverse proxy for JSON-RPC 2.0 and MCP.
//!
//! Module map (ARCHITECTURE.md follows a request from the socket to a dashboard row):
//! - [`cli`] — the command line (clap), converted once into validated options by [`config`].
//! - [`config`] — the TOML config file merged with flags, validated once.
//! - [`server`] — listener, connection cap and limits, connection tasks (`server/machine.rs`:
//!   protocol state, idle parking, the supervisor's timeouts; `server/conn.rs`: the counters it
//!   reads), graceful shutdown (shared by proxy, demo and mock).
//! - [`proxy`] — the exchange pipeline in named phases: request → upstream → streamed, teed
//!   reply; rate limits applied per call (`proxy::limits`), the upstream client
//!   (`proxy::upstream`), the teeing body (`proxy::body`), header rules (`proxy::headers`).
//! - [`media`] — HTTP media types in any letter case (JSON, event streams).
//! - [`rpc`] — JSON-RPC envelopes: parsing without a full tree (a one-pass scanner, serde_json
//!   the reference), ids kept exactly.
//! - [`inspect`] — the one inspector, live and offline: an exchange's lifecycle
//!   (`inspect::exchange`), calls and their outcomes (`calls`), MCP rules (`mcp`), the SSE
//!   decoder, the correlator, the anomaly codes; `inspect::offline` checks exchange documents
//!   and `inspect::recorded` feeds a recording back through the same inspector.
//! - [`events`] — the one event model (what the inspector publishes, the recorder writes, the
//!   reader reads back and every observer takes: `Serialize` and `Deserialize`), the
//!   never-blocking bus (`events::bus`) and display sampling (`events::sample`).
//! - [`limit`] — rate-limit rules and their state (GCRA via `governor`, concurrency permits,
//!   the shared store), and their enforcement on every transport's messages (`limit::enforce`).
//! - [`flow`] — the acting pipeline's decisions: a list of stages after the rate limits (the
//!   `[[deny]]` rules, the `[[fault]]` rules), each passing a message or acting on it; the
//!   transports carry the verdicts out without naming a stage. Its stages' own modules:
//!   - [`flow::fault`] — `[[fault]]` rules: faults injected on purpose (delays, errors, dropped,
//!     doubled or broken replies, cut streams), decided with the rate limits and recorded as
//!     injected.
//!   - [`flow::intercept`] — messages held for the dashboard's user to forward, edit, drop or
//!     answer (a filter sets what is held; a timeout forwards what nobody decided), recorded as
//!     injected.
//! - [`record`] — the recording: the sink and `start` (`record`), the file writer (`writer`), the
//!   line encoder (`line`), the reader (into the event model), exports.
//! - [`redact`] — secrets replaced before any observer sees an event.
//! - [`probe`] — tests from a server's own description (`rpctap probe`, `rpctap test`): its
//!   offerings read (a live MCP server, an OpenRPC document, a method list), cases generated from
//!   its schemas and tried once, a reviewable suite written and run with verdicts and assertions,
//!   `--fuzz` with shrinking.
//! - [`replay`] — regression runs against a server (`replay`), a recording served as a mock.
//! - [`locks`] — the std locks' one poison rule (a poisoned lock is used as it is), for every
//!   module that takes one.
//! - [`view`] — the dashboard's state, apart from any renderer: the bus's events applied as
//!   they are (rows, counters, methods, sessions, sources under `watch`), keys and views, the
//!   filter language's use, copy/export. The terminal draws it; a browser page can draw the same.
//! - [`tui`] — the terminal dashboard: rendering the view (`tui::ui`, ratatui), the loop
//!   (`tui`: the terminal, the event sources, the intercept's decisions from keys).
//! - [`demo`] — the embedded demo upstream: JSON-RPC test methods and a small MCP server.
//! - [`filter`] — the filter language (terms ANDed, `-` negates, `field:value`), matching the
//!   dashboard's rows and the feed's events alike.
//! - [`ws`] — JSON-RPC over WebSocket: RFC 6455 framing and permessage-deflate on the copy of
//!   an upgraded connection (`ws::frame`), the tee and per-message limits (`ws`).
//! - [`trace`] — W3C trace context carried on calls (the event model and the exporter use it).
//! - [`stdio`] — the stdio transport: line framing, the two relays, the child process.
//! - [`hub`] — where every rpctap on this machine records its sessions and registers its live
//!   feed (the state and runtime directories), sessions listed, found, pruned and capped; a
//!   wrapped command's label and scrubbed secrets (`hub::command`), `watch`'s sources
//!   (`hub::watch`), desktop clients' MCP configs wrapped and unwrapped (`hub::clients`).
//! - [`app`] — the subcommands wired together (what `main` calls): one observer chain for every
//!   subcommand that carries traffic (`app::observers`), `stdio`'s wiring (`app::stdio`), joining
//!   the hub and its subcommands (`app::hub`: `watch`, `sessions`, `open`, `prune`), `config
//!   wrap|unwrap` (`app::wrap`).
//! - [`observe`] — what watches the traffic without acting on it (besides the recorder and the
//!   view): the observers of the chain `app::observers` builds, and what serves them.
//!   - [`observe::logsink`] — the headless log printer (`--log text|json`).
//!   - [`observe::metrics`] — Prometheus metrics, counted from the bus and read at scrape time.
//!   - [`observe::feed`] — the live event feed (NDJSON) that `/events` serves and `rpctap attach`
//!     reads.
//!   - [`observe::otel`] — OpenTelemetry (`--otlp`): spans and the MCP duration metrics encoded
//!     as OTLP protobuf (`otel::wire`) and exported in batches off the proxy path.
//!   - [`observe::semconv`] — the semantic conventions' reading of a call, for OTLP and
//!     `/metrics` alike.
//! - [`admin`] — the admin listener: health, readiness, metrics, the feed, recent calls, the
//!   agent API; it probes the upstream for readiness.
//! - [`attach`] — `rpctap attach`: the feed's client, reconnecting, for the dashboard.
//! - [`baseline`] — each server label's trusted tools (`MCP_TOOL_DRIFT`, `rpctap baseline`), read
//!   live by the inspector and offline.
//! - [`offline`] — what reads recordings after the fact (beside `inspect::offline` and
//!   [`replay`]):
//!   - [`offline::gate`] — `check` as a CI gate: what fails a run, accepted findings, assertions on
//!     the tools called, the calls' durations and tokens, and the JSON, text and JUnit reports
//!     (SARIF in [`offline::sarif`]).
//!   - [`offline::cost`] — what a session costs an agent's context in tokens (`rpctap cost`).
//!   - [`offline::diff`] — what changed between two recorded sessions (`rpctap diff`): offerings,
//!     calls matched by method, target and arguments, outcomes and latencies.
//!   - [`offline::agent`] — `rpctap mcp`: the recordings served as an MCP server for an AI agent
//!     (stdio, and `/mcp` on the admin listener).
//! - [`units`] — durations and sizes as users write them, one syntax for flags and config keys.
//! - [`tokens`] — text counted in a language model's tokens (OpenAI's BPE encodings).
//! - [`bridge`] — `rpctap serve` (a Streamable HTTP endpoint in front of stdio servers, the
//!   proxy's local upstream) and `rpctap stdio --upstream` (a remote HTTP server over stdio).
//! - [`http1`] — rpctap's own HTTP/1 engine (what the lean reader and the lean upstream leg read
//!   and write instead of hyper): one framing decision, one chunked decoder, one writer that
//!   counts.
//! - [`private`] — files and folders only their owner may read (the hub's state, baselines,
//!   recordings).
//! - [`alloc`] — the global allocator (mimalloc, entered through its fastest functions).

pub mod admin;
pub mod alloc;
pub mod app;
pub mod attach;
pub mod baseline;
pub mod bridge;
pub mod cli;
pub mod config;
pub mod demo;
pub mod events;
pub mod filter;
pub mod flow;
pub mod http1;
pub mod hub;
pub mod inspect;
pub mod limit;
pub mod locks;
pub mod media;
pub mod observe;
pub mod offline;
pub mod private;
pub mod probe;
pub mod proxy;
pub mod record;
pub mod redact;
pub mod replay;
pub mod rpc;
pub mod server;
pub mod stdio;
pub mod tokens;
pub mod trace;
pub mod tui;
pub mod units;
pub mod view;
pub mod ws;
