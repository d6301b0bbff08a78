//! Rendering: a pure function of [`App`] into a ratatui frame. No I/O here.

use super::app::{percentiles, App, Row, RowOutcome, View};
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Borders, Cell, Clear, Paragraph, Row as TRow, Sparkline, Table, TableState, Tabs, Wrap,
};
use ratatui::Frame;

struct Theme {
    color: bool,
}

impl Theme {
    fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }
    fn bold(&self) -> Style {
        Style::default().add_modifier(Modifier::BOLD)
    }
    fn selected(&self) -> Style {
        Style::default().add_modifier(Modifier::REVERSED)
    }
}

fn clock(ns: u64) -> String {
    let ms = ns / 1_000_000;
    let s = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60,
        ms % 1000
    )
}

fn dur(us: u64) -> String {
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 1_000_000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else {
        format!("{:.2}s", us as f64 / 1e6)
    }
}

/// A token count in a column of six: `812`, `12.4k`, `1.2M`.
fn tokens(n: u32) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

fn size(b: usize) -> String {
    if b < 1024 {
        format!("{b}B")
    } else if b < 1 << 20 {
        format!("{:.1}K", b as f64 / 1024.0)
    } else {
        format!("{:.1}M", b as f64 / 1048576.0)
    }
}

fn uptime(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Draws the whole dashboard.
pub fn draw(f: &mut Frame, app: &App) {
    let t = Theme {
        color: !app.no_color,
    };
    let area = f.area();
    let chunks = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(5),
            Constraint::Length(1),
            Constraint::Min(3),
            Constraint::Length(1),
        ])
        .split(area);
    header(f, app, &t, chunks[0]);
    let titles: Vec<Line> = View::ALL.iter().map(|v| Line::from(v.title())).collect();
    let sel = View::ALL.iter().position(|v| *v == app.view).unwrap_or(0);
    f.render_widget(
        Tabs::new(titles)
            .select(sel)
            .highlight_style(t.bold().patch(t.fg(Color::Yellow)))
            .divider("|"),
        chunks[1],
    );
    // The intercept's held messages, above whatever view is open.
    let body = if app.held.held.is_empty() && app.held.filter.is_empty() {
        chunks[2]
    } else {
        let rows = if app.held.held.is_empty() {
            3
        } else {
            (app.held.held.len() as u16 + 5)
                .min(chunks[2].height / 2)
                .max(4)
        };
        let parts = Layout::default()
            .direction(Direction::Vertical)
            .constraints([Constraint::Length(rows), Constraint::Min(3)])
            .split(chunks[2]);
        held(f, app, &t, parts[0]);
        parts[1]
    };
    let chunks = [chunks[0], chunks[1], body, chunks[3]];
    match app.view {
        View::Calls => {
            if app.detail && app.detail_full {
                detail(f, app, &t, chunks[2]);
            } else if app.detail {
                let parts = Layout::default()
                    .direction(Direction::Vertical)
                    .constraints([Constraint::Percentage(40), Constraint::Percentage(60)])
                    .split(chunks[2]);
                calls(f, app, &t, parts[0]);
                detail(f, app, &t, parts[1]);
            } else {
                calls(f, app, &t, chunks[2]);
            }
        }
        View::Anomalies => anomalies(f, app, &t, chunks[2]),
        View::Methods => methods(f, app, &t, chunks[2]),
        View::Sessions if !app.servers.is_empty() => servers(f, app, &t, chunks[2]),
        View::Sessions => sessions(f, app, &t, chunks[2]),
        View::Stderr => stderr(f, app, &t, chunks[2]),
    }
    status(f, app, &t, chunks[3]);
    if app.help {
        help(f, app, &t, area);
    }
    if app.info {
        info(f, app, &t, area);
    }
}

fn header(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(format!(" {} ", app.title), t.bold()));
    let inner = block.inner(area);
    f.render_widget(block, area);
    let cols = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([
            Constraint::Min(40),
            Constraint::Length(if inner.width >= 120 { 30 } else { 8 }),
        ])
        .split(inner);
    let err_rate = if app.calls_total > 0 {
        app.errors_total as f64 * 100.0 / app.calls_total as f64
    } else {
        0.0
    };
    let pct = match app.percentiles() {
        Some((a, b, c)) => format!("p50 {} p95 {} p99 {}", dur(a), dur(b), dur(c)),
        None => "p50 -  p95 -  p99 -".into(),
    };
    let mut l1 = vec![
        Span::raw(format!("{} → {}", app.listen, app.upstream)),
        Span::raw(match app.recorded_ns {
            Some(span) => format!("  recorded, {} long", uptime(span)),
            None => format!("  up {}", uptime(app.now_ns.saturating_sub(app.started_ns))),
        }),
    ];
    if app.sample > 1 {
        l1.push(Span::styled(
            format!("  sampling 1/{} exchanges", app.sample),
            t.fg(Color::Yellow).patch(t.bold()),
        ));
    }
    if app.dropped > 0 {
        l1.push(Span::styled(
            format!("  dropped {} display events", app.dropped),
            t.fg(Color::Red).patch(t.bold()),
        ));
    }
    let mut l2 = vec![
        Span::raw(format!(
            "calls {} {}/s ",
            app.calls_total,
            app.calls_per_second()
        )),
        Span::styled(
            format!("err {err_rate:.1}%"),
            if app.errors_total > 0 {
                t.fg(Color::Red)
            } else {
                Style::default()
            },
        ),
        Span::raw(format!(
            " open {}  notif {} ",
            app.pending(),
            app.notifications_total
        )),
        Span::styled(
            format!("anom {}", app.anomalies_total),
            if app.anomalies_total > 0 {
                t.fg(Color::Yellow)
            } else {
                Style::default()
            },
        ),
    ];

    if app.faults_total > 0 {
        l2.push(Span::styled(
            format!("  injected {}", app.faults_total),
            t.fg(Color::Magenta),
        ));
    }
    let l3 = vec![Span::raw(pct)];
    f.render_widget(
        Paragraph::new(vec![Line::from(l1), Line::from(l2), Line::from(l3)]),
        cols[0],
    );
    let data: Vec<u64> = app.per_second.iter().copied().collect();
    f.render_widget(
        Sparkline::default().data(&data).style(t.fg(Color::Green)),
        cols[1],
    );
}

/// A row's outcome; a task still running shows its status (`task:working`).
fn outcome_label(r: &Row) -> String {
    match (&r.task, &r.outcome) {
        (Some(task), RowOutcome::Pending) => format!("task:{}", task.status),
        _ => r.outcome.label(),
    }
}

fn outcome_style(t: &Theme, r: &Row) -> Style {
    match r.outcome {
        RowOutcome::Pending => t.fg(Color::Cyan),
        RowOutcome::Notification => t.fg(Color::DarkGray),
        RowOutcome::Result => t.fg(Color::Green),
        RowOutcome::InputRequired => t.fg(Color::Yellow),
        // The client's doing, not a failure: shown apart from errors.
        RowOutcome::Cancelled(_) | RowOutcome::Abandoned(_) => t.fg(Color::DarkGray),
        _ => t.fg(Color::Red),
    }
}

fn calls(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    if app.rows.is_empty() && !app.intro.is_empty() {
        return intro(f, app, t, area);
    }
    let shown = app.visible_len();
    // Below 100 columns the time drops its milliseconds and the size column goes, so that the
    // method keeps room for its tool's name.
    let narrow = area.width < 100;
    // On a wide terminal the method stops at 72 columns (a tool's name fits) and the id and
    // outcome get room, so they stay beside it instead of at the far right; what is left over
    // stays blank after the last column. The result's tokens get a column of their own.
    let wide = area.width >= 160;
    let sel = app.selected_index();
    let height = area.height.saturating_sub(3) as usize;
    let start = if sel >= height { sel + 1 - height } else { 0 };
    let body: Vec<TRow> = app
        .visible_range(start, height.max(1))
        .into_iter()
        .map(|r| {
            // `⚡`: a fault rule acted on this call; `!`: an anomaly.
            let mark = if !r.injected.is_empty() {
                "⚡"
            } else if r.anomalies.is_empty() {
                " "
            } else {
                "!"
            };
            // A call still waiting shows how long it has waited, counting.
            let latency = match (r.latency_us, &r.outcome) {
                (Some(l), _) => dur(l),
                (None, RowOutcome::Pending) if app.now_ns > r.ts_ns => {
                    format!("{}…", dur((app.now_ns - r.ts_ns) / 1000))
                }
                _ => String::new(),
            };
            let mut time = clock(r.ts_ns);
            if narrow {
                time.truncate(8);
            }
            let mut cells = vec![
                Cell::from(time),
                Cell::from(r.scope_short()),
                Cell::from(r.direction.arrow()),
                Cell::from(r.display_method()),
                Cell::from(r.id.to_string()),
                Cell::from(Span::styled(outcome_label(r), outcome_style(t, r))),
                Cell::from(latency),
            ];
            if !narrow {
                cells.push(Cell::from(if r.messages_unseen() {
                    "-".to_string()
                } else {
                    size(r.size)
                }));
            }
            if wide {
                // What the result costs an agent's context (counted once, when first shown).
                cells.push(Cell::from(
                    r.result_tokens().map(tokens).unwrap_or_default(),
                ));
            }
            cells.push(Cell::from(Span::styled(
                mark,
                t.fg(Color::Yellow).patch(t.bold()),
            )));
            TRow::new(cells).style(if !r.anomalies.is_empty() {
                t.fg(Color::Yellow)
            } else {
                Style::default()
            })
        })
        .collect();
    let mut widths = vec![
        Constraint::Length(if narrow { 8 } else { 12 }),
        Constraint::Length(crate::view::SCOPE_WIDTH as u16),
        Constraint::Length(3),
        if wide {
            Constraint::Max(72)
        } else {
            Constraint::Min(12)
        },
        Constraint::Length(if wide { 14 } else { 6 }),
        Constraint::Length(if wide { 24 } else { 12 }),
        Constraint::Length(9),
    ];
    let mut head = vec!["time", "scope", "dir", "method", "id", "outcome", "latency"];
    if !narrow {
        widths.push(Constraint::Length(6));
        head.push("size");
    }
    if wide {
        widths.push(Constraint::Length(6));
        head.push("tokens");
    }
    widths.push(Constraint::Length(1));
    head.push("!");
    if wide {
        widths.push(Constraint::Fill(1));
        head.push("");
    }
    // Rows are calls and notifications alike; the header's `calls` counts calls that ended.
    let title = format!(
        " {} of {} {}",
        shown,
        counted(app.rows.len() as u64, "row", "rows"),
        if app.follow { "(following) " } else { "" }
    );
    let table = Table::new(body, widths)
        .header(TRow::new(head).style(t.bold()))
        .block(Block::default().borders(Borders::ALL).title(title))
        .row_highlight_style(t.selected());
    let mut state = TableState::default();
    if shown > 0 {
        state.select(Some(sel - start));
    }
    f.render_stateful_widget(table, area, &mut state);
}

/// JSON pretty-printed with simple syntax colours.
fn json_lines(text: &str, t: &Theme) -> Vec<Line<'static>> {
    let pretty = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_string());
    pretty
        .lines()
        .take(2000)
        .map(|l| {
            let mut spans = Vec::new();
            let trimmed = l.trim_start();
            let indent = &l[..l.len() - trimmed.len()];
            spans.push(Span::raw(indent.to_string()));
            if let Some((k, v)) = trimmed.split_once("\": ") {
                spans.push(Span::styled(format!("{k}\": "), t.fg(Color::Blue)));
                spans.push(value_span(v, t));
            } else {
                spans.push(value_span(trimmed, t));
            }
            Line::from(spans)
        })
        .collect()
}

fn value_span(v: &str, t: &Theme) -> Span<'static> {
    let s = v.trim_end_matches(',');
    let style = if s.starts_with('"') {
        t.fg(Color::Green)
    } else if s.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
        t.fg(Color::Cyan)
    } else if s == "true" || s == "false" || s == "null" {
        t.fg(Color::Magenta)
    } else {
        Style::default()
    };
    Span::styled(v.to_string(), style)
}

fn detail(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let mut lines: Vec<Line> = Vec::new();
    match app.selected_row() {
        None => lines.push(Line::from("no call selected")),
        Some(r) => {
            lines.push(Line::from(vec![
                Span::styled(r.display_method(), t.bold()),
                Span::raw(format!(
                    "  id {}  {}  {}",
                    if r.id.is_empty() { "-" } else { &r.id },
                    r.outcome.label(),
                    r.latency_us.map(dur).unwrap_or_default()
                )),
            ]));
            if let Some(h) = app.http.get(&r.exchange) {
                lines.push(Line::from(format!(
                    "{} {} → {} {}",
                    h.method,
                    h.path,
                    h.status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "…".into()),
                    h.content_type.as_deref().unwrap_or("")
                )));
                for (title, list) in [
                    ("request headers", &h.request_headers),
                    ("response headers", &h.response_headers),
                ] {
                    if list.is_empty() {
                        continue;
                    }
                    lines.push(Line::from(Span::styled(title, t.bold())));
                    for (k, v) in list {
                        lines.push(Line::from(vec![
                            Span::styled(format!("  {k}: "), t.fg(Color::Blue)),
                            Span::raw(v.clone()),
                        ]));
                    }
                }
            }
            lines.push(Line::from(format!(
                "exchange #{} · {} · {} · {}{}",
                r.exchange.n,
                r.transport,
                r.direction.arrow(),
                r.scope,
                r.conversation
                    .as_deref()
                    .map(|c| format!(" · {c}"))
                    .unwrap_or_default()
            )));
            if let Some(n) = r.result_tokens() {
                lines.push(Line::from(format!(
                    "result: {n} tokens (o200k_base: what it costs an agent's context)"
                )));
            }
            if let RowOutcome::Missing(why)
            | RowOutcome::Refused(why)
            | RowOutcome::Cancelled(why)
            | RowOutcome::Abandoned(why) = &r.outcome
            {
                lines.push(Line::from(Span::styled(
                    format!("why: {why}"),
                    t.fg(Color::Red),
                )));
            }
            for a in &r.anomaly_text {
                lines.push(Line::from(Span::styled(
                    format!("⚠ {a}"),
                    t.fg(Color::Yellow),
                )));
            }
            for i in &r.injected {
                lines.push(Line::from(Span::styled(
                    format!("⚡ injected by {i}"),
                    t.fg(Color::Magenta),
                )));
            }
            const UNSEEN: &str = "(not seen here: the call began before this dashboard saw its messages — attached later, or display events dropped; a recording has them)";
            const DROPPED: &str = "(text dropped: the detail budget keeps the newest calls)";
            if let Some(rounds) = &r.rounds {
                // A multi round-trip call: the rounds that asked for input, then this one.
                // The server's time apart from the client's (a human answering between rounds).
                let server = rounds.server_us();
                let client = r.latency_us.unwrap_or(0).saturating_sub(server);
                lines.push(Line::from(Span::styled(
                    format!(
                        "{} rounds (the latency above runs from the first request): the server's {} · waiting on the client {}",
                        rounds.list.len() + 1,
                        dur(server),
                        dur(client)
                    ),
                    t.bold(),
                )));
                for (k, x) in rounds.list.iter().enumerate() {
                    lines.push(Line::from(Span::styled(
                        format!(
                            "round {} · id {} · input required {}",
                            k + 1,
                            x.id,
                            x.latency_us.map(dur).unwrap_or_default()
                        ),
                        t.fg(Color::Cyan),
                    )));
                    for (title, text) in [("request", &x.request), ("asked", &x.reply)] {
                        lines.push(Line::from(Span::styled(format!("  {title}"), t.bold())));
                        match text {
                            Some(q) => lines.extend(json_lines(q, t)),
                            None => lines.push(Line::from(DROPPED)),
                        }
                    }
                }
                lines.push(Line::from(Span::styled(
                    format!(
                        "round {} · id {} (the answers)",
                        rounds.list.len() + 1,
                        r.id
                    ),
                    t.fg(Color::Cyan),
                )));
            }
            if let Some(task) = &r.task {
                // A task (MCP's or A2A's): the call that created it, its polls folded here, one
                // per line.
                lines.push(Line::from(Span::styled(
                    format!(
                        "task {} · {} · {} polls (the latency above runs from the call to the task's end)",
                        task.id,
                        task.status,
                        task.polls.iter().filter(|p| matches!(&*p.method, "tasks/get" | "GetTask")).count()
                    ),
                    t.bold(),
                )));
                for p in &task.polls {
                    let mut line = format!(
                        "  {} · id {} · {} · {}",
                        p.method,
                        p.id,
                        p.status.as_deref().unwrap_or("-"),
                        p.latency_us.map(dur).unwrap_or_default()
                    );
                    if !p.anomalies.is_empty() {
                        line.push_str(&format!(" · ! {}", p.anomalies.join(" ")));
                    }
                    lines.push(Line::from(Span::styled(line, t.fg(Color::Cyan))));
                }
                if let Some(last) = task.polls.iter().rev().find_map(|p| p.reply.as_ref()) {
                    lines.push(Line::from(Span::styled("last poll's reply", t.bold())));
                    lines.extend(json_lines(last, t));
                }
            }
            lines.push(Line::from(Span::styled("request", t.bold())));
            match &r.request {
                Some(q) => lines.extend(json_lines(q, t)),
                None if r.messages_unseen() => lines.push(Line::from(UNSEEN)),
                None => lines.push(Line::from(DROPPED)),
            }
            if !r.stream.is_empty() {
                lines.push(Line::from(Span::styled(
                    format!("stream ({} events)", r.stream.len()),
                    t.bold(),
                )));
                for e in &r.stream {
                    lines.push(Line::from(Span::styled(
                        e.to_string(),
                        t.fg(Color::DarkGray),
                    )));
                }
            }
            lines.push(Line::from(Span::styled("reply", t.bold())));
            match &r.reply {
                Some(q) => lines.extend(json_lines(q, t)),
                None if r.messages_unseen() => lines.push(Line::from(UNSEEN)),
                None if r.outcome == RowOutcome::Pending => lines.push(Line::from("(none yet)")),
                None if r.request.is_none() => lines.push(Line::from(DROPPED)),
                None => lines.push(Line::from("(no reply)")),
            }
        }
    }
    // `/` in the detail: the lines holding the text stand out, and the view goes to the one
    // `n` has reached.
    let mut scroll = app.detail_scroll;
    let mut title = " detail (↑/↓ scroll, / find, z full screen, Esc close) ".to_string();
    let find = app.find.to_lowercase();
    if !find.is_empty() {
        let hits: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.to_string().to_lowercase().contains(&find))
            .map(|(i, _)| i)
            .collect();
        for &i in &hits {
            let l = std::mem::take(&mut lines[i]);
            lines[i] = l.patch_style(t.selected());
        }
        title = match hits.len() {
            0 => format!(" detail: {:?} not found ", app.find),
            n => {
                let k = app.find_hit % n;
                scroll = hits[k].saturating_sub(2) as u16;
                format!(
                    " detail: {:?} {}/{} (n next, Esc clear) ",
                    app.find,
                    k + 1,
                    n
                )
            }
        };
    }
    if app.editing_find {
        title = format!(" find: {}▏ (Enter, Esc) ", app.find_input);
    }
    // Full screen, the frame has no side borders: a wrapped line selected with the mouse
    // copies as the text alone.
    let borders = if app.detail_full {
        Borders::TOP
    } else {
        Borders::ALL
    };
    f.render_widget(
        Paragraph::new(lines)
            .block(Block::default().borders(borders).title(title))
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0)),
        area,
    );
}

/// `i`: what both sides of the selected session declared at `initialize` (or
/// `server/discover`), and what was used against it.
fn info(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let lines: Vec<Line> = app
        .session_info()
        .into_iter()
        .map(|l| {
            if l.starts_with('✗') {
                Line::from(Span::styled(l, t.fg(Color::Yellow)))
            } else if !l.starts_with(' ') && l.ends_with(':') {
                Line::from(Span::styled(l, t.bold()))
            } else {
                Line::from(l)
            }
        })
        .collect();
    let w = area.width.min(100);
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" declared and used (any key closes) "),
        ),
        r,
    );
}

/// `n thing` or `n things`.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The anomalies list's title: what the list holds (after `c`, what came since), and the total
/// since the start when that differs.
fn anomalies_title(app: &App) -> String {
    let listed = app.anomaly_rows.len() as u64;
    let mut t = format!(" {}", counted(listed, "anomaly", "anomalies"));
    if listed != app.anomalies_total {
        t.push_str(&format!(" listed, {} since start", app.anomalies_total));
    }
    t.push(' ');
    t
}

fn anomalies(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let sel = app.selected_index();
    let height = area.height.saturating_sub(3) as usize;
    let start = if sel >= height { sel + 1 - height } else { 0 };
    let rows: Vec<TRow> = app
        .anomaly_rows
        .iter()
        .skip(start)
        .take(height.max(1))
        .map(|a| {
            TRow::new(vec![
                Cell::from(clock(a.ts_ns)),
                Cell::from(Span::styled(a.code.clone(), t.fg(Color::Yellow))),
                Cell::from(a.scope.chars().take(16).collect::<String>()),
                Cell::from(a.message.clone()),
            ])
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(12),
            Constraint::Length(20),
            Constraint::Length(16),
            Constraint::Min(20),
        ],
    )
    .header(TRow::new(vec!["time", "code", "scope", "message"]).style(t.bold()))
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(anomalies_title(app)),
    )
    .row_highlight_style(t.selected());
    let mut state = TableState::default();
    if !app.anomaly_rows.is_empty() {
        state.select(Some(sel - start));
    }
    f.render_stateful_widget(table, area, &mut state);
}

fn methods(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let list = app.methods_sorted();
    // The results' tokens when there is room for them (counted only then).
    let roomy = area.width >= 100;
    let toks = if roomy {
        app.token_totals()
    } else {
        Default::default()
    };
    let rows: Vec<TRow> = list
        .iter()
        .map(|(m, s)| {
            let (p50, p95, p99) = percentiles(s.latencies.clone()).unwrap_or((0, 0, 0));
            let rate = if s.count > 0 {
                format!("{:.1}%", s.errors as f64 * 100.0 / s.count as f64)
            } else {
                "-".into()
            };
            let red = if s.errors > 0 {
                t.fg(Color::Red)
            } else {
                Style::default()
            };
            let mut cells = vec![
                Cell::from(m.to_string()),
                Cell::from(s.count.to_string()),
                Cell::from(Span::styled(s.errors.to_string(), red)),
                Cell::from(Span::styled(rate, red)),
                Cell::from(dur(p50)),
                Cell::from(dur(p95)),
                Cell::from(dur(p99)),
            ];
            if roomy {
                let tok = toks.methods.get(&***m);
                cells.push(Cell::from(tok.map(|t| tokens(t.0)).unwrap_or_default()));
                cells.push(Cell::from(tok.map(|t| tokens(t.1)).unwrap_or_default()));
            }
            TRow::new(cells)
        })
        .collect();
    let mut widths = vec![
        Constraint::Min(20),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
    ];
    let mut head = vec![
        "method / tool",
        "calls",
        "errors",
        "err %",
        "p50",
        "p95",
        "p99",
    ];
    if roomy {
        widths.extend([Constraint::Length(8), Constraint::Length(8)]);
        head.extend(["tok p50", "tok p95"]);
    }
    let table = Table::new(rows, widths)
        .header(TRow::new(head).style(t.bold()))
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" per method and tool (Enter: its calls) "),
        )
        .row_highlight_style(t.selected());
    let mut state = TableState::default();
    if !list.is_empty() {
        state.select(Some(app.selected_index()));
    }
    f.render_stateful_widget(table, area, &mut state);
}

fn sessions(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let list = app.sessions_sorted();
    // The results' tokens per session when there is room for them (counted only then).
    let roomy = area.width >= 100;
    let toks = if roomy {
        app.token_totals()
    } else {
        Default::default()
    };
    let rows: Vec<TRow> = list
        .iter()
        .map(|(s, st)| {
            let mut cells = vec![
                Cell::from(s.to_string()),
                Cell::from(st.calls.to_string()),
                Cell::from(Span::styled(
                    st.errors.to_string(),
                    if st.errors > 0 {
                        t.fg(Color::Red)
                    } else {
                        Style::default()
                    },
                )),
                Cell::from(st.anomalies.to_string()),
                Cell::from(clock(st.last_ns)),
            ];
            if roomy {
                let n = toks.sessions.get(*s).copied().unwrap_or(0);
                cells.push(Cell::from(tokens(u32::try_from(n).unwrap_or(u32::MAX))));
            }
            TRow::new(cells)
        })
        .collect();
    let mut widths = vec![
        Constraint::Min(20),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(9),
        Constraint::Length(12),
    ];
    let mut head = vec!["scope", "calls", "errors", "anomalies", "last seen"];
    if roomy {
        widths.push(Constraint::Length(8));
        head.push("tokens");
    }
    let table = Table::new(rows, widths)
        .header(TRow::new(head).style(t.bold()))
        .block(Block::default().borders(Borders::ALL).title(" sessions "))
        .row_highlight_style(t.selected());
    let mut state = TableState::default();
    if !list.is_empty() {
        state.select(Some(app.selected_index()));
    }
    f.render_stateful_widget(table, area, &mut state);
}

/// `watch`'s servers: one line per session, live ones first (Enter shows its calls).
fn servers(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let list = app.servers_sorted();
    let rows: Vec<TRow> = list
        .iter()
        .map(|s| {
            TRow::new(vec![
                Cell::from(s.label.to_string()),
                Cell::from(Span::styled(
                    if s.live { "live" } else { "ended" },
                    if s.live {
                        t.fg(Color::Green)
                    } else {
                        Style::default()
                    },
                )),
                Cell::from(s.pid.map(|p| p.to_string()).unwrap_or_default()),
                Cell::from(s.calls.to_string()),
                Cell::from(Span::styled(
                    s.errors.to_string(),
                    if s.errors > 0 {
                        t.fg(Color::Red)
                    } else {
                        Style::default()
                    },
                )),
                Cell::from(s.anomalies.to_string()),
                Cell::from(if s.last_ns > 0 {
                    clock(s.last_ns)
                } else {
                    String::new()
                }),
                Cell::from(s.command.clone()),
            ])
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(18),
            Constraint::Length(5),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(9),
            Constraint::Length(12),
            Constraint::Min(10),
        ],
    )
    .header(
        TRow::new(vec![
            "server",
            "state",
            "pid",
            "calls",
            "errors",
            "anomalies",
            "last seen",
            "command",
        ])
        .style(t.bold()),
    )
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(" servers (Enter: its calls) "),
    )
    .row_highlight_style(t.selected());
    let mut state = TableState::default();
    if !list.is_empty() {
        state.select(Some(app.selected_index()));
    }
    f.render_stateful_widget(table, area, &mut state);
}

/// The servers' stderr lines, newest last.
fn stderr(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let rows: Vec<TRow> = app
        .stderr
        .iter()
        .map(|(ts, server, line)| {
            TRow::new(vec![
                Cell::from(clock(*ts)),
                Cell::from(server.to_string()),
                Cell::from(line.to_string()),
            ])
        })
        .collect();
    let n = rows.len();
    let table = Table::new(
        rows,
        [
            Constraint::Length(12),
            Constraint::Length(12),
            Constraint::Min(20),
        ],
    )
    .header(TRow::new(vec!["time", "server", "stderr"]).style(t.bold()))
    .block(Block::default().borders(Borders::ALL).title(" stderr "))
    .row_highlight_style(t.selected());
    let mut state = TableState::default();
    if n > 0 {
        state.select(Some(app.selected_index()));
    }
    f.render_stateful_widget(table, area, &mut state);
}

/// What the intercept holds: one line each (the selected one marked), its time left before it
/// forwards itself, and the selected one's frame.
fn held(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let h = &app.held;
    let title = format!(
        " intercept: {} — {} held{} ",
        if h.filter.is_empty() {
            "off"
        } else {
            &h.filter
        },
        h.held.len(),
        if h.held.is_empty() {
            String::new()
        } else {
            "  F forward  E edit  D drop  A answer  [ ] select".into()
        }
    );
    let mut lines: Vec<Line> = Vec::new();
    if h.held.is_empty() {
        lines.push(Line::from(Span::styled(
            "nothing held yet: a message matching the filter is held here before it is forwarded (I changes the filter, Enter on an empty one turns it off)",
            t.fg(Color::DarkGray),
        )));
    }
    for (i, m) in h.held.iter().enumerate() {
        let mark = if i == h.sel { "▶ " } else { "  " };
        let dir = if m.direction == crate::events::Direction::ClientToServer {
            "→"
        } else {
            "←"
        };
        let target = m
            .target
            .as_deref()
            .map(|t| format!(" {t}"))
            .unwrap_or_default();
        let id = if m.id.is_empty() {
            String::new()
        } else {
            format!(" id {}", m.id)
        };
        let line = format!(
            "{mark}⏸ #{} {dir} {}{target}{id}  held {}s, forwards itself in {}s",
            m.n,
            m.method,
            m.held_ms / 1000,
            m.left_ms.div_ceil(1000)
        );
        let style = if i == h.sel {
            t.selected()
        } else {
            t.fg(Color::Magenta)
        };
        lines.push(Line::from(Span::styled(line, style)));
    }
    if let Some(m) = app.held_selected() {
        let width = area.width.saturating_sub(4) as usize;
        let text: String = m.shown.chars().take(width.max(8)).collect();
        lines.push(Line::from(Span::styled(
            format!("  {text}"),
            t.fg(Color::DarkGray),
        )));
    }
    if h.overflow > 0 {
        lines.push(Line::from(Span::styled(
            format!(
                "  {} matching messages passed unheld: the held list was full",
                h.overflow
            ),
            t.fg(Color::Red),
        )));
    }
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

fn status(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let line = if app.held.editing {
        let mut spans = vec![
            Span::styled("intercept: ", t.bold()),
            Span::raw(app.held.input.clone()),
            Span::raw("▏ "),
        ];
        match crate::filter::Filter::parse(&app.held.input) {
            Err(why) if !app.held.input.trim().is_empty() => {
                spans.push(Span::styled(why, t.fg(Color::Red)))
            }
            _ => spans.push(Span::raw(
                "(the filter language; Enter apply, empty Enter off, Esc cancel)",
            )),
        }
        Line::from(spans)
    } else if app.editing_filter {
        let mut spans = vec![
            Span::styled("filter: ", t.bold()),
            Span::raw(app.filter_input.clone()),
            Span::raw("▏ "),
        ];
        match app.filter_error() {
            Some(why) => spans.push(Span::styled(why, t.fg(Color::Red))),
            None => spans.push(Span::raw("(Enter apply, Esc cancel)")),
        }
        Line::from(spans)
    } else {
        let mut spans = vec![];
        if !app.filter.is_empty() {
            spans.push(Span::styled(
                format!("filter: {}  ", app.filter),
                t.fg(Color::Yellow),
            ));
        }
        spans.push(Span::raw(if app.follow {
            "following  "
        } else {
            "paused  "
        }));
        if !app.status.is_empty() {
            spans.push(Span::styled(format!("{}  ", app.status), t.fg(Color::Cyan)));
        }
        // The key hints as long as the line has room, else just the way to all of them.
        let used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
        let back = if app.back.is_some() { "Esc back  " } else { "" };
        let full = format!("{back}? help  / filter  Enter detail  Tab view  q quit");
        let hints = if used + full.chars().count() <= area.width as usize {
            full
        } else {
            format!("{back}? help")
        };
        spans.push(Span::styled(hints, t.fg(Color::DarkGray)));
        Line::from(spans)
    };
    f.render_widget(Paragraph::new(line), area);
}

pub const HELP: [(&str, &str); 22] = [
    ("↑/↓ j/k", "move (scroll in the detail pane)"),
    ("PgUp/PgDn", "move a page"),
    ("g / G", "first / newest (follow)"),
    (
        "Enter",
        "the detail pane; on an anomaly, method, session or server: its calls",
    ),
    (
        "Tab",
        "next view: calls, anomalies, methods, sessions (servers), stderr",
    ),
    (
        "/",
        "filter, terms ANDed, -term negates: error anomaly pending http, method: tool: status: dir: id: session: server: code:, a method glob, text",
    ),
    ("h", "hide / show the http rows (401/403, OAuth discovery)"),
    (
        "z / /",
        "in the detail: full screen, no side borders (select to copy) / find in the frame (n next)",
    ),
    (
        "i",
        "what the selected call's session declared at initialize, and what it used",
    ),
    (
        "Esc",
        "close the detail pane, else back to where Enter came from, else clear the filter",
    ),
    ("f", "follow the newest / pause"),
    ("c", "clear the list"),
    (
        "y",
        "copy the selected call as curl (OSC 52; also saved to a file)",
    ),
    (
        "e",
        "export the selected call (detail open) or the list as an exchange document",
    ),
    (
        "r",
        "re-send the selected request to the upstream (proxy mode)",
    ),
    (
        "I",
        "intercept: messages matching a filter (either direction) are held before they are forwarded; empty turns it off (a live proxy or `stdio --dashboard`; not over attach or watch)",
    ),
    (
        "F E D A [ ]",
        "on a held message: forward, edit in $EDITOR, drop, answer (the last reply to the same call, edited); select",
    ),
    ("mouse wheel", "scroll"),
    ("?", "this help"),
    ("q", "quit"),
    ("", ""),
    ("", "NO_COLOR=1 turns colours off"),
];

/// The empty list's placeholder: what to do first (the demo's curl commands, how to attach).
fn intro(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let mut lines: Vec<Line> = vec![
        Line::from(Span::styled("No calls yet.", t.bold())),
        Line::from(""),
    ];
    lines.extend(app.intro.iter().map(|l| Line::from(l.clone())));
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" getting started "),
        ),
        area,
    );
}

fn help(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    // As wide as its longest line (or the screen), as tall as it needs (or the screen): it
    // scrolls with ↑/↓ when the screen is short.
    let longest = HELP
        .iter()
        .map(|(_, d)| 13 + d.chars().count() as u16)
        .max()
        .unwrap_or(40);
    let w = area.width.min(longest + 2);
    // Lines as wrapped at this width: the height and how far it scrolls.
    let inner = w.saturating_sub(2).max(1) as usize;
    let wrapped: u16 = HELP
        .iter()
        .map(|(_, d)| (13 + d.chars().count()).div_ceil(inner) as u16)
        .sum();
    let h = (wrapped + 2).min(area.height);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, d)| {
            Line::from(vec![
                Span::styled(format!("{k:<12}"), t.bold()),
                Span::raw(*d),
            ])
        })
        .collect();
    let max_scroll = (wrapped + 2).saturating_sub(h);
    let title = if max_scroll > 0 {
        " keys (↑/↓ scroll) "
    } else {
        " keys "
    };
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .scroll((app.help_scroll.min(max_scroll), 0))
            .block(Block::default().borders(Borders::ALL).title(title)),
        r,
    );
}
