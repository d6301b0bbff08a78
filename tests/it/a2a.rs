//! A2A (Agent2Agent) through rpctap: the official Python SDK (`a2a-sdk` 1.3) as agent and client
//! gets the same answers direct and proxied — a blocking message, a streamed task, a task polled
//! to completion, a cancelled one, one resumed after asking for input, one that fails — with no
//! finding live or in `check` (a streaming call's several responses are one call, not
//! unmatched replies), and rpctap's own errors say they are rpctap's.

use crate::common::*;
use rpctap::events::{Event, Outcome};
use std::net::SocketAddr;

const A2A: &[&str] = &["a2a-sdk[http-server]==1.3.0", "uvicorn==0.55.0"];

/// The SDK agent (tests/interop/a2a_agent.py) on a free port.
pub fn a2a_agent(args: &[&str]) -> (Proc, SocketAddr) {
    let env = installed("a2a", A2A);
    let (p, addrs, _) = spawn_with_banner(
        std::process::Command::new(env.join("bin/python"))
            .arg(root().join("tests/interop/a2a_agent.py"))
            .args(args)
            .stdout(std::process::Stdio::null()),
        &["a2a agent on http://"],
    );
    (p, addrs[0])
}

/// The SDK client's scenarios (tests/interop/a2a_client.py) against `base`.
async fn a2a_client(base: String) -> serde_json::Value {
    let env = installed("a2a", A2A);
    tokio::task::spawn_blocking(move || {
        json_stdout(
            std::process::Command::new(env.join("bin/python"))
                .arg(root().join("tests/interop/a2a_client.py"))
                .arg(&base),
            &base,
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_agent_and_client_through_rpctap_identical_and_clean() {
    let dir = Scratch::new("a2a-sdk");
    let (_agent, up) = a2a_agent(&[]);
    let file = dir.join("a2a.jsonl");
    let flags: rpctap::cli::ProxyFlags = rpctap::cli::SharedFlags {
        record: Some(file.clone()),
        ..Default::default()
    }
    .into();
    let mut p = start_proxy_flags(&format!("http://{up}"), flags).await;
    let direct = a2a_client(format!("http://{up}")).await;
    let via = a2a_client(format!("http://{}", p.addr)).await;
    assert_eq!(direct, via, "the same through rpctap");
    assert_eq!(
        via["stream"],
        serde_json::json!([
            "task",
            "status:working",
            "artifact:first half, ",
            "artifact:second half",
            "status:completed"
        ])
    );
    assert_eq!(via["polled"]["state"], "completed");
    assert_eq!(via["cancelled"], "canceled");
    assert_eq!(via["resumed"]["state"], "completed");
    assert_eq!(via["failed"], "failed");

    let ev = p.drain().await;
    assert!(anomalies(&ev).is_empty(), "{:?}", anomalies(&ev));
    let cs = calls(&ev);
    let requests = ev
        .iter()
        .filter(|e| matches!(&***e, Event::Message(m) if m.direction == rpctap::events::Direction::ClientToServer))
        .count();
    assert_eq!(cs.len(), requests, "one call per request: {cs:?}");
    assert!(cs.iter().all(|c| c.outcome == Outcome::Result), "{cs:?}");
    // The streamed task: one call, whose five responses (one per event) all reached the client;
    // it lasts until its last event (the agent waits 50 ms before each artifact).
    let streamed: Vec<_> = cs
        .iter()
        .filter(|c| &*c.method == "SendStreamingMessage")
        .collect();
    assert_eq!(streamed.len(), 1, "{cs:?}");
    assert!(
        streamed[0].latency_us.unwrap() >= 100_000,
        "the call ends with its stream: {:?}",
        streamed[0]
    );
    let stream_replies = ev
        .iter()
        .filter(|e| matches!(&***e, Event::Message(m) if m.direction == rpctap::events::Direction::ServerToClient && m.exchange == streamed[0].exchange))
        .count();
    assert_eq!(stream_replies, 5);

    drop(p.stop);
    p.served.await.unwrap();
    let c = check_recording(&file);
    assert_eq!(c.exit, Some(0), "{}", c.stdout);
    assert!(c.codes.is_empty(), "{:?}", c.codes);
    assert_eq!(c.matched, cs.len() as u64, "{}", c.stdout);
}
