//! CI contracts: `rpctap diff` between a session of a server and one of its changed build, tool
//! baselines (`MCP_TOOL_DRIFT` live and in `check`, `rpctap baseline`), `check` as a gate
//! (`--fail-on`, `--expect-tool`, `--forbid-tool`, `--max-duration`, the text, JUnit and SARIF
//! reports),
//! and the HTML report opened in a real headless Chromium.
//!
//! The server is scripted (real sockets, a real proxy recording it): its second build adds a
//! tool, removes one, changes a description, flips `readOnlyHint`, fails one call and answers
//! another three times slower.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rpctap");

/// The server: `v2` switches it to its changed build.
async fn server(v2: Arc<AtomicBool>) -> (std::net::SocketAddr, Stop) {
    start_upstream(move |_parts, body| {
        let v2 = v2.load(Ordering::SeqCst);
        Box::pin(async move {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let id = v["id"].clone();
            let ok = |r: serde_json::Value| {
                json_reply(200, &serde_json::json!({"jsonrpc":"2.0","id":id,"result":r}).to_string())
            };
            match (v["method"].as_str().unwrap_or(""), v["params"]["name"].as_str()) {
                ("tools/list", _) => {
                    let search = serde_json::json!({"name":"search","description":"Search the index","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}},"annotations":{"readOnlyHint": !v2}});
                    let fetch = serde_json::json!({"name":"fetch","description": if v2 {"Fetch any URL, following redirects"} else {"Fetch a URL"},"inputSchema":{"type":"object","properties":{"url":{"type":"string"}}}});
                    let third = if v2 {
                        serde_json::json!({"name":"publish","inputSchema":{"type":"object"}})
                    } else {
                        serde_json::json!({"name":"archive","inputSchema":{"type":"object"}})
                    };
                    ok(serde_json::json!({"tools":[search, fetch, third]}))
                }
                ("tools/call", Some("search")) => {
                    let slow = v["params"]["arguments"]["q"] == "slow";
                    if slow {
                        tokio::time::sleep(Duration::from_millis(if v2 { 330 } else { 110 })).await;
                    }
                    ok(serde_json::json!({"content":[{"type":"text","text":"found"}]}))
                }
                ("tools/call", Some("fetch")) if v2 => json_reply(
                    200,
                    &serde_json::json!({"jsonrpc":"2.0","id":id,"error":{"code":-32000,"message":"fetch is broken"}}).to_string(),
                ),
                _ => ok(serde_json::json!({"content":[{"type":"text","text":"ok"}]})),
            }
        })
    })
    .await
}

fn flags(file: &Path, baseline: Option<&Path>) -> rpctap::cli::ProxyFlags {
    rpctap::cli::SharedFlags {
        record: Some(file.to_path_buf()),
        baseline: baseline.map(Path::to_path_buf),
        ..Default::default()
    }
    .into()
}

/// One session of the client through a recording proxy; returns its live anomaly codes.
async fn session(
    upstream: std::net::SocketAddr,
    file: &Path,
    baseline: Option<&Path>,
) -> Vec<String> {
    let mut p = start_proxy_flags(&format!("http://{upstream}"), flags(file, baseline)).await;
    let calls = [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search","arguments":{"q":"x"}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fetch","arguments":{"url":"u"}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"search","arguments":{"q":"slow"}}}"#,
    ];
    for c in calls {
        post_json(p.addr, "/mcp", c).await;
    }
    let codes: Vec<String> = anomalies(&p.drain().await)
        .into_iter()
        .map(|a| a.0)
        .collect();
    drop(p.stop);
    p.served.await.unwrap();
    codes
}

struct Recorded {
    _dir: Scratch,
    _server: Stop,
    up: std::net::SocketAddr,
    a: PathBuf,
    a2: PathBuf,
    b: PathBuf,
    baselines: PathBuf,
    live_b: Vec<String>,
}

/// A (twice: the same build, the same client) and B (the changed build), the first two taking
/// the baseline live, the third flagged against it.
async fn recorded(name: &str) -> Recorded {
    let dir = Scratch::new(name);
    let v2 = Arc::new(AtomicBool::new(false));
    let (up, server_stop) = server(v2.clone()).await;
    let baselines = dir.join("baselines");
    let (a, a2, b) = (
        dir.join("a.jsonl"),
        dir.join("a2.jsonl"),
        dir.join("b.jsonl"),
    );
    assert_eq!(
        session(up, &a, Some(&baselines)).await,
        Vec::<String>::new()
    );
    assert_eq!(
        session(up, &a2, Some(&baselines)).await,
        Vec::<String>::new()
    );
    v2.store(true, Ordering::SeqCst);
    let live_b = session(up, &b, Some(&baselines)).await;
    Recorded {
        _dir: dir,
        _server: server_stop,
        up,
        a,
        a2,
        b,
        baselines,
        live_b,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_names_every_change_the_annotation_flip_first() {
    let r = recorded("diff").await;
    let (a, b) = (r.a.to_str().unwrap(), r.b.to_str().unwrap());
    let (code, out, err) = run(&["diff", a, b, "--exit-code"]);
    assert_eq!(code, 1, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[1].contains("safety")
            && lines[1].contains("tool search")
            && lines[1].contains("readOnlyHint true → false"),
        "{out}"
    );
    for want in [
        "tool archive: removed",
        "tool publish: added",
        "tool fetch: description: \"Fetch a URL\" → \"Fetch any URL, following redirects\"",
        "tools/call fetch {\"url\":\"u\"}: result → error -32000",
        "latency  tools/call search {\"q\":\"slow\"}",
    ] {
        assert!(out.contains(want), "{want} in:\n{out}");
    }
    // What the changed definitions cost now (o200k_base), each and the set's total.
    let tools = |f: &Path| {
        rpctap::offline::diff::last_tool_list(&rpctap::record::reader::read(f).unwrap()).unwrap()
    };
    let (ta, tb) = (tools(&r.a), tools(&r.b));
    let tok = |v: &serde_json::Value| rpctap::tokens::Tokenizer::O200k.count_json(v).tokens;
    let (fa, fb) = (tok(&ta["fetch"]), tok(&tb["fetch"]));
    assert!(fb > fa, "a longer description");
    assert!(
        out.contains(&format!(
            "tool fetch: definition {fa} → {fb} tokens (+{}, o200k_base)",
            fb - fa
        )),
        "{out}"
    );
    let (sa, sb): (usize, usize) = (ta.values().map(tok).sum(), tb.values().map(tok).sum());
    let sign = if sb >= sa { "+" } else { "-" };
    assert!(
        out.contains(&format!(
            "tools (all 3): definitions {sa} → {sb} tokens ({sign}{}, o200k_base)",
            sa.abs_diff(sb)
        )),
        "{out}"
    );
    // The fast call and the list itself did not change their outcome.
    assert!(!out.contains("{\"q\":\"x\"}"), "{out}");
    // A against itself, and against its twin: nothing to report, exit 0.
    for other in [a, r.a2.to_str().unwrap()] {
        let (code, out, _) = run(&["diff", a, other, "--exit-code"]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("no differences (4 calls matched)"), "{out}");
    }
    // B → A: the failing call and the slow one are improvements, the flip back too; still the
    // removed `publish` is a regression.
    let (code, out, _) = run(&["diff", b, a, "--exit-code", "--format", "json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let kinds: Vec<(String, String)> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "regression")
        .map(|c| {
            (
                c["subject"].as_str().unwrap().to_string(),
                c["what"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![("tool publish".to_string(), "removed".to_string())],
        "{out}"
    );
    // Markdown for a pull-request comment.
    let (_, md, _) = run(&["diff", a, b, "--format", "markdown"]);
    assert!(
        md.starts_with("### rpctap diff") && md.contains("| 🔴 | safety | `tool search` |"),
        "{md}"
    );
    // Without --exit-code a regression still exits 0.
    assert_eq!(run(&["diff", a, b]).0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baselines_catch_tool_drift_live_and_in_check() {
    let r = recorded("baseline").await;
    // Live: the first session took the baseline, the changed build drifted from it.
    let mut live = r.live_b.clone();
    live.sort();
    // The flip, the description, the removed tool and the added one.
    assert_eq!(live, vec!["MCP_TOOL_DRIFT"; 4], "{live:?}");
    let b = r.b.to_str().unwrap();
    let dir = r.baselines.to_str().unwrap();
    let (code, out, err) = run(&["check", b, "--baseline", dir, "--fail-on", "MCP_TOOL_DRIFT"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("tool `search` drifted") && out.contains("readOnlyHint true → false"),
        "{out}"
    );
    // check finds what the live run found.
    let checked = check_with(&r.b, &["--baseline", dir]);
    assert_eq!(checked, live_codes(&r.b));
    // The safety flip and the schema-less changes: error and warnings.
    let (_, text, _) = run(&["check", b, "--baseline", dir, "--format", "text"]);
    assert!(text.contains("error   MCP_TOOL_DRIFT"), "{text}");
    assert!(text.contains("warning MCP_TOOL_DRIFT"), "{text}");
    // The HTML report says why the gate failed (the drift), with the diff against the first
    // build — what a CI job's artifact needs.
    let html = r.baselines.with_file_name("gated.html");
    let (code, _, err) = run(&[
        "check",
        b,
        "--baseline",
        dir,
        "--format",
        "html",
        "-o",
        html.to_str().unwrap(),
        "--diff-from",
        r.a.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains(r#"<h2 id="gate" class="error">Gate: FAIL</h2>"#),
        "{page}"
    );
    assert!(
        page.contains("error   MCP_TOOL_DRIFT") && page.contains("tool `search` drifted"),
        "{page}"
    );
    assert!(
        page.contains(r#"<h2 id="diff" class="error">Diff against"#),
        "{page}"
    );
    // Taken by hand from the first session instead: the same verdict.
    let label = rpctap::offline::gate::label(&rpctap::record::reader::read(&r.b).unwrap().header);
    assert_eq!(run(&["baseline", "reset", &label, "--dir", dir]).0, 0);
    assert_eq!(
        run(&["check", b, "--baseline", dir, "--fail-on", "MCP_TOOL_DRIFT"]).0,
        0
    );
    let (code, _, err) = run(&["baseline", "accept", r.a.to_str().unwrap(), "--dir", dir]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run(&["check", b, "--baseline", dir, "--fail-on", "MCP_TOOL_DRIFT"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("tool `search` drifted"), "{out}");
    // Accept the new build: the same check passes.
    let (code, _, err) = run(&["baseline", "accept", b, "--dir", dir]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("3 tools"), "{err}");
    let (code, out, _) = run(&["check", b, "--baseline", dir, "--fail-on", "MCP_TOOL_DRIFT"]);
    assert_eq!(code, 0, "{out}");
    // Show and reset.
    let (code, shown, _) = run(&["baseline", "show", &label, "--dir", dir]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(v["tools"]["search"]["annotations"]["readOnlyHint"], false);
    assert_eq!(run(&["baseline", "reset", &label, "--dir", dir]).0, 0);
    assert_eq!(run(&["baseline", "show", &label, "--dir", dir]).0, 2);
    // A against no baseline: nothing to drift from.
    let (code, out, _) = run(&["check", r.a.to_str().unwrap(), "--baseline", dir]);
    assert_eq!(code, 0, "{out}");
}

/// The codes `check FILE ARGS…` reports per scope.
fn check_with(file: &Path, args: &[&str]) -> Codes {
    let (_, out, _) = run(&[&["check", file.to_str().unwrap()][..], args].concat());
    let mut codes = Codes::new();
    for l in out.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let Some(scope) = v["scope"].as_str() else {
            continue;
        };
        for f in v["result"]["findings"].as_array().into_iter().flatten() {
            codes
                .entry(scope.to_string())
                .or_default()
                .push(f["code"].as_str().unwrap().to_string());
        }
    }
    codes.values_mut().for_each(|v| v.sort());
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_gates_on_tools_durations_and_severities() {
    let r = recorded("gate").await;
    let a = r.a.to_str().unwrap();
    // (arguments, exit)
    for (args, exit) in [
        (vec!["--expect-tool", "search"], 0),
        (vec!["--expect-tool", "publish"], 1),
        (vec!["--forbid-tool", "publish"], 0),
        (vec!["--forbid-tool", "fetch"], 1),
        (vec!["--max-duration", "10s"], 0),
        (vec!["--max-duration", "50ms"], 1),
        (
            vec![
                "--expect-tool",
                "search",
                "--forbid-tool",
                "archive",
                "--max-duration",
                "5s",
            ],
            0,
        ),
    ] {
        let (code, out, err) = run(&[&["check", a][..], &args].concat());
        assert_eq!(code, exit, "{args:?}: {out}{err}");
        let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(last["passed"], exit == 0, "{args:?}: {out}");
    }
    let (_, out, _) = run(&["check", a, "--max-duration", "50ms", "--format", "text"]);
    assert!(
        out.contains("FAIL max-duration 50ms: tools/call search (id 4) took"),
        "{out}"
    );
    // B has an error (`fetch`) and drift warnings against the baseline: --fail-on decides.
    let (b, dir) = (r.b.to_str().unwrap(), r.baselines.to_str().unwrap());
    assert_eq!(run(&["check", b, "--baseline", dir]).0, 1);
    assert_eq!(
        run(&["check", b, "--baseline", dir, "--fail-on", "none"]).0,
        0
    );
    assert_eq!(run(&["check", b, "--fail-on", "MCP_UNKNOWN_TOOL"]).0, 0);
    let (code, _, err) = run(&["check", b, "--fail-on", "sometimes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--fail-on sometimes"), "{err}");
    // The flags are read before the file: a bad one is named even when there is no file, and
    // flags that only mean something together say so (they were ignored).
    let (code, _, err) = run(&["check", "/nonexistent.jsonl", "--allow", "lower:case"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--allow lower:case"), "{err}");
    let (code, _, err) = run(&["check", b, "--diff-from", b]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--format html"), "{err}");
    // JUnit: the same run recorded twice names its cases alike (no session id in a name).
    let names = |f: &Path| {
        let (_, xml, _) = run(&[
            "check",
            f.to_str().unwrap(),
            "--format",
            "junit",
            "--expect-tool",
            "search",
        ]);
        assert!(xml.starts_with("<?xml"), "{xml}");
        xml.split("<testcase ")
            .skip(1)
            .map(|c| c.split('>').next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let (na, na2) = (names(&r.a), names(&r.a2));
    assert_eq!(na, na2);
    assert!(
        na.iter().any(|n| n.contains("name=\"tools/call search\"")),
        "{na:?}"
    );
    assert!(
        na.iter().any(|n| n.contains("name=\"expect-tool search\"")),
        "{na:?}"
    );
    // B's JUnit against the baseline fails the `tools/list` case (its drift) and passes
    // `search`'s.
    let (_, xml, _) = run(&[
        "check",
        b,
        "--baseline",
        dir,
        "--format",
        "junit",
        "-o",
        r.b.with_extension("xml").to_str().unwrap(),
    ]);
    assert!(xml.is_empty());
    let xml = std::fs::read_to_string(r.b.with_extension("xml")).unwrap();
    let case = |name: &str| {
        let at = xml.find(&format!("name=\"{name}\"")).unwrap();
        xml[at..].split("</testcase>").next().unwrap().to_string()
    };
    assert!(case("tools/list").contains("<failure"), "{xml}");
    assert!(!case("tools/call search").contains("<failure"), "{xml}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_html_report_shows_every_call_and_finding_in_chromium() {
    let r = recorded("html").await;
    let html = r.b.with_extension("html");
    let (code, _, err) = run(&[
        "export",
        r.b.to_str().unwrap(),
        "--format",
        "html",
        "-o",
        html.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    // Self-contained: nothing to fetch.
    assert!(
        !page.contains("src=") && !page.contains("href=\"http"),
        "{page}"
    );
    let chromium = installed_command("chromium");
    let out = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec = rpctap::record::reader::read(&r.b).unwrap();
    let mut calls = 0;
    for c in rec.calls() {
        let shown = match &c.target {
            Some(t) => format!("{} {t}", c.method),
            None => c.method.to_string(),
        };
        assert!(dom.contains(&shown), "{shown} in the rendered page");
        calls += 1;
    }
    assert_eq!(dom.matches("<tr class=\"call\"").count(), calls);
    for code in live_codes(&r.b).values().flatten() {
        assert!(dom.contains(code.as_str()), "{code} in the rendered page");
    }
    assert!(dom.contains("error -32000") && dom.contains("p95"), "{dom}");
    // What the session costs an agent's context: `rpctap cost`'s account, in the page.
    let (_, cost, _) = run(&["cost", r.b.to_str().unwrap()]);
    let first = cost
        .lines()
        .find(|l| l.starts_with("tools definitions:"))
        .unwrap();
    assert!(dom.contains("Context cost (o200k_base)"), "{dom}");
    assert!(dom.contains(first), "{first} in the rendered page");
}

/// A command `scripts/peers.sh` installed; a clear failure when it is missing.
fn installed_command(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("{name} is missing: run `bash scripts/peers.sh`"))
}

/// The commands of the CI job in docs/ci.md, run as they are written there, with the demo server
/// as the server under test and a golden session recorded from it: unchanged, the job passes and
/// leaves its four reports; with a changed server (`add` answers one more), it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ci_job_in_docs_passes_on_the_same_server_and_fails_on_a_changed_one() {
    let doc = std::fs::read_to_string(root().join("docs/ci.md")).unwrap();
    let start = doc
        .find("- name: Record, check and diff the server's session")
        .unwrap();
    let block: Vec<&str> = doc[start..]
        .lines()
        .skip(2) // the name, and `run: |`
        .take_while(|l| l.starts_with("          "))
        .map(|l| &l[10..])
        .collect();
    assert!(block.len() > 10 && block[0] == "set -u", "{block:?}");
    let script = block.join("\n");
    let dir = Scratch::new("ci-job");
    // The golden session: the demo server's JSON-RPC methods through a recording proxy.
    let golden = dir.join("golden.jsonl");
    {
        let (demo, _d) = start_demo().await;
        let mut p = start_proxy_flags(&format!("http://{demo}"), flags(&golden, None)).await;
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"add","params":[2,3]}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"add","params":[10,-4]}"#,
        ] {
            let r = post_json(p.addr, "/jsonrpc", body).await;
            assert_eq!(r.status, 200, "{:?}", r.body);
        }
        p.drain().await;
        drop(p.stop);
        p.served.await.unwrap();
    }
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The suite, probed from the demo's JSON-RPC endpoint.
    let suite = dir.join("suite.json");
    {
        let (demo, _d) = start_demo().await;
        let (s, url) = (suite.clone(), format!("http://{demo}/jsonrpc"));
        let (code, _, err) =
            tokio::task::spawn_blocking(move || run(&["probe", &url, "-o", s.to_str().unwrap()]))
                .await
                .unwrap();
        assert_eq!(code, 0, "{err}");
    }
    for (changed, exit) in [(false, 0), (true, 1)] {
        let work = dir.join(if changed { "changed" } else { "same" });
        std::fs::create_dir_all(&work).unwrap();
        let port = free_port();
        let mut server = format!("rpctap demo-server --listen 127.0.0.1:{port}");
        if changed {
            server.push_str(" --alter-add");
        }
        let script = script.clone();
        let (work2, golden2, path2) = (work.clone(), golden.clone(), path.clone());
        let suite2 = suite.clone();
        let proxy_port = free_port();
        let out = tokio::task::spawn_blocking(move || {
            Command::new("bash")
                .arg("-c")
                .arg(&script)
                .current_dir(&work2)
                .env("PATH", path2)
                .env("SERVER_CMD", server)
                .env("SERVER_URL", format!("http://127.0.0.1:{port}"))
                .env("GOLDEN", golden2)
                .env("BASELINES", "baselines")
                .env("PROXY_PORT", proxy_port.to_string())
                .env("SUITE", &suite2)
                .env("ENDPOINT", format!("http://127.0.0.1:{port}/jsonrpc"))
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        // What the job's steps left, so a failure says which step went wrong.
        let left = |f: &str| std::fs::read_to_string(work.join(f)).unwrap_or_default();
        let say = format!(
            "changed={changed}\n{}\n{}\nreplay.txt:\n{}\nsession.jsonl:\n{}\ngolden:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            left("replay.txt"),
            left("session.jsonl"),
            std::fs::read_to_string(&golden).unwrap_or_default(),
        );
        assert_eq!(out.status.code(), Some(exit), "{say}");
        for f in [
            "test.xml",
            "replay.xml",
            "check.xml",
            "check.sarif",
            "diff.md",
            "report.html",
            "session.jsonl",
        ] {
            assert!(work.join(f).is_file(), "{f}: {say}");
        }
        // The probed suite passes on both: its assertions are outcomes, not recorded values.
        let junit = left("test.xml");
        assert!(
            junit.matches("<testcase ").count() > 10 && !junit.contains("<failure"),
            "{junit}"
        );
        let sarif: serde_json::Value = serde_json::from_str(&left("check.sarif")).unwrap();
        assert_eq!(sarif["version"], "2.1.0");
        let replay = std::fs::read_to_string(work.join("replay.txt")).unwrap();
        let report = std::fs::read_to_string(work.join("report.html")).unwrap();
        assert!(report.contains(r#"<h2 id="gate""#), "{report}");
        if changed {
            assert!(replay.contains("result: expected 5, got 6"), "{replay}");
            assert!(
                report.contains("result: expected 5, got 6"),
                "the report says why the job failed: {report}"
            );
        } else {
            let diff = std::fs::read_to_string(work.join("diff.md")).unwrap();
            assert!(diff.contains("No differences (2 calls matched)"), "{diff}");
        }
    }
}

/// Replay against the changed build: it fails; `--update` makes the changed answers the
/// recording's expectations (the old one kept), and the replay passes — until `--max-duration`
/// is shorter than the slow call. `mock --match` decides which recorded reply a request gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_updates_golden_files_and_mock_matches_as_told() {
    let r = recorded("golden").await;
    let target = format!("http://{}", r.up);
    let a = r.a.to_str().unwrap();
    let (code, out, _) = run(&["replay", a, "--target", &target]);
    assert_eq!(code, 1, "{out}");
    // The tools compared by name: the flip is one difference where it is.
    assert!(
        out.contains("result.tools[0].annotations.readOnlyHint: expected true, got false"),
        "{out}"
    );
    assert!(
        out.contains(r#"(name "archive"): expected"#)
            && out.contains(r#"(name "publish"): expected absent"#),
        "{out}"
    );
    let (code, _, err) = run(&["replay", a, "--target", &target, "--update"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("updated from") && r.a.with_extension("jsonl.bak").is_file(),
        "{err}"
    );
    let (code, out, _) = run(&["replay", a, "--target", &target]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = run(&["replay", a, "--target", &target, "--max-duration", "100ms"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("$latency: expected at most 100ms"), "{out}");
    // A target still starting: --wait covers it.
    let port = free_port();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let l = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        // Accept and drop: reachable is all the wait asks.
        let _ = tokio::time::timeout(Duration::from_secs(10), l.accept()).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    });
    let t = format!("http://127.0.0.1:{port}");
    let a2 = r.a2.to_str().unwrap().to_string();
    let now = a2.clone();
    // Without --wait, not up yet: "cannot reach the target", exit 2.
    let (code, _, err) =
        tokio::task::spawn_blocking(move || run(&["replay", &now, "--target", &t]))
            .await
            .unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot reach the target"), "{err}");
    let t = format!("http://127.0.0.1:{port}");
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        run(&[
            "replay",
            &a2,
            "--target",
            &t,
            "--wait",
            "5s",
            "--timeout",
            "1s",
        ])
    })
    .await
    .unwrap();
    assert_ne!(code, 2, "the target came up within --wait: {out}{err}");
    late.abort();
    // mock: the default matches params; sequential serves the method's next recorded reply.
    for (how, want_error) in [
        ("method-params", true),
        ("sequential", false),
        ("strict", true),
    ] {
        let port = free_port();
        let mut mock = std::process::Command::new(BIN)
            .args([
                "mock",
                r.a2.to_str().unwrap(),
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--match",
                how,
            ])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wait_listening(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let v = post_json(addr, "/mcp", r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"search","arguments":{"q":"other"}}}"#)
            .await
            .json();
        assert_eq!(v["error"].is_object(), want_error, "{how}: {v}");
        if !want_error {
            assert_eq!(v["result"]["content"][0]["text"], "found", "{how}: {v}");
        }
        let _ = mock.kill();
        let _ = mock.wait();
    }
}

/// `check --format sarif`: SARIF 2.1.0 that the OASIS schema (installed by peers.sh) accepts;
/// a result per finding — the same codes and words as the JSON report — located at the
/// recording line of the call it is about; the same fingerprints for two recordings of one job
/// (their session ids and times differ); an allowed finding suppressed; a broken assertion a
/// result of its own rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_speaks_sarif_that_code_scanning_reads() {
    let r = recorded("sarif").await;
    let b2 = r._dir.join("b2.jsonl");
    session(r.up, &b2, Some(&r.baselines)).await;
    let schema = installed("sarif-schema", &["serde-sarif 0.8.0"]).join("sarif-schema-2.1.0.json");
    let python = installed("sarif", &["jsonschema==4.26.0"]).join("bin/python");
    let sarif_file = r._dir.join("b.sarif");
    let dir = r.baselines.to_str().unwrap();
    let gate = ["--baseline", dir, "--allow", "MCP_TOOL_DRIFT:tools/list"];
    let check = |f: &Path, format: &str| {
        let (code, out, err) = run(&[
            &["check", f.to_str().unwrap(), "--format", format][..],
            &gate,
            &["--forbid-tool", "fetch"],
        ]
        .concat());
        assert_eq!(code, 1, "{out}{err}");
        out
    };
    let out = check(&r.b, "sarif");
    std::fs::write(&sarif_file, &out).unwrap();
    let log: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The schema's validator: every error it finds, printed.
    const VALIDATE: &str = "import json, sys, jsonschema\n\
        s = json.load(open(sys.argv[1])); d = json.load(open(sys.argv[2]))\n\
        v = jsonschema.Draft7Validator(s)\n\
        e = [f'{list(x.absolute_path)}: {x.message}' for x in v.iter_errors(d)]\n\
        print('\\n'.join(e)); sys.exit(1 if e else 0)\n";
    let v = Command::new(&python)
        .args(["-c", VALIDATE])
        .arg(&schema)
        .arg(&sarif_file)
        .output()
        .unwrap();
    assert!(
        v.status.success(),
        "not SARIF 2.1.0: {}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
    let run0 = &log["runs"][0];
    let results = run0["results"].as_array().unwrap();
    // The same findings as the JSON report, word for word.
    let mut want: Vec<(String, String)> = Vec::new();
    for line in check(&r.b, "json").lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for f in v["result"]["findings"].as_array().into_iter().flatten() {
            want.push((
                f["code"].as_str().unwrap().into(),
                f["message"].as_str().unwrap().into(),
            ));
        }
    }
    let mut got: Vec<(String, String)> = results
        .iter()
        .filter(|r| r["ruleId"] != "GATE_ASSERTION")
        .map(|r| {
            let rule = r["ruleId"].as_str().unwrap().to_string();
            (rule, r["message"]["text"].as_str().unwrap().to_string())
        })
        .collect();
    want.sort();
    got.sort();
    assert!(!want.is_empty());
    assert_eq!(got, want);
    // Each result's rule is in the driver's rules, at its index.
    let rules = run0["tool"]["driver"]["rules"].as_array().unwrap();
    for res in results {
        let i = res["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(rules[i]["id"], res["ruleId"]);
    }
    // A finding about a call is at the recording line of that call.
    let text = std::fs::read_to_string(&r.b).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut located = 0;
    for res in results {
        let Some(id) = res["properties"]["id"].as_str() else {
            continue;
        };
        let loc = &res["locations"][0]["physicalLocation"];
        assert!(r.b.ends_with(
            loc["artifactLocation"]["uri"]
                .as_str()
                .unwrap()
                .trim_start_matches("file://")
                .trim_start_matches('/')
        ));
        let n = loc["region"]["startLine"].as_u64().unwrap() as usize;
        let line: serde_json::Value = serde_json::from_str(lines[n - 1]).unwrap();
        assert_eq!(
            line["id"].to_string().trim_matches('"'),
            id,
            "{res}: line {n} is {line}"
        );
        located += 1;
    }
    assert!(located > 0, "{results:?}");
    // The allowed drift is suppressed, the rest not; the forbidden tool's call is a result.
    for res in results {
        let suppressed = res.get("suppressions").is_some();
        assert_eq!(suppressed, res["ruleId"] == "MCP_TOOL_DRIFT", "{res}");
    }
    // Without the `--allow`, nothing is suppressed.
    let (_, plain, _) = run(&[
        "check",
        r.b.to_str().unwrap(),
        "--baseline",
        dir,
        "--format",
        "sarif",
    ]);
    let plain: serde_json::Value = serde_json::from_str(&plain).unwrap();
    let plain = plain["runs"][0]["results"].as_array().unwrap();
    assert_eq!(plain.len(), results.len() - 1);
    assert!(plain.iter().all(|r| r.get("suppressions").is_none()));
    assert!(results.iter().any(|r| r["ruleId"] == "GATE_ASSERTION"
        && r["message"]["text"]
            .as_str()
            .unwrap()
            .starts_with("forbid-tool fetch")));
    // Exchange documents (JSON Lines): a finding is at its document's line.
    let docs = r._dir.join("docs.jsonl");
    std::fs::write(
        &docs,
        concat!(
            r#"{"request":{"jsonrpc":"2.0","id":1,"method":"a"},"response":{"jsonrpc":"2.0","id":1,"result":1}}"#,
            "\n\n",
            r#"{"request":{"jsonrpc":"2.0","id":1,"method":"a"},"response":{"jsonrpc":"2.0","id":2,"result":1}}"#,
            "\n"
        ),
    )
    .unwrap();
    let (_, out, err) = run(&["check", docs.to_str().unwrap(), "--format", "sarif"]);
    let d: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let d = d["runs"][0]["results"].as_array().unwrap();
    assert!(!d.is_empty(), "{out}");
    for res in d {
        let region = &res["locations"][0]["physicalLocation"]["region"];
        assert_eq!(region["startLine"], 3, "{res}");
    }
    // Two recordings of one job: the same fingerprints.
    let prints = |log: &serde_json::Value| {
        let mut p: Vec<String> = log["runs"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r["partialFingerprints"]["rpctapFinding/v1"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        p.sort();
        p
    };
    let log2: serde_json::Value = serde_json::from_str(&check(&b2, "sarif")).unwrap();
    assert_eq!(prints(&log), prints(&log2));
    let unique: std::collections::BTreeSet<String> = prints(&log).into_iter().collect();
    assert_eq!(unique.len(), results.len(), "one fingerprint per result");
}
