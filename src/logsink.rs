//! The headless log printer: a bus subscriber that writes to stdout.
//!
//! `text`: one line per finished call (time, session, direction, method — the tool name for
//! `tools/call` —, id, outcome, latency, anomaly codes), one per notification, one per anomaly,
//! one per authorization exchange around an MCP endpoint (a 401/403 and its `WWW-Authenticate`,
//! an OAuth discovery document), printed as they happen. `json`: every event as one JSON line.
//! The printer may fall behind; then the bus drops events for it and it says how many it
//! missed.

use crate::cli::LogFormat;
use crate::events::{Event, Interest, Subscription};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, UNIX_EPOCH};

fn ts(ns: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_nanos(ns);
    humantime::format_rfc3339_millis(t).to_string()
}

/// The events the text log shows.
pub const TEXT_INTEREST: Interest = Interest::CALL
    // Of messages it prints notifications only: it does not make the inspector build the
    // message events of every request and reply.
    .and(Interest::NOTIFICATIONS)
    .and(Interest::ANOMALY)
    .and(Interest::REFUSAL)
    .and(Interest::FAULT)
    .and(Interest::NOTICE)
    .and(Interest::HTTP_AUTH);

/// A call's line written straight into `out` (the line the log prints most: no piece of it is
/// built as a string of its own first).
fn write_call(out: &mut impl Write, c: &crate::events::CallEvent) -> std::io::Result<()> {
    let t = UNIX_EPOCH + Duration::from_nanos(c.ts);
    write!(
        out,
        "{} {} {} {}",
        humantime::format_rfc3339_millis(t),
        c.scope.short(),
        c.direction.arrow(),
        c.method
    )?;
    if let Some(t) = &c.target {
        write!(out, ":{t}")?;
    }
    write!(out, " id={} ", c.id)?;
    match &c.outcome {
        crate::events::Outcome::Result => out.write_all(b"result")?,
        o => out.write_all(o.label().as_bytes())?,
    }
    if let Some(us) = c.latency_us {
        write!(out, " {:.1}ms", us as f64 / 1000.0)?;
    }
    if !c.anomalies.is_empty() {
        out.write_all(b" [")?;
        for (i, a) in c.anomalies.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            out.write_all(a.as_bytes())?;
        }
        out.write_all(b"]")?;
    }
    out.write_all(b"\n")
}

/// Writes one event's text line (with its newline) into `out`; false for events the text log
/// does not show.
pub fn write_text(out: &mut impl Write, ev: &Event) -> std::io::Result<bool> {
    if let Event::Call(c) = ev {
        write_call(out, c)?;
        return Ok(true);
    }
    match text_line(ev) {
        Some(l) => writeln!(out, "{l}").map(|()| true),
        None => Ok(false),
    }
}

/// Formats one event as a text line, or `None` for events the text log does not show.
pub fn text_line(ev: &Event) -> Option<String> {
    match ev {
        Event::Call(c) => {
            let mut v = Vec::with_capacity(128);
            write_call(&mut v, c).ok()?;
            v.pop(); // its newline
            String::from_utf8(v).ok()
        }
        Event::Message(m) if m.kind == crate::rpc::Kind::Notification => Some(format!(
            "{} {} {} {} notification",
            ts(m.ts),
            m.scope.short(),
            m.direction.arrow(),
            m.method.as_deref().unwrap_or("?"),
        )),
        Event::Anomaly(a) => Some(format!(
            "{} {} ANOMALY {} {:?}{}: {}",
            ts(a.ts),
            a.scope.short(),
            a.code,
            a.severity,
            a.id.as_ref()
                .map(|i| format!(" id={i}"))
                .unwrap_or_default(),
            a.message
        )),
        Event::Refusal(r) => Some(format!(
            "{} {} {} {}{} rule={:?} retry_after={:.3}s",
            ts(r.ts),
            r.scope.short(),
            if r.shadow { "WOULD-REFUSE" } else { "REFUSED" },
            r.method,
            r.id.as_ref()
                .map(|i| format!(" id={i}"))
                .unwrap_or_default(),
            r.rule,
            r.retry_after_ms as f64 / 1000.0
        )),
        Event::Notice(n) => Some(format!("{} NOTICE {}: {}", ts(n.ts), n.what, n.message)),
        Event::Fault(f) => Some(format!(
            "{} {} INJECTED {}{}{} rule={:?}: {}",
            ts(f.ts),
            f.scope.short(),
            f.action,
            f.method
                .as_deref()
                .map(|m| format!(" {m}"))
                .unwrap_or_default(),
            f.id.as_ref()
                .map(|i| format!(" id={i}"))
                .unwrap_or_default(),
            f.injected,
            f.detail
        )),
        Event::Http(crate::events::HttpEvent::Auth {
            ts: t,
            exchange,
            method,
            path,
            status,
            www_authenticate,
        }) => Some(format!(
            "{} #{exchange} http {method} {path} HTTP {status}{}",
            ts(*t),
            www_authenticate
                .as_ref()
                .map(|w| format!(" WWW-Authenticate: {w}"))
                .unwrap_or_default()
        )),
        Event::Http(crate::events::HttpEvent::Binary {
            ts: t,
            exchange,
            direction,
            len,
        }) => Some(format!(
            "{} #{exchange} ws {} binary message, {len} bytes (not parsed)",
            ts(*t),
            direction.arrow()
        )),
        _ => None,
    }
}

/// How often the printer takes its events off the bus.
pub const DRAIN: Duration = Duration::from_millis(20);

/// Runs the printer until the bus closes.
pub async fn run(mut sub: Subscription, format: LogFormat, out: impl Write + Send) {
    // Lines are gathered and written once per batch (a line each would be a write each: on a
    // terminal or a pipe, stdout flushes at every newline). Events are taken off the bus on a
    // timer, as the dashboard takes them, not as they come: waiting in `recv` would have every
    // call's publisher wake this task (a cross-thread wake-up per call costs more than its line);
    // a line is printed at most `DRAIN` late.
    let mut out = std::io::BufWriter::with_capacity(64 << 10, out);
    let mut reported_drops = 0;
    let mut tick = tokio::time::interval(DRAIN);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut open = true;
    while open {
        tick.tick().await;
        let mut wrote = false;
        loop {
            let ev = match sub.rx.try_recv() {
                Ok(ev) => ev,
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            };
            wrote = true;
            match format {
                LogFormat::Off => {}
                LogFormat::Text => {
                    let _ = write_text(&mut out, &ev);
                }
                LogFormat::Json => {
                    if serde_json::to_writer(&mut out, &*ev).is_ok() {
                        let _ = out.write_all(b"\n");
                    }
                }
            }
        }
        let dropped = sub.dropped.load(Ordering::Relaxed);
        if dropped > reported_drops {
            let _ = writeln!(
                out,
                "rpctap: the log fell behind and skipped {} events",
                dropped - reported_drops
            );
            reported_drops = dropped;
            wrote = true;
        }
        if wrote {
            let _ = out.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_line_reads_as_it_always_did() {
        let c = crate::events::CallEvent {
            ts: 1_796_015_737_927_000_000,
            exchange: 3,
            scope: crate::events::Scope::Exchange(3),
            direction: crate::events::Direction::ClientToServer,
            method: "tools/call".into(),
            target: Some("search".into()),
            id: crate::rpc::Id::Num("7".into()),
            outcome: crate::events::Outcome::Error {
                code: -32602,
                message: "bad".into(),
            },
            latency_us: Some(1234),
            anomalies: vec!["MCP_INPUT_SCHEMA", "TOOL_ERROR"],
            request_index: None,
            response_index: None,
            continues: None,
            trace: None,
        };
        let line = text_line(&Event::Call(c.clone())).unwrap();
        assert_eq!(
            line,
            "2026-11-30T05:15:37.927Z #3 c→s tools/call:search id=7 error -32602 1.2ms [MCP_INPUT_SCHEMA,TOOL_ERROR]"
        );
        let mut out = Vec::new();
        assert!(write_text(&mut out, &Event::Call(c)).unwrap());
        assert_eq!(String::from_utf8(out).unwrap(), format!("{line}\n"));
    }

    #[test]
    fn an_authorization_exchange_is_one_text_line_with_its_challenge() {
        let ev = Event::Http(crate::events::HttpEvent::Auth {
            ts: 0,
            exchange: 3,
            method: "POST".into(),
            path: "/mcp".into(),
            status: 401,
            www_authenticate: Some("Bearer realm=\"x\"".into()),
        });
        let line = text_line(&ev).unwrap();
        assert!(
            line.ends_with("#3 http POST /mcp HTTP 401 WWW-Authenticate: Bearer realm=\"x\""),
            "{line}"
        );
        assert!(TEXT_INTEREST.contains(Interest::HTTP_AUTH));
    }
}
