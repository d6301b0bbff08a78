//! The headless log printer: a bus subscriber that writes to stdout.
//!
//! `text`: one line per finished call (time, session, direction, method — the tool name for
//! `tools/call` —, id, outcome, latency, anomaly codes), one per notification, one per anomaly,
//! one per authorization exchange around an MCP endpoint (a 401/403 and its `WWW-Authenticate`,
//! an OAuth discovery document), printed as they happen. `json`: every event as one JSON line.
//! The printer may fall behind; then it drops lines and says how many it missed.
//!
//! The text log is a bus sink ([`TextLines`]): each line is written on the thread that
//! publishes its event, into that thread's own buffer ([`crate::events::lines`]: no event
//! crosses threads, no two cores write the same cache line, nothing is queued or allocated per
//! call), and the printer takes every buffer each [`DRAIN`], merges their lines by time and
//! writes them in one go. The JSON log reads the bus through a queue, as the other subscribers do.

use crate::events::lines::LineShards;
use crate::events::{Event, Interest, Sink, Subscription};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
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

/// `ns` as RFC 3339 with milliseconds (`2026-11-30T05:15:37.927Z`): the date and time to the
/// second are formatted once per second and kept (lines come thousands a second), the
/// milliseconds written as digits.
fn write_ts(out: &mut impl Write, ns: u64) -> std::io::Result<()> {
    thread_local! {
        static SECOND: std::cell::Cell<(u64, [u8; 19])> = const { std::cell::Cell::new((u64::MAX, [0; 19])) };
    }
    let secs = ns / 1_000_000_000;
    let ms = (ns / 1_000_000 % 1000) as u16;
    let prefix = SECOND.with(|c| {
        let (s, p) = c.get();
        if s == secs {
            return Some(p);
        }
        let text =
            humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string();
        // `YYYY-MM-DDTHH:MM:SSZ`; a year past 9999 is written the slow way.
        let p: [u8; 19] = text.as_bytes().get(..19)?.try_into().ok()?;
        (text.len() == 20).then(|| {
            c.set((secs, p));
            p
        })
    });
    match prefix {
        Some(p) => {
            out.write_all(&p)?;
            let d = |n: u16| b'0' + (n % 10) as u8;
            out.write_all(&[b'.', d(ms / 100), d(ms / 10), d(ms), b'Z'])
        }
        None => write!(
            out,
            "{}",
            humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(ns))
        ),
    }
}

/// A call's line written straight into `out` (the line the log prints most: no piece of it is
/// built as a string of its own first, and nothing goes through `fmt` on the common path).
fn write_call(out: &mut impl Write, c: &crate::events::CallEvent) -> std::io::Result<()> {
    write_ts(out, c.ts)?;
    out.write_all(b" ")?;
    c.scope.write_short(out)?;
    out.write_all(b" ")?;
    out.write_all(c.direction.arrow().as_bytes())?;
    out.write_all(b" ")?;
    out.write_all(c.method.as_bytes())?;
    if let Some(t) = &c.target {
        out.write_all(b":")?;
        out.write_all(t.as_bytes())?;
    }
    out.write_all(b" id=")?;
    match &c.id {
        crate::rpc::Id::Num(n) => out.write_all(n.as_bytes())?,
        id => write!(out, "{id}")?,
    }
    out.write_all(b" ")?;
    c.outcome.write_label(out)?;
    if let Some(us) = c.latency_us {
        // Tenths of a millisecond, rounded: `1.2ms`.
        let tenths = (us + 50) / 100;
        out.write_all(b" ")?;
        out.write_all(itoa::Buffer::new().format(tenths / 10).as_bytes())?;
        out.write_all(&[b'.', b'0' + (tenths % 10) as u8])?;
        out.write_all(b"ms")?;
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
        Event::Http(crate::events::HttpEvent::AgentCard {
            ts: t,
            exchange,
            path,
            card,
        }) => Some(format!(
            "{} #{exchange} http GET {path} A2A agent card {}",
            ts(*t),
            crate::inspect::a2a::CardFacts::read(card).describe()
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

/// The text log's lines, written by the publishing threads into their own buffers
/// ([`LineShards`]); bounded (lines a full buffer refuses are reported as skipped).
#[derive(Debug)]
pub struct TextLines(LineShards);

/// Bytes of lines waiting for the printer, all buffers together (seconds of full load).
pub const TEXT_BYTES: usize = 16 << 20;

impl TextLines {
    pub fn new(total_bytes: usize) -> Arc<TextLines> {
        Arc::new(TextLines(LineShards::new(total_bytes)))
    }

    /// Lines skipped so far because a buffer was full.
    pub fn lost(&self) -> u64 {
        self.0.lost()
    }
}

impl Sink for TextLines {
    fn accept(&self, ev: &Event) {
        self.0.put(ev.ts(), |out| write_text(out, ev).map(drop));
    }
    fn name(&self) -> &'static str {
        "text log"
    }
}

/// Runs the text printer until the bus is gone (the printer holds the last reference to
/// `lines`), then prints what is left.
pub async fn run_text(lines: Arc<TextLines>, mut out: impl Write + Send) {
    // The batch is the buffer: one write a drain, no copy into a `BufWriter` of its own.
    let (mut bufs, mut batch) = (Vec::new(), Vec::new());
    let mut reported = 0;
    let mut tick = drain_timer();
    loop {
        tick.tick().await;
        let last = Arc::strong_count(&lines) == 1;
        let n = lines.0.drain(&mut bufs, &mut batch);
        let _ = out.write_all(&batch);
        batch.clear();
        end_drain(&mut out, n > 0, lines.lost(), &mut reported, "lines");
        if last {
            return;
        }
    }
}

/// Runs the JSON printer until the bus closes.
pub async fn run_json(mut sub: Subscription, out: impl Write + Send) {
    // Lines are gathered and written once per batch (a line each would be a write each: on a
    // terminal or a pipe, stdout flushes at every newline). Events are taken off the bus on a
    // timer, as the dashboard takes them, not as they come: waiting in `recv` would have every
    // call's publisher wake this task (a cross-thread wake-up per call costs more than its line);
    // a line is printed at most `DRAIN` late.
    let mut out = std::io::BufWriter::with_capacity(64 << 10, out);
    let mut reported_drops = 0;
    let mut tick = drain_timer();
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
            if serde_json::to_writer(&mut out, &*ev).is_ok() {
                let _ = out.write_all(b"\n");
            }
        }
        let dropped = sub.dropped.load(Ordering::Relaxed);
        end_drain(&mut out, wrote, dropped, &mut reported_drops, "events");
    }
}

/// The printers' timer: a drain every [`DRAIN`], late ones not made up for.
fn drain_timer() -> tokio::time::Interval {
    let mut tick = tokio::time::interval(DRAIN);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// Ends one drain of either printer: says how many `what` were skipped since the last report
/// (`skipped` counts them all), and flushes when anything was written.
fn end_drain(out: &mut impl Write, wrote: bool, skipped: u64, reported: &mut u64, what: &str) {
    let mut wrote = wrote;
    if skipped > *reported {
        let _ = writeln!(
            out,
            "rpctap: the log fell behind and skipped {} {what}",
            skipped - *reported
        );
        *reported = skipped;
        wrote = true;
    }
    if wrote {
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::lines::Lines;

    #[test]
    fn a_call_line_reads_as_it_always_did() {
        let bad = crate::events::Outcome::Error {
            code: -32602,
            message: "bad".into(),
        };
        let mut c = crate::events::CallEvent::for_test(
            "tools/call",
            crate::rpc::Id::Num("7".into()),
            bad,
            1234,
        );
        c.ts = 1_796_015_737_927_000_000;
        c.exchange = 3;
        c.scope = crate::events::Scope::Exchange(3);
        c.target = Some("search".into());
        c.anomalies = vec!["MCP_INPUT_SCHEMA", "TOOL_ERROR"];
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
    fn timestamps_latencies_and_scopes_are_written_as_fmt_would() {
        // The cached second and the digits of the milliseconds read as humantime writes them,
        // across second boundaries and back.
        let base = 1_796_015_737_000_000_000u64;
        for ns in [
            base,
            base + 5_000_000,
            base + 999_999_999,
            base + 1_000_000_000,
            base + 61_042_000_000,
            base + 3_000_000,
            0,
        ] {
            let mut v = Vec::new();
            write_ts(&mut v, ns).unwrap();
            let want = humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(ns));
            assert_eq!(String::from_utf8(v).unwrap(), want.to_string(), "{ns}");
        }
        let call = |us, scope| {
            let id = crate::rpc::Id::Str("a\"b".into());
            let mut c =
                crate::events::CallEvent::for_test("ping", id, crate::events::Outcome::Result, us);
            c.ts = base;
            c.scope = scope;
            c.direction = crate::events::Direction::ServerToClient;
            c
        };
        for (us, shown) in [
            (0, "0.0ms"),
            (49, "0.0ms"),
            (50, "0.1ms"),
            (1950, "2.0ms"),
            (12_345_678, "12345.7ms"),
        ] {
            let l = text_line(&Event::Call(call(us, crate::events::Scope::Exchange(9)))).unwrap();
            assert!(
                l.ends_with(&format!(" s→c ping id=\"a\\\"b\" result {shown}")),
                "{l}"
            );
        }
        let s = crate::events::Scope::Session("ünïcødé-session".into());
        let l = text_line(&Event::Call(call(0, s.clone()))).unwrap();
        assert!(l.contains(" ünïcødé- s→c "), "{l}");
        assert_eq!(s.short(), "ünïcødé-");
        let st = crate::events::Scope::Stateless {
            group: format!("{}client-abcdef", crate::events::STATELESS_PREFIX).into(),
            exchange: 3,
        };
        assert_eq!(st.short(), "client-a");
        let refused = crate::events::Outcome::Refused { rule: "r1".into() };
        assert_eq!(refused.label(), "refused (r1)");
    }

    fn ping_at(ts: u64, id: u64) -> Event {
        let n = crate::rpc::Id::Num(id.to_string().into());
        let mut c =
            crate::events::CallEvent::for_test("ping", n, crate::events::Outcome::Result, 100);
        c.ts = ts;
        c.exchange = id;
        c.scope = crate::events::Scope::Exchange(id);
        Event::Call(c)
    }

    #[test]
    fn lines_written_on_many_threads_come_out_whole() {
        let lines = TextLines::new(TEXT_BYTES);
        let mut b = crate::events::BusBuilder::default();
        b.sink(TEXT_INTEREST, lines.clone());
        let bus = b.build();
        let base = 1_796_015_737_000_000_000u64;
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let bus = bus.clone();
                s.spawn(move || {
                    for i in 0..500u64 {
                        // Interleaved times: thread t writes the t-th of every 4 milliseconds.
                        bus.publish(ping_at(base + (i * 4 + t) * 1_000_000, t * 1000 + i));
                    }
                });
            }
        });
        let (mut bufs, mut out) = (Vec::new(), Vec::new());
        assert_eq!(lines.0.drain(&mut bufs, &mut out), 2000);
        let text = String::from_utf8(out).unwrap();
        let got: Vec<&str> = text.lines().collect();
        assert_eq!(got.len(), 2000);
        let mut ids: Vec<&str> = got
            .iter()
            .map(|l| {
                assert!(
                    l.contains(" c→s ping id=") && l.ends_with(" result 0.1ms"),
                    "{l}"
                );
                l.split(" id=")
                    .nth(1)
                    .and_then(|r| r.split(' ').next())
                    .unwrap()
            })
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 2000, "a line lost or doubled");
        assert!(bufs.iter().all(|b| b.is_empty()));
        assert_eq!(lines.lost(), 0);
    }

    #[test]
    fn a_full_buffer_skips_lines_and_counts_them() {
        // One thread's buffer takes its 4 KiB share and the 4 KiB pool at most.
        let lines = TextLines::new(0);
        for i in 0..200 {
            lines.accept(&ping_at(1_796_015_737_000_000_000, i));
        }
        let mut bufs = Vec::new();
        lines.0.take(&mut bufs);
        let taken: usize = bufs.iter().map(Lines::count).sum();
        assert!(taken > 0 && taken < 200, "{taken}");
        assert_eq!(lines.lost() as usize, 200 - taken);
        // Taken away, the buffer takes lines again.
        bufs.iter_mut().for_each(Lines::clear);
        lines.accept(&ping_at(1_796_015_737_000_000_000, 7));
        lines.0.take(&mut bufs);
        assert_eq!(bufs.iter().map(Lines::count).sum::<usize>(), 1);
        assert_eq!(lines.lost() as usize, 200 - taken);
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_printer_prints_as_lines_come_and_the_last_ones_when_the_bus_is_gone() {
        let lines = TextLines::new(TEXT_BYTES);
        let mut b = crate::events::BusBuilder::default();
        b.sink(TEXT_INTEREST, lines.clone());
        let bus = b.build();
        let out = Shared::default();
        let printer = tokio::spawn(run_text(lines, out.clone()));
        bus.publish(ping_at(1_796_015_737_000_000_000, 1));
        tokio::time::sleep(DRAIN * 5).await;
        assert_eq!(out.0.lock().unwrap().split(|&c| c == b'\n').count(), 2);
        bus.publish(ping_at(1_796_015_737_000_000_000, 2));
        drop(bus);
        tokio::time::timeout(Duration::from_secs(5), printer)
            .await
            .expect("the printer ends once the bus is gone")
            .unwrap();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.lines().nth(1).unwrap().contains(" id=2 "), "{text}");
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
