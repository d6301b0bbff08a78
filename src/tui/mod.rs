//! The terminal dashboard (ratatui + crossterm): `app` is the state (plain data), `ui` renders
//! it, and this module owns the terminal and the event loop.
//!
//! The loop takes bus events off its queue every 20 ms and applies them to the state, and
//! redraws at a fixed rate (10 per second), so any traffic costs one redraw per tick. It never
//! slows the proxy: its thread runs at a lower priority, its bus queue drops when full (the
//! header counts what was dropped), and past [`EVENT_BUDGET`] it samples whole exchanges (the
//! header says so). A guard restores the terminal on quit, on panic (ratatui's hook) and on
//! SIGINT/SIGTERM.

pub mod ui;

use crate::events::Event;
use crate::events::Subscription;
use crate::locks::Locked as _;
use crate::record::reader::Capture;
use crate::view as app;
use app::{Action, App, Key};
use base64::Engine;
use crossterm::event::{Event as TermEvent, EventStream, KeyCode, KeyEventKind, MouseEventKind};
use futures_util::StreamExt;
use std::future::Future;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often the screen is redrawn.
pub const FRAME: Duration = Duration::from_millis(100);

/// The events the dashboard reads: HTTP heads with their headers (for the detail pane; built
/// only for the exchanges the dashboard shows, so past its sampling budget they cost nothing
/// more), messages, calls, anomalies, stderr lines.
pub const INTEREST: crate::events::Interest = crate::events::Interest::HTTP
    .and(crate::events::Interest::HTTP_HEADERS)
    .and(crate::events::Interest::STDERR)
    .and(crate::events::Interest::MESSAGE)
    .and(crate::events::Interest::CALL)
    .and(crate::events::Interest::ANOMALY)
    .and(crate::events::Interest::HTTP_AUTH);

/// How often live events are taken off the bus.
pub const DRAIN: Duration = Duration::from_millis(20);

pub use crate::events::{next_stride, EVENT_BUDGET};

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

/// Where the dashboard draws: rpctap's stdout (proxy, demo, view, watch, attach) or the
/// controlling terminal (`stdio --dashboard`, whose stdout belongs to the client). Keys come
/// from the same terminal either way (crossterm reads /dev/tty when stdin is not one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screen {
    Stdout,
    Tty,
}

type Term = ratatui::Terminal<ratatui::backend::CrosstermBackend<Box<dyn Write + Send>>>;

impl Screen {
    fn writer(self) -> std::io::Result<Box<dyn Write + Send>> {
        Ok(match self {
            Screen::Stdout => Box::new(std::io::stdout()),
            Screen::Tty => Box::new(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/tty")?,
            ),
        })
    }

    /// Raw mode, the alternate screen, the mouse: the terminal the dashboard draws on.
    fn enter(self) -> std::io::Result<Term> {
        crossterm::terminal::enable_raw_mode()?;
        let mut w = self.writer()?;
        crossterm::execute!(
            w,
            crossterm::terminal::EnterAlternateScreen,
            crossterm::terminal::Clear(crossterm::terminal::ClearType::All),
            crossterm::event::EnableMouseCapture
        )?;
        ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(w))
    }

    /// The terminal as it was.
    fn leave(self) {
        let _ = crossterm::terminal::disable_raw_mode();
        if let Ok(mut w) = self.writer() {
            let _ = crossterm::execute!(
                w,
                crossterm::event::DisableMouseCapture,
                crossterm::terminal::LeaveAlternateScreen,
                crossterm::cursor::Show
            );
        }
    }
}

/// Restores the terminal when dropped, and on a panic before the panic is printed.
struct Guard(Screen);

impl Guard {
    fn new(screen: Screen) -> Guard {
        static HOOK: std::sync::Once = std::sync::Once::new();
        static SCREEN: std::sync::Mutex<Option<Screen>> = std::sync::Mutex::new(None);
        *SCREEN.locked() = Some(screen);
        HOOK.call_once(|| {
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if let Some(s) = *SCREEN.locked() {
                    s.leave();
                }
                prev(info);
            }));
        });
        Guard(screen)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.leave();
    }
}

fn write_file(prefix: &str, ext: &str, text: &str) -> std::io::Result<String> {
    let name = format!("{prefix}-{}.{ext}", crate::events::now_ns() / 1_000_000);
    // Private (0600): a copied call or an export holds the same traffic as the recording.
    let mut f = crate::record::create_private(std::path::Path::new(&name))?;
    std::io::Write::write_all(&mut f, text.as_bytes())?;
    Ok(name)
}

/// Performs an action's I/O; returns the status line to show.
fn perform(action: Action, resend: Option<&Resend>, app: &App, screen: Screen) -> Option<String> {
    match action {
        // Carried out by the loop (`intercept_action`): they need the terminal.
        Action::None | Action::Quit | Action::Intercept(_) | Action::Held { .. } => None,
        Action::Copy { text, what } => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
            if let Ok(mut out) = screen.writer() {
                let _ = write!(out, "\x1b]52;c;{b64}\x07");
                let _ = out.flush();
            }
            Some(
                match write_file("rpctap-copy", "sh", &format!("{text}\n")) {
                    Ok(f) => format!("copied {what} (OSC 52) and saved to {f}"),
                    Err(e) => format!("copied {what} (OSC 52); could not save: {e}"),
                },
            )
        }
        Action::Export(doc) => Some(
            match write_file("rpctap-export", "jsonl", &format!("{doc}\n")) {
                Ok(f) => format!("exchange documents (one per scope) written to {f}"),
                Err(e) => format!("export failed: {e}"),
            },
        ),
        Action::Resend { body, path } => {
            // Live: this proxy. Attached: the attached proxy's listener (from its feed).
            let attached = || {
                app.can_resend
                    .then(|| app.listen.parse::<std::net::SocketAddr>().ok())
                    .flatten()
                    .map(|proxy| Resend { proxy })
            };
            let Some(rs) = resend.cloned().or_else(attached) else {
                return Some(
                    "re-send is unavailable here: a recording has no proxy, and a stdio session's stdin belongs to its client"
                        .into(),
                );
            };
            let rs = &rs;
            let session = app
                .selected_row()
                .and_then(|r| app.http.get(&r.exchange))
                .and_then(|h| h.session.clone());
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

fn refresh_held(app: &mut App, ic: &crate::flow::intercept::Intercept) {
    let now = std::time::Instant::now();
    let held = ic
        .held()
        .iter()
        .map(|h| app::HeldRow::from_held(h, now))
        .collect();
    app.set_held(held, ic.overflow());
}

/// Applies what the sources hold now (the watch bounded per call: a big backfill never freezes
/// the keys); returns how many bus events it took, for the sampling stride. A bus whose
/// publishers are all gone is let go.
fn take_in(app: &mut App, source: &mut Option<Source>, feed_state: &mut FeedState) -> u64 {
    let mut n = 0;
    match source {
        Some(Source::Watch(w)) => {
            for _ in 0..20_000 {
                match w.try_recv() {
                    Ok(msg) => apply_watch(app, msg),
                    Err(_) => break,
                }
            }
        }
        Some(Source::Feed(f)) => {
            while let Ok(msg) = f.try_recv() {
                apply_feed(app, feed_state, msg);
            }
        }
        Some(Source::Bus(s)) => loop {
            match s.rx.try_recv() {
                Ok(ev) => {
                    n += 1;
                    app.apply(&ev);
                }
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                    *source = None;
                    break;
                }
            }
        },
        None => {}
    }
    n
}

/// Where live events come from: the bus of this process, or a running rpctap's feed.
pub enum Source {
    Bus(Subscription),
    Feed(tokio::sync::mpsc::Receiver<crate::attach::FeedMsg>),
    /// `rpctap watch`: many sources, live and past.
    Watch(tokio::sync::mpsc::Receiver<crate::hub::watch::WatchMsg>),
}

/// Applies one message of `watch`.
pub fn apply_watch(app: &mut App, msg: crate::hub::watch::WatchMsg) {
    use crate::hub::watch::WatchMsg;
    match msg {
        WatchMsg::Server { src, info } => {
            let n = app.add_server(app::ServerInfo {
                name: info.name.as_str().into(),
                label: info.label.as_str().into(),
                command: info.command.join(" "),
                pid: info.pid,
                live: info.live,
                last_ns: info.started,
                ..Default::default()
            });
            debug_assert_eq!(n, src, "sources are numbered in order");
        }
        WatchMsg::Event { src, event } => {
            app.apply_from(src, &event);
        }
        WatchMsg::Ended { src, why } => {
            if let Some(s) = app.server(src) {
                let was_live = std::mem::replace(&mut s.live, false);
                let label = s.label.clone();
                if let Some(why) = why {
                    app.say(format!("{label}: {why}"));
                } else if was_live {
                    app.say(format!("{label} ended"));
                }
            }
        }
        WatchMsg::Note(n) => app.say(n),
    }
}

/// What the dashboard keeps about the feed it is attached to.
#[derive(Debug, Default)]
struct FeedState {
    /// The attached process's start (from the feed header): another value is another process.
    started: Option<serde_json::Value>,
    /// Before the live marker: the backlog (skipped on a reconnect to the same process).
    in_backlog: bool,
    /// Whether this process's backlog was shown already.
    shown_backlog: bool,
    base_title: String,
}

/// Applies one message of an attached feed.
fn apply_feed(app: &mut App, st: &mut FeedState, msg: crate::attach::FeedMsg) {
    use crate::attach::FeedMsg;
    match msg {
        FeedMsg::Header(h) => {
            let started = h.get("started").cloned();
            if st.started.is_some() && st.started != started {
                app.clear();
                st.shown_backlog = false;
                app.say("the attached rpctap restarted: showing the new process");
            } else {
                app.status = String::new();
            }
            st.in_backlog = true;
            // `up` counts from the attached process's start, not from the attach.
            if let Some(ns) = started.as_ref().and_then(serde_json::Value::as_u64) {
                app.started_ns = ns;
            }
            st.started = started;
            let (listen, upstream) = crate::view::header_endpoints(&h);
            app.can_resend = listen != "stdio";
            (app.listen, app.upstream) = (listen, upstream);
            app.title = format!("{} — live", st.base_title);
        }
        FeedMsg::State(s) => {
            app.title = format!("{} — {s}", st.base_title);
        }
        FeedMsg::Refused(why) => {
            app.title = format!("{} — refused", st.base_title);
            app.status = why;
        }
        FeedMsg::Marker(v) => {
            if v.get("live").is_some() {
                st.in_backlog = false;
                st.shown_backlog = true;
            }
            if let Some(k) = v.get("sample").and_then(|k| k.as_u64()) {
                app.sample = k.max(1);
            }
        }
        FeedMsg::Event(e) => {
            if let Event::Notice(n) = &*e {
                if n.what == "feed_dropped" {
                    let lost = n
                        .message
                        .split(' ')
                        .next()
                        .and_then(|n| n.parse::<u64>().ok());
                    app.dropped += lost.unwrap_or(0);
                }
                return;
            }
            if st.in_backlog && st.shown_backlog {
                return; // a reconnect to the same process: its recent calls are on screen
            }
            app.apply_seen(&e);
        }
    }
}

/// The dashboard's scheduling priority (nice value) while it watches live traffic.
pub const NICE: i32 = 10;

/// The dashboard yields the CPU to the traffic it shows: its thread (the one running [`run`])
/// runs at nice [`NICE`], so when the proxy's threads need every core they win it, and the
/// dashboard falls behind — its queue drops events and the header counts them — instead of
/// slowing the proxy. With CPU to spare nothing changes.
fn yield_cpu_to_the_proxy() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), NICE) {
        tracing::debug!(error = %e, "could not lower the dashboard's priority");
    }
}

/// Runs `$VISUAL` (else `$EDITOR`, else `vi`) on `text` in a private file (0600, removed
/// after) and returns what it left there.
fn run_editor(text: &str, screen: Screen) -> Result<String, String> {
    let path = std::env::temp_dir().join(format!(
        "rpctap-held-{}-{}.json",
        std::process::id(),
        crate::events::now_ns()
    ));
    crate::record::create_private(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("could not write {}: {e}", path.display()))?;
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .ok()
        .filter(|e| !e.trim().is_empty())
        .unwrap_or_else(|| "vi".into());
    // Through the shell, as editors are given: `EDITOR="code --wait"` works.
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("rpctap-edit")
        .arg(&path);
    if screen == Screen::Tty {
        // stdin and stdout are the client's pipes: the editor gets the terminal instead.
        let tty = |()| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/tty")
        };
        match (tty(()), tty(()), tty(())) {
            (Ok(i), Ok(o), Ok(e)) => {
                cmd.stdin(i).stdout(o).stderr(e);
            }
            _ => return Err("could not open the terminal for the editor".into()),
        }
    }
    let status = cmd.status();
    let back = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    match status {
        Ok(s) if s.success() => back.map_err(|e| format!("could not read the edit back: {e}")),
        Ok(s) => Err(format!(
            "the editor ({editor}) exited with {s}: nothing sent"
        )),
        Err(e) => Err(format!("could not run the editor ({editor}): {e}")),
    }
}

/// Carries out an intercept key: sets the filter, or decides a held message (editing it in
/// `$EDITOR` first, the terminal handed over meanwhile). Returns the status line.
async fn intercept_action(
    action: Action,
    ic: &crate::flow::intercept::Intercept,
    terminal: &mut Term,
    screen: Screen,
) -> std::io::Result<Option<String>> {
    use crate::flow::intercept::Verdict;
    use app::HeldKey;
    let action_kind = match &action {
        Action::Held { what, .. } => Some(matches!(what, HeldKey::Answer(_))),
        _ => None,
    };
    let (n, verdict) = match action {
        Action::Intercept(None) => {
            ic.set_filter(None);
            return Ok(Some("intercept off: everything held was forwarded".into()));
        }
        Action::Intercept(Some(f)) => {
            return Ok(Some(match crate::filter::Filter::parse(&f) {
                Ok(parsed) => {
                    ic.set_filter(Some(parsed));
                    format!(
                        "intercept on: messages matching `{f}` are held (each forwards itself after {})",
                        crate::units::show_secs(ic.timeout())
                    )
                }
                Err(why) => format!("intercept not set: {why}"),
            }))
        }
        Action::Held { n, what } => match what {
            HeldKey::Forward => (n, Verdict::Forward),
            HeldKey::Drop => (n, Verdict::Drop),
            HeldKey::Edit(text) | HeldKey::Answer(text) => {
                let answer = matches!(&action_kind, Some(true));
                // The editor gets the terminal. The dashboard's reader is not polled meanwhile
                // (this runs between two of its events), so it takes none of the editor's keys.
                // The message's timer stops while it is edited.
                ic.editing(n, true);
                screen.leave();
                let edited = tokio::task::spawn_blocking(move || run_editor(&text, screen))
                    .await
                    .unwrap_or_else(|e| Err(format!("the editor failed: {e}")));
                ic.editing(n, false);
                // A new terminal draws everything on its first frame. (Not `clear()`: it asks
                // the cursor's position on stdout, which under `stdio` is the client's pipe.)
                *terminal = screen.enter()?;
                let b = match edited.and_then(|t| crate::flow::intercept::validate(&t)) {
                    Ok(b) => b,
                    Err(why) => {
                        return Ok(Some(format!(
                            "#{n} not sent: {why}; still held (E to edit again)"
                        )))
                    }
                };
                (
                    n,
                    if answer {
                        Verdict::Answer(b)
                    } else {
                        Verdict::Edit(b)
                    },
                )
            }
        },
        _ => return Ok(None),
    };
    let what = match &verdict {
        Verdict::Forward => "forwarded",
        Verdict::Edit(_) => "forwarded as edited",
        Verdict::Drop => "dropped",
        Verdict::Answer(_) => "answered",
    };
    Ok(Some(if ic.decide(n, verdict) {
        format!("#{n} {what}")
    } else {
        format!("#{n} was no longer held: it forwarded itself (--intercept-timeout)")
    }))
}

/// Runs the dashboard until `q` or `shutdown`. `source` feeds live events (none for a recording);
/// `intercept`, when it drives a live proxy's.
pub async fn run(
    mut app: App,
    source: Option<Source>,
    shutdown: impl Future<Output = ()>,
    resend: Option<Resend>,
    recording: Option<&Capture>,
    intercept: Option<crate::flow::intercept::Intercept>,
    screen: Screen,
) -> std::io::Result<()> {
    if let Some(ic) = &intercept {
        ic.set_dashboard();
        app.held.available = true;
    }
    let r = run_loop(
        app,
        source,
        shutdown,
        (resend, recording),
        intercept.as_ref(),
        screen,
    )
    .await;
    // Nothing stays held once the dashboard is gone.
    if let Some(ic) = &intercept {
        ic.set_filter(None);
    }
    r
}

async fn run_loop(
    mut app: App,
    mut source: Option<Source>,
    shutdown: impl Future<Output = ()>,
    (resend, recording): (Option<Resend>, Option<&Capture>),
    intercept: Option<&crate::flow::intercept::Intercept>,
    screen: Screen,
) -> std::io::Result<()> {
    let mut feed_state = FeedState {
        base_title: app.title.clone(),
        ..Default::default()
    };
    app.no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let _guard = Guard::new(screen);
    let mut terminal = screen.enter()?;
    let mut input = EventStream::new();
    let mut tick = tokio::time::interval(FRAME);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(shutdown);
    // Events are taken off the bus on a short timer, not as they come: the proxy's threads
    // then never wake this one (a wake-up per event costs more than the event), and a burst is
    // applied in one go. The bus queue holds well over one period of traffic.
    let mut drain = tokio::time::interval(DRAIN);
    drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let live = recording.is_none();
    if live {
        yield_cpu_to_the_proxy();
    }
    let mut window_start = std::time::Instant::now();
    let mut window_events = 0u64;
    loop {
        tokio::select! {
            _ = drain.tick(), if source.is_some() => {
                window_events += take_in(&mut app, &mut source, &mut feed_state);
                let elapsed = window_start.elapsed();
                if elapsed >= Duration::from_millis(500) {
                    if let Some(Source::Bus(s)) = &source {
                        let next = next_stride(s.stride.get(), window_events as f64 / elapsed.as_secs_f64());
                        s.stride.set(next);
                        app.sample = next;
                    }
                    window_start = std::time::Instant::now();
                    window_events = 0;
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
                            // A key acts on everything that came before it: a held call's
                            // answer (`A`) takes the earlier answer the bus brought a moment
                            // before the call was held, not only what the last drain took in.
                            window_events += take_in(&mut app, &mut source, &mut feed_state);
                            let action = app.handle_key(key);
                            if action == Action::Quit {
                                break;
                            }
                            if let (Some(ic), Action::Intercept(_) | Action::Held { .. }) = (intercept, &action) {
                                if let Some(s) = intercept_action(action, ic, &mut terminal, screen).await? {
                                    app.say(s);
                                }
                                refresh_held(&mut app, ic);
                                terminal.draw(|f| ui::draw(f, &app))?;
                                continue;
                            }
                            if let Some(s) = perform(action, resend.as_ref(), &app, screen) {
                                app.say(s);
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
                if let Some(Source::Bus(s)) = &source {
                    app.dropped = s.dropped.load(Ordering::Relaxed);
                }
                if let Some(ic) = intercept {
                    // What came before a held message is shown with it.
                    window_events += take_in(&mut app, &mut source, &mut feed_state);
                    refresh_held(&mut app, ic);
                }
                app.page = terminal.size().map(|s| s.height.saturating_sub(10) as usize).unwrap_or(10).max(1);
                terminal.draw(|f| ui::draw(f, &app))?;
            }
            () = &mut shutdown => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stride_keeps_the_dashboard_within_its_budget_without_flapping() {
        // Within budget: everything shown.
        assert_eq!(next_stride(1, 8_000.0), 1);
        // 40,000 events/s offered: one exchange in four.
        assert_eq!(next_stride(1, 40_000.0), 4);
        // At stride 4 it now sees a quarter: steady.
        assert_eq!(next_stride(4, 10_000.0), 4);
        // The traffic drops a little (it would fit in 3): steady, no flapping.
        assert_eq!(next_stride(4, 6_000.0), 4);
        // It falls well below: back down.
        assert_eq!(next_stride(4, 800.0), 1);
        // It grows: up at once.
        assert_eq!(next_stride(4, 24_000.0), 10);
        assert_eq!(next_stride(1, 1e12), 1024, "capped");
    }
}

#[cfg(test)]
mod feed_tests {
    use super::*;
    use crate::attach::FeedMsg;

    #[test]
    fn an_attach_counts_from_the_process_start_and_shows_earlier_anomalies_and_calls_honestly() {
        let mut app = App::new("a", "?", "?", 100, 9_000_000_000);
        let mut st = FeedState::default();
        let header = serde_json::json!({"rpctap_feed": 1, "started": 1_000_000_000u64, "mode": "proxy", "listen": "l", "upstream": "u"});
        apply_feed(&mut app, &mut st, FeedMsg::Header(header));
        assert_eq!(
            app.started_ns, 1_000_000_000,
            "up counts from the process's start"
        );
        let line =
            |l: &str| FeedMsg::Event(Box::new(crate::record::reader::parse_line(l).unwrap()));
        apply_feed(
            &mut app,
            &mut st,
            line(
                r#"{"event":"anomaly","ts":2,"exchange":1,"scope":"exchange:1","code":"UNMATCHED_RESPONSE","severity":"error","message":"m"}"#,
            ),
        );
        apply_feed(
            &mut app,
            &mut st,
            line(
                r#"{"event":"call","ts":3,"exchange":2,"scope":"exchange:2","direction":"c2s","method":"add","id":1,"outcome":"result","latency_us":5,"anomalies":["TOOL_ERROR"]}"#,
            ),
        );
        assert_eq!(app.anomalies_total, 1, "the backlog's anomalies count");
        let r = &app.rows[0];
        assert!(r.messages_unseen());
        assert_eq!(r.anomalies, ["TOOL_ERROR"]);
        apply_feed(
            &mut app,
            &mut st,
            FeedMsg::Refused("the feed needs a token".into()),
        );
        assert!(app.status.contains("needs a token"));
    }
}
