//! `rpctap view FILE` (a recording in the dashboard, or as the headless log without a terminal)
//! and `rpctap attach` (a live feed in the dashboard, or tailed).

use super::AppError;
use std::future::Future;
use std::time::Duration;

/// `rpctap view FILE`: a recording in the dashboard.
pub async fn run(
    args: crate::cli::ViewArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    let rec = crate::record::reader::read(&args.file)?;
    let title = format!("rpctap view {}", args.file.display());
    view_capture(rec, &title, args.max_rows, shutdown).await
}

/// The dashboard over one recording (`view`, `open`).
pub async fn view_capture(
    rec: crate::record::reader::Capture,
    title: &str,
    max_rows: usize,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    // Without a terminal (a pipe, a CI log): the recording as the headless log prints it, as
    // `attach` does — never the dashboard's escape codes into a file.
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for line in rec
            .events
            .iter()
            .filter_map(crate::observe::logsink::text_line)
        {
            match writeln!(out, "{line}") {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
                Err(e) => return Err(AppError::Io(format!("stdout: {e}"))),
            }
        }
        return match out.flush() {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(AppError::Io(format!("stdout: {e}")))
            }
            _ => Ok(0),
        };
    }
    let (listen, upstream) = crate::view::header_endpoints(&rec.header);
    let mut app = crate::view::App::new(title, &listen, &upstream, max_rows, 0);
    app.load_recording(&rec);
    app.follow = false;
    crate::tui::run(
        app,
        None,
        shutdown,
        None,
        Some(&rec),
        None,
        crate::tui::Screen::Stdout,
    )
    .await
    .map_err(|e| AppError::Terminal(e.to_string()))?;
    Ok(0)
}

/// `rpctap attach ADDR`: the dashboard on a running rpctap's live feed.
pub async fn attach(
    args: crate::cli::AttachArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    let mut target = crate::attach::FeedTarget::parse(&args.addr)
        .map_err(|e| AppError::Io(format!("attach: {e}")))?;
    if let Some(f) = &args.filter {
        // Refused here, naming the term, rather than by the feed.
        crate::filter::Filter::parse(f)
            .map_err(|why| AppError::Io(format!("--filter {f:?}: {why}")))?;
        target = target.with_filter(f);
    }
    let (tx, mut feed) = tokio::sync::mpsc::channel(65_536);
    let task = crate::attach::spawn(target.clone(), args.token.clone(), tx);
    // A refusal (401: no token, or the wrong one) ends the attach before the dashboard opens:
    // exit 2 with the reason, never a retry loop. Whatever came first is handed on.
    let first = tokio::time::timeout(Duration::from_secs(3), feed.recv())
        .await
        .ok()
        .flatten();
    if let Some(crate::attach::FeedMsg::Refused(why)) = &first {
        task.abort();
        return Err(AppError::Io(format!("attach {}: {why}", target.addr)));
    }
    // Without a terminal (or with --text): the feed as the headless log prints it.
    if args.text || !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        let r = tail_feed(first, feed, shutdown).await;
        task.abort();
        return r;
    }
    let (tx, rx) = tokio::sync::mpsc::channel(65_536);
    let forward = tokio::spawn(async move {
        if let Some(m) = first {
            let _ = tx.send(m).await;
        }
        while let Some(m) = feed.recv().await {
            if tx.send(m).await.is_err() {
                return;
            }
        }
    });
    let mut app = crate::view::App::new(
        &format!("rpctap attach {}", target.addr),
        "?",
        "?",
        args.max_rows,
        crate::events::now_ns(),
    );
    app.status = format!("connecting to {}…", target.addr);
    let r = crate::tui::run(
        app,
        Some(crate::tui::Source::Feed(rx)),
        shutdown,
        None,
        None,
        None,
        crate::tui::Screen::Stdout,
    )
    .await;
    task.abort();
    forward.abort();
    r.map_err(|e| AppError::Terminal(e.to_string()))?;
    Ok(0)
}

/// `attach --text`: each event of the feed as a `--log text` line on stdout until the feed's
/// process is gone for good, `shutdown`, or stdout closes (`| head`: a clean exit).
async fn tail_feed(
    first: Option<crate::attach::FeedMsg>,
    mut feed: tokio::sync::mpsc::Receiver<crate::attach::FeedMsg>,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    use crate::attach::FeedMsg;
    use std::io::Write;
    tokio::pin!(shutdown);
    let mut next = first;
    loop {
        let msg = match next.take() {
            Some(m) => m,
            None => tokio::select! {
                m = feed.recv() => match m {
                    Some(m) => m,
                    None => return Ok(0),
                },
                () = &mut shutdown => return Ok(0),
            },
        };
        match msg {
            FeedMsg::Event(e) => {
                let Some(line) = crate::observe::logsink::text_line(&e) else {
                    continue;
                };
                let mut out = std::io::stdout().lock();
                match writeln!(out, "{line}").and_then(|()| out.flush()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
                    Err(e) => return Err(AppError::Io(format!("stdout: {e}"))),
                }
            }
            FeedMsg::State(s) => eprintln!("rpctap: {s}"),
            FeedMsg::Refused(why) => return Err(AppError::Io(why)),
            FeedMsg::Header(_) | FeedMsg::Marker(_) => {}
        }
    }
}
