//! What a row is copied as (`y`: a curl command, a stdio line, a WebSocket message) and what
//! the list is exported as (`e`: exchange documents).

use super::keys::Action;
use super::{App, Row};
use crate::events::Direction;

impl App {
    /// What `y` copies for a row: the request as a `curl` command over HTTP; over stdio the
    /// JSON-RPC line piped into the recorded command (curl cannot reach a stdio server); over
    /// WebSocket the message itself (curl does not speak WebSocket).
    pub(super) fn copy_request(&self, r: &Row, req: &str) -> Action {
        let q = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        match r.transport {
            "stdio" => {
                let line = format!("printf '%s\\n' {}", q(req));
                let text = if self.upstream.is_empty() {
                    line
                } else {
                    format!("{line} | {}", self.upstream)
                };
                Action::Copy {
                    text,
                    what: "a line for the server's stdin",
                }
            }
            "ws" => Action::Copy {
                text: req.to_string(),
                what: "the WebSocket message (curl does not apply)",
            },
            _ => Action::Copy {
                text: self.curl_command(r.exchange, req),
                what: "curl",
            },
        }
    }

    /// A `curl` command that sends `req` as the call was sent: the recorded path and query, and
    /// its `Mcp-Session-Id` (the secrets the recording redacted are never in it).
    pub fn curl_command(&self, exchange: super::Ex, req: &str) -> String {
        let q = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        let (path, session, version) = self.http.get(&exchange).map_or(("/", None, None), |h| {
            (
                h.path.as_str(),
                h.session.as_deref(),
                h.protocol_version.as_deref(),
            )
        });
        let mut c = format!(
            "curl -s {} -H 'content-type: application/json' -H 'accept: application/json, text/event-stream'",
            q(&format!("http://{}{}", self.listen, path))
        );
        if let Some(s) = session {
            c.push_str(&format!(" -H {}", q(&format!("mcp-session-id: {s}"))));
        }
        if let Some(v) = version {
            c.push_str(&format!(" -H {}", q(&format!("mcp-protocol-version: {v}"))));
        }
        c.push_str(&format!(" --data-raw {}", q(req)));
        c
    }

    /// The selected call (detail open) or the filtered list, as an exchange document.
    pub fn export_document(&self) -> String {
        let rows: Vec<&Row> = if self.detail {
            self.selected_row().into_iter().collect()
        } else {
            self.visible()
                .into_iter()
                .filter(|r| r.direction == Direction::ClientToServer)
                .collect()
        };
        // One document per scope (ids are unique only within a scope), scopes in order of
        // first appearance, one per line — as `rpctap export --format exchange` writes them.
        let mut scopes: Vec<(&str, Vec<&Row>)> = Vec::new();
        for r in rows {
            match scopes.iter_mut().find(|(s, _)| *s == &*r.scope) {
                Some((_, v)) => v.push(r),
                None => scopes.push((&r.scope, vec![r])),
            }
        }
        scopes
            .iter()
            .map(|(_, rows)| {
                let req: Vec<&str> = rows.iter().filter_map(|r| r.request.as_deref()).collect();
                let resp: Vec<&str> = rows.iter().filter_map(|r| r.reply.as_deref()).collect();
                format!(
                    "{{\"request\":[{}],\"response\":[{}]}}",
                    req.join(","),
                    resp.join(",")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
