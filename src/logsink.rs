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
    .and(Interest::MESSAGE)
    .and(Interest::ANOMALY)
    .and(Interest::REFUSAL)
    .and(Interest::NOTICE)
    .and(Interest::HTTP_AUTH);

/// Formats one event as a text line, or `None` for events the text log does not show.
pub fn text_line(ev: &Event) -> Option<String> {
    match ev {
        Event::Call(c) => {
            let method = match &c.target {
                Some(t) => format!("{}:{}", c.method, t),
                None => c.method.to_string(),
            };
            let latency = c
                .latency_us
                .map(|us| format!(" {:.1}ms", us as f64 / 1000.0))
                .unwrap_or_default();
            let anomalies = if c.anomalies.is_empty() {
                String::new()
            } else {
                format!(" [{}]", c.anomalies.join(","))
            };
            Some(format!(
                "{} {} {} {} id={} {}{}{}",
                ts(c.ts),
                c.scope.short(),
                c.direction.arrow(),
                method,
                c.id,
                c.outcome.label(),
                latency,
                anomalies
            ))
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

/// Runs the printer until the bus closes.
pub async fn run(mut sub: Subscription, format: LogFormat, mut out: impl Write + Send) {
    let mut reported_drops = 0;
    let mut batch = Vec::with_capacity(256);
    while sub.rx.recv_many(&mut batch, 256).await > 0 {
        for ev in batch.drain(..) {
            let line = match format {
                LogFormat::Off => None,
                LogFormat::Text => text_line(&ev),
                LogFormat::Json => serde_json::to_string(&*ev).ok(),
            };
            if let Some(l) = line {
                let _ = writeln!(out, "{l}");
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
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
