//! Secrets never reach a recording, a log or the screen: headers and JSON paths are replaced by
//! `"[REDACTED]"` when events are built, before any observer sees them.

use http::HeaderMap;
use serde_json::Value;

pub const REDACTED: &str = "[REDACTED]";

/// Headers always redacted, whatever the configuration says.
pub const ALWAYS: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// What to redact.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    /// Lower-case header names redacted in addition to [`ALWAYS`].
    headers: Vec<String>,
    /// JSON paths inside a message, as segments (`*` matches any key or index).
    paths: Vec<Vec<String>>,
}

impl Redactor {
    /// `headers`: extra header names; `paths`: dotted paths such as `params.arguments.password`
    /// or `params.*.token` (relative to each JSON-RPC message).
    pub fn new(headers: &[String], paths: &[String]) -> Self {
        Redactor {
            headers: headers
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
            paths: paths
                .iter()
                .map(|p| {
                    p.split('.')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .filter(|p: &Vec<String>| !p.is_empty())
                .collect(),
        }
    }

    pub fn is_secret_header(&self, name: &str) -> bool {
        ALWAYS.iter().any(|h| name.eq_ignore_ascii_case(h))
            || self.headers.iter().any(|h| name.eq_ignore_ascii_case(h))
    }

    /// The headers with every secret value replaced.
    pub fn headers(&self, h: &HeaderMap) -> crate::events::Headers {
        let mut out = h.clone();
        for (k, v) in out.iter_mut() {
            if self.is_secret_header(k.as_str()) {
                *v = http::HeaderValue::from_static(REDACTED);
            }
        }
        crate::events::Headers(out)
    }

    pub fn has_paths(&self) -> bool {
        !self.paths.is_empty()
    }

    /// The message with every configured path replaced, or `None` when nothing matched (then
    /// the original bytes are kept verbatim).
    pub fn message(&self, raw: &[u8]) -> Option<Vec<u8>> {
        if self.paths.is_empty() {
            return None;
        }
        let mut v: Value = serde_json::from_slice(raw).ok()?;
        let mut changed = false;
        for p in &self.paths {
            changed |= redact_path(&mut v, p);
        }
        if changed {
            serde_json::to_vec(&v).ok()
        } else {
            None
        }
    }
}

fn redact_path(v: &mut Value, path: &[String]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        *v = Value::String(REDACTED.into());
        return true;
    };
    let mut changed = false;
    match v {
        Value::Object(m) => {
            if first == "*" {
                for child in m.values_mut() {
                    changed |= redact_path(child, rest);
                }
            } else if let Some(child) = m.get_mut(first) {
                changed |= redact_path(child, rest);
            }
        }
        Value::Array(a) => {
            if first == "*" {
                for child in a.iter_mut() {
                    changed |= redact_path(child, rest);
                }
            } else if let Some(child) = first.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                changed |= redact_path(child, rest);
            }
        }
        _ => {}
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_wildcards() {
        let r = Redactor::new(
            &[],
            &["params.arguments.password".into(), "result.*.token".into()],
        );
        let out = r.message(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"login","arguments":{"user":"u","password":"hunter2"}}}"#).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(!s.contains("hunter2") && s.contains(REDACTED) && s.contains("\"user\":\"u\""));
        let out = r
            .message(br#"{"jsonrpc":"2.0","id":1,"result":[{"token":"t1"},{"token":"t2"}]}"#)
            .unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(!s.contains("t1") && !s.contains("t2"));
        assert!(r
            .message(br#"{"jsonrpc":"2.0","id":1,"result":5}"#)
            .is_none());
    }

    #[test]
    fn headers_always_and_configured() {
        let r = Redactor::new(&["X-Api-Key".into()], &[]);
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer s3cret".parse().unwrap());
        h.insert("x-api-key", "k3y".parse().unwrap());
        h.insert("accept", "text/event-stream".parse().unwrap());
        let out = r.headers(&h);
        let text = format!("{out:?}");
        assert!(
            !text.contains("s3cret") && !text.contains("k3y") && text.contains("text/event-stream")
        );
    }
}
