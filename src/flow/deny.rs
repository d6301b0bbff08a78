//! `[[deny]]` rules (and `--deny` flags): tools and methods a client may not call through
//! rpctap. A denied call is answered by rpctap with a JSON-RPC error (`-32601`, "not found",
//! unless the rule names a code) and never reaches the server; a denied tool is also taken out
//! of the server's `tools/list` replies, so a client is not offered what it may not call.
//! Both are recorded as injected (the rule's name), like a fault, so `check` never blames the
//! server for them.
//!
//! A stage of the acting pipeline ([`crate::flow`]): no transport knows it exists.

use super::{Msg, Stage, Verdict};
use crate::events::Direction;
use crate::flow::fault::{Action, Edit, Fired, ReplyEdit};
use crate::rpc::Kind;
use globset::{Glob, GlobMatcher};
use serde::Deserialize;
use std::sync::Arc;

/// The code of a denied call's error when the rule names none: the call is answered as one the
/// server does not have.
pub const DEFAULT_CODE: i64 = -32601;

/// One rule as written in the config file (`[[deny]]`) or a `--deny` flag.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DenySpec {
    /// Shown in the events it makes; defaults to `deny N`.
    pub name: Option<String>,
    /// A glob on the tool of a `tools/call` (the tool is also hidden from `tools/list`).
    pub tool: Option<String>,
    /// A glob on the method (`resources/*`, say).
    pub method: Option<String>,
    /// The error code of the refusal (default -32601).
    pub code: Option<i64>,
    /// The error message (default: says what was denied and by which rule).
    pub message: Option<String>,
}

/// A rule's error, naming the rule and the setting.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("deny rule {rule}: {message}")]
pub struct DenyError {
    pub rule: String,
    pub message: String,
}

impl DenySpec {
    /// A `--deny` flag: the `[[deny]]` keys comma separated, e.g. `tool=run_*` or
    /// `method=resources/*,code=-32000`.
    pub fn parse_flag(s: &str) -> Result<DenySpec, DenyError> {
        let err = |m: String| DenyError {
            rule: format!("--deny {s:?}"),
            message: m,
        };
        let mut spec = DenySpec::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| err(format!("{part:?} is not KEY=VALUE")))?;
            let v = v.trim().to_string();
            match k.trim() {
                "name" => spec.name = Some(v),
                "tool" => spec.tool = Some(v),
                "method" => spec.method = Some(v),
                "message" => spec.message = Some(v),
                "code" => {
                    spec.code = Some(
                        v.parse()
                            .map_err(|_| err(format!("code {v:?} is not an integer")))?,
                    )
                }
                other => {
                    return Err(err(format!(
                        "unknown key {other:?}: use tool, method, code, message or name"
                    )))
                }
            }
        }
        Ok(spec)
    }
}

struct Rule {
    name: Arc<str>,
    tool: Option<GlobMatcher>,
    method: Option<GlobMatcher>,
    code: i64,
    message: Option<Arc<str>>,
}

impl Rule {
    fn matches(&self, method: &str, tool: Option<&str>) -> bool {
        self.method.as_ref().is_none_or(|g| g.is_match(method))
            && self
                .tool
                .as_ref()
                .is_none_or(|g| method == "tools/call" && tool.is_some_and(|t| g.is_match(t)))
    }

    /// Whether it denies the tool named `tool` (the ones `tools/list` must not offer).
    fn denies_tool(&self, tool: &str) -> bool {
        self.tool.as_ref().is_some_and(|g| g.is_match(tool))
            && self
                .method
                .as_ref()
                .is_none_or(|g| g.is_match("tools/call"))
    }
}

/// The deny rules in force, as a stage.
pub struct Deny {
    rules: Arc<[Rule]>,
    /// The edit armed on every `tools/list` reply (when a rule names a tool).
    hide: Option<Edit>,
}

impl Deny {
    /// The stage for `specs`; `None` when there are none.
    pub fn new(specs: &[DenySpec]) -> Result<Option<Deny>, DenyError> {
        if specs.is_empty() {
            return Ok(None);
        }
        let mut rules = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            let name: Arc<str> = s
                .name
                .clone()
                .unwrap_or_else(|| format!("deny {}", i + 1))
                .into();
            let glob = |what: &str, p: &Option<String>| {
                p.as_deref()
                    .map(|p| {
                        Glob::new(p)
                            .map(|g| g.compile_matcher())
                            .map_err(|e| DenyError {
                                rule: name.to_string(),
                                message: format!("{what} glob {p:?}: {e}"),
                            })
                    })
                    .transpose()
            };
            if s.tool.is_none() && s.method.is_none() {
                return Err(DenyError {
                    rule: name.to_string(),
                    message: "names neither a tool nor a method: it would deny every call".into(),
                });
            }
            rules.push(Rule {
                tool: glob("tool", &s.tool)?,
                method: glob("method", &s.method)?,
                code: s.code.unwrap_or(DEFAULT_CODE),
                message: s.message.as_deref().map(Into::into),
                name,
            });
        }
        let rules: Arc<[Rule]> = rules.into();
        let hide = rules
            .iter()
            .any(|r| r.tool.is_some())
            .then(|| Edit(Arc::new(Hide(rules.clone()))));
        Ok(Some(Deny { rules, hide }))
    }
}

impl Stage for Deny {
    fn name(&self) -> &str {
        "deny"
    }

    fn wants(&self, dir: Direction) -> bool {
        dir == Direction::ClientToServer
    }

    fn decide(&self, m: &Msg<'_>) -> Verdict {
        // What a lenient server may still execute is denied too (an invalid message that names
        // a method); a notification is dropped, having no reply to carry the refusal.
        if !matches!(m.kind, Kind::Request | Kind::Notification | Kind::Invalid) {
            return Verdict::Pass;
        }
        let method = m.call.method;
        if let Some(r) = self.rules.iter().find(|r| r.matches(method, m.call.tool)) {
            let what = match m.call.tool.filter(|_| method == "tools/call") {
                Some(t) => format!("tool {t:?}"),
                None => format!("method {method:?}"),
            };
            let message = r.message.clone().unwrap_or_else(|| {
                format!(
                    "{what} is not available here (denied by rpctap rule {:?})",
                    r.name
                )
                .into()
            });
            return Verdict::Act(Fired {
                rule: r.name.clone(),
                action: Action::Error {
                    status: None,
                    code: r.code,
                    message,
                    data: None,
                },
                direction: m.dir,
            });
        }
        match &self.hide {
            Some(edit) if method == "tools/list" && m.kind == Kind::Request => {
                Verdict::Act(Fired {
                    rule: "deny".into(),
                    action: Action::Edit(edit.clone()),
                    direction: m.dir,
                })
            }
            _ => Verdict::Pass,
        }
    }
}

/// The denied tools taken out of a `tools/list` result.
struct Hide(Arc<[Rule]>);

impl ReplyEdit for Hide {
    fn name(&self) -> &'static str {
        "deny"
    }

    fn edit(&self, reply: &[u8]) -> Option<(Vec<u8>, String)> {
        let mut v: serde_json::Value = serde_json::from_slice(reply).ok()?;
        let tools = v.get_mut("result")?.get_mut("tools")?.as_array_mut()?;
        let mut hidden = Vec::new();
        tools.retain(|t| {
            let name = t.get("name").and_then(|n| n.as_str()).unwrap_or("");
            let deny = self.0.iter().any(|r| r.denies_tool(name));
            if deny {
                hidden.push(format!("{name:?}"));
            }
            !deny
        });
        if hidden.is_empty() {
            return None;
        }
        let detail = format!(
            "denied tool{} hidden from the list: {}",
            if hidden.len() == 1 { "" } else { "s" },
            hidden.join(", ")
        );
        Some((serde_json::to_vec(&v).ok()?, detail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::CallInfo;

    fn decide(d: &Deny, method: &str, tool: Option<&str>) -> Verdict {
        let call = CallInfo {
            method,
            tool,
            resource: None,
            raw: b"",
        };
        let h = http::HeaderMap::new();
        d.decide(&Msg {
            dir: Direction::ClientToServer,
            kind: Kind::Request,
            call: &call,
            session: None,
            peer: std::net::Ipv4Addr::LOCALHOST.into(),
            headers: &h,
        })
    }

    #[test]
    fn denies_by_tool_and_method_and_hides_denied_tools() {
        let d = Deny::new(&[
            DenySpec::parse_flag("tool=run_*").unwrap(),
            DenySpec::parse_flag("method=resources/*,code=-32000,name=no resources").unwrap(),
        ])
        .unwrap()
        .unwrap();
        let Verdict::Act(f) = decide(&d, "tools/call", Some("run_shell")) else {
            panic!("a denied tool passed")
        };
        assert_eq!(&*f.rule, "deny 1");
        let Action::Error { code, message, .. } = &f.action else {
            panic!("{f:?}")
        };
        assert_eq!(*code, -32601);
        assert!(message.contains("\"run_shell\""), "{message}");
        // `tool` names a tools/call's tool, not a prompt of the same name.
        assert_eq!(decide(&d, "prompts/get", Some("run_shell")), Verdict::Pass);
        assert_eq!(decide(&d, "tools/call", Some("search")), Verdict::Pass);
        let Verdict::Act(f) = decide(&d, "resources/read", None) else {
            panic!("a denied method passed")
        };
        assert_eq!(&*f.rule, "no resources");
        assert!(matches!(f.action, Action::Error { code: -32000, .. }));
        let Verdict::Act(f) = decide(&d, "tools/list", None) else {
            panic!("tools/list not armed")
        };
        let Action::Edit(e) = &f.action else {
            panic!("{f:?}")
        };
        let reply = br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"run_shell"},{"name":"search","x":1},{"name":"run_py"}],"nextCursor":"c"}}"#;
        let (b, detail) = e.0.edit(reply).unwrap();
        assert_eq!(
            std::str::from_utf8(&b).unwrap(),
            r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"search","x":1}],"nextCursor":"c"}}"#
        );
        assert_eq!(
            detail,
            r#"denied tools hidden from the list: "run_shell", "run_py""#
        );
        assert_eq!(
            e.0.edit(br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}"#),
            None
        );
        assert_eq!(e.0.edit(b"{not json"), None);
    }

    #[test]
    fn bad_rules_are_named() {
        assert!(DenySpec::parse_flag("tool").is_err());
        assert!(DenySpec::parse_flag("colour=red").is_err());
        assert!(DenySpec::parse_flag("code=x").is_err());
        let e = Deny::new(&[DenySpec::default()]).err().unwrap();
        assert!(e.to_string().contains("deny 1"), "{e}");
        let e = Deny::new(&[DenySpec::parse_flag("tool=[").unwrap()])
            .err()
            .unwrap();
        assert!(e.to_string().contains("tool glob"), "{e}");
        assert!(Deny::new(&[]).unwrap().is_none());
    }
}
