//! The envelope members of a frame too large to inspect, read as its bytes pass: its `id`, its
//! `method`, and whether it carries a `result` or an `error` (with the error's `code` and
//! `message`) — what counts its call or ends it. One forward pass over the pieces as they are
//! forwarded, holding a few hundred bytes, never the frame; members may come in any order.
//!
//! Why hand-written: the JSON parsers at hand read a whole text (or build what they read), and
//! the point here is to read a 40 MiB line without holding it. Nothing is validated: a frame
//! that is not JSON gives what it gives, and the inspector only uses an id it can read.

/// Longest member value kept (an id, a method, an error's code or message); longer is dropped.
const VALUE_MAX: usize = 1024;
/// Longest member name compared (`message` is the longest read).
const NAME_MAX: usize = 16;

/// What a frame's head said.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FrameHead {
    /// The raw JSON texts of `id` and `method` (quotes and escapes as written).
    pub id: Option<String>,
    pub method: Option<String>,
    /// A `result` member was there.
    pub result: bool,
    /// An `error` member was there, with the raw texts of its `code` and `message`.
    pub error: bool,
    pub code: Option<String>,
    pub message: Option<String>,
}

impl FrameHead {
    /// Its id, read as an id.
    pub fn id(&self) -> Option<super::Id> {
        super::Id::from_json_text(self.id.as_deref()?)
    }
    /// Its method's name (a string, decoded).
    pub fn method(&self) -> Option<String> {
        serde_json::from_str(self.method.as_deref()?).ok()
    }
    /// Its error's code and message (the message decoded; empty when unread).
    pub fn error(&self) -> Option<(i64, String)> {
        if !self.error {
            return None;
        }
        let code = self.code.as_deref()?.parse().ok()?;
        let message = self
            .message
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default();
        Some((code, message))
    }
}

/// The member a name picks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Key {
    #[default]
    Other,
    Id,
    Method,
    Result,
    Error,
    Code,
    Message,
}

/// The scanner: fed every byte of the frame in order ([`HeadScan::feed`]).
#[derive(Debug, Default)]
pub struct HeadScan {
    depth: u32,
    /// The container opened at depths 1 and 2: `{` or `[`.
    kinds: [u8; 3],
    in_str: bool,
    esc: bool,
    /// The next string at this depth names a member.
    want_key: bool,
    /// A member's value comes next.
    value_next: bool,
    /// The current member at depth 1, and at depth 2 inside `error`.
    k1: Key,
    k2: Key,
    /// A member name being read.
    name: Option<Vec<u8>>,
    /// A value being kept: the member it is, its text so far, whether it is a string.
    value: Option<(Key, Vec<u8>, bool)>,
    out: FrameHead,
}

impl HeadScan {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the next bytes of the frame.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    /// What the frame said.
    pub fn finish(mut self) -> FrameHead {
        self.end_scalar();
        self.out
    }

    fn byte(&mut self, b: u8) {
        if self.in_str {
            self.keep(b);
            if self.esc {
                self.esc = false;
            } else if b == b'\\' {
                self.esc = true;
            } else if b == b'"' {
                self.in_str = false;
                self.end_string();
            }
            return;
        }
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => self.end_scalar(),
            b'"' => {
                self.in_str = true;
                if self.want_key && (1..=2).contains(&self.depth) {
                    self.name = Some(Vec::new());
                } else {
                    self.value_starts(b);
                }
            }
            b':' => {
                self.want_key = false;
                self.value_next = true;
            }
            b',' => {
                self.end_scalar();
                self.want_key = self.in_object();
            }
            b'{' | b'[' => {
                self.value_starts(b);
                self.depth = self.depth.saturating_add(1);
                if let Some(k) = self.kinds.get_mut(self.depth as usize) {
                    *k = b;
                }
                match self.depth {
                    1 => self.k1 = Key::Other,
                    2 => self.k2 = Key::Other,
                    _ => {}
                }
                self.want_key = b == b'{';
            }
            b'}' | b']' => {
                self.end_scalar();
                self.depth = self.depth.saturating_sub(1);
                self.want_key = false;
            }
            _ => {
                if self.value_next {
                    self.value_starts(b);
                } else {
                    self.keep(b);
                }
            }
        }
    }

    fn in_object(&self) -> bool {
        (1..=2).contains(&self.depth) && self.kinds[self.depth as usize] == b'{'
    }

    /// The member whose value is at the current depth, when it is one this reads.
    fn member(&self) -> Key {
        match self.depth {
            1 if self.kinds[1] == b'{' => self.k1,
            2 if self.kinds[1] == b'{' && self.k1 == Key::Error && self.kinds[2] == b'{' => self.k2,
            _ => Key::Other,
        }
    }

    /// A value's first byte (`first`: a quote, a bracket, or a scalar's first character).
    fn value_starts(&mut self, first: u8) {
        if !std::mem::take(&mut self.value_next) {
            return;
        }
        let m = self.member();
        match m {
            Key::Result if self.depth == 1 => self.out.result = true,
            Key::Error if self.depth == 1 => self.out.error = true,
            Key::Id | Key::Method | Key::Code | Key::Message if first != b'{' && first != b'[' => {
                self.value = Some((m, vec![first], first == b'"'));
            }
            _ => {}
        }
    }

    /// A byte of a kept name or value.
    fn keep(&mut self, b: u8) {
        if let Some(n) = &mut self.name {
            if n.len() <= NAME_MAX {
                n.push(b);
            }
        } else if let Some((_, v, _)) = &mut self.value {
            if v.len() <= VALUE_MAX {
                v.push(b);
            }
        }
    }

    fn end_string(&mut self) {
        if let Some(mut n) = self.name.take() {
            n.pop(); // its closing quote
            let key = match (self.depth, &n[..]) {
                (1, b"id") => Key::Id,
                (1, b"method") => Key::Method,
                (1, b"result") => Key::Result,
                (1, b"error") => Key::Error,
                (2, b"code") => Key::Code,
                (2, b"message") => Key::Message,
                _ => Key::Other,
            };
            match self.depth {
                1 => self.k1 = key,
                _ => self.k2 = key,
            }
        } else if self.value.as_ref().is_some_and(|v| v.2) {
            self.store();
        }
    }

    /// A number or literal ends at a blank, a comma or a bracket.
    fn end_scalar(&mut self) {
        if self.value.as_ref().is_some_and(|v| !v.2) {
            self.store();
        }
    }

    fn store(&mut self) {
        let Some((key, text, _)) = self.value.take() else {
            return;
        };
        if text.len() > VALUE_MAX {
            return;
        }
        let text = String::from_utf8_lossy(&text).into_owned();
        let slot = match key {
            Key::Id => &mut self.out.id,
            Key::Method => &mut self.out.method,
            Key::Code => &mut self.out.code,
            Key::Message => &mut self.out.message,
            _ => return,
        };
        slot.get_or_insert(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> FrameHead {
        // Any cut of the text gives the same.
        let whole = {
            let mut s = HeadScan::new();
            s.feed(text.as_bytes());
            s.finish()
        };
        for cut in 0..text.len() {
            let mut s = HeadScan::new();
            s.feed(&text.as_bytes()[..cut]);
            s.feed(&text.as_bytes()[cut..]);
            assert_eq!(s.finish(), whole, "cut at {cut}: {text}");
        }
        whole
    }

    #[test]
    fn members_are_read_in_any_order_and_nested_ones_are_not_taken_for_them() {
        let h = head(r#"{"jsonrpc":"2.0","id":3,"result":{"id":9,"method":"x","blob":"a\"b"}}"#);
        assert_eq!(h.id().unwrap().to_json_text(), "3");
        assert!(h.result && !h.error && h.method.is_none());
        let h = head(r#" { "result" : [1,{"id":2}] , "id" : "a\"b" , "jsonrpc":"2.0" } "#);
        assert_eq!(h.id().unwrap().to_json_text(), r#""a\"b""#);
        assert!(h.result);
        let h = head(
            r#"{"params":{"arguments":{"y":"yyyy"},"id":7},"method":"tools/call","jsonrpc":"2.0","id":12}"#,
        );
        assert_eq!(h.method().as_deref(), Some("tools/call"));
        assert_eq!(h.id().unwrap().to_json_text(), "12");
        assert!(!h.result && !h.error);
        let h = head(
            r#"{"jsonrpc":"2.0","error":{"data":{"code":1},"code":-32000,"message":"too \"big\""},"id":null}"#,
        );
        assert_eq!(h.error(), Some((-32000, "too \"big\"".to_string())));
        assert_eq!(h.id(), Some(crate::rpc::Id::Null));
        // A batch names no id of its own; nor does a text that is not JSON.
        assert_eq!(head(r#"[{"id":1,"result":2}]"#).id, None);
        assert_eq!(head("id: 1, result: 2").id, None);
    }
}
