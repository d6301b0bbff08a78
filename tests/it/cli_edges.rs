//! The binary at the edges a new user hits first: nothing to check or replay, a server that is
//! down, a target typed with the recorded path, an existing recording, flags that mean nothing.

use crate::common::*;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rpctap");
const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/recordings/demo.jsonl");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// Runs the binary with `input` on its stdin.
fn run_with_stdin(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn scratch(name: &str) -> Scratch {
    Scratch::new(&format!("edges-{name}"))
}

#[test]
fn nothing_to_check_or_replay_is_exit_2_saying_so() {
    let d = scratch("empty");
    let empty = d.join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let o = run(&["check", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no calls"), "{}", stderr(&o));
    // A recording with a header and no calls.
    let rec = d.join("none.jsonl");
    std::fs::write(&rec, "{\"rpctap_recording\":1,\"part\":0}\n").unwrap();
    for cmd in [
        vec!["check", rec.to_str().unwrap()],
        vec![
            "replay",
            rec.to_str().unwrap(),
            "--target",
            "http://127.0.0.1:9",
        ],
    ] {
        let o = run(&cmd);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}");
        assert!(stderr(&o).contains("no calls"), "{cmd:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{cmd:?}");
    }
}

#[test]
fn replay_against_a_server_that_is_down_is_exit_2_in_one_line() {
    let port = free_port();
    let o = run(&[
        "replay",
        DEMO,
        "--target",
        &format!("http://127.0.0.1:{port}"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot reach the target"), "{err}");
    assert!(o.stdout.is_empty(), "no per-call verdicts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_target_with_the_recorded_path_is_not_doubled() {
    let (addr, _stop) = start_demo().await;
    let target = format!("http://{addr}/jsonrpc");
    let o = tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .args(["replay", DEMO, "--target", &target])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    // The demo recording's /jsonrpc calls reach /jsonrpc (not /jsonrpc/jsonrpc, a 404 each).
    assert!(
        out.lines()
            .any(|l| l.contains("subtract") && l.starts_with("ok ")),
        "{out}"
    );
}

#[test]
fn an_existing_recording_is_never_overwritten_by_accident() {
    let d = scratch("exists");
    let f = d.join("r.jsonl");
    std::fs::write(&f, "keep me\n").unwrap();
    let o = run(&[
        "proxy",
        "--no-tui",
        "--listen",
        ":0",
        "--upstream",
        "http://127.0.0.1:9",
        "--record",
        f.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--record-append"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "keep me\n");
}

#[test]
fn meaningless_flags_are_refused_naming_the_flag() {
    for (flag, value) in [
        ("--limit", "=1/min"),
        ("--redact-header", "bad header"),
        ("--redact-path", "params..x"),
        ("--listen", "nowhere"),
        ("--call-timeout", "0"),
    ] {
        let o = run(&[
            "proxy",
            "--no-tui",
            "--upstream",
            "http://127.0.0.1:9",
            flag,
            value,
        ]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        assert!(stderr(&o).contains(flag), "{flag}: {}", stderr(&o));
    }
}

#[test]
fn demo_on_a_busy_port_fails_without_announcing_itself() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let o = Command::new(BIN)
        .args(["demo", "--no-tui", "--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("cannot listen on"), "{err}");
    assert!(
        !err.contains("Press Ctrl-C"),
        "no banner before the bind: {err}"
    );
}

#[test]
fn headless_proxy_says_where_it_listens_before_any_call() {
    use std::io::{BufRead, BufReader};
    let port = free_port();
    let mut child = Command::new(BIN)
        .args([
            "proxy",
            "--no-tui",
            "--listen",
            &format!(":{port}"),
            "--upstream",
            "http://127.0.0.1:9",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.contains(&format!("http://127.0.0.1:{port}")) && line.contains("127.0.0.1:9"),
        "{line}"
    );
}

#[test]
fn exports_are_as_private_as_the_recording() {
    use std::os::unix::fs::PermissionsExt;
    let d = scratch("private");
    for (format, name) in [("exchange", "x.jsonl"), ("har", "x.har")] {
        let out = d.join(name);
        let o = run(&[
            "export",
            DEMO,
            "--format",
            format,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{format}");
    }
}

#[test]
fn an_empty_exchange_document_is_nothing_to_check() {
    let o = run_with_stdin(&["check", "-"], br#"{"request":[],"response":[]}"#);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no calls"), "{}", stderr(&o));
}

/// One exit-code rule: an address that cannot be bound is 1 in every subcommand that listens,
/// a command line that cannot work is 2 and names what is wrong.
#[test]
fn a_busy_address_is_exit_1_everywhere_and_bad_addresses_name_the_flag() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    for args in [
        vec![
            "proxy",
            "--no-tui",
            "--listen",
            &addr,
            "--upstream",
            "http://127.0.0.1:9",
        ],
        vec!["demo-server", "--listen", &addr],
        vec!["mock", DEMO, "--listen", &addr],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("cannot listen on"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    // --admin on the --listen address.
    let free = free_port();
    let same = format!("127.0.0.1:{free}");
    let o = run(&[
        "proxy",
        "--no-tui",
        "--listen",
        &same,
        "--admin",
        &same,
        "--upstream",
        "http://127.0.0.1:9",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--admin") && stderr(&o).contains("--listen"),
        "{}",
        stderr(&o)
    );
    // --record naming a directory.
    let d = scratch("recdir");
    let o = run(&[
        "proxy",
        "--no-tui",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "http://127.0.0.1:9",
        "--record",
        d.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));
}

#[tokio::test]
async fn replay_refuses_an_ignore_path_that_is_not_one() {
    let (up, _s) = start_demo().await;
    let target = format!("http://{up}");
    for bad in ["result[", ""] {
        let o = run(&["replay", DEMO, "--target", &target, "--ignore", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--ignore"), "{bad:?}: {}", stderr(&o));
    }
}

/// `mock` says on stderr which requests it could not match (the client gets a JSON-RPC error).
#[test]
fn mock_says_which_requests_it_could_not_match() {
    let o = run_with_stdin(
        &["mock", DEMO, "--stdio"],
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"no/such\"}\n",
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"code\":-32601"), "{out}");
    assert!(
        stderr(&o).contains("no recorded call of `no/such`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bash_completion_sources_cleanly_and_completes_subcommands_and_flags() {
    let script = run(&["completions", "bash"]);
    assert!(script.status.success());
    let dir = Scratch::new("completions");
    let file = dir.join("rpctap.bash");
    std::fs::write(&file, &script.stdout).unwrap();
    // What bash does on `rpctap pro<TAB>` and `rpctap proxy --upst<TAB>`.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -e; source {f}; \
             COMP_WORDS=(rpctap pro); COMP_CWORD=1; COMP_LINE='rpctap pro'; COMP_POINT=10; \
             _rpctap rpctap pro rpctap; echo \"1:${{COMPREPLY[*]}}\"; \
             COMP_WORDS=(rpctap proxy --upst); COMP_CWORD=2; COMP_LINE='rpctap proxy --upst'; COMP_POINT=19; \
             _rpctap rpctap --upst proxy; echo \"2:${{COMPREPLY[*]}}\"",
            f = file.display()
        ))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", stderr(&out));
    let first = said.lines().find(|l| l.starts_with("1:")).unwrap_or("");
    assert!(
        first.split_whitespace().any(|w| w.ends_with("proxy")),
        "{said}"
    );
    let second = said.lines().find(|l| l.starts_with("2:")).unwrap_or("");
    assert!(second.contains("--upstream"), "{said}");
    for shell in ["zsh", "fish", "powershell", "elvish"] {
        let o = run(&["completions", shell]);
        assert!(o.status.success() && o.stdout.len() > 1000, "{shell}");
    }
}

#[test]
fn the_man_page_renders() {
    let page = run(&["man"]);
    assert!(page.status.success());
    let dir = Scratch::new("man");
    let file = dir.join("rpctap.1");
    std::fs::write(&file, &page.stdout).unwrap();
    let out = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("man is installed by scripts/peers.sh (Debian's man-db)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    for want in ["rpctap", "SUBCOMMANDS", "proxy", "watch", "completions"] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_without_a_terminal_tails_the_feed_and_exits_cleanly_into_head() {
    let (demo, _d) = start_demo().await;
    let mut cmd = proxy_cmd(&format!("http://{demo}"), true);
    let (mut proxy, addrs, _err) =
        spawn_with_banner(&mut cmd, &["proxy on http://", "admin on http://"]);
    for id in 0..5 {
        let r = post_json(
            addrs[0],
            "/jsonrpc",
            &format!(r#"{{"jsonrpc":"2.0","method":"add","params":[1,{id}],"id":{id}}}"#),
        )
        .await;
        assert_eq!(r.json()["result"], 1 + id);
    }
    // The backlog alone fills `head`; attach's next line meets a closed pipe and exits 0.
    let admin = addrs[1].to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg("-c")
            .arg(format!(
                "set -o pipefail; timeout 10 {BIN} attach {admin} | head -n 3"
            ))
            .output()
            .unwrap()
    });
    let addr = addrs[0];
    let more = tokio::spawn(async move {
        for id in 5..40 {
            post_json(
                addr,
                "/jsonrpc",
                &format!(r#"{{"jsonrpc":"2.0","method":"add","params":[1,{id}],"id":{id}}}"#),
            )
            .await;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    let out = out.await.unwrap();
    more.abort();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines.iter().all(|l| l.contains("add")), "log lines: {text}");
    proxy.term();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_and_the_feed_take_the_filter_language() {
    let (demo, _d) = start_demo().await;
    let mut cmd = proxy_cmd(&format!("http://{demo}"), true);
    let (mut proxy, addrs, _err) =
        spawn_with_banner(&mut cmd, &["proxy on http://", "admin on http://"]);
    for id in 0..4 {
        let method = if id % 2 == 0 { "add" } else { "nope" };
        post_json(
            addrs[0],
            "/jsonrpc",
            &format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":[1,2],"id":{id}}}"#),
        )
        .await;
    }
    // Only the failed calls, from the feed itself (its backlog here).
    let admin = addrs[1].to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg("-c")
            .arg(format!(
                "timeout 3 {BIN} attach {admin} --filter 'error -method:add'"
            ))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let calls: Vec<&str> = text.lines().filter(|l| l.contains(" id=")).collect();
    assert_eq!(calls.len(), 2, "{text}");
    assert!(calls.iter().all(|l| l.contains("nope")), "{text}");
    // A filter it cannot read: said, exit 2; and the feed's own answer.
    let o = run(&["attach", &addrs[1].to_string(), "--filter", "bogus:x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown filter field `bogus:`"),
        "{}",
        stderr(&o)
    );
    let r = send(addrs[1], "GET", "/events?filter=bogus%3Ax", &[], "").await;
    assert_eq!(r.status.as_u16(), 400);
    assert!(r.text().contains("unknown filter field"), "{}", r.text());
    proxy.term();
}

/// `view` and `open` without a terminal (a pipe): the recording as the headless log prints it,
/// no escape codes, exit 0 — and `| head` ends them cleanly (issue 62.10).
#[test]
fn view_and_open_without_a_terminal_print_text() {
    let file = root().join("recordings/demo.jsonl");
    for sub in ["view", "open"] {
        let out = rpctap()
            .args([sub, file.to_str().unwrap()])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{sub}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains('\x1b'), "{sub}: escape codes in {text:?}");
        assert!(text.lines().count() > 3, "{sub}: {text}");
        assert!(text.contains("add"), "{sub}: the demo's calls: {text}");
    }
    let mut child = rpctap()
        .args(["view", file.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    assert_eq!(
        child.wait().unwrap().code(),
        Some(0),
        "a closed pipe is a clean end"
    );
}
