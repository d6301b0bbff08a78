//! The terminal dashboard (ratatui + crossterm): `app` is the state (plain data), `ui` renders
//! it, and this module owns the terminal and the event loop.
//!
//! The loop applies bus events to the state as they come, but redraws at a fixed rate (10 per
//! second), so any traffic costs one redraw per tick; it never blocks the proxy (its bus queue
//! drops when full, and the header shows how many display events were dropped). A guard
//! restores the terminal on quit, on panic (ratatui's hook) and on SIGINT/SIGTERM.

pub mod app;
pub mod ui;

use crate::events::Subscription;
use crate::record::reader::{RecEvent, RecHttp, Recording};
use app::{Action, App, Key, MessageIn, RowOutcome};
use base64::Engine;
use crossterm::event::{Event as TermEvent, EventStream, KeyCode, KeyEventKind, MouseEventKind};
use futures_util::StreamExt;
use std::future::Future;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often the screen is redrawn.
pub const FRAME: Duration = Duration::from_millis(100);

/// Where `r` re-sends a request: the proxy itself, so the re-sent call is inspected too.
#[derive(Clone, Debug)]
pub struct Resend {
    pub proxy: std::net::SocketAddr,
}

fn key_of(code: KeyCode) -> Option<Key> {
    Some(match code {
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Tab => Key::Tab,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

/// Restores the terminal when dropped.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = crossterm::execute!(std::io::stdout(), crossterm::event::DisableMouseCapture);
        ratatui::restore();
    }
}

fn write_file(prefix: &str, ext: &str, text: &str) -> std::io::Result<String> {
    let name = format!("{prefix}-{}.{ext}", crate::events::now_ns() / 1_000_000);
    std::fs::write(&name, text)?;
    Ok(name)
}

/// Performs an action's I/O; returns the status line to show.
fn perform(
    action: Action,
    resend: Option<&Resend>,
    paths: &std::collections::HashMap<u64, (String, Option<String>)>,
    app: &App,
) -> Option<String> {
    match action {
        Action::None | Action::Quit => None,
        Action::CopyCurl(curl) => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(curl.as_bytes());
            let mut out = std::io::stdout();
            let _ = write!(out, "\x1b]52;c;{b64}\x07");
            let _ = out.flush();
            Some(
                match write_file("rpctap-curl", "sh", &format!("{curl}\n")) {
                    Ok(f) => format!("copied as curl (OSC 52) and saved to {f}"),
                    Err(e) => format!("copied as curl (OSC 52); could not save: {e}"),
                },
            )
        }
        Action::Export(doc) => Some(
            match write_file("rpctap-export", "json", &format!("{doc}\n")) {
                Ok(f) => format!("exchange document written to {f}"),
                Err(e) => format!("export failed: {e}"),
            },
        ),
        Action::Resend { body, .. } => {
            let Some(rs) = resend else {
                return Some("re-send works in proxy mode only".into());
            };
            let (path, session) = app
                .selected_row()
                .and_then(|r| paths.get(&r.exchange).cloned())
                .unwrap_or(("/".into(), None));
            let addr = rs.proxy;
            tokio::spawn(async move {
                let client = hyper_util::client::legacy::Client::builder(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .build_http::<http_body_util::Full<bytes::Bytes>>();
                let mut b = http::Request::post(format!("http://{addr}{path}"))
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream");
                if let Some(s) = session {
                    b = b.header("mcp-session-id", s);
                }
                if let Ok(req) = b.body(http_body_util::Full::new(bytes::Bytes::from(body))) {
                    if let Ok(resp) = client.request(req).await {
                        use http_body_util::BodyExt;
                        let _ = resp.into_body().collect().await;
                    }
                }
            });
            Some("re-sent through the proxy".into())
        }
    }
}

/// Applies a recording to a fresh state (for `rpctap view`).
pub fn load_recording(app: &mut App, rec: &Recording) {
    for e in &rec.events {
        match e {
            RecEvent::Message(m) => app.apply_message(&MessageIn {
                ts_ns: m.ts,
                exchange: m.exchange,
                scope: m.scope.clone(),
                scope_short: m
                    .scope
                    .strip_prefix("session:")
                    .map(|s| s.chars().take(8).collect())
                    .unwrap_or_else(|| format!("#{}", m.exchange)),
                c2s: m.is_c2s(),
                kind: match m.kind.as_str() {
                    "request" => "request",
                    "notification" => "notification",
                    "result" => "result",
                    "error" => "error",
                    _ => "invalid",
                },
                id: m.id_text().map(str::to_string),
                method: m.method.clone(),
                target: m.target.clone(),
                raw: m.message.get().to_string(),
                sse: m.transport != "json",
            }),
            RecEvent::Call(c) => {
                let outcome = match c.outcome.as_str() {
                    "result" => RowOutcome::Result,
                    "error" => RowOutcome::Error(c.code.unwrap_or(0)),
                    "refused" => RowOutcome::Refused(c.rule.clone().unwrap_or_default()),
                    "rejected" => RowOutcome::Rejected(c.status.unwrap_or(0)),
                    _ => RowOutcome::Missing(c.reason.clone().unwrap_or_default()),
                };
                let dir = if c.direction == "c2s" {
                    "c→s"
                } else {
                    "s→c"
                };
                app.apply_call(
                    &c.scope,
                    dir,
                    c.id.get(),
                    &c.method,
                    outcome,
                    c.latency_us,
                    c.ts,
                );
            }
            RecEvent::Http(RecHttp::Request {
                exchange,
                method,
                path,
                ..
            }) => app.apply_http_request(*exchange, method, path),
            RecEvent::Http(RecHttp::Response {
                exchange,
                status,
                content_type,
                ..
            }) => app.apply_http_response(*exchange, *status, content_type.clone()),
            RecEvent::Anomaly(a) => app.apply_anomaly(
                a.exchange,
                &a.scope,
                a.id.as_ref().map(|i| i.get().to_string()),
                &a.code,
                &a.message,
                a.ts,
            ),
            _ => {}
        }
        let ts = match e {
            RecEvent::Message(m) => m.ts,
            RecEvent::Call(c) => c.ts,
            _ => 0,
        };
        if ts > app.now_ns {
            app.tick(ts);
        }
    }
    if let Some(first) = rec.messages().next() {
        app.started_ns = first.ts;
    }
}

/// Runs the dashboard until `q` or `shutdown`. `sub` feeds live events (none for a recording).
pub async fn run(
    mut app: App,
    mut sub: Option<Subscription>,
    shutdown: impl Future<Output = ()>,
    resend: Option<Resend>,
    recording: Option<&Recording>,
) -> std::io::Result<()> {
    app.no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let mut paths: std::collections::HashMap<u64, (String, Option<String>)> =
        std::collections::HashMap::new();
    if let Some(rec) = recording {
        for h in rec.http() {
            if let RecHttp::Request {
                exchange,
                path,
                session,
                ..
            } = h
            {
                paths.insert(*exchange, (path.clone(), session.clone()));
            }
        }
    }
    let mut terminal = ratatui::try_init()?;
    let _guard = Guard;
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::EnableMouseCapture);
    let mut input = EventStream::new();
    let mut tick = tokio::time::interval(FRAME);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(shutdown);
    let mut batch = Vec::with_capacity(4096);
    let live = recording.is_none();
    loop {
        tokio::select! {
            n = async { match sub.as_mut() { Some(s) => s.rx.recv_many(&mut batch, 4096).await, None => std::future::pending().await } } => {
                if n == 0 {
                    sub = None;
                }
                for ev in batch.drain(..) {
                    if let crate::events::Event::Http(crate::events::HttpEvent::Request { exchange, path, session, .. }) = &*ev {
                        paths.insert(*exchange, (path.clone(), session.clone()));
                        if paths.len() > app.max_rows * 2 {
                            let min = *exchange - app.max_rows as u64;
                            paths.retain(|k, _| *k > min);
                        }
                    }
                    app.apply(&ev);
                }
            }
            ev = input.next() => {
                match ev {
                    Some(Ok(TermEvent::Key(k))) if k.kind != KeyEventKind::Release => {
                        let ctrl_c = k.modifiers.contains(crossterm::event::KeyModifiers::CONTROL) && k.code == KeyCode::Char('c');
                        if ctrl_c {
                            break;
                        }
                        if let Some(key) = key_of(k.code) {
                            let action = app.handle_key(key);
                            if action == Action::Quit {
                                break;
                            }
                            if let Some(s) = perform(action, resend.as_ref(), &paths, &app) {
                                app.status = s;
                            }
                        }
                    }
                    Some(Ok(TermEvent::Mouse(m))) => {
                        let k = match m.kind {
                            MouseEventKind::ScrollUp => Some(Key::ScrollUp),
                            MouseEventKind::ScrollDown => Some(Key::ScrollDown),
                            _ => None,
                        };
                        if let Some(k) = k {
                            app.handle_key(k);
                        }
                    }
                    Some(Ok(TermEvent::Resize(_, _))) => {
                        terminal.autoresize()?;
                        terminal.draw(|f| ui::draw(f, &app))?;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break,
                }
            }
            _ = tick.tick() => {
                if live {
                    app.tick(crate::events::now_ns());
                }
                if let Some(s) = &sub {
                    app.dropped = s.dropped.load(Ordering::Relaxed);
                }
                app.page = terminal.size().map(|s| s.height.saturating_sub(10) as usize).unwrap_or(10).max(1);
                terminal.draw(|f| ui::draw(f, &app))?;
            }
            () = &mut shutdown => break,
        }
    }
    Ok(())
}
