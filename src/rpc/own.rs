//! rpctap's own errors: the JSON-RPC errors rpctap answers with when it, not the server, ends
//! a call (the upstream unreachable or too slow, a request it could not read, a connection or
//! rate cap, a policy refusal), so that none of them can pose as the server's.
//!
//! Every one carries `error.data.rpctap = {"what": …, "side": …}`: what happened, and whose
//! side it happened on (`upstream`: the server did not answer; `client`: the request; `rpctap`:
//! a limit of rpctap's). Its code comes from one of two ranges: the classic one (-32001,
//! -32003…-32006, rpctap's codes since its first release and the default for MCP and plain
//! JSON-RPC) or one that no protocol rpctap reads assigns (-32091…-32096): A2A gives -32001…-32009
//! meanings of its own (`-32003` is "push notifications not supported"), so an A2A client would
//! read rpctap's "upstream unreachable" as the agent's protocol error. `--error-codes auto` (the
//! default) answers an A2A request (`rpc::a2a::is_a2a_only`) from the second range and anything
//! else from the first; `classic` and `distinct` pick one range for all.

use super::Id;
use std::sync::atomic::{AtomicU8, Ordering};

/// What rpctap answered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// The upstream could not be reached, or broke its protocol.
    Unreachable,
    /// The upstream did not answer in time.
    Timeout,
    /// The client's request could not be read (or was too large to decide on).
    BadRequest,
    /// The connection cap was reached.
    Overloaded,
    /// A rate limit refused the call.
    RateLimited,
}

impl What {
    pub fn name(self) -> &'static str {
        match self {
            What::Unreachable => "upstream_unreachable",
            What::Timeout => "upstream_timeout",
            What::BadRequest => "bad_request",
            What::Overloaded => "connection_cap",
            What::RateLimited => "rate_limited",
        }
    }

    /// Whose side it happened on.
    pub fn side(self) -> &'static str {
        match self {
            What::Unreachable | What::Timeout => "upstream",
            What::BadRequest => "client",
            What::Overloaded | What::RateLimited => "rpctap",
        }
    }

    fn classic(self) -> i64 {
        match self {
            What::Unreachable => -32003,
            What::Timeout => -32004,
            What::BadRequest => -32005,
            What::Overloaded => -32006,
            What::RateLimited => -32001,
        }
    }

    /// The classic code moved 90 down, into -32091…-32096: clear of A2A's -32001…-32009, each
    /// code still telling what happened.
    fn distinct(self) -> i64 {
        self.classic() - 90
    }

    /// The code for a request that is (`a2a`) or is not an A2A one, under the range in force.
    pub fn code(self, a2a: bool) -> i64 {
        match (range(), a2a) {
            (Range::Classic, _) | (Range::Auto, false) => self.classic(),
            (Range::Distinct, _) | (Range::Auto, true) => self.distinct(),
        }
    }

    /// `{"rpctap": {"what", "side"}}`, the `data` of every error rpctap makes.
    pub fn data(self) -> serde_json::Value {
        serde_json::json!({ "rpctap": { "what": self.name(), "side": self.side() } })
    }

    /// rpctap's error reply to the call `id`.
    pub fn reply(self, id: &Id, message: &str, a2a: bool) -> String {
        super::error_reply(id, self.code(a2a), message, Some(self.data()))
    }

    /// rpctap's error replies to the calls of a request (an array for a batch); `None` when
    /// none of them expects a reply.
    pub fn replies(self, batch: bool, ids: &[Id], message: &str, a2a: bool) -> Option<String> {
        match (batch, ids) {
            (_, []) => None,
            (true, ids) => {
                let items: Vec<String> =
                    ids.iter().map(|id| self.reply(id, message, a2a)).collect();
                Some(format!("[{}]", items.join(",")))
            }
            (false, [id, ..]) => Some(self.reply(id, message, a2a)),
        }
    }
}

/// Which codes rpctap's own errors use (`--error-codes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Range {
    /// The distinct range for A2A requests, the classic one for the rest.
    #[default]
    Auto,
    /// -32001, -32003…-32006 for every request.
    Classic,
    /// -32091…-32096 for every request.
    Distinct,
}

// One choice for the process, made from its options at start (and on reload): every transport's
// error path reads it, and none of them carries the options that far.
static RANGE: AtomicU8 = AtomicU8::new(0);

pub fn set_range(r: Range) {
    RANGE.store(r as u8, Ordering::Relaxed);
}

pub fn range() -> Range {
    match RANGE.load(Ordering::Relaxed) {
        1 => Range::Classic,
        2 => Range::Distinct,
        _ => Range::Auto,
    }
}

/// Whether a request body holds an A2A call (read again: only rpctap's own error paths ask).
pub fn body_is_a2a(body: &bytes::Bytes) -> bool {
    let is = |e: &super::Envelope| e.method.as_deref().is_some_and(super::a2a::is_a2a_only);
    match super::parse_body(body) {
        super::Body::Single(e) => is(&e),
        super::Body::Batch(members) => members.iter().any(is),
        super::Body::ParseError(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_own_error_says_it_is_rpctaps_and_keeps_off_a2as_codes_for_a2a() {
        let id = Id::Num("7".into());
        let v: serde_json::Value =
            serde_json::from_str(&What::Unreachable.reply(&id, "gone", false)).unwrap();
        assert_eq!(v["error"]["code"], -32003);
        assert_eq!(v["error"]["data"]["rpctap"]["what"], "upstream_unreachable");
        assert_eq!(v["error"]["data"]["rpctap"]["side"], "upstream");
        let v: serde_json::Value =
            serde_json::from_str(&What::Unreachable.reply(&id, "gone", true)).unwrap();
        assert_eq!(v["error"]["code"], -32093);
        // No A2A code (-32001…-32009) for any of rpctap's own errors of an A2A request.
        for w in [
            What::Unreachable,
            What::Timeout,
            What::BadRequest,
            What::Overloaded,
            What::RateLimited,
        ] {
            assert!(!(-32009..=-32001).contains(&w.code(true)), "{w:?}");
        }
        assert!(body_is_a2a(&bytes::Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage"}"#
        )));
        assert!(body_is_a2a(&bytes::Bytes::from_static(
            br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"message/send"}]"#
        )));
        // `tasks/get` is MCP's too: no A2A request by itself.
        assert!(!body_is_a2a(&bytes::Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get"}"#
        )));
        assert!(!body_is_a2a(&bytes::Bytes::from_static(b"{")));
    }
}
