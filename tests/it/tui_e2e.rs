//! The real binary in a real terminal: `rpctap demo` runs in tmux, traffic goes through the proxy,
//! the call row appears on screen (capture-pane), `q` quits and the terminal is restored.

use crate::common::*;
use std::process::Command;
use std::time::Duration;

/// tmux is installed by `scripts/peers.sh`; without it the test fails saying so.
fn tmux_available() -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "tmux is not installed: run `bash scripts/peers.sh`");
    ok
}

#[test]
fn demo_dashboard_shows_calls_and_restores_the_terminal() {
    assert!(
        tmux_available(),
        "tmux is needed and could not be installed"
    );
    let port = free_port();
    let t = Tmux::shell("demo", 100, 30, &[]);
    let bin = env!("CARGO_BIN_EXE_rpctap");
    t.cmd(&[
        "send-keys",
        "-t",
        "t",
        // A budget a loaded two-core machine still exceeds (the default's 10,000 events a
        // second it may not reach): the test waits on sampling, not on the machine's speed.
        &format!("RPCTAP_EVENT_BUDGET=300 {bin} demo --listen 127.0.0.1:{port}"),
        "Enter",
    ]);
    let screen = t.wait_for("Sessions", Duration::from_secs(10));
    assert!(
        screen.contains("Calls | Anomalies | Methods | Sessions"),
        "{screen}"
    );
    assert_eq!(
        t.cmd(&["display", "-p", "-t", "t", "#{alternate_on}"])
            .trim(),
        "1",
        "the dashboard uses the alternate screen"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    rt.block_on(async {
        let r = post_json(
            addr,
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":77}"#,
        )
        .await;
        assert_eq!(r.json()["result"], 19);
        let r = post_json(
            addr,
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","method":"nope","id":78}"#,
        )
        .await;
        assert_eq!(r.json()["error"]["code"], -32601);
    });
    let screen = t.wait_for("error -32601", Duration::from_secs(5));
    let row = screen
        .lines()
        .find(|l| l.contains("subtract"))
        .unwrap_or_else(|| panic!("no subtract row:\n{screen}"));
    assert!(row.contains("77") && row.contains("result"), "{row}");
    assert!(screen.contains("calls 2"), "{screen}");
    println!("{screen}");

    // Under load the dashboard samples whole exchanges and says so: 32 keep-alive clients call
    // as fast as they can (bounded: until the header shows it, at most 20 s).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                let c = client();
                let tasks: Vec<_> = (0..32)
                    .map(|w| {
                        let (c, stop) = (c.clone(), stop.clone());
                        tokio::spawn(async move {
                            let mut n = 0u64;
                            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                                n += 1;
                                let req = http::Request::post(format!("http://{addr}/jsonrpc"))
                                    .header("content-type", "application/json")
                                    .body(http_body_util::Full::new(bytes::Bytes::from(format!(
                                        r#"{{"jsonrpc":"2.0","method":"add","params":[1,2],"id":"{w}-{n}"}}"#
                                    ))))
                                    .unwrap();
                                if let Ok(r) = c.request(req).await {
                                    use http_body_util::BodyExt;
                                    let _ = r.into_body().collect().await;
                                }
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    let _ = t.await;
                }
            });
        })
    };
    let screen = t.wait_for("sampling 1/", Duration::from_secs(20));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = load.join();
    assert!(
        screen.contains("sampling 1/"),
        "the header says the dashboard samples:\n{screen}"
    );
    println!("{screen}");
    // The load is over: it shows every exchange again.
    let screen = t.wait_for_gone("sampling 1/", Duration::from_secs(10));
    assert!(!screen.contains("sampling 1/"), "{screen}");

    t.cmd(&["send-keys", "-t", "t", "q"]);
    let screen = t.wait_for("READY$", Duration::from_secs(10));
    assert!(
        screen.contains("READY$"),
        "the shell prompt is back:\n{screen}"
    );
    assert!(
        !screen.contains("Calls | Anomalies"),
        "the dashboard is gone:\n{screen}"
    );
    assert_eq!(
        t.cmd(&["display", "-p", "-t", "t", "#{alternate_on}"])
            .trim(),
        "0",
        "the terminal left the alternate screen"
    );
}

fn headless_proxy(listen: u16, admin: u16, upstream: u16) -> Proc {
    Proc::spawn(
        rpctap()
            .args([
                "proxy",
                "--listen",
                &format!("127.0.0.1:{listen}"),
                "--upstream",
                &format!("http://127.0.0.1:{upstream}"),
                "--admin",
                &format!("127.0.0.1:{admin}"),
                "--no-tui",
                "--log",
                "off",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
}

#[test]
fn attach_shows_a_running_proxys_calls_and_reconnects_when_it_restarts() {
    tmux_available();
    let (listen, admin, up) = (free_port(), free_port(), free_port());
    let _upstream = Proc::spawn(
        rpctap()
            .args(["demo-server", "--listen", &format!("127.0.0.1:{up}")])
            .stderr(std::process::Stdio::null()),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let at = |p: u16| std::net::SocketAddr::from(([127, 0, 0, 1], p));
    rt.block_on(wait_listening(at(up)));
    let mut proxy = headless_proxy(listen, admin, up);
    rt.block_on(wait_listening(at(admin)));

    let t = Tmux::shell("attach", 110, 30, &[]);
    let bin = env!("CARGO_BIN_EXE_rpctap");
    t.cmd(&[
        "send-keys",
        "-t",
        "t",
        &format!("{bin} attach 127.0.0.1:{admin}"),
        "Enter",
    ]);
    let screen = t.wait_for("— live", Duration::from_secs(10));
    assert!(screen.contains("— live"), "{screen}");
    assert!(
        screen.contains(&format!("127.0.0.1:{listen} → http://127.0.0.1:{up}")),
        "the header names the attached proxy:\n{screen}"
    );
    rt.block_on(async {
        let r = post_json(
            at(listen),
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":77}"#,
        )
        .await;
        assert_eq!(r.json()["result"], 19);
    });
    let screen = t.wait_for_line(&["subtract", "77", "result"], Duration::from_secs(10));
    assert!(
        screen
            .lines()
            .any(|l| l.contains("subtract") && l.contains("77") && l.contains("result")),
        "no finished subtract row:\n{screen}"
    );

    // The proxy goes away: the header says the feed is lost and being re-tried.
    proxy.term();
    let screen = t.wait_for("reconnecting", Duration::from_secs(10));
    assert!(screen.contains("feed lost"), "{screen}");
    // It comes back (a new process): attach reconnects and shows its traffic.
    let _proxy = headless_proxy(listen, admin, up);
    rt.block_on(wait_listening(at(admin)));
    let screen = t.wait_for("— live", Duration::from_secs(10));
    assert!(screen.contains("— live"), "{screen}");
    rt.block_on(async {
        post_json(
            at(listen),
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","method":"add","params":[1,2],"id":78}"#,
        )
        .await;
    });
    let screen = t.wait_for_line(&[" add ", "78", "result"], Duration::from_secs(10));
    assert!(
        screen
            .lines()
            .any(|l| l.contains(" add ") && l.contains("78") && l.contains("result")),
        "{screen}"
    );
    t.cmd(&["send-keys", "-t", "t", "q"]);
    let screen = t.wait_for("READY$", Duration::from_secs(10));
    assert!(screen.contains("READY$"), "{screen}");
}

#[test]
fn attach_shows_a_stdio_session_from_its_backlog_and_refuses_resend() {
    tmux_available();
    let admin = free_port();
    let mut stdio = Proc::spawn(
        rpctap()
            .args(["stdio", "--admin", &format!("127.0.0.1:{admin}"), "--"])
            .args([
                "sh",
                "-c",
                r#"read l; echo '{"jsonrpc":"2.0","id":5,"result":{"ok":true}}'; sleep 30"#,
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null()),
    );
    use std::io::{BufRead, Write};
    let mut stdin = stdio.0.stdin.take().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\"}\n")
        .unwrap();
    let mut reply = String::new();
    std::io::BufReader::new(stdio.0.stdout.take().unwrap())
        .read_line(&mut reply)
        .unwrap();
    assert!(reply.contains("\"ok\":true"));
    // Attached after the call: the feed's backlog brings it.
    let t = Tmux::shell("attach-stdio", 110, 30, &[]);
    let bin = env!("CARGO_BIN_EXE_rpctap");
    t.cmd(&[
        "send-keys",
        "-t",
        "t",
        &format!("{bin} attach 127.0.0.1:{admin}"),
        "Enter",
    ]);
    let screen = t.wait_for_line(&["tools/list", "result"], Duration::from_secs(10));
    let row = screen
        .lines()
        .find(|l| l.contains("tools/list"))
        .unwrap_or_else(|| panic!("no row:\n{screen}"));
    assert!(row.contains("result"), "{row}");
    assert!(screen.contains("stdio → sh -c"), "{screen}");
    t.cmd(&["send-keys", "-t", "t", "r"]);
    let screen = t.wait_for("unavailable", Duration::from_secs(5));
    assert!(
        screen.contains("re-send is unavailable for a stdio session"),
        "{screen}"
    );
    t.cmd(&["send-keys", "-t", "t", "q"]);
    drop(stdin);
    stdio.term();
}

/// `rpctap demo` started in a tmux shell of `w`×`h`; the shell, and the binary's path.
fn demo_in_tmux(name: &str, w: u16, h: u16) -> (Tmux, &'static str) {
    assert!(tmux_available());
    let port = free_port();
    let t = Tmux::shell(name, w, h, &[]);
    let bin = env!("CARGO_BIN_EXE_rpctap");
    t.cmd(&[
        "send-keys",
        "-t",
        "t",
        &format!("{bin} demo --listen 127.0.0.1:{port}"),
        "Enter",
    ]);
    (t, bin)
}

/// On an 80×24 terminal the demo's panel still shows how to get help and how to attach (the
/// last of the examples are what does not fit), and the status line its `?` hint.
#[test]
fn the_demo_at_80x24_keeps_the_keys_and_the_attach_line_on_screen() {
    let (t, _) = demo_in_tmux("small", 80, 24);
    let screen = t.wait_for("watch it with:", Duration::from_secs(10));
    for shown in [
        "`?` lists the keys",
        "watch it with:",
        "? help",
        "curl -s http://",
    ] {
        assert!(screen.contains(shown), "{shown}:\n{screen}");
    }
    t.cmd(&["send-keys", "-t", "t", "q"]);
}

/// A new user's first minute: the demo opens on its own instructions, and following them — the
/// curl command and the attach line as the dashboard shows them — works.
#[test]
fn the_demo_is_followed_from_its_own_instructions_inside_the_dashboard() {
    let (t, bin) = demo_in_tmux("first", 240, 40);
    // The whole panel: a capture can fall between a frame's first lines and its last.
    let screen = t.wait_until(Duration::from_secs(10), |s| {
        s.contains("getting started")
            && s.contains("curl -s http://")
            && s.contains("watch it with: ")
    });
    // The panel's lines, without its border.
    let panel: Vec<String> = screen
        .lines()
        .map(|l| {
            l.trim_matches(|c: char| c == '│' || c.is_whitespace())
                .to_string()
        })
        .collect();
    let curl = panel
        .iter()
        .find(|l| l.starts_with("curl -s http://") && l.contains("\"add\""))
        .unwrap_or_else(|| panic!("no curl line on screen:\n{screen}"))
        .clone();
    let attach = panel
        .iter()
        .find_map(|l| l.split("watch it with: ").nth(1))
        .unwrap_or_else(|| panic!("no attach line on screen:\n{screen}"))
        .to_string();
    assert!(screen.contains("`q` quits"), "{screen}");
    let out = Command::new("sh").arg("-c").arg(&curl).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"result\":7"),
        "{curl}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let screen = t.wait_for_line(&["add", "result"], Duration::from_secs(5));
    assert!(
        !screen.contains("getting started"),
        "the list replaces the panel:\n{screen}"
    );
    // The attach line, as shown, in a pipe: the call as a log line.
    let attach = attach.replacen("rpctap", bin, 1);
    let mut tail = Command::new("sh")
        .arg("-c")
        .arg(format!("timeout 10 {attach} | head -n 1"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once `head` has its line, the next call's line meets the closed pipe and attach ends.
    let mut done = None;
    for _ in 0..50 {
        Command::new("sh").arg("-c").arg(&curl).output().unwrap();
        if let Some(status) = tail.try_wait().unwrap() {
            done = Some(status);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(done.is_some_and(|s| s.success()), "attach did not end");
    let mut line = String::new();
    std::io::Read::read_to_string(&mut tail.stdout.take().unwrap(), &mut line).unwrap();
    assert!(line.contains("add"), "{attach}: {line}");
    t.cmd(&["send-keys", "-t", "t", "q"]);
    t.wait_for("READY$", Duration::from_secs(5));
}
