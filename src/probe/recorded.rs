//! A recording as a suite (`rpctap test RECORDING`): each call the client made becomes a case
//! that sends it again and expects what the recorded server answered — a result (and, for a
//! tool, whether it failed), or the error code — in the seed's assertions rather than replay's
//! reply-for-reply comparison, so a server that answers differently but as well passes.

use super::suite::{Case, Expect, Kind, Protocol, Suite, Target};
use crate::record::reader::Capture;
use serde_json::Value;
use std::collections::HashMap;

/// Methods the run itself sends (the session's opening): not cases.
const OWN: [&str; 1] = ["initialize"];

/// The suite a recording's client calls make.
pub fn suite_from(rec: &Capture) -> Suite {
    let mut replies: HashMap<(String, String), Value> = HashMap::new();
    for m in rec.messages().filter(|m| !m.is_c2s() && m.is_response()) {
        if let (Some(id), Ok(v)) = (m.id_text(), serde_json::from_str::<Value>(&m.json_text())) {
            replies.entry((m.scope.report_key(), id)).or_insert(v);
        }
    }
    let mut version = None;
    let mut path = None;
    let mut cases = Vec::new();
    for m in rec.messages().filter(|m| m.is_c2s()) {
        let (Some(method), Some(id)) = (m.method.as_deref(), m.id_text()) else {
            continue;
        };
        let Ok(msg) = serde_json::from_str::<Value>(&m.json_text()) else {
            continue;
        };
        if path.is_none() {
            path = rec.http().find_map(|h| match h {
                crate::events::HttpEvent::Request {
                    exchange,
                    path,
                    method,
                    ..
                } if *exchange == m.exchange && method.as_ref() == "POST" => Some(path.clone()),
                _ => None,
            });
        }
        if method == "initialize" {
            version = msg
                .pointer("/params/protocolVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        if OWN.contains(&method) {
            continue;
        }
        let Some(reply) = replies.get(&(m.scope.report_key(), id)) else {
            continue;
        };
        let tool = method == "tools/call";
        let is_error = reply.pointer("/result/isError").and_then(Value::as_bool) == Some(true);
        let expect = match (reply.get("result"), reply.pointer("/error/code")) {
            (Some(_), _) => Expect {
                no_error: Some(true),
                result_exists: Some(true),
                tool_call_succeeded: (tool && !is_error).then_some(true),
                tool_error: (tool && is_error).then_some(true),
                reply_matches_call: Some(true),
                ..Default::default()
            },
            (None, Some(code)) => Expect {
                has_error: Some(true),
                error_code: code.as_i64(),
                ..Default::default()
            },
            _ => continue,
        };
        let target = m
            .target
            .as_deref()
            .map(|t| format!(" {t}"))
            .unwrap_or_default();
        cases.push(Case::call(
            format!("{} {method}{target}", cases.len() + 1),
            Kind::Recorded,
            method,
            msg.get("params").cloned(),
            expect,
        ));
    }
    let header = &rec.header;
    let url = header["upstream"].as_str().map(|u| {
        format!(
            "{}{}",
            u.trim_end_matches('/'),
            path.as_deref().unwrap_or("/")
        )
    });
    let command = crate::replay::stdio::recorded_command(rec);
    Suite {
        suite: super::suite::VERSION,
        target: Target {
            url: if command.is_some() { None } else { url },
            command,
            protocol: if version.is_some() {
                Protocol::Mcp
            } else {
                Protocol::Jsonrpc
            },
            mcp_version: version,
            bearer: None,
            server: None,
        },
        allow: vec![],
        cases,
    }
}
