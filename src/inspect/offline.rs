//! The offline checker (`rpctap check`): an exchange document `{"request": …, "response": …}`
//! (seed 004's input format) goes through the same inspector as live traffic — one exchange,
//! the request as its body, the response as its reply — and the events become a result in
//! exactly the shape of seed 004's `result`.

use super::{EndReason, InspectConfig, Inspector, RequestMeta, ResponseMeta};
use crate::events::{BusBuilder, Direction, Event, Outcome, Severity};
use crate::rpc::{Id, Kind};
use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

pub const PROFILE: &str = "jsonrpc-2-exchange-subset-v1";

/// The input limits (seed 004's, by default).
#[derive(Clone, Copy, Debug)]
pub struct CheckLimits {
    pub max_bytes: usize,
    pub max_depth: usize,
    pub max_nodes: usize,
    pub max_envelopes: usize,
    pub max_findings: usize,
}

impl Default for CheckLimits {
    fn default() -> Self {
        CheckLimits {
            max_bytes: 100_000,
            max_depth: 20,
            max_nodes: 8_000,
            max_envelopes: 200,
            max_findings: 200,
        }
    }
}

impl CheckLimits {
    /// No limits (for recordings, which are checked scope by scope, whole).
    pub fn unlimited() -> Self {
        CheckLimits {
            max_bytes: usize::MAX,
            max_depth: usize::MAX,
            max_nodes: usize::MAX,
            max_envelopes: usize::MAX,
            max_findings: usize::MAX,
        }
    }
}

/// Why a document cannot be checked (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("INPUT_LIMIT: {0}")]
    InputLimit(String),
    #[error("COMPLEXITY_LIMIT: {0}")]
    ComplexityLimit(String),
    #[error("invalid input: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Match {
    pub request_index: u32,
    pub response_index: u32,
    pub id: Id,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Finding {
    pub code: String,
    pub severity: Severity,
    pub path: String,
    pub message: String,
    /// Accepted by the gate (`check --allow`): listed, failing nothing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allowed: bool,
    /// The method and call id it concerns, for the gate (not part of the result shape).
    #[serde(skip)]
    pub method: Option<String>,
    #[serde(skip)]
    pub id: Option<String>,
}

/// Seed 004's `result`, field for field.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckResult {
    pub profile: &'static str,
    pub passes_checks: bool,
    pub complete: bool,
    pub request_count: u64,
    pub call_count: u64,
    pub notification_count: u64,
    pub matched_count: u64,
    pub matches: Vec<Match>,
    pub findings: Vec<Finding>,
    pub finding_count: u64,
    pub error_count: u64,
    pub truncated: bool,
    /// Findings the default gate fails on (errors and warnings); not part of the result shape.
    #[serde(skip)]
    pub failing: u64,
}

impl CheckResult {
    /// A result with nothing counted or found yet.
    pub fn empty() -> CheckResult {
        CheckResult {
            profile: PROFILE,
            passes_checks: true,
            complete: false,
            request_count: 0,
            call_count: 0,
            notification_count: 0,
            matched_count: 0,
            matches: Vec::new(),
            findings: Vec::new(),
            finding_count: 0,
            error_count: 0,
            truncated: false,
            failing: 0,
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc<'a> {
    #[serde(borrow)]
    request: &'a RawValue,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
}

fn measure(v: &serde_json::Value, depth: usize, nodes: &mut usize, max_depth: &mut usize) {
    *nodes += 1;
    *max_depth = (*max_depth).max(depth);
    match v {
        serde_json::Value::Array(a) => a
            .iter()
            .for_each(|c| measure(c, depth + 1, nodes, max_depth)),
        serde_json::Value::Object(o) => o
            .values()
            .for_each(|c| measure(c, depth + 1, nodes, max_depth)),
        _ => {}
    }
}

fn envelopes(raw: &RawValue) -> usize {
    if raw.get().starts_with('[') {
        serde_json::from_str::<Vec<&RawValue>>(raw.get())
            .map(|v| v.len())
            .unwrap_or(1)
    } else {
        1
    }
}

/// Checks one exchange document.
pub fn check_document(text: &[u8], limits: &CheckLimits) -> Result<CheckResult, CheckError> {
    if text.len() > limits.max_bytes {
        return Err(CheckError::InputLimit(format!(
            "the document is {} bytes; at most {} (--max-bytes)",
            text.len(),
            limits.max_bytes
        )));
    }
    if limits.max_depth != usize::MAX || limits.max_nodes != usize::MAX {
        // serde_json refuses nesting beyond 128 on its own; deeper input is a complexity error.
        let v: serde_json::Value = serde_json::from_slice(text).map_err(|e| {
            if e.to_string().contains("recursion limit") {
                CheckError::ComplexityLimit(format!(
                    "nesting deeper than {} (--max-depth)",
                    limits.max_depth
                ))
            } else {
                CheckError::Invalid(format!("not JSON: {e}"))
            }
        })?;
        let (mut nodes, mut depth) = (0, 0);
        measure(&v, 1, &mut nodes, &mut depth);
        if depth > limits.max_depth {
            return Err(CheckError::ComplexityLimit(format!(
                "nesting depth {depth}; at most {} (--max-depth)",
                limits.max_depth
            )));
        }
        if nodes > limits.max_nodes {
            return Err(CheckError::ComplexityLimit(format!(
                "{nodes} JSON nodes; at most {} (--max-nodes)",
                limits.max_nodes
            )));
        }
    }
    let doc: Doc = serde_json::from_slice(text).map_err(|e| {
        CheckError::Invalid(format!(
            "expected {{\"request\": …, \"response\": …}} and nothing else: {e}"
        ))
    })?;
    let n_req = envelopes(doc.request);
    let n_resp = doc.response.map(envelopes).unwrap_or(0);
    for (what, n) in [("request", n_req), ("response", n_resp)] {
        if n > limits.max_envelopes {
            return Err(CheckError::InputLimit(format!(
                "{n} {what} envelopes; at most {} (--max-envelopes)",
                limits.max_envelopes
            )));
        }
    }
    Ok(run(doc.request, doc.response, n_req, limits))
}

fn run(
    request: &RawValue,
    response: Option<&RawValue>,
    n_req: usize,
    limits: &CheckLimits,
) -> CheckResult {
    let mut bus = BusBuilder::default();
    let mut sub = bus.subscribe("check", 1 << 20);
    let insp = Inspector::new(InspectConfig::default(), bus.build());
    let req_is_array = request.get().starts_with('[');
    let resp_is_array = response.is_some_and(|r| r.get().starts_with('['));
    {
        let mut ex = insp.begin(&RequestMeta {
            method: "POST",
            path: "/",
            ..Default::default()
        });
        ex.request_body(&Bytes::copy_from_slice(request.get().as_bytes()), true);
        // No response, or an empty list of them: the exchange got no body (as a 202 would).
        let response = response.filter(|r| envelopes(r) > 0 && r.get().trim() != "[]");
        ex.response_head(&ResponseMeta {
            status: if response.is_some() { 200 } else { 202 },
            content_type: Some("application/json"),
            ..Default::default()
        });
        if let Some(r) = response {
            ex.response_data(r.get().as_bytes());
        }
        ex.end(EndReason::Complete);
    }
    let mut res = CheckResult {
        request_count: n_req as u64,
        ..CheckResult::empty()
    };
    let path = |dir: Option<Direction>, idx: Option<u32>| -> String {
        match dir {
            Some(Direction::ClientToServer) if req_is_array => {
                format!("$.request[{}]", idx.unwrap_or(0))
            }
            Some(Direction::ClientToServer) => "$.request".into(),
            Some(Direction::ServerToClient) if resp_is_array => {
                format!("$.response[{}]", idx.unwrap_or(0))
            }
            Some(Direction::ServerToClient) => "$.response".into(),
            None => "$".into(),
        }
    };
    while let Ok(ev) = sub.rx.try_recv() {
        match &*ev {
            Event::Message(m) if m.direction == Direction::ClientToServer => match m.kind {
                Kind::Request => res.call_count += 1,
                Kind::Notification => res.notification_count += 1,
                _ => {}
            },
            Event::Call(c) => {
                let outcome = match c.outcome {
                    Outcome::Result => "result",
                    Outcome::Error { .. } => "error",
                    _ => continue,
                };
                res.matches.push(Match {
                    request_index: c.request_index.unwrap_or(0),
                    response_index: c.response_index.unwrap_or(0),
                    id: c.id.clone(),
                    outcome,
                });
            }
            // HTTP status checks have no meaning for a document.
            Event::Anomaly(a) if a.code == "HTTP_STATUS" => {}
            // This profile has two severities; an `info` finding fails nothing and is left out.
            Event::Anomaly(a) if a.severity == Severity::Info => {}
            Event::Anomaly(a) => {
                res.finding_count += 1;
                res.failing += 1;
                if a.severity == Severity::Error {
                    res.error_count += 1;
                }
                if res.findings.len() < limits.max_findings {
                    res.findings.push(Finding {
                        code: a.code.to_string(),
                        severity: a.severity,
                        path: path(a.direction, a.batch_index),
                        message: a.message.clone(),
                        allowed: false,
                        method: a.method.as_deref().map(str::to_string),
                        id: a.id.as_ref().map(|i| i.to_string()),
                    });
                } else {
                    res.truncated = true;
                }
            }
            _ => {}
        }
    }
    res.matches
        .sort_by_key(|m| (m.request_index, m.response_index));
    res.matched_count = res.matches.len() as u64;
    // The default gate: errors and warnings fail.
    res.passes_checks = res.failing == 0;
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_004_example() {
        let input = r#"{"request":[{"jsonrpc":"2.0","method":"tools/list","id":"list-1"},{"jsonrpc":"2.0","method":"notifications/initialized"}],"response":[{"jsonrpc":"2.0","id":"list-1","result":{"tools":[]}}]}"#;
        let r = check_document(input.as_bytes(), &CheckLimits::default()).unwrap();
        let got = serde_json::to_value(&r).unwrap();
        let want = serde_json::json!({
            "profile": "jsonrpc-2-exchange-subset-v1", "passesChecks": true, "complete": false,
            "requestCount": 2, "callCount": 1, "notificationCount": 1, "matchedCount": 1,
            "matches": [{"requestIndex": 0, "responseIndex": 0, "id": "list-1", "outcome": "result"}],
            "findings": [], "findingCount": 0, "errorCount": 0, "truncated": false
        });
        assert_eq!(got, want);
    }

    #[test]
    fn limits_are_clear_errors() {
        let l = CheckLimits {
            max_bytes: 10,
            ..Default::default()
        };
        assert!(matches!(
            check_document(br#"{"request":[1,2,3,4,5]}"#, &l),
            Err(CheckError::InputLimit(_))
        ));
        let deep = format!(r#"{{"request":{}1{}}}"#, "[".repeat(30), "]".repeat(30));
        assert!(matches!(
            check_document(deep.as_bytes(), &CheckLimits::default()),
            Err(CheckError::ComplexityLimit(_))
        ));
        assert!(matches!(
            check_document(br#"{"request":[],"extra":1}"#, &CheckLimits::default()),
            Err(CheckError::Invalid(_))
        ));
    }
}
