//! `--otlp-tool-content`: a tool call's arguments and result on its span
//! (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`, opt-in in the conventions since
//! they may hold anything). The exporter then also reads the `tools/call` messages — redacted
//! as every observer gets them (`--redact-path`, the default secret keys) — and keeps each
//! call's two texts until its call ends. Bounded: at most [`MAX_OPEN`] calls are waited on (when
//! the calls' ends were lost — the exporter's queue overflowed — the table starts over rather
//! than stay full) and each text is cut at [`MAX_TEXT`] bytes, said with a trailing `…`.

use crate::events::{Direction, MessageEvent, Scope};
use crate::rpc::{Id, Kind};
use std::collections::HashMap;

/// Calls waited on at most.
pub const MAX_OPEN: usize = 4096;
/// Bytes of one text at most.
pub const MAX_TEXT: usize = 8 << 10;

type Key = (Scope, Id);

/// Each open `tools/call`'s arguments and, once it came, its result.
#[derive(Debug, Default)]
pub struct Content {
    open: HashMap<Key, (String, Option<String>)>,
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_TEXT {
        let mut at = MAX_TEXT;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push('…');
    }
    s
}

fn member(raw: &[u8], path: &[&str]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(raw).ok()?;
    let mut at = &v;
    for p in path {
        at = at.get(p)?;
    }
    Some(cut(at.to_string()))
}

impl Content {
    /// Reads a message: a client's `tools/call` request opens its call, its reply completes it.
    pub fn message(&mut self, m: &MessageEvent) {
        let Some(id) = m.id.clone() else { return };
        match (m.kind, m.direction) {
            (Kind::Request, Direction::ClientToServer)
                if m.method.as_deref() == Some("tools/call") =>
            {
                if self.open.len() >= MAX_OPEN {
                    self.open.clear();
                }
                let args = member(&m.message, &["params", "arguments"]).unwrap_or_default();
                self.open.insert((m.scope.clone(), id), (args, None));
            }
            (Kind::Result, Direction::ServerToClient) => {
                if let Some(e) = self.open.get_mut(&(m.scope.clone(), id)) {
                    e.1 = member(&m.message, &["result"]);
                }
            }
            _ => {}
        }
    }

    /// The arguments and result of a `tools/call` that ended (forgotten here).
    pub fn take(&mut self, scope: &Scope, id: &Id) -> Option<(String, Option<String>)> {
        self.open.remove(&(scope.clone(), id.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_is_cut_on_a_character() {
        let s = cut("é".repeat(MAX_TEXT));
        assert!(s.len() <= MAX_TEXT + '…'.len_utf8() && s.ends_with('…'));
        assert_eq!(cut("{}".into()), "{}");
    }
}
