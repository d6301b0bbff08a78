//! Reading recordings back: every part of a rotated recording, line by line. A torn line (the
//! last one after a `kill -9`) is skipped with a warning; ids and messages are kept as their
//! exact JSON text.

//!
//! The lines are read into the same types the live events use where they have a meaning of
//! their own: [`Direction`], [`Transport`], [`Kind`], [`Outcome`], [`Severity`].

use super::{part_path, RecordError};
use crate::events::{Direction, Outcome, Severity, Transport};
use crate::rpc::Kind;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::path::Path;

/// An HTTP event of a recording.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "phase", rename_all = "lowercase")]
pub enum RecHttp {
    Request {
        ts: u64,
        exchange: u64,
        method: String,
        path: String,
        #[serde(default)]
        session: Option<String>,
        #[serde(default)]
        protocol_version: Option<String>,
        #[serde(default)]
        headers: Vec<(String, String)>,
    },
    Response {
        ts: u64,
        exchange: u64,
        status: u16,
        #[serde(default)]
        content_type: Option<String>,
        #[serde(default)]
        headers: Vec<(String, String)>,
        /// rpctap answered itself, and why.
        #[serde(default)]
        local: Option<String>,
    },
    /// A legacy stream announced its message endpoint.
    Endpoint { ts: u64, exchange: u64, url: String },
    /// An authorization exchange around an MCP endpoint (shown, not re-inspected: the
    /// request and response lines carry what the inspector needs).
    Auth {
        ts: u64,
        exchange: u64,
        method: String,
        path: String,
        status: u16,
        #[serde(default)]
        www_authenticate: Option<String>,
    },
    /// A WebSocket's binary message (shown, not parsed).
    Binary {
        ts: u64,
        exchange: u64,
        direction: Direction,
        len: u64,
    },
    End {
        ts: u64,
        exchange: u64,
        reason: String,
    },
}

impl RecHttp {
    pub fn ts(&self) -> u64 {
        match self {
            RecHttp::Request { ts, .. }
            | RecHttp::Response { ts, .. }
            | RecHttp::Endpoint { ts, .. }
            | RecHttp::Auth { ts, .. }
            | RecHttp::Binary { ts, .. }
            | RecHttp::End { ts, .. } => *ts,
        }
    }
    pub fn exchange(&self) -> u64 {
        match self {
            RecHttp::Request { exchange, .. }
            | RecHttp::Response { exchange, .. }
            | RecHttp::Endpoint { exchange, .. }
            | RecHttp::Auth { exchange, .. }
            | RecHttp::Binary { exchange, .. }
            | RecHttp::End { exchange, .. } => *exchange,
        }
    }
}

/// A first value of a header, by name in any letter case.
pub fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A JSON-RPC message of a recording.
#[derive(Debug, Clone, Deserialize)]
pub struct RecMessage {
    pub ts: u64,
    pub exchange: u64,
    pub scope: String,
    pub direction: Direction,
    pub transport: Transport,
    pub kind: Kind,
    #[serde(default)]
    pub id: Option<Box<RawValue>>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub batch_index: Option<u32>,
    /// The size of the batch it was part of (with `batch_index`).
    #[serde(default)]
    pub batch_len: Option<u32>,
    #[serde(default)]
    pub sse_id: Option<String>,
    pub message: Box<RawValue>,
    /// The frame was not JSON: `message` is a JSON string holding its text.
    #[serde(default)]
    pub unparsed: bool,
    /// It came in a WebSocket binary message.
    #[serde(default)]
    pub binary: bool,
}

impl RecMessage {
    pub fn is_c2s(&self) -> bool {
        self.direction == Direction::ClientToServer
    }
    pub fn is_response(&self) -> bool {
        self.kind.is_response()
    }
    /// The id as exact JSON text.
    pub fn id_text(&self) -> Option<&str> {
        self.id.as_deref().map(RawValue::get)
    }
    /// The frame's text as it was on the wire (an unparsed frame's text, decoded).
    pub fn wire_text(&self) -> std::borrow::Cow<'_, str> {
        if self.unparsed {
            if let Ok(s) = serde_json::from_str::<String>(self.message.get()) {
                return s.into();
            }
        }
        self.message.get().into()
    }
    /// An empty batch (`[]`): a frame with no message in it.
    pub fn is_empty_batch(&self) -> bool {
        self.batch_len == Some(0)
    }
}

/// A finished call of a recording.
#[derive(Debug, Clone, Deserialize)]
pub struct RecCall {
    pub ts: u64,
    pub exchange: u64,
    pub scope: String,
    pub direction: Direction,
    pub method: String,
    #[serde(default)]
    pub target: Option<String>,
    pub id: Box<RawValue>,
    #[serde(flatten)]
    pub outcome: Outcome,
    #[serde(default)]
    pub latency_us: Option<u64>,
    #[serde(default)]
    pub anomalies: Vec<String>,
}

/// An anomaly of a recording.
#[derive(Debug, Clone, Deserialize)]
pub struct RecAnomaly {
    pub ts: u64,
    pub exchange: u64,
    pub scope: String,
    pub code: String,
    pub severity: Severity,
    #[serde(default)]
    pub id: Option<Box<RawValue>>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub direction: Option<crate::events::Direction>,
    #[serde(default)]
    pub batch_index: Option<u32>,
    pub message: String,
}

/// A rate-limit refusal (or, `shadow`, a would-be one) of a recording.
#[derive(Debug, Clone, Deserialize)]
pub struct RecRefusal {
    pub ts: u64,
    pub exchange: u64,
    pub scope: String,
    pub method: String,
    #[serde(default)]
    pub id: Option<Box<RawValue>>,
    pub rule: String,
    #[serde(default)]
    pub shadow: bool,
    #[serde(default)]
    pub retry_after_ms: u64,
}

/// One line of a recording.
#[derive(Debug, Clone)]
pub enum RecEvent {
    Http(RecHttp),
    Message(RecMessage),
    Call(RecCall),
    Anomaly(RecAnomaly),
    Refusal(RecRefusal),
    /// `notice` and `gap` lines, kept as they are.
    Other(serde_json::Value),
}

impl RecEvent {
    /// The event's time (ns since the epoch), when it has one.
    pub fn ts(&self) -> Option<u64> {
        match self {
            RecEvent::Http(h) => Some(h.ts()),
            RecEvent::Message(m) => Some(m.ts),
            RecEvent::Call(c) => Some(c.ts),
            RecEvent::Anomaly(a) => Some(a.ts),
            RecEvent::Refusal(r) => Some(r.ts),
            RecEvent::Other(v) => v.get("ts").and_then(|t| t.as_u64()),
        }
    }
}

#[derive(Deserialize)]
struct Tag<'a> {
    #[serde(borrow)]
    event: std::borrow::Cow<'a, str>,
}

/// A whole recording, all parts.
#[derive(Debug, Default)]
pub struct Recording {
    pub header: serde_json::Value,
    pub events: Vec<RecEvent>,
    /// Where each run of rpctap that wrote into this recording starts: the index of its first
    /// event and its header (more than one when a run appended with `--record-append`).
    pub runs: Vec<(usize, serde_json::Value)>,
    /// Lines skipped, and why.
    pub warnings: Vec<String>,
}

impl Recording {
    pub fn messages(&self) -> impl Iterator<Item = &RecMessage> {
        self.events.iter().filter_map(|e| match e {
            RecEvent::Message(m) => Some(m),
            _ => None,
        })
    }
    pub fn calls(&self) -> impl Iterator<Item = &RecCall> {
        self.events.iter().filter_map(|e| match e {
            RecEvent::Call(c) => Some(c),
            _ => None,
        })
    }
    pub fn http(&self) -> impl Iterator<Item = &RecHttp> {
        self.events.iter().filter_map(|e| match e {
            RecEvent::Http(h) => Some(h),
            _ => None,
        })
    }
    /// Scopes in order of first appearance.
    pub fn scopes(&self) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for m in self.messages() {
            if seen.insert(m.scope.as_str()) {
                out.push(m.scope.clone());
            }
        }
        out
    }

    /// The runs: each run's header and its events.
    pub fn run_slices(&self) -> Vec<(&serde_json::Value, &[RecEvent])> {
        if self.runs.is_empty() {
            return vec![(&self.header, &self.events[..])];
        }
        self.runs
            .iter()
            .enumerate()
            .map(|(i, (start, h))| {
                let end = self.runs.get(i + 1).map_or(self.events.len(), |r| r.0);
                (h, &self.events[*start..end])
            })
            .collect()
    }
}

pub fn parse_line(line: &str) -> Result<RecEvent, String> {
    let tag: Tag = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let ev = match &*tag.event {
        "http" => RecEvent::Http(serde_json::from_str(line).map_err(|e| e.to_string())?),
        "message" => RecEvent::Message(serde_json::from_str(line).map_err(|e| e.to_string())?),
        "call" => RecEvent::Call(serde_json::from_str(line).map_err(|e| e.to_string())?),
        "anomaly" => RecEvent::Anomaly(serde_json::from_str(line).map_err(|e| e.to_string())?),
        "refusal" => RecEvent::Refusal(serde_json::from_str(line).map_err(|e| e.to_string())?),
        _ => RecEvent::Other(serde_json::from_str(line).map_err(|e| e.to_string())?),
    };
    Ok(ev)
}

/// Parses the text of one part into `rec`.
pub fn parse_part(text: &str, name: &str, rec: &mut Recording, first: bool) -> Result<(), String> {
    let mut lines = text.split('\n').peekable();
    let header = lines.next().unwrap_or("");
    let h: serde_json::Value = serde_json::from_str(header)
        .map_err(|_| "its first line is not a recording header".to_string())?;
    if h.get("rpctap_recording").and_then(|v| v.as_u64()).is_none() {
        return Err("its first line has no `rpctap_recording` version".into());
    }
    if h["rpctap_recording"].as_u64() != Some(super::FORMAT_VERSION) {
        return Err(format!(
            "format version {} is not supported (this rpctap reads {})",
            h["rpctap_recording"],
            super::FORMAT_VERSION
        ));
    }
    if first {
        rec.header = h.clone();
    }
    if first || h.get("appended").and_then(|v| v.as_bool()) == Some(true) {
        rec.runs.push((rec.events.len(), h));
    }
    let mut n = 1;
    while let Some(line) = lines.next() {
        n += 1;
        let last = lines.peek().is_none_or(|l| {
            l.is_empty() && {
                // the text ends with "\n": the empty remainder is not a line
                true
            }
        });
        if line.is_empty() {
            continue;
        }
        if line.starts_with("{\"rpctap_recording\"") {
            // A later run appended here (`--record-append`): its own header.
            match serde_json::from_str::<serde_json::Value>(line) {
                Ok(h) => rec.runs.push((rec.events.len(), h)),
                Err(e) => rec.warnings.push(format!(
                    "{name}: line {n} is not a valid header ({e}); skipped"
                )),
            }
            continue;
        }
        match parse_line(line) {
            Ok(ev) => rec.events.push(ev),
            Err(e) => {
                let w = if last {
                    format!(
                        "{name}: line {n} is torn (the recorder was stopped mid-write); skipped"
                    )
                } else {
                    format!("{name}: line {n} is not a valid event ({e}); skipped")
                };
                tracing::warn!("{w}");
                rec.warnings.push(w);
            }
        }
    }
    Ok(())
}

/// Reads a recording and its rotated parts (`FILE`, `FILE.1`, …).
pub fn read(path: &Path) -> Result<Recording, RecordError> {
    let mut rec = Recording::default();
    let mut n = 0;
    loop {
        let p = part_path(path, n);
        let text = match std::fs::read(&p) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if n > 0 && e.kind() == std::io::ErrorKind::NotFound => break,
            Err(source) => return Err(RecordError::Read { path: p, source }),
        };
        parse_part(&text, &p.display().to_string(), &mut rec, n == 0).map_err(|why| {
            RecordError::Format {
                path: p.clone(),
                why,
            }
        })?;
        n += 1;
    }
    Ok(rec)
}

/// The recorded messages as the wire carried them: each batch's members (recorded one by one)
/// gathered back into one message, in order.
pub fn whole_messages<'a>(
    msgs: impl IntoIterator<Item = &'a RecMessage>,
) -> Vec<Vec<&'a RecMessage>> {
    let mut out: Vec<Vec<&RecMessage>> = Vec::new();
    let mut open: Option<Vec<&RecMessage>> = None;
    for m in msgs {
        match (m.batch_index, m.batch_len) {
            (Some(i), Some(n)) => {
                let cur = open.get_or_insert_with(Vec::new);
                cur.push(m);
                if i + 1 >= n {
                    out.extend(open.take());
                }
            }
            _ => {
                out.extend(open.take());
                out.push(vec![m]);
            }
        }
    }
    out.extend(open.take());
    out
}

/// One message's text from its members ([`whole_messages`]): a batch as an array.
pub fn whole_text(members: &[&RecMessage]) -> String {
    if members.len() == 1 && members[0].batch_index.is_none() {
        return members[0].wire_text().into_owned();
    }
    let parts: Vec<String> = members.iter().map(|m| m.wire_text().into_owned()).collect();
    format!("[{}]", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_last_line_is_skipped() {
        let text = "{\"rpctap_recording\":1}\n{\"event\":\"message\",\"ts\":1,\"exchange\":1,\"scope\":\"exchange:1\",\"direction\":\"c2s\",\"transport\":\"json\",\"kind\":\"request\",\"id\":1.0,\"method\":\"m\",\"message\":{\"jsonrpc\":\"2.0\",\"id\":1.0,\"method\":\"m\"}}\n{\"event\":\"call\",\"ts\":";
        let mut rec = Recording::default();
        parse_part(text, "t", &mut rec, true).unwrap();
        assert_eq!(rec.events.len(), 1);
        assert_eq!(rec.warnings.len(), 1);
        assert!(rec.warnings[0].contains("torn"));
        let m = rec.messages().next().unwrap();
        assert_eq!(m.id_text(), Some("1.0"), "ids keep their exact text");
    }

    #[test]
    fn not_a_recording_is_a_clear_error() {
        let mut rec = Recording::default();
        assert!(parse_part("{\"request\":[]}\n", "t", &mut rec, true)
            .unwrap_err()
            .contains("rpctap_recording"));
    }
}
