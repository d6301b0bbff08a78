//! `rpctap stdio --upstream URL`: a remote Streamable HTTP MCP server as a stdio server.
//!
//! The stdio mode runs unchanged (its relays, inspection, recording, hub and limits): in place of
//! a child process it gets two pipes whose far ends are this module. Each line the client writes
//! is POSTed to the URL on its own (a slow call never holds another), with the session's
//! `Mcp-Session-Id` and `MCP-Protocol-Version` once the server gave them and the `--header`s;
//! a JSON reply is written back as one line, an SSE reply as a line per event as each arrives,
//! and once a session exists its GET stream is opened for the server's own messages (not again
//! after a `405`). A request that cannot be delivered (the server unreachable, a `4xx`/`5xx`
//! without a JSON-RPC body, an expired session's `404`) is answered with a JSON-RPC error at once,
//! so the client never waits for a reply that will not come. When the client closes stdin the
//! session is DELETEd and the pipe to the client closed.
//!
//! The headers' values are sent and never recorded: the inspector sees the stdio lines, and the
//! recording's header names the headers only.

use crate::inspect::sse::SseDecoder;
use crate::locks::Locked as _;
use crate::rpc::Id;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::rpc::own::What;

/// `--header NAME=VALUE` or `NAME=env:VAR`, resolved.
pub fn parse_header(spec: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = spec
        .split_once('=')
        .ok_or_else(|| format!("--header {spec:?}: expected NAME=VALUE or NAME=env:VAR"))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|e| format!("--header {name:?}: {e}"))?;
    let value = match value.strip_prefix("env:") {
        Some(var) => std::env::var(var)
            .map_err(|_| format!("--header {name}: the environment has no {var}"))?,
        None => value.to_string(),
    };
    let mut value = HeaderValue::from_str(&value).map_err(|e| format!("--header {name}: {e}"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

type Client = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

struct State {
    session: Option<HeaderValue>,
    version: Option<HeaderValue>,
    get_open: bool,
}

struct Shared {
    url: http::Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    client: Client,
    st: Mutex<State>,
    out: std::sync::mpsc::Sender<Bytes>,
    max: usize,
}

/// The remote server, seen from the stdio mode as a child: its stdin and stdout.
pub struct Remote {
    pipes: Option<(std::fs::File, std::fs::File)>,
    done: tokio::sync::oneshot::Receiver<String>,
}

impl Remote {
    /// Starts the bridge to `url` (in the current runtime).
    pub fn start(
        url: http::Uri,
        headers: Vec<(HeaderName, HeaderValue)>,
        insecure: bool,
        max: usize,
    ) -> std::io::Result<Remote> {
        let (c2s_r, c2s_w) = pipe()?;
        let (s2c_r, mut s2c_w) = pipe()?;
        let (out_tx, out_rx) = std::sync::mpsc::channel::<Bytes>();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        // To the client: every line, in the order they came; ends when every sender is gone.
        std::thread::Builder::new()
            .name("rpctap-upstream-out".into())
            .spawn(move || {
                for line in out_rx {
                    if s2c_w
                        .write_all(&line)
                        .and_then(|()| s2c_w.write_all(b"\n"))
                        .and_then(|()| s2c_w.flush())
                        .is_err()
                    {
                        break;
                    }
                }
            })?;
        let shared = Arc::new(Shared {
            url,
            headers,
            client: crate::proxy::upstream::http_client(insecure),
            st: Mutex::new(State {
                session: None,
                version: None,
                get_open: false,
            }),
            out: out_tx,
            max,
        });
        // From the client: each line POSTed on its own.
        let (in_tx, mut in_rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        std::thread::Builder::new()
            .name("rpctap-upstream-in".into())
            .spawn(move || {
                let mut r = std::io::BufReader::new(c2s_r);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match r.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let l = line.trim_ascii();
                            if !l.is_empty() && in_tx.send(Bytes::copy_from_slice(l)).is_err() {
                                break;
                            }
                        }
                    }
                }
            })?;
        tokio::spawn(async move {
            let mut posts = tokio::task::JoinSet::new();
            while let Some(line) = in_rx.recv().await {
                let s = shared.clone();
                // An `initialize` first, alone: what follows needs its session.
                if is_initialize(&line) {
                    s.post(line).await;
                } else {
                    posts.spawn(async move { s.post(line).await });
                }
            }
            // The client closed stdin: what is in flight finishes (bounded), then the session
            // goes.
            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                while posts.join_next().await.is_some() {}
            })
            .await;
            posts.abort_all();
            let how = shared.delete().await;
            drop(shared);
            let _ = done_tx.send(how);
        });
        Ok(Remote {
            pipes: Some((c2s_w, s2c_r)),
            done,
        })
    }

    /// Its stdin and stdout, once (closing the stdin is the end of the client's side).
    pub fn take_pipes(&mut self) -> Option<(std::fs::File, std::fs::File)> {
        self.pipes.take()
    }

    /// Waits until the client closed stdin and the session is gone; how it ended.
    pub async fn wait(self) -> String {
        self.done
            .await
            .unwrap_or_else(|_| "the upstream bridge stopped".into())
    }
}

/// A pipe's read and write ends, as files (close-on-exec: no child inherits them).
fn pipe() -> std::io::Result<(std::fs::File, std::fs::File)> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    Ok((std::fs::File::from(r), std::fs::File::from(w)))
}

fn is_initialize(line: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct M<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<M>(line).is_ok_and(|m| m.method.as_deref() == Some("initialize"))
}

/// Each `message` event of an SSE body as one line, as it arrives, until the body ends or
/// breaks off.
async fn read_messages(mut body: hyper::body::Incoming, max: usize, mut each: impl FnMut(Bytes)) {
    let mut dec = SseDecoder::new(max);
    while let Some(Ok(frame)) = body.frame().await {
        if let Some(chunk) = frame.data_ref() {
            dec.feed(chunk, |ev| {
                if ev.kind() == "message" {
                    if let Some(l) = as_line(&ev.data) {
                        each(l);
                    }
                }
            });
        }
    }
}

/// One message as one line: the bytes as they came when they hold no newline, else compacted.
fn as_line(data: &[u8]) -> Option<Bytes> {
    let data = data.trim_ascii();
    if data.is_empty() {
        return None;
    }
    if !data.contains(&b'\n') {
        return Some(Bytes::copy_from_slice(data));
    }
    serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .map(|v| Bytes::from(v.to_string()))
}

/// The headers a 2026-07-28 request carries over HTTP (its `_meta` version, `Mcp-Method`,
/// `Mcp-Name` for the name-bearing methods, a value outside visible ASCII in its base64 form):
/// what the client would have sent had it spoken HTTP itself. `None` for other messages (the
/// session's negotiated version is sent then).
fn routing_headers(line: &[u8]) -> Option<Vec<(&'static str, HeaderValue)>> {
    #[derive(serde::Deserialize)]
    struct M {
        method: Option<String>,
        #[serde(default)]
        params: Option<P>,
    }
    #[derive(serde::Deserialize)]
    struct P {
        #[serde(rename = "_meta", default)]
        meta: Option<serde_json::Map<String, serde_json::Value>>,
        name: Option<serde_json::Value>,
        uri: Option<serde_json::Value>,
    }
    let m: M = serde_json::from_slice(line).ok()?;
    let p = m.params?;
    let version = p
        .meta
        .as_ref()?
        .get("io.modelcontextprotocol/protocolVersion")?
        .as_str()?
        .to_string();
    let method = m.method?;
    let mut out = vec![
        (
            "mcp-protocol-version",
            HeaderValue::from_str(&version).ok()?,
        ),
        ("mcp-method", HeaderValue::from_str(&method).ok()?),
    ];
    let name = match method.as_str() {
        "tools/call" | "prompts/get" => p.name,
        "resources/read" => p.uri,
        _ => None,
    };
    if let Some(name) = name.as_ref().and_then(serde_json::Value::as_str) {
        let plain = name.bytes().all(|b| (0x20..0x7f).contains(&b)) && name.trim() == name;
        let value = if plain {
            name.to_string()
        } else {
            use base64::Engine as _;
            format!(
                "=?base64?{}?=",
                base64::engine::general_purpose::STANDARD.encode(name)
            )
        };
        out.push(("mcp-name", HeaderValue::from_str(&value).ok()?));
    }
    Some(out)
}

/// An error reply with `"id": null` given the lone request's id (see `Shared::post`).
fn with_id(line: Bytes, id: Option<&Id>) -> Bytes {
    #[derive(serde::Deserialize)]
    struct E<'a> {
        #[serde(borrow)]
        id: Option<&'a serde_json::value::RawValue>,
        error: Option<serde::de::IgnoredAny>,
    }
    let Some(id) = id else { return line };
    let null_id = serde_json::from_slice::<E>(&line)
        .is_ok_and(|e| e.error.is_some() && e.id.is_none_or(|i| i.get() == "null"));
    if !null_id {
        return line;
    }
    match serde_json::from_slice::<serde_json::Value>(&line) {
        Ok(mut v) => {
            v["id"] = serde_json::from_str(&id.to_json_text()).unwrap_or(serde_json::Value::Null);
            Bytes::from(v.to_string())
        }
        Err(_) => line,
    }
}

impl Shared {
    fn request(&self, method: Method, body: Bytes) -> Request<Full<Bytes>> {
        let routing = (method == Method::POST)
            .then(|| routing_headers(&body))
            .flatten();
        let mut b = Request::builder().method(method).uri(self.url.clone());
        {
            let st = self.st.locked();
            if let Some(s) = &st.session {
                b = b.header("mcp-session-id", s.clone());
            }
            match (&routing, &st.version) {
                (Some(r), _) => {
                    for (k, v) in r {
                        b = b.header(*k, v.clone());
                    }
                }
                (None, Some(v)) => b = b.header("mcp-protocol-version", v.clone()),
                (None, None) => {}
            }
        }
        for (k, v) in &self.headers {
            b = b.header(k, v.clone());
        }
        b = b
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(http::header::CONTENT_TYPE, "application/json");
        b.body(Full::new(body))
            .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())))
    }

    fn say(&self, line: Bytes) {
        let _ = self.out.send(line);
    }

    fn fail(&self, ids: &[Id], why: &str) {
        for id in ids {
            let reply = What::Unreachable.reply(id, &format!("rpctap: {why}"), false);
            self.say(Bytes::from(reply));
        }
        if ids.is_empty() {
            tracing::warn!(
                error = why,
                "stdio --upstream: a message could not be delivered"
            );
        }
    }

    async fn post(self: Arc<Self>, line: Bytes) {
        let ids = crate::rpc::call_ids(&line).1;
        let init = is_initialize(&line);
        let resp = match self.client.request(self.request(Method::POST, line)).await {
            Ok(r) => r,
            Err(e) => {
                return self.fail(
                    &ids,
                    &format!("the upstream {} is unreachable: {e}", self.url),
                )
            }
        };
        let status = resp.status();
        // The session is the one an initialize opened (a refusal's header names none to keep).
        if init && status.is_success() {
            if let Some(s) = resp.headers().get("mcp-session-id") {
                self.st.locked().session = Some(s.clone());
            }
        }
        // A lone request's error without an id (`"id": null`, an HTTP-level refusal such as a
        // `400`) is that request's: over HTTP the client knows it from the exchange, over stdio
        // only the id can say it — so it is written with the request's id.
        let lone = (ids.len() == 1).then(|| &ids[0]);
        let sse = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| crate::media::contains_ignore_case(c, "event-stream"));
        let body = resp.into_body();
        let mut answered = 0usize;
        if sse {
            read_messages(body, self.max, |l| {
                if init {
                    self.learn_version(&l);
                }
                answered += 1;
                self.say(with_id(l, lone));
            })
            .await;
        } else {
            let bytes = match body.collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return self.fail(&ids, &format!("the upstream's reply broke off: {e}")),
            };
            if let Some(l) = as_line(&bytes) {
                if l.first().is_some_and(|b| *b == b'{' || *b == b'[') {
                    if init {
                        self.learn_version(&l);
                    }
                    answered += 1;
                    self.say(with_id(l, lone));
                }
            }
        }
        if answered == 0 && !ids.is_empty() {
            let why = match status {
                StatusCode::NOT_FOUND if self.st.locked().session.is_some() => {
                    "the upstream's session expired (404)".to_string()
                }
                s => format!("the upstream answered {s} without a reply"),
            };
            self.fail(&ids, &why);
        }
        if init && status.is_success() {
            self.open_get();
        }
    }

    fn learn_version(&self, line: &[u8]) {
        let v: Option<String> = serde_json::from_slice::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v["result"]["protocolVersion"].as_str().map(str::to_string));
        if let Some(v) = v.and_then(|v| HeaderValue::from_str(&v).ok()) {
            self.st.locked().version = Some(v);
        }
    }

    /// The session's GET stream, for the server's own messages, re-opened while it lives.
    fn open_get(self: &Arc<Self>) {
        {
            let mut st = self.st.locked();
            if st.get_open || st.session.is_none() {
                return;
            }
            st.get_open = true;
        }
        let me = self.clone();
        tokio::spawn(async move {
            for attempt in 0..5u32 {
                let mut req = me.request(Method::GET, Bytes::new());
                req.headers_mut().insert(
                    http::header::ACCEPT,
                    HeaderValue::from_static("text/event-stream"),
                );
                req.headers_mut().remove(http::header::CONTENT_TYPE);
                let resp = match me.client.request(req).await {
                    Ok(r) if r.status().is_success() => r,
                    // 405: the server has no GET stream; anything else: not now.
                    _ => return,
                };
                read_messages(resp.into_body(), me.max, |l| me.say(l)).await;
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
        });
    }

    async fn delete(&self) -> String {
        if self.st.locked().session.is_none() {
            return "the client closed stdin".into();
        }
        let mut req = self.request(Method::DELETE, Bytes::new());
        req.headers_mut().remove(http::header::CONTENT_TYPE);
        match tokio::time::timeout(Duration::from_secs(5), self.client.request(req)).await {
            Ok(Ok(r)) => format!(
                "the client closed stdin; the session was deleted ({})",
                r.status()
            ),
            _ => "the client closed stdin; the session could not be deleted".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_from_flags_and_the_environment() {
        let (n, v) = parse_header("X-Api-Key=abc").unwrap();
        assert_eq!((n.as_str(), v.to_str().unwrap()), ("x-api-key", "abc"));
        assert!(v.is_sensitive());
        assert!(parse_header("Authorization=env:RPCTAP_NO_SUCH_VAR_HERE").is_err());
        assert!(parse_header("nothing").is_err());
    }

    #[test]
    fn a_2026_07_28_request_carries_its_routing_headers() {
        let h = routing_headers(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"caf\u00e9","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#).unwrap();
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.to_str().unwrap())).collect();
        assert_eq!(
            h,
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "=?base64?Y2Fmw6k=?=")
            ]
        );
        assert!(routing_headers(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_none());
    }

    #[test]
    fn ids_lines_and_errors() {
        // The ids answered on failure are `rpc::call_ids`'.
        let request_ids = |b: &'static [u8]| -> Vec<String> {
            crate::rpc::call_ids(&Bytes::from_static(b))
                .1
                .iter()
                .map(Id::to_json_text)
                .collect()
        };
        assert_eq!(
            request_ids(br#"{"jsonrpc":"2.0","id":"a","method":"x"}"#),
            vec!["\"a\""]
        );
        assert!(request_ids(br#"{"jsonrpc":"2.0","method":"notifications/x"}"#).is_empty());
        assert_eq!(
            request_ids(
                br#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":2,"result":{}}]"#
            ),
            vec!["1"]
        );
        assert_eq!(
            as_line(b" {\"a\": 1}\n").unwrap(),
            Bytes::from_static(b"{\"a\": 1}")
        );
        assert_eq!(
            as_line(b"{\"a\":\n 1}").unwrap(),
            Bytes::from_static(b"{\"a\":1}")
        );
        assert_eq!(
            &with_id(
                Bytes::from_static(
                    br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no"}}"#
                ),
                Some(&Id::Num("3".into()))
            )[..],
            br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"no"}}"#
        );
        let result = Bytes::from_static(br#"{"jsonrpc":"2.0","id":null,"result":{}}"#);
        assert_eq!(with_id(result.clone(), Some(&Id::Num("3".into()))), result);
        assert_eq!(
            What::Unreachable
                .reply(&Id::Num("7".into()), "gone", false)
                .as_bytes(),
            &br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32003,"message":"gone","data":{"rpctap":{"what":"upstream_unreachable","side":"upstream"}}}}"#[..]
        );
    }
}
