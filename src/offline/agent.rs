//! `rpctap mcp`: rpctap's captures served as an MCP server, so that an AI agent debugging beside
//! the user can ask which calls failed and why, look at one, check a session, compare two, and
//! replay a call against a fixed server — without the user copying logs into a chat.
//!
//! Built on a small JSON-RPC dispatcher of its own rather than the official Rust SDK (`rmcp`):
//! rpctap already reads and writes every MCP revision on the wire, the server needs a dozen
//! methods, and `rmcp` would add an async service stack and macro crates to a tree kept lean.
//! The dispatcher answers `server/discover` with the revisions it speaks (2025-11-25 and
//! earlier), so a 2026-07-28 client falls back to the `initialize` handshake.
//!
//! What it serves is what the recordings hold: the hub's live and past sessions (a live
//! session's recording is at most 100 ms behind it), or the recordings in `--dir`; on an admin
//! listener also that rpctap's own live session ([`THIS`]: its recording, else its feed's recent
//! calls and findings). Redaction is
//! the recording's: the API never sees more than a recording holds. Every list is paginated and
//! every body cut at [`MAX_BODY`] bytes (said with `"cut": true`), and no tool result is larger
//! than [`MAX_RESULT`].

use crate::events::{Event, Outcome};
use crate::hub::{Home, SessionInfo};
use crate::record::reader::Capture;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The largest tool result, in bytes of its JSON text.
pub const MAX_RESULT: usize = 256 << 10;
/// The most bytes of one message body in a result.
pub const MAX_BODY: usize = 16 << 10;
/// The largest page.
pub const MAX_PAGE: usize = 200;
const PROTOCOLS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// Where the sessions come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// The hub's state directory: live and past sessions.
    Home(Home),
    /// The recordings (`*.jsonl`) in a directory.
    Dir(PathBuf),
}

/// The session of the rpctap serving the API (a proxy's, a demo's, `serve`'s on its admin
/// listener), listed first as [`THIS`]: its recording when it records, else what its feed
/// keeps (the recent calls and findings, without bodies).
#[derive(Clone)]
pub enum Own {
    Recording(PathBuf),
    Feed(crate::observe::feed::Feed),
}

impl std::fmt::Debug for Own {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Own::Recording(p) => write!(f, "Recording({})", p.display()),
            Own::Feed(_) => f.write_str("Feed"),
        }
    }
}

/// The name of the serving rpctap's own session.
pub const THIS: &str = "this";

/// The server's state.
#[derive(Clone, Debug)]
pub struct Agent {
    /// The hub's or a directory's sessions (none: only `own`).
    pub source: Option<Source>,
    /// The session of the rpctap serving the API, live.
    pub own: Option<Own>,
    /// `replay_call` may send a recorded call to a target.
    pub allow_replay: bool,
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A tool's failure, said to the agent (a result with `isError`, as MCP has it).
fn tool_error(message: String) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

/// A structured result, with its text for clients that read only `content`.
fn tool_ok(v: Value) -> Value {
    let mut text = v.to_string();
    if text.len() > MAX_RESULT {
        return tool_error(format!(
            "the result would be {} bytes, over {} KiB: ask for a smaller page (limit)",
            text.len(),
            MAX_RESULT >> 10
        ));
    }
    // `content` mirrors `structuredContent` (the spec's advice for structured results).
    let result = json!({"content": [{"type": "text", "text": std::mem::take(&mut text)}], "structuredContent": v});
    result
}

fn cut(text: &str) -> Value {
    if text.len() <= MAX_BODY {
        return json!({"text": text, "cut": false});
    }
    let mut end = MAX_BODY;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    json!({"text": &text[..end], "cut": true, "bytes": text.len()})
}

fn string_arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, String> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{name}` (a string) is required"))
}

fn page_args(args: &Value) -> Result<(usize, usize), String> {
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .map_or(50, |n| n as usize)
        .clamp(1, MAX_PAGE);
    let start = match args.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(c)) => c
            .parse::<usize>()
            .map_err(|_| format!("cursor {c:?} is not one this server gave"))?,
        Some(other) => return Err(format!("cursor {other} is not one this server gave")),
    };
    Ok((start, limit))
}

fn next_cursor(start: usize, shown: usize, total: usize) -> Value {
    if start + shown < total {
        Value::String((start + shown).to_string())
    } else {
        Value::Null
    }
}

/// An input schema: these properties and no others.
fn schema(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

/// An output schema: at least these (a result may say more, e.g. a diff's names of A and B).
fn output(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required})
}

/// The tools, with their input and output schemas.
pub fn tools(allow_replay: bool) -> Value {
    let page = json!({"limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "description": "page size (default 50)"}, "cursor": {"type": "string", "description": "nextCursor of the previous page"}});
    let session = json!({"type": "string", "description": "a session name (list_sessions), or a recording's path"});
    let ro = json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false});
    let mut list = vec![
        json!({"name": "list_sessions", "title": "List sessions",
            "description": "The recorded sessions, newest first: live ones (a shim or proxy running now) and past ones. Paginated.",
            "inputSchema": schema(page.clone(), &[]),
            "outputSchema": output(json!({"sessions": {"type": "array", "items": {"type": "object"}}, "nextCursor": {"type": ["string", "null"]}}), &["sessions"]),
            "annotations": ro}),
        json!({"name": "list_calls", "title": "List calls",
            "description": "The calls of a session, in order, each with its outcome, latency and finding codes; `filter` is the dashboard's filter language (e.g. `tool:search status:error`, `code:MCP_*`, `-method:ping`). Paginated.",
            "inputSchema": schema({let mut p = page.clone(); p["session"] = session.clone(); p["filter"] = json!({"type": "string"}); p}, &["session"]),
            "outputSchema": output(json!({"calls": {"type": "array", "items": {"type": "object"}}, "total": {"type": "integer"}, "nextCursor": {"type": ["string", "null"]}}), &["calls", "total"]),
            "annotations": ro}),
        json!({"name": "get_call", "title": "Get a call",
            "description": "One call (its `index` from list_calls): request and reply (each cut at 16 KiB, said), HTTP heads, timing (a multi round-trip call's server time and the client's time between rounds), findings, and the earlier rounds of a multi round-trip call.",
            "inputSchema": schema(json!({"session": session, "index": {"type": "integer", "minimum": 0}}), &["session", "index"]),
            "outputSchema": output(json!({"call": {"type": "object"}, "request": {"type": ["object", "null"]}, "reply": {"type": ["object", "null"]}, "findings": {"type": "array"}, "rounds": {"type": "array"}, "timing": {"type": "object"}, "http": {"type": ["object", "null"]}}), &["call", "findings"]),
            "annotations": ro}),
        json!({"name": "find_anomalies", "title": "Find anomalies",
            "description": "What `rpctap check` finds in a session (the live inspector run again over the recording), optionally by code (a glob such as MCP_*) and severity. Paginated.",
            "inputSchema": schema({let mut p = page.clone(); p["session"] = session.clone(); p["code"] = json!({"type": "string"}); p["severity"] = json!({"enum": ["error", "warning", "info"]}); p}, &["session"]),
            "outputSchema": output(json!({"findings": {"type": "array", "items": {"type": "object"}}, "total": {"type": "integer"}, "nextCursor": {"type": ["string", "null"]}}), &["findings", "total"]),
            "annotations": ro}),
        json!({"name": "stats", "title": "Call statistics",
            "description": "Per method and tool: calls, errors, error rate and latency percentiles (p50, p95, p99, max, in ms); and the A2A agent cards the session fetched (name, versions, streaming, push notifications, skills, the card).",
            "inputSchema": schema(json!({"session": session}), &["session"]),
            "outputSchema": output(json!({"methods": {"type": "array", "items": {"type": "object"}}}), &["methods"]),
            "annotations": ro}),
        json!({"name": "cost", "title": "Context cost",
            "description": "What a session costs an agent's context, in tokens (`rpctap cost`): each tool, prompt and resource definition the server offers (biggest first, with each set's total), each method's arguments and results (total, p50, p95, max), each session's totals. `tokenizer`: o200k (default: GPT-4o, GPT-4.1, GPT-5, o-series) or cl100k.",
            "inputSchema": schema(json!({"session": session.clone(), "tokenizer": {"enum": ["o200k", "cl100k"]}}), &["session"]),
            "outputSchema": output(json!({"tokenizer": {"type": "string"}, "definitions": {"type": "array"}, "methods": {"type": "array"}, "sessions": {"type": "array"}}), &["tokenizer", "definitions", "methods", "sessions"]),
            "annotations": ro}),
        json!({"name": "check", "title": "Check a session",
            "description": "`rpctap check` of a session as a gate: each scope's result (seed 004's shape) and whether it passes (`fail_on` as the command's --fail-on, `allow` as --allow).",
            "inputSchema": schema(json!({"session": session, "fail_on": {"type": "array", "items": {"type": "string"}}, "allow": {"type": "array", "items": {"type": "string"}}}), &["session"]),
            "outputSchema": output(json!({"passed": {"type": "boolean"}, "scopes": {"type": "array"}}), &["passed", "scopes"]),
            "annotations": ro}),
        json!({"name": "diff", "title": "Diff two sessions",
            "description": "`rpctap diff A B`: tools, prompts and resources added, removed or changed (safety annotations first), calls matched by method, target and arguments whose outcome or latency changed.",
            "inputSchema": schema(json!({"a": session.clone(), "b": session}), &["a", "b"]),
            "outputSchema": output(json!({"changes": {"type": "array"}, "regressions": {"type": "integer"}, "matched_calls": {"type": "integer"}}), &["changes", "regressions"]),
            "annotations": ro}),
    ];
    list.push(json!({"name": "replay_call", "title": "Replay a call",
        "description": format!("Send one recorded call (its `index`) to `target` (an HTTP MCP server URL) and compare the reply with the recorded one: the verdict and the diff.{}", if allow_replay { "" } else { " Refused: this server was started without --allow-replay." }),
        "inputSchema": schema(json!({"session": {"type": "string"}, "index": {"type": "integer", "minimum": 0}, "target": {"type": "string"}}), &["session", "index", "target"]),
        "outputSchema": output(json!({"verdict": {"type": "string"}, "pass": {"type": "boolean"}, "diffs": {"type": "array"}}), &["verdict", "pass"]),
        "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": true}}));
    Value::Array(list)
}

fn outcome_json(o: &Outcome) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

impl Agent {
    /// The sessions: the serving rpctap's own first, then the others newest first.
    fn sessions(&self) -> Vec<SessionInfo> {
        let own = self.own_session();
        let mut all: Vec<SessionInfo> = self
            .source_sessions()
            .into_iter()
            // A recording joined to the hub is listed once, as this rpctap's own.
            .filter(|s| {
                own.as_ref()
                    .is_none_or(|o| o.recording.is_none() || o.recording != s.recording)
            })
            .collect();
        if let Some(o) = own {
            all.insert(0, o);
        }
        all
    }

    /// The serving rpctap's own session, as listed.
    fn own_session(&self) -> Option<SessionInfo> {
        let (path, rec) = match self.own.as_ref()? {
            Own::Recording(p) => (Some(p.clone()), crate::record::reader::read(p).ok()?),
            Own::Feed(f) => (None, f.snapshot()),
        };
        // A recording's header says `created_ns`, the feed's `started`.
        let started = ["created_ns", "started"]
            .iter()
            .find_map(|k| rec.header.get(k).and_then(Value::as_u64))
            .unwrap_or_default();
        let calls: Vec<&crate::events::CallEvent> = rec.calls().collect();
        Some(SessionInfo {
            name: THIS.to_string(),
            label: crate::record::label(&rec.header),
            mode: rec
                .header
                .get("mode")
                .and_then(Value::as_str)
                .unwrap_or("proxy")
                .to_string(),
            command: Vec::new(),
            pid: Some(std::process::id()),
            started,
            live: true,
            bytes: path
                .as_ref()
                .and_then(|p| std::fs::metadata(p).ok())
                .map_or(0, |m| m.len()),
            recording: path,
            calls: calls.len() as u64,
            errors: calls
                .iter()
                .filter(|c| {
                    crate::events::call_failed(&c.method, &c.outcome, c.anomalies.iter().copied())
                })
                .count() as u64,
            anomalies: rec
                .events
                .iter()
                .filter(|e| matches!(e, Event::Anomaly(_)))
                .count() as u64,
        })
    }

    fn source_sessions(&self) -> Vec<SessionInfo> {
        match &self.source {
            None => Vec::new(),
            Some(Source::Home(h)) => h.sessions_list(10_000),
            Some(Source::Dir(d)) => {
                let mut out: Vec<SessionInfo> = std::fs::read_dir(d)
                    .map(|rd| {
                        rd.flatten()
                            .map(|e| e.path())
                            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                            .filter_map(|p| crate::hub::summarize(&p))
                            .collect()
                    })
                    .unwrap_or_default();
                out.sort_by(|a, b| b.started.cmp(&a.started).then(a.name.cmp(&b.name)));
                out
            }
        }
    }

    /// A session's recording, by name (or a path).
    fn recording(&self, what: &str) -> Result<(PathBuf, Capture), String> {
        match (&self.own, what) {
            (Some(Own::Recording(p)), THIS) => {
                let rec = crate::record::reader::read(p).map_err(|e| e.to_string())?;
                return Ok((p.clone(), rec));
            }
            (Some(Own::Feed(f)), THIS) => return Ok((PathBuf::new(), f.snapshot())),
            _ => {}
        }
        let path = match &self.source {
            None => return Err(format!("no session {what:?} (list_sessions names them)")),
            Some(Source::Home(h)) => h.find(what).map_err(|e| e.to_string())?,
            Some(Source::Dir(d)) => {
                let by_name = d.join(format!("{what}.jsonl"));
                let p = Path::new(what);
                if by_name.is_file() {
                    by_name
                } else if p.is_file() {
                    p.to_path_buf()
                } else {
                    self.sessions()
                        .into_iter()
                        .find(|s| s.name == what)
                        .and_then(|s| s.recording)
                        .ok_or_else(|| format!("no session {what:?} (list_sessions names them)"))?
                }
            }
        };
        let rec = crate::record::reader::read(&path).map_err(|e| e.to_string())?;
        Ok((path, rec))
    }

    /// One tool call.
    pub fn call(&self, name: &str, args: &Value) -> Value {
        let r = match name {
            "list_sessions" => self.list_sessions(args),
            "list_calls" => self.list_calls(args),
            "get_call" => self.get_call(args),
            "find_anomalies" => self.find_anomalies(args),
            "stats" => self.stats(args),
            "cost" => self.cost(args),
            "check" => self.check(args),
            "diff" => self.diff(args),
            "replay_call" => {
                return self
                    .replay_refused()
                    .unwrap_or_else(|| tool_error("replay_call runs asynchronously".into()))
            }
            other => Err(format!("no tool {other:?}")),
        };
        match r {
            Ok(v) => tool_ok(v),
            Err(e) => tool_error(e),
        }
    }

    fn replay_refused(&self) -> Option<Value> {
        (!self.allow_replay).then(|| {
            tool_error("replay_call is refused: this rpctap mcp was started without --allow-replay (replaying sends recorded calls to a server)".into())
        })
    }

    fn list_sessions(&self, args: &Value) -> Result<Value, String> {
        let (start, limit) = page_args(args)?;
        let all = self.sessions();
        let page: Vec<Value> = all
            .iter()
            .skip(start)
            .take(limit)
            .map(|s| {
                json!({"name": s.name, "label": s.label, "mode": s.mode, "live": s.live,
                    "started_ns": s.started, "calls": s.calls, "errors": s.errors, "anomalies": s.anomalies,
                    "recording": s.recording.as_ref().map(|p| p.display().to_string())})
            })
            .collect();
        Ok(json!({"sessions": page, "nextCursor": next_cursor(start, page.len(), all.len())}))
    }

    fn call_summary(i: usize, c: &crate::events::CallEvent) -> Value {
        json!({"index": i, "scope": c.scope.to_string(), "direction": c.direction, "method": c.method,
            "target": c.target, "id": c.id, "outcome": outcome_json(&c.outcome),
            "latency_ms": c.latency_us.map(|l| l as f64 / 1000.0), "anomalies": c.anomalies,
            "continues": c.continues, "task": c.task, "context": c.context})
    }

    fn list_calls(&self, args: &Value) -> Result<Value, String> {
        let (start, limit) = page_args(args)?;
        let (_, rec) = self.recording(string_arg(args, "session")?)?;
        let filter = match args.get("filter").and_then(Value::as_str) {
            Some(f) => crate::filter::Filter::parse(f).map_err(|e| format!("filter: {e}"))?,
            None => crate::filter::Filter::default(),
        };
        let calls: Vec<(usize, &crate::events::CallEvent)> = rec
            .calls()
            .enumerate()
            .filter(|(_, c)| filter.matches(&Event::Call((*c).clone())))
            .collect();
        let page: Vec<Value> = calls
            .iter()
            .skip(start)
            .take(limit)
            .map(|(i, c)| Self::call_summary(*i, c))
            .collect();
        Ok(
            json!({"calls": page, "total": calls.len(), "nextCursor": next_cursor(start, page.len(), calls.len())}),
        )
    }

    fn get_call(&self, args: &Value) -> Result<Value, String> {
        let (_, rec) = self.recording(string_arg(args, "session")?)?;
        let index = args
            .get("index")
            .and_then(Value::as_u64)
            .ok_or("`index` (an integer) is required")? as usize;
        let calls: Vec<&crate::events::CallEvent> = rec.calls().collect();
        let c = calls
            .get(index)
            .ok_or_else(|| format!("no call {index}: the session has {}", calls.len()))?;
        let (request, reply) = messages_of(&rec, c);
        // A call's findings are its own: those naming its id, and those naming none only when
        // its exchange holds no other call (a stdio or WebSocket stream is one exchange for the
        // whole session: its findings belong to their calls, not to every call).
        let alone = calls.iter().filter(|x| x.exchange == c.exchange).count() == 1;
        let findings: Vec<Value> = rec
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Anomaly(a)
                    if a.scope == c.scope
                        && match &a.id {
                            // Its id, and a code its call line names (one of two calls that
                            // share an id, each way, keeps its own).
                            Some(id) => *id == c.id && c.anomalies.contains(&a.code),
                            None => alone && a.exchange == c.exchange,
                        } =>
                {
                    Some(json!({"code": a.code, "severity": a.severity, "message": a.message, "direction": a.direction}))
                }
                _ => None,
            })
            .collect();
        // A multi round-trip call: its earlier rounds, oldest first.
        let mut rounds = Vec::new();
        let mut prev = c.continues.clone();
        while let Some(id) = prev.take() {
            let Some(r) = calls.iter().rev().find(|x| {
                x.id == id
                    && x.outcome == Outcome::InputRequired
                    && x.scope.report_key() == c.scope.report_key()
            }) else {
                break;
            };
            let (q, a) = messages_of(&rec, r);
            rounds.insert(
                0,
                json!({"id": r.id, "request": q, "asked": a, "latency_us": r.latency_us}),
            );
            prev = r.continues.clone();
            if rounds.len() > 16 {
                break;
            }
        }
        // Its time: the server's (the rounds summed) and the client's between rounds.
        let r = super::rounds_of(&calls, index);
        let timing = json!({"rounds": r.rounds, "server_us": r.server_us, "client_us": r.client_us(), "wall_us": r.wall_us});
        let http = rec.events.iter().fold(None::<Value>, |acc, e| match e {
            Event::Http(crate::events::HttpEvent::Request {
                exchange,
                method,
                path,
                headers,
                ..
            }) if *exchange == c.exchange => {
                Some(json!({"method": method, "path": path, "request_headers": headers.pairs()}))
            }
            Event::Http(crate::events::HttpEvent::Response {
                exchange,
                status,
                headers,
                ..
            }) if *exchange == c.exchange => {
                let mut v = acc.unwrap_or_else(|| json!({}));
                v["status"] = json!(status);
                v["response_headers"] = json!(headers.pairs());
                Some(v)
            }
            _ => acc,
        });
        Ok(
            json!({"call": Self::call_summary(index, c), "request": request, "reply": reply,
            "findings": findings, "rounds": rounds, "timing": timing, "http": http}),
        )
    }

    fn find_anomalies(&self, args: &Value) -> Result<Value, String> {
        let (start, limit) = page_args(args)?;
        let (_, rec) = self.recording(string_arg(args, "session")?)?;
        let code = args
            .get("code")
            .and_then(Value::as_str)
            .map(|g| globset::Glob::new(g).map(|g| g.compile_matcher()))
            .transpose()
            .map_err(|e| format!("code: {e}"))?;
        let severity = args.get("severity").and_then(Value::as_str);
        let mut all = Vec::new();
        for (scope, r) in crate::inspect::recorded::check_recording(&rec) {
            for f in r.findings {
                if code.as_ref().is_some_and(|g| !g.is_match(&f.code))
                    || severity.is_some_and(|s| s != f.severity.as_str())
                {
                    continue;
                }
                all.push(
                    json!({"scope": scope, "code": f.code, "severity": f.severity, "path": f.path,
                    "method": f.method, "id": f.id, "message": f.message}),
                );
            }
        }
        let page: Vec<Value> = all.iter().skip(start).take(limit).cloned().collect();
        Ok(
            json!({"findings": page, "total": all.len(), "nextCursor": next_cursor(start, page.len(), all.len())}),
        )
    }

    fn stats(&self, args: &Value) -> Result<Value, String> {
        let (_, rec) = self.recording(string_arg(args, "session")?)?;
        let mut per: std::collections::BTreeMap<String, (Vec<u64>, u64)> = Default::default();
        for c in rec.calls() {
            let key = crate::events::stat_key(&c.method, c.target.as_deref()).into_owned();
            let e = per.entry(key).or_default();
            e.0.extend(c.latency_us);
            if crate::events::call_failed(
                &c.method,
                &c.outcome,
                c.anomalies.iter().map(|a| a.as_ref()),
            ) {
                e.1 += 1;
            }
        }
        let pct = |l: &[u64], p: f64| -> f64 {
            if l.is_empty() {
                return 0.0;
            }
            let i = ((l.len() as f64 - 1.0) * p).round() as usize;
            l[i.min(l.len() - 1)] as f64 / 1000.0
        };
        let methods: Vec<Value> = per
            .into_iter()
            .map(|(k, (mut l, errors))| {
                l.sort_unstable();
                let n = l.len().max(1) as f64;
                json!({"method": k, "calls": l.len(), "errors": errors, "error_rate": errors as f64 / n,
                    "p50_ms": pct(&l, 0.5), "p95_ms": pct(&l, 0.95), "p99_ms": pct(&l, 0.99),
                    "max_ms": l.last().map_or(0.0, |m| *m as f64 / 1000.0)})
            })
            .collect();
        // The A2A agent cards the session fetched: what each agent says it is and can do.
        let cards: Vec<Value> = rec
            .http()
            .filter_map(|h| match h {
                crate::events::HttpEvent::AgentCard { path, card, .. } => {
                    let f = crate::inspect::a2a::CardFacts::read(card);
                    Some(json!({"path": path, "name": f.name, "version": f.version,
                        "streaming": f.streaming, "push_notifications": f.push,
                        "protocol_versions": f.protocol_versions, "skills": f.skills,
                        "card": serde_json::from_str::<Value>(card).ok()}))
                }
                _ => None,
            })
            .collect();
        Ok(json!({"methods": methods, "agent_cards": cards}))
    }

    fn cost(&self, args: &Value) -> Result<Value, String> {
        let (_, rec) = self.recording(string_arg(args, "session")?)?;
        let tok: crate::tokens::Tokenizer = match args.get("tokenizer").and_then(Value::as_str) {
            Some(t) => t.parse()?,
            None => Default::default(),
        };
        serde_json::to_value(crate::offline::cost::cost(&rec, tok)).map_err(|e| e.to_string())
    }

    fn check(&self, args: &Value) -> Result<Value, String> {
        let (_, rec) = self.recording(string_arg(args, "session")?)?;
        let strings = |k: &str| -> Vec<String> {
            args.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let gate = crate::offline::gate::Gate::new(&strings("fail_on"), &strings("allow"))
            .map_err(|e| e.to_string())?;
        let report = crate::offline::gate::recording(
            &gate,
            &rec,
            crate::inspect::recorded::check_recording(&rec),
        );
        let scopes: Vec<Value> = report
            .scopes
            .iter()
            .map(crate::offline::gate::scope_json)
            .collect();
        Ok(json!({"passed": !report.failed(), "scopes": scopes}))
    }

    fn diff(&self, args: &Value) -> Result<Value, String> {
        let (an, a) = self.recording(string_arg(args, "a")?)?;
        let (bn, b) = self.recording(string_arg(args, "b")?)?;
        let d = crate::offline::diff::diff(
            &an.display().to_string(),
            &a,
            &bn.display().to_string(),
            &b,
            crate::offline::diff::Thresholds::default(),
        );
        let regressions = d.regressions();
        let mut v = serde_json::to_value(&d).map_err(|e| e.to_string())?;
        v["regressions"] = json!(regressions);
        Ok(v)
    }

    /// `replay_call`: one recorded call's exchange sent to `target`, judged as `replay` does.
    pub async fn replay_call(&self, args: &Value) -> Value {
        if let Some(refused) = self.replay_refused() {
            return refused;
        }
        let r = async {
            let (_, rec) = self.recording(string_arg(args, "session")?)?;
            let index = args
                .get("index")
                .and_then(Value::as_u64)
                .ok_or("`index` (an integer) is required")? as usize;
            let target = string_arg(args, "target")?;
            let c = rec
                .calls()
                .nth(index)
                .ok_or_else(|| format!("no call {index}"))?
                .clone();
            // The call's own exchange: its head, its messages, its end.
            let mut one = Capture {
                header: rec.header.clone(),
                ..Default::default()
            };
            one.events = rec
                .events
                .iter()
                .filter(|e| match e {
                    Event::Http(h) => h.exchange() == c.exchange,
                    Event::Message(m) => m.exchange == c.exchange && m.scope == c.scope,
                    Event::Call(x) => x.exchange == c.exchange,
                    _ => false,
                })
                .cloned()
                .collect();
            let opts = crate::replay::ReplayOptions {
                target: crate::proxy::upstream::parse_url(target)?,
                ignore: Vec::new(),
                timeout: std::time::Duration::from_secs(30),
                headers: Vec::new(),
                insecure: false,
                wait: std::time::Duration::ZERO,
                pace: false,
            };
            let report = crate::replay::replay(&one, &opts)
                .await
                .map_err(|e| e.to_string())?;
            let mine = report
                .calls
                .iter()
                .find(|x| x.id == c.id.to_json_text())
                .or(report.calls.first())
                .ok_or("the call's exchange sent nothing to replay")?;
            Ok::<Value, String>(
                json!({"verdict": mine.verdict.to_string(), "pass": mine.pass,
                "recorded": mine.recorded, "diffs": mine.diffs, "latency_ms": mine.latency_ms}),
            )
        }
        .await;
        match r {
            Ok(v) => tool_ok(v),
            Err(e) => tool_error(e),
        }
    }

    fn resources(&self) -> Value {
        let list: Vec<Value> = self
            .sessions()
            .into_iter()
            .take(MAX_PAGE)
            .map(|s| {
                json!({"uri": format!("rpctap://session/{}", s.name), "name": s.name,
                    "description": format!("{} session of {} ({} calls{})", s.mode, s.label, s.calls, if s.live { ", live" } else { "" }),
                    "mimeType": "application/json"})
            })
            .collect();
        json!({"resources": list})
    }

    fn read_resource(&self, uri: &str) -> Result<Value, String> {
        let name = uri
            .strip_prefix("rpctap://session/")
            .ok_or_else(|| format!("{uri}: not an rpctap://session/NAME resource"))?;
        let s = self
            .sessions()
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| format!("no session {name:?}"))?;
        let text = serde_json::to_string_pretty(&s).unwrap_or_default();
        Ok(json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]}))
    }

    /// One JSON-RPC message from the client; the reply, if it needs one.
    pub async fn handle(&self, msg: &Value) -> Option<Value> {
        let id = msg.get("id")?.clone();
        let Some(method) = msg.get("method").and_then(Value::as_str) else {
            return None; // a response to nothing we asked
        };
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let result = match method {
            "initialize" => {
                let asked = params["protocolVersion"].as_str().unwrap_or(PROTOCOLS[0]);
                let version = PROTOCOLS
                    .iter()
                    .find(|v| **v == asked)
                    .unwrap_or(&PROTOCOLS[0]);
                json!({"protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": false}, "resources": {"listChanged": true}},
                    "serverInfo": {"name": "rpctap", "version": env!("CARGO_PKG_VERSION")},
                    "instructions": "rpctap's recorded MCP and JSON-RPC sessions: list_sessions, then list_calls (filter e.g. `status:error`, `code:MCP_*`), get_call, find_anomalies, stats, check, diff."})
            }
            "server/discover" => {
                json!({"supportedVersions": PROTOCOLS, "capabilities": {"tools": {}, "resources": {"listChanged": true}}, "resultType": "complete", "ttlMs": 0, "cacheScope": "public"})
            }
            "ping" => json!({}),
            "tools/list" => json!({"tools": tools(self.allow_replay)}),
            "tools/call" => {
                let name = params["name"].as_str().unwrap_or("");
                let args = params.get("arguments").cloned().unwrap_or(json!({}));
                if name == "replay_call" {
                    self.replay_call(&args).await
                } else {
                    // Reading and re-inspecting recordings blocks: off the runtime's workers.
                    let me = self.clone();
                    let name = name.to_string();
                    match tokio::task::spawn_blocking(move || me.call(&name, &args)).await {
                        Ok(v) => v,
                        Err(e) => tool_error(format!("the tool failed: {e}")),
                    }
                }
            }
            "resources/list" => self.resources(),
            "resources/templates/list" => {
                json!({"resourceTemplates": [{"uriTemplate": "rpctap://session/{name}", "name": "session", "mimeType": "application/json"}]})
            }
            "resources/read" => match self.read_resource(params["uri"].as_str().unwrap_or("")) {
                Ok(v) => v,
                Err(e) => return Some(rpc_error(&id, -32002, &e)),
            },
            _ => {
                return Some(rpc_error(
                    &id,
                    -32601,
                    &format!("method not found: {method}"),
                ))
            }
        };
        Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }

    /// The session names now (for `notifications/resources/list_changed`).
    pub fn session_names(&self) -> Vec<(String, bool)> {
        self.sessions()
            .into_iter()
            .map(|s| (s.name, s.live))
            .collect()
    }
}

/// A message's request and reply texts (cut), found by the call's scope, direction and id.
fn messages_of(rec: &Capture, c: &crate::events::CallEvent) -> (Value, Value) {
    let mut req = Value::Null;
    let mut rep = Value::Null;
    for e in &rec.events {
        let Event::Message(m) = e else { continue };
        if m.scope != c.scope || m.id.as_ref() != Some(&c.id) {
            continue;
        }
        let text = m.json_text();
        if m.direction == c.direction && m.kind == crate::rpc::Kind::Request {
            req = cut(&text);
        } else if m.direction != c.direction && m.kind.is_response() {
            rep = cut(&text);
        }
    }
    (req, rep)
}

/// `rpctap mcp` over stdio: a message per line in, a reply per line out, and
/// `notifications/resources/list_changed` when a session starts or ends.
pub async fn serve_stdio(agent: Agent) -> std::io::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(64);
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(line) = rx.recv().await {
            if out.write_all(line.as_bytes()).await.is_err() || out.write_all(b"\n").await.is_err()
            {
                break;
            }
            let _ = out.flush().await;
        }
    });
    // Sessions starting or ending: said as a list change (polled; the hub has no daemon).
    let watcher = {
        let agent = agent.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut last = tokio::task::spawn_blocking({
                let a = agent.clone();
                move || a.session_names()
            })
            .await
            .unwrap_or_default();
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                let a = agent.clone();
                let now = tokio::task::spawn_blocking(move || a.session_names())
                    .await
                    .unwrap_or_default();
                if now != last {
                    last = now;
                    let n =
                        json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"});
                    if tx.send(n.to_string()).await.is_err() {
                        break;
                    }
                }
            }
        })
    };
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(Value::Array(batch)) => {
                let mut out = Vec::new();
                for m in &batch {
                    out.extend(agent.handle(m).await);
                }
                (!out.is_empty()).then(|| Value::Array(out))
            }
            Ok(m) => agent.handle(&m).await,
            Err(e) => Some(rpc_error(
                &Value::Null,
                -32700,
                &format!("parse error: {e}"),
            )),
        };
        if let Some(r) = reply {
            if tx.send(r.to_string()).await.is_err() {
                break;
            }
        }
    }
    watcher.abort();
    drop(tx);
    let _ = writer.await;
    Ok(())
}
