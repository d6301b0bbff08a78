//! `check --format sarif`: the gate's report as SARIF 2.1.0 (OASIS), the format code-scanning
//! UIs read (GitHub's among them), so rpctap's findings show on a pull request like a linter's.
//!
//! One run of one tool (`rpctap`) whose rules are every anomaly code — its help text, severity
//! and the specification section it comes from — and one result per finding, located at the
//! recording line of the call it is about (the line of the message when no call ended, the
//! scope's first line, or the file's first line), named logically by the server's label,
//! the session's place and the method and tool. Each result has a fingerprint that two runs of
//! one job agree on (label, session ordinal, code, method and tool, and which such finding it is
//! — never a session id, a timestamp or the message's words), so a code-scanning UI tracks a
//! finding across runs instead of opening it anew. A finding the gate accepts (`--allow`, or
//! what an injected fault made) is a suppressed result; a broken assertion is a result of its
//! own rule.
//!
//! Written with `serde_json` (the `serde-sarif` crate generates its types from the schema at
//! build time through `schemafy`, `prettyplease` and `syn`: a heavy build for a document of a
//! dozen fields); the tests validate the output against the 2.1.0 schema.

use super::gate::Report;
use crate::inspect::anomaly::Code;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Where a finding is in the checked file: the file, the line (from 1) and the tool of the
/// call it is about.
#[derive(Debug, Clone, Default)]
pub struct Loc {
    pub file: String,
    pub line: u32,
    pub tool: Option<String>,
}

/// Finds a finding's place from its scope's report key, the call id and the method it names.
pub type Locate<'a> = dyn Fn(&str, Option<&str>, Option<&str>) -> Option<Loc> + 'a;

/// The rule a broken assertion (`--expect-tool`, `--forbid-tool`, `--max-duration`,
/// `--max-wall-duration`) is a result of.
const ASSERTION: &str = "GATE_ASSERTION";

fn level(s: crate::events::Severity) -> &'static str {
    match s {
        crate::events::Severity::Error => "error",
        crate::events::Severity::Warning => "warning",
        crate::events::Severity::Info => "note",
    }
}

/// A relative path as a URI reference (RFC 3986: each byte outside the unreserved set and `/`
/// percent-encoded); an absolute one as a `file://` URI.
fn uri(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    if path.starts_with('/') {
        out.push_str("file://");
    }
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// FNV-1a, 64 bits: a fingerprint must stay the same across rpctap's versions and builds, which
/// a hasher free to change its algorithm (std's, foldhash) does not promise.
fn fnv1a(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

fn rule(id: &str, name: &str, help: &str, spec: Option<&str>, lvl: &str) -> Value {
    let short = help
        .split(". ")
        .next()
        .unwrap_or(help)
        .trim_end_matches('.');
    let mut r = json!({
        "id": id,
        "name": name,
        "shortDescription": { "text": format!("{short}.") },
        "fullDescription": { "text": help },
        "help": {
            "text": match spec {
                Some(s) => format!("{help}\n\nSpecification: {s}"),
                None => format!("{help}\n\n(rpctap's own judgement: no specification section.)"),
            }
        },
        "defaultConfiguration": { "level": lvl },
    });
    if let Some(s) = spec {
        r["helpUri"] = json!(s);
    }
    r
}

/// The SARIF log of `report` over `artifact` (the checked file as given).
pub fn sarif(report: &Report, artifact: &str, locate: &Locate<'_>) -> String {
    let mut rules: Vec<Value> = Code::ALL
        .iter()
        .map(|c| {
            rule(
                c.as_str(),
                &format!("{c:?}"),
                c.help(),
                c.spec(),
                level(c.severity()),
            )
        })
        .collect();
    rules.push(rule(
        ASSERTION,
        "GateAssertion",
        "An assertion `rpctap check` was asked to make about the recording broke: a tool expected to be called was not (`--expect-tool`), a forbidden tool was called (`--forbid-tool`), or a call took longer than allowed (`--max-duration` of the server's time, `--max-wall-duration` of the whole).",
        None,
        "error",
    ));
    let index: BTreeMap<&str, usize> = Code::ALL
        .iter()
        .enumerate()
        .map(|(i, c)| (c.as_str(), i))
        .chain([(ASSERTION, Code::ALL.len())])
        .collect();
    let fallback = Loc {
        file: artifact.to_string(),
        line: 1,
        tool: None,
    };
    let mut artifacts: Vec<String> = vec![artifact.to_string()];
    let mut results = Vec::new();
    for s in &report.scopes {
        let session = format!("{} session {}", report.label, s.ordinal);
        let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
        for f in &s.result.findings {
            let loc = locate(&s.scope, f.id.as_deref(), f.method.as_deref())
                .or_else(|| locate(&s.scope, None, None))
                .unwrap_or_else(|| fallback.clone());
            let what = match (&f.method, &loc.tool) {
                (Some(m), Some(t)) => format!("{m} {t}"),
                (Some(m), None) => m.clone(),
                (None, _) => "protocol".to_string(),
            };
            let n = seen.entry((f.code.clone(), what.clone())).or_insert(0);
            *n += 1;
            let ordinal = s.ordinal.to_string();
            let print = fnv1a(&[&report.label, &ordinal, &f.code, &what, &n.to_string()]);
            let file = match artifacts.iter().position(|a| *a == loc.file) {
                Some(i) => i,
                None => {
                    artifacts.push(loc.file.clone());
                    artifacts.len() - 1
                }
            };
            let mut r = json!({
                "ruleId": f.code,
                "level": level(f.severity),
                "message": { "text": f.message },
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": { "uri": uri(&loc.file), "index": file },
                        "region": { "startLine": loc.line.max(1) },
                    },
                    "logicalLocations": [{
                        "name": what,
                        "fullyQualifiedName": format!("{session}/{what}"),
                        "kind": "function",
                    }],
                }],
                "partialFingerprints": { "rpctapFinding/v1": print },
                "properties": {
                    "scope": s.scope,
                    "session": s.ordinal,
                    "path": f.path,
                },
            });
            if let Some(i) = index.get(f.code.as_str()) {
                r["ruleIndex"] = json!(i);
            }
            if let Some(id) = &f.id {
                r["properties"]["id"] = json!(id);
            }
            if f.allowed {
                r["suppressions"] = json!([{
                    "kind": "external",
                    "justification": "accepted by the gate (`check --allow`, or made by an injected fault)",
                }]);
            }
            results.push(r);
        }
    }
    for a in report.assertions.iter().filter(|a| !a.passed) {
        results.push(json!({
            "ruleId": ASSERTION,
            "ruleIndex": Code::ALL.len(),
            "level": "error",
            "message": { "text": format!("{}: {}", a.name, a.message) },
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": { "uri": uri(artifact), "index": 0 },
                    "region": { "startLine": 1 },
                },
            }],
            "partialFingerprints": {
                "rpctapFinding/v1": fnv1a(&[&report.label, ASSERTION, &a.name]),
            },
        }));
    }
    let log = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "rpctap",
                    "version": env!("CARGO_PKG_VERSION"),
                    "semanticVersion": env!("CARGO_PKG_VERSION"),
                    "rules": rules,
                }
            },
            "automationDetails": { "id": format!("rpctap check/{}/", report.label) },
            "artifacts": artifacts
                .iter()
                .map(|a| json!({ "location": { "uri": uri(a) } }))
                .collect::<Vec<_>>(),
            "invocations": [{
                "executionSuccessful": true,
                "exitCode": i32::from(report.failed()),
            }],
            "results": results,
        }]
    });
    let mut out = serde_json::to_string_pretty(&log).unwrap_or_default();
    out.push('\n');
    out
}

/// The locator of a recording: a finding is at the line of its call's `call` event (the call
/// with its id and method in its scope), else of the message with its id, else of the scope's
/// first event. Indexed once: a recording has many findings.
pub fn recording_locator(
    rec: &crate::record::reader::Capture,
) -> impl Fn(&str, Option<&str>, Option<&str>) -> Option<Loc> + '_ {
    use crate::events::Event;
    use std::collections::HashMap;
    type Key = (String, String);
    let mut calls: HashMap<Key, Vec<usize>> = HashMap::new();
    let mut messages: HashMap<Key, usize> = HashMap::new();
    let mut first: HashMap<String, usize> = HashMap::new();
    for (i, e) in rec.events.iter().enumerate() {
        match e {
            Event::Call(c) => {
                let scope = c.scope.report_key();
                first.entry(scope.clone()).or_insert(i);
                calls.entry((scope, c.id.to_string())).or_default().push(i);
            }
            Event::Message(m) => {
                let scope = m.scope.report_key();
                first.entry(scope.clone()).or_insert(i);
                if let Some(id) = &m.id {
                    messages.entry((scope, id.to_string())).or_insert(i);
                }
            }
            _ => {}
        }
    }
    move |scope, id, method| {
        let at = |i: usize, tool: Option<&str>| {
            rec.line_of(i).map(|(file, line)| Loc {
                file: file.to_string(),
                line,
                tool: tool.map(str::to_string),
            })
        };
        if let Some(id) = id {
            let key = (scope.to_string(), id.to_string());
            let call = calls.get(&key).and_then(|v| {
                v.iter().copied().find(|&i| match &rec.events[i] {
                    Event::Call(c) => method.is_none_or(|m| *c.method == *m),
                    _ => false,
                })
            });
            if let Some(i) = call {
                let tool = match &rec.events[i] {
                    Event::Call(c) => c.target.as_deref(),
                    _ => None,
                };
                return at(i, tool);
            }
            if let Some(&i) = messages.get(&key) {
                return at(i, None);
            }
        }
        first.get(scope).and_then(|&i| at(i, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_uri_references() {
        assert_eq!(uri("rec/a b.jsonl"), "rec/a%20b.jsonl");
        assert_eq!(uri("/tmp/x#1.jsonl"), "file:///tmp/x%231.jsonl");
    }

    #[test]
    fn every_rule_has_its_help_and_a_known_level() {
        let r = Report {
            label: "srv".into(),
            scopes: Vec::new(),
            assertions: Vec::new(),
        };
        let log: Value = serde_json::from_str(&sarif(&r, "f.jsonl", &|_, _, _| None)).unwrap();
        let rules = log["runs"][0]["tool"]["driver"]["rules"]
            .as_array()
            .unwrap();
        assert_eq!(rules.len(), Code::ALL.len() + 1);
        for (r, c) in rules.iter().zip(Code::ALL) {
            assert_eq!(r["id"], c.as_str());
            assert!(r["fullDescription"]["text"].as_str().unwrap().len() > 20);
            match c.spec() {
                Some(s) => assert!(s.starts_with("https://") && r["helpUri"] == s, "{c}"),
                None => assert!(r.get("helpUri").is_none()),
            }
        }
    }

    #[test]
    fn fingerprints_do_not_move_with_a_crates_hasher() {
        // FNV-1a's published value for the one byte NUL (each part here ends with one).
        assert_eq!(fnv1a(&[""]), "af63bd4c8601b7df");
        assert_ne!(fnv1a(&["a", "b"]), fnv1a(&["ab", ""]));
    }
}
