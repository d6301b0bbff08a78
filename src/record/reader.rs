//! Reading recordings back: every part of a rotated recording, line by line, into the one
//! event model ([`Event`]) the live run published — the same types the dashboard, `check`,
//! `export`, `replay` and `mock` read live. A torn line (the last one after a `kill -9`) is
//! skipped with a warning; ids and messages are kept exactly as the wire had them.

use super::{part_path, Error};
use crate::events::{CallEvent, Event, HttpEvent, MessageEvent};
use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize)]
struct Tag<'a> {
    #[serde(borrow)]
    event: std::borrow::Cow<'a, str>,
}

/// A whole recording, all parts.
#[derive(Debug, Default)]
pub struct Capture {
    pub header: serde_json::Value,
    pub events: Vec<Event>,
    /// Where each run of rpctap that wrote into this recording starts: the index of its first
    /// event and its header (more than one when a run appended with `--record-append`).
    pub runs: Vec<(usize, serde_json::Value)>,
    /// Lines skipped, and why.
    pub warnings: Vec<String>,
    /// Where each event was read: the file (an index into `parts`) and its line there, from 1
    /// (empty for a capture not read from files: a reference into the recording is then
    /// `None`).
    pub lines: Vec<(u32, u32)>,
    /// The files read, in order (the recording, then its rotated parts).
    pub parts: Vec<String>,
}

impl Capture {
    /// The file and line event `i` was read from.
    pub fn line_of(&self, i: usize) -> Option<(&str, u32)> {
        let (part, line) = *self.lines.get(i)?;
        Some((self.parts.get(part as usize)?.as_str(), line))
    }

    pub fn messages(&self) -> impl Iterator<Item = &MessageEvent> {
        self.events.iter().filter_map(|e| match e {
            Event::Message(m) => Some(m),
            _ => None,
        })
    }
    pub fn calls(&self) -> impl Iterator<Item = &CallEvent> {
        self.events.iter().filter_map(|e| match e {
            Event::Call(c) => Some(c),
            _ => None,
        })
    }
    pub fn http(&self) -> impl Iterator<Item = &HttpEvent> {
        self.events.iter().filter_map(|e| match e {
            Event::Http(h) => Some(h),
            _ => None,
        })
    }
    /// The runs: each run's header and its events.
    pub fn run_slices(&self) -> Vec<(&serde_json::Value, &[Event])> {
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

/// One line of a recording (or of the live feed, which writes the same lines) as its event.
pub fn parse_line(line: &str) -> Result<Event, String> {
    let e = |e: serde_json::Error| e.to_string();
    let tag: Tag = serde_json::from_str(line).map_err(e)?;
    Ok(match &*tag.event {
        "http" => Event::Http(serde_json::from_str(line).map_err(e)?),
        "message" => {
            let mut m: MessageEvent = serde_json::from_str(line).map_err(e)?;
            if m.unparsed {
                // A frame that was not JSON is written as a string of its text.
                if let Ok(text) = serde_json::from_slice::<String>(&m.message) {
                    m.message = bytes::Bytes::from(text);
                }
            }
            Event::Message(m)
        }
        "call" => Event::Call(serde_json::from_str(line).map_err(e)?),
        "anomaly" => Event::Anomaly(serde_json::from_str(line).map_err(e)?),
        "refusal" => Event::Refusal(serde_json::from_str(line).map_err(e)?),
        "notice" => Event::Notice(serde_json::from_str(line).map_err(e)?),
        "gap" => Event::Gap(serde_json::from_str(line).map_err(e)?),
        "stderr" => Event::Stderr(serde_json::from_str(line).map_err(e)?),
        "fault" => Event::Fault(serde_json::from_str(line).map_err(e)?),
        other => return Err(format!("unknown event {other:?}")),
    })
}

/// Parses the text of one part into `rec`.
pub fn parse_part(text: &str, name: &str, rec: &mut Capture, first: bool) -> Result<(), String> {
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
    let part = rec.parts.len() as u32;
    rec.parts.push(name.to_string());
    if first || h.get("appended").and_then(|v| v.as_bool()) == Some(true) {
        rec.runs.push((rec.events.len(), h));
    }
    // One event a line, nearly: room for them at once, not by doubling (a large recording's
    // events are hundreds of megabytes, copied at each growth).
    let count = memchr::memchr_iter(b'\n', text.as_bytes()).count();
    rec.events.reserve(count);
    rec.lines.reserve(count);
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
            Ok(ev) => {
                rec.events.push(ev);
                rec.lines.push((part, n));
            }
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

/// Whether a file is a recording: its first bytes open a recording's header (what a command
/// that takes a recording or something else looks at before choosing).
pub fn is_recording(path: &Path) -> bool {
    let mut head = [0u8; 19];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok()
        && head.starts_with(b"{\"rpctap_recording\"")
}

/// Reads a recording and its rotated parts (`FILE`, `FILE.1`, …).
pub fn read(path: &Path) -> Result<Capture, Error> {
    let mut rec = Capture::default();
    let mut n = 0;
    loop {
        let p = part_path(path, n);
        let text = match std::fs::read(&p) {
            // Valid UTF-8 (as rpctap writes it) is taken as it is, not copied.
            Ok(b) => String::from_utf8(b)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            Err(e) if n > 0 && e.kind() == std::io::ErrorKind::NotFound => break,
            Err(source) => return Err(Error::Read { path: p, source }),
        };
        parse_part(&text, &p.display().to_string(), &mut rec, n == 0).map_err(|why| {
            Error::Format {
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
    msgs: impl IntoIterator<Item = &'a MessageEvent>,
) -> Vec<Vec<&'a MessageEvent>> {
    let mut out: Vec<Vec<&MessageEvent>> = Vec::new();
    let mut open: Option<Vec<&MessageEvent>> = None;
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
pub fn whole_text(members: &[&MessageEvent]) -> String {
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
        let mut rec = Capture::default();
        parse_part(text, "t", &mut rec, true).unwrap();
        assert_eq!(rec.events.len(), 1);
        assert_eq!(rec.warnings.len(), 1);
        assert!(rec.warnings[0].contains("torn"));
        let m = rec.messages().next().unwrap();
        assert_eq!(
            m.id_text().as_deref(),
            Some("1.0"),
            "ids keep their exact text"
        );
    }

    #[test]
    fn not_a_recording_is_a_clear_error() {
        let mut rec = Capture::default();
        assert!(parse_part("{\"request\":[]}\n", "t", &mut rec, true)
            .unwrap_err()
            .contains("rpctap_recording"));
    }
}
