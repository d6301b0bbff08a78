//! `rpctap stdio`: a stdio server wrapped, its pipes relayed byte for byte and inspected, with
//! real peers — the MCP Python SDK's stdio client and server, plain Unix children (`cat`, `sh`)
//! for byte-exactness, exit statuses and signals — and the recording checked, replayed and
//! served by `mock --stdio`.

use crate::common::*;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MCP1: &[&str] = &["mcp<2", "json-rpc", "werkzeug"];

fn py() -> String {
    installed("mcp1", MCP1)
        .join("bin/python")
        .to_string_lossy()
        .into_owned()
}

/// Runs the SDK's stdio client against `command`; its JSON output.
fn sdk_client(command: &[String]) -> serde_json::Value {
    let out = Command::new(py())
        .arg(script("mcp_stdio_client.py"))
        .args(command)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn rpctap_bin() -> String {
    env!("CARGO_BIN_EXE_rpctap").to_string()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The recording's call lines: (direction, method, outcome).
fn call_outcomes(file: &Path) -> Vec<(String, String, String)> {
    let rec = rpctap::record::reader::read(file).unwrap();
    rec.calls()
        .map(|c| {
            (
                format!("{:?}", c.direction),
                c.method.to_string(),
                c.outcome.label(),
            )
        })
        .collect()
}

#[test]
fn python_sdk_stdio_session_is_identical_through_rpctap_and_its_recording_checks_replays_and_mocks()
{
    let tmp = Scratch::new("stdio-sdk");
    let file = tmp.join("s.jsonl");
    let server = vec![py(), script("mcp1_server.py"), "stdio".into()];
    let direct = sdk_client(&server);
    let mut wrapped = strings(&[
        &rpctap_bin(),
        "stdio",
        "--record",
        file.to_str().unwrap(),
        "--",
    ]);
    wrapped.extend(server.clone());
    let via = sdk_client(&wrapped);
    assert_eq!(direct, via, "the client saw the same through rpctap");
    assert_eq!(
        via["ask"]["content"][0]["text"],
        "the model said: 42 (why?)"
    );
    assert_eq!(
        via["progress"],
        serde_json::json!([[1.0, 3.0], [2.0, 3.0], [3.0, 3.0]])
    );

    // Every call correlated, the sampling round trip (server → client) included; only the
    // deliberate tool failure flagged.
    let calls = call_outcomes(&file);
    assert_eq!(calls.len(), 10, "{calls:?}");
    assert!(calls.iter().all(|c| c.2 == "result"), "{calls:?}");
    assert!(calls.contains(&(
        "ServerToClient".into(),
        "sampling/createMessage".into(),
        "result".into()
    )));
    let live = live_codes(&file);
    // The deliberate tool failure, and a real rule FastMCP breaks: it logs
    // (`notifications/message`) without declaring the `logging` capability — flagged once.
    assert_eq!(
        live.values().flatten().collect::<Vec<_>>(),
        vec!["MCP_CAPABILITY", "TOOL_ERROR"],
        "{live:?}"
    );
    let rec = rpctap::record::reader::read(&file).unwrap();
    assert_eq!(rec.header["transport"], "stdio");
    assert_eq!(rec.header["command"], serde_json::json!(server));
    assert!(rec
        .messages()
        .all(|m| m.transport == rpctap::events::Transport::Stdio));

    // `check` re-inspects it to the same findings, every answered call matched.
    let checked = check_recording(&file);
    assert_eq!(checked.codes, live);
    assert_eq!(
        checked.exit,
        Some(1),
        "that rule break is an error: {}",
        checked.stdout
    );
    assert_eq!(checked.matched, answered_calls(&file));

    // `replay` spawns the recorded command and passes every call (the sampling request is
    // answered from the recording when the server makes it again).
    let out = rpctap()
        .args(["replay", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("9 passed, 0 failed"), "{text}");
    // … and against a command given on the line.
    let mut cmd = rpctap();
    cmd.args(["replay", file.to_str().unwrap(), "--target-command", "--"])
        .args(&server);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0));

    // `mock --stdio` serves the recording to the same client: the same results (the mock
    // sends no progress, logs or sampling of its own).
    let mocked = sdk_client(&strings(&[
        &rpctap_bin(),
        "mock",
        file.to_str().unwrap(),
        "--stdio",
    ]));
    for k in [
        "add", "slow", "fail", "ask", "readme", "greet", "tools", "server",
    ] {
        assert_eq!(mocked[k], direct[k], "{k}");
    }
}

#[test]
fn a_banner_on_the_servers_stdout_is_flagged_once_and_later_calls_still_correlate() {
    let tmp = Scratch::new("stdio-banner");
    let file = tmp.join("b.jsonl");
    let mut wrapped = strings(&[
        &rpctap_bin(),
        "stdio",
        "--record",
        file.to_str().unwrap(),
        "--",
    ]);
    wrapped.extend([
        py(),
        script("mcp1_server.py"),
        "stdio".into(),
        "banner".into(),
    ]);
    let via = sdk_client(&wrapped);
    assert_eq!(via["add"]["content"][0]["text"], "5");
    let rec = rpctap::record::reader::read(&file).unwrap();
    let parse_errors: Vec<_> = rec
        .events
        .iter()
        .filter_map(|e| match e {
            rpctap::events::Event::Anomaly(a) if a.code == "PARSE_ERROR" => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(parse_errors.len(), 1);
    assert_eq!(
        parse_errors[0].direction,
        Some(rpctap::events::Direction::ServerToClient)
    );
    assert!(
        parse_errors[0]
            .message
            .contains("interop server starting (a banner on stdout)"),
        "the line's text is in the message: {}",
        parse_errors[0].message
    );
    let calls = call_outcomes(&file);
    assert_eq!(calls.len(), 10);
    assert!(calls.iter().all(|c| c.2 == "result"), "{calls:?}");
    let checked = check_recording(&file);
    assert_eq!(checked.codes, live_codes(&file));
}

/// Reads from `r` until `want` bytes came (or the deadline), on a thread.
fn read_exact_within(
    r: &mut (impl Read + Send),
    want: usize,
    limit: Duration,
) -> Result<Vec<u8>, String> {
    let mut got = Vec::with_capacity(want);
    let mut buf = vec![0u8; 1 << 16];
    let deadline = Instant::now() + limit;
    while got.len() < want {
        if Instant::now() > deadline {
            return Err(format!("only {} of {want} bytes in time", got.len()));
        }
        let n = r.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("EOF after {} of {want} bytes", got.len()));
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(got)
}

#[test]
fn bytes_pass_through_exactly_and_a_partial_line_before_its_newline() {
    let tmp = Scratch::new("stdio-bytes");
    let file = tmp.join("cat.jsonl");
    let mut p = Proc::spawn(
        rpctap()
            .args(["stdio", "--record", file.to_str().unwrap(), "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut stdin = p.0.stdin.take().unwrap();
    let mut stdout = p.0.stdout.take().unwrap();
    let mut sent: Vec<u8> = Vec::new();
    let mut received: Vec<u8> = Vec::new();

    // A partial line comes out before its newline is written.
    let part = br#"{"jsonrpc":"2.0","id":1,"method":"tools/ca"#;
    stdin.write_all(part).unwrap();
    stdin.flush().unwrap();
    sent.extend_from_slice(part);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let first = read_exact_within(&mut stdout, part.len(), Duration::from_secs(10));
        tx.send(first).unwrap();
        let mut rest = Vec::new();
        stdout.read_to_end(&mut rest).unwrap();
        rest
    });
    let first = rx
        .recv_timeout(Duration::from_secs(15))
        .unwrap()
        .expect("the partial line was relayed before its newline");
    received.extend_from_slice(&first);

    // The rest: the line's end, a 4 MiB line, invalid UTF-8, CRLF, a blank line, a batch, and
    // a last line without a newline.
    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"data":"{}"}}}}"#,
        "x".repeat(4 << 20)
    );
    let mut rest: Vec<u8> = Vec::new();
    rest.extend_from_slice(b"ll\",\"params\":{\"name\":\"t\"}}\n");
    rest.extend_from_slice(big.as_bytes());
    rest.push(b'\n');
    rest.extend_from_slice(b"\xff\xfe not utf-8 \xc3\x28\n");
    rest.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\r\n\n");
    rest.extend_from_slice(
        br#"[{"jsonrpc":"2.0","id":3,"method":"a"},{"jsonrpc":"2.0","method":"b"}]"#,
    );
    rest.push(b'\n');
    rest.extend_from_slice(br#"{"jsonrpc":"2.0","id":4,"method":"last"}"#);
    for chunk in rest.chunks(7919) {
        stdin.write_all(chunk).unwrap();
    }
    sent.extend_from_slice(&rest);
    drop(stdin); // the client closes stdin: cat's stdin closes, cat exits
    let tail = reader.join().unwrap();
    received.extend_from_slice(&tail);
    let status = p.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(received.len(), sent.len());
    assert!(received == sent, "identical bytes on both sides");

    // Inspected on the way: both directions, the invalid line flagged each way, nothing else
    // (cat echoes each request back, so each looks like a server request too).
    let rec = rpctap::record::reader::read(&file).unwrap();
    let live = live_codes(&file);
    let codes: Vec<&String> = live.values().flatten().collect();
    assert_eq!(
        codes.iter().filter(|c| c.as_str() == "PARSE_ERROR").count(),
        2,
        "{live:?}"
    );
    let big_seen = rec
        .messages()
        .any(|m| m.method.as_deref() == Some("notifications/message") && m.message.len() > 4 << 20);
    assert!(big_seen, "the 4 MiB line was inspected whole");
    assert!(rec.messages().any(|m| m.method.as_deref() == Some("last")));
    assert_eq!(check_recording(&file).codes, live);
}

#[test]
fn exit_status_is_the_childs_and_a_signal_is_128_plus_n() {
    let code = |args: &[&str]| {
        rpctap()
            .arg("stdio")
            .arg("--")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap()
    };
    assert_eq!(code(&["sh", "-c", "exit 3"]).status.code(), Some(3));
    assert_eq!(code(&["true"]).status.code(), Some(0));
    assert_eq!(
        code(&["sh", "-c", "kill -TERM $$"]).status.code(),
        Some(143),
        "killed by SIGTERM: 128 + 15"
    );
    let missing = code(&["/nonexistent/server"]);
    assert_eq!(missing.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot run"));
    // The child's stderr passes through unchanged.
    let out = code(&["sh", "-c", "echo 'to stderr' >&2"]);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "to stderr\n");
}

#[test]
fn a_call_pending_when_the_child_exits_ends_missing_with_the_exit_status() {
    let tmp = Scratch::new("stdio-exit");
    let file = tmp.join("e.jsonl");
    let mut p = Proc::spawn(
        rpctap()
            .args(["stdio", "--record", file.to_str().unwrap(), "--"])
            .args(["sh", "-c", "read line; exit 5"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null()),
    );
    let mut stdin = p.0.stdin.take().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/list\"}\n")
        .unwrap();
    let status = p.0.wait().unwrap();
    assert_eq!(status.code(), Some(5));
    let rec = rpctap::record::reader::read(&file).unwrap();
    let calls: Vec<_> = rec.calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].outcome,
        rpctap::events::Outcome::Missing {
            reason: "the server exited with status 5".into()
        }
    );
    assert_eq!(
        live_codes(&file).values().flatten().collect::<Vec<_>>(),
        vec!["MISSING_RESPONSE"]
    );
    assert_eq!(check_recording(&file).codes, live_codes(&file));
}

/// A server→client request the client never answered, at a clean end of the session, names the
/// client as the side that left it, not the server's exit.
#[test]
fn a_server_request_the_client_left_unanswered_names_the_client() {
    let tmp = Scratch::new("stdio-unanswered");
    let file = tmp.join("u.jsonl");
    let mut p = Proc::spawn(
        rpctap()
            .args(["stdio", "--record", file.to_str().unwrap(), "--"])
            .args([
                "sh",
                "-c",
                r#"read l; echo '{"jsonrpc":"2.0","id":"r1","method":"roots/list"}'; echo '{"jsonrpc":"2.0","id":1,"result":{}}'; read l; exit 0"#,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut stdin = p.0.stdin.take().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n")
        .unwrap();
    let mut out = std::io::BufReader::new(p.0.stdout.take().unwrap());
    for _ in 0..2 {
        let mut l = String::new();
        std::io::BufRead::read_line(&mut out, &mut l).unwrap();
    }
    drop(stdin); // the client leaves without answering roots/list
    assert_eq!(p.0.wait().unwrap().code(), Some(0));
    let rec = rpctap::record::reader::read(&file).unwrap();
    let roots = rec.calls().find(|c| &*c.method == "roots/list").unwrap();
    match &roots.outcome {
        rpctap::events::Outcome::Missing { reason } => {
            assert!(
                reason.starts_with("the client never answered it"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    let list = rec.calls().find(|c| &*c.method == "tools/list").unwrap();
    assert_eq!(list.outcome, rpctap::events::Outcome::Result);
}

/// A child that reports the signals it gets on stderr and exits 7 on SIGTERM.
const TRAPPER: &str = r#"
import signal, sys, time
def on(sig, _):
    name = signal.Signals(sig).name
    print(name, file=sys.stderr, flush=True)
    if sig == signal.SIGTERM:
        sys.exit(7)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, on)
print("ready", file=sys.stderr, flush=True)
while True:
    time.sleep(0.05)
"#;

#[test]
fn sigint_sigterm_and_sighup_are_forwarded_to_the_child() {
    let mut p = Proc::spawn(
        rpctap()
            .args(["stdio", "--", "python3", "-c", TRAPPER])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let mut err = std::io::BufReader::new(p.0.stderr.take().unwrap());
    let mut line = String::new();
    let mut next = |line: &mut String| {
        line.clear();
        std::io::BufRead::read_line(&mut err, line).unwrap();
        line.trim().to_string()
    };
    assert_eq!(next(&mut line), "ready");
    signal(p.id(), "HUP");
    assert_eq!(next(&mut line), "SIGHUP");
    signal(p.id(), "INT");
    assert_eq!(next(&mut line), "SIGINT");
    signal(p.id(), "TERM");
    assert_eq!(next(&mut line), "SIGTERM");
    let status = p.0.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(7),
        "rpctap exits with the child's status"
    );
}

fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// Whether `pid` still runs (a zombie has exited).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn no_orphan_when_rpctap_is_killed_and_no_zombie_when_the_child_exits() {
    let mut p = Proc::spawn(
        rpctap()
            .args(["stdio", "--", "sleep", "1000"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null()),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let child = loop {
        if let Some(c) = children_of(p.id()).first() {
            break *c;
        }
        assert!(Instant::now() < deadline, "the child did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(running(child));
    // SIGKILL: rpctap cannot forward anything; the kernel's parent-death signal stops the child.
    signal(p.id(), "KILL");
    let _ = p.0.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    while running(child) {
        assert!(
            Instant::now() < deadline,
            "the child {child} outlived rpctap (orphaned)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // A child that exits while rpctap runs is reaped: rpctap reports its status, and it is
    // not left as a zombie.
    let mut p = Proc::spawn(
        rpctap()
            .args(["stdio", "--", "sh", "-c", "sleep 0.2; exit 4"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null()),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let child = loop {
        if let Some(c) = children_of(p.id()).first() {
            break *c;
        }
        assert!(Instant::now() < deadline, "the child did not start");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(p.0.wait().unwrap().code(), Some(4));
    assert!(!running(child));
    assert!(
        !Path::new(&format!("/proc/{child}")).exists()
            || !std::fs::read_to_string(format!("/proc/{child}/stat"))
                .unwrap_or_default()
                .contains(&format!(" {} ", p.id())),
        "no zombie child of rpctap"
    );
}

#[test]
fn rate_limits_refuse_a_call_on_stdio_with_an_error_line_to_the_client() {
    let tmp = Scratch::new("stdio-limit");
    let file = tmp.join("l.jsonl");
    let mut p = Proc::spawn(
        rpctap()
            .args([
                "stdio",
                "--limit",
                "tools/call=1/m",
                "--record",
                file.to_str().unwrap(),
                "--",
                "cat",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut stdin = p.0.stdin.take().unwrap();
    let call = |id: u32| {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"t\"}}}}\n"
        )
    };
    stdin.write_all(call(1).as_bytes()).unwrap();
    stdin.write_all(call(2).as_bytes()).unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n")
        .unwrap();
    drop(stdin);
    let mut out = String::new();
    p.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert_eq!(p.0.wait().unwrap().code(), Some(0));
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // cat echoes what reached it: call 1 and the ping; call 2 was answered by rpctap.
    assert_eq!(lines.len(), 3, "{out}");
    let refusal = lines.iter().find(|l| l["id"] == 2).unwrap();
    assert_eq!(refusal["error"]["code"], -32001);
    assert_eq!(refusal["error"]["data"]["limit"], "tools/call=1/m");
    assert!(lines
        .iter()
        .any(|l| l["id"] == 1 && l["method"] == "tools/call"));
    assert!(lines.iter().any(|l| l["id"] == 3 && l["method"] == "ping"));
    let rec = rpctap::record::reader::read(&file).unwrap();
    assert!(rec.calls().any(|c| c.id.to_json_text() == "2"
        && matches!(c.outcome, rpctap::events::Outcome::Refused { .. })));
}

#[test]
fn the_log_never_touches_stdout() {
    let tmp = Scratch::new("stdio-log");
    let log = tmp.join("log.txt");
    let out = rpctap()
        .args([
            "stdio",
            "--log",
            "json",
            "--log-file",
            log.to_str().unwrap(),
            "--",
        ])
        .args([
            "sh",
            "-c",
            "read l; echo '{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}'",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin
                .take()
                .unwrap()
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n",
        "stdout holds the server's bytes only"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("\"event\":\"call\""), "{text}");
    assert!(text.contains("\"outcome\":\"result\""), "{text}");
}

#[test]
fn the_feed_and_recent_calls_on_a_unix_socket_and_the_export_of_a_stdio_recording() {
    let tmp = Scratch::new("stdio-unix");
    let sock = tmp.join("admin.sock");
    let file = tmp.join("u.jsonl");
    let mut p = Proc::spawn(
        rpctap()
            .args(["stdio", "--record", file.to_str().unwrap()])
            .arg("--admin")
            .arg(format!("unix:{}", sock.display()))
            .arg("--")
            .args([
                "sh",
                "-c",
                r#"read l; echo '{"jsonrpc":"2.0","id":"a","result":{"n":1}}'; read l"#,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let mut stdin = p.0.stdin.take().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/list\"}\n")
        .unwrap();
    let mut reply = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(p.0.stdout.take().unwrap()),
        &mut reply,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the socket is the owner's only");
    let calls = Command::new("curl")
        .args([
            "-s",
            "--unix-socket",
            sock.to_str().unwrap(),
            "http://rpctap/calls",
        ])
        .output()
        .unwrap();
    let calls: serde_json::Value = serde_json::from_slice(&calls.stdout).unwrap();
    assert_eq!(calls[0]["method"], "tools/list");
    assert_eq!(calls[0]["id"], "a");
    assert_eq!(calls[0]["outcome"], "result");
    let ready = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--unix-socket",
            sock.to_str().unwrap(),
            "http://rpctap/readyz",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ready.stdout),
        "200",
        "ready while the child runs"
    );
    // A second rpctap on the same socket while the first is live: refused, naming it; the
    // first still answers.
    let second = rpctap()
        .args(["stdio", "--admin"])
        .arg(format!("unix:{}", sock.display()))
        .args(["--", "cat"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(
        err.contains(sock.to_str().unwrap()) && err.contains("another rpctap"),
        "{err}"
    );
    let again = Command::new("curl")
        .args([
            "-s",
            "--unix-socket",
            sock.to_str().unwrap(),
            "http://rpctap/readyz",
        ])
        .output()
        .unwrap();
    assert!(again.status.success(), "the first is still reachable");
    stdin.write_all(b"\n").unwrap();
    drop(stdin);
    assert_eq!(p.0.wait().unwrap().code(), Some(0));
    assert!(!sock.exists(), "its socket goes with it");
    // A socket file whose process is gone is replaced.
    let dead = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    drop(dead);
    let o = rpctap()
        .args(["stdio", "--admin"])
        .arg(format!("unix:{}", sock.display()))
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!sock.exists());

    // The recording exports as exchange documents that `check` passes.
    let docs = rpctap()
        .args(["export", file.to_str().unwrap(), "--format", "exchange"])
        .output()
        .unwrap();
    assert!(docs.status.success());
    let doc: serde_json::Value =
        serde_json::from_slice(docs.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(doc["request"][0]["method"], "tools/list");
    assert_eq!(doc["response"][0]["result"]["n"], 1);
    let mut check = rpctap()
        .args(["check", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(&docs.stdout).unwrap();
    let out = check.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // As HAR: one entry per call, the request line and the reply line.
    let har = rpctap()
        .args(["export", file.to_str().unwrap(), "--format", "har"])
        .output()
        .unwrap();
    assert!(har.status.success());
    let har: serde_json::Value = serde_json::from_slice(&har.stdout).unwrap();
    let entries = har["log"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{har:#}");
    let e = &entries[0];
    assert_eq!(e["request"]["url"], "stdio://sh/tools/list");
    let sent: serde_json::Value =
        serde_json::from_str(e["request"]["postData"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(sent["method"], "tools/list");
    let got: serde_json::Value =
        serde_json::from_str(e["response"]["content"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(got["result"]["n"], 1);
    assert_eq!(e["response"]["status"], 200);
    assert_eq!(e["_rpctap"]["transport"], "stdio");
    assert_eq!(e["_rpctap"]["outcome"], "result");
}

/// A wrapped `cat` echoes the client's `initialize` back: a server that sends a request only a
/// client may send is flagged (`MCP_DIRECTION`, an error), live and in `check` (issue 62.18).
#[test]
fn a_server_that_sends_the_clients_initialize_is_flagged() {
    let tmp = Scratch::new("stdio-direction");
    let file = tmp.join("echo.jsonl");
    let mut p = Proc::spawn(
        rpctap()
            .args(["stdio", "--record", file.to_str().unwrap(), "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null()),
    );
    let mut stdin = p.0.stdin.take().unwrap();
    stdin
        .write_all(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#)
        .unwrap();
    stdin.write_all(b"\n").unwrap();
    drop(stdin);
    assert_eq!(p.0.wait().unwrap().code(), Some(0));
    let live = live_codes(&file);
    let codes: Vec<&String> = live.values().flatten().collect();
    assert!(
        codes.iter().any(|c| c.as_str() == "MCP_DIRECTION"),
        "{live:?}"
    );
    assert_eq!(check_recording(&file).codes, live);
    let out = rpctap()
        .args(["check", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A call its client cancels (`notifications/cancelled`) and the Python SDK 2.x's FastMCP
/// server therefore never answers, as MCP's cancellation says it should not: the call ends
/// `cancelled`, nothing is flagged, and `check` passes the session (issue 62.2).
#[test]
fn a_cancelled_call_the_server_rightly_leaves_unanswered_is_no_failure() {
    let tmp = Scratch::new("stdio-cancelled");
    let file = tmp.join("cancelled.jsonl");
    let py2 = installed("mcp2", &["mcp>=2,<3"]).join("bin/python");
    let mut p = LineProc::spawn(
        rpctap()
            .args(["stdio", "--record", file.to_str().unwrap(), "--"])
            .arg(py2)
            .args([script("mcp2_server.py"), "stdio".into()])
            // Its own state: a tool baseline another run left under HOME is not this test's.
            .env("RPCTAP_HOME", tmp.join("state")),
    );
    p.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    p.reply(1);
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    p.send(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"seconds":30}}}"#,
    );
    std::thread::sleep(Duration::from_millis(300));
    p.send(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"the user gave up"}}"#,
    );
    // A call after the cancel is answered: the server is well.
    p.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#);
    let line = p.line();
    assert!(
        line.contains("\"id\":3"),
        "the cancelled call got no reply first: {line}"
    );
    p.rest();
    let _ = p.proc.0.wait();
    let rec = rpctap::record::reader::read(&file).unwrap();
    let call2 = rec
        .calls()
        .find(|c| c.id.to_string() == "2")
        .expect("call 2 ended");
    assert!(
        matches!(call2.outcome, rpctap::events::Outcome::Cancelled { .. }),
        "{:?}",
        call2.outcome
    );
    let live = live_codes(&file);
    assert!(
        !live.values().flatten().any(|c| c == "MISSING_RESPONSE"),
        "{live:?}"
    );
    assert_eq!(check_recording(&file).codes, live);
    let out = rpctap()
        .args(["check", file.to_str().unwrap()])
        .env("RPCTAP_HOME", tmp.join("state"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Lines larger than the inspection cap, both ways, with the Python SDK 2.x server: a call whose
/// argument is too large to inspect is still counted and answered, a reply too large to inspect
/// still ends its call (read from the line's envelope as it passes), so nothing ends missing or
/// unmatched — live and in `check` — and the bytes reach each side whole.
#[test]
fn lines_beyond_the_inspection_cap_still_count_and_end_their_calls() {
    let tmp = Scratch::new("stdio-large");
    let file = tmp.join("large.jsonl");
    let py2 = installed("mcp2", &["mcp>=2,<3"]).join("bin/python");
    let mut p = Proc::spawn(
        rpctap()
            .args(["stdio", "--max-frame-bytes", "64KiB", "--record"])
            .arg(&file)
            .arg("--")
            .arg(py2)
            .args([script("mcp2_server.py"), "stdio".into()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut stdin = p.0.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(p.0.stdout.take().unwrap());
    let mut call = |line: &str| -> String {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        if !line.contains("\"id\"") {
            return String::new();
        }
        let mut reply = String::new();
        std::io::BufRead::read_line(&mut out, &mut reply).unwrap();
        reply
    };
    call(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    call(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // A 1 MiB result (16 times the cap).
    let big = call(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"abcdefgh","times":131072}}}"#,
    );
    let v: serde_json::Value = serde_json::from_str(&big).unwrap();
    assert_eq!(v["id"], 2);
    assert_eq!(
        v["result"]["content"][0]["text"].as_str().unwrap().len(),
        1 << 20
    );
    // A 512 KiB argument.
    let arg = "x".repeat(512 << 10);
    let echoed = call(&format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{arg}"}}}}}}"#
    ));
    let v: serde_json::Value = serde_json::from_str(&echoed).unwrap();
    assert_eq!(v["id"], 3);
    // An unknown tool named by a 100 KiB name: the tool's failure, in a result too large to
    // inspect (so no `TOOL_ERROR` can be read from it).
    let name = "n".repeat(100 << 10);
    let refused = call(&format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"{name}","arguments":{{}}}}}}"#
    ));
    assert!(refused.contains("\"id\":4"), "{}", &refused[..200]);
    call(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#);
    drop(stdin);
    let _ = p.0.wait();
    let rec = rpctap::record::reader::read(&file).unwrap();
    let mut ended: Vec<(String, String, String)> = rec
        .calls()
        .map(|c| {
            let outcome = match &c.outcome {
                rpctap::events::Outcome::Result => "result".to_string(),
                rpctap::events::Outcome::Error { .. } => "error".to_string(),
                o => format!("{o:?}"),
            };
            (c.id.to_string(), c.method.to_string(), outcome)
        })
        .collect();
    ended.sort();
    assert_eq!(
        ended,
        [
            ("1", "initialize", "result"),
            ("2", "tools/call", "result"),
            ("3", "tools/call", "result"),
            ("4", "tools/call", "result"),
            ("5", "ping", "result"),
        ]
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    );
    let live = live_codes(&file);
    let mut codes: Vec<&String> = live.values().flatten().collect();
    codes.sort();
    codes.dedup();
    assert_eq!(codes, ["NOT_INSPECTED"], "{live:?}");
    assert_eq!(check_recording(&file).codes, live);
}

/// Whatever the server could execute, rpctap has decided (issue 61's rule, over stdio): a line
/// too large to inspect is not passed on while a rule is in force — its call is answered with
/// an error and recorded as refused, so a `--deny`ed tool or a rate limit cannot be slipped past
/// in a padded line. Without rules such a line passes on as it comes.
#[test]
fn a_line_too_large_to_decide_is_refused_while_a_rule_is_in_force() {
    let tmp = Scratch::new("stdio-too-large");
    let pad = "x".repeat(4096);
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"run_shell","arguments":{{"pad":"{pad}"}}}}}}"#
    );
    let ping = r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#;
    for rules in [true, false] {
        let file = tmp.join(format!("rules-{rules}.jsonl"));
        let mut cmd = rpctap();
        cmd.args(["stdio", "--no-hub", "--max-frame-bytes", "1KiB", "--record"])
            .arg(&file);
        if rules {
            cmd.args(["--deny", "tool=run_*"]);
        }
        let mut p = LineProc::spawn(cmd.args(["--", "cat"]));
        p.send(&big);
        p.send(ping);
        let out = p.rest();
        assert_eq!(p.proc.0.wait().unwrap().code(), Some(0));
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ids: Vec<i64> = lines.iter().map(|l| l["id"].as_i64().unwrap()).collect();
        if rules {
            // rpctap's error for 7 (cat never saw it), then cat's echo of the ping.
            assert_eq!(ids, [7, 8], "{out}");
            assert_eq!(lines[0]["error"]["code"], -32005, "{out}");
            assert!(
                lines[0]["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("--max-frame-bytes"),
                "{out}"
            );
            assert_eq!(lines[1]["method"], "ping", "{out}");
        } else {
            // Both echoed by cat: the big line passed on, uninspected.
            assert_eq!(ids, [7, 8], "{out}");
            assert_eq!(lines[0]["method"], "tools/call", "{out}");
        }
        let rec = rpctap::record::reader::read(&file).unwrap();
        let call7 = rec
            .calls()
            .find(|c| c.id.to_string() == "7")
            .expect("call 7 counted");
        if rules {
            assert!(
                matches!(&call7.outcome, rpctap::events::Outcome::Refused { rule } if rule == "max-frame-bytes"),
                "{:?}",
                call7.outcome
            );
        }
        let live = live_codes(&file);
        assert!(
            live.values().flatten().any(|c| c == "NOT_INSPECTED"),
            "{live:?}"
        );
        assert_eq!(check_recording(&file).codes, live);
    }
}
