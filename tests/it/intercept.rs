//! The dashboard's intercept, in a real terminal (tmux): `rpctap proxy` in front of the Python
//! SDK 2.x server, the SDK 2.x client calling through it, and the keys a user presses. A held
//! call edited in `$EDITOR` (a sed script here) reaches the server as edited; a dropped one
//! leaves the client to its timeout; one nobody decides forwards itself after
//! `--intercept-timeout`; one answered takes the earlier answer; a held reply edited reaches the
//! client as edited. Each verdict is in the recording as injected, and `check` blames the server
//! for none of them.

use crate::common::*;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn sdk() -> PathBuf {
    installed("mcp2", &["mcp>=2,<3"])
}

fn text(r: &Value) -> &str {
    r["result"]["content"][0]["text"].as_str().unwrap_or("")
}

/// Types `keys` into the dashboard, then Enter.
fn type_line(t: &Tmux, keys: &str) {
    t.cmd(&["send-keys", "-t", "t", "-l", keys]);
    t.cmd(&["send-keys", "-t", "t", "Enter"]);
}

/// Waits for a held message whose line holds every one of `parts`.
fn held_line(t: &Tmux, parts: &[&str]) -> String {
    let mut want = vec!["⏸ #"];
    want.extend_from_slice(parts);
    let screen = t.wait_for_line(&want, Duration::from_secs(20));
    let line = screen
        .lines()
        .find(|l| want.iter().all(|p| l.contains(p)))
        .unwrap_or_else(|| panic!("nothing held with {parts:?}:\n{screen}"))
        .to_string();
    assert!(line.contains("forwards itself in"), "the timer: {line}");
    line
}

/// `$EDITOR` as a sed script in `work` running `exprs` on the file it is given; the tmux shell's
/// environment for it.
fn sed_editor(work: &Scratch, exprs: &[&str]) -> String {
    let editor = work.join("edit.sh");
    let args: Vec<String> = exprs.iter().map(|e| format!("-e '{e}'")).collect();
    std::fs::write(
        &editor,
        format!("#!/bin/sh\nsed -i {} \"$1\"\n", args.join(" ")),
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    format!("EDITOR={}", editor.display())
}

/// `rpctap proxy` with its dashboard in tmux session `name` (with `editor_env`), in front of
/// port `upstream`, recording into `file`; returns the terminal and the proxy's port.
fn dashboard_proxy(
    name: &str,
    editor_env: &str,
    upstream: u16,
    file: &std::path::Path,
    extra: &str,
) -> (Tmux, u16) {
    assert!(
        Command::new("tmux").arg("-V").output().is_ok(),
        "tmux is not installed: run `bash scripts/peers.sh`"
    );
    let listen = free_port();
    let t = Tmux::shell(name, 200, 50, &["-u", "VISUAL", editor_env]);
    let bin = env!("CARGO_BIN_EXE_rpctap");
    type_line(
        &t,
        &format!(
            "{bin} proxy --listen 127.0.0.1:{listen} --upstream http://127.0.0.1:{upstream} --record {} {extra}",
            file.display()
        ),
    );
    t.wait_for(&format!("127.0.0.1:{listen}"), Duration::from_secs(10));
    (t, listen)
}

/// `I`, the old filter erased, `filter` typed and applied.
fn set_intercept(t: &Tmux, filter: &str) {
    t.cmd(&["send-keys", "-t", "t", "I"]);
    t.wait_for("Enter apply", Duration::from_secs(5));
    for _ in 0..40 {
        t.cmd(&["send-keys", "-t", "t", "BSpace"]);
    }
    type_line(t, filter);
    t.wait_for(&format!("┌ intercept: {filter}"), Duration::from_secs(5));
}

/// The intercept's verdicts in the recording, in order.
fn intercepted(file: &std::path::Path) -> Vec<String> {
    let rec = rpctap::record::reader::read(file).unwrap();
    rec.events
        .iter()
        .filter_map(|e| match e {
            rpctap::events::Event::Fault(f) if &*f.injected == "intercept" => {
                Some(f.action.to_string())
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_calls_are_edited_dropped_left_to_time_out_and_answered_from_the_dashboard() {
    let port = free_port();
    let server = Proc::spawn(
        Command::new(sdk().join("bin/python"))
            .arg(root().join("tests/interop/mcp2_server.py"))
            .args(["sse", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_listening(([127, 0, 0, 1], port).into()).await;
    let work = Scratch::new("intercept");
    let file = work.join("held.jsonl");
    // The editor: a sed script, as `$EDITOR` is given (the file's name after it).
    let editor = sed_editor(
        &work,
        &[
            r#"s/"a": 2,/"a": 20,/"#,
            r#"s/"text": "101"/"text": "edited on the way back"/"#,
        ],
    );
    let (t, listen) = dashboard_proxy("intercept", &editor, port, &file, "--intercept-timeout 5s");
    // `I`: the intercept's filter, the filter language: calls to `add` on their way in.
    set_intercept(&t, "tools/call tool:add dir:c2s");
    assert!(
        t.screen().contains("intercept on"),
        "the status says so:\n{}",
        t.screen()
    );

    let url = format!("http://127.0.0.1:{listen}/mcp");
    let client = Command::new(sdk().join("bin/python"))
        .arg(root().join("tests/interop/fault_client.py"))
        .args([
            &url,
            "auto",
            "8",
            r#"add:{"a":2,"b":3}"#,
            r#"add:{"a":7,"b":7}"#,
            r#"add:{"a":1,"b":1}"#,
            r#"add:{"a":100,"b":1}"#,
            r#"add:{"a":100,"b":1}"#,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // 1: held, edited (`E` runs the sed script) and forwarded: the server adds 20 and 3.
    held_line(&t, &["→ tools/call add"]);
    t.cmd(&["send-keys", "-t", "t", "E"]);
    t.wait_for("#1 forwarded as edited", Duration::from_secs(10));
    // 2: held and dropped: the client's 8 s timeout decides.
    let line = held_line(&t, &["→ tools/call add"]);
    assert!(!line.contains("#1 "), "the next one: {line}");
    t.cmd(&["send-keys", "-t", "t", "D"]);
    t.wait_for("#2 dropped", Duration::from_secs(5));
    // 3: held, nobody decides: it forwards itself after 5 s.
    let third = held_line(&t, &["→ tools/call add"]);
    let n3: String = third
        .split("⏸ #")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    t.wait_for_gone(&format!("⏸ #{n3} "), Duration::from_secs(12));
    // 4: held; the filter changed meanwhile to replies (what is held stays held), then
    // answered (`A`): the template is the earlier answer to `add` (call 3's "2"), its id this
    // call's; the server never sees it (it would say 101).
    held_line(&t, &["→ tools/call add"]);
    set_intercept(&t, "tool:add dir:s2c");
    held_line(&t, &["→ tools/call add"]);
    t.cmd(&["send-keys", "-t", "t", "A"]);
    t.wait_for("#4 answered", Duration::from_secs(10));
    // 5: the server's answer (101) held and edited on its way back.
    held_line(&t, &["← tools/call add"]);
    t.cmd(&["send-keys", "-t", "t", "E"]);
    t.wait_for("#5 forwarded as edited", Duration::from_secs(10));

    let out = client.wait_with_output().unwrap();
    let r: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the client's report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(r.len(), 5, "{r:#?}");
    assert_eq!(
        text(&r[0]),
        "23",
        "the server got the edited arguments: {:?}",
        r[0]
    );
    assert!(
        r[1]["message"].as_str().unwrap_or("").contains("timed out"),
        "dropped: the client's timeout: {:?}",
        r[1]
    );
    assert_eq!(text(&r[2]), "2", "{:?}", r[2]);
    let waited = r[2]["elapsed"].as_f64().unwrap();
    assert!(waited >= 4.5, "forwarded itself after 5 s: {:?}", r[2]);
    assert_eq!(
        text(&r[3]),
        "2",
        "answered from the earlier answer: {:?}",
        r[3]
    );
    assert_eq!(
        text(&r[4]),
        "edited on the way back",
        "the held reply, edited: {:?}",
        r[4]
    );

    // `q`: the dashboard goes; nothing stays held.
    t.cmd(&["send-keys", "-t", "t", "q"]);
    t.wait_for("READY$", Duration::from_secs(10));
    drop(server);

    assert_eq!(
        intercepted(&file),
        ["edit", "drop", "timeout", "answer", "edit"]
    );
    let rec = rpctap::record::reader::read(&file).unwrap();
    let held: Vec<(String, Option<String>)> = rec
        .events
        .iter()
        .filter_map(|e| match e {
            rpctap::events::Event::Fault(f) => Some((
                f.injected.to_string(),
                f.message
                    .as_ref()
                    .map(|m| String::from_utf8_lossy(m).into_owned()),
            )),
            _ => None,
        })
        .collect();
    assert!(held.iter().all(|h| h.0 == "intercept"), "{held:#?}");
    assert!(
        held[0].1.as_deref().unwrap_or("").contains("\"a\":20"),
        "the edit is on the record: {held:#?}"
    );
    let c = check_recording(&file);
    assert_eq!(c.exit, Some(0), "{}", c.stdout);
    assert!(c.stdout.contains("intercept"), "{}", c.stdout);
}

/// Over WebSocket a held message waits alone, as over HTTP and stdio: the call sent after it is
/// answered while it is held, and it goes on when forwarded (uncompressed, the stream compressed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_websocket_the_calls_after_a_held_one_pass_it() {
    use std::io::BufRead;
    let (_server, port, env) = ws_peer_server().await;
    let work = Scratch::new("intercept-ws-pass");
    let file = work.join("ws.jsonl");
    let editor = sed_editor(&work, &[]);
    let (t, listen) = dashboard_proxy("intercept-ws-pass", &editor, port, &file, "");
    set_intercept(&t, "method:echo dir:c2s");
    let mut client = Command::new(env.join("bin/python"))
        .arg(root().join("tests/interop/ws_peer.py"))
        .args(["held_passed", &format!("ws://127.0.0.1:{listen}/")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(client.stdout.take().unwrap());
    held_line(&t, &["→ echo", "id 1"]);
    // Answered while echo is held (before the hold is released: no key pressed yet).
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let first: Value = serde_json::from_str(&first)
        .unwrap_or_else(|e| panic!("the client's first reply ({e}): {first:?}"));
    assert_eq!(first["id"], 2, "{first}");
    assert_eq!(first["result"], 3, "{first}");
    t.cmd(&["send-keys", "-t", "t", "F"]);
    t.wait_for("#1 forwarded", Duration::from_secs(10));
    let mut second = String::new();
    out.read_line(&mut second).unwrap();
    let second: Value = serde_json::from_str(&second).unwrap();
    assert_eq!(second["id"], 1, "{second}");
    assert_eq!(second["result"], serde_json::json!(["x"]), "{second}");
    let _ = client.wait();
    t.cmd(&["send-keys", "-t", "t", "q"]);
    t.wait_for("READY$", Duration::from_secs(10));
    assert_eq!(intercepted(&file), ["forward"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_websocket_a_held_message_is_edited_dropped_forwarded_and_answered() {
    let (_server, port, env) = ws_peer_server().await;
    let work = Scratch::new("intercept-ws");
    let file = work.join("ws.jsonl");
    let editor = sed_editor(&work, &[r#"s/"a": 2,/"a": 20,/"#, r#"s/"x"/"edited"/"#]);
    let (t, listen) = dashboard_proxy("intercept-ws", &editor, port, &file, "");
    set_intercept(&t, "dir:c2s");
    // Compressed (permessage-deflate with context takeover): an edited, dropped or answered
    // message makes rpctap re-send the rest uncompressed.
    let client = Command::new(env.join("bin/python"))
        .arg(root().join("tests/interop/ws_peer.py"))
        .args(["intercepted", &format!("ws://127.0.0.1:{listen}/")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    held_line(&t, &["→ echo", "id 1"]);
    t.cmd(&["send-keys", "-t", "t", "E"]);
    t.wait_for("#1 forwarded as edited", Duration::from_secs(10));
    held_line(&t, &["→ echo", "id 2"]);
    t.cmd(&["send-keys", "-t", "t", "D"]);
    t.wait_for("#2 dropped", Duration::from_secs(5));
    held_line(&t, &["→ add", "id 3"]);
    t.cmd(&["send-keys", "-t", "t", "F"]);
    t.wait_for("#3 forwarded", Duration::from_secs(5));
    held_line(&t, &["→ add", "id 4"]);
    t.cmd(&["send-keys", "-t", "t", "A"]);
    t.wait_for("#4 answered", Duration::from_secs(10));
    held_line(&t, &["→ stats", "id 5"]);
    t.cmd(&["send-keys", "-t", "t", "F"]);
    // The server's messages too: the filter changed to echo's reply while its call is held.
    held_line(&t, &["→ echo", "id 6"]);
    set_intercept(&t, "method:echo dir:s2c");
    t.cmd(&["send-keys", "-t", "t", "F"]);
    t.wait_for("#6 forwarded", Duration::from_secs(5));
    held_line(&t, &["← echo", "id 6"]);
    t.cmd(&["send-keys", "-t", "t", "E"]);
    t.wait_for("#7 forwarded as edited", Duration::from_secs(10));
    let out = client.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the client's report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(
        v["echo"]["result"],
        serde_json::json!({"a": 20, "b": 3}),
        "{v}"
    );
    assert_eq!(v["echo2"], "timeout", "{v}");
    assert_eq!(v["add"]["result"], 2, "{v}");
    assert_eq!(
        v["add2"]["result"], 2,
        "answered with the earlier answer: {v}"
    );
    assert_eq!(v["add2"]["id"], 4, "{v}");
    assert_eq!(
        v["stats"]["result"]["add"], 1,
        "only the forwarded add reached the server: {v}"
    );
    t.cmd(&["send-keys", "-t", "t", "q"]);
    t.wait_for("READY$", Duration::from_secs(10));
    assert_eq!(
        v["echo3"]["result"],
        serde_json::json!(["edited"]),
        "the server's reply, edited on its way: {v}"
    );
    assert_eq!(
        intercepted(&file),
        ["edit", "drop", "forward", "answer", "forward", "forward", "edit"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_session_under_its_own_dashboard_is_intercepted_the_same_way() {
    let node = installed("node", NODE_PACKAGES);
    let everything =
        node.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let script = node.join("ts_stdio_calls.mjs");
    std::fs::copy(root().join("tests/interop/ts_stdio_calls.mjs"), &script).unwrap();
    let work = Scratch::new("intercept-stdio");
    let file = work.join("stdio.jsonl");
    let report = work.join("report.json");
    let editor_env = sed_editor(
        &work,
        &[
            r#"s/"message": "hi"/"message": "edited"/"#,
            r#"s/is 5\./is five, edited./"#,
        ],
    );
    let t = Tmux::shell("intercept-stdio", 200, 50, &["-u", "VISUAL", &editor_env]);
    let calls = serde_json::json!([
        r#"echo:{"message":"hi"}"#,
        r#"echo:{"message":"lost"}"#,
        r#"echo:{"message":"late"}"#,
        r#"echo:{"message":"answered"}"#,
        r#"get-sum:{"a":2,"b":3}"#,
    ])
    .to_string();
    let bin = env!("CARGO_BIN_EXE_rpctap");
    // The client runs in the terminal (its report and stderr to files); rpctap, its child, draws
    // its dashboard on the same terminal.
    type_line(
        &t,
        &format!(
            "node {} 6000 '{calls}' {bin} stdio --dashboard --intercept 'tool:echo dir:c2s' --intercept-timeout 4s --no-hub --record {} -- node {} stdio > {} 2> {}",
            script.display(),
            file.display(),
            everything.display(),
            report.display(),
            work.join("stderr.txt").display(),
        ),
    );
    // `--intercept`: holding from the first message (the client calls at once).
    t.wait_for("┌ intercept: tool:echo dir:c2s", Duration::from_secs(20));
    held_line(&t, &["→ tools/call echo"]);
    t.cmd(&["send-keys", "-t", "t", "E"]);
    t.wait_for("#1 forwarded as edited", Duration::from_secs(10));
    held_line(&t, &["→ tools/call echo"]);
    t.cmd(&["send-keys", "-t", "t", "D"]);
    t.wait_for("#2 dropped", Duration::from_secs(5));
    let third = held_line(&t, &["→ tools/call echo"]);
    assert!(third.contains("#3 "), "{third}");
    t.wait_for_gone("⏸ #3 ", Duration::from_secs(10));
    held_line(&t, &["→ tools/call echo"]);
    // The filter changed to replies while the fourth is held, then it is answered.
    set_intercept(&t, "tool:get-sum dir:s2c");
    t.cmd(&["send-keys", "-t", "t", "A"]);
    t.wait_for("#4 answered", Duration::from_secs(10));
    held_line(&t, &["← tools/call get-sum"]);
    t.cmd(&["send-keys", "-t", "t", "E"]);
    t.wait_for("#5 forwarded as edited", Duration::from_secs(10));
    // The session ends with the client; the shell's prompt comes back, the terminal restored.
    let screen = t.wait_for("READY$", Duration::from_secs(20));
    assert!(!screen.contains("⏸"), "the dashboard is gone:\n{screen}");
    // rpctap is the client's child: the prompt comes back when the client exits, and the
    // recording is whole once rpctap too has ended (its writer drains at exit).
    let recording = file.display().to_string();
    assert!(
        eventually(Duration::from_secs(15), || !a_process_names(&recording)),
        "rpctap still running after its client"
    );
    let r: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&report).unwrap_or_default())
        .unwrap_or_else(|e| {
            panic!(
                "the client's report ({e}): {}",
                std::fs::read_to_string(work.join("stderr.txt")).unwrap_or_default()
            )
        });
    assert_eq!(r.len(), 5, "{r:#?}");
    assert_eq!(r[0]["text"], "Echo: edited", "{:?}", r[0]);
    assert!(
        r[1]["error"].as_str().unwrap_or("").contains("timed out"),
        "dropped: the client's timeout: {:?}",
        r[1]
    );
    assert_eq!(r[2]["text"], "Echo: late", "{:?}", r[2]);
    assert!(r[2]["elapsed"].as_f64().unwrap() >= 3.5, "{:?}", r[2]);
    assert_eq!(r[3]["text"], "Echo: late", "the earlier answer: {:?}", r[3]);
    assert!(
        r[4]["text"]
            .as_str()
            .unwrap_or("")
            .contains("is five, edited."),
        "{:?}",
        r[4]
    );
    assert_eq!(
        intercepted(&file),
        ["edit", "drop", "timeout", "answer", "edit"]
    );
    let c = check_recording(&file);
    assert_eq!(c.exit, Some(0), "{}", c.stdout);
}
