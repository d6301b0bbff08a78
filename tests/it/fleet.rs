//! Fleets of sidecars: rate limits shared through a real `redis-server` (Debian's, started here
//! on a loopback port) by two rpctap processes — one limit, not one per process; the
//! fallbacks when Redis stops (`local` with `replicas`, `deny`, `allow`); shared counting again
//! when Redis is back; shared concurrency leases; keys namespaced, expiring, no secret in clear.

use crate::common::*;
use std::net::SocketAddr;
use std::time::Duration;

/// A `redis-server` on `port`, without persistence.
fn redis(port: u16) -> Proc {
    Proc::spawn(
        std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli (Debian's redis-tools, with redis-server: scripts/peers.sh)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A sidecar: `rpctap proxy` in front of `upstream` with `config`, its listen address.
fn sidecar(upstream: SocketAddr, config: &std::path::Path) -> (Proc, SocketAddr) {
    let mut cmd = proxy_cmd(&format!("http://{upstream}"), false);
    cmd.arg("--config").arg(config);
    let (p, addrs, _rest) = spawn_with_banner(&mut cmd, &["proxy on http://"]);
    (p, addrs[0])
}

/// Sends a call of `method` with `x-api-key: key`; whether it was allowed (the upstream's
/// answer) rather than refused.
async fn allowed(addr: SocketAddr, method: &str, key: &str, id: u32) -> bool {
    let body = match method {
        "sleep" => format!(r#"{{"jsonrpc":"2.0","method":"sleep","params":[400],"id":{id}}}"#),
        m => format!(r#"{{"jsonrpc":"2.0","method":"{m}","params":[1,2],"id":{id}}}"#),
    };
    let h = [("content-type", "application/json"), ("x-api-key", key)];
    let r = send(addr, "POST", "/jsonrpc", &h, body).await;
    let v = r.json();
    match v["error"]["message"].as_str() {
        Some("Rate limited") => false,
        _ => {
            assert!(v.get("result").is_some(), "{v}");
            true
        }
    }
}

/// Calls alternating between the sidecars; how many each allowed.
async fn alternate(a: SocketAddr, b: SocketAddr, method: &str, key: &str, n: u32) -> (u32, u32) {
    let (mut x, mut y) = (0, 0);
    for i in 0..n {
        if i % 2 == 0 {
            x += u32::from(allowed(a, method, key, i).await);
        } else {
            y += u32::from(allowed(b, method, key, i).await);
        }
    }
    (x, y)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_share_one_limit_through_redis_and_fall_back_when_it_stops() {
    let port = free_port();
    let mut r = redis(port);
    wait_listening(format!("127.0.0.1:{port}").parse().unwrap()).await;
    let (demo, _d) = start_demo().await;
    let dir = Scratch::new("fleet");
    let config = dir.join("rpctap.toml");
    let store = format!("redis://127.0.0.1:{port}");
    std::fs::write(
        &config,
        format!(
            r#"
[[limit]]
name = "add-shared"
method = "add"
key = "header:x-api-key"
rate = "10/min"
store = "{store}"
replicas = 2
on_store_error = "local"

[[limit]]
name = "subtract-or-deny"
method = "subtract"
rate = "100/min"
store = "{store}"
on_store_error = "deny"

[[limit]]
name = "echo-or-allow"
method = "echo"
key = "header:x-api-key"
rate = "1/min"
store = "{store}"
on_store_error = "allow"

[[limit]]
name = "one-sleep"
method = "sleep"
concurrency = 1
store = "{store}"
"#
        ),
    )
    .unwrap();
    let (_a, a) = sidecar(demo, &config);
    let (_b, b) = sidecar(demo, &config);

    // One limit of 10 per minute across both, not 10 each.
    assert_eq!(
        alternate(a, b, "add", "key-1", 20).await,
        (5, 5),
        "10 in total"
    );
    assert!(!allowed(a, "add", "key-1", 99).await);
    assert!(!allowed(b, "add", "key-1", 99).await);
    // Another key has its own count.
    assert!(allowed(b, "add", "key-2", 1).await);
    // The echo rule allows 1 per minute across both.
    assert!(allowed(a, "echo", "k", 1).await);
    assert!(!allowed(b, "echo", "k", 2).await);

    // In Redis: namespaced keys that expire, the API key's value nowhere in clear.
    let keys = redis_cli(port, &["--scan", "--pattern", "*"]);
    assert!(!keys.trim().is_empty());
    for k in keys.lines().filter(|k| !k.is_empty()) {
        assert!(k.starts_with("rpctap:limit:"), "{k}");
        assert!(!k.contains("key-1"), "a key's value in clear: {k}");
        let ttl: i64 = redis_cli(port, &["pttl", k]).trim().parse().unwrap();
        assert!(ttl > 0, "{k} has no expiry ({ttl})");
    }

    // Shared concurrency: a lease held by a call through A refuses a call through B.
    // Waited for in Redis (the leases held), not for a while.
    let leased = || -> usize {
        redis_cli(port, &["--scan", "--pattern", "rpctap:limit:*:leases:*"])
            .lines()
            .filter(|k| !k.is_empty())
            .map(|k| {
                redis_cli(port, &["zcard", k])
                    .trim()
                    .parse::<usize>()
                    .unwrap_or(0)
            })
            .sum()
    };
    let slow = tokio::spawn(async move { allowed(a, "sleep", "k", 1).await });
    assert!(eventually(Duration::from_secs(10), || leased() == 1));
    assert!(!allowed(b, "sleep", "k", 2).await, "the lease is shared");
    assert!(slow.await.unwrap());
    assert!(eventually(Duration::from_secs(10), || leased() == 0));
    assert!(
        allowed(b, "sleep", "k", 3).await,
        "the lease was given back"
    );

    // Redis stops: each rule's fallback. `local` with replicas = 2: each sidecar allows its
    // share, 5 of a 10-per-minute rule (so 5 through A alone, not 10).
    r.term();
    let through_a = {
        let mut n = 0;
        for i in 0..10 {
            n += u32::from(allowed(a, "add", "key-3", i).await);
        }
        n
    };
    assert_eq!(through_a, 5, "the local fallback counts a replica's share");
    assert!(
        !allowed(a, "subtract", "k", 1).await,
        "on_store_error = deny"
    );
    // (A key refused until T stays refused until T, Redis or not: "k" through B.)
    assert!(
        !allowed(b, "echo", "k", 3).await,
        "refused until its retry time"
    );
    for i in 0..3 {
        assert!(
            allowed(a, "echo", "k-down", i).await,
            "on_store_error = allow"
        );
        assert!(
            allowed(b, "echo", "k-down", i).await,
            "on_store_error = allow"
        );
    }

    // Redis back: shared counting again (a fresh Redis: the counts start over).
    let _r = redis(port);
    wait_listening(format!("127.0.0.1:{port}").parse().unwrap()).await;
    // The sidecars reconnect by themselves; until they have, the fallback answers.
    let mut shared = false;
    for i in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        allowed(a, "add", &format!("probe-a{i}"), 1).await;
        allowed(b, "add", &format!("probe-b{i}"), 1).await;
        if !redis_cli(port, &["--scan", "--pattern", "rpctap:limit:*"])
            .trim()
            .is_empty()
        {
            shared = true;
            break;
        }
    }
    assert!(shared, "the sidecars count in Redis again");
    for i in 0..5 {
        // Both have asked Redis since it came back.
        tokio::time::sleep(Duration::from_millis(100)).await;
        allowed(a, "add", &format!("warm-a{i}"), 1).await;
        allowed(b, "add", &format!("warm-b{i}"), 1).await;
    }
    assert_eq!(
        alternate(a, b, "add", "key-4", 20).await,
        (5, 5),
        "one shared limit again"
    );
}

/// The README's fleet example (`config/fleet.sh --check`): two sidecars, one Redis, one
/// collector (the OTLP receiver on the official protobuf definitions): one limit, and spans.
#[test]
fn the_fleet_example_shares_one_limit_and_sends_spans() {
    installed("otel", &["opentelemetry-proto==1.45.2"]);
    // Five free ports in a row.
    let base = (0..200)
        .map(|_| free_port())
        .find(|&b| {
            b < 60_000 && (0..5).all(|i| std::net::TcpListener::bind(("127.0.0.1", b + i)).is_ok())
        })
        .expect("five free ports in a row");
    let out = std::process::Command::new("bash")
        .arg(root().join("config/fleet.sh"))
        .arg("--check")
        .env("BASE_PORT", base.to_string())
        .env("RPCTAP", env!("CARGO_BIN_EXE_rpctap"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("allowed 10 of 20 calls through two sidecars"),
        "{text}"
    );
    assert!(text.contains("spans received: 20 (one per call"), "{text}");
}
