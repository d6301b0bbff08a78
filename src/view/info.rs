//! What a session declared and what it used (the `i` popup): both sides' `initialize` (or
//! `server/discover`) — names, versions, protocol, capabilities — read from the rows the list
//! holds, and each capability the traffic used held against what its side declared. For an A2A
//! call, the agent's card (the last one fetched through rpctap from that server) and what the
//! traffic used of it.

use super::{App, View, NO_SESSION};
use serde_json::Value;
use std::collections::BTreeMap;

/// A capability, the side that declares it, and the methods that use it.
const USES: [(&str, Side, &[&str]); 8] = [
    ("tools", Side::Server, &["tools/"]),
    ("prompts", Side::Server, &["prompts/"]),
    ("resources", Side::Server, &["resources/"]),
    (
        "logging",
        Side::Server,
        &["notifications/message", "logging/"],
    ),
    ("completions", Side::Server, &["completion/"]),
    ("sampling", Side::Client, &["sampling/"]),
    ("roots", Side::Client, &["roots/"]),
    ("elicitation", Side::Client, &["elicitation/"]),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

fn obj_keys(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

fn who(info: Option<&Value>) -> String {
    let s = |k: &str| {
        info.and_then(|i| i.get(k))
            .and_then(Value::as_str)
            .unwrap_or("?")
    };
    format!("{} {}", s("name"), s("version"))
}

impl App {
    /// The scope `i` describes: the selected session (Sessions view), or the selected call's.
    fn info_scope(&self) -> Option<String> {
        match self.view {
            View::Sessions if !self.servers.is_empty() => {
                let i = self.selected_index();
                self.servers_sorted()
                    .get(i)
                    .map(|s| format!("session:{}", s.name))
            }
            View::Sessions => {
                let i = self.selected_index();
                self.sessions_sorted()
                    .get(i)
                    .map(|(k, _)| k.to_string())
                    .filter(|k| k != NO_SESSION)
            }
            _ => self.selected_row().map(|r| r.scope.to_string()),
        }
    }

    /// What an A2A agent's card declared and what the traffic used (the selected row is an A2A
    /// call or a card).
    fn agent_info(&self) -> Option<Vec<String>> {
        const CARD: &str = "A2A agent card: ";
        let is_card = |r: &super::Row| r.target.as_deref().is_some_and(|t| t.starts_with(CARD));
        let sel = self.selected_row()?;
        if !crate::rpc::a2a::is_a2a_only(&sel.method) && !is_card(sel) {
            return None;
        }
        let mut out = vec!["A2A agent".to_string()];
        let card = self
            .rows
            .iter()
            .rev()
            .find(|r| r.server == sel.server && is_card(r));
        let facts = card
            .and_then(|r| r.reply.as_deref())
            .map(crate::inspect::a2a::CardFacts::read);
        match &facts {
            Some(f) => {
                out.push(format!("  {}", f.describe()));
                let yes = |b: Option<bool>| match b {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "not said",
                };
                out.push(format!(
                    "  streaming: {}; push notifications: {}",
                    yes(f.streaming),
                    yes(f.push)
                ));
            }
            None => out.push("  its agent card was not fetched through rpctap".into()),
        }
        let mut used: BTreeMap<&str, u64> = BTreeMap::new();
        for r in self.rows.iter().filter(|r| r.server == sel.server) {
            if crate::rpc::a2a::is_method(&r.method) {
                *used.entry(&r.method).or_default() += 1;
            }
        }
        out.push("used:".into());
        for (m, n) in used {
            let denied = facts.as_ref().is_some_and(|f| {
                (crate::rpc::a2a::is_stream_method(m) && f.streaming == Some(false))
                    || (m.contains("ushNotificationConfig") && f.push == Some(false))
            });
            match denied {
                true => out.push(format!("✗ {m} ×{n} — the card says the agent does not")),
                false => out.push(format!("  ✓ {m} ×{n}")),
            }
        }
        Some(out)
    }

    /// The popup's lines.
    pub fn session_info(&self) -> Vec<String> {
        if let Some(lines) = self.agent_info() {
            return lines;
        }
        let Some(scope) = self.info_scope() else {
            return vec!["no session selected (plain JSON-RPC has no initialize)".into()];
        };
        let rows: Vec<_> = self.rows.iter().filter(|r| *r.scope == *scope).collect();
        let mut out = vec![format!("session: {scope}")];
        let init = rows
            .iter()
            .find(|r| matches!(&*r.method, "initialize" | "server/discover"));
        let parse = |t: Option<&super::Text>| -> Option<Value> {
            t.and_then(|t| serde_json::from_str(t).ok())
        };
        let (req, res) = match init {
            Some(r) => (
                parse(r.request.as_ref()).and_then(|v| v.get("params").cloned()),
                parse(r.reply.as_ref()).and_then(|v| v.get("result").cloned()),
            ),
            None => (None, None),
        };
        if init.is_none() {
            out.push("its initialize is not in the list (it came before, or aged out)".into());
        }
        let client_caps = obj_keys(req.as_ref().and_then(|p| p.get("capabilities")));
        let server_caps = obj_keys(res.as_ref().and_then(|p| p.get("capabilities")));
        if let Some(p) = &req {
            out.push("client:".into());
            out.push(format!(
                "  {} — asks protocol {}",
                who(p.get("clientInfo")),
                p.get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
            ));
            out.push(format!("  capabilities: {}", list(&client_caps)));
        }
        if let Some(r) = &res {
            out.push("server:".into());
            out.push(format!(
                "  {} — protocol {}",
                who(r.get("serverInfo")),
                r.get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
            ));
            out.push(format!("  capabilities: {}", list(&server_caps)));
            if let Some(i) = r.get("instructions").and_then(Value::as_str) {
                out.push(format!(
                    "  instructions: {}",
                    i.chars().take(200).collect::<String>()
                ));
            }
        }
        // What the traffic used, per capability.
        let mut used: BTreeMap<&str, (Side, BTreeMap<String, u64>)> = BTreeMap::new();
        for r in &rows {
            for (cap, side, prefixes) in USES {
                if prefixes.iter().any(|p| r.method.starts_with(p)) {
                    *used
                        .entry(cap)
                        .or_insert((side, BTreeMap::new()))
                        .1
                        .entry(r.method.to_string())
                        .or_default() += 1;
                }
            }
        }
        out.push("used:".into());
        if used.is_empty() {
            out.push("  nothing that needs a capability".into());
        }
        for (cap, (side, methods)) in used {
            let declared = match side {
                Side::Server => &server_caps,
                Side::Client => &client_caps,
            };
            let what = methods
                .iter()
                .map(|(m, n)| format!("{m} ×{n}"))
                .collect::<Vec<_>>()
                .join(", ");
            let side = if side == Side::Server {
                "server"
            } else {
                "client"
            };
            if init.is_none() || declared.iter().any(|d| d == cap) {
                out.push(format!("  ✓ {cap}: {what}"));
            } else {
                out.push(format!("✗ {cap}: {what} — not declared by the {side}"));
            }
        }
        out
    }
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}
