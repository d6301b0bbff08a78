//! Trust the wire (issue 61): the real binary between raw sockets on both sides — an upstream
//! that answers with every ambiguous framing, a client that sends what a browser or an attacker
//! would — and what reaches the other side checked byte for byte.

use crate::common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a raw upstream saw: each request's head and body, and how many connections it took.
#[derive(Default)]
struct Seen {
    requests: Vec<(String, String)>,
    connections: usize,
}

/// An upstream on a thread of its own that answers every request with `answer(head, body)`'s
/// bytes as they are (then closes the connection when the answer says `close`). Stops with the
/// test process; each connection's reads time out after 10 s.
fn raw_upstream(
    answer: impl Fn(&str, &str) -> (Vec<u8>, bool) + Send + Sync + 'static,
) -> (SocketAddr, Arc<Mutex<Seen>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (answer, seen2) = (Arc::new(answer), seen.clone());
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            seen2.lock().unwrap().connections += 1;
            let (answer, seen) = (answer.clone(), seen2.clone());
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; content_length(&head)];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let body = String::from_utf8_lossy(&body).into_owned();
                    seen.lock()
                        .unwrap()
                        .requests
                        .push((head.clone(), body.clone()));
                    let (bytes, close) = answer(&head, &body);
                    if w.write_all(&bytes).is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// One response read off a client connection by its framing (length, chunked — decoded — or
/// to the close): its head and body; `None` when the connection ends before a head.
fn read_one(r: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if lower.contains("transfer-encoding: chunked") {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if lower.contains("content-length:") {
        body = vec![0; content_length(&head)];
        r.read_exact(&mut body).ok()?;
    } else {
        r.read_to_end(&mut body).ok()?;
    }
    Some((head, body))
}

fn client(addr: SocketAddr) -> (TcpStream, BufReader<TcpStream>) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn post(path: &str, extra: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn call(id: u32, method: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"name":"t"}}}}"#)
}

/// `rpctap proxy` in front of `up`, with `extra` flags; its process and listen address.
fn proxy(up: SocketAddr, extra: &[&str]) -> (Proc, SocketAddr) {
    let mut cmd = proxy_cmd(&format!("http://{up}"), false);
    cmd.args(extra);
    let (p, addrs, _rest) = spawn_with_banner(&mut cmd, &["proxy on http://"]);
    (p, addrs[0])
}

/// The 38-byte JSON-RPC reply the forging upstream frames in chunks.
const REPLY: &str = r#"{"jsonrpc":"2.0","id":1,"result":"ok"}"#;

fn chunked(body: &str) -> String {
    let (a, b) = body.split_at(10);
    format!("{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n", a.len(), b.len())
}

/// Every framing an upstream can get wrong: the client gets exactly the reply the upstream's
/// framing delimits (RFC 9112 §6.3: Transfer-Encoding overrides Content-Length), framed by
/// rpctap, and the next reply on the same connection is its own — never bytes of the first.
#[test]
fn an_upstream_cannot_forge_or_swallow_the_clients_next_response() {
    assert_eq!(REPLY.len(), 38);
    for (case, head) in [
        ("cl5", "content-length: 5\r\ntransfer-encoding: chunked\r\n"),
        (
            "cl200",
            "content-length: 200\r\ntransfer-encoding: chunked\r\n",
        ),
        (
            "te-first",
            "transfer-encoding: chunked\r\ncontent-length: 5\r\n",
        ),
    ] {
        let (up, seen) = raw_upstream(move |_, body| {
            if body.contains("\"second\"") {
                let b = r#"{"jsonrpc":"2.0","id":2,"result":"second"}"#;
                let r = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{b}", b.len());
                return (r.into_bytes(), false);
            }
            let r = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{head}\r\n{}",
                chunked(REPLY)
            );
            (r.into_bytes(), false)
        });
        let (_p, addr) = proxy(up, &[]);
        let (mut w, mut r) = client(addr);
        w.write_all(post("/rpc", "", &call(1, "first")).as_bytes())
            .unwrap();
        let (h1, b1) = read_one(&mut r).expect(case);
        assert!(h1.starts_with("HTTP/1.1 200"), "{case}: {h1}");
        assert_eq!(String::from_utf8_lossy(&b1), REPLY, "{case}: {h1}");
        let h1l = h1.to_ascii_lowercase();
        assert!(
            !h1l.contains("content-length: 5\r") && !h1l.contains("content-length: 200"),
            "{case}: the upstream's length went on: {h1}"
        );
        w.write_all(post("/rpc", "", &call(2, "second")).as_bytes())
            .unwrap();
        let (h2, b2) = read_one(&mut r).expect(case);
        assert!(h2.starts_with("HTTP/1.1 200"), "{case}: {h2}");
        assert_eq!(
            String::from_utf8_lossy(&b2),
            r#"{"jsonrpc":"2.0","id":2,"result":"second"}"#,
            "{case}"
        );
        // A reply that said both is not one to trust its connection after.
        let s = seen.lock().unwrap();
        assert_eq!(s.requests.len(), 2, "{case}");
        assert_eq!(
            s.connections, 2,
            "{case}: the upstream connection was reused"
        );
    }
}

/// A transfer coding other than chunked beside a length: the body runs to the close (the
/// length says nothing), and the client gets all of it.
#[test]
fn a_coding_beside_a_length_reads_to_the_close() {
    let (up, _seen) = raw_upstream(|_, _| {
        let r = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: gzip\r\ncontent-length: 5\r\n\r\n{REPLY}"
        );
        (r.into_bytes(), true)
    });
    let (_p, addr) = proxy(up, &[]);
    let (mut w, mut r) = client(addr);
    w.write_all(post("/rpc", "", &call(1, "first")).as_bytes())
        .unwrap();
    let (h, b) = read_one(&mut r).unwrap();
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(
        !h.to_ascii_lowercase().contains("content-length: 5\r"),
        "{h}"
    );
    assert_eq!(String::from_utf8_lossy(&b), REPLY);
}

/// Lengths that are not one value of plain digits: a list of one value is passed on as that
/// value (rpctap's own header); a sign, different values or anything else is a broken reply,
/// a 502 with a JSON-RPC error for the call.
#[test]
fn invalid_lengths_are_a_502_and_a_list_of_one_value_is_rpctaps_own() {
    for (value, ok) in [
        ("38, 38", true),
        ("+38", false),
        ("38, 39", false),
        ("0x26", false),
        ("38 38", false),
    ] {
        let (up, _seen) = raw_upstream(move |_, _| {
            let r = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {value}\r\n\r\n{REPLY}"
            );
            (r.into_bytes(), true)
        });
        let (_p, addr) = proxy(up, &[]);
        let (mut w, mut r) = client(addr);
        w.write_all(post("/rpc", "", &call(1, "first")).as_bytes())
            .unwrap();
        let (h, b) = read_one(&mut r).unwrap();
        let b = String::from_utf8_lossy(&b).into_owned();
        if ok {
            assert!(h.starts_with("HTTP/1.1 200"), "{value}: {h}");
            assert!(
                h.to_ascii_lowercase().contains("content-length: 38\r\n"),
                "{value}: {h}"
            );
            assert_eq!(b, REPLY, "{value}");
        } else {
            assert!(h.starts_with("HTTP/1.1 502"), "{value}: {h}");
            let v: serde_json::Value = serde_json::from_str(&b).expect(&b);
            assert_eq!(v["id"], 1, "{value}: {b}");
            assert!(v["error"]["code"].is_i64(), "{value}: {b}");
        }
    }
}

/// A `Transfer-Encoding` that is not ASCII text before its `chunked` (found by `http1_diff` at
/// 5.4 million executions): hyper reads such a reply to the close, a byte-wise reading stops at
/// the last chunk and would take what follows for the next reply. Refused: a 502 with the call's
/// error, and the forged "next reply" never reaches a client.
#[test]
fn a_coding_that_is_not_text_is_a_502_not_two_readings() {
    let (up, _seen) = raw_upstream(move |_, _| {
        let mut r = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: \xe4a\xd1,chunked\r\n\r\n0\r\n\r\n".to_vec();
        r.extend_from_slice(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{REPLY}",
                REPLY.len()
            )
            .as_bytes(),
        );
        (r, true)
    });
    let (_p, addr) = proxy(up, &[]);
    let (mut w, mut r) = client(addr);
    w.write_all(post("/rpc", "", &call(1, "first")).as_bytes())
        .unwrap();
    let (h, b) = read_one(&mut r).unwrap();
    let b = String::from_utf8_lossy(&b).into_owned();
    assert!(h.starts_with("HTTP/1.1 502"), "{h}{b}");
    let v: serde_json::Value = serde_json::from_str(&b).expect(&b);
    assert_eq!(v["id"], 1, "{b}");
}

/// Two differing `Content-Length` headers: a 502 too (and a second one alike, passed as one).
#[test]
fn two_length_headers_are_one_value_or_a_502() {
    for (heads, ok) in [
        ("content-length: 38\r\ncontent-length: 38\r\n", true),
        ("content-length: 38\r\ncontent-length: 5\r\n", false),
    ] {
        let (up, _seen) = raw_upstream(move |_, _| {
            let r =
                format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{heads}\r\n{REPLY}");
            (r.into_bytes(), true)
        });
        let (_p, addr) = proxy(up, &[]);
        let (mut w, mut r) = client(addr);
        w.write_all(post("/rpc", "", &call(1, "first")).as_bytes())
            .unwrap();
        let (h, b) = read_one(&mut r).unwrap();
        if ok {
            assert!(h.starts_with("HTTP/1.1 200"), "{h}");
            assert_eq!(
                h.to_ascii_lowercase().matches("content-length").count(),
                1,
                "{h}"
            );
            assert_eq!(String::from_utf8_lossy(&b), REPLY);
        } else {
            assert!(h.starts_with("HTTP/1.1 502"), "{h}");
        }
    }
}

/// An upgrade to anything but WebSocket (`h2c`) is not passed on: the upstream never sees the
/// `Upgrade`, the request is handled as the plain JSON-RPC call it carries — inspected and
/// limited — and an upstream that switches anyway is a 502, not a tunnel.
#[test]
fn an_h2c_upgrade_is_a_plain_request_inspected_and_limited() {
    let (up, seen) = raw_upstream(|head, body| {
        if head.to_ascii_lowercase().contains("upgrade") {
            // A server that switches: everything after would be a raw tunnel.
            return (
                b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n"
                    .to_vec(),
                true,
            );
        }
        let id = serde_json::from_str::<serde_json::Value>(body)
            .map(|v| v["id"].clone())
            .unwrap_or_default();
        let b = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[]}}}}"#);
        let r = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{b}",
            b.len()
        );
        (r.into_bytes(), false)
    });
    let (_p, addr) = proxy(up, &["--limit", "tools/call=1/h"]);
    let (mut w, mut r) = client(addr);
    let mut statuses = Vec::new();
    for id in 1..=3 {
        let extra = "connection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n";
        w.write_all(post("/rpc", extra, &call(id, "tools/call")).as_bytes())
            .unwrap();
        let (h, b) = read_one(&mut r).expect("an answer");
        assert!(!h.starts_with("HTTP/1.1 101"), "{h}");
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        statuses.push(v.get("error").is_some());
    }
    // One call ran; the limit refused the other two.
    assert_eq!(statuses, [false, true, true]);
    let s = seen.lock().unwrap();
    assert_eq!(s.requests.len(), 1, "the limit let more through");
    for (head, _) in &s.requests {
        let h = head.to_ascii_lowercase();
        assert!(
            !h.contains("upgrade") && !h.contains("http2-settings"),
            "{head}"
        );
    }
}

/// `rpctap serve` in front of a small stdio server that logs each line it gets to `log` and
/// answers every request with an empty result; `extra` flags before the command.
fn serve_logging(log: &std::path::Path, listen: &str, extra: &[&str]) -> std::process::Command {
    let script = format!(
        r#"
import json, sys
for line in sys.stdin:
    open({log:?}, "a").write(line)
    m = json.loads(line)
    if "id" in m and "method" in m:
        print(json.dumps({{"jsonrpc": "2.0", "id": m["id"], "result": {{}}}}), flush=True)
"#,
        log = log.display().to_string()
    );
    let mut cmd = rpctap();
    cmd.args(["serve", "--listen", listen, "--no-tui", "--log", "off"])
        .args(extra)
        .args(["--", "python3", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    cmd
}

fn raw(addr: SocketAddr, request: &str) -> (String, Vec<u8>) {
    let (mut w, mut r) = client(addr);
    w.write_all(request.as_bytes()).unwrap();
    read_one(&mut r).expect("an answer")
}

fn status(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

const TOOL_CALL: &str =
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm","arguments":{}}}"#;

/// What a web page can send without a preflight — a cross-origin `POST` of `text/plain`, or
/// any request through a rebound name — never reaches `serve`'s server; the listener's own
/// names and origins, and those allowed, do.
#[test]
fn serve_answers_no_web_page_and_no_rebound_name() {
    let dir = Scratch::new("wire-serve");
    let log = dir.join("lines.txt");
    let (_p, addrs, _rest) = spawn_with_banner(
        &mut serve_logging(
            &log,
            "127.0.0.1:0",
            &["--allow-origin", "https://app.example"],
        ),
        &["serve on http://"],
    );
    let addr = addrs[0];
    let port = addr.port();
    let req = |host: Option<&str>, extra: &str, ct: &str| {
        let host = host.map(|h| format!("host: {h}\r\n")).unwrap_or_default();
        format!(
            "POST /mcp HTTP/1.1\r\n{host}content-type: {ct}\r\naccept: application/json, text/event-stream\r\n{extra}content-length: {}\r\n\r\n{TOOL_CALL}",
            TOOL_CALL.len()
        )
    };
    let me = format!("127.0.0.1:{port}");
    let evil_host = format!("evil.example:{port}");
    for (what, request, want) in [
        (
            "a cross-origin text/plain POST",
            req(Some(&me), "origin: http://evil.example\r\n", "text/plain"),
            403,
        ),
        (
            "a foreign origin",
            req(
                Some(&me),
                "origin: http://evil.example\r\n",
                "application/json",
            ),
            403,
        ),
        (
            "another local port's page",
            req(
                Some(&me),
                "origin: http://localhost:3000\r\n",
                "application/json",
            ),
            403,
        ),
        (
            "a rebound name",
            req(Some(&evil_host), "", "application/json"),
            403,
        ),
        (
            "text/plain without an origin",
            req(Some(&me), "", "text/plain"),
            415,
        ),
        (
            "form data",
            req(Some(&me), "", "application/x-www-form-urlencoded"),
            415,
        ),
        ("no host", req(None, "", "application/json"), 400),
        (
            "two hosts",
            req(Some(&me), &format!("host: {me}\r\n"), "application/json"),
            400,
        ),
    ] {
        let (h, _) = raw(addr, &request);
        assert_eq!(status(&h), want, "{what}: {h}");
    }
    // Nothing refused reached the server.
    assert!(!std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("tools/call"));
    for (what, request) in [
        (
            "its own origin",
            req(
                Some(&me),
                &format!("origin: http://127.0.0.1:{port}\r\n"),
                "application/json",
            ),
        ),
        (
            "localhost",
            req(
                Some(&format!("localhost:{port}")),
                &format!("origin: http://localhost:{port}\r\n"),
                "application/json; charset=utf-8",
            ),
        ),
        (
            "an allowed origin",
            req(
                Some(&me),
                "origin: https://app.example\r\n",
                "application/json",
            ),
        ),
        (
            "no origin (not a browser)",
            req(Some(&me), "", "application/json"),
        ),
    ] {
        let (h, _) = raw(addr, &request);
        assert_eq!(status(&h), 200, "{what}: {h}");
    }
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("tools/call"));
}

/// `--auth-token` asks every request for its bearer token; off loopback `serve` will not start
/// without one, naming the flag.
#[test]
fn serve_with_a_token_and_off_loopback() {
    let dir = Scratch::new("wire-serve-token");
    let log = dir.join("lines.txt");
    let mut cmd = serve_logging(&log, "0.0.0.0:0", &[]);
    cmd.env_remove("RPCTAP_SERVE_TOKEN");
    let out = cmd.stderr(std::process::Stdio::piped()).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--auth-token"), "{err}");

    let (_p, addrs, _rest) = spawn_with_banner(
        &mut serve_logging(&log, "127.0.0.1:0", &["--auth-token", "s3cret"]),
        &["serve on http://"],
    );
    let addr = addrs[0];
    let req = |auth: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\n{auth}content-length: {}\r\n\r\n{TOOL_CALL}",
            TOOL_CALL.len()
        )
    };
    let (h, _) = raw(addr, &req(""));
    assert_eq!(status(&h), 401, "{h}");
    let (h, _) = raw(addr, &req("authorization: Bearer wrong\r\n"));
    assert_eq!(status(&h), 401, "{h}");
    let (h, _) = raw(addr, &req("authorization: Bearer s3cret\r\n"));
    assert_eq!(status(&h), 200, "{h}");
}

/// The admin listener (no token, loopback) answers its own names only: a page on a rebound
/// name or another origin cannot read the feed or drive the agent API.
#[test]
fn the_admin_listener_answers_no_web_page() {
    let (up, _seen) = raw_upstream(|_, _| (b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(), false));
    let mut cmd = proxy_cmd(&format!("http://{up}"), true);
    let (_p, addrs, _rest) = spawn_with_banner(&mut cmd, &["proxy on http://", "admin on http://"]);
    let admin = addrs[1];
    let get = |path: &str, host: &str, extra: &str| {
        format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n{extra}connection: close\r\n\r\n")
    };
    let me = admin.to_string();
    let evil = format!("rebound.example:{}", admin.port());
    for (path, host, extra, want) in [
        ("/calls", me.as_str(), "", 200),
        ("/healthz", me.as_str(), "", 200),
        ("/calls", evil.as_str(), "", 403),
        ("/metrics", evil.as_str(), "", 403),
        (
            "/calls",
            me.as_str(),
            "origin: http://evil.example\r\n",
            403,
        ),
    ] {
        let (h, _) = raw(admin, &get(path, host, extra));
        assert_eq!(status(&h), want, "{path} {host} {extra}: {h}");
    }
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let (h, _) = raw(
        admin,
        &format!(
            "POST /mcp HTTP/1.1\r\nhost: {evil}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(status(&h), 403, "{h}");
}

/// Parse and header tricks that a server executes as a call: each is read as the server reads
/// it and counted by the limit (one of three runs), never "invalid, so not counted".
#[test]
fn parse_and_header_tricks_are_counted_as_the_server_reads_them() {
    let tool = |id: u32| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"rm"}}}}"#)
    };
    type Request = Box<dyn Fn(u32) -> String>;
    let cases: Vec<(&str, Request)> = vec![
        (
            "method twice",
            Box::new(|id| {
                post(
                    "/rpc",
                    "",
                    &format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"name":"rm"}},"method":"tools/call"}}"#
                    ),
                )
            }),
        ),
        (
            "id twice",
            Box::new(|id| {
                post(
                    "/rpc",
                    "",
                    &format!(
                        r#"{{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{{"name":"rm"}},"id":{id}}}"#
                    ),
                )
            }),
        ),
        (
            "params twice",
            Box::new(|id| {
                post(
                    "/rpc",
                    "",
                    &format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"x"}},"params":{{"name":"rm"}}}}"#
                    ),
                )
            }),
        ),
        (
            "a byte order mark",
            Box::new(move |id| post("/rpc", "", &format!("\u{feff}{}", tool(id)))),
        ),
        (
            "text/plain",
            Box::new(move |id| {
                let b = tool(id);
                format!("POST /rpc HTTP/1.1\r\nhost: localhost\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{b}", b.len())
            }),
        ),
        (
            "the method written post",
            Box::new(move |id| {
                let b = tool(id);
                format!("post /rpc HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{b}", b.len())
            }),
        ),
        (
            "no jsonrpc member",
            Box::new(|id| {
                post(
                    "/rpc",
                    "",
                    &format!(r#"{{"id":{id},"method":"tools/call","params":{{"name":"rm"}}}}"#),
                )
            }),
        ),
    ];
    for (what, request) in cases {
        let (up, seen) = raw_upstream(|_, _| {
            let b = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
            (format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{b}", b.len()).into_bytes(), false)
        });
        let (_p, addr) = proxy(up, &["--limit", "tools/call=1/h"]);
        for id in 1..=3 {
            let (mut w, mut r) = client(addr);
            w.write_all(request(id).as_bytes()).unwrap();
            read_one(&mut r).unwrap_or_else(|| panic!("{what}: no answer"));
        }
        let ran = seen.lock().unwrap().requests.len();
        assert_eq!(ran, 1, "{what}: {ran} of 3 calls ran under a limit of 1");
    }
}

/// A form post is not a call: passed on as it is, without a finding, even under a limit.
#[test]
fn a_form_post_is_not_a_call() {
    let (up, seen) = raw_upstream(|_, _| {
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
                .to_vec(),
            false,
        )
    });
    let (_p, addr) = proxy(up, &["--limit", "*=1/h"]);
    for _ in 0..3 {
        let (mut w, mut r) = client(addr);
        let b = "grant_type=client_credentials&scope=mcp";
        w.write_all(format!("POST /token HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\r\n{b}", b.len()).as_bytes()).unwrap();
        let (h, _) = read_one(&mut r).unwrap();
        assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    }
    assert_eq!(seen.lock().unwrap().requests.len(), 3);
}

/// A body too large to inspect is not decided, so while a rule is in force it does not run;
/// without rules it passes uninspected as before.
#[test]
fn a_body_too_large_to_decide_is_refused_while_a_rule_is_in_force() {
    let (up, seen) = raw_upstream(|_, _| {
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
                .to_vec(),
            false,
        )
    });
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"rm","arguments":{{"pad":"{}"}}}}}}"#,
        "x".repeat(4000)
    );
    let (_p, addr) = proxy(
        up,
        &["--limit", "tools/call=5/h", "--max-frame-bytes", "1024"],
    );
    let (mut w, mut r) = client(addr);
    w.write_all(post("/rpc", "", &big).as_bytes()).unwrap();
    let (h, _) = read_one(&mut r).unwrap();
    assert!(h.starts_with("HTTP/1.1 413"), "{h}");
    assert_eq!(seen.lock().unwrap().requests.len(), 0);
    let (_p2, addr2) = proxy(up, &["--max-frame-bytes", "1024"]);
    let (mut w, mut r) = client(addr2);
    w.write_all(post("/rpc", "", &big).as_bytes()).unwrap();
    let (h, _) = read_one(&mut r).unwrap();
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert_eq!(seen.lock().unwrap().requests.len(), 1);
}

/// RFC 9112 §3.2: no `Host`, two, or one that is no host name is a 400 (not forwarded with
/// rpctap's own Host in its place); a head over `--max-header-bytes` is a 431 however it
/// arrives, by one byte.
#[test]
fn host_rules_and_an_exact_head_limit() {
    let (up, seen) = raw_upstream(|_, _| {
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
                .to_vec(),
            false,
        )
    });
    let (_p, addr) = proxy(up, &["--max-header-bytes", "8192"]);
    let body = call(1, "ping");
    let req = |hosts: &str, version: &str| {
        format!("POST /rpc HTTP/{version}\r\n{hosts}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())
    };
    for (hosts, version, want) in [
        ("", "1.1", 400),
        ("host: a\r\nhost: b\r\n", "1.1", 400),
        ("host: a b\r\n", "1.1", 400),
        ("host: a/b\r\n", "1.1", 400),
        ("host: localhost:80\r\n", "1.1", 200),
        ("host: [::1]:80\r\n", "1.1", 200),
        ("", "1.0", 200),
    ] {
        let (h, _) = raw(addr, &req(hosts, version));
        assert_eq!(status(&h), want, "{hosts:?} HTTP/{version}: {h}");
    }
    assert_eq!(seen.lock().unwrap().requests.len(), 3);
    // The head's size, exactly: the start line and headers with their line ends.
    let head_of = |method: &str, pad: usize| {
        let start = format!("{method} /rpc HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-pad: ", body.len());
        let fixed = start.len() + "\r\n\r\n".len();
        format!("{start}{}\r\n\r\n{body}", "p".repeat(pad - fixed))
    };
    let head = |pad: usize| head_of("POST", pad);
    let (h, _) = raw(addr, &head(8192));
    assert_eq!(status(&h), 200, "a head of exactly the limit: {h}");
    let (h, _) = raw(addr, &head(8193));
    assert_eq!(status(&h), 431, "one byte over: {h}");
    for method in ["GET", "DELETE"] {
        let (h, _) = raw(addr, &head_of(method, 8193));
        assert_eq!(status(&h), 431, "{method}, one byte over: {h}");
    }
    // On a connection hyper serves (its first request was one hyper reads), the next heads are
    // held to the same limit, sent in one write each — at the default limit (64 KiB), where
    // hyper's read buffer let heads half again as large through.
    let (_p64, addr) = proxy(up, &[]);
    for (pad, want) in [(65536, 200), (65537, 431), (90000, 431)] {
        let (mut w, mut r) = client(addr);
        w.write_all(b"GET /rpc HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .unwrap();
        let (h, _) = read_one(&mut r).expect("an answer to the first GET");
        assert_eq!(status(&h), 200, "{h}");
        w.write_all(head_of("GET", pad).as_bytes()).unwrap();
        let (h, _) = read_one(&mut r).unwrap_or_else(|| panic!("no answer to a {pad}-byte head"));
        assert_eq!(
            status(&h),
            want,
            "a {pad}-byte head on hyper's connection: {h}"
        );
    }
}

/// A client that gives up while the upstream has sent its head and stalls mid-body ends its
/// exchange at once: no call left pending, the upstream connection closed (the upstream sees
/// its end long before it would close on its own).
#[test]
fn a_client_that_leaves_mid_body_ends_its_exchange_and_the_upstream_leg() {
    let closed = Arc::new(Mutex::new(None::<std::time::Instant>));
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = l.local_addr().unwrap();
    let seen_close = closed.clone();
    std::thread::spawn(move || {
        // The admin listener's readiness probe connects too (and sends nothing): only the
        // connection that brings a request is answered.
        for s in l.incoming().flatten() {
            let seen_close = seen_close.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                while r.read_line(&mut line).unwrap_or(0) > 0 && !line.ends_with("\r\n\r\n") {}
                let mut w = s;
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"jsonrpc\":\"2.0\",");
                // Stalls; a read that ends means rpctap closed the upstream leg.
                w.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut one = [0u8; 1];
                if matches!(r.get_mut().read(&mut one), Ok(0)) {
                    *seen_close.lock().unwrap() = Some(std::time::Instant::now());
                }
            });
        }
    });
    let dir = Scratch::new("wire-left");
    let file = dir.join("left.jsonl");
    let mut cmd = proxy_cmd(&format!("http://{up}"), true);
    cmd.args(["--record", file.to_str().unwrap()]);
    let (mut p, addrs, _rest) =
        spawn_with_banner(&mut cmd, &["proxy on http://", "admin on http://"]);
    let (addr, admin) = (addrs[0], addrs[1]);
    let (mut w, mut r) = client(addr);
    w.write_all(post("/rpc", "", &call(1, "slow")).as_bytes())
        .unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    let left = std::time::Instant::now();
    drop((w, r));
    let metrics = || {
        raw(
            admin,
            &format!("GET /metrics HTTP/1.1\r\nhost: {admin}\r\nconnection: close\r\n\r\n"),
        )
        .1
    };
    assert!(
        eventually(Duration::from_secs(5), || {
            let m = String::from_utf8_lossy(&metrics()).into_owned();
            metric(&m, "rpctap_pending_calls") == 0.0 && closed.lock().unwrap().is_some()
        }),
        "still pending or the upstream leg still open: {}",
        String::from_utf8_lossy(&metrics())
    );
    let at = closed.lock().unwrap().unwrap();
    assert!(at.duration_since(left) < Duration::from_secs(5));
    assert!(p.term().success());
    let text = std::fs::read_to_string(&file).unwrap();
    let call = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["event"] == "call")
        .expect(&text);
    assert_eq!(call["outcome"], "abandoned", "{call}");
    assert!(
        call["reason"] == "client disconnected",
        "the reason is said: {call}"
    );
}

/// The same forged framing on the path hyper's client reads (a request body too large for the
/// lean leg, 20 KiB): the client gets the reply the coding delimits, framed by rpctap, and the
/// recording says what the client got.
#[test]
fn a_forged_length_on_hypers_path_is_not_passed_on_either() {
    let (up, _seen) = raw_upstream(|_, _| {
        let r = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n{}",
            chunked(REPLY)
        );
        (r.into_bytes(), true)
    });
    let dir = Scratch::new("wire-hyper-path");
    let file = dir.join("hyper.jsonl");
    let (mut p, addr) = proxy(up, &["--record", file.to_str().unwrap()]);
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"pad":"{}"}}}}}}"#,
        "x".repeat(20 << 10)
    );
    let (mut w, mut r) = client(addr);
    w.write_all(post("/rpc", "", &big).as_bytes()).unwrap();
    let (h, b) = read_one(&mut r).unwrap();
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(
        !h.to_ascii_lowercase().contains("content-length: 5\r"),
        "{h}"
    );
    assert_eq!(String::from_utf8_lossy(&b), REPLY);
    drop((w, r));
    assert!(p.term().success());
    let text = std::fs::read_to_string(&file).unwrap();
    let replies: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("\"direction\":\"s2c\"") && l.contains("\"event\":\"message\""))
        .collect();
    assert!(
        replies.iter().any(|l| l.contains(r#""result":"ok""#)),
        "the recording has the reply the client got: {replies:?}"
    );
}
