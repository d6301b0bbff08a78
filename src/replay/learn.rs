//! What a server makes up: a stateful protocol's server names the things it creates — an A2A
//! task's `id` and `contextId`, an MCP task's `taskId`, a message's `messageId` — and stamps
//! them with times. A replay's target makes up its own, so a recording of a stateful exchange
//! could never replay: the target's first task id differs from the recorded one, and every later
//! request names the recorded id, which the target never gave out.
//!
//! So a replay learns: where a recorded reply and the target's differ at an id-like member
//! (`id`, or a key ending in `Id` / `_id`), the target's value stands for the recorded one from
//! then on — later requests are sent with it in its place, and a reply naming it is judged as if
//! it named the recorded one. A timestamp-like member (`timestamp`, or ending in `At`) that is a
//! timestamp in both is the target's own clock, not a difference. A value the target maps
//! inconsistently (the recorded id now stands for another) is still a difference.

use serde_json::Value;
use std::collections::HashMap;

/// Recorded values and the target's, learnt from the replies so far.
#[derive(Debug, Default)]
pub(super) struct Learned {
    to_live: HashMap<String, String>,
}

fn id_like(key: &str) -> bool {
    key == "id" || key.ends_with("Id") || key.ends_with("_id")
}

fn time_like(key: &str) -> bool {
    key == "timestamp" || key.ends_with("At") || key.ends_with("_at")
}

/// An RFC 3339 date-time (`2026-12-07T20:07:36.328395Z`), read loosely: its shape only.
fn timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 20
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't' | b' ')
        && b[13] == b':'
}

/// Too short to be a value a server made up (`1`, `"a"`): never learnt, never replaced.
const MIN_LEN: usize = 6;

impl Learned {
    /// Learns from a recorded reply and the target's: each id-like string the target chose
    /// differently, not learnt before.
    pub(super) fn learn(&mut self, recorded: &Value, live: &Value) {
        match (recorded, live) {
            (Value::Object(r), Value::Object(l)) => {
                for (k, rv) in r {
                    let Some(lv) = l.get(k) else { continue };
                    match (rv, lv) {
                        (Value::String(a), Value::String(b))
                            if id_like(k) && a != b && a.len() >= MIN_LEN =>
                        {
                            self.to_live.entry(a.clone()).or_insert_with(|| b.clone());
                        }
                        _ => self.learn(rv, lv),
                    }
                }
            }
            (Value::Array(r), Value::Array(l)) => {
                for (rv, lv) in r.iter().zip(l) {
                    self.learn(rv, lv);
                }
            }
            _ => {}
        }
    }

    /// A request as recorded, with each value the target chose differently replaced by the
    /// target's (the text as it is when nothing was learnt or nothing in it was).
    pub(super) fn request(&self, body: String) -> String {
        if self.to_live.is_empty() {
            return body;
        }
        let Ok(mut v) = serde_json::from_str::<Value>(&body) else {
            return body;
        };
        if self.replace(&mut v) {
            v.to_string()
        } else {
            body
        }
    }

    fn replace(&self, v: &mut Value) -> bool {
        match v {
            Value::String(s) => match self.to_live.get(s.as_str()) {
                Some(live) => {
                    *s = live.clone();
                    true
                }
                None => false,
            },
            Value::Array(a) => a.iter_mut().fold(false, |any, x| self.replace(x) | any),
            Value::Object(m) => m.values_mut().fold(false, |any, x| self.replace(x) | any),
            _ => false,
        }
    }

    /// The target's reply with what it made up put back as recorded: an id-like member that
    /// holds what the recorded one stands for, a timestamp-like member that is a timestamp in
    /// both. What remains different is a difference.
    pub(super) fn as_recorded(&self, recorded: &Value, live: &mut Value) {
        match (recorded, live) {
            (Value::Object(r), Value::Object(l)) => {
                for (k, lv) in l.iter_mut() {
                    let Some(rv) = r.get(k) else { continue };
                    match (rv, &*lv) {
                        (Value::String(a), Value::String(b)) if a != b => {
                            let same = (id_like(k) && self.to_live.get(a) == Some(b))
                                || (time_like(k) && timestamp(a) && timestamp(b));
                            if same {
                                *lv = rv.clone();
                            }
                        }
                        _ => self.as_recorded(rv, lv),
                    }
                }
            }
            (Value::Array(r), Value::Array(l)) => {
                for (rv, lv) in r.iter().zip(l.iter_mut()) {
                    self.as_recorded(rv, lv);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_the_target_made_up_are_learnt_sent_and_not_counted() {
        let mut l = Learned::default();
        let rec = json!({"task": {"id": "task-recorded", "contextId": "ctx-recorded",
            "status": {"state": "working", "timestamp": "2026-12-07T20:07:36.328395Z"}, "kind": "x1"}});
        let mut live = json!({"task": {"id": "task-live-1", "contextId": "ctx-live-1",
            "status": {"state": "working", "timestamp": "2026-12-07T21:00:00Z"}, "kind": "x2"}});
        l.learn(&rec, &live);
        // A later request naming the recorded task names the target's.
        let req =
            r#"{"jsonrpc":"2.0","id":"a1","method":"GetTask","params":{"id":"task-recorded"}}"#;
        assert_eq!(
            l.request(req.into()),
            r#"{"jsonrpc":"2.0","id":"a1","method":"GetTask","params":{"id":"task-live-1"}}"#
        );
        // Nothing learnt in it: the text as recorded.
        let other = r#"{"jsonrpc":"2.0", "id":2,"method":"x"}"#;
        assert_eq!(l.request(other.into()), other);
        // Judged: ids and times as recorded; what else differs still does.
        l.as_recorded(&rec, &mut live);
        assert_eq!(live["task"]["id"], "task-recorded");
        assert_eq!(
            live["task"]["status"]["timestamp"],
            rec["task"]["status"]["timestamp"]
        );
        assert_eq!(live["task"]["kind"], "x2");
        // A recorded id the target now maps to another is a difference.
        let mut again = json!({"id": "task-live-2"});
        l.as_recorded(&json!({"id": "task-recorded"}), &mut again);
        assert_eq!(again["id"], "task-live-2");
    }
}
