//! The line encoder: one event as its recording line. The usual events of an exchange are
//! written field by field (byte for byte what serde's derive writes; the tests hold them to it),
//! the others through serde.

use crate::events::{Event, MessageEvent};

/// Writes one event as its recording line.
///
/// The lines of an exchange's usual events — HTTP request/response/end, messages, calls — are
/// written field by field, byte for byte what serde's derive writes (tests hold them to that):
/// serde writes these nested, internally tagged and flattened shapes through its generic map
/// path, and re-validates messages the parser already accepted. Other events take serde.
pub fn write_line(out: &mut Vec<u8>, ev: &Event) -> serde_json::Result<()> {
    match ev {
        Event::Message(m) => message_line(out, m),
        Event::Http(h) => http_line(out, h),
        Event::Call(c) => call_line(out, c),
        other => serde_json::to_writer(out, other),
    }
}

/// A member's key as written after the one before it: `k!("ts")` is `,"ts":`, one literal
/// (one copy of known length, not three).
macro_rules! k {
    ($name:literal) => {
        concat!(",\"", $name, "\":")
    };
}

/// A member whose value is a fixed name: `kv!("outcome", "result")` is `,"outcome":"result"`.
macro_rules! kv {
    ($name:literal, $value:literal) => {
        concat!(",\"", $name, "\":\"", $value, "\"")
    };
}

/// Appends one JSON object's members to a line.
struct Line<'a>(&'a mut Vec<u8>);

impl Line<'_> {
    /// The line's opening, up to its first member's end (a literal: `{"event":"call"`).
    fn open<'a>(out: &'a mut Vec<u8>, opening: &'static str) -> Line<'a> {
        out.extend_from_slice(opening.as_bytes());
        Line(out)
    }
    /// Text known to need no escaping: a `k!` key, a `kv!` member, a quoted fixed name.
    #[inline(always)]
    fn lit(&mut self, text: &'static str) {
        self.0.extend_from_slice(text.as_bytes());
    }
    #[inline(always)]
    fn str(&mut self, key: &'static str, v: &str) {
        self.lit(key);
        json_str(self.0, v);
    }
    #[inline(always)]
    fn num(&mut self, key: &'static str, v: impl itoa::Integer) {
        self.lit(key);
        self.0
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }
    /// `Scope`'s text written in place when nothing in it needs escaping (serde's `Serialize`
    /// builds the text first, on every line).
    fn scope(&mut self, scope: &crate::events::Scope) -> serde_json::Result<()> {
        use crate::events::Scope;
        match scope {
            Scope::Exchange(n) => {
                self.lit(concat!(k!("scope"), "\"exchange:"));
                self.0
                    .extend_from_slice(itoa::Buffer::new().format(*n).as_bytes());
                self.0.push(b'"');
                Ok(())
            }
            Scope::Session(id) if is_plain(id) => {
                self.lit(concat!(k!("scope"), "\"session:"));
                self.0.extend_from_slice(id.as_bytes());
                self.0.push(b'"');
                Ok(())
            }
            other => {
                self.lit(k!("scope"));
                serde_json::to_writer(&mut *self.0, other)
            }
        }
    }
    fn id(&mut self, key: &'static str, id: &crate::rpc::Id) -> serde_json::Result<()> {
        self.lit(key);
        match id {
            crate::rpc::Id::Str(s) => {
                json_str(self.0, s);
                Ok(())
            }
            // An integer literal as is; any other number through serde, which checks it is one.
            crate::rpc::Id::Num(n) if crate::rpc::is_integer_literal(n) => {
                self.0.extend_from_slice(n.as_bytes());
                Ok(())
            }
            other => serde_json::to_writer(&mut *self.0, other),
        }
    }
    fn close(self) {
        self.0.push(b'}');
    }
}

/// A JSON string, byte for byte what serde_json writes: copied as is when nothing in it needs
/// escaping (no control character, quote or backslash — nearly every header, path and name),
/// else serde_json's escaping.
#[inline(always)]
fn json_str(out: &mut Vec<u8>, s: &str) {
    if is_plain(s) {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(out, s);
    }
}

/// Whether `s` needs no escaping in a JSON string (no control character, quote or backslash).
fn is_plain(s: &str) -> bool {
    crate::rpc::plain_text(s.as_bytes(), false)
}

/// The `direction` member.
fn direction_member(d: crate::events::Direction) -> &'static str {
    match d {
        crate::events::Direction::ClientToServer => kv!("direction", "c2s"),
        crate::events::Direction::ServerToClient => kv!("direction", "s2c"),
    }
}

/// The `transport` member.
fn transport_member(t: crate::events::Transport) -> &'static str {
    match t {
        crate::events::Transport::Json => kv!("transport", "json"),
        crate::events::Transport::Sse => kv!("transport", "sse"),
        crate::events::Transport::LegacySse => kv!("transport", "legacy-sse"),
        crate::events::Transport::Stdio => kv!("transport", "stdio"),
        crate::events::Transport::Ws => kv!("transport", "ws"),
    }
}

/// The `kind` member.
fn kind_member(k: crate::rpc::Kind) -> &'static str {
    match k {
        crate::rpc::Kind::Request => kv!("kind", "request"),
        crate::rpc::Kind::Notification => kv!("kind", "notification"),
        crate::rpc::Kind::Result => kv!("kind", "result"),
        crate::rpc::Kind::Error => kv!("kind", "error"),
        crate::rpc::Kind::Invalid => kv!("kind", "invalid"),
    }
}

/// An HTTP event's line.
fn http_line(out: &mut Vec<u8>, h: &crate::events::HttpEvent) -> serde_json::Result<()> {
    use crate::events::HttpEvent;
    /// `opening` is the line's start up to its phase, a literal.
    fn head<'a>(out: &'a mut Vec<u8>, opening: &'static str, ts: u64, exchange: u64) -> Line<'a> {
        let mut l = Line::open(out, opening);
        l.num(k!("ts"), ts);
        l.num(k!("exchange"), exchange);
        l
    }
    fn headers(l: &mut Line<'_>, h: &crate::events::Headers) {
        l.lit(k!("headers"));
        // Already the JSON text (`events::Headers`).
        l.0.extend_from_slice(h.json());
    }
    match h {
        HttpEvent::Request {
            ts,
            exchange,
            method,
            path,
            peer,
            session,
            protocol_version,
            headers: hs,
        } => {
            let mut l = head(out, r#"{"event":"http","phase":"request""#, *ts, *exchange);
            l.str(k!("method"), method);
            l.str(k!("path"), path);
            l.str(k!("peer"), peer);
            if let Some(s) = session {
                l.str(k!("session"), s);
            }
            if let Some(v) = protocol_version {
                l.str(k!("protocol_version"), v);
            }
            headers(&mut l, hs);
            l.close();
        }
        HttpEvent::Response {
            ts,
            exchange,
            status,
            content_type,
            headers: hs,
            local,
        } => {
            let mut l = head(out, r#"{"event":"http","phase":"response""#, *ts, *exchange);
            l.num(k!("status"), *status);
            if let Some(ct) = content_type {
                l.str(k!("content_type"), ct);
            }
            headers(&mut l, hs);
            if let Some(why) = local {
                l.str(k!("local"), why);
            }
            l.close();
        }
        HttpEvent::Endpoint { ts, exchange, url } => {
            let mut l = head(out, r#"{"event":"http","phase":"endpoint""#, *ts, *exchange);
            l.str(k!("url"), url);
            l.close();
        }
        HttpEvent::AgentCard {
            ts,
            exchange,
            path,
            card,
        } => {
            let mut l = head(
                out,
                r#"{"event":"http","phase":"agent_card""#,
                *ts,
                *exchange,
            );
            l.str(k!("path"), path);
            l.str(k!("card"), card);
            l.close();
        }
        HttpEvent::Binary {
            ts,
            exchange,
            direction,
            len,
        } => {
            let mut l = head(out, r#"{"event":"http","phase":"binary""#, *ts, *exchange);
            l.lit(direction_member(*direction));
            l.num(k!("len"), *len);
            l.close();
        }
        HttpEvent::Auth {
            ts,
            exchange,
            method,
            path,
            status,
            www_authenticate,
        } => {
            let mut l = head(out, r#"{"event":"http","phase":"auth""#, *ts, *exchange);
            l.str(k!("method"), method);
            l.str(k!("path"), path);
            l.num(k!("status"), *status);
            if let Some(w) = www_authenticate {
                l.str(k!("www_authenticate"), w);
            }
            l.close();
        }
        HttpEvent::End {
            ts,
            exchange,
            reason,
            bytes,
        } => {
            let mut l = head(out, r#"{"event":"http","phase":"end""#, *ts, *exchange);
            l.str(k!("reason"), reason);
            l.num(k!("bytes"), *bytes);
            l.close();
        }
    }
    Ok(())
}

/// A call's line (its outcome's members flattened into it).
fn call_line(out: &mut Vec<u8>, c: &crate::events::CallEvent) -> serde_json::Result<()> {
    use crate::events::Outcome;
    let mut l = Line::open(out, r#"{"event":"call""#);
    l.num(k!("ts"), c.ts);
    l.num(k!("exchange"), c.exchange);
    l.scope(&c.scope)?;
    l.lit(direction_member(c.direction));
    l.str(k!("method"), &c.method);
    if let Some(t) = &c.target {
        l.str(k!("target"), t);
    }
    l.id(k!("id"), &c.id)?;
    match &c.outcome {
        Outcome::Result => l.lit(kv!("outcome", "result")),
        Outcome::InputRequired => l.lit(kv!("outcome", "input_required")),
        Outcome::Error { code, message } => {
            l.lit(kv!("outcome", "error"));
            l.num(k!("code"), *code);
            l.str(k!("message"), message);
        }
        Outcome::Refused { rule } => {
            l.lit(kv!("outcome", "refused"));
            l.str(k!("rule"), rule);
        }
        Outcome::Rejected { status } => {
            l.lit(kv!("outcome", "rejected"));
            l.num(k!("status"), *status);
        }
        Outcome::Missing { reason } => {
            l.lit(kv!("outcome", "missing"));
            l.str(k!("reason"), reason);
        }
        Outcome::Cancelled { reason } => {
            l.lit(kv!("outcome", "cancelled"));
            l.str(k!("reason"), reason);
        }
        Outcome::Abandoned { reason } => {
            l.lit(kv!("outcome", "abandoned"));
            l.str(k!("reason"), reason);
        }
    }
    if let Some(v) = c.latency_us {
        l.num(k!("latency_us"), v);
    }
    l.lit(k!("anomalies"));
    l.0.push(b'[');
    for (i, a) in c.anomalies.iter().enumerate() {
        if i > 0 {
            l.0.push(b',');
        }
        json_str(l.0, a);
    }
    l.0.push(b']');
    if let Some(v) = c.request_index {
        l.num(k!("request_index"), v);
    }
    if let Some(v) = c.response_index {
        l.num(k!("response_index"), v);
    }
    if let Some(v) = &c.continues {
        l.id(k!("continues"), v)?;
    }
    if let Some(t) = &c.task {
        l.lit(k!("task"));
        serde_json::to_writer(&mut *l.0, t)?;
    }
    if let Some(v) = &c.context {
        l.str(k!("context"), v);
    }
    l.close();
    Ok(())
}

/// A message event's line. A message of any kind but `invalid` is a slice the JSON parser
/// accepted (or the redactor's re-serialization of one), so it goes out as is; an invalid one
/// may not be JSON and takes the checked path.
fn message_line(out: &mut Vec<u8>, m: &MessageEvent) -> serde_json::Result<()> {
    let mut l = Line::open(out, r#"{"event":"message""#);
    l.num(k!("ts"), m.ts);
    l.num(k!("exchange"), m.exchange);
    l.scope(&m.scope)?;
    l.lit(direction_member(m.direction));
    l.lit(transport_member(m.transport));
    l.lit(kind_member(m.kind));
    if let Some(id) = &m.id {
        l.id(k!("id"), id)?;
    }
    if let Some(v) = &m.method {
        l.str(k!("method"), v);
    }
    if let Some(v) = &m.target {
        l.str(k!("target"), v);
    }
    if let Some(v) = m.batch_index {
        l.num(k!("batch_index"), v);
    }
    if let Some(v) = m.batch_len {
        l.num(k!("batch_len"), v);
    }
    if let Some(v) = &m.sse_id {
        l.str(k!("sse_id"), v);
    }
    l.lit(k!("message"));
    if m.kind == crate::rpc::Kind::Invalid {
        serde_json::to_writer(&mut *l.0, &crate::events::RawMessage(&m.message))?;
    } else {
        l.0.extend_from_slice(&m.message);
    }
    if m.unparsed {
        l.lit(concat!(k!("unparsed"), "true"));
    }
    if m.binary {
        l.lit(concat!(k!("binary"), "true"));
    }
    l.close();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Event;

    #[test]
    fn fixed_names_are_serdes() {
        use crate::events::{Direction, Transport};
        use crate::rpc::Kind;
        // `,"<key>":<serde's value>`.
        let q = |key: &str, v: String| format!(",\"{key}\":{v}");
        fn json<T: serde::Serialize>(v: &T) -> String {
            serde_json::to_string(v).unwrap()
        }
        for d in [Direction::ClientToServer, Direction::ServerToClient] {
            assert_eq!(q("direction", json(&d)), direction_member(d));
        }
        for t in [
            Transport::Json,
            Transport::Sse,
            Transport::LegacySse,
            Transport::Stdio,
            Transport::Ws,
        ] {
            assert_eq!(q("transport", json(&t)), transport_member(t));
        }
        for k in [
            Kind::Request,
            Kind::Notification,
            Kind::Result,
            Kind::Error,
            Kind::Invalid,
        ] {
            assert_eq!(q("kind", json(&k)), kind_member(k));
        }
    }

    /// The recorder's line for `ev` is byte for byte what serde writes for it.
    fn assert_written_as_serde_writes(ev: Event) {
        let mut fast = Vec::new();
        write_line(&mut fast, &ev).unwrap();
        let slow = serde_json::to_vec(&ev).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&fast),
            String::from_utf8_lossy(&slow)
        );
        assert_round_trips(&ev);
    }

    /// One model both ways: an event written as its line and read back is the same event — its
    /// line, written again, is byte for byte the first.
    fn assert_round_trips(ev: &Event) {
        let mut first = Vec::new();
        write_line(&mut first, ev).unwrap();
        let text = String::from_utf8(first.clone()).unwrap();
        let back =
            crate::record::reader::parse_line(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let mut again = Vec::new();
        write_line(&mut again, &back).unwrap();
        assert_eq!(text, String::from_utf8_lossy(&again));
        assert_eq!(back.ts(), ev.ts());
    }

    #[test]
    fn every_event_kind_reads_back_as_written() {
        use crate::events::*;
        use crate::rpc::Id;
        let scope = Scope::Session("s\"1".into());
        let events = vec![
            Event::Anomaly(AnomalyEvent {
                ts: 1,
                exchange: 2,
                scope: scope.clone(),
                code: "DUPLICATE_ID",
                severity: Severity::Error,
                id: Some(Id::Str("a\u{e9}".into())),
                method: Some("m".into()),
                direction: Some(Direction::ClientToServer),
                batch_index: Some(1),
                message: "why \"quoted\"".into(),
            }),
            Event::Anomaly(AnomalyEvent {
                ts: 1,
                exchange: 2,
                scope: Scope::Exchange(2),
                code: "A_CODE_OF_A_LATER_VERSION",
                severity: Severity::Warning,
                id: None,
                method: None,
                direction: None,
                batch_index: None,
                message: String::new(),
            }),
            Event::Refusal(RefusalEvent {
                ts: 3,
                exchange: 4,
                scope: scope.clone(),
                method: "tools/call".into(),
                id: Some(Id::Num("12345678901234567890".into())),
                rule: "add=1/min".into(),
                shadow: true,
                retry_after_ms: 250,
            }),
            Event::Notice(NoticeEvent {
                ts: 5,
                what: "pending_evicted",
                message: "3 calls".into(),
            }),
            Event::Gap(GapEvent {
                ts: 6,
                lost: 8,
                message: "behind".into(),
            }),
            Event::Http(HttpEvent::Endpoint {
                ts: 7,
                exchange: 8,
                url: "/messages?sessionId=x".into(),
            }),
            Event::Http(HttpEvent::Auth {
                ts: 7,
                exchange: 8,
                method: "POST".into(),
                path: "/mcp".into(),
                status: 401,
                www_authenticate: Some("Bearer".into()),
            }),
            Event::Http(HttpEvent::Binary {
                ts: 7,
                exchange: 8,
                direction: Direction::ServerToClient,
                len: 99,
            }),
            Event::Message(MessageEvent {
                ts: 9,
                exchange: 10,
                scope: Scope::Exchange(10),
                direction: Direction::ServerToClient,
                transport: Transport::Ws,
                kind: crate::rpc::Kind::Result,
                id: Some(Id::Null),
                method: None,
                target: None,
                batch_index: None,
                batch_len: None,
                sse_id: None,
                message: bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":null,"result":1}"#),
                unparsed: false,
                binary: true,
            }),
            Event::Fault(FaultEvent {
                ts: 11,
                exchange: 12,
                scope: scope.clone(),
                injected: "twice".into(),
                action: "duplicate",
                method: Some("tools/call".into()),
                id: Some(Id::Num("3".into())),
                message: Some(bytes::Bytes::from_static(
                    br#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
                )),
                detail: "the reply delivered twice".into(),
                direction: None,
            }),
            Event::Fault(FaultEvent {
                ts: 13,
                exchange: 12,
                scope: Scope::Exchange(12),
                injected: "halved".into(),
                action: "malformed",
                method: None,
                id: None,
                message: Some(bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":"#)),
                detail: "the client's answer's JSON cut in half".into(),
                direction: Some(crate::events::Direction::ServerToClient),
            }),
        ];
        for ev in &events {
            assert_round_trips(ev);
        }
        // A cut frame a fault sent reads back as its own bytes.
        let mut line = Vec::new();
        write_line(&mut line, &events[events.len() - 1]).unwrap();
        match crate::record::reader::parse_line(std::str::from_utf8(&line).unwrap()).unwrap() {
            Event::Fault(f) => assert_eq!(
                f.message.as_deref(),
                Some(&br#"{"jsonrpc":"2.0","id":"#[..])
            ),
            e => panic!("{e:?}"),
        }
        // A frame that was not JSON reads back as its own bytes.
        let text = r#"{"event":"message","ts":1,"exchange":1,"scope":"exchange:1","direction":"s2c","transport":"stdio","kind":"invalid","message":"not json \" here","unparsed":true}"#;
        match crate::record::reader::parse_line(text).unwrap() {
            Event::Message(m) => {
                assert_eq!(&m.message[..], b"not json \" here");
                assert_eq!(m.json_text(), r#""not json \" here""#);
            }
            other => panic!("{other:?}"),
        }
    }

    proptest::proptest! {
        /// Any id, method and scope survive the line both ways.
        #[test]
        fn messages_read_back_as_written(
            num in proptest::bool::ANY,
            id in "[a-z0-9\u{e9}\\\"]{0,12}",
            n in 0u64..u64::MAX,
            method in "[ -~\u{e9}]{0,16}",
            sid in "[ -~]{1,12}",
        ) {
            use crate::events::*;
            let id = if num { crate::rpc::Id::Num(n.to_string().into()) } else { crate::rpc::Id::Str(id.into()) };
            let raw = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method}).to_string();
            let ev = Event::Message(MessageEvent {
                ts: n,
                exchange: n,
                scope: Scope::Session(sid.into()),
                direction: Direction::ClientToServer,
                transport: Transport::Sse,
                kind: crate::rpc::Kind::Request,
                id: Some(id),
                method: Some(method.into()),
                target: None,
                batch_index: Some(0),
                batch_len: Some(1),
                sse_id: Some("e".into()),
                message: bytes::Bytes::from(raw),
                unparsed: false,
                binary: false,
            });
            assert_round_trips(&ev);
        }
    }

    #[test]
    fn call_lines_are_what_serde_writes() {
        use crate::events::{CallEvent, Direction, Outcome, Scope};
        use crate::rpc::Id;
        let base = CallEvent {
            ts: 1_796_015_737_927_874_787,
            exchange: 12,
            scope: Scope::Session("s\"1\u{7}".into()),
            direction: Direction::ServerToClient,
            method: "sampling/createMessage".into(),
            target: Some("t\\x".into()),
            id: Id::Str("a\u{e9}\n".into()),
            outcome: Outcome::Result,
            latency_us: Some(2871),
            anomalies: vec!["DUPLICATE_ID", "UNSAFE_ID"],
            request_index: Some(0),
            response_index: Some(u32::MAX),
            continues: None,
            task: None,
            context: Some("ctx \"7\"".into()),
            trace: None,
        };
        let mut calls = vec![base.clone()];
        // A multi round-trip call's round, and the retry that continues it.
        calls.push(CallEvent {
            outcome: Outcome::InputRequired,
            scope: Scope::Stateless {
                group: "stateless:mcp/0.1.0@127.0.0.1".into(),
                exchange: 3,
            },
            ..base.clone()
        });
        for c in [Id::Num("2".into()), Id::Str("r\"1".into())] {
            calls.push(CallEvent {
                continues: Some(c),
                task: None,
                ..base.clone()
            });
        }
        for outcome in [
            Outcome::Error {
                code: -32601,
                message: "Method \"x\" not found".into(),
            },
            Outcome::Refused {
                rule: "tools/*=10/s".into(),
            },
            Outcome::Rejected { status: 429 },
            Outcome::Missing {
                reason: "no reply within 30 s".into(),
            },
        ] {
            calls.push(CallEvent {
                outcome,
                scope: Scope::Exchange(u64::MAX),
                direction: Direction::ClientToServer,
                target: None,
                id: Id::Num("12345678901234567890".into()),
                latency_us: None,
                anomalies: vec![],
                request_index: None,
                response_index: None,
                ..base.clone()
            });
        }
        // Ids written in place or through serde, and a session scope that needs no escaping.
        for n in ["0", "-0", "-7", "42", "1.5", "1e3", "01", "-", "", "x"] {
            calls.push(CallEvent {
                id: Id::Num(n.into()),
                scope: Scope::Session("f3e7159a43955c476660e7949b898fe7".into()),
                ..base.clone()
            });
        }
        calls.push(CallEvent {
            id: Id::Null,
            ..base
        });
        for c in calls {
            assert_written_as_serde_writes(Event::Call(c));
        }
    }

    #[test]
    fn http_lines_are_what_serde_writes() {
        use crate::events::{Headers, HttpEvent};
        let mut hm = http::HeaderMap::new();
        hm.insert("host", http::HeaderValue::from_static("127.0.0.1:9000"));
        hm.append("x-a", http::HeaderValue::from_static("say \"hi\" \\ there"));
        hm.append("x-a", http::HeaderValue::from_static("second"));
        hm.insert("x-tab", http::HeaderValue::from_static("a\tb"));
        hm.insert("x-end", http::HeaderValue::from_static("~ end\\"));
        hm.insert(
            "x-bin",
            http::HeaderValue::from_bytes(b"caf\xe9\t").unwrap(),
        );
        let events = [
            HttpEvent::Request {
                ts: 1_796_015_737_927_874_787,
                exchange: 3,
                method: "POST".into(),
                path: "/mcp?sessionId=a\"b".into(),
                peer: "[::1]:4000".into(),
                session: Some("s\u{e9}ss\u{1}".into()),
                protocol_version: Some("2025-06-18".into()),
                headers: Headers::from(&hm),
            },
            HttpEvent::Request {
                ts: 1,
                exchange: 0,
                method: "GET".into(),
                path: "/".into(),
                peer: Default::default(),
                session: None,
                protocol_version: None,
                headers: Headers::default(),
            },
            HttpEvent::Response {
                ts: 2,
                exchange: 3,
                status: 200,
                content_type: Some("text/event-stream".into()),
                headers: Headers::from(&hm),
                local: None,
            },
            HttpEvent::Response {
                ts: 2,
                exchange: 3,
                status: 502,
                content_type: None,
                headers: Headers::default(),
                local: Some("upstream unreachable: \"refused\"".into()),
            },
            HttpEvent::Endpoint {
                ts: 3,
                exchange: 4,
                url: "/messages/?session_id=a\"b".into(),
            },
            HttpEvent::AgentCard {
                ts: 4,
                exchange: 4,
                path: "/.well-known/agent-card.json".into(),
                card: r#"{"name":"a \"b\"","capabilities":{"streaming":true}}"#.into(),
            },
            HttpEvent::End {
                ts: 5,
                exchange: u64::MAX,
                reason: "client went away: \"reset\"".into(),
                bytes: 1 << 40,
            },
        ];
        for h in events {
            assert_written_as_serde_writes(Event::Http(h));
        }
    }

    #[test]
    fn message_lines_are_what_serde_writes() {
        use crate::events::{Direction, Scope, Transport};
        use crate::rpc::Kind;
        let base = MessageEvent {
            ts: 1_796_015_737_927_874_787,
            exchange: 7,
            scope: Scope::Session("ab\"c".into()),
            direction: Direction::ServerToClient,
            transport: Transport::Sse,
            kind: Kind::Request,
            id: Some(crate::rpc::Id::Str("x\u{e9}\"".into())),
            method: Some("tools/call".into()),
            target: Some("se\u{e9}arch \"q\"".into()),
            batch_index: Some(3),
            batch_len: Some(5),
            sse_id: Some("ev-1\n".into()),
            message: bytes::Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":"x\u00e9","method":"m", "params" : [1, 2.50]}"#,
            ),
            unparsed: false,
            binary: false,
        };
        let numeric = MessageEvent {
            id: Some(crate::rpc::Id::Num("12345678901234567890".into())),
            kind: Kind::Result,
            ..base.clone()
        };
        let minimal = MessageEvent {
            scope: Scope::Exchange(9),
            id: None,
            method: None,
            target: None,
            batch_index: None,
            batch_len: None,
            sse_id: None,
            kind: Kind::Notification,
            ..base.clone()
        };
        let not_json = MessageEvent {
            kind: Kind::Invalid,
            message: bytes::Bytes::from_static(b"{\"jsonrpc\": \xff"),
            unparsed: true,
            ..minimal.clone()
        };
        let invalid_json = MessageEvent {
            kind: Kind::Invalid,
            message: bytes::Bytes::from_static(b"[1, 2]"),
            ..minimal.clone()
        };
        let binary = MessageEvent {
            binary: true,
            ..base.clone()
        };
        for m in [base, numeric, minimal, not_json, invalid_json, binary] {
            assert_written_as_serde_writes(Event::Message(m));
        }
    }
}
