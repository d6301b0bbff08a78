//! The real binary in a real terminal: `rpctap demo` runs in tmux, traffic goes through the proxy,
//! the call row appears on screen (capture-pane), `q` quits and the terminal is restored.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// tmux is installed by `scripts/peers.sh`; without it the test fails saying so.
fn tmux_available() -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "tmux is not installed: run `bash scripts/peers.sh`");
    ok
}

struct Tmux(String);

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.0)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "t"])
    }
    fn wait_for_gone(&self, what: &str, timeout: Duration) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if !s.contains(what) || t0.elapsed() > timeout {
                return s;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    fn wait_for(&self, what: &str, timeout: Duration) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(what) || t0.elapsed() > timeout {
                return s;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

#[test]
fn demo_dashboard_shows_calls_and_restores_the_terminal() {
    assert!(
        tmux_available(),
        "tmux is needed and could not be installed"
    );
    let port = free_port();
    let t = Tmux(format!("rpctap-test-{}", std::process::id()));
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "100",
        "-y",
        "30",
        "env",
        "PS1=READY$ ",
        "bash",
        "--norc",
        "--noprofile",
    ]);
    std::thread::sleep(Duration::from_millis(300));
    let bin = env!("CARGO_BIN_EXE_rpctap");
    t.cmd(&[
        "send-keys",
        "-t",
        "t",
        &format!("{bin} demo --listen 127.0.0.1:{port}"),
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
