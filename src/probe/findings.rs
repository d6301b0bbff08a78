//! What the inspector found in a probe's or a test run's recording, each finding with the case
//! it is about: the recording is fed back through the inspector as `rpctap check` does, and a
//! finding's exchange names its case by the `X-Rpctap-Case` header the session sent with that
//! case's request; over a WebSocket (one exchange for the whole connection) by the id of the
//! call it is about (`Session::sent`). A finding about the session's opening or end names none.

use crate::events::{Direction, Event, HttpEvent, Severity};
use crate::record::reader::Capture;
use std::collections::HashMap;

/// The request header naming the case an exchange belongs to (its place in the suite, from 0).
pub const CASE_HEADER: &str = "x-rpctap-case";

/// One finding, and the case it is about.
#[derive(Debug, Clone)]
pub struct Found {
    pub case: Option<usize>,
    pub code: String,
    pub severity: Severity,
    /// About the request rpctap sent (the test's own doing), not the server's reply.
    pub request: bool,
    pub method: Option<String>,
    pub message: String,
}

impl Found {
    /// As the gate reads a finding.
    pub fn as_finding(&self) -> crate::inspect::offline::Finding {
        crate::inspect::offline::Finding {
            code: self.code.clone(),
            severity: self.severity,
            path: if self.request {
                "$.request"
            } else {
                "$.response"
            }
            .into(),
            message: self.message.clone(),
            allowed: false,
            method: self.method.clone(),
            id: None,
        }
    }
}

/// Every finding of the recording (`info` ones aside, as `check` leaves them), with its case;
/// `sent` is each id the session sent and the case it was sent under.
pub fn by_case(rec: &Capture, sent: &[(String, usize)]) -> Vec<Found> {
    let by_id: HashMap<&str, usize> = sent.iter().map(|(i, c)| (i.as_str(), *c)).collect();
    let mut out = Vec::new();
    for (header, events) in rec.run_slices() {
        let mut cases: HashMap<u64, usize> = HashMap::new();
        for e in events {
            if let Event::Http(HttpEvent::Request {
                exchange, headers, ..
            }) = e
            {
                if let Some(n) = headers
                    .get(CASE_HEADER)
                    .and_then(|v| v.trim().parse::<usize>().ok())
                {
                    cases.insert(*exchange, n);
                }
            }
        }
        for e in crate::inspect::recorded::reinspect(header, events) {
            if let Event::Anomaly(a) = e {
                if a.severity == Severity::Info {
                    continue;
                }
                let case = cases.get(&a.exchange).copied().or_else(|| {
                    a.id.as_ref()
                        .and_then(|i| by_id.get(i.to_json_text().as_str()).copied())
                });
                out.push(Found {
                    case,
                    code: a.code.to_string(),
                    severity: a.severity,
                    // A call that got no reply is flagged on the call, and is the server's.
                    request: a.direction == Some(Direction::ClientToServer)
                        && a.code != "MISSING_RESPONSE",
                    method: a.method.as_deref().map(str::to_string),
                    message: a.message.clone(),
                });
            }
        }
    }
    out
}
