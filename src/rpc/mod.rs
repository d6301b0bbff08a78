//! JSON-RPC 2.0 envelopes: parsing a body (single message or batch) into envelopes without
//! building a tree of `params`/`result`, validating them, and keeping ids exactly as written.
//! An envelope's members are read by `scan`, a one-pass scanner, when it can; serde_json reads
//! everything the scanner leaves and is the reference for verdicts and error messages.
//!
//! Ids keep their JSON type and their digits: `1`, `"1"`, `1.0` and `12345678901234567890` are
//! four different ids. Numbers are kept as their literal text, strings as their decoded value.

use bytes::Bytes;
use serde::de::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use std::fmt;

pub mod a2a;
mod gather;
pub mod head;
pub mod own;
mod scan;
pub use gather::Gathered;
pub(crate) use scan::plain_text;

/// A JSON-RPC id, exactly as written on the wire. Its text is kept inline up to 24 bytes
/// (`CompactString`; longer ones on the heap): an id is copied into the pending call's key, the
/// exchange's call list and the events, several times a call, and nearly every id is short —
/// inline, reading one and copying it allocate nothing and touch no shared count.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    /// A number, kept as its literal text (`1`, `1.0`, `12345678901234567890`).
    Num(compact_str::CompactString),
    /// A string, kept as its decoded value.
    Str(compact_str::CompactString),
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

    /// The id as JSON text, exactly as it would be written back.
    pub fn to_json_text(&self) -> String {
        match self {
            Id::Num(n) => n.to_string(),
            Id::Str(s) => serde_json::Value::String(s.to_string()).to_string(),
            Id::Null => "null".to_string(),
        }
    }

    /// The id written as `text` (a JSON value's raw text, e.g. a recording's `id`).
    pub fn from_json_text(text: &str) -> Option<Id> {
        Id::from_raw(text.trim()).ok()
    }

    /// The id written as `text` (a JSON value's raw text).
    fn from_raw(text: &str) -> Result<Id, &'static str> {
        match text.as_bytes().first() {
            Some(b'"') => raw_str(text)
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

/// An id read back from its JSON (a recording's, a feed's): kept exactly as the wire had it.
impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Id::from_raw(raw.get().trim()).map_err(serde::de::Error::custom)
    }
}

fn is_number_literal(s: &str) -> bool {
    !s.is_empty()
        && serde_json::from_str::<&RawValue>(s)
            .is_ok_and(|_| matches!(s.as_bytes()[0], b'-' | b'0'..=b'9'))
}

/// What one JSON-RPC message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// Inline when short (most are: "Method not found"), and moved into the call's outcome
    /// as it is: no allocation for either.
    pub error_message: Option<compact_str::CompactString>,
    /// `result.isError` of an MCP `tools/call` result.
    pub tool_error: bool,
    /// MCP tasks, read in the same pass: a request's `params.task` is an object (2025-11-25
    /// asks for a task), a result's `resultType` is `"task"` or its `task` is an object (a task
    /// handle). Only where this is set does the inspector look closer.
    pub task_hint: bool,
    /// Why the envelope is invalid (for `Kind::Invalid`).
    pub problem: Option<String>,
    /// A member given more than once (read as the last one: see `RawEnvelope`).
    pub duplicate: Option<&'static str>,
    pub raw: Bytes,
    /// `result` as a value, parsed the first time a rule asks ([`Envelope::result`]): the rules
    /// that read a reply's result closely (tasks, A2A) share one parse.
    /// (Boxed: a pointer while unread, which is nearly always; every envelope is moved.)
    result: std::sync::OnceLock<Box<Option<serde_json::Value>>>,
}

/// A whole body: one message, a batch, or something that is not JSON-RPC at all.
#[derive(Debug)]
pub enum Body {
    Single(Envelope),
    Batch(Vec<Envelope>),
    /// Not valid JSON (or not UTF-8); the string says why.
    ParseError(String),
}

/// The members of one envelope the inspector reads, as raw JSON texts borrowed from the body
/// (read by [`scan`] when it can, by serde_json otherwise — see [`read_envelope`]).
///
/// A member given twice is read as the parsers JSON-RPC servers run on read it — Python's,
/// JavaScript's and Go's keep the **last** — and noted in `duplicate`: what rpctap inspects,
/// limits and records is what the server will execute (a `"method":"ping"` followed by
/// `"method":"tools/call"` is a `tools/call`), and the message is flagged `DUPLICATE_MEMBER`.
#[derive(Default)]
struct RawEnvelope<'a> {
    jsonrpc: Option<&'a str>,
    id: Option<&'a str>,
    method: Option<&'a str>,
    params: Option<Member<'a>>,
    result: Option<Member<'a>>,
    error: Option<Member<'a>>,
    /// The first member given more than once (in the envelope or, for `name`/`uri`, in
    /// `params`).
    duplicate: Option<&'static str>,
}

impl<'de> Deserialize<'de> for RawEnvelope<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawEnvelope<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC message object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RawEnvelope<'de>, A::Error> {
                let mut e = RawEnvelope::default();
                fn last<T>(
                    slot: &mut Option<T>,
                    v: T,
                    name: &'static str,
                    dup: &mut Option<&'static str>,
                ) {
                    if slot.replace(v).is_some() {
                        dup.get_or_insert(name);
                    }
                }
                while let Some(key) = map.next_key::<EnvKey>()? {
                    let dup = &mut e.duplicate;
                    match key {
                        EnvKey::Jsonrpc => {
                            last(&mut e.jsonrpc, raw_text(&mut map)?, "jsonrpc", dup)
                        }
                        EnvKey::Id => last(&mut e.id, raw_text(&mut map)?, "id", dup),
                        EnvKey::Method => last(&mut e.method, raw_text(&mut map)?, "method", dup),
                        EnvKey::Params => last(&mut e.params, map.next_value()?, "params", dup),
                        EnvKey::Result => last(&mut e.result, map.next_value()?, "result", dup),
                        EnvKey::Error => last(&mut e.error, map.next_value()?, "error", dup),
                        EnvKey::Other => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                if e.duplicate.is_none() {
                    e.duplicate = e.params.as_ref().and_then(|p| p.duplicate);
                }
                Ok(e)
            }
        }
        d.deserialize_map(V)
    }
}

/// A member that is present, kept as its raw JSON text.
fn raw_text<'de, A: serde::de::MapAccess<'de>>(map: &mut A) -> Result<&'de str, A::Error> {
    map.next_value::<&RawValue>().map(RawValue::get)
}

/// The envelope's member names rpctap reads.
enum EnvKey {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> Deserialize<'de> for EnvKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = EnvKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, v: &str) -> Result<EnvKey, E> {
                Ok(match v {
                    "jsonrpc" => EnvKey::Jsonrpc,
                    "id" => EnvKey::Id,
                    "method" => EnvKey::Method,
                    "params" => EnvKey::Params,
                    "result" => EnvKey::Result,
                    "error" => EnvKey::Error,
                    _ => EnvKey::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

/// What the inspector reads inside `params`, `result` or `error`, taken in the envelope's one
/// pass (the member is not parsed a second time): its JSON type, and the few fields it looks
/// at — `name`/`uri` (params of `tools/call`, `prompts/get`, `resources/*`), `isError` (a tool
/// result), `code`/`message` (an error). Everything else is skipped, never built, so a deep
/// member costs no stack (serde_json skips iteratively).
#[derive(Default)]
struct Member<'a> {
    shape: Shape,
    name: Option<&'a str>,
    uri: Option<&'a str>,
    /// `taskId` (params of the MCP tasks methods).
    task_id: Option<&'a str>,
    code: Option<&'a str>,
    message: Option<&'a str>,
    /// `isError` is `true`.
    is_error: bool,
    /// `task` is an object; `resultType` is `"task"`.
    task_object: bool,
    result_type_task: bool,
    /// `name` or `uri` given twice (the last is kept).
    duplicate: Option<&'static str>,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Object,
    Array,
    #[default]
    Other,
}

impl<'de> Deserialize<'de> for Member<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MemberVisitor)
    }
}

struct MemberVisitor;

impl<'de> serde::de::Visitor<'de> for MemberVisitor {
    type Value = Member<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Member<'de>, A::Error> {
        let mut m = Member {
            shape: Shape::Object,
            ..Member::default()
        };
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Name => {
                    if m.name
                        .replace(map.next_value::<&RawValue>()?.get())
                        .is_some()
                    {
                        m.duplicate.get_or_insert("params.name");
                    }
                }
                Key::Uri => {
                    if m.uri
                        .replace(map.next_value::<&RawValue>()?.get())
                        .is_some()
                    {
                        m.duplicate.get_or_insert("params.uri");
                    }
                }
                Key::TaskId => m.task_id = Some(map.next_value::<&RawValue>()?.get()),
                Key::Task => m.task_object = map.next_value::<&RawValue>()?.get().starts_with('{'),
                Key::ResultType => {
                    m.result_type_task = map.next_value::<&RawValue>()?.get() == "\"task\""
                }
                Key::Code => m.code = Some(map.next_value::<&RawValue>()?.get()),
                Key::Message => m.message = Some(map.next_value::<&RawValue>()?.get()),
                Key::IsError => m.is_error = map.next_value::<IsTrue>()?.0,
                Key::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(m)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Member<'de>, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Member {
            shape: Shape::Array,
            ..Member::default()
        })
    }

    fn visit_bool<E>(self, _: bool) -> Result<Member<'de>, E> {
        Ok(Member::default())
    }
    fn visit_i64<E>(self, _: i64) -> Result<Member<'de>, E> {
        Ok(Member::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<Member<'de>, E> {
        Ok(Member::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<Member<'de>, E> {
        Ok(Member::default())
    }
    fn visit_str<E>(self, _: &str) -> Result<Member<'de>, E> {
        Ok(Member::default())
    }
    fn visit_unit<E>(self) -> Result<Member<'de>, E> {
        Ok(Member::default())
    }
}

/// Whether a value is `true`; anything else is skipped (iteratively: a deep value costs no
/// stack and raises no recursion limit).
struct IsTrue(bool);

impl<'de> Deserialize<'de> for IsTrue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = IsTrue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<IsTrue, E> {
                Ok(IsTrue(v))
            }
            fn visit_i64<E>(self, _: i64) -> Result<IsTrue, E> {
                Ok(IsTrue(false))
            }
            fn visit_u64<E>(self, _: u64) -> Result<IsTrue, E> {
                Ok(IsTrue(false))
            }
            fn visit_f64<E>(self, _: f64) -> Result<IsTrue, E> {
                Ok(IsTrue(false))
            }
            fn visit_str<E>(self, _: &str) -> Result<IsTrue, E> {
                Ok(IsTrue(false))
            }
            fn visit_unit<E>(self) -> Result<IsTrue, E> {
                Ok(IsTrue(false))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<IsTrue, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(IsTrue(false))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<IsTrue, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(IsTrue(false))
            }
        }
        d.deserialize_any(V)
    }
}

/// The member names [`Member`] looks at; read without allocating.
enum Key {
    Name,
    Uri,
    TaskId,
    Task,
    ResultType,
    Code,
    Message,
    IsError,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "name" => Key::Name,
                    "uri" => Key::Uri,
                    "taskId" => Key::TaskId,
                    "task" => Key::Task,
                    "resultType" => Key::ResultType,
                    "code" => Key::Code,
                    "message" => Key::Message,
                    "isError" => Key::IsError,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

fn first_byte(text: &str) -> u8 {
    text.as_bytes().first().copied().unwrap_or(b' ')
}

/// A JSON string's value (from its raw text); borrowed when it has no escapes (the common case).
fn raw_str(t: &str) -> Option<std::borrow::Cow<'_, str>> {
    if first_byte(t) != b'"' {
        return None;
    }
    // A plain loop: these texts are a few bytes, shorter than a search's set-up.
    if t.len() >= 2 && !t.bytes().any(|b| b == b'\\') {
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
    // A UTF-8 byte order mark first: read past, as Python's `json.loads` of bytes and most
    // servers' body readers do (what the server will execute is what is inspected).
    if body.starts_with(b"\xEF\xBB\xBF") {
        return parse_body(&body.slice(3..));
    }
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
        // One pass: the envelope is read straight from the body (checked as UTF-8 once, whole:
        // the members skipped unread are then valid text too).
        Some(b'{') => {
            let text = match std::str::from_utf8(body) {
                Ok(t) => t,
                Err(e) => return Body::ParseError(format!("not UTF-8 JSON: {e}")),
            };
            match read_envelope(text) {
                Ok(p) => Body::Single(validate(slice_of(body, trim_end(trimmed)), Ok(p))),
                Err(e) if e.classify() == serde_json::error::Category::Data => Body::Single(
                    validate(slice_of(body, trim_end(trimmed)), Err(e.to_string())),
                ),
                Err(e) => Body::ParseError(describe_parse_error(body, e)),
            }
        }
        _ => match serde_json::from_slice::<&RawValue>(body) {
            Ok(raw) => Body::Single(envelope_from_raw(body, raw)),
            Err(e) => Body::ParseError(describe_parse_error(body, e)),
        },
    }
}

/// One envelope's members from its text: the [`scan`] fast path when it can read the text on
/// its own, serde_json — the reference, with its error messages — for everything else.
fn read_envelope(text: &str) -> Result<RawEnvelope<'_>, serde_json::Error> {
    #[cfg(any(test, feature = "fuzzing"))]
    let fast = !SERDE_ONLY.with(std::cell::Cell::get);
    #[cfg(not(any(test, feature = "fuzzing")))]
    let fast = true;
    if fast {
        if let Some(e) = scan::envelope(text) {
            return Ok(e);
        }
    }
    serde_json::from_str(text)
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
    if first_byte(text) != b'{' {
        let mut env = Envelope::invalid(slice_of(body, text.as_bytes()));
        env.problem = Some("a JSON-RPC message must be an object".into());
        return env;
    }
    let parsed = read_envelope(text).map_err(|e| e.to_string());
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
            task_hint: false,
            problem: None,
            duplicate: None,
            raw,
            result: std::sync::OnceLock::new(),
        }
    }

    /// The `result` member, parsed once however many rules read it; `None` for a message
    /// without one.
    pub fn result(&self) -> Option<&serde_json::Value> {
        self.result
            .get_or_init(|| Box::new(member(&self.raw, "result")))
            .as_ref()
            .as_ref()
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
    env.duplicate = parsed.duplicate;
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
    match parsed.jsonrpc {
        // As nearly every message writes it: nothing to unescape.
        Some("\"2.0\"") => {}
        jsonrpc => match jsonrpc.map(raw_str) {
            Some(Some(v)) if v == "2.0" => {}
            Some(_) => {
                env.problem = Some("`jsonrpc` must be exactly \"2.0\"".into());
            }
            None => env.problem = Some("`jsonrpc` member is missing".into()),
        },
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
            if !matches!(params.shape, Shape::Array | Shape::Object) {
                env.problem
                    .get_or_insert_with(|| "`params` must be an array or an object".into());
            } else if params.shape == Shape::Object && wants_target(&name) {
                env.task_hint = params.task_object;
                env.target = params
                    .name
                    .or(params.uri)
                    .or(params.task_id)
                    .and_then(raw_str)
                    .map(|c| std::sync::Arc::from(&*c));
            }
        }
        env.method = Some(method_text(&name));
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
            env.tool_error = result.shape == Shape::Object && result.is_error;
            env.task_hint = result.task_object || result.result_type_task;
            if env.problem.is_none() {
                env.kind = Kind::Result;
            }
        }
        (None, Some(error)) => {
            if env.id.is_none() {
                env.problem
                    .get_or_insert_with(|| "a response must carry an `id`".into());
            }
            if error.shape == Shape::Object {
                match error.code {
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
                match error.message.map(raw_str) {
                    Some(Some(m)) => env.error_message = Some(m.into()),
                    _ => {
                        env.problem
                            .get_or_insert_with(|| "`error.message` must be a string".into());
                    }
                }
            } else {
                env.problem = Some("`error` must be an object".into());
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
            | "tasks/get"
            | "tasks/update"
            | "tasks/cancel"
            | "tasks/result"
    )
}

/// `-?(0|[1-9][0-9]*)`: a JSON integer literal (the recorder writes such ids as they are).
pub(crate) fn is_integer_literal(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s).as_bytes();
    match digits {
        [] => false,
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// The sub-slice `part` of `whole` as a zero-copy `Bytes`, or a copy when it is not a sub-slice.
fn slice_of(whole: &Bytes, part: &[u8]) -> Bytes {
    let start = whole.as_ptr() as usize;
    let p = part.as_ptr() as usize;
    if p == start && part.len() == whole.len() {
        // The whole (a body with no space around its message, the usual case): a clone, without
        // `slice_ref`'s checks and arithmetic.
        whole.clone()
    } else if p >= start && p + part.len() <= start + whole.len() {
        whole.slice_ref(part)
    } else {
        Bytes::copy_from_slice(part)
    }
}

/// Messages joined into one JSON array (a batch, a batch's replies), each member's bytes as
/// they are.
pub fn join_array<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Bytes {
    let mut out = Vec::new();
    out.push(b'[');
    for (i, p) in parts.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(p);
    }
    out.push(b']');
    Bytes::from(out)
}

/// What a call carries that rules (rate limits, faults) match on.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallInfo<'a> {
    pub method: &'a str,
    /// `params.name` of `tools/call` (or `prompts/get`).
    pub tool: Option<&'a str>,
    /// `params.uri`.
    pub resource: Option<&'a str>,
    /// The message's bytes, read again only for what a rule alone asks (an A2A skill).
    pub raw: &'a [u8],
}

impl CallInfo<'_> {
    /// The A2A skill a message names (`a2a::skill_of`): its params are read again, so only a
    /// rule with a `skill` matcher asks, and only of A2A's message methods.
    pub fn skill(&self) -> Option<String> {
        a2a::message_skill(self.method, self.raw)
    }
}

/// The calls a rule names: globs on the method, the MCP tool (or prompt), the resource URI and
/// the A2A skill — what `[[limit]]` and `[[fault]]` rules (and their flags) match alike. An unset
/// glob matches anything; a set one matches only a call that has that part.
#[derive(Debug, Default)]
pub struct CallGlobs {
    pub method: Option<globset::GlobMatcher>,
    pub tool: Option<globset::GlobMatcher>,
    pub resource: Option<globset::GlobMatcher>,
    pub skill: Option<globset::GlobMatcher>,
}

impl CallGlobs {
    pub fn matches(&self, call: &CallInfo<'_>) -> bool {
        let has = |g: &Option<globset::GlobMatcher>, v: Option<&str>| {
            g.as_ref().is_none_or(|g| v.is_some_and(|v| g.is_match(v)))
        };
        has(&self.method, Some(call.method))
            && has(&self.tool, call.tool)
            && has(&self.resource, call.resource)
            && self
                .skill
                .as_ref()
                .is_none_or(|g| call.skill().is_some_and(|s| g.is_match(s)))
    }
}

/// A top-level member of a message (`params`, `result`), parsed: read again only where a rule
/// needs its value (the envelope's one pass keeps none).
pub fn member(raw: &[u8], key: &str) -> Option<serde_json::Value> {
    let mut v: serde_json::Value = serde_json::from_slice(raw).ok()?;
    Some(v.get_mut(key)?.take())
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

/// The id a reply to this envelope would carry: a call's, or an invalid envelope's that has a
/// method and an id (the server should answer it with an error).
pub fn answerable_id(e: &Envelope) -> Option<&Id> {
    match (e.kind, &e.id, &e.method) {
        (Kind::Request, Some(id), _) | (Kind::Invalid, Some(id), Some(_)) => Some(id),
        _ => None,
    }
}

/// Whether `body` is a batch, and the ids of the calls in it that expect a reply, in order.
pub fn call_ids(body: &Bytes) -> (bool, Vec<Id>) {
    match parse_body(body) {
        Body::Single(e) => (false, answerable_id(&e).cloned().into_iter().collect()),
        Body::Batch(members) => (
            true,
            members.iter().filter_map(answerable_id).cloned().collect(),
        ),
        Body::ParseError(_) => (false, Vec::new()),
    }
}

/// The error reply an intermediary makes for these calls: one object, or an array for a batch;
/// `None` when no call expects a reply.
pub fn error_replies(batch: bool, ids: &[Id], code: i64, message: &str) -> Option<String> {
    match (batch, ids) {
        (_, []) => None,
        (true, ids) => {
            let items: Vec<String> = ids
                .iter()
                .map(|id| error_reply(id, code, message, None))
                .collect();
            Some(format!("[{}]", items.join(",")))
        }
        (false, [id, ..]) => Some(error_reply(id, code, message, None)),
    }
}

#[cfg(any(test, feature = "fuzzing"))]
thread_local! {
    /// Set by the differential tests and fuzz target: parse with serde_json only (the reference).
    static SERDE_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// [`parse_body`] with serde_json alone, the reference the fast scanner must agree with (tests
/// and the fuzz targets only; the `fuzzing` feature).
#[cfg(any(test, feature = "fuzzing"))]
pub fn parse_body_reference(body: &Bytes) -> Body {
    SERDE_ONLY.with(|c| c.set(true));
    let out = parse_body(body);
    SERDE_ONLY.with(|c| c.set(false));
    out
}

/// MCP's request methods (the MCP method table), in the order [`mcp_method_index`] numbers
/// them.
const MCP_METHODS: [&str; 17] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "logging/setLevel",
    "completion/complete",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
    "server/discover",
];

/// The place of `method` in [`MCP_METHODS`]: a match on the text dispatches on its length
/// before comparing bytes.
fn mcp_method_index(method: &str) -> Option<usize> {
    Some(match method {
        "initialize" => 0,
        "ping" => 1,
        "tools/list" => 2,
        "tools/call" => 3,
        "resources/list" => 4,
        "resources/read" => 5,
        "resources/templates/list" => 6,
        "resources/subscribe" => 7,
        "resources/unsubscribe" => 8,
        "prompts/list" => 9,
        "prompts/get" => 10,
        "logging/setLevel" => 11,
        "completion/complete" => 12,
        "sampling/createMessage" => 13,
        "elicitation/create" => 14,
        "roots/list" => 15,
        "server/discover" => 16,
        _ => return None,
    })
}

/// Whether `method` is one of MCP's (the MCP method table: results of these calls are checked
/// for size, their spans get MCP's attributes).
pub fn is_mcp_method(method: &str) -> bool {
    mcp_method_index(method).is_some() || method.starts_with("notifications/")
}

/// A method name as the shared text a call keeps: MCP's own names are made once and shared
/// (a count, where any other name costs an allocation and a copy per call).
fn method_text(method: &str) -> std::sync::Arc<str> {
    static SHARED: std::sync::LazyLock<[std::sync::Arc<str>; 17]> =
        std::sync::LazyLock::new(|| MCP_METHODS.map(std::sync::Arc::from));
    match mcp_method_index(method) {
        Some(i) => SHARED[i].clone(),
        None => std::sync::Arc::from(method),
    }
}

/// The task a result carries (MCP's tasks extension, and 2025-11-25's experimental tasks): the
/// result itself when it is one — `resultType: "task"` (a 2026-07-28 handle) or a `taskId`
/// member (a `tasks/get` reply) — else its `task` member when that has a `taskId` (2025-11-25's
/// `CreateTaskResult`).
/// The flag is `true` for the member. The inspector, the view and the `task` fault read a task
/// through this one function, so they never disagree on which object is the task.
pub fn task_in(result: &serde_json::Value) -> Option<(&serde_json::Value, bool)> {
    if result.get("resultType").and_then(serde_json::Value::as_str) == Some("task")
        || result.get("taskId").is_some()
    {
        return Some((result, false));
    }
    // A `task` member without a `taskId` is some other result's data, not a task.
    let task = result.get("task").filter(|t| t.get("taskId").is_some())?;
    Some((task, true))
}

/// [`task_in`], to edit the task in place.
pub fn task_in_mut(result: &mut serde_json::Value) -> Option<&mut serde_json::Value> {
    match task_in(result)?.1 {
        false => Some(result),
        true => result.get_mut("task"),
    }
}

/// JSON text with objects' keys sorted (so that `{"a":1,"b":2}` and `{"b":2,"a":1}` match).
pub fn canonical(v: &serde_json::Value) -> String {
    fn sort(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(o) => {
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                serde_json::Value::Object(
                    keys.into_iter().map(|k| (k.clone(), sort(&o[k]))).collect(),
                )
            }
            serde_json::Value::Array(a) => serde_json::Value::Array(a.iter().map(sort).collect()),
            x => x.clone(),
        }
    }
    sort(v).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_read_in_each_shape_and_nothing_else_is_one() {
        use serde_json::json;
        let handle = json!({"resultType": "task", "taskId": "t1", "status": "working"});
        assert_eq!(
            task_in(&handle).map(|(t, m)| (t["taskId"].clone(), m)),
            Some((json!("t1"), false))
        );
        let got = json!({"resultType": "complete", "taskId": "t2", "status": "completed"});
        assert_eq!(
            task_in(&got).map(|(t, _)| t["taskId"].clone()),
            Some(json!("t2"))
        );
        let legacy = json!({"task": {"taskId": "t3", "status": "working"}});
        assert_eq!(
            task_in(&legacy).map(|(t, m)| (t["taskId"].clone(), m)),
            Some((json!("t3"), true))
        );
        for not in [
            json!({"content": []}),
            json!({"task": {"name": "x"}}),
            json!({"task": "t"}),
        ] {
            assert!(task_in(&not).is_none(), "{not}");
        }
        let mut legacy = legacy;
        if let Some(t) = task_in_mut(&mut legacy) {
            t["status"] = json!("failed");
        }
        assert_eq!(legacy["task"]["status"], "failed");
    }

    #[test]
    fn mcp_methods_are_numbered_in_their_table_and_shared() {
        for (i, m) in MCP_METHODS.iter().enumerate() {
            assert_eq!(mcp_method_index(m), Some(i), "{m}");
            assert!(
                std::sync::Arc::ptr_eq(&method_text(m), &method_text(m)),
                "{m}"
            );
            assert_eq!(&*method_text(m), *m);
        }
        assert_eq!(mcp_method_index("tools/calls"), None);
        assert!(is_mcp_method("notifications/progress"));
        assert!(!is_mcp_method("eth_call"));
        assert_eq!(&*method_text("eth_call"), "eth_call");
    }

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
            r#"5"#,
        ] {
            let e = one(bad);
            assert_eq!(e.kind, Kind::Invalid, "{bad}");
            assert!(e.problem.is_some(), "{bad}");
        }
    }

    /// A member given twice is read as the last one — what Python's, JavaScript's and Go's
    /// parsers execute — and noted, on both readers (the fast scan leaves it to serde_json).
    #[test]
    fn duplicate_members_are_read_as_the_last_and_noted() {
        for serde_only in [false, true] {
            SERDE_ONLY.with(|c| c.set(serde_only));
            let e = one(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}"#);
            assert_eq!(
                (e.kind, e.id.clone(), e.duplicate),
                (Kind::Request, Some(Id::Num("2".into())), Some("id"))
            );
            let e = one(
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"name":"safe"},"method":"tools/call"}"#,
            );
            assert_eq!(e.method.as_deref(), Some("tools/call"));
            assert_eq!(e.target.as_deref(), Some("safe"));
            assert_eq!(e.duplicate, Some("method"));
            let e = one(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"safe","arguments":{},"name":"rm"}}"#,
            );
            assert_eq!(
                (e.target.as_deref(), e.duplicate),
                (Some("rm"), Some("params.name"))
            );
            let e =
                one(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#);
            assert_eq!(e.duplicate, None);
        }
        SERDE_ONLY.with(|c| c.set(false));
        // A byte order mark first is read past.
        match parse_body(&Bytes::from_static(
            b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}",
        )) {
            Body::Single(e) => assert_eq!(e.kind, Kind::Request),
            other => panic!("{other:?}"),
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
        // The fields are read in the envelope's one pass, wherever the members come.
        let e = one(
            r#"{"params":{"arguments":{"name":"inner"},"name":"e\u0063ho"},"id":1,"method":"tools/call","jsonrpc":"2.0"}"#,
        );
        assert_eq!((e.kind, e.target.as_deref()), (Kind::Request, Some("echo")));
        let e = one(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}"#,
        );
        assert_eq!(e.target.as_deref(), Some("file:///a"));
        let e = one(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"x"}}"#);
        assert_eq!(e.target, None);
        for not_error in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"isError":false}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"isError":"true"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":{"isError":true}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":[true]}"#,
        ] {
            let r = one(not_error);
            assert_eq!((r.kind, r.tool_error), (Kind::Result, false), "{not_error}");
        }
        // An error must be an object (not an array that serde would read by position).
        let e = one(r#"{"jsonrpc":"2.0","id":1,"error":[1,"x"]}"#);
        assert_eq!(e.kind, Kind::Invalid);
        let e =
            one(r#"{"jsonrpc":"2.0","id":1,"error":{"data":{"code":2},"message":"m","code":-1}}"#);
        assert_eq!(
            (e.kind, e.error_code, e.error_message.as_deref()),
            (Kind::Error, Some(-1), Some("m"))
        );
    }

    #[test]
    fn invalid_utf8_anywhere_is_a_parse_error() {
        let body = Bytes::from_static(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"params\":[\"\xff\"]}",
        );
        match parse_body(&body) {
            Body::ParseError(why) => assert!(why.contains("UTF-8"), "{why}"),
            other => panic!("{other:?}"),
        }
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
        // The same inside the one field read from a result.
        let mut s = String::from(r#"{"jsonrpc":"2.0","id":1,"result":{"isError":"#);
        for _ in 0..10_000 {
            s.push_str(r#"{"isError":"#);
        }
        s.push_str("true");
        s.push_str(&"}".repeat(10_002));
        match parse_body(&Bytes::from(s)) {
            Body::Single(e) => assert_eq!((e.kind, e.tool_error), (Kind::Result, false)),
            other => panic!("{other:?}"),
        }
        // a deep structure where a message should be is an invalid envelope, not a crash
        let deep = Bytes::from(format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)));
        let _ = parse_body(&deep);
    }

    /// `parse_body` as it runs (the scanner first) and with serde_json alone, as text.
    fn both_ways(body: &[u8]) -> (String, String) {
        let b = Bytes::copy_from_slice(body);
        let fast = format!("{:?}", parse_body(&b));
        let slow = format!("{:?}", parse_body_reference(&b));
        (fast, slow)
    }

    /// Whether the scanner itself reads a text (rather than leaving it to serde_json).
    fn scanned(text: &str) -> bool {
        scan::envelope(text).is_some()
    }

    #[test]
    fn scanner_reads_what_serde_json_reads_on_the_edges() {
        let cases = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":"x","n":[1,2.5,-0,1e3,true,false,null,{}]}}}"#,
            r#" { "jsonrpc" : "2.0" , "id" : "a\"b\\c\/\b\f\n\r\t\u00e9" , "method" : "m" } "#,
            r#"{"jsonrpc":"2.0","id":-0,"result":{"isError":true,"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1E+2,"result":{"isError":1e999}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"isError":"\ud800"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"\ud800"}"#,
            r#"{"jsonrpc":"2.0","id":"\ud800","method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1e999}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":12345678901234567890123}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no","code":5}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}"#,
            r#"{"jsonr\u0070c":"2.0","id":1,"method":"a"}"#,
            r#"{"jsonrpc":"2.0","id":01,"method":"a"}"#,
            r#"{"jsonrpc":"2.0","id":1.,"method":"a"}"#,
            r#"{"jsonrpc":"2.0","id":-,"method":"a"}"#,
            r#"{"jsonrpc":"2.0","id":1e,"method":"a"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","params":[1,]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":1,}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a",}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a"} x"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a\u001"}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\u{1}\"}",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a long tool name\u{1f}éß\u{7f} and more\"}}",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a long name, \n then \u00e9 and more text ü"}}"#,
            r#"{"jsonrpc":"2.0","id":"a string id that is longer than a word","result":{"isError":false,"text":"0123456789abcdef\"quoted\" tail"}}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"text\":\"0123456789012345678901234567890123456789\u{2}\"}}",
            r#"{"jsonrpc":"2.0","id":1,"result":{"text":"0123456789012345678901234567890123456789\u00e9\"\\ and on and on and on and on ü"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"text":"0123456789012345678901234567890123456789\q"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"text":"0123456789012345678901234567890123456789"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","params":[[[[{"x":[]}]]]]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","params":[}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","params":[1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":[1}]}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":{"a":1]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","params":{"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","params":tru}"#,
            r#"{"jsonrpc":"2.0","id":nul,"method":"a"}"#,
            r#"{}"#,
            r#"{"#,
            r#"{"jsonrpc":"2.0","method":"notifications/x","params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a","name":5}}"#,
        ];
        for c in cases {
            let (fast, slow) = both_ways(c.as_bytes());
            assert_eq!(fast, slow, "{c}");
        }
        // The common shapes are the scanner's; the odd ones are serde_json's.
        assert!(scanned(cases[0]) && scanned(cases[1]) && scanned(cases[2]));
        for odd in [3, 4, 5, 7, 10, 11, 12, 19] {
            assert!(!scanned(cases[odd]), "{}", cases[odd]);
        }
        let mut deep = String::from(r#"{"jsonrpc":"2.0","id":1,"method":"a","params":"#);
        deep.push_str(&"[".repeat(100));
        deep.push_str(&"]".repeat(100));
        deep.push('}');
        assert!(!scanned(&deep));
        assert_eq!(both_ways(deep.as_bytes()).0, both_ways(deep.as_bytes()).1);
    }

    /// JSON-ish text built from pieces that include the grammar's edges, so that generated
    /// bodies are often valid envelopes and often almost-valid ones.
    fn jsonish() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let scalar = prop_oneof![
            Just("0".to_string()),
            Just("-0".to_string()),
            Just("01".to_string()),
            Just("1.".to_string()),
            Just("1.5".to_string()),
            Just("-12e-3".to_string()),
            Just("1E+400".to_string()),
            Just("12345678901234567890".to_string()),
            Just("-".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            Just("null".to_string()),
            Just("nul".to_string()),
            Just(r#""2.0""#.to_string()),
            Just(r#""tools/call""#.to_string()),
            Just(r#""a\nb\u00e9""#.to_string()),
            Just(r#""\ud83d\ude00""#.to_string()),
            Just(r#""\ud800""#.to_string()),
            Just(r#""\x""#.to_string()),
            Just("\"\u{1}\"".to_string()),
            Just("\"é\"".to_string()),
            Just(format!("\"{}\"", "long text ".repeat(6))),
            Just(format!("\"{}\\n{}\"", "a".repeat(40), "é".repeat(5))),
            Just(format!("\"{}\u{1}tail\"", "b".repeat(45))),
            any::<i64>().prop_map(|n| n.to_string()),
        ];
        let key = prop_oneof![
            Just("jsonrpc"),
            Just("id"),
            Just("method"),
            Just("params"),
            Just("result"),
            Just("error"),
            Just("name"),
            Just("uri"),
            Just("code"),
            Just("message"),
            Just("isError"),
            Just("x"),
            Just(""),
            Just(r"m\u0065thod"),
        ];
        let ws = prop_oneof![Just(""), Just(""), Just(" "), Just("\n\t ")];
        scalar.prop_recursive(5, 48, 6, move |inner| {
            prop_oneof![
                (prop::collection::vec((ws.clone(), inner.clone()), 0..5)).prop_map(|v| {
                    let items: Vec<String> =
                        v.into_iter().map(|(w, x)| format!("{w}{x}")).collect();
                    format!("[{}]", items.join(","))
                }),
                (prop::collection::vec((key.clone(), ws.clone(), inner), 0..7)).prop_map(|v| {
                    let items: Vec<String> = v
                        .into_iter()
                        .map(|(k, w, x)| format!("\"{k}\"{w}:{w}{x}"))
                        .collect();
                    format!("{{{}}}", items.join(","))
                }),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2048, .. Default::default() })]

        /// Whatever the scanner accepts, it reads exactly as serde_json does; whatever it
        /// leaves, serde_json reads — so `parse_body` is the same either way, on generated
        /// envelopes and on the same with a byte cut, added or changed.
        #[test]
        fn scanner_and_serde_json_agree(
            text in jsonish(),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::prelude::prop_oneof![
                proptest::prelude::Just(b'"'), proptest::prelude::Just(b','), proptest::prelude::Just(b'}'),
                proptest::prelude::Just(b']'), proptest::prelude::Just(b'\\'), proptest::prelude::Just(b':'),
                proptest::prelude::Just(b'0'), proptest::prelude::Just(b'-'), proptest::prelude::Just(b'e'),
                proptest::prelude::Just(b'.'), proptest::prelude::Just(b' '), proptest::prelude::Just(0x01u8)
            ],
            how in 0u8..4,
        ) {
            let mut b = text.into_bytes();
            if !b.is_empty() {
                let at = cut.index(b.len());
                match how {
                    1 => { b.remove(at); }
                    2 => b.insert(at, byte),
                    3 => b[at] = byte,
                    _ => {}
                }
            }
            let (fast, slow) = both_ways(&b);
            proptest::prop_assert_eq!(fast, slow);
        }
    }
}
