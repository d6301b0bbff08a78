//! The real binary in a real terminal: `rpctap demo` runs in tmux, traffic goes through the proxy,
//! the call row appears on screen (capture-pane), `q` quits and the terminal is restored.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

fn tmux_available() -> bool {
    if Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return true;
    }
    // Not installed: install it (CI runs as root on a Debian machine).
    let _ = Command::new("apt-get").args(["update", "-qq"]).status();
    let _ = Command::new("apt-get")
        .args(["install", "-y", "-qq", "tmux"])
        .status();
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
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
