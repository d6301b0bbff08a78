//! JSON-RPC 2.0 envelopes: parsing a body (single message or batch) into envelopes without
//! building a tree of `params`/`result`, validating them, and keeping ids exactly as written.
//!
//! Ids keep their JSON type and their digits: `1`, `"1"`, `1.0` and `12345678901234567890` are
//! four different ids. Numbers are kept as their literal text, strings as their decoded value.

use bytes::Bytes;
use serde::de::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use std::fmt;

/// A JSON-RPC id, exactly as written on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    /// A number, kept as its literal text (`1`, `1.0`, `12345678901234567890`).
    Num(Box<str>),
    /// A string, kept as its decoded value.
    Str(Box<str>),
    /// `null`.
    Null,
}

impl Id {
    /// The id that matches this one when the JSON type is ignored (`1` ↔ `"1"`), if any.
    pub fn type_twin(&self) -> Option<Id> {
        match self {
            Id::Num(n) => Some(Id::Str(n.clone())),
            Id::Str(s) if is_number_literal(s) => Some(Id::Num(s.clone())),
            _ => None,
        }
    }

    /// A numeric id with a fraction or exponent, or beyond ±(2^53−1).
    pub fn is_unsafe_number(&self) -> bool {
        let Id::Num(n) = self else { return false };
        let digits = n.strip_prefix('-').unwrap_or(n);
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return true; // fraction or exponent
        }
        // 2^53 - 1 = 9007199254740991 (16 digits)
        digits.len() > 16 || (digits.len() == 16 && digits > "9007199254740991")
    }

    /// The id as a JSON value (numbers keep their literal text where serde_json can).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Id::Num(n) => serde_json::from_str(n).unwrap_or(serde_json::Value::Null),
            Id::Str(s) => serde_json::Value::String(s.to_string()),
            Id::Null => serde_json::Value::Null,
        }
    }

    /// The id as JSON text, exactly as it would be written back.
    pub fn to_json_text(&self) -> String {
        match self {
            Id::Num(n) => n.to_string(),
            Id::Str(s) => serde_json::Value::String(s.to_string()).to_string(),
            Id::Null => "null".to_string(),
        }
    }

    fn from_raw(raw: &RawValue) -> Result<Id, &'static str> {
        let text = raw.get();
        match text.as_bytes().first() {
            Some(b'"') => raw_str(raw)
                .map(|s| Id::Str(s.into()))
                .ok_or("id is not a valid string"),
            Some(b'-' | b'0'..=b'9') => Ok(Id::Num(text.into())),
            Some(b'n') => Ok(Id::Null),
            _ => Err("id must be a string, a number or null"),
        }
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Num(n) => f.write_str(n),
            Id::Str(s) => write!(f, "{:?}", s),
            Id::Null => f.write_str("null"),
        }
    }
}

impl serde::Serialize for Id {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Id::Num(n) => match serde_json::from_str::<&RawValue>(n) {
                Ok(raw) => raw.serialize(s),
                Err(_) => s.serialize_str(n),
            },
            Id::Str(v) => s.serialize_str(v),
            Id::Null => s.serialize_unit(),
        }
    }
}

fn is_number_literal(s: &str) -> bool {
    !s.is_empty()
        && serde_json::from_str::<&RawValue>(s)
            .is_ok_and(|_| matches!(s.as_bytes()[0], b'-' | b'0'..=b'9'))
}

/// What one JSON-RPC message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A call: has `method` and `id`.
    Request,
    /// Has `method`, no `id`.
    Notification,
    /// A reply with `result`.
    Result,
    /// A reply with `error`.
    Error,
    /// Not a valid request or response.
    Invalid,
}

impl Kind {
    pub fn is_response(self) -> bool {
        matches!(self, Kind::Result | Kind::Error)
    }
}

/// One parsed JSON-RPC message. `raw` is the message's exact bytes (a slice of the body).
#[derive(Clone, Debug)]
pub struct Envelope {
    pub kind: Kind,
    pub id: Option<Id>,
    pub method: Option<std::sync::Arc<str>>,
    /// For `tools/call`, `prompts/get`, `resources/read`…: the tool, prompt or resource name.
    pub target: Option<std::sync::Arc<str>>,
    pub error_code: Option<i64>,
    pub error_message: Option<Box<str>>,
    /// `result.isError` of an MCP `tools/call` result.
    pub tool_error: bool,
    /// Why the envelope is invalid (for `Kind::Invalid`).
    pub problem: Option<String>,
    pub raw: Bytes,
}

/// A whole body: one message, a batch, or something that is not JSON-RPC at all.
#[derive(Debug)]
pub enum Body {
    Single(Envelope),
    Batch(Vec<Envelope>),
    /// Not valid JSON (or not UTF-8); the string says why.
    ParseError(String),
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

#[derive(serde::Deserialize)]
struct RawEnvelope<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct RawError<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    code: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    message: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct NamedParams<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    name: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    uri: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct ToolResult {
    #[serde(rename = "isError", default)]
    is_error: Option<serde_json::Value>,
}

fn first_byte(raw: &RawValue) -> u8 {
    raw.get().as_bytes().first().copied().unwrap_or(b' ')
}

/// A JSON string's value; borrowed when it has no escapes (the common case).
fn raw_str(raw: &RawValue) -> Option<std::borrow::Cow<'_, str>> {
    let t = raw.get();
    if first_byte(raw) != b'"' {
        return None;
    }
    if !t.contains('\\') && t.len() >= 2 {
        return Some(std::borrow::Cow::Borrowed(&t[1..t.len() - 1]));
    }
    serde_json::from_str::<String>(t)
        .ok()
        .map(std::borrow::Cow::Owned)
}

fn trim_end(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .rposition(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    &b[..n]
}

fn skip_ws(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .unwrap_or(b.len());
    &b[n..]
}

/// Parses a whole body (one JSON value) into envelopes.
pub fn parse_body(body: &Bytes) -> Body {
    let trimmed = skip_ws(body);
    match trimmed.first() {
        Some(b'[') => match serde_json::from_slice::<Vec<&RawValue>>(body) {
            Ok(members) => Body::Batch(
                members
                    .into_iter()
                    .map(|m| envelope_from_raw(body, m))
                    .collect(),
            ),
            Err(e) => Body::ParseError(e.to_string()),
        },
        // One pass: the envelope is read straight from the body.
        Some(b'{') => match serde_json::from_slice::<RawEnvelope>(body) {
            Ok(p) => Body::Single(validate(slice_of(body, trim_end(trimmed)), Ok(p))),
            Err(e) if e.classify() == serde_json::error::Category::Data => Body::Single(validate(
                slice_of(body, trim_end(trimmed)),
                Err(e.to_string()),
            )),
            Err(e) => Body::ParseError(describe_parse_error(body, e)),
        },
        _ => match serde_json::from_slice::<&RawValue>(body) {
            Ok(raw) => Body::Single(envelope_from_raw(body, raw)),
            Err(e) => Body::ParseError(describe_parse_error(body, e)),
        },
    }
}

fn describe_parse_error(body: &[u8], e: serde_json::Error) -> String {
    if body.is_empty() || skip_ws(body).is_empty() {
        "empty body".to_string()
    } else if std::str::from_utf8(body).is_err() {
        format!("not UTF-8 JSON: {e}")
    } else {
        e.to_string()
    }
}

/// Parses one message (an element of a batch, or a whole body).
pub fn envelope_from_raw(body: &Bytes, raw: &RawValue) -> Envelope {
    let text = raw.get();
    if first_byte(raw) != b'{' {
        let mut env = Envelope::invalid(slice_of(body, text.as_bytes()));
        env.problem = Some("a JSON-RPC message must be an object".into());
        return env;
    }
    let parsed = serde_json::from_str::<RawEnvelope>(text).map_err(|e| e.to_string());
    validate(slice_of(body, text.as_bytes()), parsed)
}

impl Envelope {
    fn invalid(raw: Bytes) -> Self {
        Envelope {
            kind: Kind::Invalid,
            id: None,
            method: None,
            target: None,
            error_code: None,
            error_message: None,
            tool_error: false,
            problem: None,
            raw,
        }
    }
}

/// Checks a parsed envelope against JSON-RPC 2.0 and reads what the inspector needs.
fn validate(raw: Bytes, parsed: Result<RawEnvelope<'_>, String>) -> Envelope {
    let mut env = Envelope::invalid(raw);
    let parsed = match parsed {
        Ok(p) => p,
        Err(e) => {
            env.problem = Some(format!("malformed envelope: {e}"));
            return env;
        }
    };
    // The id is read first so that even an invalid envelope reports it.
    if let Some(id) = parsed.id {
        match Id::from_raw(id) {
            Ok(id) => env.id = Some(id),
            Err(why) => {
                env.problem = Some(why.into());
                return env;
            }
        }
    }
    match parsed.jsonrpc.map(raw_str) {
        Some(Some(v)) if v == "2.0" => {}
        Some(_) => {
            env.problem = Some("`jsonrpc` must be exactly \"2.0\"".into());
        }
        None => env.problem = Some("`jsonrpc` member is missing".into()),
    }
    if let Some(method) = parsed.method {
        let Some(name) = raw_str(method) else {
            env.problem = Some("`method` must be a string".into());
            return env;
        };
        if parsed.result.is_some() || parsed.error.is_some() {
            env.problem
                .get_or_insert_with(|| "a request must not carry `result` or `error`".into());
        }
        if let Some(params) = parsed.params {
            if !matches!(first_byte(params), b'[' | b'{') {
                env.problem
                    .get_or_insert_with(|| "`params` must be an array or an object".into());
            } else if first_byte(params) == b'{' && wants_target(&name) {
                if let Ok(np) = serde_json::from_str::<NamedParams>(params.get()) {
                    env.target = np
                        .name
                        .or(np.uri)
                        .and_then(raw_str)
                        .map(|c| std::sync::Arc::from(&*c));
                }
            }
        }
        env.method = Some(std::sync::Arc::from(&*name));
        if env.problem.is_none() {
            env.kind = if env.id.is_some() {
                Kind::Request
            } else {
                Kind::Notification
            };
        }
        return env;
    }
    match (parsed.result, parsed.error) {
        (Some(_), Some(_)) => {
            env.problem = Some("a response must not carry both `result` and `error`".into())
        }
        (None, None) => {
            env.problem =
                Some("neither a request (`method`) nor a response (`result`/`error`)".into())
        }
        (Some(result), None) => {
            if env.id.is_none() {
                env.problem
                    .get_or_insert_with(|| "a response must carry an `id`".into());
            }
            if first_byte(result) == b'{' {
                if let Ok(tr) = serde_json::from_str::<ToolResult>(result.get()) {
                    env.tool_error = tr.is_error == Some(serde_json::Value::Bool(true));
                }
            }
            if env.problem.is_none() {
                env.kind = Kind::Result;
            }
        }
        (None, Some(error)) => {
            if env.id.is_none() {
                env.problem
                    .get_or_insert_with(|| "a response must carry an `id`".into());
            }
            match serde_json::from_str::<RawError>(error.get()) {
                Ok(e) => {
                    match e.code.map(|c| c.get()) {
                        Some(c) if is_integer_literal(c) => {
                            env.error_code = c.parse::<i64>().ok();
                            if env.error_code.is_none() {
                                env.problem.get_or_insert_with(|| {
                                    "`error.code` is beyond a 64-bit integer".into()
                                });
                            }
                        }
                        Some(_) => {
                            env.problem
                                .get_or_insert_with(|| "`error.code` must be an integer".into());
                        }
                        None => {
                            env.problem
                                .get_or_insert_with(|| "`error.code` is missing".into());
                        }
                    }
                    match e.message.map(raw_str) {
                        Some(Some(m)) => env.error_message = Some(m.into()),
                        _ => {
                            env.problem
                                .get_or_insert_with(|| "`error.message` must be a string".into());
                        }
                    }
                }
                Err(_) => {
                    env.problem = Some("`error` must be an object".into());
                }
            }
            if env.problem.is_none() {
                env.kind = Kind::Error;
            }
        }
    }
    env
}

fn wants_target(method: &str) -> bool {
    matches!(
        method,
        "tools/call"
            | "prompts/get"
            | "resources/read"
            | "resources/subscribe"
            | "resources/unsubscribe"
    )
}

fn is_integer_literal(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// The sub-slice `part` of `whole` as a zero-copy `Bytes`, or a copy when it is not a sub-slice.
fn slice_of(whole: &Bytes, part: &[u8]) -> Bytes {
    let start = whole.as_ptr() as usize;
    let p = part.as_ptr() as usize;
    if p >= start && p + part.len() <= start + whole.len() {
        whole.slice_ref(part)
    } else {
        Bytes::copy_from_slice(part)
    }
}

/// A JSON-RPC error reply, as bytes.
pub fn error_reply(id: &Id, code: i64, message: &str, data: Option<serde_json::Value>) -> String {
    let mut error = serde_json::json!({ "code": code, "message": message });
    if let Some(d) = data {
        error["data"] = d;
    }
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{}}}",
        id.to_json_text(),
        error
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> Envelope {
        match parse_body(&Bytes::from(s.to_string())) {
            Body::Single(e) => e,
            other => panic!("not single: {other:?}"),
        }
    }

    #[test]
    fn ids_keep_type_and_digits() {
        assert_eq!(
            one(r#"{"jsonrpc":"2.0","id":1,"method":"a"}"#).id,
            Some(Id::Num("1".into()))
        );
        assert_eq!(
            one(r#"{"jsonrpc":"2.0","id":"1","method":"a"}"#).id,
            Some(Id::Str("1".into()))
        );
        assert_eq!(
            one(r#"{"jsonrpc":"2.0","id":1.0,"method":"a"}"#).id,
            Some(Id::Num("1.0".into()))
        );
        let big = one(r#"{"jsonrpc":"2.0","id":12345678901234567890,"method":"a"}"#);
        assert_eq!(big.id, Some(Id::Num("12345678901234567890".into())));
        assert!(big.id.as_ref().is_some_and(Id::is_unsafe_number));
        assert!(!Id::Num("9007199254740991".into()).is_unsafe_number());
        assert!(Id::Num("9007199254740992".into()).is_unsafe_number());
        assert!(Id::Num("1.5".into()).is_unsafe_number());
        assert_eq!(
            one(r#"{"jsonrpc":"2.0","id":null,"result":1}"#).id,
            Some(Id::Null)
        );
    }

    #[test]
    fn kinds() {
        assert_eq!(
            one(r#"{"jsonrpc":"2.0","method":"a"}"#).kind,
            Kind::Notification
        );
        assert_eq!(
            one(r#"{"jsonrpc":"2.0","id":1,"result":null}"#).kind,
            Kind::Result
        );
        let e = one(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}"#);
        assert_eq!((e.kind, e.error_code), (Kind::Error, Some(-32601)));
        for bad in [
            r#"{"jsonrpc":"1.0","id":1,"method":"a"}"#,
            r#"{"id":1,"method":"a"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":2}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","params":3}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"a"}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}"#,
            r#"5"#,
        ] {
            let e = one(bad);
            assert_eq!(e.kind, Kind::Invalid, "{bad}");
            assert!(e.problem.is_some(), "{bad}");
        }
    }

    #[test]
    fn tool_call_target_and_tool_error() {
        let e = one(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
        );
        assert_eq!(e.target.as_deref(), Some("echo"));
        let r = one(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#);
        assert!(r.tool_error);
    }

    #[test]
    fn batches_and_raw_slices() {
        let body = Bytes::from_static(b" [ {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"} , 3 ]");
        let Body::Batch(m) = parse_body(&body) else {
            panic!()
        };
        assert_eq!(m.len(), 2);
        assert_eq!(
            &m[0].raw[..],
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"
        );
        assert_eq!(m[1].kind, Kind::Invalid);
        assert!(matches!(
            parse_body(&Bytes::from_static(b"{\"a\":")),
            Body::ParseError(_)
        ));
        assert!(matches!(
            parse_body(&Bytes::from_static(b"\xff\xfe")),
            Body::ParseError(_)
        ));
        assert!(matches!(parse_body(&Bytes::from_static(b"[]")), Body::Batch(v) if v.is_empty()));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let mut s = String::from(r#"{"jsonrpc":"2.0","id":1,"method":"a","params":"#);
        s.push_str(&"[".repeat(10_000));
        s.push_str(&"]".repeat(10_000));
        s.push('}');
        let b = Bytes::from(s);
        // `params` is skipped, not built: deep nesting costs no stack and stays a request.
        match parse_body(&b) {
            Body::Single(e) => assert_eq!(e.kind, Kind::Request),
            other => panic!("{other:?}"),
        }
        // a deep structure where a message should be is an invalid envelope, not a crash
        let deep = Bytes::from(format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)));
        let _ = parse_body(&deep);
    }
}
