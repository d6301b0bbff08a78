//! Running a suite's cases: each sent through the session, its reply given a verdict in the words
//! testers know (Succeeded, Error reported, Rejected (HTTP N), No reply) and its assertions
//! checked in plain words; what the inspector found in the run is then set beside the case it is
//! about (by the call's id). A probe runs each case it generated once and writes what the server
//! really answered into its negative cases (`pin`); `--fuzz` sends seeded random inputs and
//! shrinks each that crashes, hangs or breaks the output schema to the smallest that still does.

use super::findings::Found;
use super::session::{Answer, Session};
use super::suite::{Case, Expect, Kind, Suite};
use super::values::{self, Rng};
use crate::replay::Verdict;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;

/// One assertion's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub assertion: &'static str,
    pub pass: bool,
    pub detail: String,
}

/// A protocol finding of the inspector's, beside the case it is about.
#[derive(Debug, Clone, Serialize)]
pub struct Reported {
    pub code: String,
    pub severity: crate::events::Severity,
    pub path: String,
    pub message: String,
    /// About the request rpctap sent, not the server's answer (an invalid input the case sends
    /// on purpose): listed, failing nothing.
    pub expected: bool,
    /// Accepted by `--allow` or the case's `allow`.
    pub allowed: bool,
    /// Fails the run (the gate's `--fail-on`, not expected, not allowed).
    pub failing: bool,
}

/// One case's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub kind: Kind,
    /// Why it was not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    pub pass: bool,
    pub checks: Vec<Check>,
    pub findings: Vec<Reported>,
    pub latency_ms: f64,
    /// What came back (on a failure, for the reader).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply: Option<Value>,
    /// The codes its `allow` accepts.
    #[serde(skip)]
    pub allow: Vec<String>,
}

/// A run's outcome.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Report {
    pub target: String,
    pub cases: Vec<CaseResult>,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    /// Findings about no case (the session's opening, its end).
    pub findings: Vec<Reported>,
    pub warnings: Vec<String>,
}

impl Report {
    /// The run fails: a case failed, or a finding about no case fails the gate.
    pub fn failed(&self) -> bool {
        self.failed > 0 || self.findings.iter().any(|f| f.failing)
    }
}

/// What a case sent and got.
pub struct Sent {
    pub answer: Answer,
    /// The ids of the calls it sent (none for a notification or raw bytes).
    pub ids: Vec<Value>,
}

/// Sends a case (ids from the session's counter).
pub async fn send(s: &mut Session, c: &Case) -> Sent {
    let mut ids = Vec::new();
    let mut msg = |method: &str, params: &Option<Value>, notification: bool, s: &mut Session| {
        let mut m = json!({"jsonrpc": "2.0", "method": method});
        if let Some(p) = params {
            m["params"] = p.clone();
        }
        if !notification {
            let id = json!(s.next_id());
            m["id"] = id.clone();
            ids.push(id);
        }
        m
    };
    let body = if let Some(raw) = &c.raw {
        raw.clone()
    } else if let Some(batch) = &c.batch {
        let all: Vec<Value> = batch
            .iter()
            .map(|b| msg(&b.method, &b.params, b.notification, s))
            .collect();
        Value::Array(all).to_string()
    } else {
        let method = c.method.as_deref().unwrap_or("");
        msg(method, &c.params, c.notification, s).to_string()
    };
    let answer = s.post(Bytes::from(body)).await;
    Sent { answer, ids }
}

/// The reply a case is judged on: its call's, else one with id `null` (an envelope the server
/// could not read), else the only one.
fn reply_of(sent: &Sent) -> Option<&Value> {
    match sent.ids.first() {
        Some(id) => sent.answer.reply_to(id),
        None => sent.answer.replies.first(),
    }
}

/// The verdict of what came back.
pub fn verdict(sent: &Sent) -> Verdict {
    let a = &sent.answer;
    match (a.status, reply_of(sent)) {
        (None, _) => Verdict::NoReply,
        (_, Some(r)) if r.get("error").is_some() => Verdict::ErrorReported,
        (_, Some(r)) if r.get("result").is_some() => Verdict::Succeeded,
        (Some(s), _) if !(200..300).contains(&s) => Verdict::Rejected { status: s },
        _ => Verdict::NoReply,
    }
}

fn text_of(result: &Value) -> String {
    result
        .get("content")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|x| x.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn short(v: &Value) -> String {
    let t = v.to_string();
    if t.len() > 200 {
        let mut cut = 200;
        while !t.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}…", &t[..cut])
    } else {
        t
    }
}

/// Checks each assertion the case makes on what came back.
pub fn judge(e: &Expect, sent: &Sent) -> Vec<Check> {
    let mut out = Vec::new();
    let r = reply_of(sent);
    let error = r.and_then(|r| r.get("error"));
    let result = r.and_then(|r| r.get("result"));
    let code = error.and_then(|e| e.get("code")).and_then(Value::as_i64);
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let is_error = result
        .and_then(|r| r.get("isError"))
        .and_then(Value::as_bool)
        == Some(true);
    let got = || match (error, result, sent.answer.status) {
        (Some(_), _, _) => format!(
            "error {} ({message})",
            code.map_or("?".into(), |c| c.to_string())
        ),
        (_, Some(res), _) if is_error => format!("a tool error: {}", text_of(res)),
        (_, Some(_), _) => "a result".to_string(),
        (None, None, Some(s)) if !(200..300).contains(&s) => format!("HTTP {s} without a reply"),
        _ => match &sent.answer.failure {
            Some(f) => format!("no reply ({f})"),
            None => "no reply".into(),
        },
    };
    let mut push = |assertion: &'static str, pass: bool, ok: &str, detail: String| {
        out.push(Check {
            assertion,
            pass,
            detail: if pass { ok.to_string() } else { detail },
        });
    };
    if let Some(want) = e.no_error {
        let pass = r.is_some() && (error.is_none() == want);
        push("No Error", pass, "no error", format!("got {}", got()));
    }
    if let Some(want) = e.has_error {
        let pass = (error.is_some()) == want;
        let ok = if want { "Rejected" } else { "no error" };
        push(
            "Has Error",
            pass,
            ok,
            format!(
                "expected {}an error, got {}",
                if want { "" } else { "no " },
                got()
            ),
        );
    }
    if let Some(want) = e.error_code {
        let pass = code == Some(want);
        let detail = match code {
            Some(c) => format!("Rejected, but for a different reason than expected: error {c} ({message}), expected {want}"),
            None => format!("expected error {want}, got {}", got()),
        };
        push(
            "Error Code Equals",
            pass,
            "Rejected for the expected reason",
            detail,
        );
    }
    if let Some(want) = &e.error_message_contains {
        let pass = error.is_some() && message.contains(want.as_str());
        push(
            "Error Message Contains",
            pass,
            "the message says so",
            format!(
                "expected an error message containing {want:?}, got {}",
                got()
            ),
        );
    }
    if let Some(want) = e.result_exists {
        push(
            "Result Exists",
            result.is_some() == want,
            "a result",
            format!("got {}", got()),
        );
    }
    if let Some(want) = e.tool_call_succeeded {
        let ok = result.is_some() && !is_error;
        push(
            "Tool Call Succeeded",
            ok == want,
            "the tool succeeded",
            format!("got {}", got()),
        );
    }
    if let Some(want) = e.tool_error {
        push(
            "Tool Error",
            is_error == want,
            "refused by the tool (isError)",
            format!("expected the tool to refuse the input, got {}", got()),
        );
    }
    if let Some(want) = &e.tool_output_contains {
        let pass = result.is_some_and(|r| text_of(r).contains(want.as_str()));
        push(
            "Tool Output Contains",
            pass,
            "the output says so",
            format!(
                "expected the tool's text to contain {want:?}, got {}",
                result.map_or_else(got, |r| short(&json!(text_of(r))))
            ),
        );
    }
    if let Some(want) = e.reply_matches_call {
        let id = sent.ids.first();
        let pass = match (r, id) {
            (Some(r), Some(id)) => (r.get("id") == Some(id)) == want,
            _ => !want,
        };
        push(
            "Reply Matches Call",
            pass,
            "the reply carries the call's id",
            match (r, id) {
                (Some(r), Some(id)) => format!(
                    "the call's id was {id}, the reply's {}",
                    r.get("id").unwrap_or(&Value::Null)
                ),
                _ => format!("got {}", got()),
            },
        );
    }
    if let Some(schema) = &e.output_schema {
        let structured = result.and_then(|r| r.get("structuredContent"));
        let (pass, detail) = match (structured, jsonschema::validator_for(schema)) {
            (_, Err(err)) => (false, format!("the output schema does not compile: {err}")),
            (None, _) if is_error => (true, String::new()),
            (None, _) => (
                false,
                format!(
                    "no structuredContent (the tool declares an output schema), got {}",
                    got()
                ),
            ),
            (Some(v), Ok(val)) => match val.iter_errors(v).next() {
                None => (true, String::new()),
                Some(err) => (
                    false,
                    format!(
                        "structuredContent breaks the output schema at {}: {err}",
                        err.instance_path()
                    ),
                ),
            },
        };
        push(
            "Output Schema",
            pass,
            "structuredContent meets the output schema",
            detail,
        );
    }
    if let Some(want) = e.rejected {
        let got_status = sent.answer.status;
        let pass = got_status == Some(want) && r.is_none();
        push(
            "Rejected (HTTP)",
            pass,
            "rejected at the HTTP layer",
            format!(
                "expected HTTP {want} without a reply, got {}{}",
                got_status.map_or("no answer".into(), |s| format!("HTTP {s}, ")),
                if got_status.is_some() {
                    got()
                } else {
                    String::new()
                }
            ),
        );
    }
    if let Some(want) = e.no_reply {
        let none = sent.answer.replies.is_empty()
            && sent.answer.status.is_some_and(|s| (200..300).contains(&s));
        push(
            "No Reply",
            none == want,
            "no reply, as for a notification",
            format!(
                "expected no reply, got {}{}",
                sent.answer
                    .status
                    .map_or(String::new(), |s| format!("HTTP {s}, ")),
                match sent.answer.replies.first() {
                    Some(r) => short(r),
                    None => got(),
                }
            ),
        );
    }
    if let Some(want) = e.no_crash {
        let broke = failure(sent, None);
        push(
            "No Crash",
            broke.is_none() == want,
            "answered without breaking",
            match &broke {
                Some(f) => f.describe(),
                None => format!("expected the server to break, got {}", got()),
            },
        );
    }
    if let Some(want) = e.replies {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for r in &sent.answer.replies {
            *seen
                .entry(r.get("id").unwrap_or(&Value::Null).to_string())
                .or_default() += 1;
        }
        let each = sent
            .ids
            .iter()
            .all(|id| seen.get(&id.to_string()) == Some(&1));
        let pass = sent.answer.replies.len() == want && each;
        push(
            "Replies",
            pass,
            "one reply to each call",
            format!(
                "expected {want} replies, one to each call ({}), got {} ({})",
                sent.ids
                    .iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                sent.answer.replies.len(),
                sent.answer
                    .replies
                    .iter()
                    .map(|r| r.get("id").unwrap_or(&Value::Null).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    out
}

/// Runs one case and judges it.
pub async fn run_case(s: &mut Session, c: &Case) -> CaseResult {
    if let Some(why) = &c.disabled {
        return CaseResult {
            name: c.name.clone(),
            kind: c.kind,
            skipped: Some(why.clone()),
            verdict: None,
            pass: true,
            checks: vec![],
            findings: vec![],
            latency_ms: 0.0,
            reply: None,
            allow: vec![],
        };
    }
    let sent = send(s, c).await;
    let checks = judge(&c.expect, &sent);
    let pass = checks.iter().all(|k| k.pass);
    CaseResult {
        name: c.name.clone(),
        kind: c.kind,
        skipped: None,
        verdict: Some(verdict(&sent).to_string()),
        pass,
        checks,
        findings: vec![],
        latency_ms: sent.answer.latency_ms,
        reply: (!pass).then(|| reply_of(&sent).cloned()).flatten(),
        allow: c.allow.clone(),
    }
}

/// Runs every case of `suite` in order.
pub async fn run(s: &mut Session, suite: &Suite, target: &str) -> Report {
    let mut r = Report {
        target: target.to_string(),
        ..Default::default()
    };
    for (i, c) in suite.cases.iter().enumerate() {
        s.case = Some(i);
        r.cases.push(run_case(s, c).await);
    }
    s.case = None;
    r
}

/// Sets the inspector's findings (a check of the run's recording, `findings::by_case`) beside
/// the cases they are about, and counts the cases: a finding the gate fails on fails its case,
/// unless it is about the request rpctap sent (the case's own doing) or accepted (`--allow`, the
/// case's `allow`); one about no case fails the run.
pub fn attach(
    r: &mut Report,
    found: Vec<Found>,
    gate: &crate::offline::gate::Gate,
    session_allow: &[String],
) {
    for f in found {
        let case = f.case.filter(|i| *i < r.cases.len());
        let finding = f.as_finding();
        let allowed = gate.allows(&finding, None)
            || match case {
                Some(i) => r.cases[i].allow.contains(&f.code),
                None => session_allow.contains(&f.code),
            };
        let failing = !f.request && !allowed && gate.fails_on(&finding);
        let rep = Reported {
            code: f.code,
            severity: f.severity,
            path: finding.path,
            message: f.message,
            expected: f.request,
            allowed,
            failing,
        };
        match case {
            Some(i) => r.cases[i].findings.push(rep),
            None => r.findings.push(rep),
        }
    }
    r.passed = 0;
    r.failed = 0;
    r.skipped = 0;
    for c in &mut r.cases {
        if c.findings.iter().any(|f| f.failing) {
            c.pass = false;
        }
        match (&c.skipped, c.pass) {
            (Some(_), _) => r.skipped += 1,
            (None, true) => r.passed += 1,
            (None, false) => r.failed += 1,
        }
    }
}

/// Accepts in the suite what rpctap found in the server's answers when the probe tried each
/// case (its `allow`, and a note saying what was found; the session's own in the suite's
/// `allow`): the suite passes on the server as it is, says what was found, and fails on anything
/// new. Gives back a warning for each, so the person running the probe sees them.
pub fn pin_findings(suite: &mut Suite, found: &[Found]) -> Vec<String> {
    let mut warnings = Vec::new();
    let n = suite.cases.len();
    for f in found.iter().filter(|f| !f.request) {
        match f.case {
            // A fuzzed input's (numbered past the cases): `fuzz` reports what it found.
            Some(i) if i >= n => continue,
            Some(i) => {
                let c = &mut suite.cases[i];
                if c.kind == Kind::Fuzz || c.allow.contains(&f.code) {
                    continue;
                }
                c.allow.push(f.code.clone());
                let said = format!("rpctap finds {} in the answer: {}", f.code, f.message);
                warnings.push(format!(
                    "{}: {said} (accepted in the suite's allow)",
                    c.name
                ));
                c.note = Some(match c.note.take() {
                    Some(n) => format!("{n}; {said}"),
                    None => said,
                });
            }
            None => {
                if !suite.allow.contains(&f.code) {
                    suite.allow.push(f.code.clone());
                    warnings.push(format!(
                        "rpctap finds {} in the session: {} (accepted in the suite's allow)",
                        f.code, f.message
                    ));
                }
            }
        }
    }
    warnings
}

/// Writes into a generated case what the server really did (see the module's comment); gives
/// back a warning when the server's answer is not one a suite should expect.
pub fn pin(c: &mut Case, sent: &Sent, mcp_version: Option<&str>) -> Option<String> {
    let v = verdict(sent);
    let r = reply_of(sent);
    let is_error = r
        .and_then(|r| r.pointer("/result/isError"))
        .and_then(Value::as_bool)
        == Some(true);
    match c.kind {
        Kind::Happy => {
            if v == Verdict::Succeeded && !is_error {
                None
            } else {
                let what = judge(&c.expect, sent)
                    .into_iter()
                    .find(|k| !k.pass)
                    .map_or_else(
                        || v.to_string(),
                        |k| format!("{}: {}", k.assertion, k.detail),
                    );
                c.disabled = Some(format!(
                    "the generated input did not succeed ({what}); give it an input that does and delete this line"
                ));
                None
            }
        }
        // A notification answered, a batch answered otherwise than one reply per call: what the
        // server does is written, with what JSON-RPC calls for beside it.
        Kind::Notification => {
            if judge(&c.expect, sent).iter().all(|k| k.pass) || sent.answer.failure.is_some() {
                return None;
            }
            c.expect = Expect {
                no_reply: Some(false),
                ..Default::default()
            };
            c.note = Some(format!(
                "the server answers a notification ({v}); JSON-RPC says a notification gets no reply"
            ));
            Some(format!("{}: the server answers a notification", c.name))
        }
        Kind::Batch => {
            let checks = judge(&c.expect, sent);
            let k = checks.iter().find(|k| !k.pass)?;
            let got = sent.answer.replies.len();
            let each = sent.ids.iter().all(|id| {
                sent.answer
                    .replies
                    .iter()
                    .filter(|r| r.get("id") == Some(id))
                    .count()
                    == 1
            });
            if sent.answer.failure.is_some() || !each {
                return Some(format!("{}: {}", c.name, k.detail));
            }
            c.expect.replies = Some(got);
            c.note = Some(format!(
                "the server gives {got} replies to a batch of {} calls; JSON-RPC calls for one to each call",
                sent.ids.len()
            ));
            Some(format!("{}: {}", c.name, k.detail))
        }
        _ => {
            let spec = c.expect.error_code;
            let code = r
                .and_then(|r| r.pointer("/error/code"))
                .and_then(Value::as_i64);
            match (&v, code) {
                (Verdict::ErrorReported, Some(code)) => {
                    c.expect = Expect {
                        has_error: Some(true),
                        error_code: Some(code),
                        ..Default::default()
                    };
                    if let Some(s) = spec.filter(|s| *s != code) {
                        c.note = Some(format!(
                            "the server answered error {code}; JSON-RPC calls for {s} here"
                        ));
                    }
                    None
                }
                (Verdict::Succeeded, _) if is_error && c.method.as_deref() == Some("tools/call") => {
                    c.expect = Expect {
                        tool_error: Some(true),
                        ..Default::default()
                    };
                    // MCP allows a tool to refuse its input as a tool error from 2025-11-25.
                    if mcp_version.is_some_and(|v| v < "2025-11-25") && c.kind != Kind::UnknownTool {
                        c.note = Some("the tool refused the input as a tool error; MCP before 2025-11-25 calls for error -32602".into());
                    } else if c.kind == Kind::UnknownTool {
                        c.note = Some("the server answered an unknown tool with a tool error; MCP calls for error -32602".into());
                    }
                    None
                }
                (Verdict::Rejected { status }, _) => {
                    c.expect = Expect {
                        rejected: Some(*status),
                        ..Default::default()
                    };
                    None
                }
                // Taken in and never answered (a 2xx without a body): what the server does,
                // said beside what the spec calls for.
                (Verdict::NoReply, _) if sent.answer.failure.is_none() => {
                    c.expect = Expect {
                        no_reply: Some(true),
                        ..Default::default()
                    };
                    c.note = Some(format!(
                        "the server gives no reply{}",
                        spec.map_or(String::new(), |s| format!("; JSON-RPC calls for error {s} here"))
                    ));
                    None
                }
                // Never answered at all: every run would wait its whole timeout for it.
                (Verdict::NoReply, _) => {
                    c.disabled = Some(format!(
                        "the server gave no reply ({}){}; delete this line to check it again",
                        sent.answer.failure.as_deref().unwrap_or("no answer"),
                        spec.map_or(String::new(), |s| format!("; JSON-RPC calls for error {s} here"))
                    ));
                    Some(format!("{}: the server gave no reply; the case is written disabled", c.name))
                }
                _ => Some(format!(
                    "{}: the server gave {v}{}; the case expects a refusal and fails on the server as it is",
                    c.name,
                    if v == Verdict::Succeeded { " (it accepted what it should refuse)" } else { "" }
                )),
            }
        }
    }
}

/// Why a fuzzed input failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// No answer, the connection closed, a 5xx, an internal error: the server broke.
    Crash(String),
    /// No answer within the timeout.
    Hang,
    /// `structuredContent` breaks the declared output schema.
    Schema(String),
}

impl Failure {
    fn class(&self) -> u8 {
        match self {
            Failure::Crash(_) => 0,
            Failure::Hang => 1,
            Failure::Schema(_) => 2,
        }
    }

    fn describe(&self) -> String {
        match self {
            Failure::Crash(w) => format!("the server crashed ({w})"),
            Failure::Hang => "the server did not answer within --timeout".into(),
            Failure::Schema(w) => w.clone(),
        }
    }
}

fn failure(sent: &Sent, schema: Option<&Value>) -> Option<Failure> {
    let a = &sent.answer;
    if let Some(f) = &a.failure {
        return Some(if f.starts_with("no answer within") {
            Failure::Hang
        } else {
            Failure::Crash(f.clone())
        });
    }
    let r = reply_of(sent);
    match (a.status, r) {
        (Some(s), _) if s >= 500 => return Some(Failure::Crash(format!("HTTP {s}"))),
        (_, Some(r)) if r.pointer("/error/code").and_then(Value::as_i64) == Some(-32603) => {
            return Some(Failure::Crash(format!(
                "internal error: {}",
                r.pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            )))
        }
        (Some(_), None) => return Some(Failure::Crash("no reply".into())),
        _ => {}
    }
    if let Some(schema) = schema {
        let e = Expect {
            output_schema: Some(schema.clone()),
            ..Default::default()
        };
        if r.is_some_and(|r| r.pointer("/result/structuredContent").is_some()) {
            if let Some(k) = judge(&e, sent).into_iter().find(|k| !k.pass) {
                return Some(Failure::Schema(k.detail));
            }
        }
    }
    None
}

/// The case number fuzzed inputs are sent under (past any suite's cases).
pub const FUZZING: usize = 1 << 30;

/// What `--fuzz` found: a case for the suite, and a line for the person.
pub struct Fuzzed {
    pub case: Case,
    pub said: String,
}

/// Sends `n` seeded inputs to each tool whose happy path is enabled (valid ones and, one in
/// three, one argument of the wrong type); each input that crashes, hangs or breaks the output
/// schema is shrunk to the smallest that still does and becomes a case. `reopen` opens a fresh
/// session after a crash (a crashed stdio server is started again for the next session).
pub async fn fuzz<F, Fut>(
    s: &mut Session,
    tools: &[Tool],
    n: usize,
    seed: u64,
    mut reopen: F,
) -> (Vec<Fuzzed>, Vec<Case>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<Session>>,
{
    let mut out = Vec::new();
    let mut inputs = Vec::new();
    let mut rng = Rng::new(seed);
    for tool in tools {
        let name = tool.name.clone();
        let schema = &tool.input;
        let output = tool.output.clone();
        let required: Vec<String> = values::required(schema, schema)
            .into_iter()
            .map(str::to_string)
            .collect();
        let mut found: Vec<u8> = Vec::new();
        for i in 0..n {
            let mut args = values::random(schema, schema, &mut rng, 0);
            if i % 3 == 2 {
                let props = values::properties(schema, schema);
                if !props.is_empty() {
                    let (k, p) = props[rng.below(props.len() as u64) as usize];
                    if let (Some(w), Some(o)) =
                        (values::wrong_type(schema, p), args.as_object_mut())
                    {
                        o.insert(k.to_string(), w);
                    }
                }
            }
            let case = fuzz_case(&name, &args);
            let sent = numbered(s, &case, &mut inputs).await;
            let Some(fail) = failure(&sent, output.as_ref()) else {
                continue;
            };
            if found.contains(&fail.class()) {
                if matches!(fail, Failure::Crash(_) | Failure::Hang) {
                    if let Some(fresh) = reopen().await {
                        renew(s, fresh);
                    }
                }
                continue;
            }
            found.push(fail.class());
            // Shrink: the first smaller input that fails the same way is kept, until none does.
            let keep: Vec<&str> = required.iter().map(String::as_str).collect();
            let mut smallest = args.clone();
            let mut last = fail.clone();
            let mut tries = 0;
            'shrink: loop {
                if matches!(last, Failure::Crash(_) | Failure::Hang) {
                    if let Some(fresh) = reopen().await {
                        renew(s, fresh);
                    }
                }
                for candidate in values::shrinks(&smallest, &keep) {
                    tries += 1;
                    if tries > 64 {
                        break 'shrink;
                    }
                    let sent = numbered(s, &fuzz_case(&name, &candidate), &mut inputs).await;
                    match failure(&sent, output.as_ref()) {
                        Some(f) if f.class() == fail.class() => {
                            smallest = candidate;
                            last = f;
                            continue 'shrink;
                        }
                        Some(Failure::Crash(_) | Failure::Hang) => {
                            if let Some(fresh) = reopen().await {
                                renew(s, fresh);
                            }
                        }
                        _ => {}
                    }
                }
                break;
            }
            if matches!(last, Failure::Crash(_) | Failure::Hang) {
                if let Some(fresh) = reopen().await {
                    renew(s, fresh);
                }
            }
            let mut case = fuzz_case(&name, &smallest);
            case.name = format!(
                "tool {name}: fuzz {} {}",
                fail.class_name(),
                short(&smallest)
            );
            case.expect = Expect {
                no_crash: Some(true),
                output_schema: output
                    .clone()
                    .filter(|_| matches!(last, Failure::Schema(_))),
                ..Default::default()
            };
            let said = format!(
                "tool {name}: {} on {} (shrunk from {})",
                last.describe(),
                short(&smallest),
                short(&args)
            );
            case.note = Some(format!(
                "found by --fuzz (seed {seed}): {}",
                last.describe()
            ));
            out.push(Fuzzed { case, said });
        }
    }
    (out, inputs)
}

/// Goes on in a fresh session, keeping what the old one sent (the findings are matched by it).
fn renew(s: &mut Session, mut fresh: Session) {
    fresh.sent = std::mem::take(&mut s.sent);
    *s = fresh;
}

/// Sends a fuzzed input as case `FUZZING + n` (its place among the inputs sent), so what the
/// inspector finds in its answer names it.
async fn numbered(s: &mut Session, case: &Case, inputs: &mut Vec<Case>) -> Sent {
    s.case = Some(FUZZING + inputs.len());
    inputs.push(case.clone());
    send(s, case).await
}

/// The protocol violations rpctap found in the answers to fuzzed inputs (`inputs`, as `fuzz`
/// gave them back): one case per tool and code, with the input that caused it.
pub fn fuzz_findings(found: &[Found], inputs: &[Case], seed: u64) -> Vec<Fuzzed> {
    let mut out: Vec<Fuzzed> = Vec::new();
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut inputs_seen: Vec<usize> = Vec::new();
    for f in found.iter().filter(|f| !f.request) {
        let Some(n) = f.case.and_then(|i| i.checked_sub(FUZZING)) else {
            continue;
        };
        let Some(input) = inputs.get(n) else {
            continue;
        };
        // One case per input: what follows from its first finding (a reply so broken the
        // call counts as unanswered) is the same defect.
        if inputs_seen.contains(&n) {
            continue;
        }
        inputs_seen.push(n);
        let params = input.params.clone().unwrap_or(Value::Null);
        let tool = params["name"].as_str().unwrap_or("").to_string();
        if seen.contains(&(tool.clone(), f.code.clone())) {
            continue;
        }
        seen.push((tool.clone(), f.code.clone()));
        let args = params.get("arguments").cloned().unwrap_or(Value::Null);
        let mut case = input.clone();
        case.name = format!("tool {tool}: fuzz {} {}", f.code, short(&args));
        case.expect = Expect {
            no_crash: Some(true),
            ..Default::default()
        };
        case.note = Some(format!(
            "found by --fuzz (seed {seed}): rpctap finds {} in the answer: {}",
            f.code, f.message
        ));
        out.push(Fuzzed {
            said: format!(
                "tool {tool}: rpctap finds {} in the answer to {}: {}",
                f.code,
                short(&args),
                f.message
            ),
            case,
        });
    }
    out
}

impl Failure {
    fn class_name(&self) -> &'static str {
        match self {
            Failure::Crash(_) => "crash",
            Failure::Hang => "hang",
            Failure::Schema(_) => "output schema",
        }
    }
}

/// A tool `--fuzz` sends inputs to: its name and schemas.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    pub input: Value,
    pub output: Option<Value>,
}

fn fuzz_case(tool: &str, args: &Value) -> Case {
    Case::call(
        String::new(),
        Kind::Fuzz,
        "tools/call",
        Some(json!({"name": tool, "arguments": args})),
        Expect::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sent(status: u16, replies: Vec<Value>, ids: Vec<Value>) -> Sent {
        Sent {
            answer: Answer {
                status: Some(status),
                replies,
                ..Default::default()
            },
            ids,
        }
    }

    fn case(kind: Kind, expect: Expect) -> Case {
        Case::call(
            "c",
            kind,
            "tools/call",
            Some(json!({"name": "t", "arguments": {}})),
            expect,
        )
    }

    #[test]
    fn assertions_say_in_plain_words_what_came_back() {
        let wrong = sent(
            200,
            vec![json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom"}})],
            vec![json!(1)],
        );
        let e = Expect {
            has_error: Some(true),
            error_code: Some(-32602),
            ..Default::default()
        };
        let k = judge(&e, &wrong);
        assert!(k[0].pass);
        assert!(!k[1].pass);
        assert!(k[1].detail.contains("Rejected, but for a different reason than expected: error -32603 (boom), expected -32602"), "{}", k[1].detail);
        assert_eq!(verdict(&wrong), Verdict::ErrorReported);
        let tool_failed = sent(
            200,
            vec![
                json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "no"}], "isError": true}}),
            ],
            vec![json!(1)],
        );
        let e = Expect {
            tool_call_succeeded: Some(true),
            tool_error: Some(true),
            ..Default::default()
        };
        let k = judge(&e, &tool_failed);
        assert!(!k[0].pass && k[0].detail.contains("a tool error: no"));
        assert!(k[1].pass);
        let schema = Expect {
            output_schema: Some(
                json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
            ),
            reply_matches_call: Some(true),
            ..Default::default()
        };
        let bad = sent(
            200,
            vec![
                json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "structuredContent": {"n": "x"}}}),
            ],
            vec![json!(1)],
        );
        let k = judge(&schema, &bad);
        let o = k.iter().find(|k| k.assertion == "Output Schema").unwrap();
        assert!(!o.pass && o.detail.contains("/n"), "{}", o.detail);
        // A reply to another id is no reply to this call.
        let bad = sent(200, vec![json!({"id": 2, "result": {}})], vec![json!(1)]);
        let k = judge(
            &Expect {
                reply_matches_call: Some(true),
                ..Default::default()
            },
            &bad,
        );
        assert!(!k[0].pass);
        let rejected = sent(401, vec![], vec![json!(1)]);
        assert_eq!(verdict(&rejected), Verdict::Rejected { status: 401 });
        let k = judge(
            &Expect {
                rejected: Some(401),
                no_crash: Some(true),
                ..Default::default()
            },
            &rejected,
        );
        assert!(k[0].pass);
        assert!(!k[1].pass, "a 4xx without a reply is no answer");
        let batch = sent(
            200,
            vec![json!({"id": 1, "result": 1}), json!({"id": 1, "result": 2})],
            vec![json!(1), json!(2)],
        );
        let k = judge(
            &Expect {
                replies: Some(2),
                ..Default::default()
            },
            &batch,
        );
        assert!(!k[0].pass, "two replies, but not one to each call");
    }

    #[test]
    fn a_probe_pins_what_the_server_really_answered() {
        // An error code other than the spec's: the server's, with a note.
        let mut c = case(
            Kind::WrongType,
            Expect {
                has_error: Some(true),
                error_code: Some(-32602),
                ..Default::default()
            },
        );
        let s = sent(
            200,
            vec![json!({"id": 1, "error": {"code": -32000, "message": "x"}})],
            vec![json!(1)],
        );
        assert!(pin(&mut c, &s, Some("2025-11-25")).is_none());
        assert_eq!(c.expect.error_code, Some(-32000));
        assert!(c.note.as_deref().unwrap().contains("-32602"));
        // A tool error: allowed for input validation from 2025-11-25, noted before it.
        let te = sent(
            200,
            vec![json!({"id": 1, "result": {"content": [], "isError": true}})],
            vec![json!(1)],
        );
        let mut c = case(Kind::MissingRequired, Expect::default());
        assert!(pin(&mut c, &te, Some("2025-11-25")).is_none());
        assert_eq!(c.expect.tool_error, Some(true));
        assert!(c.note.is_none());
        let mut c = case(Kind::MissingRequired, Expect::default());
        pin(&mut c, &te, Some("2025-06-18"));
        assert!(c.note.as_deref().unwrap().contains("before 2025-11-25"));
        // Accepted what it should refuse: the spec's expectation stays, and the probe says so.
        let ok = sent(
            200,
            vec![json!({"id": 1, "result": {"content": []}})],
            vec![json!(1)],
        );
        let mut c = case(
            Kind::MissingRequired,
            Expect {
                has_error: Some(true),
                ..Default::default()
            },
        );
        assert!(pin(&mut c, &ok, None)
            .unwrap()
            .contains("accepted what it should refuse"));
        assert_eq!(c.expect.has_error, Some(true));
        // A happy path that did not succeed: disabled, saying what came back.
        let mut c = case(
            Kind::Happy,
            Expect {
                tool_call_succeeded: Some(true),
                ..Default::default()
            },
        );
        pin(&mut c, &te, None);
        assert!(c
            .disabled
            .as_deref()
            .unwrap()
            .contains("Tool Call Succeeded"));
        // Never answered: disabled (each run would wait its timeout).
        let mut never = sent(200, vec![], vec![json!(1)]);
        never.answer.status = None;
        never.answer.failure = Some("no answer within 1s".into());
        let mut c = case(
            Kind::InvalidRequest,
            Expect {
                error_code: Some(-32600),
                ..Default::default()
            },
        );
        assert!(pin(&mut c, &never, None).is_some());
        assert!(c.disabled.as_deref().unwrap().contains("-32600"));
        // A notification answered: written as the server does it.
        let mut c = case(
            Kind::Notification,
            Expect {
                no_reply: Some(true),
                ..Default::default()
            },
        );
        c.notification = true;
        let answered = sent(200, vec![json!({"jsonrpc": "2.0", "result": 0})], vec![]);
        assert!(pin(&mut c, &answered, None).is_some());
        assert_eq!(c.expect.no_reply, Some(false));
    }
}
