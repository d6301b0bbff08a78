//! `rpctap probe` and `rpctap test`: the target (a URL, a stdio command, a document) resolved,
//! rpctap's own proxy put in front of it — `proxy` for a URL, `serve`'s bridge for a stdio
//! command, each on a loopback port of its own, recording when asked (or to a file of the
//! run's own, for `test`'s findings) — and the probe or the suite run through it
//! (`crate::probe`). A test run's recording is then checked as `rpctap check` checks one, and
//! each finding set beside the case it is about.

use super::inproc::InFront;
use super::AppError;
use crate::cli::{ProbeArgs, TestArgs, TestFormat};
use crate::probe::describe::{self, Description};
use crate::probe::run::{self, Report};
use crate::probe::session::Session;
use crate::probe::suite::{Protocol, Suite, Target};
use crate::probe::{generate, ProbeError};
use http::Uri;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

impl From<ProbeError> for AppError {
    fn from(e: ProbeError) -> Self {
        AppError::Io(e.to_string())
    }
}

/// Where the server is.
#[derive(Debug, Clone)]
enum Where {
    Url(Uri),
    Command(Vec<String>),
}

impl Where {
    fn shown(&self) -> String {
        match self {
            Where::Url(u) => u.to_string(),
            Where::Command(c) => c.join(" "),
        }
    }
}

/// rpctap's proxy in front of the target, serving until stopped.
struct Harness {
    /// Where the session posts: the proxy's address and the target's path.
    url: Uri,
    running: super::inproc::Running,
}

fn parse_url(s: &str) -> Result<Uri, ProbeError> {
    let u: Uri = s
        .parse()
        .map_err(|e| ProbeError::Usage(format!("{s:?} is not a URL: {e}")))?;
    match (u.scheme_str(), u.authority()) {
        (Some("http" | "https" | "ws" | "wss"), Some(_)) => Ok(u),
        _ => Err(ProbeError::Usage(format!(
            "{s:?}: give an http://, https://, ws:// or wss:// URL"
        ))),
    }
}

/// Whether TCP reaches the URL's host and port (a server down is told apart from a server that
/// answers wrongly before anything is sent).
async fn reachable(u: &Uri, timeout: Duration) -> Result<(), ProbeError> {
    crate::proxy::upstream::reachable(u, timeout)
        .await
        .map_err(|e| ProbeError::Unreachable(u.to_string(), e))
}

/// Whether a command's program can be started (found on `PATH`, or a file).
fn startable(command: &[String]) -> Result<(), ProbeError> {
    let Some(prog) = command.first() else {
        return Err(ProbeError::Usage("an empty command after --".into()));
    };
    let found = if prog.contains('/') {
        Path::new(prog).is_file()
    } else {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
    };
    if found {
        Ok(())
    } else {
        Err(ProbeError::Unreachable(
            command.join(" "),
            format!("cannot start it: {prog} is not found"),
        ))
    }
}

/// Puts the proxy in front of `w`, recording to `record` when given: for a URL, the proxy of
/// its origin (a WebSocket's upgrade to its `http` origin) and the session posting to the
/// URL's path on it; for a command, `serve`'s bridge and its path.
async fn harness(w: &Where, record: Option<&Path>) -> Result<Harness, AppError> {
    let (to, path) = match w {
        Where::Url(u) => {
            let scheme = match u.scheme_str() {
                Some("ws") => "http",
                Some("wss") => "https",
                Some(other) => other,
                None => "http",
            };
            let origin = format!(
                "{scheme}://{}",
                u.authority().map(|a| a.as_str()).unwrap_or("")
            );
            let path = u
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| "/".into());
            (InFront::Upstream(origin), Some(path))
        }
        Where::Command(c) => (InFront::Command(c.clone()), None),
    };
    let running = super::inproc::start(&to, record).await?;
    let scheme = match w {
        Where::Url(u) if matches!(u.scheme_str(), Some("ws" | "wss")) => "ws",
        _ => "http",
    };
    let path = path.unwrap_or_else(|| running.path.clone());
    let url: Uri = format!("{scheme}://{}{path}", running.addr)
        .parse()
        .map_err(|e| AppError::Io(format!("the test proxy's URL: {e}")))?;
    Ok(Harness { url, running })
}

impl Harness {
    /// Stops the proxy; its recording is flushed whole when this returns.
    async fn finish(self) {
        self.running.finish().await;
    }
}

/// Reads a JSON document from a file or an http(s) URL.
async fn read_document(spec: &str, timeout: Duration) -> Result<Value, ProbeError> {
    let text = if spec.starts_with("http://") || spec.starts_with("https://") {
        let u = parse_url(spec)?;
        reachable(&u, timeout).await?;
        let client = crate::proxy::upstream::build_client(timeout, false);
        let req = http::Request::get(u)
            .body(crate::proxy::body::ForwardBody::full(bytes::Bytes::new()))
            .map_err(|e| ProbeError::Usage(e.to_string()))?;
        let got = tokio::time::timeout(timeout, async {
            use http_body_util::BodyExt;
            let r = client.request(req).await.map_err(|e| e.to_string())?;
            let status = r.status();
            let b = r.into_body().collect().await.map_err(|e| e.to_string())?;
            if !status.is_success() {
                return Err(format!("HTTP {status}"));
            }
            Ok(b.to_bytes())
        })
        .await
        .map_err(|_| ProbeError::Unreachable(spec.into(), "no answer".into()))?
        .map_err(|e| ProbeError::Unreachable(spec.into(), e))?;
        String::from_utf8_lossy(&got).into_owned()
    } else {
        std::fs::read_to_string(spec)
            .map_err(|e| ProbeError::Usage(format!("cannot read {spec}: {e}")))?
    };
    serde_json::from_str(&text)
        .map_err(|e| ProbeError::Usage(format!("{spec} is not a JSON document: {e}")))
}

/// `rpctap probe`.
pub async fn probe(args: ProbeArgs) -> Result<i32, AppError> {
    let timeout = Duration::from_secs_f64(args.timeout);
    if args.out.exists() && !args.force {
        return Err(AppError::Io(format!(
            "{} exists: give another --out, or --force to replace it",
            args.out.display()
        )));
    }
    let token = args
        .bearer
        .as_deref()
        .map(crate::probe::bearer)
        .transpose()?;
    // What the target is: a server to ask, or a document that describes one.
    let mut described: Option<Description> = None;
    let place = if !args.command.is_empty() {
        startable(&args.command)?;
        Where::Command(args.command.clone())
    } else {
        let t = args.target.clone().unwrap_or_default();
        let is_url = ["http://", "https://", "ws://", "wss://"]
            .iter()
            .any(|p| t.starts_with(p));
        // A URL names a document when its path does (`….json`, `…openrpc…`); else a server.
        let path = t.split(['?', '#']).next().unwrap_or("");
        let document = path.ends_with(".json")
            || path
                .rsplit('/')
                .next()
                .is_some_and(|last| last.to_ascii_lowercase().contains("openrpc"));
        if is_url && !document {
            Where::Url(parse_url(&t)?)
        } else {
            let doc = read_document(&t, timeout).await?;
            let (d, url) = match describe::kind_of(&doc) {
                Some(describe::Document::OpenRpc) => {
                    let d = describe::openrpc(&doc, &t)?;
                    let url = args.url.clone().or_else(|| {
                        doc.pointer("/servers/0/url")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    });
                    (d, url)
                }
                Some(describe::Document::MethodList) => {
                    let (d, path) = describe::method_list(&doc, &t)?;
                    let url = args.url.clone().map(|u| match &path {
                        Some(p) => format!("{}{}", u.trim_end_matches('/'), p),
                        None => u,
                    });
                    (d, url)
                }
                None => {
                    return Err(ProbeError::Usage(format!(
                        "{t} is neither an OpenRPC document (an \"openrpc\" key) nor a method list ({{\"httpPath\": …, \"methods\": [names]}})"
                    ))
                    .into())
                }
            };
            let url = url.ok_or_else(|| {
                ProbeError::Usage(format!("{t} names no server URL: give it with --url"))
            })?;
            described = Some(d);
            Where::Url(parse_url(&url)?)
        }
    };
    if let Where::Url(u) = &place {
        reachable(u, timeout).await?;
    }
    // Recorded to a file of the probe's own: what rpctap finds in the answers to the cases is
    // written into them (`run::pin_findings`).
    let record = own_recording();
    let h = harness(&place, Some(&record)).await?;
    let result = probe_through(&args, &place, &h, token.as_deref(), described, timeout).await;
    h.finish().await;
    let (mut suite, mut warnings, mut fuzzed, inputs, sent) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&record);
            return Err(e);
        }
    };
    let found = crate::record::reader::read(&record)
        .map(|rec| crate::probe::findings::by_case(&rec, &sent));
    let _ = std::fs::remove_file(&record);
    match found {
        Ok(f) => {
            warnings.extend(run::pin_findings(&mut suite, &f));
            for v in run::fuzz_findings(&f, &inputs, args.seed) {
                // A broken output schema is already its own case (the assertion found it).
                let tool = v.case.params.as_ref().and_then(|p| p["name"].as_str());
                let schema_case = tool.map(|t| format!("tool {t}: fuzz output schema"));
                if v.case
                    .note
                    .as_deref()
                    .is_some_and(|n| n.contains("MCP_OUTPUT_SCHEMA"))
                    && suite.cases.iter().any(|c| {
                        schema_case
                            .as_deref()
                            .is_some_and(|p| c.name.starts_with(p))
                    })
                {
                    continue;
                }
                fuzzed.push(v.said);
                suite.cases.push(v.case);
            }
        }
        Err(e) => warnings.push(format!("the probe's recording could not be checked: {e}")),
    }
    suite.save(&args.out).map_err(ProbeError::from)?;
    let enabled = suite.cases.iter().filter(|c| c.disabled.is_none()).count();
    for w in &warnings {
        eprintln!("rpctap probe: warning: {w}");
    }
    for f in &fuzzed {
        eprintln!("rpctap probe: fuzz: {f}");
    }
    eprintln!(
        "rpctap probe: {} cases for {} ({} to run, {} disabled with the reason) → {}",
        suite.cases.len(),
        suite.target.server.as_deref().unwrap_or(&place.shown()),
        enabled,
        suite.cases.len() - enabled,
        args.out.display()
    );
    Ok(0)
}

type Probed = (
    Suite,
    Vec<String>,
    Vec<String>,
    Vec<crate::probe::suite::Case>,
    Vec<(String, usize)>,
);

async fn probe_through(
    args: &ProbeArgs,
    place: &Where,
    h: &Harness,
    token: Option<&str>,
    described: Option<Description>,
    timeout: Duration,
) -> Result<Probed, AppError> {
    let mut s = Session::new(h.url.clone(), token, timeout)?;
    let d = match described {
        Some(d) => d,
        None => discover(&mut s, place, &args.mcp_version).await?,
    };
    let mut warnings = d.notes.clone();
    let mut cases = generate::cases(
        &d,
        &generate::Options {
            include_writes: args.include_writes,
        },
    );
    for i in 0..cases.len() {
        if d.protocol == Protocol::Jsonrpc {
            if let Some(happy) = cases[..i]
                .iter()
                .find(|c| c.kind == crate::probe::suite::Kind::Happy && c.disabled.is_none())
                .cloned()
            {
                generate::retarget(&mut cases[i], &happy);
            }
        }
        let c = &mut cases[i];
        if c.disabled.is_some() {
            continue;
        }
        s.case = Some(i);
        let sent = run::send(&mut s, c).await;
        if let Some(w) = run::pin(c, &sent, d.mcp_version.as_deref()) {
            warnings.push(w);
        }
    }
    let mut fuzzed = Vec::new();
    let mut fuzz_inputs = Vec::new();
    if args.fuzz > 0 {
        let tools: Vec<run::Tool> = d
            .tools
            .iter()
            .filter_map(|t| {
                let name = t.get("name")?.as_str()?;
                let happy = format!("tool {name}: happy path");
                cases
                    .iter()
                    .any(|c| c.name == happy && c.disabled.is_none())
                    .then(|| run::Tool {
                        name: name.to_string(),
                        input: t
                            .get("inputSchema")
                            .cloned()
                            .unwrap_or(serde_json::json!({"type": "object"})),
                        output: t.get("outputSchema").cloned(),
                    })
            })
            .collect();
        let url = h.url.clone();
        let version = args.mcp_version.clone();
        let mcp = d.protocol == Protocol::Mcp;
        let token = token.map(str::to_string);
        let found = run::fuzz(&mut s, &tools, args.fuzz, args.seed, || {
            let (url, version, token) = (url.clone(), version.clone(), token.clone());
            async move {
                let mut fresh = Session::new(url, token.as_deref(), timeout).ok()?;
                if mcp {
                    fresh.open(&version).await.ok()?;
                }
                Some(fresh)
            }
        })
        .await;
        let (found, inputs) = found;
        for f in found {
            fuzzed.push(f.said);
            cases.push(f.case);
        }
        fuzz_inputs = inputs;
    }
    s.close().await;
    let (url, command) = match place {
        Where::Url(u) => (Some(u.to_string()), None),
        Where::Command(c) => (None, Some(c.clone())),
    };
    let suite = Suite {
        suite: crate::probe::suite::VERSION,
        target: Target {
            url,
            command,
            protocol: d.protocol,
            mcp_version: (d.protocol == Protocol::Mcp).then(|| args.mcp_version.clone()),
            bearer: args.bearer.clone(),
            server: d.server.clone(),
        },
        allow: vec![],
        cases,
    };
    Ok((
        suite,
        warnings,
        fuzzed,
        fuzz_inputs,
        std::mem::take(&mut s.sent),
    ))
}

/// Asks a live server what it offers: an MCP server's lists after `initialize`, else a JSON-RPC
/// server's own OpenRPC document (`rpc.discover`).
async fn discover(s: &mut Session, place: &Where, version: &str) -> Result<Description, AppError> {
    let mcp_failed = match s.open(version).await {
        Ok(init) => return Ok(describe::mcp(s, &init).await),
        Err(e) => e,
    };
    match s.call("rpc.discover", serde_json::json!([])).await {
        Ok(doc) if doc.get("openrpc").is_some() => {
            Ok(describe::openrpc(&doc, &format!("{}'s rpc.discover", place.shown()))?)
        }
        _ if mcp_failed.contains("HTTP 401") || mcp_failed.contains("HTTP 403") => {
            Err(ProbeError::Usage(format!(
                "{} refused the session ({mcp_failed}): give its token with --bearer env:NAME",
                place.shown()
            ))
            .into())
        }
        _ => Err(ProbeError::NotMcp(
            place.shown(),
            format!("{mcp_failed}; and it offers no OpenRPC document (rpc.discover) — give one, or a method list, as TARGET"),
        )
        .into()),
    }
}

/// A file name of this run's own for its recording, when `--record` names none.
fn own_recording() -> PathBuf {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!("rpctap-test-{}-{n}.jsonl", std::process::id()))
}

/// `rpctap test`.
pub async fn test(args: TestArgs) -> Result<i32, AppError> {
    // A recording is run as the suite its client calls make.
    let suite = if crate::record::reader::is_recording(&args.suite) {
        let rec = crate::record::reader::read(&args.suite)?;
        let s = crate::probe::recorded::suite_from(&rec);
        if s.cases.is_empty() {
            return Err(AppError::Empty(format!(
                "{} holds no answered client call",
                args.suite.display()
            )));
        }
        s
    } else {
        Suite::load(&args.suite).map_err(ProbeError::from)?
    };
    let gate = crate::offline::gate::Gate::new(&args.fail_on, &args.allow)
        .map_err(|e| AppError::Io(e.to_string()))?;
    let timeout = Duration::from_secs_f64(args.timeout);
    let place = if !args.command.is_empty() {
        Where::Command(args.command.clone())
    } else if let Some(t) = &args.target {
        Where::Url(parse_url(t)?)
    } else if let Some(u) = &suite.target.url {
        Where::Url(parse_url(u)?)
    } else if let Some(c) = &suite.target.command {
        Where::Command(c.clone())
    } else {
        return Err(ProbeError::Usage(format!(
            "{} names no target: give --target URL or -- COMMAND",
            args.suite.display()
        ))
        .into());
    };
    match &place {
        Where::Url(u) => reachable(u, timeout).await?,
        Where::Command(c) => startable(c)?,
    }
    let token = args
        .bearer
        .as_deref()
        .or(suite.target.bearer.as_deref())
        .map(crate::probe::bearer)
        .transpose()?;
    let (record, own) = match &args.record {
        Some(r) => (r.clone(), false),
        None => (own_recording(), true),
    };
    let h = harness(&place, Some(&record)).await?;
    let ran = run_suite(&suite, &h, token.as_deref(), timeout, &place).await;
    h.finish().await;
    let (mut report, sent) = match ran {
        Ok(r) => r,
        Err(e) => {
            if own {
                let _ = std::fs::remove_file(&record);
            }
            return Err(e);
        }
    };
    let checked = crate::record::reader::read(&record)
        .map(|rec| crate::probe::findings::by_case(&rec, &sent));
    if own {
        let _ = std::fs::remove_file(&record);
    }
    match checked {
        Ok(c) => run::attach(&mut report, c, &gate, &suite.allow),
        Err(e) => {
            run::attach(&mut report, vec![], &gate, &suite.allow);
            report
                .warnings
                .push(format!("the run's recording could not be checked: {e}"));
        }
    }
    let out = match args.format {
        TestFormat::Text => crate::probe::report::text(&report),
        TestFormat::Json => crate::probe::report::json(&report),
        TestFormat::Junit => crate::probe::report::junit(&report),
    };
    print!("{out}");
    if args.format != TestFormat::Text {
        println!();
    }
    Ok(if report.failed() { 1 } else { 0 })
}

async fn run_suite(
    suite: &Suite,
    h: &Harness,
    token: Option<&str>,
    timeout: Duration,
    place: &Where,
) -> Result<(Report, Vec<(String, usize)>), AppError> {
    let mut s = Session::new(h.url.clone(), token, timeout)?;
    if suite.target.protocol == Protocol::Mcp {
        let v = suite
            .target
            .mcp_version
            .clone()
            .unwrap_or_else(|| "2025-11-25".into());
        let init = s
            .open(&v)
            .await
            .map_err(|e| ProbeError::NotMcp(place.shown(), e))?;
        // The lists first, as a client would: the inspector then knows each tool's schemas and
        // checks every call's arguments and result against them.
        describe::mcp(&mut s, &init).await;
    }
    let report = run::run(&mut s, suite, &place.shown()).await;
    s.close().await;
    Ok((report, s.sent))
}
