//! `check` as a CI gate: which findings fail a run (`--fail-on` severities or codes), which are
//! accepted (`--allow CODE[:method-or-tool]` — still listed, marked allowed), the assertions a job
//! makes about what was called (`--expect-tool`, `--forbid-tool`, `--max-duration`), and the
//! report's three forms: the seed-004 JSON lines, a text summary for a person, and JUnit whose
//! case names are the same in every run of the same job (the server's label, the session's place
//! in the recording, the method and tool — never a random session id).
//!
//! The gate reads what `inspect::recorded::check_recording` found and the recording's own call
//! lines; it decides nothing the inspector did not.

use crate::events::{CallEvent, Outcome, Severity};
use crate::inspect::offline::{CheckResult, Finding};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// What fails a run.
#[derive(Clone, Debug, PartialEq, Eq)]
enum FailOn {
    Severity(Severity),
    Code(String),
}

/// An accepted finding: its code, and optionally the method or tool it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Allow {
    code: String,
    what: Option<String>,
}

/// The gate a job sets.
#[derive(Clone, Debug)]
pub struct Gate {
    fail_on: Vec<FailOn>,
    allow: Vec<Allow>,
    pub expect_tools: Vec<String>,
    pub forbid_tools: Vec<String>,
    /// The longest a call may take of the server's time (a multi round-trip call: its rounds'
    /// server time summed; the client's time between rounds is not the server's).
    pub max_duration: Option<Duration>,
    /// The longest a call may take from its first request to its last reply, the client's time
    /// between rounds included.
    pub max_wall_duration: Option<Duration>,
    /// The most tokens a call's result may be.
    pub max_tokens: Option<usize>,
    /// The most tokens a definition set (tools, prompts, resources, templates) may be.
    pub max_definition_tokens: Option<usize>,
    /// What the token limits count in.
    pub tokenizer: crate::tokens::Tokenizer,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            fail_on: vec![
                FailOn::Severity(Severity::Error),
                FailOn::Severity(Severity::Warning),
            ],
            allow: Vec::new(),
            expect_tools: Vec::new(),
            forbid_tools: Vec::new(),
            max_duration: None,
            max_wall_duration: None,
            max_tokens: None,
            max_definition_tokens: None,
            tokenizer: Default::default(),
        }
    }
}

/// The text a bad gate flag gets.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct GateError(pub String);

fn is_code(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

impl Gate {
    /// `--fail-on` values (each a comma list of `error`, `warning`, `info` or codes) and
    /// `--allow` values (`CODE` or `CODE:method-or-tool`).
    pub fn new(fail_on: &[String], allow: &[String]) -> Result<Gate, GateError> {
        let mut g = Gate::default();
        if !fail_on.is_empty() {
            g.fail_on.clear();
            for item in fail_on.iter().flat_map(|v| v.split(',')) {
                let item = item.trim();
                g.fail_on.push(match item.to_ascii_lowercase().as_str() {
                    "error" | "errors" => FailOn::Severity(Severity::Error),
                    "warning" | "warnings" => FailOn::Severity(Severity::Warning),
                    "info" => FailOn::Severity(Severity::Info),
                    "none" => continue,
                    _ if is_code(item) => FailOn::Code(item.to_string()),
                    _ => {
                        return Err(GateError(format!(
                            "--fail-on {item}: use error, warning, info, none or a code such as MCP_TOOL_DRIFT"
                        )))
                    }
                });
            }
        }
        for a in allow {
            let (code, what) = match a.split_once(':') {
                Some((c, w)) if !w.is_empty() => (c, Some(w.to_string())),
                Some((c, _)) => (c, None),
                None => (a.as_str(), None),
            };
            if !is_code(code) {
                return Err(GateError(format!(
                    "--allow {a}: use CODE or CODE:method-or-tool (CODE as the findings name it, e.g. MCP_CAPABILITY:notifications/message)"
                )));
            }
            g.allow.push(Allow {
                code: code.to_string(),
                what,
            });
        }
        Ok(g)
    }

    /// The finding is accepted by an `--allow` (its method, or the tool of the call it names).
    fn allowed(&self, f: &Finding, tool: Option<&str>) -> bool {
        self.allow.iter().any(|a| {
            a.code == f.code
                && a.what
                    .as_deref()
                    .is_none_or(|w| f.method.as_deref() == Some(w) || tool == Some(w))
        })
    }

    /// Whether an `--allow` accepts the finding (as `allowed`, for callers outside the gate).
    pub fn allows(&self, f: &Finding, tool: Option<&str>) -> bool {
        self.allowed(f, tool)
    }

    /// Whether `--fail-on` fails the run on the finding (allowed or not).
    pub fn fails_on(&self, f: &Finding) -> bool {
        self.fails(f)
    }

    /// The finding fails the run (unless allowed).
    fn fails(&self, f: &Finding) -> bool {
        self.fail_on.iter().any(|x| match x {
            FailOn::Severity(s) => *s == f.severity,
            FailOn::Code(c) => *c == f.code,
        })
    }
}

/// One scope's verdict.
#[derive(Debug)]
pub struct ScopeVerdict {
    /// The scope's report key (`session:ID`, `stateless:CLIENT`, `exchange:N`).
    pub scope: String,
    /// Its place among the recording's scopes (from 1): stable across runs of one job.
    pub ordinal: usize,
    pub result: CheckResult,
    /// Findings that fail the run.
    pub failing: usize,
    /// Per method (and tool): its calls, and the failing findings about them.
    pub methods: BTreeMap<String, (u64, Vec<String>)>,
    /// Faults `[[fault]]` rules injected in this scope: listed apart, never failing (nothing
    /// the server did).
    pub injected: Vec<crate::events::FaultEvent>,
}

/// Lists each fault the recording says was injected under its scope's verdict, and lets a
/// finding about a call a fault acted on fail nothing: what the fault made (a reply cut, a
/// stream closed) is not the server's doing. Such a finding stays listed, allowed, naming the
/// rule. A call is the fault's by its id and method (the client's and the server's requests
/// number apart); a session a fault closed or cut also leaves the calls then in flight
/// unanswered (`calls`: the recording's, for when each started).
pub fn attach_injected<'a>(
    gate: &Gate,
    report: &mut Report,
    faults: impl Iterator<Item = &'a crate::events::FaultEvent>,
    calls: &[&CallEvent],
) {
    for f in faults {
        let key = f.scope.report_key();
        let Some(s) = report.scopes.iter_mut().find(|s| s.scope == key) else {
            continue;
        };
        s.injected.push(f.clone());
        let Some(id) = f.id.as_ref().map(|i| i.to_string()) else {
            continue;
        };
        let cuts = matches!(f.action, "close" | "cut_stream_after");
        // A call unanswered because the session was cut: it started before the cut.
        let in_flight = |finding: &crate::inspect::offline::Finding| {
            cuts && finding.code == "MISSING_RESPONSE"
                && calls.iter().any(|c| {
                    c.scope.report_key() == key
                        && finding.id.as_deref() == Some(c.id.to_string().as_str())
                        && finding.method.as_deref() == Some(&*c.method)
                        && c.ts.saturating_sub(c.latency_us.unwrap_or(0) * 1000) <= f.ts
                })
        };
        for finding in &mut s.result.findings {
            let its = finding.id.as_deref() == Some(id.as_str())
                && (finding.method.is_none() || finding.method.as_deref() == f.method.as_deref());
            if finding.allowed || !(its || in_flight(finding)) {
                continue;
            }
            if gate.fails(finding) {
                let line = format!(
                    "{} {}: {}",
                    finding.severity.as_str(),
                    finding.code,
                    finding.message
                );
                for (_, fails) in s.methods.values_mut() {
                    if let Some(i) = fails.iter().position(|l| *l == line) {
                        fails.remove(i);
                        break;
                    }
                }
                s.failing = s.failing.saturating_sub(1);
            }
            finding.allowed = true;
            finding.message = format!(
                "{} (after the fault `{}` injected: {})",
                finding.message, f.injected, f.action
            );
        }
        s.result.passes_checks = s.failing == 0;
    }
}

/// A scope's verdict as JSON: its scope and result, and the faults injected in it beside the
/// result (whose shape is seed 004's), not in it.
pub fn scope_json(s: &ScopeVerdict) -> serde_json::Value {
    let mut line = serde_json::json!({ "scope": s.scope, "result": s.result });
    if !s.injected.is_empty() {
        line["injected"] = s.injected.iter().map(injected_json).collect();
    }
    line
}

/// The gate applied to a recording: its scopes' results (`check_recording_with`), its calls, and
/// the faults it says were injected.
pub fn recording(
    gate: &Gate,
    rec: &crate::record::reader::Capture,
    results: Vec<(String, CheckResult)>,
) -> Report {
    let calls: Vec<&CallEvent> = rec.calls().collect();
    let mut report = evaluate(gate, label(&rec.header), results, &calls);
    report.assertions.extend(token_assertions(gate, rec));
    attach_injected(
        gate,
        &mut report,
        rec.events.iter().filter_map(|e| match e {
            crate::events::Event::Fault(f) => Some(f),
            _ => None,
        }),
        &calls,
    );
    report
}

/// `--max-tokens` and `--max-definition-tokens`: counted only when asked (a tokenizer's tables
/// take a moment to load).
fn token_assertions(gate: &Gate, rec: &crate::record::reader::Capture) -> Vec<Assertion> {
    if gate.max_tokens.is_none() && gate.max_definition_tokens.is_none() {
        return Vec::new();
    }
    let c = super::cost::cost(rec, gate.tokenizer);
    let mut out = Vec::new();
    if let Some(max) = gate.max_tokens {
        let big: Vec<String> = c
            .calls
            .iter()
            .filter(|x| x.result > max)
            .map(|x| format!("{} (id {}) returned {} tokens", x.key, x.id, x.result))
            .collect();
        out.push(Assertion {
            name: format!("max-tokens {max}"),
            passed: big.is_empty(),
            message: if big.is_empty() {
                format!("no result was more than {max} tokens ({})", c.tokenizer)
            } else {
                format!("{} ({})", big.join("; "), c.tokenizer)
            },
        });
    }
    if let Some(max) = gate.max_definition_tokens {
        let big: Vec<String> = c
            .definitions
            .iter()
            .filter(|d| d.total > max)
            .map(|d| {
                let top: Vec<String> = d
                    .items
                    .iter()
                    .take(3)
                    .map(|i| format!("{} {}", i.name, i.tokens))
                    .collect();
                format!(
                    "the {} definitions are {} tokens (biggest: {})",
                    d.kind,
                    d.total,
                    top.join(", ")
                )
            })
            .collect();
        out.push(Assertion {
            name: format!("max-definition-tokens {max}"),
            passed: big.is_empty(),
            message: if big.is_empty() {
                format!(
                    "no definition set was more than {max} tokens ({})",
                    c.tokenizer
                )
            } else {
                format!("{} ({})", big.join("; "), c.tokenizer)
            },
        });
    }
    out
}

fn injected_json(f: &crate::events::FaultEvent) -> serde_json::Value {
    serde_json::json!({
        "rule": &*f.injected,
        "action": f.action,
        "method": f.method.as_deref(),
        "id": f.id,
        "detail": f.detail,
    })
}

/// One assertion about the whole recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assertion {
    pub name: String,
    pub passed: bool,
    pub message: String,
}

/// What the gate decided.
#[derive(Debug)]
pub struct Report {
    pub label: String,
    pub scopes: Vec<ScopeVerdict>,
    pub assertions: Vec<Assertion>,
}

impl Report {
    pub fn failed(&self) -> bool {
        self.scopes.iter().any(|s| s.failing > 0) || self.assertions.iter().any(|a| !a.passed)
    }
}

/// The name a recording's server goes by in reports (see [`crate::record::label`]).
pub fn label(header: &serde_json::Value) -> String {
    crate::record::label(header)
}

fn method_key(method: &str, target: Option<&str>) -> String {
    crate::events::stat_key(method, target).into_owned()
}

/// Applies the gate to `check`'s per-scope results and the recording's call lines.
pub fn evaluate(
    gate: &Gate,
    label: String,
    results: Vec<(String, CheckResult)>,
    calls: &[&CallEvent],
) -> Report {
    // The tool of each call, by scope and id (an allow may name the tool).
    let mut tool_of: BTreeMap<(String, String), (String, Option<String>)> = BTreeMap::new();
    let mut per_scope: BTreeMap<String, BTreeMap<String, (u64, Vec<String>)>> = BTreeMap::new();
    for c in calls {
        let scope = c.scope.report_key();
        tool_of.insert(
            (scope.clone(), c.id.to_string()),
            (
                c.method.to_string(),
                c.target.as_deref().map(str::to_string),
            ),
        );
        per_scope
            .entry(scope)
            .or_default()
            .entry(method_key(&c.method, c.target.as_deref()))
            .or_default()
            .0 += 1;
    }
    let mut scopes = Vec::new();
    for (i, (scope, mut result)) in results.into_iter().enumerate() {
        let mut methods = per_scope.remove(&scope).unwrap_or_default();
        let mut failing = 0;
        for f in &mut result.findings {
            let call =
                f.id.as_ref()
                    .and_then(|id| tool_of.get(&(scope.clone(), id.clone())));
            let tool = call.and_then(|c| c.1.as_deref());
            f.allowed = gate.allowed(f, tool);
            if !f.allowed && gate.fails(f) {
                failing += 1;
                let key = match (call, &f.method) {
                    (Some((m, t)), _) => method_key(m, t.as_deref()),
                    (None, Some(m)) => m.to_string(),
                    (None, None) => "protocol".to_string(),
                };
                methods.entry(key).or_default().1.push(format!(
                    "{} {}: {}",
                    f.severity.as_str(),
                    f.code,
                    f.message
                ));
            }
        }
        result.passes_checks = failing == 0;
        scopes.push(ScopeVerdict {
            scope,
            ordinal: i + 1,
            result,
            failing,
            methods,
            injected: Vec::new(),
        });
    }
    let mut assertions = Vec::new();
    let tool_calls = |name: &str| {
        calls
            .iter()
            .filter(|c| &*c.method == "tools/call" && c.target.as_deref() == Some(name))
            .count()
    };
    for t in &gate.expect_tools {
        let n = tool_calls(t);
        assertions.push(Assertion {
            name: format!("expect-tool {t}"),
            passed: n > 0,
            message: if n > 0 {
                format!("`{t}` was called {n} time(s)")
            } else {
                format!("`{t}` was never called")
            },
        });
    }
    for t in &gate.forbid_tools {
        let n = tool_calls(t);
        assertions.push(Assertion {
            name: format!("forbid-tool {t}"),
            passed: n == 0,
            message: if n == 0 {
                format!("`{t}` was not called")
            } else {
                format!("`{t}` was called {n} time(s)")
            },
        });
    }
    for (max, wall) in [(gate.max_duration, false), (gate.max_wall_duration, true)] {
        let Some(max) = max else { continue };
        let limit = max.as_micros() as u64;
        let slow: Vec<String> = calls
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                // A round that asked for input is part of the call that continues it.
                !matches!(
                    c.outcome,
                    Outcome::Missing { .. }
                        | Outcome::Refused { .. }
                        | Outcome::Cancelled { .. }
                        | Outcome::Abandoned { .. }
                        | Outcome::InputRequired
                )
            })
            .filter_map(|(i, c)| {
                let r = super::rounds_of(calls, i);
                let took = if wall { r.wall_us } else { r.server_us };
                (took > limit).then(|| {
                    let rounds = if r.rounds > 1 {
                        format!(
                            " over {} rounds ({:.3} s the server's, {:.3} s waiting on the client)",
                            r.rounds,
                            r.server_us as f64 / 1e6,
                            r.client_us() as f64 / 1e6
                        )
                    } else {
                        String::new()
                    };
                    format!(
                        "{} (id {}) took {:.3} s{rounds}",
                        method_key(&c.method, c.target.as_deref()),
                        c.id,
                        took as f64 / 1e6
                    )
                })
            })
            .collect();
        let name = if wall {
            "max-wall-duration"
        } else {
            "max-duration"
        };
        assertions.push(Assertion {
            name: format!("{name} {}", crate::units::show_secs(max)),
            passed: slow.is_empty(),
            message: if slow.is_empty() {
                "no call took longer".to_string()
            } else {
                slow.join("; ")
            },
        });
    }
    Report {
        label,
        scopes,
        assertions,
    }
}

/// The JSON lines: one `{"scope", "result"}` per scope (seed 004's result; an allowed finding
/// carries `"allowed": true`), then one `{"assertion", "passed", "message"}` per assertion.
pub fn json(r: &Report) -> String {
    let mut out = String::new();
    for s in &r.scopes {
        out.push_str(&scope_json(s).to_string());
        out.push('\n');
    }
    for a in &r.assertions {
        out.push_str(
            &serde_json::json!({ "assertion": a.name, "passed": a.passed, "message": a.message })
                .to_string(),
        );
        out.push('\n');
    }
    out
}

/// A summary for a person.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    for s in &r.scopes {
        let res = &s.result;
        let _ = writeln!(
            out,
            "{} session {} ({}): {} calls, {} matched, {} findings{}{} — {}",
            r.label,
            s.ordinal,
            s.scope,
            res.call_count,
            res.matched_count,
            res.finding_count,
            if s.failing > 0 {
                format!(", {} failing", s.failing)
            } else {
                String::new()
            },
            if s.injected.is_empty() {
                String::new()
            } else {
                format!(", {} injected", s.injected.len())
            },
            if s.failing > 0 { "FAIL" } else { "ok" }
        );
        for f in &s.injected {
            let _ = writeln!(
                out,
                "  injected {} by {}{}{}: {}",
                f.action,
                f.injected,
                f.method
                    .as_deref()
                    .map(|m| format!(" on {m}"))
                    .unwrap_or_default(),
                f.id.as_ref()
                    .map(|i| format!(" id={i}"))
                    .unwrap_or_default(),
                f.detail
            );
        }
        for f in &res.findings {
            let mark = if f.allowed { " (allowed)" } else { "" };
            let _ = writeln!(
                out,
                "  {:<7} {} at {}{mark}: {}",
                f.severity.as_str(),
                f.code,
                f.path,
                f.message
            );
        }
    }
    for a in &r.assertions {
        let _ = writeln!(
            out,
            "{} {}: {}",
            if a.passed { "ok  " } else { "FAIL" },
            a.name,
            a.message
        );
    }
    let failing: usize = r.scopes.iter().map(|s| s.failing).sum();
    let broken = r.assertions.iter().filter(|a| !a.passed).count();
    let _ = writeln!(
        out,
        "{}: {} scope(s), {} failing finding(s), {} of {} assertion(s) broken",
        if r.failed() { "FAILED" } else { "PASSED" },
        r.scopes.len(),
        failing,
        broken,
        r.assertions.len()
    );
    out
}

fn xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            // XML 1.0 has no place for most control characters.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\r' | '\t') => o.push('?'),
            c => o.push(c),
        }
    }
    o
}

/// JUnit XML: one suite per scope (`LABEL session N`), a case per method and tool called there
/// (failing with the failing findings about it; findings about no call are the `protocol` case),
/// and one suite of the assertions. Names never hold a session id, so two runs of one job name
/// their cases alike.
pub fn junit(r: &Report) -> String {
    let mut cases_total = 0;
    let mut failures_total = 0;
    let mut suites = String::new();
    for s in &r.scopes {
        let suite = format!("{} session {}", r.label, s.ordinal);
        let mut body = String::new();
        let mut failures = 0;
        let mut methods: Vec<(&str, u64, &[String])> = s
            .methods
            .iter()
            .map(|(k, (n, f))| (k.as_str(), *n, &f[..]))
            .collect();
        if methods.is_empty() {
            methods.push(("calls", 0, &[]));
        }
        for (name, calls, fails) in &methods {
            let _ = write!(
                body,
                r#"    <testcase classname="{}" name="{}">"#,
                xml(&suite),
                xml(name)
            );
            if !fails.is_empty() {
                failures += 1;
                let _ = write!(
                    body,
                    r#"<failure message="{} failing finding(s)">{}</failure>"#,
                    fails.len(),
                    xml(&fails.join("\n"))
                );
            }
            let _ = writeln!(body, "<system-out>{calls} call(s)</system-out></testcase>");
        }
        cases_total += methods.len();
        failures_total += failures;
        let _ = writeln!(
            suites,
            r#"  <testsuite name="{}" tests="{}" failures="{failures}">"#,
            xml(&suite),
            methods.len()
        );
        suites.push_str(&body);
        suites.push_str("  </testsuite>\n");
    }
    if !r.assertions.is_empty() {
        let failures = r.assertions.iter().filter(|a| !a.passed).count();
        cases_total += r.assertions.len();
        failures_total += failures;
        let suite = format!("{} assertions", r.label);
        let _ = writeln!(
            suites,
            r#"  <testsuite name="{}" tests="{}" failures="{failures}">"#,
            xml(&suite),
            r.assertions.len()
        );
        for a in &r.assertions {
            let _ = write!(
                suites,
                r#"    <testcase classname="{}" name="{}">"#,
                xml(&suite),
                xml(&a.name)
            );
            if !a.passed {
                let _ = write!(suites, r#"<failure message="{}"/>"#, xml(&a.message));
            }
            suites.push_str("</testcase>\n");
        }
        suites.push_str("  </testsuite>\n");
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"rpctap check\" tests=\"{cases_total}\" failures=\"{failures_total}\">\n{suites}</testsuites>\n"
    )
}
