//! Real peers through rpctap: the official MCP Python SDK (mcp < 2, FastMCP) in all four server
//! modes with its own client, and a plain JSON-RPC 2.0 library server (`json-rpc`) with the
//! specification's examples. Results through rpctap must equal results direct; rpctap must flag
//! nothing on correct traffic; the recording must check clean and replay against the server.
//!
//! The peers are installed by `scripts/peers.sh` (called by `.ci/run` and `scripts/test.sh`)
//! into `target/interop/`; a test whose peer is missing fails saying so.

use crate::common::*;
use rpctap::events::Event;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

const BIN: &str = env!("CARGO_BIN_EXE_rpctap");

/// The virtualenv `scripts/peers.sh` installed under target/interop with `packages`; a clear
/// failure when it is missing (the tests install nothing themselves).
fn venv(name: &str, packages: &[&str]) -> PathBuf {
    installed(name, packages)
}

/// Starts a peer server (its output discarded) and waits until it listens on `port`.
async fn start_peer(mut cmd: Command, port: u16) -> Proc {
    let p = Proc::spawn(cmd.stdout(Stdio::null()).stderr(Stdio::null()));
    wait_port(port).await;
    p
}

/// `@modelcontextprotocol/server-everything` in `mode` on `port`.
fn everything(dir: &Path, mode: &str, port: u16) -> Command {
    let mut c = Command::new("node");
    c.arg(dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
        .arg(mode)
        .env("PORT", port.to_string());
    c
}

async fn wait_port(port: u16) {
    wait_listening(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await;
}

fn python(venv: &Path, script: &str, args: &[&str]) -> Command {
    let mut c = Command::new(venv.join("bin/python"));
    c.arg(root().join("tests/interop").join(script)).args(args);
    c
}

/// The Python SDK 1.x client: one session per URL, all in one process.
async fn run_client(venv: &Path, urls: &[&str]) -> serde_json::Value {
    run_script(venv, "mcp1_client.py", urls).await
}

async fn run_script(venv: &Path, script: &str, args: &[&str]) -> serde_json::Value {
    let venv = venv.to_path_buf();
    let script = script.to_string();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        python(&venv, &script, &a).output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "client failed: {}: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Stops the recording proxy, then: the recording checks clean (`rpctap check` exits 0), with
/// exactly the live run's codes per scope and every answered call matched.
async fn assert_checks(proxy: TestProxy, file: &Path) {
    assert_checks_finding(proxy, file, false).await
}

/// Like `assert_checks`; with `errors`, the recording holds a peer's real rule break (named
/// where the test calls it), so `check` fails.
async fn assert_checks_finding(proxy: TestProxy, file: &Path, errors: bool) {
    // The proxy drained and every observer finished (the recording flushed whole).
    drop(proxy.stop);
    proxy.served.await.unwrap();
    let c = check_recording(file);
    let exit = if errors { 1 } else { 0 };
    assert_eq!(c.exit, Some(exit), "check {}: {}", file.display(), c.stdout);
    // One inspector, live and offline: check finds exactly what the live run flagged, per
    // scope, and matches every call that was answered.
    assert_eq!(c.codes, live_codes(file), "check {}", file.display());
    assert_eq!(c.matched, answered_calls(file), "check {}", file.display());
}

/// Stops the recording proxy, then: the recording checks clean (`rpctap check` exits 0) and
/// replays against `upstream` with every call as recorded and at least `min_passed` calls.
async fn assert_checks_and_replays(
    proxy: TestProxy,
    file: &Path,
    upstream: &str,
    min_passed: usize,
) {
    assert_checks_replays_finding(proxy, file, upstream, min_passed, false).await
}

async fn assert_checks_replays_finding(
    proxy: TestProxy,
    file: &Path,
    upstream: &str,
    min_passed: usize,
    errors: bool,
) {
    assert_checks_finding(proxy, file, errors).await;
    let out = Command::new(BIN)
        .args(["replay", file.to_str().unwrap(), "--target", upstream])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "replay {}: {text}",
        file.display()
    );
    assert!(
        replay_passed(&text) >= min_passed,
        "replay {}: the calls were replayed: {text}",
        file.display()
    );
    assert!(
        !text.contains("warning"),
        "replay {}: {text}",
        file.display()
    );
}

/// The passed count of `rpctap replay`'s closing line ("N passed, M failed (…)").
fn replay_passed(text: &str) -> usize {
    text.lines()
        .last()
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A real rule the Python SDK's FastMCP breaks (1.x and 2.x): it sends log notifications
/// (`notifications/message`) without declaring the `logging` capability, which the
/// specification requires ("Servers that emit log message notifications MUST declare the
/// logging capability", server/utilities/logging). rpctap flags it `MCP_CAPABILITY`, once per
/// session. Asserts `sessions` such findings, each about that rule; returns the other codes.
fn without_fastmcp_logging_rule(ev: &[Arc<Event>], sessions: usize) -> Vec<String> {
    let logging: Vec<&str> = ev
        .iter()
        .filter_map(|e| match &**e {
            Event::Anomaly(a) if a.code == "MCP_CAPABILITY" => Some(a.message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(logging.len(), sessions, "{logging:?}");
    for m in &logging {
        assert!(
            m.contains("notifications/message") && m.contains("`logging`"),
            "{m}"
        );
    }
    anomalies(ev)
        .into_iter()
        .map(|a| a.0)
        .filter(|c| c != "MCP_CAPABILITY")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_v1_in_every_server_mode() {
    let env = venv("mcp1", &["mcp<2", "json-rpc", "werkzeug"]);
    let dir = Scratch::new("interop");
    for mode in ["sse", "json", "stateless", "stateless-json"] {
        let port = free_port();
        let _server = start_peer(
            python(&env, "mcp1_server.py", &[mode, &port.to_string()]),
            port,
        )
        .await;
        let upstream = format!("http://127.0.0.1:{port}");
        let file = dir.join(format!("{mode}.jsonl"));
        let mut proxy = start_proxy_flags(&upstream, record_flags(&file)).await;

        let both = run_client(
            &env,
            &[
                &format!("{upstream}/mcp"),
                &format!("http://{}/mcp", proxy.addr),
            ],
        )
        .await;
        let (direct, via) = (both[0].clone(), both[1].clone());
        assert_eq!(
            direct, via,
            "{mode}: the client saw the same through rpctap"
        );
        assert_eq!(via["add"]["content"][0]["text"], "5");
        assert_eq!(via["slow"]["content"][0]["text"], "done after 3 steps");
        assert_eq!(via["fail"]["isError"], true);
        if mode != "sse" {
            // JSON replies (and stateless servers) have no stream to carry notifications before
            // the reply: the SDK drops them, direct and proxied alike (asserted equal above).
        } else {
            assert_eq!(
                via["progress"],
                serde_json::json!([[1.0, 3.0], [2.0, 3.0], [3.0, 3.0]]),
                "{mode}"
            );
            assert_eq!(via["logs"].as_array().unwrap().len(), 3, "{mode}");
        }

        let ev = proxy.drain().await;
        // Flagged: the `fail` tool's isError result (a warning, as it should be), and — where
        // the session's log notifications reach the client (a session's SSE replies) — the
        // logging capability FastMCP never declares.
        let logs = usize::from(mode == "sse");
        let codes = without_fastmcp_logging_rule(&ev, logs);
        assert_eq!(codes, vec!["TOOL_ERROR"], "{mode}: {codes:?}");
        assert!(
            calls(&ev)
                .iter()
                .all(|c| !matches!(c.outcome, rpctap::events::Outcome::Missing { .. })),
            "{mode}: every call answered"
        );
        // The recording checks clean (warnings only, but for that rule) and replays against
        // the same server.
        assert_checks_replays_finding(proxy, &file, &upstream, 5, logs > 0).await;
        if logs > 0 {
            // The gate accepts the known rule break by name: listed, marked allowed, exit 0.
            let out = Command::new(BIN)
                .args(["check", file.to_str().unwrap()])
                .args(["--allow", "MCP_CAPABILITY:notifications/message"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(0), "{text}");
            let allowed: Vec<serde_json::Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .flat_map(|v| {
                    v["result"]["findings"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .filter(|f| f["code"] == "MCP_CAPABILITY")
                .collect();
            assert_eq!(allowed.len(), 1, "{text}");
            assert_eq!(allowed[0]["allowed"], true, "{text}");
            // Allowing another method's finding accepts nothing.
            let out = Command::new(BIN)
                .args(["check", file.to_str().unwrap()])
                .args(["--allow", "MCP_CAPABILITY:sampling/createMessage"])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(1));
        }

        if !mode.starts_with("stateless") {
            // Session handling: an unknown session is 404, a missing one 400 — identical through
            // rpctap. Real-world quirk: the SDK's error body carries the made-up id
            // "server-error" instead of the request's id (or null), so rpctap rightly reports an
            // UNMATCHED_RESPONSE for it and a MISSING_RESPONSE for the call, each time.
            let mut quirk = start_proxy(&upstream).await;
            let h_bad = [
                ("content-type", "application/json"),
                MCP_ACCEPT,
                ("mcp-session-id", "no-such-session"),
            ];
            let h_none = [("content-type", "application/json"), MCP_ACCEPT];
            let call = r#"{"jsonrpc":"2.0","id":99,"method":"tools/list"}"#;
            let up: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            for h in [&h_bad[..], &h_none[..]] {
                let d = send(up, "POST", "/mcp", h, call).await;
                let v = send(quirk.addr, "POST", "/mcp", h, call).await;
                assert_eq!(
                    (d.status, d.body.clone()),
                    (v.status, v.body.clone()),
                    "{mode}"
                );
                assert!(d.status == 404 || d.status == 400, "{mode}: {}", d.status);
                assert_eq!(
                    v.json()["id"],
                    "server-error",
                    "{mode}: the quirk is still there"
                );
            }
            let got = anomalies(&quirk.drain().await);
            let one = vec![
                (
                    "UNMATCHED_RESPONSE".to_string(),
                    Some("\"server-error\"".to_string()),
                ),
                ("MISSING_RESPONSE".to_string(), Some("99".to_string())),
            ];
            assert_eq!(got, [one.clone(), one].concat(), "{mode}");
        }
    }
}

/// The legacy HTTP+SSE transport as the Python SDK 1.x serves it: the stream announces
/// `/messages/?session_id=…` (not the TypeScript SDK's `sessionId`); rpctap correlates the POSTs
/// through the announced URL, whatever its parameter is called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_v1_legacy_sse_transport_is_correlated_by_the_announced_endpoint() {
    let env = venv("mcp1", &["mcp<2", "json-rpc", "werkzeug"]);
    let dir = Scratch::new("legacy");
    let port = free_port();
    let _server = start_peer(
        python(&env, "mcp1_server.py", &["legacy", &port.to_string()]),
        port,
    )
    .await;
    let upstream = format!("http://127.0.0.1:{port}");
    let file = dir.join("legacy.jsonl");
    let mut proxy = start_proxy_flags(&upstream, record_flags(&file)).await;
    let both = run_client(
        &env,
        &[
            &format!("{upstream}/sse"),
            "legacy",
            &format!("http://{}/sse", proxy.addr),
            "legacy",
        ],
    )
    .await;
    let (direct, via) = (both[0].clone(), both[1].clone());
    assert_eq!(direct, via, "the client saw the same through rpctap");
    assert_eq!(via["add"]["content"][0]["text"], "5");
    assert_eq!(
        via["progress"],
        serde_json::json!([[1.0, 3.0], [2.0, 3.0], [3.0, 3.0]])
    );
    let ev = proxy.drain().await;
    let codes = without_fastmcp_logging_rule(&ev, 1);
    assert_eq!(
        codes,
        vec!["TOOL_ERROR"],
        "only the failing tool is flagged (and FastMCP's undeclared logging)"
    );
    let cs = calls(&ev);
    assert!(cs.len() >= 9, "the session's calls ended: {}", cs.len());
    assert!(
        cs.iter()
            .all(|c| matches!(c.outcome, rpctap::events::Outcome::Result)
                && matches!(&c.scope, rpctap::events::Scope::Session(_))),
        "every call matched its reply on the stream, in the session's scope: {cs:?}"
    );
    assert_checks_replays_finding(proxy, &file, &upstream, 5, true).await;
}

/// The MCP Python SDK 2.x client in `auto` mode starts with the 2026-07-28 `server/discover`:
/// the demo server answers it (the versions it speaks), the client falls back to `initialize`,
/// and the whole session works through rpctap with nothing flagged but the failing tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_v2_auto_client_discovers_the_demo_server() {
    let env = venv("mcp2", &["mcp>=2,<3"]);
    let (demo, _d) = start_demo().await;
    let dir = Scratch::new("discover");
    let file = dir.join("discover.jsonl");
    let mut proxy = start_proxy_flags(&format!("http://{demo}"), record_flags(&file)).await;
    let via = run_script(
        &env,
        "mcp2_client.py",
        &[&format!("http://{}/mcp", proxy.addr), "auto"],
    )
    .await;
    assert_eq!(via["add"]["content"][0]["text"], "5");
    let ev = proxy.drain().await;
    let discover = calls(&ev)
        .into_iter()
        .find(|c| &*c.method == "server/discover")
        .expect("the client asked server/discover");
    assert_eq!(discover.outcome, rpctap::events::Outcome::Result);
    let codes: Vec<String> = anomalies(&ev).into_iter().map(|a| a.0).collect();
    assert_eq!(codes, vec!["TOOL_ERROR"]);
    assert_checks(proxy, &file).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_v2_modern_and_legacy_clients_in_every_server_mode() {
    let env = venv("mcp2", &["mcp>=2,<3"]);
    let dir = Scratch::new("interop2");
    for mode in ["sse", "json", "stateless", "stateless-json"] {
        let port = free_port();
        let _server = start_peer(
            python(&env, "mcp2_server.py", &[mode, &port.to_string()]),
            port,
        )
        .await;
        let upstream = format!("http://127.0.0.1:{port}");
        // Both client modes through their own recording proxy; the four sessions (direct and
        // through rpctap, each mode) in one client process.
        let mut proxies = Vec::new();
        for client_mode in ["auto", "legacy"] {
            let file = dir.join(format!("{mode}-{client_mode}.jsonl"));
            let proxy = start_proxy_flags(&upstream, record_flags(&file)).await;
            proxies.push((client_mode, file, proxy));
        }
        let direct_url = format!("{upstream}/mcp");
        let via_urls: Vec<String> = proxies
            .iter()
            .map(|(_, _, p)| format!("http://{}/mcp", p.addr))
            .collect();
        let args = [
            direct_url.as_str(),
            "auto",
            via_urls[0].as_str(),
            "auto",
            direct_url.as_str(),
            "legacy",
            via_urls[1].as_str(),
            "legacy",
        ];
        let outs = run_script(&env, "mcp2_client.py", &args).await;
        for (i, (client_mode, file, mut proxy)) in proxies.into_iter().enumerate() {
            let (direct, via) = (outs[2 * i].clone(), outs[2 * i + 1].clone());
            assert_eq!(
                direct, via,
                "{mode}/{client_mode}: the client saw the same through rpctap"
            );
            assert_eq!(
                via["add"]["content"][0]["text"], "5",
                "{mode}/{client_mode}"
            );
            assert_eq!(via["fail"]["isError"], true);
            let ev = proxy.drain().await;
            // The `auto` client negotiates 2026-07-28 with the 2.x server: no sessions, so no
            // handshake in view to judge capabilities by.
            let logs = usize::from(mode == "sse" && client_mode == "legacy");
            let codes = without_fastmcp_logging_rule(&ev, logs);
            assert_eq!(codes, vec!["TOOL_ERROR"], "{mode}/{client_mode}: {codes:?}");
            assert!(
                calls(&ev)
                    .iter()
                    .all(|c| !matches!(c.outcome, rpctap::events::Outcome::Missing { .. })),
                "{mode}/{client_mode}"
            );
            assert_checks_replays_finding(proxy, &file, &upstream, 5, logs > 0).await;
        }
    }
}

/// Over Streamable HTTP an `initialize` carries no session id: the session is named by its
/// reply's `Mcp-Session-Id`. The call is that session's first, live, in the dashboard (what `i`
/// reads) and in `check` — two client sessions are two scopes, not four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_initialize_is_in_the_session_its_reply_starts() {
    use rpctap::events::Scope;
    let env = venv("mcp2", &["mcp>=2,<3"]);
    let dir = Scratch::new("init-scope");
    let port = free_port();
    let _server = start_peer(
        python(&env, "mcp2_server.py", &["sse", &port.to_string()]),
        port,
    )
    .await;
    let upstream = format!("http://127.0.0.1:{port}");
    let file = dir.join("two-sessions.jsonl");
    let mut proxy = start_proxy_flags(&upstream, record_flags(&file)).await;
    let via = format!("http://{}/mcp", proxy.addr);
    run_script(&env, "mcp2_client.py", &[&via, "legacy", &via, "legacy"]).await;
    let ev = proxy.drain().await;
    let cs = calls(&ev);
    let inits: Vec<_> = cs.iter().filter(|c| &*c.method == "initialize").collect();
    assert_eq!(inits.len(), 2, "{cs:?}");
    let mut scopes: Vec<String> = cs.iter().map(|c| c.scope.report_key()).collect();
    scopes.sort();
    scopes.dedup();
    assert_eq!(
        scopes.len(),
        2,
        "every call in one of two sessions: {scopes:?}"
    );
    for i in &inits {
        assert!(matches!(i.scope, Scope::Session(_)), "{i:?}");
    }
    assert_ne!(inits[0].scope, inits[1].scope);
    for e in &ev {
        if let Event::Message(m) = &**e {
            if m.method.as_deref() == Some("initialize") {
                assert!(matches!(m.scope, Scope::Session(_)), "{m:?}");
            }
        }
    }
    drop(proxy.stop);
    proxy.served.await.unwrap();
    // The dashboard: each session's rows hold its initialize (what `i` looks for).
    let rec = rpctap::record::reader::read(&file).unwrap();
    let mut app = rpctap::view::App::new("t", "l", "u", 10_000, 0);
    app.load_recording(&rec);
    for s in &scopes {
        assert!(
            app.rows
                .iter()
                .any(|r| *r.scope == **s && &*r.method == "initialize"),
            "{s}: its initialize is in its rows"
        );
    }
    // `check`: one verdict per client session (failing on the server's real rule break only:
    // FastMCP logs without declaring `logging`).
    let c = check_recording(&file);
    for codes in c.codes.values() {
        assert_eq!(codes, &["MCP_CAPABILITY", "TOOL_ERROR"], "{}", c.stdout);
    }
    let checked: Vec<String> = c
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["scope"].to_string())
        .collect();
    assert_eq!(checked.len(), 2, "{checked:?}");
}

/// The npm packages `scripts/peers.sh` installed under target/interop/node.
fn node_modules(packages: &[&str]) -> PathBuf {
    installed("node", packages)
}

async fn run_node(dir: &Path, args: &[&str]) -> serde_json::Value {
    let script = dir.join("ts_client.mjs");
    std::fs::copy(root().join("tests/interop/ts_client.mjs"), &script).unwrap();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(&script)
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "node client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client_and_server_everything() {
    let dir = node_modules(NODE_PACKAGES);
    let tmp = Scratch::new("interop-ts");
    for (server_mode, client_kind, path) in [
        ("streamableHttp", "streamable", "/mcp"),
        ("sse", "sse", "/sse"),
    ] {
        let port = free_port();
        let _server = start_peer(everything(&dir, server_mode, port), port).await;
        let upstream = format!("http://127.0.0.1:{port}");
        let file = tmp.join(format!("{server_mode}.jsonl"));
        let mut proxy = start_proxy_flags(&upstream, record_flags(&file)).await;
        let mut direct = run_node(&dir, &[&format!("{upstream}{path}"), client_kind]).await;
        let mut via = run_node(
            &dir,
            &[&format!("http://{}{path}", proxy.addr), client_kind],
        )
        .await;
        // Quirk of the peers (seen direct too): over the legacy SSE transport the tool's result can
        // overtake its last progress notification, which the client then drops; so progress is
        // compared as "a prefix of 1/3, 2/3, 3/3", everything else exactly.
        let expected = serde_json::json!([[1, 3], [2, 3], [3, 3]]);
        for out in [&mut direct, &mut via] {
            let p = out.as_object_mut().unwrap().remove("progress").unwrap();
            let p = p.as_array().unwrap();
            assert!(
                p.len() >= 2 && p[..] == expected.as_array().unwrap()[..p.len()],
                "{server_mode}: {p:?}"
            );
            if server_mode == "streamableHttp" {
                assert_eq!(p.len(), 3, "{server_mode}: every progress notification");
            }
        }
        assert_eq!(
            direct, via,
            "{server_mode}: the client saw the same through rpctap"
        );
        assert_eq!(via["sum"]["content"][0]["text"], "The sum of 2 and 3 is 5.");
        assert_eq!(
            via["structured"]["structuredContent"]["temperature"], 36,
            "{server_mode}: the tool with an outputSchema answered"
        );
        assert!(
            via["sampling"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("sampled by the test client"),
            "{server_mode}: the server→client sampling request went through and back"
        );
        let ev = proxy.drain().await;
        assert!(
            anomalies(&ev).is_empty(),
            "{server_mode}: {:?}",
            anomalies(&ev)
        );
        // The tools' schemas were compiled, so the structured result and every call's
        // arguments were validated — and passed.
        assert!(
            proxy.inspector.stats().schemas_compiled >= 2,
            "{server_mode}: {:?}",
            proxy.inspector.stats()
        );
        let c = calls(&ev);
        let sampling = c
            .iter()
            .find(|c| &*c.method == "sampling/createMessage")
            .expect("the server's request was correlated");
        assert_eq!(
            sampling.direction,
            rpctap::events::Direction::ServerToClient
        );
        assert_eq!(sampling.outcome, rpctap::events::Outcome::Result);
        assert!(
            c.iter()
                .all(|c| !matches!(c.outcome, rpctap::events::Outcome::Missing { .. })),
            "{server_mode}: every call answered"
        );
        assert_checks(proxy, &file).await;
        {
            // Replay: a run without the sampling round trip (a replay cannot answer the server's
            // request in the middle of a call), recorded, then replayed against the same server
            // — over the legacy transport too: the stream is opened again and the POSTs go to
            // its new endpoint.
            let file = tmp.join(format!("replayable-{server_mode}.jsonl"));
            let proxy = start_proxy_flags(&upstream, record_flags(&file)).await;
            run_node(
                &dir,
                &[
                    &format!("http://{}{path}", proxy.addr),
                    client_kind,
                    "nosampling",
                ],
            )
            .await;
            assert_checks_and_replays(proxy, &file, &upstream, 5).await;
        }
    }
}

/// server-everything as a stdio server, spawned by the TypeScript SDK's `StdioClientTransport`
/// directly and through `rpctap stdio`: a long-running tool with progress and a sampling round
/// trip (server → client) included. Same results, nothing flagged, the recording checks clean
/// and replays against the recorded command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client_and_server_everything_over_stdio() {
    let dir = node_modules(NODE_PACKAGES);
    let tmp = Scratch::new("interop-ts-stdio");
    let file = tmp.join("stdio.jsonl");
    let server = serde_json::json!([
        "node",
        dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        "stdio"
    ]);
    // Out of the hub: a test never writes into the machine's state directory.
    let mut wrapped = serde_json::json!([BIN, "stdio", "--no-hub", "--record", file, "--"]);
    wrapped
        .as_array_mut()
        .unwrap()
        .extend(server.as_array().unwrap().iter().cloned());
    let mut direct = run_node(&dir, &[&server.to_string(), "stdio"]).await;
    let mut via = run_node(&dir, &[&wrapped.to_string(), "stdio"]).await;
    // A quirk of the TypeScript SDK, not of the wire: it handles a notification on a microtask
    // but a response at once, so when the last progress notification and the result arrive in
    // one read, the result removes the progress handler first and that notification is dropped.
    // Which reads the bytes arrive in depends on timing (direct too); rpctap relays all three
    // before the result (asserted on the recording below). So progress is compared as a prefix
    // of 1/3, 2/3, 3/3; everything else exactly.
    let expected = serde_json::json!([[1, 3], [2, 3], [3, 3]]);
    for out in [&mut direct, &mut via] {
        let p = out.as_object_mut().unwrap().remove("progress").unwrap();
        let p = p.as_array().unwrap();
        assert!(
            p.len() >= 2 && p[..] == expected.as_array().unwrap()[..p.len()],
            "{p:?}"
        );
    }
    assert_eq!(direct, via, "the client saw the same through rpctap stdio");
    assert!(via["sampling"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("sampled by the test client"));
    let rec = rpctap::record::reader::read(&file).unwrap();
    assert!(
        rec.calls().any(|c| &*c.method == "sampling/createMessage"
            && c.direction == rpctap::events::Direction::ServerToClient
            && c.outcome == rpctap::events::Outcome::Result),
        "the sampling request was correlated with the client's reply"
    );
    let msgs: Vec<_> = rec.messages().collect();
    let long_id = msgs
        .iter()
        .find(|m| m.target.as_deref() == Some("trigger-long-running-operation"))
        .and_then(|m| m.id_text())
        .unwrap();
    let result_at = msgs
        .iter()
        .position(|m| m.id_text().as_ref() == Some(&long_id) && m.is_response())
        .unwrap();
    let progress_before = msgs[..result_at]
        .iter()
        .filter(|m| m.method.as_deref() == Some("notifications/progress"))
        .count();
    assert_eq!(
        progress_before, 3,
        "every progress notification, before the result"
    );
    assert!(live_codes(&file).is_empty(), "{:?}", live_codes(&file));
    let checked = check_recording(&file);
    assert!(checked.codes.is_empty(), "{}", checked.stdout);
    assert_eq!(checked.matched, answered_calls(&file));
    let out = Command::new(BIN)
        .args(["replay", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(replay_passed(&text) >= 8, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_answers_batches_on_a_2025_03_26_session_in_completion_order() {
    let dir = node_modules(NODE_PACKAGES);
    let port = free_port();
    let _server = start_peer(everything(&dir, "streamableHttp", port), port).await;
    let upstream: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let scratch_batch = Scratch::new("batch");
    let file = scratch_batch.join("batch.jsonl");
    let mut proxy = start_proxy_flags(&format!("http://{upstream}"), record_flags(&file)).await;
    let mut seen = Vec::new();
    for addr in [upstream, proxy.addr] {
        let (sid, init) = mcp_session_with(addr, "2025-03-26").await;
        assert_eq!(init["protocolVersion"], "2025-03-26");
        let h = [
            ("content-type", "application/json"),
            MCP_ACCEPT,
            ("mcp-session-id", sid.as_str()),
            ("mcp-protocol-version", "2025-03-26"),
        ];
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"trigger-long-running-operation","arguments":{"duration":0.3,"steps":2}}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"fast"}}}]"#;
        let r = send(addr, "POST", "/mcp", &h, batch).await;
        assert_eq!(r.status, 200);
        // The replies, in the order they came: the fast call first.
        let ids: Vec<serde_json::Value> = sse_data(&r.text())
            .into_iter()
            .flat_map(|v| {
                if v.is_array() {
                    v.as_array().unwrap().clone()
                } else {
                    vec![v]
                }
            })
            .filter(|m| m.get("id").is_some())
            .map(|m| m["id"].clone())
            .collect();
        seen.push(ids);
        send(
            addr,
            "DELETE",
            "/mcp",
            &[("mcp-session-id", sid.as_str())],
            "",
        )
        .await;
    }
    assert_eq!(
        seen[0],
        vec![serde_json::json!(2), serde_json::json!(1)],
        "completion order, direct"
    );
    assert_eq!(seen[0], seen[1], "the same through rpctap");
    let ev = proxy.drain().await;
    assert!(
        anomalies(&ev).is_empty(),
        "batch replies one per SSE event are legitimate: {:?}",
        anomalies(&ev)
    );
    let c = calls(&ev);
    assert!(c
        .iter()
        .filter(|c| &*c.method == "tools/call")
        .all(|c| c.outcome == rpctap::events::Outcome::Result));
    // initialize + the batch's two calls, replayed as a batch again.
    assert_checks_and_replays(proxy, &file, &format!("http://{upstream}"), 3).await;
}

/// A conformance suite's run against server-everything (Streamable HTTP), direct and through
/// a recording rpctap, whose verdicts must be the same: the direct run's output, the proxy
/// (still serving, its events not yet read) and its recording.
struct ConformanceRun {
    direct: String,
    proxy: TestProxy,
    file: std::path::PathBuf,
    upstream: String,
    _work: Scratch,
    _server: Proc,
}

async fn conformance_through<F, Fut>(name: &str, suite: F) -> ConformanceRun
where
    F: Fn(String, std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let dir = node_modules(NODE_PACKAGES);
    let port = free_port();
    let server = start_peer(everything(&dir, "streamableHttp", port), port).await;
    let upstream = format!("http://127.0.0.1:{port}");
    let work = Scratch::new(name);
    let file = work.join("conformance.jsonl");
    let proxy = start_proxy_flags(&upstream, record_flags(&file)).await;
    let direct = suite(format!("{upstream}/mcp"), work.to_path_buf()).await;
    let via = suite(format!("http://{}/mcp", proxy.addr), work.to_path_buf()).await;
    // DNS rebinding protection is the loopback proxy's own (it gives the upstream its own
    // `Host`, so it makes the check itself): it passes through rpctap whatever the server does
    // (server-everything checks no Host). Every other verdict is the server's.
    let rebinding = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .filter(|l| !l.contains("dns-rebinding-protection"))
            .collect()
    };
    assert_eq!(
        rebinding(verdicts(&direct)),
        rebinding(verdicts(&via)),
        "every scenario's verdict is the same through rpctap"
    );
    // …and through rpctap it passes at least the checks it passes direct.
    let passed = |out: &str| -> usize {
        verdicts(out)
            .iter()
            .find(|l| l.contains("dns-rebinding-protection:"))
            .and_then(|l| l.split(": ").nth(1)?.split(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    assert!(passed(&via) >= passed(&direct), "{via}");
    ConformanceRun {
        direct,
        proxy,
        file,
        upstream,
        _work: work,
        _server: server,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_verdicts_identical_direct_and_through_rpctap() {
    let run = conformance_through("conformance", conformance_server).await;
    let (direct, mut proxy, file, upstream) = (run.direct, run.proxy, run.file, run.upstream);
    assert!(
        verdicts(&direct).len() >= 20,
        "the suite ran its scenarios: {direct}"
    );
    // server-everything is not the suite's reference server, so some scenarios fail — identically.
    // What rpctap flags on this traffic is what the suite sends wrong on purpose.
    let ev = proxy.drain().await;
    let codes: std::collections::BTreeSet<String> =
        anomalies(&ev).into_iter().map(|a| a.0).collect();
    eprintln!("conformance traffic through rpctap flagged: {codes:?}");
    for e in &ev {
        if let Event::Anomaly(a) = &**e {
            if a.code != "TOOL_ERROR" {
                eprintln!("  {}: {}", a.code, a.message);
            }
        }
    }
    // The tool errors the suite provokes on purpose (tools-call-error) — warnings; and a real
    // rule break of the suite's own: its SSE multiple-streams scenario hard-codes
    // `MCP-Protocol-Version: 2025-03-26` on requests of a session that negotiated another
    // version (the version header must be the negotiated one).
    assert_eq!(
        codes.into_iter().collect::<Vec<_>>(),
        vec!["MCP_HEADER_MISMATCH".to_string(), "TOOL_ERROR".to_string()]
    );
    for e in &ev {
        if let Event::Anomaly(a) = &**e {
            if a.code == "MCP_HEADER_MISMATCH" {
                assert!(
                    a.message
                        .starts_with("MCP-Protocol-Version: 2025-03-26 on a request"),
                    "{}",
                    a.message
                );
            }
        }
    }
    // The recording of the whole suite checks as live (that rule break is its one error) and
    // replays against the same server with every call's verdict as recorded.
    assert_checks_replays_finding(proxy, &file, &upstream, 40, true).await;
}

/// The conformance suite 0.2.0-alpha.12's 2026-07-28 requirements (stateless requests, caching,
/// header validation, input-required rounds and the tasks extension's scenarios) against
/// server-everything, direct and through rpctap: every verdict the same. server-everything
/// speaks no 2026-07-28 (most scenarios fail, identically); each finding rpctap raises is judged
/// here — what the suite sends wrong on purpose, and the server's answers with `id: null`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_2026_requirements_identical_direct_and_through_rpctap() {
    let run = conformance_through("conformance-2026", conformance_2026).await;
    let (direct, mut proxy, file) = (run.direct, run.proxy, run.file);
    let d = verdicts(&direct);
    assert!(d.len() >= 40, "the suite ran its scenarios: {direct}");
    assert!(
        d.iter().filter(|l| l.contains("tasks-")).count() >= 8,
        "the tasks scenarios ran: {direct}"
    );
    let ev = proxy.drain().await;
    let mut seen = std::collections::BTreeSet::new();
    for e in &ev {
        let Event::Anomaly(a) = &**e else { continue };
        seen.insert(a.code);
        let m = &a.message;
        // Each finding, judged: the suite's deliberate mistakes (a request without its `_meta`
        // keys, a version header that contradicts the body, removed methods, input responses
        // to rounds never issued, an `Mcp-Method` that is not the body's method), and
        // server-everything's replies to requests it does not take (`-32000` with `id: null`,
        // so the calls they answer get no reply of their own).
        let judged = match a.code {
            "MCP_META" => m.contains("without the required _meta"),
            "MCP_HEADER_MISMATCH" => {
                m.contains("but the request's _meta names")
                    || m.contains("but the body's method is")
            }
            "MCP_REMOVED" => m.contains("is not part of 2026-07-28"),
            "MCP_INPUT_RESPONSE" => {
                m.contains("that no input_required round of this client issued")
            }
            "NULL_ID_RESPONSE" => m.contains("a response with id null (error -32000)"),
            "MISSING_RESPONSE" => m.contains("got no reply"),
            _ => false,
        };
        assert!(judged, "an unjudged finding: {}: {m}", a.code);
    }
    eprintln!("conformance 2026-07-28 traffic through rpctap flagged: {seen:?}");
    assert!(
        seen.contains("MCP_META") && seen.contains("MCP_REMOVED"),
        "{seen:?}"
    );
    // The recording checks as the live run did.
    drop(proxy.stop);
    proxy.served.await.unwrap();
    let c = check_recording(&file);
    assert_eq!(
        c.codes,
        live_codes(&file),
        "check finds what the live run found"
    );
}

/// The JSON-RPC 2.0 specification's examples (section 7).
const SPEC_EXAMPLES: [&str; 11] = [
    r#"{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}"#,
    r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}"#,
    r#"{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}"#,
    r#"{"jsonrpc": "2.0", "method": "foobar", "id": "1"}"#,
    r#"{"jsonrpc": "2.0", "method": "nonexistent", "id": "1"}"#,
    r#"{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]"#,
    r#"{"jsonrpc": "2.0", "method": 1, "params": "bar"}"#,
    r#"[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method"
]"#,
    r#"[]"#,
    r#"[
        {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
        {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
        {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
    ]"#,
    r#"[
        {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
    ]"#,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_json_rpc_library_with_the_specification_examples() {
    let env = venv("mcp1", &["mcp<2", "json-rpc", "werkzeug"]);
    let port = free_port();
    let _server = start_peer(
        python(&env, "jsonrpc_server.py", &[&port.to_string()]),
        port,
    )
    .await;
    let upstream: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let scratch_jsonrpc = Scratch::new("jsonrpc");
    let file = scratch_jsonrpc.join("jsonrpc.jsonl");
    let mut proxy = start_proxy_flags(&format!("http://{upstream}"), record_flags(&file)).await;
    let mut per_example = Vec::new();
    for body in SPEC_EXAMPLES {
        let direct = post_json(upstream, "/", body).await;
        let via = post_json(proxy.addr, "/", body).await;
        assert_eq!(via.status, direct.status, "{body}");
        assert_eq!(
            via.body, direct.body,
            "{body}: replies identical direct vs proxied"
        );
        per_example.push(
            anomalies(&proxy.drain().await)
                .into_iter()
                .map(|a| a.0)
                .collect::<Vec<_>>(),
        );
    }
    let r = post_json(proxy.addr, "/", SPEC_EXAMPLES[0]).await.json();
    assert_eq!(r["result"], 19);
    // What rpctap flags is what the spec's own examples do wrong on purpose (the client side), and
    // one real quirk of this library: it answers notification-only requests with 204 at HTTP
    // level but… (see the per-example list below).
    let expected: Vec<Vec<&str>> = vec![
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec!["PARSE_ERROR"],      // invalid JSON, sent on purpose
        vec!["INVALID_ENVELOPE"], // method 1
        vec!["PARSE_ERROR"],      // invalid batch JSON
        vec![], // empty batch: the library answers the single -32600, as the spec says
        // {"foo": "boo"} — and a real quirk of the library: it answers this valid, non-empty batch
        // with one -32600 object instead of an array with a reply per call (the spec allows a
        // single object only for unreadable or empty batches), so the batch reply is flagged.
        vec!["INVALID_ENVELOPE", "INVALID_BATCH_REPLY"],
        vec![], // all notifications: no reply
    ];
    assert_eq!(per_example, expected);
    drop(proxy.stop);
    proxy.served.await.unwrap(); // the recording is whole once the proxy has finished
    let out = Command::new(BIN)
        .args(["check", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut found: Vec<String> = text
        .lines()
        .flat_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["result"]["findings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["code"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    found.sort();
    // Offline finds exactly what the live inspector flagged (the recording's anomaly lines).
    let rec = rpctap::record::reader::read(&file).unwrap();
    let mut live: Vec<String> = rec
        .events
        .iter()
        .filter_map(|e| match e {
            rpctap::events::Event::Anomaly(a) => Some(a.code.to_string()),
            _ => None,
        })
        .collect();
    live.sort();
    assert!(!live.is_empty());
    assert_eq!(found, live, "{text}");
    let out = Command::new(BIN)
        .args([
            "replay",
            file.to_str().unwrap(),
            "--target",
            &format!("http://{upstream}"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
}

#[test]
fn har_export_opens_in_mitmproxy() {
    let env = venv("mitmproxy", &["mitmproxy"]);
    let scratch_har = Scratch::new("har");
    let har = scratch_har.join("demo.har");
    let rec = root().join("recordings/demo.jsonl");
    let out = Command::new(BIN)
        .args([
            "export",
            rec.to_str().unwrap(),
            "--format",
            "har",
            "-o",
            har.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = Command::new(env.join("bin/mitmdump"))
        .args(["-n", "-r", har.to_str().unwrap(), "--flow-detail", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every recorded exchange is read back as a flow, with its status.
    assert_eq!(text.matches("POST http://").count(), 10, "{text}");
    assert!(
        text.contains("<< 204 No Content") && text.contains("<< 202 Accepted"),
        "{text}"
    );
}

/// MCP 2026-07-28 multi round-trip requests, with the Python SDK 2.x on both sides: a tool that
/// asks for confirmation through a resolver (`Resolve(...)` returning `Elicit(...)`) and a client
/// that answers through its `elicitation_callback`. In `auto` mode the server answers the first
/// round `input_required` and the client retries with its answer; in `legacy` mode the server
/// sends `elicitation/create` mid-call. Through rpctap both are what they are direct, the retry
/// `continues` its round, nothing is flagged, the recording checks clean, and the dashboard
/// shows the two rounds as one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_v2_input_required_rounds_are_one_clean_call() {
    use rpctap::events::{Outcome, Scope};
    let env = venv("mcp2", &["mcp>=2,<3"]);
    let dir = Scratch::new("mrtr");
    for mode in ["json", "sse"] {
        let port = free_port();
        let _server = start_peer(
            python(&env, "mcp2_mrtr_server.py", &[mode, &port.to_string()]),
            port,
        )
        .await;
        let upstream = format!("http://127.0.0.1:{port}");
        let direct = format!("{upstream}/mcp");
        // A server answering in JSON has no back-channel for a mid-call `elicitation/create`:
        // the legacy client needs its SSE mode.
        let client_modes: &[&str] = match mode {
            "json" => &["auto"],
            _ => &["auto", "legacy"],
        };
        let mut proxies = Vec::new();
        for &client_mode in client_modes {
            let file = dir.join(format!("{mode}-{client_mode}.jsonl"));
            let proxy = start_proxy_flags(&upstream, record_flags(&file)).await;
            proxies.push((client_mode, file, proxy));
        }
        let via: Vec<String> = proxies
            .iter()
            .map(|(_, _, p)| format!("http://{}/mcp", p.addr))
            .collect();
        let mut args: Vec<&str> = Vec::new();
        for (i, m) in client_modes.iter().enumerate() {
            args.extend([direct.as_str(), m, "delete", via[i].as_str(), m, "delete"]);
        }
        let outs = run_script(&env, "mcp2_mrtr_client.py", &args).await;
        let outs = match outs {
            serde_json::Value::Array(a) => a,
            other => panic!("{other}"),
        };
        for (i, (client_mode, file, mut proxy)) in proxies.into_iter().enumerate() {
            let what = format!("{mode}/{client_mode}");
            assert_eq!(
                outs[2 * i],
                outs[2 * i + 1],
                "{what}: the same through rpctap"
            );
            let out = &outs[2 * i + 1];
            assert_eq!(
                out["delete"]["content"][0]["text"], "deleted /tmp/x",
                "{what}"
            );
            assert_eq!(
                out["asked"],
                serde_json::json!(["Delete /tmp/x?"]),
                "{what}"
            );
            let ev = proxy.drain().await;
            assert_eq!(anomalies(&ev), vec![], "{what}: nothing flagged");
            let cs: Vec<_> = calls(&ev)
                .into_iter()
                .filter(|c| &*c.method == "tools/call")
                .collect();
            if client_mode == "auto" {
                assert_eq!(cs.len(), 2, "{what}: {cs:?}");
                assert_eq!(cs[0].outcome, Outcome::InputRequired, "{what}");
                assert_eq!(cs[1].outcome, Outcome::Result, "{what}");
                assert_eq!(cs[1].continues.as_ref(), Some(&cs[0].id), "{what}");
                assert_eq!(cs[0].continues, None);
                // Both stateless, in one client's group, each exchange its own id scope.
                match (&cs[0].scope, &cs[1].scope) {
                    (
                        Scope::Stateless {
                            group: a,
                            exchange: x,
                        },
                        Scope::Stateless {
                            group: b,
                            exchange: y,
                        },
                    ) => {
                        assert_eq!(a, b, "{what}");
                        assert!(a.starts_with("stateless:mcp/") && a.ends_with("@127.0.0.1"));
                        assert_ne!(x, y);
                    }
                    other => panic!("{what}: {other:?}"),
                }
            } else {
                assert_eq!(cs.len(), 1, "{what}: {cs:?}");
                assert_eq!(
                    (&cs[0].outcome, &cs[0].continues),
                    (&Outcome::Result, &None)
                );
                let asked: Vec<_> = calls(&ev)
                    .into_iter()
                    .filter(|c| &*c.method == "elicitation/create")
                    .collect();
                assert_eq!(asked.len(), 1, "{what}: the server asked mid-call");
                assert_eq!(asked[0].outcome, Outcome::Result);
            }
            assert_checks(proxy, &file).await;
            // The dashboard lists one `tools/call delete`; in auto mode its detail holds the
            // first round, and its latency runs from the first request.
            let rec = rpctap::record::reader::read(&file).unwrap();
            let mut app = rpctap::view::App::new("t", "l", "u", 10_000, 0);
            app.load_recording(&rec);
            let shown: Vec<_> = app
                .visible()
                .into_iter()
                .filter(|r| &*r.method == "tools/call")
                .collect();
            assert_eq!(shown.len(), 1, "{what}");
            let rounds = shown[0].rounds.as_ref().map_or(0, |r| r.list.len());
            assert_eq!(rounds, usize::from(client_mode == "auto"), "{what}");
            if client_mode == "auto" {
                let first = shown[0].rounds.as_ref().unwrap();
                assert!(first.list[0]
                    .reply
                    .as_deref()
                    .unwrap()
                    .contains("inputRequests"));
                assert!(shown[0]
                    .request
                    .as_deref()
                    .unwrap()
                    .contains("inputResponses"));
                let sum: u64 = cs.iter().filter_map(|c| c.latency_us).sum();
                assert!(shown[0].latency_us.unwrap() >= sum, "{what}");
            }
        }
    }
}

/// A 2026-07-28 client that uses sampling (an input request of the server's `summarize` tool)
/// and logging (`_meta` logLevel, the server's log notifications): `MCP_DEPRECATED`, an `info`
/// finding each, once per client — shown, and `check` still exits 0. In legacy mode (2025-11-25)
/// the same features are not deprecated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprecated_sampling_and_logging_in_2026_07_28_are_info() {
    let env = venv("mcp2", &["mcp>=2,<3"]);
    let dir = Scratch::new("deprecated");
    let port = free_port();
    let _server = start_peer(
        python(&env, "mcp2_mrtr_server.py", &["sse", &port.to_string()]),
        port,
    )
    .await;
    let upstream = format!("http://127.0.0.1:{port}");
    for client_mode in ["auto", "legacy"] {
        let file = dir.join(format!("{client_mode}.jsonl"));
        let mut proxy = start_proxy_flags(&upstream, record_flags(&file)).await;
        let url = format!("http://{}/mcp", proxy.addr);
        let out = run_script(
            &env,
            "mcp2_mrtr_client.py",
            &[&url, client_mode, "summarize,chatty,summarize"],
        )
        .await;
        assert_eq!(out["summarize"]["content"][0]["text"], "summary: short");
        assert_eq!(out["logs"], serde_json::json!(["chatty was called"]));
        let ev = proxy.drain().await;
        let found: Vec<_> = ev
            .iter()
            .filter_map(|e| match &**e {
                Event::Anomaly(a) => Some(a.clone()),
                _ => None,
            })
            .collect();
        if client_mode == "auto" {
            let mut got: Vec<(&str, String)> = found
                .iter()
                .map(|a| (a.code, a.method.as_deref().unwrap_or("").to_string()))
                .collect();
            got.sort();
            assert_eq!(
                got,
                vec![
                    ("MCP_DEPRECATED", "notifications/message".to_string()),
                    ("MCP_DEPRECATED", "sampling/createMessage".to_string()),
                ],
                "{found:?}"
            );
            assert!(found
                .iter()
                .all(|a| a.severity == rpctap::events::Severity::Info));
            assert!(found.iter().any(|a| a.message.contains("LLM provider")));
            assert!(found.iter().any(|a| a.message.contains("OpenTelemetry")));
            assert_checks(proxy, &file).await;
        } else {
            // 2025-11-25 deprecates nothing; what the SDK's server does break there is the older
            // rule it always broke: logging without declaring `logging`.
            let codes: Vec<_> = found.iter().map(|a| a.code).collect();
            assert_eq!(codes, vec!["MCP_CAPABILITY"], "{found:?}");
            assert_eq!(found[0].method.as_deref(), Some("notifications/message"));
            assert_checks_finding(proxy, &file, true).await;
        }
    }
}

/// Raw 2026-07-28 retries against the Python SDK 2.x server's confirmation tool: a retry that
/// changes the `requestState` its round issued, one that drops it, one that invents one for a
/// call no round asked about, and one whose `inputResponses` answer another key than the round
/// asked — each flagged live and by `check` alike (`MCP_REQUEST_STATE`, `MCP_INPUT_RESPONSE`),
/// the honest retry not, and the state's value in no finding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_request_state_is_flagged_and_never_shown() {
    let env = venv("mcp2", &["mcp>=2,<3"]);
    let dir = Scratch::new("request-state");
    let port = free_port();
    let _server = start_peer(
        python(&env, "mcp2_mrtr_server.py", &["json", &port.to_string()]),
        port,
    )
    .await;
    let file = dir.join("tampered.jsonl");
    let mut proxy =
        start_proxy_flags(&format!("http://127.0.0.1:{port}"), record_flags(&file)).await;
    let addr = proxy.addr;
    let meta = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}"#;
    let call = |id: u32, path: &str, extra: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"delete","arguments":{{"path":"{path}"}},{extra}"_meta":{meta}}}}}"#
        )
    };
    let post = |body: String| async move {
        let r = send(
            addr,
            "POST",
            "/mcp",
            &[
                ("content-type", "application/json"),
                MCP_ACCEPT,
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "delete"),
            ],
            body,
        )
        .await;
        r.json()
    };
    // A first round: the key it asks and the state it issues.
    let ask = |id: u32, path: &'static str| {
        let body = call(id, path, "");
        async move {
            let r = post(body).await;
            assert_eq!(r["result"]["resultType"], "input_required", "{r}");
            let key = r["result"]["inputRequests"]
                .as_object()
                .and_then(|m| m.keys().next().cloned())
                .unwrap();
            let state = r["result"]["requestState"].as_str().unwrap().to_string();
            (key, state)
        }
    };
    let answer = |key: &str| {
        format!(
            r#""inputResponses":{{"{key}":{{"action":"accept","content":{{"confirm":true}}}}}},"#
        )
    };
    let mut states = Vec::new();
    // Honest.
    let (key, state) = ask(1, "/tmp/a").await;
    let r = post(call(
        2,
        "/tmp/a",
        &format!(r#"{}"requestState":"{state}","#, answer(&key)),
    ))
    .await;
    assert_eq!(r["result"]["content"][0]["text"], "deleted /tmp/a", "{r}");
    states.push(state);
    // Changed.
    let (key, state) = ask(3, "/tmp/b").await;
    let mut changed = state.clone().into_bytes();
    let last = changed.len() - 2;
    changed[last] = if changed[last] == b'A' { b'B' } else { b'A' };
    let changed = String::from_utf8(changed).unwrap();
    post(call(
        4,
        "/tmp/b",
        &format!(r#"{}"requestState":"{changed}","#, answer(&key)),
    ))
    .await;
    states.extend([state, changed]);
    // Dropped.
    let (key, state) = ask(5, "/tmp/c").await;
    post(call(6, "/tmp/c", &answer(&key))).await;
    states.push(state);
    // Invented, for a call no round asked about.
    let invented = "v1.aW52ZW50ZWQtYnktdGhlLWNsaWVudA";
    post(call(
        7,
        "/tmp/d",
        &format!(r#"{}"requestState":"{invented}","#, answer(&key)),
    ))
    .await;
    states.push(invented.to_string());
    // Another key than the round asked, with its honest state.
    let (_, state) = ask(8, "/tmp/e").await;
    post(call(
        9,
        "/tmp/e",
        &format!(r#"{}"requestState":"{state}","#, answer("other")),
    ))
    .await;
    states.push(state);

    let ev = proxy.drain().await;
    let found: Vec<_> = ev
        .iter()
        .filter_map(|e| match &**e {
            Event::Anomaly(a) => Some(a.clone()),
            _ => None,
        })
        .collect();
    let mut got: Vec<(String, &str)> = found
        .iter()
        .map(|a| {
            (
                a.id.as_ref().map(|i| i.to_string()).unwrap_or_default(),
                a.code,
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("4".to_string(), "MCP_REQUEST_STATE"),
            ("6".to_string(), "MCP_REQUEST_STATE"),
            ("7".to_string(), "MCP_REQUEST_STATE"),
            ("9".to_string(), "MCP_INPUT_RESPONSE"),
        ],
        "{found:?}"
    );
    for a in &found {
        for s in &states {
            assert!(
                !a.message.contains(&s[4..s.len() - 2]),
                "a state in {:?}",
                a.message
            );
        }
    }
    let cs = calls(&ev);
    let by_id = |id: &str| cs.iter().find(|c| c.id.to_string() == id).unwrap();
    for (retry, round) in [("2", "1"), ("4", "3"), ("6", "5"), ("9", "8")] {
        assert_eq!(
            by_id(retry).continues.as_ref().map(|i| i.to_string()),
            Some(round.to_string()),
            "call {retry}"
        );
    }
    assert_eq!(by_id("7").continues, None);
    assert_checks_finding(proxy, &file, true).await;
    // Nor does the recording's finding text hold a state.
    let text = std::fs::read_to_string(&file).unwrap();
    for line in text.lines().filter(|l| l.contains(r#""event":"anomaly""#)) {
        for s in &states {
            assert!(!line.contains(&s[4..s.len() - 2]), "{line}");
        }
    }
}

/// The official Rust SDK's tasks peer (tests/interop/rmcp_tasks), built by `scripts/peers.sh`.
fn rmcp_tasks() -> PathBuf {
    installed("rmcp-tasks", &["rmcp-tasks rmcp=3.11.0"]).join("rmcp-tasks")
}

/// Runs the rmcp tasks client's `scenario`; its JSON line.
async fn rmcp_client(scenario: &str, transport: &[&str]) -> serde_json::Value {
    let mut cmd = Command::new(rmcp_tasks());
    cmd.arg("client").arg(scenario).args(transport);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "rmcp client {scenario}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What a recording says of its tasks: per `tools/call` that created one (in order), its
/// outcome, latency and last status; and whether the dashboard lists any of their polls.
fn recorded_tasks(file: &Path) -> Vec<(rpctap::events::Outcome, u64, String, u32)> {
    let rec = rpctap::record::reader::read(file).unwrap();
    let tasks: Vec<_> = rec
        .calls()
        .filter(|c| &*c.method == "tools/call")
        .map(|c| {
            let t = c.task.as_deref().expect("the call created a task");
            (
                c.outcome.clone(),
                c.latency_us.unwrap(),
                t.status.as_deref().unwrap_or("").to_string(),
                t.polls,
            )
        })
        .collect();
    // The dashboard: one row per task, its polls folded under it.
    let mut app = rpctap::view::App::new("t", "l", "u", 100_000, 0);
    app.load_recording(&rec);
    let listed: Vec<_> = app.rows.iter().filter(|r| !r.folded).collect();
    assert!(
        !listed.iter().any(|r| r.method.starts_with("tasks/")),
        "{}: a task's polls are folded under it",
        file.display()
    );
    let with_task = listed.iter().filter(|r| r.task.is_some()).count();
    assert_eq!(with_task, tasks.len(), "{}", file.display());
    tasks
}

/// MCP tasks (the 2026-07-28 extension) with the official Rust SDK on both sides over
/// Streamable HTTP: a task that completes, one polled without waiting, one cancelled, one that
/// asks for input and is answered. Through rpctap each is what it is direct; each task is one
/// call whose outcome and latency are the task's; the only finding is the client that polls
/// faster than `pollIntervalMs`; the recording checks the same; the dashboard folds the polls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_tasks_over_http_are_one_call_each() {
    use rpctap::events::Outcome;
    let dir = Scratch::new("rmcp-tasks");
    let port = free_port();
    let mut server = Command::new(rmcp_tasks());
    server.args(["serve-http", &port.to_string()]);
    let _server = start_peer(server, port).await;
    let direct = format!("http://127.0.0.1:{port}/mcp");
    let file = dir.join("tasks.jsonl");
    let proxy = start_proxy_flags(&format!("http://127.0.0.1:{port}"), record_flags(&file)).await;
    let via = format!("http://{}/mcp", proxy.addr);
    let want = [
        ("complete", "completed", "42"),
        ("fast", "completed", "42"),
        ("cancel", "cancelled", ""),
        ("input", "completed", "Hello, Luca!"),
    ];
    for (scenario, status, text) in want {
        for url in [&direct, &via] {
            let out = rmcp_client(scenario, &["http", url]).await;
            assert_eq!(out["status"], status, "{scenario} via {url}: {out}");
            assert_eq!(
                out["text"].as_str().unwrap_or(""),
                text,
                "{scenario}: {out}"
            );
        }
    }
    let live = {
        drop(proxy.stop);
        proxy.served.await.unwrap();
        live_codes(&file)
    };
    let found: Vec<&String> = live.values().flatten().collect();
    assert_eq!(found, ["MCP_TASK_POLL"], "only the fast poller: {live:?}");
    let c = check_recording(&file);
    // The fast poller's session does not pass (seed 004: any finding fails its scope).
    assert_eq!(c.exit, Some(1), "{}", c.stdout);
    assert_eq!(c.codes, live, "check finds what the live run found");
    let tasks = recorded_tasks(&file);
    let outcomes: Vec<&Outcome> = tasks.iter().map(|t| &t.0).collect();
    assert!(
        matches!(
            outcomes[..],
            [
                Outcome::Result,
                Outcome::Result,
                Outcome::Cancelled { .. },
                Outcome::Result
            ]
        ),
        "{tasks:?}"
    );
    let statuses: Vec<&str> = tasks.iter().map(|t| t.2.as_str()).collect();
    assert_eq!(
        statuses,
        ["completed", "completed", "cancelled", "completed"]
    );
    // The sum takes 200 ms of the server's time: the call's latency is the task's whole life,
    // not the milliseconds its handle took.
    assert!(tasks[0].1 >= 200_000, "{tasks:?}");
    assert!(
        tasks[0].3 >= 1 && tasks[1].3 > tasks[0].3,
        "polls counted: {tasks:?}"
    );
    // `rpctap mock` serves the recording as the task server: a `tasks/get` poll gets the
    // recorded statuses in order (its key is the task's id), so the same client sees the same
    // tasks end the same way.
    let mock_port = free_port();
    let mut mock = Command::new(BIN);
    mock.args([
        "mock",
        file.to_str().unwrap(),
        "--listen",
        &format!("127.0.0.1:{mock_port}"),
    ]);
    let _mock = start_peer(mock, mock_port).await;
    let url = format!("http://127.0.0.1:{mock_port}/mcp");
    for (scenario, _, text) in [want[0], want[3]] {
        let out = rmcp_client(scenario, &["http", &url]).await;
        assert_eq!(
            (out["status"].as_str(), out["text"].as_str()),
            (Some("completed"), Some(text)),
            "{scenario} from the mock: {out}"
        );
    }
}

/// The same tasks over stdio, the client starting `rpctap stdio -- rmcp-tasks serve-stdio`:
/// one call per task, nothing flagged, the recording clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_tasks_over_stdio_are_one_call_each() {
    let dir = Scratch::new("rmcp-tasks-stdio");
    let peer = rmcp_tasks();
    for (scenario, text) in [("complete", "42"), ("input", "Hello, Luca!")] {
        let file = dir.join(format!("{scenario}.jsonl"));
        let args = [
            "stdio",
            BIN,
            "stdio",
            "--no-hub",
            "--record",
            file.to_str().unwrap(),
            "--",
            peer.to_str().unwrap(),
            "serve-stdio",
        ];
        let out = rmcp_client(scenario, &args).await;
        assert_eq!(
            (out["status"].as_str(), out["text"].as_str()),
            (Some("completed"), Some(text))
        );
        let c = check_recording(&file);
        assert_eq!((c.exit, c.codes.len()), (Some(0), 0), "{}", c.stdout);
        assert!(live_codes(&file).is_empty());
        let tasks = recorded_tasks(&file);
        assert_eq!(tasks.len(), 1);
        assert_eq!(
            (&tasks[0].0, tasks[0].2.as_str()),
            (&rpctap::events::Outcome::Result, "completed")
        );
    }
}

/// `task` faults on the rmcp tasks server: through rpctap a task the server completes is made
/// `failed`, `cancelled` or left `working` for the client (HTTP and stdio); each is recorded as
/// injected, and `check` does not blame the server for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_faults_fail_cancel_and_stall_a_task() {
    let dir = Scratch::new("rmcp-task-faults");
    let port = free_port();
    let mut server = Command::new(rmcp_tasks());
    server.args(["serve-http", &port.to_string()]);
    let _server = start_peer(server, port).await;
    let upstream = format!("http://127.0.0.1:{port}");
    for (kind, status) in [("fail", "failed"), ("cancel", "cancelled")] {
        let file = dir.join(format!("{kind}.jsonl"));
        let flags: rpctap::cli::ProxyFlags = rpctap::cli::SharedFlags {
            record: Some(file.clone()),
            faults: vec![format!("method=tasks/get,task={kind},after=1")],
            ..Default::default()
        }
        .into();
        let proxy = start_proxy_flags(&upstream, flags).await;
        let out = rmcp_client("complete", &["http", &format!("http://{}/mcp", proxy.addr)]).await;
        assert_eq!(out["status"], status, "{kind}: {out}");
        drop(proxy.stop);
        proxy.served.await.unwrap();
        let rec = rpctap::record::reader::read(&file).unwrap();
        let injected: Vec<_> = rec
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Fault(f) => Some(f.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(injected.len(), 1, "{kind}: {injected:?}");
        let c = check_recording(&file);
        assert_eq!(
            (c.exit, c.codes.len()),
            (Some(0), 0),
            "{kind}: {}",
            c.stdout
        );
    }
    // A stalled task never ends for the client: over stdio, the client gives up after its
    // polls (the peer client's bound, 1000), and the task's call ends when the session does.
    let file = dir.join("stall.jsonl");
    let peer = rmcp_tasks();
    let args = [
        "stdio",
        BIN,
        "stdio",
        "--no-hub",
        "--record",
        file.to_str().unwrap(),
        "--fault",
        "method=tasks/get,task=stall",
        "--",
        peer.to_str().unwrap(),
        "serve-stdio",
    ];
    // (The client that polls without waiting reaches its bound of polls in a second.)
    let mut cmd = Command::new(rmcp_tasks());
    cmd.arg("client").arg("fast").args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("never ended"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec = rpctap::record::reader::read(&file).unwrap();
    let faults = rec
        .events
        .iter()
        .filter(|e| matches!(e, Event::Fault(_)))
        .count();
    assert!(faults >= 100, "every poll's reply stalled: {faults}");
}
