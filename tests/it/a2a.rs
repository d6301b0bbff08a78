//! A2A (Agent2Agent) through rpctap: the official SDKs — Python (`a2a-sdk` 1.3) and JavaScript
//! (`@a2a-js/sdk` 1.3) — as agent and client, each with each, get the same answers direct and
//! proxied — a blocking message, a streamed task, a task polled to completion, one subscribed to
//! (`SubscribeToTask`) until it ends, a cancelled one, one resumed after asking for input, one
//! that fails — with no
//! finding live or in `check` (a streaming call's several responses are one call, not
//! unmatched replies), in A2A 1.0 and in 0.3 (the SDKs' compatibility layers), and rpctap's own
//! errors say they are rpctap's.

use crate::common::*;
use rpctap::events::{Event, Outcome};
use serde_json::json;
use std::net::SocketAddr;

const A2A: &[&str] = &["a2a-sdk[http-server]==1.3.0", "uvicorn==0.55.0"];

/// The Python SDK agent (tests/interop/a2a_agent.py) on a free port.
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

/// A script of tests/interop run by the Node peers' Node, from their folder (where its imports
/// resolve).
fn node_script(name: &str) -> std::process::Command {
    let dir = installed("node", NODE_PACKAGES);
    let script = dir.join(name);
    std::fs::copy(root().join("tests/interop").join(name), &script).unwrap();
    let mut cmd = std::process::Command::new(dir.join("node_modules/node/bin/node"));
    cmd.arg(script);
    cmd
}

/// The JavaScript SDK agent (tests/interop/a2a_agent.mjs) on a free port.
fn a2a_agent_js(args: &[&str]) -> (Proc, SocketAddr) {
    let (p, addrs, _) = spawn_with_banner(
        node_script("a2a_agent.mjs")
            .args(args)
            .stdout(std::process::Stdio::null()),
        &["a2a agent on http://"],
    );
    (p, addrs[0])
}

/// The JavaScript SDK client's scenarios (tests/interop/a2a_client.mjs) against `base`.
async fn a2a_client_js(base: String) -> serde_json::Value {
    tokio::task::spawn_blocking(move || {
        json_stdout(node_script("a2a_client.mjs").arg(&base), &base)
    })
    .await
    .unwrap()
}

/// The SDK client's scenarios (tests/interop/a2a_client.py) against `base`.
async fn a2a_client(base: String) -> serde_json::Value {
    a2a_client_with(base, &[]).await
}

async fn a2a_client_with(base: String, args: &[&str]) -> serde_json::Value {
    let env = installed("a2a", A2A);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        json_stdout(
            std::process::Command::new(env.join("bin/python"))
                .arg(root().join("tests/interop/a2a_client.py"))
                .arg(&base)
                .args(&args),
            &base,
        )
    })
    .await
    .unwrap()
}

/// Every pair of the two SDKs, agent and client: the same answers direct and through rpctap,
/// one call per request, each task one row, no finding live or in `check`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sdks_as_agent_and_client_through_rpctap_identical_and_clean() {
    let dir = Scratch::new("a2a-sdk");
    for agent in ["python", "js"] {
        for client in ["python", "js"] {
            sdk_pair(&dir, agent, client, "1.0").await;
        }
    }
}

/// A2A 0.3 as the SDKs' compatibility layers speak it (`enable_v0_3_compat`, `legacyCompat`: an
/// agent whose card offers only 0.3, a client that speaks it): `message/send`,
/// `message/stream`, `tasks/get`, `tasks/cancel`, `kind`-tagged results, no `A2A-Version` — each
/// SDK's agent with the other's client, as clean and as whole as 1.0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_speaking_a2a_0_3_through_rpctap_identical_and_clean() {
    let dir = Scratch::new("a2a-sdk-0.3");
    for (agent, client) in [("python", "js"), ("js", "python")] {
        sdk_pair(&dir, agent, client, "0.3").await;
    }
}

async fn sdk_pair(dir: &std::path::Path, agent: &str, client: &str, version: &str) {
    let v03 = version == "0.3";
    let args: &[&str] = if v03 { &["--v0.3"] } else { &[] };
    let (_agent, up) = match agent {
        "python" => a2a_agent(args),
        _ => a2a_agent_js(args),
    };
    // A2A's methods as this version names them.
    let m = |name: &'static str| -> &'static str {
        match (v03, name) {
            (false, n) => n,
            (true, "SendMessage") => "message/send",
            (true, "SendStreamingMessage") => "message/stream",
            (true, "GetTask") => "tasks/get",
            (true, "CancelTask") => "tasks/cancel",
            (true, "SubscribeToTask") => "tasks/resubscribe",
            (true, n) => n,
        }
    };
    let run = |base: String| async move {
        match client {
            "python" => a2a_client(base).await,
            _ => a2a_client_js(base).await,
        }
    };
    let pair = format!("{agent} agent, {client} client, A2A {version}");
    let file = dir.join(format!("{agent}-{client}.jsonl"));
    let mut p = start_proxy_flags(&format!("http://{up}"), record_flags(&file)).await;
    let direct = run(format!("http://{up}")).await;
    let via = run(format!("http://{}", p.addr)).await;
    assert_eq!(direct, via, "{pair}: the same through rpctap");
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
    assert_eq!(
        via["subscribed"],
        serde_json::json!(["task", "artifact:slow result", "status:completed"])
    );
    assert_eq!(via["polled"]["state"], "completed");
    assert_eq!(via["cancelled"], "canceled");
    assert_eq!(via["resumed"]["state"], "completed");
    assert_eq!(via["failed"], "failed");

    let ev = p.drain().await;
    assert!(anomalies(&ev).is_empty(), "{pair}: {:?}", anomalies(&ev));
    // The card the client fetched through rpctap is an event of its own.
    let cards: Vec<String> = ev
        .iter()
        .filter_map(|e| match &**e {
            Event::Http(rpctap::events::HttpEvent::AgentCard { card, .. }) => {
                Some(rpctap::inspect::a2a::CardFacts::read(card).describe())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        cards,
        [format!(
            "rpctap test agent 1.0.0 (A2A {version}; streaming; 1 skill: stories)"
        )],
        "{pair}"
    );
    let cs = calls(&ev);
    let requests = ev
        .iter()
        .filter(|e| matches!(&***e, Event::Message(m) if m.direction == rpctap::events::Direction::ClientToServer))
        .count();
    assert_eq!(cs.len(), requests, "{pair}: one call per request: {cs:?}");
    // Each task is one row from the message that created it to its end; the polls, the cancel
    // and the message that resumed a task name it.
    let task_of = |c: &&rpctap::events::CallEvent| c.task.as_ref().map(|t| t.id.to_string());
    let created: Vec<_> = cs
        .iter()
        .filter(|c| {
            &*c.method == m("SendMessage")
                && c.task.as_ref().is_some_and(|t| t.origin_exchange.is_none())
        })
        .collect();
    assert_eq!(
        created.len(),
        4,
        "slow (polled), slow (subscribed to), wait and ask live on as tasks: {cs:?}"
    );
    let cancelled: Vec<_> = cs
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Cancelled { .. }))
        .collect();
    assert_eq!(cancelled.len(), 1, "{cs:?}");
    assert_eq!(
        cancelled[0].task.as_ref().unwrap().status.as_deref(),
        Some("cancelled")
    );
    let polled = created
        .iter()
        .find(|c| c.task.as_ref().unwrap().polls > 0)
        .expect("the polled task");
    assert_eq!(polled.outcome, Outcome::Result);
    assert!(
        polled.latency_us.unwrap() >= 400_000,
        "a task's row lasts its whole life (the agent works 0.5 s): {polled:?}"
    );
    let polls: Vec<_> = cs.iter().filter(|c| &*c.method == m("GetTask")).collect();
    assert!(!polls.is_empty());
    for g in &polls {
        let t = g.task.as_ref().unwrap();
        assert_eq!(Some(&*t.id), task_of(polled).as_deref(), "{g:?}");
        assert_eq!(t.origin_exchange, Some(polled.exchange), "{g:?}");
    }
    assert_eq!(polled.task.as_ref().unwrap().polls as usize, polls.len());
    let resumed = cs
        .iter()
        .find(|c| {
            &*c.method == m("SendMessage")
                && c.task.as_ref().is_some_and(|t| t.origin_exchange.is_some())
        })
        .expect("the message that resumed the waiting task");
    let asked = created
        .iter()
        .find(|c| task_of(c) == task_of(&resumed))
        .expect("the task it resumed");
    assert_eq!(asked.outcome, Outcome::Result);
    assert_eq!(
        asked.task.as_ref().unwrap().status.as_deref(),
        Some("completed")
    );
    // Every call names its conversation (the agent's `contextId`: a first message names none,
    // its reply does), and the message that resumed a task is in that task's conversation.
    assert!(cs.iter().all(|c| c.context.is_some()), "{pair}: {cs:?}");
    assert_eq!(asked.context, resumed.context, "{pair}");
    let conversations: std::collections::HashSet<_> = cs.iter().map(|c| &c.context).collect();
    assert!(conversations.len() >= 3, "{pair}: {conversations:?}");
    assert!(
        cs.iter()
            .all(|c| c.outcome == Outcome::Result || matches!(c.outcome, Outcome::Cancelled { .. })),
        "{cs:?}"
    );
    // The streamed task: one call, whose five responses (one per event) all reached the client;
    // it lasts until its last event (the agent waits 50 ms before each artifact).
    let streamed: Vec<_> = cs
        .iter()
        .filter(|c| &*c.method == m("SendStreamingMessage"))
        .collect();
    assert_eq!(streamed.len(), 1, "{cs:?}");
    assert!(
        streamed[0].latency_us.unwrap() >= 100_000,
        "the call ends with its stream: {:?}",
        streamed[0]
    );
    // The subscription: its task's, folded under it, ended with the task's last event.
    let subscribed: Vec<_> = cs
        .iter()
        .filter(|c| &*c.method == m("SubscribeToTask"))
        .collect();
    assert_eq!(subscribed.len(), 1, "{pair}: {cs:?}");
    let origin = subscribed[0].task.as_ref().and_then(|t| t.origin_exchange);
    assert!(
        created.iter().any(|c| Some(c.exchange) == origin),
        "{pair}: the subscription names the task's call: {cs:?}"
    );
    assert_eq!(
        subscribed[0].task.as_ref().unwrap().status.as_deref(),
        Some("completed")
    );
    let stream_replies = ev
        .iter()
        .filter(|e| matches!(&***e, Event::Message(m) if m.direction == rpctap::events::Direction::ServerToClient && m.exchange == streamed[0].exchange))
        .count();
    assert_eq!(stream_replies, 5);

    drop(p.stop);
    p.served.await.unwrap();
    let c = check_recording(&file);
    assert_eq!(c.exit, Some(0), "{pair}: {}", c.stdout);
    assert!(c.codes.is_empty(), "{pair}: {:?}", c.codes);
    // Matched: every call but the cancelled task's, whose outcome is the task's (as for MCP tasks).
    assert_eq!(c.matched, cs.len() as u64 - 1, "{}", c.stdout);

    // Replayed against the agent at the recorded pace: every call as recorded, the ids and times
    // the agent made up anew learnt (later requests name the agent's new task ids).
    let out = rpctap()
        .args([
            "replay",
            file.to_str().unwrap(),
            "--target",
            &format!("http://{up}"),
        ])
        .args(["--pace", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{pair}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["failed"], 0, "{pair}: {report}");
    assert_eq!(report["passed"], requests as u64, "{pair}: {report}");
    assert!(out.status.success(), "{pair}");

    // The agent API: the card the session fetched, and each call's task.
    let mut api = LineProc::spawn(rpctap().arg("mcp").stderr(std::process::Stdio::null()));
    api.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
    api.reply(1);
    api.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let call = |tool: &str, n: u32| {
        let args = json!({"session": file.to_str().unwrap()});
        json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": tool, "arguments": args}}).to_string()
    };
    api.send(&call("stats", 2));
    let stats: serde_json::Value = serde_json::from_str(&api.reply(2)).unwrap();
    let cards = &stats["result"]["structuredContent"]["agent_cards"];
    assert_eq!(cards[0]["name"], "rpctap test agent", "{pair}: {stats}");
    assert_eq!(cards[0]["skills"], json!(["stories"]));
    // One row per method, not one per task.
    let names: Vec<&str> = stats["result"]["structuredContent"]["methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["method"].as_str())
        .collect();
    assert_eq!(
        names,
        {
            let mut want = [
                m("CancelTask"),
                m("GetTask"),
                m("SendMessage"),
                m("SendStreamingMessage"),
                m("SubscribeToTask"),
            ];
            want.sort();
            want
        },
        "{pair}"
    );
    api.send(&call("list_calls", 3));
    let listed: serde_json::Value = serde_json::from_str(&api.reply(3)).unwrap();
    let with_task = listed["result"]["structuredContent"]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["task"]["id"].is_string())
        .count();
    assert!(with_task >= 3, "{pair}: {listed}");
    // A conversation is a session to the filter: the resumed task's calls, by its `contextId`.
    let ctx = asked.context.as_deref().unwrap();
    let args = json!({"session": file.to_str().unwrap(), "filter": format!("session:a2a:{ctx}")});
    api.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "list_calls", "arguments": args}}).to_string());
    let one: serde_json::Value = serde_json::from_str(&api.reply(4)).unwrap();
    let in_it = one["result"]["structuredContent"]["calls"]
        .as_array()
        .unwrap();
    assert!(
        in_it.len() >= 2,
        "{pair}: the message that made the task and the one that resumed it: {one}"
    );
    assert!(in_it.iter().all(|c| c["context"] == ctx), "{pair}: {one}");
    drop(api);

    // Mocked: the recording serves the same client the same answers (its card, its stream).
    let (_mock, addrs, _) = spawn_with_banner(
        rpctap()
            .args(["mock", file.to_str().unwrap(), "--listen", "127.0.0.1:0"])
            .stdout(std::process::Stdio::null()),
        &[" on http://"],
    );
    let mocked = run(format!("http://{}", addrs[0])).await;
    assert_eq!(mocked, via, "{pair}: the mock answers as the agent did");
}

/// rpctap's own errors say so (`error.data.rpctap`), and an A2A request's keep off A2A's codes:
/// with the classic codes the SDK reads rpctap's rate-limit refusal (-32001) as the agent's
/// `TaskNotFoundError`; by default it gets -32091, which it reports as the plain JSON-RPC error it
/// is. The upstream unreachable: -32093 for an A2A call, -32003 for an MCP one, each with its
/// `data.rpctap`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpctaps_own_errors_say_so_and_keep_off_a2as_codes() {
    use rpctap::rpc::own::Range;
    let (_agent, up) = a2a_agent(&[]);
    let mut seen = Vec::new();
    for range in [None, Some(Range::Classic)] {
        let flags: rpctap::cli::ProxyFlags = rpctap::cli::SharedFlags {
            limits: vec!["SendMessage=1/h".into()],
            error_codes: range,
            ..Default::default()
        }
        .into();
        let p = start_proxy_flags(&format!("http://{up}"), flags).await;
        let out = a2a_client_with(format!("http://{}", p.addr), &["refused"]).await;
        assert_eq!(out["first"], "message", "{out}");
        seen.push(out["second"].as_str().unwrap().to_string());
    }
    assert!(
        seen[0].starts_with("A2AClientError") && seen[0].contains("-32091"),
        "{seen:?}"
    );
    assert!(seen[1].starts_with("TaskNotFoundError"), "{seen:?}");

    // Nothing listens upstream: 502, each error rpctap's.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let p = start_proxy_flags(&dead, rpctap::cli::ProxyFlags::default()).await;
    for (body, code) in [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}"#,
            -32093,
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"message/send","params":{}}"#,
            -32093,
        ),
        (r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#, -32003),
    ] {
        let r = post_json(p.addr, "/a2a", body).await;
        assert_eq!(r.status.as_u16(), 502, "{body}");
        let v = r.json();
        assert_eq!(v["error"]["code"], code, "{v}");
        assert_eq!(
            v["error"]["data"]["rpctap"]["what"], "upstream_unreachable",
            "{v}"
        );
        assert_eq!(v["error"]["data"]["rpctap"]["side"], "upstream", "{v}");
    }
}

/// Limits and faults match an A2A message by the skill its metadata names (`skill`), as MCP's by
/// tool: against the SDK's agent, a `[[limit]]` on one skill refuses its second message and
/// lets the others through, a `--fault` on another answers in the agent's place, and a message
/// naming no skill matches neither. A skill the agent's card does not declare is `A2A_CARD`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_faults_match_an_a2a_message_by_its_skill() {
    let (_agent, up) = a2a_agent(&[]);
    let dir = Scratch::new("a2a-skill");
    let config = dir.join("rpctap.toml");
    std::fs::write(
        &config,
        "[[limit]]\nname = \"stories once\"\nskill = \"stor*\"\nrate = \"1/h\"\n",
    )
    .unwrap();
    let flags: rpctap::cli::ProxyFlags = rpctap::cli::SharedFlags {
        config: Some(config),
        faults: vec!["skill=translate,error=-32042:no translations today".into()],
        ..Default::default()
    }
    .into();
    let mut p = start_proxy_flags(&format!("http://{up}"), flags).await;
    // The card, fetched through rpctap: its one skill is `stories`.
    let card = send(
        p.addr,
        "GET",
        "/.well-known/agent-card.json",
        &[],
        String::new(),
    )
    .await;
    assert_eq!(card.status.as_u16(), 200);
    let send = |n: u32, meta: serde_json::Value| {
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": {
            "messageId": format!("m{n}"), "role": "ROLE_USER",
            "parts": [{"text": format!("echo {n}")}], "metadata": meta}}});
        post_a2a(p.addr, "/a2a", Box::leak(body.to_string().into_boxed_str()))
    };
    let answered = |v: &serde_json::Value| v["result"]["message"]["parts"][0]["text"].clone();
    // The limited skill: once, then refused by rpctap (its own code for an A2A call).
    let v = send(1, json!({"skill": "stories"})).await.json();
    assert_eq!(answered(&v), "1", "{v}");
    let v = send(2, json!({"skill": "stories"})).await.json();
    assert_eq!(v["error"]["code"], -32091, "{v}");
    assert_eq!(v["error"]["data"]["limit"], "stories once", "{v}");
    // Another spelling of the key, another skill: the fault answers in the agent's place.
    let v = send(3, json!({"skillId": "translate"})).await.json();
    assert_eq!(v["error"]["code"], -32042, "{v}");
    assert_eq!(v["error"]["message"], "no translations today", "{v}");
    // No skill named, or one no rule names: the agent answers.
    for (n, meta) in [(4, json!({})), (5, json!({"skill_id": "weather"}))] {
        let v = send(n, meta).await.json();
        assert_eq!(answered(&v), n.to_string(), "{v}");
    }
    // The skills the card does not declare, flagged on their messages; the declared one not.
    let mut flagged: Vec<_> = anomalies(&p.drain().await)
        .into_iter()
        .filter(|(code, _)| code == "A2A_CARD")
        .filter_map(|(_, id)| id)
        .collect();
    flagged.sort();
    assert_eq!(flagged, ["3", "5"]);
}

/// Replaying a client that polled a task: a poll that found the task working when recorded may
/// find it ended when replayed (the agent's pace is not the recording's) — no difference; the
/// poll that found it ended is judged as any reply (a task that fails where it completed does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_poll_may_find_its_task_further_on_but_a_different_end_fails() {
    let dir = Scratch::new("a2a-replay-poll");
    // An agent whose task `t1` is working for `working` polls, then in state `end`.
    let agent = |working: u32, end: &'static str| {
        let polls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        start_upstream(move |_parts, body| {
            let polls = polls.clone();
            Box::pin(async move {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let state = if v["method"] == "SendMessage"
                    || polls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < working
                {
                    "TASK_STATE_WORKING"
                } else {
                    end
                };
                let task = json!({"id": "t1", "contextId": "c1", "status": {"state": state}});
                let result = if v["method"] == "SendMessage" {
                    json!({"task": task})
                } else {
                    task
                };
                json_reply(
                    200,
                    &json!({"jsonrpc": "2.0", "id": v["id"], "result": result}).to_string(),
                )
            })
        })
    };
    let (up, _stop) = agent(1, "TASK_STATE_COMPLETED").await;
    let file = dir.join("polls.jsonl");
    let p = start_proxy_flags(&format!("http://{up}"), record_flags(&file)).await;
    let send = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"slow"}]}}}"#;
    post_a2a(p.addr, "/a2a", send).await;
    for id in [2, 3] {
        let get =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"GetTask","params":{{"id":"t1"}}}}"#);
        post_a2a(p.addr, "/a2a", &get).await;
    }
    drop(p.stop);
    p.served.await.unwrap();
    let replay = |target: SocketAddr| {
        let out = rpctap()
            .args(["replay", file.to_str().unwrap(), "--json"])
            .args(["--target", &format!("http://{target}")])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    // The agent is faster now: both polls find the task completed.
    let (fast, _s1) = agent(0, "TASK_STATE_COMPLETED").await;
    let report = replay(fast);
    assert_eq!(
        (report["passed"].as_u64(), report["failed"].as_u64()),
        (Some(3), Some(0)),
        "{report}"
    );
    // The task fails where it completed: the poll that found its end fails.
    let (failing, _s2) = agent(0, "TASK_STATE_FAILED").await;
    let report = replay(failing);
    assert_eq!(report["failed"], 1, "{report}");
    assert_eq!(report["calls"][2]["pass"], false, "{report}");
    assert_eq!(report["calls"][1]["pass"], true, "{report}");
}

/// A POST of an A2A 1.0 request (`A2A-Version: 1.0`, as the SDKs send it).
async fn post_a2a(addr: SocketAddr, path: &str, body: &str) -> Reply {
    let headers = [("content-type", "application/json"), ("a2a-version", "1.0")];
    send(addr, "POST", path, &headers, body.to_string()).await
}

/// A misbehaving A2A server and client (test code): a task that comes back to life after it
/// completed and a stream that goes on after its last event (`A2A_TASK_STATE`), malformed parts
/// in a stream event and in a task's artifact (`A2A_PART`), a push URL in clear
/// (`A2A_PUSH_URL`), a stream from an agent whose card says it does not stream (`A2A_CARD`),
/// methods named as another version names them and an answer to a version the card does not
/// list (`A2A_VERSION`), a task it does not have answered with another's data (`A2A_TASK_ID`):
/// each caught once, live and in `check`, and nothing else; the card is
/// an event of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_rules_catch_a_misbehaving_agent_and_client_live_and_in_check() {
    let dir = Scratch::new("a2a-bad");
    let polls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (up, _stop) = start_upstream(move |parts, body| {
        let polls = polls.clone();
        Box::pin(async move {
            if parts.method == http::Method::GET {
                // Its card says it does not stream.
                let card = json!({"name": "bad agent", "version": "0.1",
                    "supportedInterfaces": [{"url": "http://x/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                    "capabilities": {"streaming": false}, "skills": [{"id": "s1", "name": "s"}]});
                return json_reply(200, &card.to_string());
            }
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let id = v["id"].clone();
            let task = |id: &str, state: &str| {
                json!({"id": id, "contextId": "c1", "status": {"state": state}})
            };
            let one = |result: serde_json::Value| {
                json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
            };
            let method = v["method"].as_str().unwrap();
            let said = v["params"]["message"]["parts"][0]["text"].as_str();
            match (method, v["params"]["id"].as_str()) {
                ("SendMessage" | "message/send", _) if said == Some("v") => json_reply(
                    200,
                    &one(json!({"message": {"messageId": "m9", "role": "ROLE_AGENT", "parts": [{"text": "ok"}]}})),
                ),
                ("SendMessage", _) => {
                    json_reply(200, &one(json!({"task": task("t1", "TASK_STATE_WORKING")})))
                }
                ("CreateTaskPushNotificationConfig", _) => {
                    json_reply(200, &one(v["params"].clone()))
                }
                // A task it does not have, answered with another one's data.
                ("GetTask", Some("t9")) => {
                    json_reply(200, &one(task("t1", "TASK_STATE_COMPLETED")))
                }
                ("GetTask", Some("t3")) => {
                    let mut t = task("t3", "TASK_STATE_COMPLETED");
                    t["artifacts"] = json!([{"artifactId": "a", "parts": [{"text": "x", "data": {}}]}]);
                    json_reply(200, &one(t))
                }
                ("GetTask", _) => {
                    // Completed, then working again.
                    let n = polls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let state = if n == 0 {
                        "TASK_STATE_COMPLETED"
                    } else {
                        "TASK_STATE_WORKING"
                    };
                    json_reply(200, &one(task("t1", state)))
                }
                _ => {
                    let up = |state: &str| {
                        one(json!({"statusUpdate": {"taskId": "t2", "contextId": "c1", "status": {"state": state}}}))
                    };
                    let bad_part = one(json!({"artifactUpdate": {"taskId": "t2", "artifact": {"artifactId": "a", "parts": [{}]}}}));
                    let events = [
                        up("TASK_STATE_WORKING"),
                        bad_part,
                        up("TASK_STATE_COMPLETED"),
                        up("TASK_STATE_WORKING"),
                    ];
                    let refs: Vec<&str> = events.iter().map(String::as_str).collect();
                    sse_reply(&refs)
                }
            }
        })
    })
    .await;
    let file = dir.join("bad.jsonl");
    let mut p = start_proxy_flags(&format!("http://{up}"), record_flags(&file)).await;
    let card = http_text(p.addr, "/.well-known/agent-card.json").await;
    assert!(card.contains("bad agent"), "{card}");
    let send = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"go"}]}}}"#;
    post_a2a(p.addr, "/a2a", send).await;
    for id in [2, 3] {
        let get =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"GetTask","params":{{"id":"t1"}}}}"#);
        post_a2a(p.addr, "/a2a", &get).await;
    }
    let stream = r#"{"jsonrpc":"2.0","id":4,"method":"SendStreamingMessage","params":{"message":{"messageId":"m2","role":"ROLE_USER","parts":[{"text":"go"}]}}}"#;
    let r = post_a2a(p.addr, "/a2a", stream).await;
    assert_eq!(
        sse_data(&r.text()).len(),
        4,
        "every event reaches the client"
    );
    // Byte for byte the stream the agent sent (asked of it directly, the same request).
    let direct = post_a2a(up, "/a2a", stream).await;
    assert_eq!(
        r.body, direct.body,
        "the stream through rpctap is the agent's"
    );
    let push = r#"{"jsonrpc":"2.0","id":5,"method":"CreateTaskPushNotificationConfig","params":{"taskId":"t1","url":"http://hooks.example/a2a","token":"hook-token"}}"#;
    post_a2a(p.addr, "/a2a", push).await;
    let get = r#"{"jsonrpc":"2.0","id":6,"method":"GetTask","params":{"id":"t3"}}"#;
    post_a2a(p.addr, "/a2a", get).await;
    // 0.3's name under 1.0; 1.0's name with no version (0.3), which the agent answers though its
    // card lists only 1.0.
    let legacy = r#"{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message":{"messageId":"m7","role":"user","parts":[{"kind":"text","text":"v"}]}}}"#;
    post_a2a(p.addr, "/a2a", legacy).await;
    let unversioned = r#"{"jsonrpc":"2.0","id":8,"method":"SendMessage","params":{"message":{"messageId":"m8","role":"ROLE_USER","parts":[{"text":"v"}]}}}"#;
    post_json(p.addr, "/a2a", unversioned).await;
    let other = r#"{"jsonrpc":"2.0","id":9,"method":"GetTask","params":{"id":"t9"}}"#;
    post_a2a(p.addr, "/a2a", other).await;
    let ev = p.drain().await;
    let mut found = anomalies(&ev);
    found.sort();
    let want: Vec<(String, Option<String>)> = [
        ("A2A_CARD", "4"),
        ("A2A_PART", "4"),
        ("A2A_PART", "6"),
        ("A2A_PUSH_URL", "5"),
        ("A2A_TASK_ID", "9"),
        ("A2A_TASK_STATE", "3"),
        ("A2A_TASK_STATE", "4"),
        ("A2A_VERSION", "7"),
        ("A2A_VERSION", "8"),
        ("A2A_VERSION", "8"),
    ]
    .iter()
    .map(|(c, id)| (c.to_string(), Some(id.to_string())))
    .collect();
    assert_eq!(found, want, "{found:?}");
    // The task's row ended when the first poll showed it completed.
    let cs = calls(&ev);
    let created = cs.iter().find(|c| c.id.to_string() == "1").unwrap();
    assert_eq!(created.outcome, Outcome::Result);
    assert_eq!(
        created.task.as_ref().unwrap().status.as_deref(),
        Some("completed")
    );
    // The card: its event, what the log and the dashboard say of it.
    let cards: Vec<_> = ev
        .iter()
        .filter_map(|e| match &**e {
            Event::Http(rpctap::events::HttpEvent::AgentCard { path, card, .. }) => {
                Some((path.clone(), card.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(cards.len(), 1, "{cards:?}");
    assert_eq!(cards[0].0, "/.well-known/agent-card.json");
    assert_eq!(
        rpctap::inspect::a2a::CardFacts::read(&cards[0].1).describe(),
        "bad agent 0.1 (A2A 1.0; no streaming; 1 skill: s1)"
    );
    // The stream's call carries its events' findings.
    let streamed = cs.iter().find(|c| c.id.to_string() == "4").unwrap();
    assert!(streamed.anomalies.contains(&"A2A_PART"), "{streamed:?}");
    drop(p.stop);
    p.served.await.unwrap();
    let c = check_recording(&file);
    assert_eq!(c.exit, Some(1), "{}", c.stdout);
    assert_eq!(c.codes, live_codes(&file), "{}", c.stdout);
    let mut checked: Vec<&String> = c.codes.values().flatten().collect();
    checked.sort();
    assert_eq!(
        checked,
        [
            "A2A_CARD",
            "A2A_PART",
            "A2A_PART",
            "A2A_PUSH_URL",
            "A2A_TASK_ID",
            "A2A_TASK_STATE",
            "A2A_TASK_STATE",
            "A2A_VERSION",
            "A2A_VERSION",
            "A2A_VERSION"
        ]
    );
}

/// An agent whose card says it does not stream: the SDK client keeps to plain messages, and
/// nothing is flagged (the `A2A_CARD` rule judges what the agent does, not what it declares).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_does_not_stream_is_the_same_through_rpctap_and_clean() {
    let (_agent, up) = a2a_agent(&["--no-streaming"]);
    let mut p = start_proxy(&format!("http://{up}")).await;
    let direct = a2a_client(format!("http://{up}")).await;
    let via = a2a_client(format!("http://{}", p.addr)).await;
    assert_eq!(direct, via);
    assert_eq!(via["card"]["streaming"], false);
    assert!(via.get("stream").is_none(), "{via}");
    let ev = p.drain().await;
    assert!(anomalies(&ev).is_empty(), "{:?}", anomalies(&ev));
    assert!(!calls(&ev)
        .iter()
        .any(|c| &*c.method == "SendStreamingMessage"));
}

/// A2A calls as OpenTelemetry spans: the JSON-RPC attributes and A2A's own — the method, the
/// task, its state at the call's end, its `contextId` as the conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_calls_are_spans_with_a2as_attributes() {
    let dir = Scratch::new("a2a-otel");
    let (_r, collector, out) = crate::otel::receiver(&dir);
    wait_listening(collector).await;
    let (_agent, up) = a2a_agent(&[]);
    let flags: rpctap::cli::ProxyFlags = rpctap::cli::SharedFlags {
        otlp: Some(format!("http://{collector}")),
        ..Default::default()
    }
    .into();
    let p = start_proxy_flags(&format!("http://{up}"), flags).await;
    a2a_client(format!("http://{}", p.addr)).await;
    drop(p.stop);
    p.served.await.unwrap();
    // echo, stream, slow, its polls, wait, cancel, ask, resume, fail.
    let spans = crate::otel::spans(&out, 10).await;
    let attr = |s: &serde_json::Value, k: &str| s["attributes"][k].as_str().map(str::to_string);
    let of =
        |m: &str| -> Vec<&serde_json::Value> { spans.iter().filter(|s| s["name"] == m).collect() };
    for s in &spans {
        assert_eq!(
            attr(s, "rpc.system.name").as_deref(),
            Some("jsonrpc"),
            "{s}"
        );
        assert_eq!(
            attr(s, "a2a.protocol.version").as_deref(),
            Some("1.0"),
            "{s}"
        );
        assert_eq!(
            attr(s, "a2a.method.name"),
            s["name"].as_str().map(str::to_string)
        );
    }
    let streamed = of("SendStreamingMessage");
    assert_eq!(streamed.len(), 1);
    let cancelled: Vec<_> = spans
        .iter()
        .filter(|s| attr(s, "a2a.task.state").as_deref() == Some("canceled"))
        .collect();
    // The task's row (its creating message) and the cancel itself.
    assert_eq!(cancelled.len(), 2, "{spans:?}");
    let task_ids: Vec<_> = cancelled.iter().map(|s| attr(s, "a2a.task.id")).collect();
    assert!(
        task_ids[0].is_some() && task_ids[0] == task_ids[1],
        "{task_ids:?}"
    );
    assert!(cancelled
        .iter()
        .all(|s| attr(s, "gen_ai.conversation.id").is_some()));
    let polls = of("GetTask");
    assert!(!polls.is_empty());
    assert!(polls.iter().all(|s| attr(s, "a2a.task.id").is_some()));
    // Completed: the polled task's row, the subscribed-to task's row, the asking task's row and
    // the message that resumed it; the subscription itself, with its task's state at its end.
    let completed = of("SendMessage")
        .into_iter()
        .filter(|s| attr(s, "a2a.task.state").as_deref() == Some("completed"))
        .count();
    assert_eq!(completed, 4, "{spans:?}");
    let subscribed = of("SubscribeToTask");
    assert_eq!(subscribed.len(), 1, "{spans:?}");
    assert_eq!(
        attr(subscribed[0], "a2a.task.state").as_deref(),
        Some("completed")
    );
}

/// An agent that calls a tool over MCP inside its A2A call (the SDK agent's `add`, asking the
/// MCP Python SDK server's `add` tool through a second rpctap): both rpctaps joined to one hub
/// (`--hub`), so one `rpctap sessions` (and `watch`) lists both, each protocol read as such —
/// the A2A call's span with A2A's attributes, the tool call's with MCP's — and one trace ties
/// them together: rpctap in front of the agent propagates its context (`--otlp-propagate`), the
/// agent passes it on, and the tool call's span hangs under the A2A call's upstream leg.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_mcp_tool_call_is_in_the_trace_of_its_a2a_call() {
    let dir = Scratch::new("a2a-mcp");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (_r, collector, out) = crate::otel::receiver(&dir);
    wait_listening(collector).await;
    // `rpctap proxy --hub` in front of `upstream`, with `home` as the machine's home.
    let proxy = |label: &str, upstream: String, propagate: bool| {
        let mut cmd = rpctap();
        cmd.env("HOME", &home)
            .env_remove("RPCTAP_HOME")
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_RUNTIME_DIR")
            .args([
                "proxy",
                "--hub",
                "--label",
                label,
                "--listen",
                "127.0.0.1:0",
            ])
            .args(["--no-tui", "--log", "off", "--upstream", &upstream])
            .args(["--otlp", &format!("http://{collector}")])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        if propagate {
            cmd.arg("--otlp-propagate");
        }
        let (p, addrs, _) = spawn_with_banner(&mut cmd, &["proxy on http://"]);
        (p, addrs[0])
    };
    // The MCP server (the Python SDK 2.x, stateless JSON) behind one rpctap.
    let py = installed("mcp2", &["mcp>=2,<3"]).join("bin/python");
    let port = free_port();
    let _mcp = Proc::spawn(
        std::process::Command::new(py)
            .arg(root().join("tests/interop/mcp2_server.py"))
            .args(["stateless-json", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    wait_listening(([127, 0, 0, 1], port).into()).await;
    let (mut tools, tools_addr) = proxy("tools", format!("http://127.0.0.1:{port}"), false);
    // The agent, calling its tools through that rpctap, behind another.
    let env = installed("a2a", A2A);
    let (_agent, addrs, _) = spawn_with_banner(
        std::process::Command::new(env.join("bin/python"))
            .arg(root().join("tests/interop/a2a_agent.py"))
            .env("MCP_URL", format!("http://{tools_addr}/mcp"))
            .stdout(std::process::Stdio::null()),
        &["a2a agent on http://"],
    );
    let (mut front, front_addr) = proxy("agent", format!("http://{}", addrs[0]), true);
    let send = r#"{"jsonrpc":"2.0","id":"m1","method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"add 2 3"}]}}}"#;
    let r = post_a2a(front_addr, "/a2a", send).await;
    assert_eq!(
        r.json()["result"]["message"]["parts"][0]["text"],
        "5",
        "{}",
        r.text()
    );
    // The A2A call (its SERVER span and its upstream leg) and the tool call.
    let spans = crate::otel::spans(&out, 3).await;
    let one = |name: &str, kind: i64| -> &serde_json::Value {
        let found: Vec<_> = spans
            .iter()
            .filter(|s| s["name"] == name && s["kind"] == kind)
            .collect();
        assert_eq!(found.len(), 1, "{name} {kind}: {spans:?}");
        found[0]
    };
    let (server, client) = (2, 3);
    let a2a = one("SendMessage", server);
    let leg = one("SendMessage", client);
    let tool = one("tools/call add", server);
    assert_eq!(a2a["attributes"]["a2a.method.name"], "SendMessage");
    assert_eq!(tool["attributes"]["mcp.method.name"], "tools/call");
    assert_eq!(tool["attributes"]["gen_ai.tool.name"], "add");
    assert_eq!(leg["parent_span_id"], a2a["span_id"]);
    assert_eq!(tool["trace_id"], a2a["trace_id"], "one trace: {spans:?}");
    assert_eq!(tool["parent_span_id"], leg["span_id"]);
    // One hub: both proxies' sessions, each with its protocol's call.
    front.term();
    tools.term();
    let out = rpctap()
        .env("HOME", &home)
        .env_remove("RPCTAP_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_RUNTIME_DIR")
        .args(["sessions", "--json"])
        .output()
        .unwrap();
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut seen: Vec<(String, bool)> = list
        .iter()
        .map(|s| {
            let text = std::fs::read_to_string(s["recording"].as_str().unwrap()).unwrap();
            let call = match s["label"].as_str().unwrap() {
                "agent" => r#""method":"SendMessage""#,
                _ => r#""method":"tools/call""#,
            };
            (
                s["label"].as_str().unwrap().to_string(),
                text.contains(call),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [("agent".to_string(), true), ("tools".to_string(), true)],
        "{list:#?}"
    );
    // One dashboard: `rpctap watch` (in a terminal) lists both servers, and its calls view holds
    // the A2A call and the MCP tool call it made.
    tokio::task::spawn_blocking(move || {
        let t = crate::hub::tmux_at_home(&home);
        let bin = env!("CARGO_BIN_EXE_rpctap");
        t.cmd(&["send-keys", "-t", "t", &format!("{bin} watch"), "Enter"]);
        let screen = t.wait_until(std::time::Duration::from_secs(10), |s| {
            ["agent", "tools"]
                .iter()
                .all(|l| line_with(s, l).contains("ended"))
        });
        for l in ["agent", "tools"] {
            assert!(line_with(&screen, l).contains("ended"), "{l}:\n{screen}");
        }
        t.cmd(&["send-keys", "-t", "t", "Tab", "Tab"]);
        let screen = t.wait_until(std::time::Duration::from_secs(10), |s| {
            s.contains("SendMessage") && s.contains("tools/call add")
        });
        assert!(
            screen.contains("SendMessage") && screen.contains("tools/call add"),
            "{screen}"
        );
        t.cmd(&["send-keys", "-t", "t", "q"]);
    })
    .await
    .unwrap();
}

/// A JSON-RPC API of its own that happens to name methods as A2A does (`SendMessage`,
/// `GetTask`), with no `A2A-Version`, no agent card and no A2A shapes: nothing A2A's is said of
/// it — no finding, no task, the calls as any JSON-RPC calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_rpc_api_that_names_methods_as_a2a_does_is_not_judged_as_a2a() {
    let (up, _stop) = start_upstream(|_parts, body| {
        Box::pin(async move {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let result = match v["method"].as_str().unwrap() {
                "SendMessage" => {
                    json!({"message": "sent", "task": {"id": "t1", "status": {"state": "working"}}})
                }
                _ => json!({"id": "t1", "status": "queued"}),
            };
            json_reply(
                200,
                &json!({"jsonrpc": "2.0", "id": v["id"], "result": result}).to_string(),
            )
        })
    })
    .await;
    let mut p = start_proxy(&format!("http://{up}")).await;
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":"hello","to":"bob"}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":"t1"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"SendStreamingMessage","params":{"message":"x"}}"#,
    ] {
        assert_eq!(post_json(p.addr, "/rpc", body).await.status.as_u16(), 200);
    }
    let ev = p.drain().await;
    assert!(anomalies(&ev).is_empty(), "{:?}", anomalies(&ev));
    let cs = calls(&ev);
    assert_eq!(cs.len(), 3, "{cs:?}");
    assert!(
        cs.iter()
            .all(|c| c.outcome == Outcome::Result && c.task.is_none() && c.target.is_none()),
        "{cs:?}"
    );
}
