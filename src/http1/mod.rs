//! rpctap's own HTTP/1 engine: what it reads and writes itself instead of through hyper, on
//! the two paths that carry nearly all of an MCP server's traffic (whole JSON-RPC POSTs on the
//! lean reader, `server::lean`; the upstream's replies on the lean leg, `proxy::lean`). One
//! framing decision for requests and replies alike ([`framing`]), one chunked decoder
//! ([`chunked`], on `httparse::parse_chunk_size`), one writer that counts what it writes
//! against the length it declared ([`write`]). hyper takes everything the engine does not
//! read; the `http1_diff` fuzz target gives the same bytes to both and holds the engine to
//! hyper's verdicts, or stricter ones.

pub mod chunked;
pub mod framing;
pub mod names;
pub mod write;

pub use framing::{plain_length, Framing, FramingFields};

/// Whether one `Connection` value lists `option` (comma-separated, any letter case).
pub fn lists_option(value: &str, option: &str) -> bool {
    value
        .split(',')
        .any(|o| o.trim().eq_ignore_ascii_case(option))
}
