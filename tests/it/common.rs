//! Test harness: in-process servers on 127.0.0.1:0 (demo, proxy, scripted upstreams) and a
//! small HTTP client. Everything speaks over real sockets.
#![allow(dead_code)]

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use rpctap::app::RunningProxy;
use rpctap::cli::ProxyFlags;
use rpctap::demo::{self, DemoOptions};
use rpctap::events::{BusBuilder, Event, Subscription};
use rpctap::inspect::Inspector;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A free port outside the kernel's ephemeral range (32768–60999 on Linux by default), for a
/// server the test starts as a child process. Ports from `bind(127.0.0.1:0)` are ephemeral: after
/// such a probe is dropped, another test of this process binding port 0 can be handed the same
/// port before the child listens on it (seen in CI). Each port is also claimed across test
/// processes (nextest runs one per test): a lock on a file named for it, held until the process
/// ends, so two tests running at once are never handed the same port, whatever their pids.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static HELD: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ports");
    let _ = std::fs::create_dir_all(&dir);
    let offset = (std::process::id() % 480) * 25;
    for _ in 0..100_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + ((offset + n) % 12_000) as u16;
        let Ok(f) = std::fs::File::create(dir.join(port.to_string())) else {
            continue;
        };
        if f.try_lock().is_err() {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            HELD.lock().unwrap_or_else(|e| e.into_inner()).push(f);
            return port;
        }
    }
    panic!("no free port in 20000..32000");
}

/// The path of a peer script under tests/interop.
pub fn script(name: &str) -> String {
    root()
        .join("tests/interop")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Waits (up to 10 s) until something listens on `addr`, e.g. a child process the test started.
pub async fn wait_listening(addr: SocketAddr) {
    for _ in 0..400 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{addr} never listened");
}

/// Stops a server when dropped.
pub struct Stop(Option<oneshot::Sender<()>>);
impl Drop for Stop {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            let _ = t.send(());
        }
    }
}

fn stop_pair() -> (Stop, impl Future<Output = ()>) {
    let (tx, rx) = oneshot::channel();
    (Stop(Some(tx)), async move {
        let _ = rx.await;
    })
}

pub async fn start_demo_with(opts: DemoOptions) -> (SocketAddr, Stop) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (stop, sd) = stop_pair();
    tokio::spawn(demo::run(l, opts, sd, Duration::from_secs(1)));
    (addr, stop)
}

pub async fn start_demo() -> (SocketAddr, Stop) {
    start_demo_with(DemoOptions::default()).await
}

pub struct TestProxy {
    pub addr: SocketAddr,
    pub inspector: Inspector,
    /// What the listener counts (parked, timed out, refused connections).
    pub listener: Arc<rpctap::server::ListenerStats>,
    pub events: Subscription,
    pub stop: Stop,
    /// The proxy's serve task: it ends once the proxy has drained and every observer finished
    /// (the recording flushed whole). `drop(p.stop); p.served.await` waits for exactly that.
    pub served: tokio::task::JoinHandle<()>,
}

impl TestProxy {
    /// The events up to the end of the next exchange (its `http end` is the last event the
    /// inspector publishes for it): no waiting for silence.
    pub async fn drain_exchange(&mut self) -> Vec<Arc<Event>> {
        let mut out = Vec::new();
        while let Ok(Some(e)) =
            tokio::time::timeout(Duration::from_secs(10), self.events.rx.recv()).await
        {
            let end = matches!(&*e, Event::Http(rpctap::events::HttpEvent::End { .. }));
            out.push(e);
            if end {
                break;
            }
        }
        out
    }

    /// Every event published so far (waits briefly for stragglers).
    pub async fn drain(&mut self) -> Vec<Arc<Event>> {
        let mut out = Vec::new();
        while let Ok(Some(e)) =
            tokio::time::timeout(Duration::from_millis(150), self.events.rx.recv()).await
        {
            out.push(e);
        }
        out
    }
}

/// Waits (up to 10 s) until the inspector holds `n` pending calls: the calls reached the proxy.
pub async fn wait_pending(inspector: &Inspector, n: usize) {
    for _ in 0..1000 {
        if inspector.pending_calls() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never saw {n} pending calls");
}

/// A proxy's flags that record its traffic to `file`.
pub fn record_flags(file: &std::path::Path) -> ProxyFlags {
    rpctap::cli::SharedFlags {
        record: Some(file.to_path_buf()),
        ..Default::default()
    }
    .into()
}

pub async fn start_proxy_flags(upstream: &str, flags: ProxyFlags) -> TestProxy {
    let mut flags = flags;
    flags.shared.log.get_or_insert(rpctap::cli::LogFormat::Off);
    let cfg = rpctap::config::resolve(Some("127.0.0.1:0".parse().unwrap()), Some(upstream), &flags)
        .unwrap();
    let mut bus = BusBuilder::default();
    let events = bus.subscribe("test", 1 << 20);
    let running = RunningProxy::bind_with(cfg, bus).await.unwrap();
    let addr = running.local_addr().unwrap();
    let inspector = running.proxy.inspector().clone();
    let listener = running.listener_stats.clone();
    let (stop, sd) = stop_pair();
    let served = tokio::spawn(running.serve(sd));
    TestProxy {
        addr,
        inspector,
        listener,
        events,
        stop,
        served,
    }
}

pub async fn start_proxy(upstream: &str) -> TestProxy {
    start_proxy_flags(upstream, ProxyFlags::default()).await
}

pub type BoxFut = Pin<
    Box<
        dyn Future<Output = Response<http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>>>
            + Send,
    >,
>;

/// A scripted upstream: `f` gets the request head and the whole body and returns the reply.
pub async fn start_upstream<F>(f: F) -> (SocketAddr, Stop)
where
    F: Fn(http::request::Parts, Bytes) -> BoxFut + Send + Sync + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (stop, sd) = stop_pair();
    let f = Arc::new(f);
    tokio::spawn(rpctap::server::serve(
        l,
        move |_peer| {
            let f = f.clone();
            move |req: Request<rpctap::server::RequestBody>| {
                let f = f.clone();
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|c| c.to_bytes())
                        .unwrap_or_default();
                    f(parts, body).await
                }
            }
        },
        sd,
        Duration::from_millis(200),
    ));
    (addr, stop)
}

pub fn boxed(b: impl Into<Bytes>) -> http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible> {
    http_body_util::combinators::UnsyncBoxBody::new(Full::new(b.into()))
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = client()
        .request(b.body(Full::new(body.into())).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

pub async fn post_json(addr: SocketAddr, path: &str, body: &str) -> Reply {
    send(
        addr,
        "POST",
        path,
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await
}

pub const MCP_ACCEPT: (&str, &str) = ("accept", "application/json, text/event-stream");

/// The `data:` payloads of an SSE body.
pub fn sse_data(body: &str) -> Vec<serde_json::Value> {
    body.split("\n\n")
        .filter_map(|ev| {
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            (!data.is_empty()).then(|| serde_json::from_str(&data.join("\n")).unwrap())
        })
        .collect()
}

/// The headers of a request in MCP session `sid` (protocol 2025-06-18).
pub fn mcp_headers(sid: &str) -> [(&str, &str); 4] {
    [
        ("content-type", "application/json"),
        MCP_ACCEPT,
        ("mcp-session-id", sid),
        ("mcp-protocol-version", "2025-06-18"),
    ]
}

/// Opens an MCP session on `addr` (initialize + initialized); returns the session id.
pub async fn mcp_session(addr: SocketAddr) -> String {
    mcp_session_with(addr, "2025-06-18").await.0
}

/// Opens an MCP session asking for protocol `version`; returns the session id and the
/// initialize result.
pub async fn mcp_session_with(addr: SocketAddr, version: &str) -> (String, serde_json::Value) {
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"test","version":"1"}}}}}}"#
    );
    let r = send(
        addr,
        "POST",
        "/mcp",
        &[("content-type", "application/json"), MCP_ACCEPT],
        init,
    )
    .await;
    assert_eq!(r.status, 200);
    let reply = if r.text().trim_start().starts_with('{') {
        r.json()
    } else {
        sse_data(&r.text()).remove(0)
    };
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_string();
    let r = send(
        addr,
        "POST",
        "/mcp",
        &[
            ("content-type", "application/json"),
            MCP_ACCEPT,
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", version),
        ],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(r.status, 202);
    (sid, reply["result"].clone())
}

pub fn anomalies(events: &[Arc<Event>]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match &**e {
            Event::Anomaly(a) => Some((a.code.to_string(), a.id.as_ref().map(|i| i.to_string()))),
            _ => None,
        })
        .collect()
}

pub fn calls(events: &[Arc<Event>]) -> Vec<rpctap::events::CallEvent> {
    events
        .iter()
        .filter_map(|e| match &**e {
            Event::Call(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

pub fn json_reply(
    status: u16,
    body: &str,
) -> Response<http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(boxed(body.to_string()))
        .unwrap()
}

pub fn sse_reply(
    events: &[&str],
) -> Response<http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>> {
    let body: String = events
        .iter()
        .map(|e| format!("event: message\ndata: {e}\n\n"))
        .collect();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(boxed(body))
        .unwrap()
}

/// The misbehaving upstream: what it does depends on the `case` query parameter.
pub async fn misbehaving_upstream() -> (std::net::SocketAddr, Stop) {
    start_upstream(|parts, _body| {
        let case = parts.uri.query().unwrap_or("").trim_start_matches("case=").to_string();
        Box::pin(async move {
            match case.as_str() {
                "dup" => json_reply(200, r#"[{"jsonrpc":"2.0","id":1,"result":"a"},{"jsonrpc":"2.0","id":1,"result":"b"}]"#),
                "unmatched" => json_reply(200, r#"[{"jsonrpc":"2.0","id":1,"result":1},{"jsonrpc":"2.0","id":99,"result":1}]"#),
                "type" => json_reply(200, r#"{"jsonrpc":"2.0","id":"1","result":1}"#),
                "missing" => json_reply(200, r#"[{"jsonrpc":"2.0","id":1,"result":1}]"#),
                "notif" => json_reply(200, r#"[{"jsonrpc":"2.0","id":1,"result":1},{"jsonrpc":"2.0","id":5,"result":1}]"#),
                "batch" => json_reply(200, r#"{"jsonrpc":"2.0","id":1,"result":1}"#),
                "invalid" => json_reply(200, r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"Invalid Request"}}"#),
                "invalid-reply" => sse_reply(&[r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}"#, r#"{"jsonrpc":"2.0","id":1,"result":1}"#]),
                "parse" => sse_reply(&[r#"{"jsonrpc":"2.0","id":1,"res"#, r#"{"jsonrpc":"2.0","id":1,"result":1}"#]),
                "nullid" => sse_reply(&[r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"oops"}}"#, r#"{"jsonrpc":"2.0","id":1,"result":1}"#]),
                "unsafe" => json_reply(200, r#"{"jsonrpc":"2.0","id":12345678901234567890,"result":1}"#),
                "status" => json_reply(500, r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error"}}"#),
                "notif-status" => json_reply(200, ""),
                "notif-body" => json_reply(200, r#"{"jsonrpc":"2.0","id":1,"result":1}"#),
                "notif-refused" => json_reply(400, r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#),
                "tool" => sse_reply(&[r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#]),
                "init" => {
                    let mut r = sse_reply(&[r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"x","version":"1"}}}"#]);
                    r.headers_mut().insert("mcp-session-id", "sess-A".parse().unwrap());
                    r
                }
                "early" => sse_reply(&[r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#]),
                "changed" => {
                    let mut r = sse_reply(&[r#"{"jsonrpc":"2.0","id":2,"result":{}}"#]);
                    r.headers_mut().insert("mcp-session-id", "sess-B".parse().unwrap());
                    r
                }
                "big" => json_reply(200, &format!(r#"{{"jsonrpc":"2.0","id":1,"result":"{}"}}"#, "x".repeat(4096))),
                "reject" => Response::builder().status(404).body(boxed("no such session")).unwrap(),
                "notjson" => json_reply(200, "oops, not json"),
                "accepted" => Response::builder().status(202).body(boxed("")).unwrap(),
                "empty-batch" => json_reply(200, "[]"),
                _ => json_reply(200, r#"{"jsonrpc":"2.0","id":1,"result":null}"#),
            }
        })
    })
    .await
}

/// A scratch folder under the system's temp dir, unique to this test process and name, made
/// empty on creation and removed when dropped.
pub struct Scratch(std::path::PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("rpctap-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    /// Every recording a test wrote here is held to the dashboard's differential standard
    /// before it goes (unless the test already failed).
    fn drop(&mut self) {
        if !std::thread::panicking() {
            for file in recordings_in(&self.0) {
                assert_dashboard_matches_calls(&file);
            }
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The recordings (first parts) under `dir`: files whose first line is a recording header.
fn recordings_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let rotated = p
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| x.chars().all(|c| c.is_ascii_digit()));
            if rpctap::record::reader::is_recording(&p) && !rotated {
                out.push(p);
            }
        }
    }
    out
}

/// The rpctap binary, as a command to run.
pub fn rpctap() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_rpctap"))
}

/// `rpctap ARGS` run to its end: its exit code (-1 for a signal), stdout and stderr.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = rpctap().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `rpctap proxy` headless on a free loopback port in front of `upstream` (a URL), with no log
/// and stdin/stdout closed; with `admin`, its admin listener on a free loopback port too.
pub fn proxy_cmd(upstream: &str, admin: bool) -> std::process::Command {
    let mut cmd = rpctap();
    cmd.args(["proxy", "--listen", "127.0.0.1:0", "--upstream", upstream]);
    if admin {
        cmd.args(["--admin", "127.0.0.1:0"]);
    }
    cmd.args(["--no-tui", "--log", "off"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    cmd
}

/// Spawns `cmd` with its stderr piped and reads that until each marker (e.g. `"proxy on
/// http://"`) has been seen followed by an address; returns the process, the addresses in the
/// markers' order, and the rest of stderr, a line at a time (read on, so the child never blocks
/// on it, whether or not the receiver is kept).
pub fn spawn_with_banner(
    cmd: &mut std::process::Command,
    markers: &[&str],
) -> (Proc, Vec<SocketAddr>, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    cmd.stderr(std::process::Stdio::piped());
    let mut proc = Proc::spawn(cmd);
    let mut err = std::io::BufReader::new(proc.0.stderr.take().unwrap());
    let mut found: Vec<Option<SocketAddr>> = vec![None; markers.len()];
    let mut line = String::new();
    while found.iter().any(Option::is_none) {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "exited before its banner: {markers:?}"
        );
        for (m, f) in markers.iter().zip(found.iter_mut()) {
            if let Some(rest) = line.split(m).nth(1) {
                *f = f.or(rest.split_whitespace().next().and_then(|a| a.parse().ok()));
            }
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut l = String::new();
        while err.read_line(&mut l).unwrap_or(0) > 0 {
            let _ = tx.send(std::mem::take(&mut l));
        }
    });
    (proc, found.into_iter().flatten().collect(), rx)
}

/// The conformance suite's server scenarios against `url` (run in `work`): everything it
/// printed, stdout then stderr.
pub async fn conformance_server(url: String, work: std::path::PathBuf) -> String {
    conformance_run("@modelcontextprotocol/conformance", &["--url", &url], &work).await
}

/// The conformance suite 0.2 (`conformance2`): the scenarios the 2026-07-28 revision requires
/// (the tasks extension's among them) against `url`.
pub async fn conformance_2026(url: String, work: std::path::PathBuf) -> String {
    let args = ["--url", &url, "--requirements", "2026-07-28"];
    conformance_run("conformance2", &args, &work).await
}

async fn conformance_run(package: &str, args: &[&str], work: &std::path::Path) -> String {
    let dir = installed("node", NODE_PACKAGES);
    let work = work.to_path_buf();
    let index = dir.join("node_modules").join(package).join("dist/index.js");
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(dir.join("node_modules/node/bin/node"))
            .arg(index)
            .arg("server")
            .args(&args)
            .current_dir(&work)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    })
    .await
    .unwrap()
}

/// Per-scenario verdict lines of the conformance suite (`✓ name: N passed, M failed`).
pub fn verdicts(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with('✓') || l.starts_with('✗'))
        .map(str::to_string)
        .collect()
}

/// Runs `cmd` to its end: it must succeed (its stderr and `what` say why not), and its stdout
/// is one JSON value (a peer script's or a CLI's report).
pub fn json_stdout(cmd: &mut std::process::Command, what: &str) -> serde_json::Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A child process that is killed and reaped when dropped: a failing test leaks nothing.
pub struct Proc(pub std::process::Child);

impl Proc {
    pub fn spawn(cmd: &mut std::process::Command) -> Proc {
        Proc(cmd.spawn().unwrap())
    }
    pub fn id(&self) -> u32 {
        self.0.id()
    }
    /// Sends SIGTERM and waits for the exit.
    pub fn term(&mut self) -> std::process::ExitStatus {
        signal(self.0.id(), "TERM");
        self.0.wait().unwrap()
    }
    /// Sends SIGTERM and collects the exit and what was piped.
    pub fn term_output(mut self) -> std::process::Output {
        signal(self.0.id(), "TERM");
        let child = std::mem::replace(
            &mut self.0,
            // A stand-in, already reaped, for the guard's own drop.
            std::process::Command::new("true").spawn().unwrap(),
        );
        let _ = self.0.wait();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `SIG{name}` to `pid`.
pub fn signal(pid: u32, name: &str) {
    let _ = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status();
}

/// Anomaly codes by scope, sorted.
pub type Codes = std::collections::BTreeMap<String, Vec<String>>;

/// (scope → sorted codes) of a recording's live `anomaly` lines.
pub fn live_codes(file: &std::path::Path) -> Codes {
    let rec = rpctap::record::reader::read(file).unwrap();
    let mut out = Codes::new();
    for e in &rec.events {
        if let Event::Anomaly(a) = e {
            // As `check` reports it: a stateless client's exchanges under its group.
            out.entry(a.scope.report_key())
                .or_default()
                .push(a.code.to_string());
        }
    }
    out.values_mut().for_each(|v| v.sort());
    out
}

/// What `rpctap check FILE` said of a recording.
pub struct Checked {
    /// (scope → sorted codes) of its findings.
    pub codes: Codes,
    pub exit: Option<i32>,
    /// Calls it matched with their replies, all scopes.
    pub matched: u64,
    pub stdout: String,
}

pub fn check_recording(file: &std::path::Path) -> Checked {
    assert_dashboard_matches_calls(file);
    // An empty state directory: what `check` finds never depends on this machine's baselines
    // (another test's hub session may have left one for the same label).
    let home = std::env::temp_dir().join(format!("rpctap-test-{}-empty-home", std::process::id()));
    let out = rpctap()
        .args(["check", file.to_str().unwrap()])
        .env("RPCTAP_HOME", &home)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut codes = Codes::new();
    let mut matched = 0;
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let scope = v["scope"].as_str().unwrap().to_string();
        assert_eq!(
            v["result"]["truncated"], false,
            "a recording's findings are never cut"
        );
        matched += v["result"]["matchedCount"].as_u64().unwrap();
        let mut found: Vec<String> = v["result"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["code"].as_str().unwrap().to_string())
            .collect();
        if !found.is_empty() {
            found.sort();
            codes.insert(scope, found);
        }
    }
    Checked {
        codes,
        exit: out.status.code(),
        matched,
        stdout,
    }
}

/// The dashboard's differential standard, held for every recording a test checks: loaded as
/// `rpctap view` loads it, the (call, code) pairs its rows show are exactly the pairs of the
/// recording's `call` lines.
pub fn assert_dashboard_matches_calls(file: &std::path::Path) {
    use rpctap::view::{App, RowOutcome};
    type Pair = (String, String, String, String, String);
    let rec = rpctap::record::reader::read(file).unwrap();
    let mut app = App::new("t", "l", "u", 10_000_000, 0);
    app.load_recording(&rec);
    let mut shown: Vec<Pair> = Vec::new();
    for r in &app.rows {
        if r.id.is_empty() || matches!(r.outcome, RowOutcome::Pending | RowOutcome::Http(_)) {
            continue;
        }
        for code in &r.anomalies {
            let dir = format!("{:?}", r.direction);
            shown.push((
                r.scope.to_string(),
                dir,
                r.id.to_string(),
                r.method.to_string(),
                code.clone(),
            ));
        }
    }
    let mut recorded: Vec<Pair> = Vec::new();
    for c in rec.calls() {
        let mut codes = c.anomalies.clone();
        codes.sort();
        codes.dedup();
        for code in codes {
            let dir = format!("{:?}", c.direction);
            recorded.push((
                c.scope.to_string(),
                dir,
                c.id.to_json_text(),
                c.method.to_string(),
                code.to_string(),
            ));
        }
    }
    shown.sort();
    recorded.sort();
    assert_eq!(
        shown,
        recorded,
        "the dashboard's rows show other findings than the call lines of {}",
        file.display()
    );
}

/// The client calls of a recording that ended with a reply (result or error).
pub fn answered_calls(file: &std::path::Path) -> u64 {
    let rec = rpctap::record::reader::read(file).unwrap();
    rec.calls()
        .filter(|c| {
            c.direction == rpctap::events::Direction::ClientToServer
                && matches!(
                    c.outcome,
                    rpctap::events::Outcome::Result | rpctap::events::Outcome::Error { .. }
                )
        })
        .count() as u64
}

/// The repository's root.
pub fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Node peers `scripts/peers.sh` installs under target/interop/node (its stamp); `node@22`
/// brings the Node 22 the conformance suite needs, without a system install, `ganache` a real
/// Ethereum JSON-RPC node.
pub const NODE_PACKAGES: &[&str] = &[
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@modelcontextprotocol/sdk@1.32.2",
    "@modelcontextprotocol/conformance@0.1.16",
    "node@22",
    "ganache@7.9.2",
    "@modelcontextprotocol/inspector@2.12.0",
    "conformance2@npm:@modelcontextprotocol/conformance@0.2.0-alpha.12",
    "js-tiktoken@1.0.21",
    "@a2a-js/sdk@1.3.0",
    "express@5.3.0",
];

/// A peer folder under target/interop whose stamp names exactly `packages`.
pub fn installed(name: &str, packages: &[&str]) -> std::path::PathBuf {
    let dir = root().join("target/interop").join(name);
    let want = packages.join(" ");
    let have = std::fs::read_to_string(dir.join("rpctap-installed")).unwrap_or_default();
    assert_eq!(
        have, want,
        "test peer `{name}` is not installed as the tests need it: run `bash scripts/peers.sh` \
         (the README's test command, scripts/test.sh, does)"
    );
    dir
}

/// Reads one HTTP/1 response (head and a `Content-Length` body) from `s`; `None` if the
/// connection closes first.
/// An HTTP/1 head's `Content-Length` (0 without one).
pub fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0)
}

pub async fn read_response(s: &mut tokio::net::TcpStream) -> Option<(String, String)> {
    read_responses(s, 1).await.and_then(|mut v| v.pop())
}

/// Reads `n` HTTP/1 responses (each with a `Content-Length` body) from `s`, however they are cut
/// over reads (pipelined replies may come in one); `None` if the connection closes first.
pub async fn read_responses(
    s: &mut tokio::net::TcpStream,
    n: usize,
) -> Option<Vec<(String, String)>> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        loop {
            let text = String::from_utf8_lossy(&buf).into_owned();
            let Some((head, rest)) = text.split_once("\r\n\r\n") else {
                break;
            };
            let len = content_length(head);
            if rest.len() < len {
                break;
            }
            out.push((head.to_string(), rest[..len].to_string()));
            buf.drain(..head.len() + 4 + len);
            if out.len() == n {
                return Some(out);
            }
        }
        let got = tokio::io::AsyncReadExt::read(s, &mut chunk).await.ok()?;
        if got == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..got]);
    }
}

/// A tmux server of its own (`tmux -L NAME`), killed when dropped; its window is `t`.
pub struct Tmux(pub String);

impl Tmux {
    /// A new tmux server `rpctap-NAME-PID` with one `width`×`height` bash session `t` (prompt
    /// `READY$ `), started through `env` with `env_args` (`-u VAR`, `VAR=value`); waits for the
    /// prompt.
    pub fn shell(name: &str, width: u16, height: u16, env_args: &[&str]) -> Tmux {
        let t = Tmux(format!("rpctap-{name}-{}", std::process::id()));
        let (w, h) = (width.to_string(), height.to_string());
        let mut args = vec!["new-session", "-d", "-s", "t", "-x", &w, "-y", &h, "env"];
        args.extend_from_slice(env_args);
        args.extend_from_slice(&["PS1=READY$ ", "bash", "--norc", "--noprofile"]);
        t.cmd(&args);
        t.wait_for("READY$", Duration::from_secs(5));
        t
    }

    pub fn cmd(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("tmux")
            .arg("-L")
            .arg(&self.0)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    pub fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "t"])
    }
    /// The screen once `ok` holds for it (or after `timeout`).
    pub fn wait_until(&self, timeout: Duration, ok: impl Fn(&str) -> bool) -> String {
        let t0 = std::time::Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) || t0.elapsed() > timeout {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    pub fn wait_for(&self, what: &str, timeout: Duration) -> String {
        self.wait_until(timeout, |s| s.contains(what))
    }
    pub fn wait_for_gone(&self, what: &str, timeout: Duration) -> String {
        self.wait_until(timeout, |s| !s.contains(what))
    }
    /// The screen once a line holds every one of `parts` (or after `timeout`).
    pub fn wait_for_line(&self, parts: &[&str], timeout: Duration) -> String {
        self.wait_until(timeout, |s| {
            s.lines().any(|l| parts.iter().all(|p| l.contains(p)))
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

/// The first line of `screen` that holds `what` (empty when none does).
pub fn line_with(screen: &str, what: &str) -> String {
    screen
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or("")
        .to_string()
}

/// Whether `ok` comes to hold within `timeout` (looked at every 20 ms): a wait for something
/// observable, never a fixed sleep.
/// `rpctap serve` headless on a free port in front of server-everything over stdio, with
/// `extra` flags: its process and the addresses its banner gives for `markers`.
pub fn serve_with(extra: &[&str], markers: &[&str]) -> (Proc, Vec<SocketAddr>) {
    let everything = installed("node", NODE_PACKAGES)
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mut cmd = rpctap();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--no-tui",
        "--log",
        "off",
    ])
    .args(extra)
    .arg("--")
    .arg("node")
    .arg(everything)
    .arg("stdio")
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null());
    let (p, addrs, _rest) = spawn_with_banner(&mut cmd, markers);
    (p, addrs)
}

/// A process driven line by line (a stdio server, or `rpctap stdio` in front of one): lines
/// written to its stdin, its stdout read back line by line.
pub struct LineProc {
    pub proc: Proc,
    stdin: Option<std::process::ChildStdin>,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl LineProc {
    /// Spawns `cmd` with its stdin and stdout piped to the test.
    pub fn spawn(cmd: &mut std::process::Command) -> LineProc {
        let mut proc = Proc::spawn(
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped()),
        );
        let stdin = proc.0.stdin.take();
        let out = std::io::BufReader::new(proc.0.stdout.take().unwrap());
        LineProc { proc, stdin, out }
    }

    /// One line (its newline added), flushed.
    pub fn send(&mut self, line: &str) {
        use std::io::Write;
        let w = self.stdin.as_mut().expect("stdin still open");
        w.write_all(line.as_bytes()).unwrap();
        w.write_all(b"\n").unwrap();
        w.flush().unwrap();
    }

    /// The next line of stdout ("" at its end).
    pub fn line(&mut self) -> String {
        use std::io::BufRead;
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line
    }

    /// The next line of stdout that holds `"id":ID` (others, notifications say, skipped).
    pub fn reply(&mut self, id: u32) -> String {
        let want = format!("\"id\":{id}");
        loop {
            let line = self.line();
            assert!(!line.is_empty(), "stdout ended before the reply to {id}");
            if line.contains(&want) {
                return line;
            }
        }
    }

    /// Closes stdin (the end of the client's input) and reads stdout to its end.
    pub fn rest(&mut self) -> String {
        use std::io::Read;
        self.stdin = None;
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        rest
    }
}

/// A GET of `path` on `addr` (HTTP/1.1, the connection closed after): the whole answer, head
/// and body, as text.
pub async fn http_text(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// The lines of stderr (from [`spawn_with_banner`]) received so far that contain `what`; the
/// lines are kept in `log`.
pub fn said(rx: &std::sync::mpsc::Receiver<String>, log: &mut Vec<String>, what: &str) -> usize {
    log.extend(rx.try_iter());
    log.iter().filter(|l| l.contains(what)).count()
}

/// [`said`] once the process has exited: every line it wrote, read to its stderr's end (no
/// sleep for the reader to catch up).
pub fn said_in_all(
    rx: &std::sync::mpsc::Receiver<String>,
    log: &mut Vec<String>,
    what: &str,
) -> usize {
    log.extend(rx.iter());
    log.iter().filter(|l| l.contains(what)).count()
}

pub fn eventually(timeout: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let t0 = std::time::Instant::now();
    loop {
        if ok() {
            return true;
        }
        if t0.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether some process on this machine has `needle` in its command line (read from
/// `/proc/*/cmdline`, arguments joined by spaces).
pub fn a_process_names(needle: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .contains(needle)
            })
            .unwrap_or(false)
    })
}

/// The `websockets` JSON-RPC server (tests/interop/ws_peer.py) on a free port: the process, the
/// port and the Python environment it runs in (its client modes run from the same one).
pub async fn ws_peer_server() -> (Proc, u16, std::path::PathBuf) {
    let env = installed("ws", &["websockets==17.4"]);
    let port = free_port();
    let p = Proc::spawn(
        std::process::Command::new(env.join("bin/python"))
            .arg(root().join("tests/interop/ws_peer.py"))
            .args(["server", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    wait_listening(([127, 0, 0, 1], port).into()).await;
    (p, port, env)
}

/// A Prometheus sample's value from `/metrics` text (the first line that starts with `name`,
/// labels included), or NaN when there is none.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}
