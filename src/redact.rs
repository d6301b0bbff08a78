//! Secrets never reach a recording, a log or the screen: headers and JSON paths are replaced by
//! `"[REDACTED]"` when events are built, before any observer sees them.

use http::HeaderMap;
use serde_json::Value;

pub const REDACTED: &str = "[REDACTED]";

/// Headers always redacted, whatever the configuration says. `DPoP` carries a proof of
/// possession signed for one request (RFC 9449; MCP authorization, SEP-1932): a credential like
/// the token it goes with.
pub const ALWAYS: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "dpop",
];

/// What to redact.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    /// Lower-case header names redacted in addition to [`ALWAYS`].
    headers: Vec<String>,
    /// JSON paths inside a message, as segments (`*` matches any key or index).
    paths: Vec<Vec<String>>,
    /// Whether the secrets preset is on: every object key that names a secret, at any depth
    /// ([`is_secret_key`]).
    preset: bool,
}

/// Headers the preset adds to [`ALWAYS`].
pub const PRESET_HEADERS: [&str; 7] = [
    "x-api-key",
    "api-key",
    "x-auth-token",
    "x-access-token",
    "private-token",
    "x-goog-api-key",
    "x-amz-security-token",
];

/// Whether an object key names a secret, under the preset: `authorization`, `cookie`,
/// `set-cookie`, `credentials`, `bearer`, or a key ending in `token`, `secret`, `password`,
/// `passwd`, `apikey`, `privatekey` (any letter case, `_` and `-` ignored: `apiKey`, `API_KEY`,
/// `client_secret`, `githubToken`) — except MCP's own `progressToken`.
pub fn is_secret_key(key: &str) -> bool {
    let mut n = [0u8; 64];
    let mut len = 0;
    for b in key.bytes().filter(u8::is_ascii_alphanumeric) {
        if len == n.len() {
            return false;
        }
        n[len] = b.to_ascii_lowercase();
        len += 1;
    }
    let n = &n[..len];
    if n == b"progresstoken" {
        return false;
    }
    [
        &b"authorization"[..],
        b"cookie",
        b"setcookie",
        b"credentials",
        b"bearer",
    ]
    .contains(&n)
        || [
            &b"token"[..],
            b"secret",
            b"password",
            b"passwd",
            b"apikey",
            b"privatekey",
        ]
        .iter()
        .any(|s| n.ends_with(s))
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
            preset: false,
        }
    }

    /// Turns the secrets preset on: its headers ([`PRESET_HEADERS`]) and every key that names
    /// a secret ([`is_secret_key`]), at any depth of a message.
    pub fn with_preset(mut self) -> Self {
        self.preset = true;
        self.headers
            .extend(PRESET_HEADERS.iter().map(|h| h.to_string()));
        self
    }

    pub fn preset(&self) -> bool {
        self.preset
    }

    pub fn is_secret_header(&self, name: &str) -> bool {
        ALWAYS.iter().any(|h| name.eq_ignore_ascii_case(h))
            || self.headers.iter().any(|h| name.eq_ignore_ascii_case(h))
    }

    /// The headers with every secret value replaced.
    pub fn headers(&self, h: &HeaderMap) -> crate::events::Headers {
        crate::events::Headers::encode(h.iter().map(|(k, v)| {
            let v = if self.is_secret_name(k) {
                REDACTED.as_bytes()
            } else {
                v.as_bytes()
            };
            (k.as_str(), v)
        }))
    }

    /// [`Self::is_secret_header`] for a header's name (lower case already: the standard names
    /// compare as the constants they are, the others as text).
    fn is_secret_name(&self, k: &http::HeaderName) -> bool {
        use http::header::{AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION, SET_COOKIE};
        *k == AUTHORIZATION
            || *k == PROXY_AUTHORIZATION
            || *k == COOKIE
            || *k == SET_COOKIE
            || k.as_str() == "dpop"
            || self.headers.iter().any(|h| k.as_str() == h)
    }

    /// Whether messages may be rewritten (paths, or the preset's keys).
    pub fn has_paths(&self) -> bool {
        !self.paths.is_empty() || self.preset
    }

    /// The message with every configured path replaced, or `None` when nothing matched (then
    /// the original bytes are kept verbatim).
    pub fn message(&self, raw: &[u8]) -> Option<Vec<u8>> {
        let keys = self.preset && may_hold_a_secret_key(raw);
        if self.paths.is_empty() && !keys {
            return None;
        }
        let mut v: Value = serde_json::from_slice(raw).ok()?;
        let mut changed = false;
        for p in &self.paths {
            changed |= redact_path(&mut v, p);
        }
        if keys {
            changed |= redact_keys(&mut v);
        }
        if changed {
            serde_json::to_vec(&v).ok()
        } else {
            None
        }
    }
}

impl Redactor {
    /// A frame that is not JSON (a banner a server prints on stdout, a broken line), with the
    /// secrets inside it redacted as text: the value after a secret key (the preset's, or the
    /// last name of a configured path) written `key=value`, `key: value` or `"key":"value"`,
    /// and the token after `Bearer`. The rest of the line is kept, so the finding still shows
    /// what went wrong.
    pub fn text(&self, raw: &[u8]) -> Vec<u8> {
        let names: Vec<&str> = self
            .paths
            .iter()
            .filter_map(|p| p.last())
            .map(String::as_str)
            .filter(|n| *n != "*")
            .collect();
        let secret = |word: &[u8]| {
            let w = String::from_utf8_lossy(word);
            (self.preset && is_secret_key(&w))
                || names.iter().any(|n| n.eq_ignore_ascii_case(&w))
                || w.eq_ignore_ascii_case("bearer")
                || w.eq_ignore_ascii_case("dpop")
        };
        let word_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
        let mut out = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < raw.len() {
            if !word_byte(raw[i]) {
                out.push(raw[i]);
                i += 1;
                continue;
            }
            let start = i;
            while i < raw.len() && word_byte(raw[i]) {
                i += 1;
            }
            out.extend_from_slice(&raw[start..i]);
            if !secret(&raw[start..i]) {
                continue;
            }
            // What separates the key from its value: a closing quote, spaces, `:` or `=` (a
            // bearer's token follows a space alone).
            let bearer = raw[start..i].eq_ignore_ascii_case(b"bearer");
            let mut j = i;
            while j < raw.len() && matches!(raw[j], b'"' | b'\'') {
                j += 1;
            }
            while j < raw.len() && raw[j] == b' ' {
                j += 1;
            }
            let sep = j < raw.len() && matches!(raw[j], b':' | b'=');
            if sep {
                j += 1;
                while j < raw.len() && raw[j] == b' ' {
                    j += 1;
                }
            } else if !bearer || j == i {
                continue;
            }
            let quote = raw.get(j).copied().filter(|q| matches!(q, b'"' | b'\''));
            let mut value_start = j + usize::from(quote.is_some());
            let value_end = |from: usize| {
                let mut k = from;
                while k < raw.len() {
                    let b = raw[k];
                    let ends = match quote {
                        Some(q) => b == q && raw[k - 1] != b'\\',
                        None => {
                            b.is_ascii_whitespace() || matches!(b, b',' | b';' | b'&' | b'}' | b']')
                        }
                    };
                    if ends {
                        break;
                    }
                    k += 1;
                }
                k
            };
            let mut k = value_end(value_start);
            // `Authorization: Bearer TOKEN`: the scheme stays, the credentials go.
            let scheme = &raw[value_start..k];
            if quote.is_none()
                && raw.get(k) == Some(&b' ')
                && [&b"bearer"[..], b"basic", b"token", b"digest", b"dpop"]
                    .iter()
                    .any(|s| scheme.eq_ignore_ascii_case(s))
            {
                out.extend_from_slice(&raw[i..k + 1]);
                i = k + 1;
                value_start = i;
                k = value_end(value_start);
            }
            if k == value_start {
                continue;
            }
            out.extend_from_slice(&raw[i..value_start]);
            out.extend_from_slice(REDACTED.as_bytes());
            i = k;
        }
        out
    }
}

/// A cheap pass over the bytes before any parse: no secret key can be there without one of
/// these (in any letter case).
fn may_hold_a_secret_key(raw: &[u8]) -> bool {
    const HINTS: [&[u8]; 8] = [
        b"token",
        b"secret",
        b"passw",
        b"apikey",
        b"api_key",
        b"authorization",
        b"cookie",
        b"key",
    ];
    let lower: Vec<u8> = raw.iter().map(u8::to_ascii_lowercase).collect();
    HINTS
        .iter()
        .any(|h| memchr::memmem::find(&lower, h).is_some())
        || memchr::memmem::find(&lower, b"credentials").is_some()
        || memchr::memmem::find(&lower, b"bearer").is_some()
}

fn redact_keys(v: &mut Value) -> bool {
    let mut changed = false;
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                if is_secret_key(k) && !matches!(child, Value::Null) {
                    *child = Value::String(REDACTED.into());
                    changed = true;
                } else {
                    changed |= redact_keys(child);
                }
            }
        }
        Value::Array(a) => {
            for child in a.iter_mut() {
                changed |= redact_keys(child);
            }
        }
        _ => {}
    }
    changed
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

/// `text` with each of `secrets` replaced (a command's secrets in its server's stderr).
pub fn scrub_text(text: &str, secrets: &[String]) -> String {
    let mut t = text.to_string();
    for s in secrets {
        if t.contains(s.as_str()) {
            t = t.replace(s.as_str(), REDACTED);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_is_not_json_keeps_its_text_and_loses_its_secrets() {
        let r = Redactor::new(&[], &["params.arguments.passcode".into()]).with_preset();
        let t = |s: &str| String::from_utf8(r.text(s.as_bytes())).unwrap();
        assert_eq!(
            t("Starting server v1.2 on port 8080 (api_key=sk-123abc, user=bob)"),
            format!("Starting server v1.2 on port 8080 (api_key={REDACTED}, user=bob)")
        );
        assert_eq!(
            t(r#"config: {"token": "ghp_xyz", "name": "demo"} loaded"#),
            format!(r#"config: {{"token": "{REDACTED}", "name": "demo"}} loaded"#)
        );
        assert_eq!(
            t("Authorization: Bearer abc.def.ghi and passcode: 4242"),
            format!("Authorization: Bearer {REDACTED} and passcode: {REDACTED}")
        );
        // RFC 9449: a DPoP-bound token and its proof.
        assert_eq!(
            t("Authorization: DPoP eyJ.tok.en DPoP: eyJ.pro.of"),
            format!("Authorization: DPoP {REDACTED} DPoP: {REDACTED}")
        );
        assert_eq!(t("nothing secret here"), "nothing secret here");
        assert_eq!(t("a token without a value"), "a token without a value");
    }

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
    fn the_preset_finds_secret_keys_at_any_depth_and_spares_the_rest() {
        let r = Redactor::new(&[], &[]).with_preset();
        let out = r
            .message(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"f","arguments":{"apiKey":"sk-test-123","nested":[{"Authorization":"Bearer xyz"}],"client_secret":"cs","maxTokens":5},"_meta":{"progressToken":"p1"}}}"#)
            .unwrap();
        let s = String::from_utf8(out).unwrap();
        for gone in ["sk-test-123", "Bearer xyz", "\"cs\""] {
            assert!(!s.contains(gone), "{gone} in {s}");
        }
        for kept in [
            "\"maxTokens\":5",
            "\"progressToken\":\"p1\"",
            "\"name\":\"f\"",
        ] {
            assert!(s.contains(kept), "{kept} missing in {s}");
        }
        assert!(r
            .message(br#"{"jsonrpc":"2.0","id":1,"result":{"ok":true}}"#)
            .is_none());
        assert!(r.is_secret_header("X-Api-Key"));
        assert!(!Redactor::new(&[], &[]).is_secret_header("X-Api-Key"));
        for k in [
            "GITHUB_TOKEN",
            "password",
            "Set-Cookie",
            "privateKey",
            "x-api-key",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        for k in ["progressToken", "tokens", "keyboard", "name", "monkey"] {
            assert!(!is_secret_key(k), "{k}");
        }
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
        // Every name always redacted is, whatever its case in a map.
        for name in ALWAYS {
            let mut h = HeaderMap::new();
            h.insert(
                http::HeaderName::from_bytes(name.to_uppercase().as_bytes()).unwrap(),
                "s3cret".parse().unwrap(),
            );
            assert_eq!(
                Redactor::default().headers(&h).get(name).as_deref(),
                Some(REDACTED)
            );
        }
        assert!(
            !text.contains("s3cret") && !text.contains("k3y") && text.contains("text/event-stream")
        );
    }
}
