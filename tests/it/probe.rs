//! `rpctap probe` and `rpctap test` against real servers: suites generated from the official
//! Python SDKs (2.x and 1.x), server-everything (HTTP and stdio), the demo's `/jsonrpc` (its own
//! `rpc.discover`), and the `json-rpc` library with an OpenRPC document and a method list — each
//! passing on the server as it is, every negative case asserting the code the server really
//! gives; a server changed to break one case failing exactly that case; `--fuzz` finding a
//! planted crash and shrinking its input; bad input a clear error with exit 2.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Waits (bounded) until something listens on the loopback `port`.
fn wait_tcp(port: u16) {
    assert!(
        eventually(Duration::from_secs(20), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "nothing listened on {port}"
    );
}

fn server(cmd: &mut Command, port: u16) -> Proc {
    let p = Proc::spawn(cmd.stdout(Stdio::null()).stderr(Stdio::null()));
    wait_tcp(port);
    p
}

fn python(venv: &str, packages: &[&str], script_name: &str) -> Command {
    let mut c = Command::new(installed(venv, packages).join("bin/python"));
    c.arg(script(script_name));
    c
}

/// A Python SDK server (`script` in `mode`) on a free port, and its MCP endpoint's URL.
fn sdk_server(venv: &str, packages: &[&str], script_name: &str, mode: &str) -> (Proc, String) {
    let port = free_port();
    let p = server(
        python(venv, packages, script_name).args([mode, &port.to_string()]),
        port,
    );
    (p, format!("http://127.0.0.1:{port}/mcp"))
}

const MCP1: &[&str] = &["mcp<2", "json-rpc", "werkzeug"];
const MCP2: &[&str] = &["mcp>=2,<3"];

fn everything_js() -> String {
    installed("node", NODE_PACKAGES)
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        .to_string_lossy()
        .into_owned()
}

fn suite(file: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

fn cases(s: &Value) -> &Vec<Value> {
    s["cases"].as_array().unwrap()
}

fn case<'a>(s: &'a Value, name: &str) -> &'a Value {
    cases(s)
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name:?} in {s:#}"))
}

/// `rpctap probe ARGS -o OUT`, which must succeed.
fn probe(out: &Path, args: &[&str]) -> (Value, String) {
    let mut a = vec![
        "probe",
        "-o",
        out.to_str().unwrap(),
        "--force",
        "--timeout",
        "5s",
    ];
    a.extend_from_slice(args);
    let (code, _, err) = run(&a);
    assert_eq!(code, 0, "probe {args:?} failed: {err}");
    (suite(out), err)
}

/// `rpctap test SUITE ARGS --format json`: the exit code and the report.
fn test(suite: &Path, args: &[&str]) -> (i32, Value) {
    let mut a = vec!["test", suite.to_str().unwrap(), "--format", "json"];
    a.extend_from_slice(args);
    let (code, out, err) = run(&a);
    let report: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("test {a:?}: not a JSON report ({e}): {out}\n{err}"));
    (code, report)
}

fn failed_cases(report: &Value) -> Vec<String> {
    report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["pass"] == false)
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// The suite passes on the server it was made from: exit 0, every enabled case ran and passed,
/// nothing failing about the session.
fn assert_passes(s: &Path, args: &[&str]) -> Value {
    let (code, report) = test(s, args);
    assert_eq!(code, 0, "{report:#}");
    assert!(failed_cases(&report).is_empty(), "{report:#}");
    let enabled = cases(&suite(s))
        .iter()
        .filter(|c| c.get("disabled").is_none())
        .count();
    assert_eq!(report["passed"], enabled, "{report:#}");
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["failing"] == false),
        "{report:#}"
    );
    report
}

/// Every enabled negative case expects what the server really answered: an error code, a
/// tool error, an HTTP rejection or no reply — never an untried guess.
fn assert_negatives_pinned(s: &Value) {
    for c in cases(s) {
        let kind = c["kind"].as_str().unwrap();
        if c.get("disabled").is_some()
            || matches!(kind, "happy" | "notification" | "batch" | "fuzz")
        {
            continue;
        }
        let e = &c["expect"];
        assert!(
            e.get("error_code").is_some()
                || e["tool_error"] == true
                || e.get("rejected").is_some()
                || e["no_reply"] == true,
            "{c:#}"
        );
    }
}

#[test]
fn a_suite_made_from_the_python_sdk_2_passes_on_it_and_is_kept_as_a_recording() {
    let dir = Scratch::new("probe-py2");
    let (_srv, url) = sdk_server("mcp2", MCP2, "mcp2_server.py", "json");
    let file = dir.join("suite.json");
    let (s, said) = probe(&file, &[&url, "--include-writes"]);
    assert_eq!(s["target"]["url"], url);
    assert_eq!(s["target"]["protocol"], "mcp");
    assert_eq!(s["target"]["server"], "interop-py2");
    // The happy path's arguments from the input schema, its output schema checked.
    let add = case(&s, "tool add: happy path");
    assert_eq!(
        add["params"]["arguments"],
        serde_json::json!({"a": 0, "b": 0})
    );
    assert!(add.get("disabled").is_none());
    assert!(add["expect"]["output_schema"].is_object());
    assert_eq!(add["expect"]["tool_call_succeeded"], true);
    // The SDK refuses invalid arguments as tool errors (MCP allows it from 2025-11-25), and
    // the suite says so rather than expecting -32602.
    assert_eq!(
        case(&s, "tool add: required argument a missing")["expect"]["tool_error"],
        true
    );
    assert_eq!(case(&s, "unknown method")["expect"]["error_code"], -32601);
    // The tool that always fails is written disabled, with the reason.
    let fail = case(&s, "tool fail: happy path");
    assert!(
        fail["disabled"]
            .as_str()
            .unwrap()
            .contains("did not succeed"),
        "{fail:#}"
    );
    // Prompts and resources, not only tools.
    assert!(case(&s, "prompt greet: get").get("disabled").is_none());
    assert!(case(&s, "resource demo://readme: read")
        .get("disabled")
        .is_none());
    assert_negatives_pinned(&s);
    assert!(said.contains("cases for interop-py2"), "{said}");

    // Kept as a recording that `check`, `replay` and `diff` read.
    let rec = dir.join("run.jsonl");
    let report = assert_passes(&file, &["--record", rec.to_str().unwrap()]);
    assert!(report["cases"].as_array().unwrap().len() >= 20);
    let (code, out, err) = run(&[
        "replay",
        rec.to_str().unwrap(),
        "--target",
        &url,
        "--ignore",
        "result.content[*].text",
    ]);
    assert_eq!(code, 0, "replay: {out}{err}");
    let (code, out, err) = run(&["diff", rec.to_str().unwrap(), rec.to_str().unwrap()]);
    assert_eq!(code, 0, "diff: {out}{err}");
    let baselines = dir.join("baselines");
    let (code, out, err) = run(&[
        "baseline",
        "accept",
        rec.to_str().unwrap(),
        "--dir",
        baselines.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "baseline: {out}{err}");
    // JUnit: one test case per suite case, skipped ones marked so.
    let (code, xml, _) = run(&["test", file.to_str().unwrap(), "--format", "junit"]);
    assert_eq!(code, 0);
    assert_eq!(xml.matches("<testcase ").count(), cases(&s).len(), "{xml}");
    assert_eq!(xml.matches("<skipped").count(), 1, "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
}

#[test]
fn without_include_writes_only_read_only_tools_run_and_the_python_sdk_1_passes() {
    let dir = Scratch::new("probe-py1");
    let (_srv, url) = sdk_server("mcp1", MCP1, "mcp1_server.py", "sse");
    let file = dir.join("suite.json");
    let (s, _) = probe(&file, &[&url]);
    // No tool of this server declares readOnlyHint: every tool case is disabled, saying why.
    for c in cases(&s) {
        if c["method"] == "tools/call" && c["name"] != "unknown tool" {
            assert!(
                c["disabled"]
                    .as_str()
                    .unwrap_or("")
                    .contains("readOnlyHint"),
                "{c:#}"
            );
        }
    }
    assert_negatives_pinned(&s);
    assert_passes(&file, &[]);
    // With --include-writes they run, and the suite passes as well.
    let (s, _) = probe(&file, &[&url, "--include-writes"]);
    assert!(case(&s, "tool add: happy path").get("disabled").is_none());
    assert_negatives_pinned(&s);
    assert_passes(&file, &[]);
}

#[test]
fn server_everything_over_http_and_stdio_passes_its_own_suite() {
    let dir = Scratch::new("probe-everything");
    let port = free_port();
    let _srv = server(
        Command::new("node")
            .arg(everything_js())
            .arg("streamableHttp")
            .env("PORT", port.to_string()),
        port,
    );
    let url = format!("http://127.0.0.1:{port}/mcp");
    let http = dir.join("http.json");
    let (s, _) = probe(&http, &[&url]);
    assert!(cases(&s).len() > 30, "{s:#}");
    // Read-only tools run, the others are disabled: both kinds exist on this server.
    let echo = case(&s, "tool echo: happy path");
    assert!(echo.get("disabled").is_none(), "{echo:#}");
    assert!(cases(&s).iter().any(|c| c["disabled"]
        .as_str()
        .unwrap_or("")
        .contains("readOnlyHint")));
    assert_negatives_pinned(&s);
    assert_passes(&http, &[]);

    // Over stdio: the command started fresh for the probe and for each run.
    let stdio = dir.join("stdio.json");
    let (s, _) = probe(&stdio, &["--", "node", &everything_js(), "stdio"]);
    assert_eq!(s["target"]["command"][0], "node");
    assert!(s["target"].get("url").is_none());
    assert_negatives_pinned(&s);
    assert_passes(&stdio, &[]);
}

#[test]
fn the_demo_jsonrpc_endpoint_describes_itself_and_its_suite_has_batches_and_notifications() {
    let dir = Scratch::new("probe-demo");
    let port = free_port();
    let _srv = server(
        rpctap().args(["demo-server", "--listen", &format!("127.0.0.1:{port}")]),
        port,
    );
    let url = format!("http://127.0.0.1:{port}/jsonrpc");
    let file = dir.join("suite.json");
    let (s, _) = probe(&file, &[&url]);
    assert_eq!(s["target"]["protocol"], "jsonrpc");
    // From rpc.discover: every method, by name, with the documented code for bad params.
    for m in ["echo", "add", "subtract", "sleep"] {
        assert!(case(&s, &format!("method {m}: happy path"))
            .get("disabled")
            .is_none());
    }
    assert_eq!(
        case(&s, "method add: param a of the wrong type")["expect"]["error_code"],
        -32602
    );
    assert_eq!(case(&s, "not JSON")["expect"]["error_code"], -32700);
    assert_eq!(case(&s, "invalid envelope")["expect"]["error_code"], -32600);
    // The demo answers a notification with 204 and no body; a batch gets one reply per call.
    assert_eq!(
        case(&s, "method echo: as a notification gets no reply")["expect"]["no_reply"],
        true
    );
    assert_eq!(case(&s, "batch")["expect"]["replies"], 2);
    assert!(case(&s, "invalid envelope").get("allow").is_none(), "{s:#}");
    assert_negatives_pinned(&s);
    assert_passes(&file, &[]);

    // Its MCP endpoint too: every refusal the spec's (the demo refuses what it must).
    let file = dir.join("mcp-suite.json");
    let (s, said) = probe(
        &file,
        &[&format!("http://127.0.0.1:{port}/mcp"), "--include-writes"],
    );
    assert!(
        !said.contains("it accepted what it should refuse"),
        "{said}"
    );
    for c in cases(&s) {
        if c["kind"] == "missing_required" || c["kind"] == "wrong_type" {
            assert_eq!(c["expect"]["error_code"], -32602, "{c:#}");
        }
    }
    assert_eq!(case(&s, "invalid envelope")["expect"]["error_code"], -32600);
    assert_passes(&file, &[]);
}

#[test]
fn the_json_rpc_library_from_an_openrpc_document_and_from_a_method_list() {
    let dir = Scratch::new("probe-jsonrpc");
    let port = free_port();
    let _srv = server(
        python("mcp1", MCP1, "jsonrpc_server.py").arg(port.to_string()),
        port,
    );
    let url = format!("http://127.0.0.1:{port}/");
    let file = dir.join("suite.json");
    let (s, _) = probe(&file, &[&script("jsonrpc.openrpc.json"), "--url", &url]);
    assert_eq!(s["target"]["url"], url);
    assert_eq!(
        case(&s, "method subtract: happy path")["params"],
        serde_json::json!({"minuend": 0, "subtrahend": 0})
    );
    // By position, as the document says.
    assert_eq!(
        case(&s, "method sum: happy path")["params"],
        serde_json::json!([0, 0, 0])
    );
    // The library answers a missing named param with its own -32000, not -32602: the case
    // asserts what it gives and notes what the spec calls for.
    let missing = case(&s, "method subtract: required param minuend missing");
    assert_eq!(missing["expect"]["error_code"], -32000, "{missing:#}");
    assert!(missing["note"].as_str().unwrap().contains("-32602"));
    assert_negatives_pinned(&s);
    assert_passes(&file, &[]);

    let list = dir.join("methods.json");
    std::fs::write(
        &list,
        r#"{"httpPath": "/", "methods": ["foobar", "get_data"]}"#,
    )
    .unwrap();
    let file = dir.join("list-suite.json");
    let (s, _) = probe(
        &file,
        &[
            list.to_str().unwrap(),
            "--url",
            &format!("http://127.0.0.1:{port}"),
        ],
    );
    assert!(case(&s, "method foobar: happy path")
        .get("params")
        .is_none());
    assert_passes(&file, &[]);
}

#[test]
fn a_server_changed_to_break_one_case_fails_exactly_that_case() {
    let dir = Scratch::new("probe-broken");
    let good = free_port();
    let _srv = server(
        Command::new("python3")
            .arg(script("probe_server.py"))
            .args(["http", &good.to_string()]),
        good,
    );
    let file = dir.join("suite.json");
    let (s, _) = probe(&file, &[&format!("http://127.0.0.1:{good}/mcp")]);
    // `forget` changes data: written disabled.
    assert!(case(&s, "tool forget: happy path")["disabled"]
        .as_str()
        .unwrap()
        .contains("readOnlyHint"));
    assert_negatives_pinned(&s);
    let rec = dir.join("good.jsonl");
    assert_passes(&file, &["--record", rec.to_str().unwrap()]);
    // A recording runs as a suite too: each recorded call expecting what the server answered.
    let (code, report) = test(&rec, &[]);
    assert_eq!(code, 0, "{report:#}");
    assert!(report["passed"].as_u64().unwrap() >= 8, "{report:#}");
    for (what, failing, assertion) in [
        ("crash", vec!["tool add: happy path"], "Tool Call Succeeded"),
        (
            "code",
            vec![
                "tool add: argument a of the wrong type",
                "tool lookup: argument name of the wrong type",
            ],
            "Error Code Equals",
        ),
        (
            "ignore",
            vec!["tool add: required argument a missing"],
            "Has Error",
        ),
        ("schema", vec!["tool lookup: happy path"], "Output Schema"),
    ] {
        let port = free_port();
        let _broken = server(
            Command::new("python3")
                .arg(script("probe_server.py"))
                .args(["http", &port.to_string(), "--break", what]),
            port,
        );
        let (code, report) = test(
            &file,
            &["--target", &format!("http://127.0.0.1:{port}/mcp")],
        );
        assert_eq!(code, 1, "{what}: {report:#}");
        assert_eq!(failed_cases(&report), failing, "{what}: {report:#}");
        for c in report["cases"].as_array().unwrap() {
            if c["pass"] == false {
                let failed: Vec<&str> = c["checks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|k| k["pass"] == false)
                    .map(|k| k["assertion"].as_str().unwrap())
                    .collect();
                assert!(failed.contains(&assertion), "{what}: {c:#}");
            }
        }
        if what == "ignore" {
            // The recorded run, against the changed server: the call it now accepts fails.
            let (code, report) = test(&rec, &["--target", &format!("http://127.0.0.1:{port}/mcp")]);
            assert_eq!(code, 1, "{report:#}");
            let failed = failed_cases(&report);
            assert_eq!(failed.len(), 1, "{report:#}");
            assert!(failed[0].ends_with("tools/call add"), "{failed:?}");
        }
        // The plain-words report says why.
        let (_, text, _) = run(&[
            "test",
            file.to_str().unwrap(),
            "--target",
            &format!("http://127.0.0.1:{port}/mcp"),
        ]);
        assert!(text.contains(&format!("FAIL {}", failing[0])), "{text}");
        if what == "code" {
            assert!(
                text.contains("Rejected, but for a different reason than expected"),
                "{text}"
            );
        }
    }
}

#[test]
fn fuzz_finds_the_planted_crash_and_shrinks_its_input() {
    let dir = Scratch::new("probe-fuzz");
    let file = dir.join("suite.json");
    let planted = script("probe_server.py");
    let (s, said) = probe(
        &file,
        &[
            "--fuzz", "30", "--seed", "7", "--", "python3", &planted, "stdio",
        ],
    );
    let fuzz: Vec<&Value> = cases(&s).iter().filter(|c| c["kind"] == "fuzz").collect();
    assert_eq!(fuzz.len(), 2, "{s:#}");
    // The crash, shrunk to the edge: the smallest negative count (it crashes on count < 0).
    let crash = fuzz
        .iter()
        .find(|c| {
            c["name"]
                .as_str()
                .unwrap()
                .starts_with("tool lookup: fuzz crash")
        })
        .unwrap_or_else(|| panic!("{s:#}"));
    assert_eq!(crash["params"]["arguments"]["count"], -1, "{said}");
    assert_eq!(crash["params"]["name"], "lookup");
    assert_eq!(crash["expect"]["no_crash"], true);
    assert!(said.contains("the server crashed"), "{said}");
    assert!(said.contains("shrunk from"), "{said}");
    // The protocol violation rpctap found in the answer to one input, with that input.
    let violation = fuzz
        .iter()
        .find(|c| {
            c["name"]
                .as_str()
                .unwrap()
                .starts_with("tool lookup: fuzz INVALID_ENVELOPE")
        })
        .unwrap_or_else(|| panic!("{s:#}"));
    assert_eq!(violation["params"]["arguments"]["name"], "null");
    assert!(said.contains("rpctap finds INVALID_ENVELOPE"), "{said}");
    // The cases it added fail on the server as it is, saying so; nothing else does.
    let (code, report) = test(&file, &[]);
    assert_eq!(code, 1);
    let mut failed = failed_cases(&report);
    failed.sort();
    assert_eq!(failed.len(), 2, "{report:#}");
    assert!(
        failed[0].starts_with("tool lookup: fuzz INVALID_ENVELOPE"),
        "{failed:?}"
    );
    assert!(
        failed[1].starts_with("tool lookup: fuzz crash"),
        "{failed:?}"
    );
    // A tool whose output breaks its schema on some inputs: found, the input kept.
    let port = free_port();
    let _broken = server(
        Command::new("python3")
            .arg(script("probe_server.py"))
            .args(["http", &port.to_string(), "--break", "schema"]),
        port,
    );
    let schema_file = dir.join("schema.json");
    let (s3, said3) = probe(
        &schema_file,
        &["--fuzz", "5", &format!("http://127.0.0.1:{port}/mcp")],
    );
    let found: Vec<&str> = cases(&s3)
        .iter()
        .filter(|c| c["kind"] == "fuzz")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(
        found
            .iter()
            .any(|n| n.starts_with("tool lookup: fuzz output schema")),
        "{found:?} {said3}"
    );
    // The same seed sends the same inputs: the same case again.
    let again = dir.join("again.json");
    let (s2, _) = probe(
        &again,
        &[
            "--fuzz", "30", "--seed", "7", "--", "python3", &planted, "stdio",
        ],
    );
    assert_eq!(s2["cases"], s["cases"]);
}

#[test]
fn bad_input_is_a_clear_error_naming_it_with_exit_2() {
    let dir = Scratch::new("probe-bad");
    let out = dir.join("s.json");
    let o = out.to_str().unwrap();
    // Nothing listens.
    let port = free_port();
    let (code, _, err) = run(&["probe", &format!("http://127.0.0.1:{port}/mcp"), "-o", o]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot reach") && err.contains(&port.to_string()),
        "{err}"
    );
    // A command that does not exist.
    let (code, _, err) = run(&["probe", "-o", o, "--", "no-such-server-rpctap"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no-such-server-rpctap"), "{err}");
    // A server that is not MCP and offers no OpenRPC document.
    let web = free_port();
    let _srv = server(
        Command::new("python3").args([
            "-m",
            "http.server",
            &web.to_string(),
            "--bind",
            "127.0.0.1",
        ]),
        web,
    );
    let (code, _, err) = run(&[
        "probe",
        &format!("http://127.0.0.1:{web}/"),
        "-o",
        o,
        "--timeout",
        "5s",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is not an MCP server") && err.contains("rpc.discover"),
        "{err}"
    );
    // An OpenRPC document read from a URL (the web server serves the checkout): it names the
    // server, which here is down.
    let (code, _, err) = run(&[
        "probe",
        &format!("http://127.0.0.1:{web}/tests/interop/jsonrpc.openrpc.json"),
        "--url",
        &format!("http://127.0.0.1:{port}/"),
        "-o",
        o,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot reach") && err.contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
    // A malformed OpenRPC document: the file and the place named.
    let doc = dir.join("bad.openrpc.json");
    std::fs::write(&doc, r#"{"openrpc": "1.3.2", "methods": [{"params": []}]}"#).unwrap();
    let (code, _, err) = run(&[
        "probe",
        doc.to_str().unwrap(),
        "--url",
        "http://127.0.0.1:1/",
        "-o",
        o,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.openrpc.json") && err.contains("methods[0]"),
        "{err}"
    );
    // Not a document at all.
    std::fs::write(&doc, "{not json").unwrap();
    let (code, _, err) = run(&["probe", doc.to_str().unwrap(), "-o", o]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not a JSON document"), "{err}");
    // A suite with a typo: the key and its place named.
    let suite = dir.join("typo.json");
    std::fs::write(
        &suite,
        r#"{"suite": 1, "target": {"url": "http://127.0.0.1:1/mcp", "protocol": "mcp"},
  "cases": [{"name": "a", "kind": "happy", "method": "ping", "expect": {"no_eror": true}}]}"#,
    )
    .unwrap();
    let (code, _, err) = run(&["test", suite.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("typo.json") && err.contains("no_eror") && err.contains("line 2"),
        "{err}"
    );
    // A token is never written into a suite: only env:NAME.
    let (code, _, err) = run(&[
        "probe",
        "http://127.0.0.1:1/mcp",
        "-o",
        o,
        "--bearer",
        "s3cret",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("env:NAME"), "{err}");
    // A suite already there is not overwritten without --force.
    std::fs::write(&out, "{}").unwrap();
    let (code, _, err) = run(&["probe", "http://127.0.0.1:1/mcp", "-o", o]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--force"), "{err}");
}

#[test]
fn a_server_behind_a_token_is_probed_and_tested_with_the_token_from_the_environment() {
    let dir = Scratch::new("probe-token");
    let port = free_port();
    let _srv = server(
        rpctap()
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--no-tui",
                "--log",
                "off",
            ])
            .args([
                "--auth-token",
                "s3cret-probe",
                "--",
                "python3",
                &script("probe_server.py"),
                "stdio",
            ])
            .env("RPCTAP_HOME", dir.join("home")),
        port,
    );
    let url = format!("http://127.0.0.1:{port}/mcp");
    let file = dir.join("suite.json");
    let o = file.to_str().unwrap();
    // Without it: refused, and told how to give it.
    let (code, _, err) = run(&["probe", &url, "-o", o]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("HTTP 401") && err.contains("--bearer env:NAME"),
        "{err}"
    );
    let with = |args: &[&str]| {
        let out = rpctap()
            .args(args)
            .env("PROBE_TOKEN", "s3cret-probe")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _, err) = with(&["probe", &url, "-o", o, "--bearer", "env:PROBE_TOKEN"]);
    assert_eq!(code, 0, "{err}");
    // The suite names the variable, never the token.
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\"bearer\": \"env:PROBE_TOKEN\""), "{text}");
    assert!(!text.contains("s3cret-probe"), "{text}");
    let rec = dir.join("run.jsonl");
    let (code, out, err) = with(&["test", o, "--record", rec.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    // Nor does the recording hold it.
    assert!(!std::fs::read_to_string(&rec)
        .unwrap()
        .contains("s3cret-probe"));
    // The variable unset: a clear error before anything is sent.
    let (code, _, err) = run(&["test", o]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("PROBE_TOKEN is not set"), "{err}");
}

#[test]
fn websocket_servers_from_a_method_list_the_websockets_library_and_ganache() {
    let dir = Scratch::new("probe-ws");
    // JSON-RPC over WebSocket with the `websockets` library (deflate on).
    let port = free_port();
    let _peer = server(
        Command::new(installed("ws", &["websockets==17.4"]).join("bin/python"))
            .arg(script("ws_peer.py"))
            .args(["server", &port.to_string()]),
        port,
    );
    let list = dir.join("ws-methods.json");
    std::fs::write(&list, r#"{"methods": ["echo", "stats"]}"#).unwrap();
    let file = dir.join("ws.json");
    let url = format!("ws://127.0.0.1:{port}/");
    let (s, _) = probe(&file, &[list.to_str().unwrap(), "--url", &url]);
    assert_eq!(s["target"]["url"], url);
    assert_eq!(case(&s, "unknown method")["expect"]["error_code"], -32601);
    // The notification and the batch go to a method the server answered.
    assert_eq!(case(&s, "batch")["batch"][0]["method"], "echo");
    assert_eq!(case(&s, "batch")["expect"]["replies"], 2);
    assert_negatives_pinned(&s);
    let rec = dir.join("ws-run.jsonl");
    assert_passes(&file, &["--record", rec.to_str().unwrap()]);
    // The run went over a WebSocket, through rpctap: one exchange answered 101.
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.contains("\"status\":101"), "{text}");

    // ganache, a real Ethereum node: it answers notifications and gives its own codes; the
    // suite says so and passes on it as it is.
    let gport = free_port();
    let _ganache = server(
        Command::new(installed("node", NODE_PACKAGES).join("node_modules/.bin/ganache")).args([
            "--server.host",
            "127.0.0.1",
            "--server.port",
            &gport.to_string(),
            "--logging.quiet",
        ]),
        gport,
    );
    let list = dir.join("eth-methods.json");
    std::fs::write(
        &list,
        r#"{"methods": ["eth_blockNumber", "net_version", "eth_chainId"]}"#,
    )
    .unwrap();
    let file = dir.join("eth.json");
    let (s, said) = probe(
        &file,
        &[
            list.to_str().unwrap(),
            "--url",
            &format!("ws://127.0.0.1:{gport}"),
        ],
    );
    let n = case(
        &s,
        "method eth_blockNumber: as a notification gets no reply",
    );
    assert_eq!(n["expect"]["no_reply"], false, "{n:#}");
    assert!(
        n["note"].as_str().unwrap().contains("gets no reply"),
        "{n:#}"
    );
    assert!(said.contains("the server answers a notification"), "{said}");
    assert_negatives_pinned(&s);
    assert_passes(&file, &[]);
}

#[test]
fn at_2026_07_28_the_python_sdk_2_is_probed_and_tested_without_a_session() {
    let dir = Scratch::new("probe-2026");
    let (_srv, url) = sdk_server("mcp2", MCP2, "mcp2_server.py", "json");
    let file = dir.join("suite.json");
    let (s, said) = probe(
        &file,
        &[&url, "--include-writes", "--mcp-version", "2026-07-28"],
    );
    assert_eq!(s["target"]["mcp_version"], "2026-07-28");
    assert_eq!(s["target"]["server"], "interop-py2", "{said}");
    assert!(
        case(&s, "tool add: happy path").get("disabled").is_none(),
        "{s:#}"
    );
    assert_negatives_pinned(&s);
    let rec = dir.join("run.jsonl");
    assert_passes(&file, &["--record", rec.to_str().unwrap()]);
    // server/discover, then every request stateless: its version in `_meta`, no session, no
    // initialize.
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.contains("\"method\":\"server/discover\""), "{text}");
    assert!(!text.contains("\"method\":\"initialize\""), "{text}");
    assert!(text.contains("io.modelcontextprotocol/protocolVersion"));
    assert!(
        !text.to_ascii_lowercase().contains("mcp-session-id"),
        "{text}"
    );
}
