//! The filter language, one for every place that narrows traffic: the dashboard's `/` (live,
//! `view`, `attach`, `watch`), the feed's `GET /events?filter=…` and `attach --text --filter`.
//! It matches anything that can say what [`Subject`] asks — a dashboard row, or an event.

use crate::events::{Direction, Event, Outcome};
use std::borrow::Cow;

/// What a filter asks of what it matches.
pub trait Subject {
    fn method(&self) -> &str;
    /// The tool, prompt or resource (or a subscription's id).
    fn target(&self) -> Option<&str>;
    /// The id's exact text; empty for none.
    fn id(&self) -> Cow<'_, str>;
    /// `session:ID` or `exchange:N` (under `watch`, `exchange:N@SESSION`).
    fn scope(&self) -> Cow<'_, str>;
    /// A `watch` server's label; empty elsewhere.
    fn server(&self) -> &str {
        ""
    }
    /// An A2A call's conversation as `a2a:CONTEXT` (what `session:` matches beside the scope).
    fn conversation(&self) -> Option<Cow<'_, str>> {
        None
    }
    /// The A2A skill a message names (`rpc::a2a::message_skill`: its bytes read again, only for
    /// a `skill:` term).
    fn skill(&self) -> Option<String> {
        None
    }
    fn direction(&self) -> Option<Direction>;
    fn status(&self) -> Status;
    /// The anomaly codes it carries.
    fn codes(&self) -> Vec<&str>;
    /// An authorization exchange's row (`http`).
    fn is_http(&self) -> bool {
        false
    }
    /// Whether `lower` (lower case) is in its method, target, id or messages.
    fn has_text(&self, lower: &str) -> bool;
}

/// How a call stands, as the filter's words name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Pending,
    Notification,
    Ok,
    /// A JSON-RPC error, or rejected by the HTTP layer.
    Error,
    Missing,
    Refused,
    /// Cancelled by the client, or abandoned (the client went away): no failure of the server's.
    Cancelled,
    /// A round of an MCP multi round-trip call that ended asking for the client's input.
    Input,
    /// Neither (an HTTP row below 400, a frame, a finding).
    Other,
}

impl Status {
    /// `error` covers every failed call.
    fn is_error(self) -> bool {
        matches!(self, Status::Error | Status::Missing | Status::Refused)
    }
}

/// The filter language: terms separated by spaces, all of which must
/// hold (AND); `-term` negates one. A term is a word — `error` (the call failed: a JSON-RPC
/// error, refused, rejected or missing), `anomaly` (flagged), `pending`, `http` (the
/// authorization rows) — or `field:value`:
/// `method:GLOB`, `tool:GLOB` (also `prompt:` and `resource:`: the call's target), `status:`
/// (`ok`, `error`, `missing`, `refused`, `pending`, `flagged`, `notification`), `dir:` (`c2s`
/// or `s2c`), `id:`, `session:` (part of the scope, or of an A2A call's `a2a:CONTEXT`), `code:` (an anomaly code, a glob),
/// `skill:` (an A2A message's skill, a glob), `subscription:`, `server:` (a `watch` server's label or session name, a glob); a token with `/` or `*` is a method glob; anything else is free text,
/// searched in the method, target, id and both messages. A term it cannot read is an error that
/// names it.
#[derive(Debug, Default)]
pub struct Filter {
    terms: Vec<(bool, Term)>,
}

#[derive(Debug)]
enum Term {
    Error,
    Anomaly,
    Pending,
    Input,
    Http,
    Ok,
    Missing,
    Refused,
    Cancelled,
    Notification,
    Dir(Direction),
    Id(String),
    Session(String),
    Subscription(String),
    Method(globset::GlobMatcher),
    Target(globset::GlobMatcher),
    /// An A2A message's skill.
    Skill(globset::GlobMatcher),
    Code(globset::GlobMatcher),
    Server(globset::GlobMatcher),
    Text(String),
}

/// The fields `field:value` knows.
const FIELDS: &str =
    "method, tool, prompt, resource, status, dir, id, session, code, subscription, server";

fn glob(field: &str, g: &str) -> Result<globset::GlobMatcher, String> {
    globset::GlobBuilder::new(g)
        .case_insensitive(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("{field}:{g} is not a glob: {}", e.kind()))
}

impl Filter {
    pub fn parse(s: &str) -> Result<Filter, String> {
        let mut f = Filter::default();
        for tok in s.split_whitespace() {
            let (neg, t) = match tok.strip_prefix('-').or_else(|| tok.strip_prefix('!')) {
                Some(rest) if !rest.is_empty() => (true, rest),
                _ => (false, tok),
            };
            f.terms.push((neg, Self::term(t)?));
        }
        Ok(f)
    }

    fn term(t: &str) -> Result<Term, String> {
        Ok(match t {
            "error" | "errors" => Term::Error,
            "anomaly" | "anomalies" | "flagged" => Term::Anomaly,
            "pending" => Term::Pending,
            "http" | "kind:http" => Term::Http,
            _ => match t.split_once(':') {
                // A URL or other text with a colon is text, not a field.
                Some((field, value))
                    if !field.is_empty()
                        && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && !value.starts_with('/') =>
                {
                    if value.is_empty() {
                        return Err(format!("{field}: needs a value"));
                    }
                    match field.to_ascii_lowercase().as_str() {
                        "method" => Term::Method(glob(field, value)?),
                        "tool" | "prompt" | "resource" | "target" => {
                            Term::Target(glob(field, value)?)
                        }
                        "code" => Term::Code(glob(field, value)?),
                        "skill" => Term::Skill(glob(field, value)?),
                        "server" | "label" => Term::Server(glob(field, value)?),
                        "id" => Term::Id(value.trim_matches('"').to_string()),
                        "session" | "scope" => Term::Session(value.to_string()),
                        "subscription" => Term::Subscription(value.trim_matches('"').to_string()),
                        "dir" => match value.to_ascii_lowercase().as_str() {
                            "c2s" | "c→s" | "client" | "in" => Term::Dir(Direction::ClientToServer),
                            "s2c" | "s→c" | "server" | "out" => {
                                Term::Dir(Direction::ServerToClient)
                            }
                            _ => return Err(format!("dir:{value}: use dir:c2s or dir:s2c")),
                        },
                        "status" => match value.to_ascii_lowercase().as_str() {
                            "ok" | "result" => Term::Ok,
                            "error" | "errors" | "failed" => Term::Error,
                            "missing" => Term::Missing,
                            "cancelled" | "canceled" | "abandoned" => Term::Cancelled,
                            "refused" => Term::Refused,
                            "pending" => Term::Pending,
                            "input" | "input_required" => Term::Input,
                            "flagged" | "anomaly" => Term::Anomaly,
                            "notification" | "notif" => Term::Notification,
                            _ => {
                                return Err(format!(
                                    "status:{value}: use ok, error, missing, refused, cancelled, pending, input, flagged or notification"
                                ))
                            }
                        },
                        _ => {
                            return Err(format!(
                                "unknown filter field `{field}:` (fields: {FIELDS})"
                            ))
                        }
                    }
                }
                _ if t.contains('/') || t.contains('*') => Term::Method(glob("method", t)?),
                _ => Term::Text(t.to_lowercase()),
            },
        })
    }

    pub fn matches(&self, r: &impl Subject) -> bool {
        self.terms.iter().all(|(neg, t)| Self::holds(t, r) != *neg)
    }

    /// Whether nothing is asked (every subject matches).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    fn holds(t: &Term, r: &impl Subject) -> bool {
        let target_is = |g: &globset::GlobMatcher| r.target().is_some_and(|t| g.is_match(t));
        match t {
            Term::Error => r.status().is_error(),
            Term::Anomaly => !r.codes().is_empty(),
            Term::Pending => r.status() == Status::Pending,
            Term::Http => r.is_http(),
            Term::Ok => r.status() == Status::Ok,
            Term::Input => r.status() == Status::Input,
            Term::Missing => r.status() == Status::Missing,
            Term::Cancelled => r.status() == Status::Cancelled,
            Term::Refused => r.status() == Status::Refused,
            Term::Notification => r.status() == Status::Notification,
            Term::Dir(d) => r.direction() == Some(*d),
            Term::Id(i) => r.id().trim_matches('"') == i,
            Term::Session(s) => {
                r.scope().contains(s.as_str())
                    || r.conversation().is_some_and(|c| c.contains(s.as_str()))
            }
            Term::Subscription(s) => r.target().is_some_and(|t| t.trim_matches('"') == s),
            Term::Method(g) => g.is_match(r.method()) || target_is(g),
            Term::Target(g) => target_is(g),
            Term::Skill(g) => r.skill().is_some_and(|s| g.is_match(s)),
            Term::Code(g) => r.codes().iter().any(|a| g.is_match(a)),
            // The label, or the session's name (a shim's scope is its session).
            Term::Server(g) => {
                let scope = r.scope();
                g.is_match(r.server())
                    || scope
                        .strip_prefix("session:")
                        .is_some_and(|s| g.is_match(s))
                    || scope.rsplit_once('@').is_some_and(|(_, s)| g.is_match(s))
            }
            Term::Text(t) => r.has_text(t),
        }
    }
}

/// Events as the feed filters them: a call by everything it carries, a message by its method,
/// target, id and text, a finding by its code, scope and id. Events about no call (HTTP heads,
/// notices, stderr lines) match no term.
impl Subject for Event {
    fn method(&self) -> &str {
        match self {
            Event::Call(c) => &c.method,
            Event::Message(m) => m.method.as_deref().unwrap_or(""),
            Event::Refusal(r) => &r.method,
            _ => "",
        }
    }
    fn target(&self) -> Option<&str> {
        match self {
            Event::Call(c) => c.target.as_deref(),
            Event::Message(m) => m.target.as_deref(),
            _ => None,
        }
    }
    fn id(&self) -> Cow<'_, str> {
        let id = match self {
            Event::Call(c) => Some(&c.id),
            Event::Message(m) => m.id.as_ref(),
            Event::Anomaly(a) => a.id.as_ref(),
            Event::Refusal(r) => r.id.as_ref(),
            _ => None,
        };
        id.map_or(Cow::Borrowed(""), |i| Cow::Owned(i.to_json_text()))
    }
    fn scope(&self) -> Cow<'_, str> {
        match self {
            Event::Call(c) => Cow::Owned(c.scope.to_string()),
            Event::Message(m) => Cow::Owned(m.scope.to_string()),
            Event::Anomaly(a) => Cow::Owned(a.scope.to_string()),
            Event::Refusal(r) => Cow::Owned(r.scope.to_string()),
            _ => Cow::Borrowed(""),
        }
    }
    fn conversation(&self) -> Option<Cow<'_, str>> {
        match self {
            Event::Call(c) => c.context.as_ref().map(|c| Cow::Owned(format!("a2a:{c}"))),
            _ => None,
        }
    }
    fn skill(&self) -> Option<String> {
        match self {
            Event::Message(m) => crate::rpc::a2a::message_skill(m.method.as_deref()?, &m.message),
            _ => None,
        }
    }
    fn direction(&self) -> Option<Direction> {
        match self {
            Event::Call(c) => Some(c.direction),
            Event::Message(m) => Some(m.direction),
            Event::Anomaly(a) => a.direction,
            _ => None,
        }
    }
    fn status(&self) -> Status {
        match self {
            Event::Call(c) => match &c.outcome {
                Outcome::Result => Status::Ok,
                Outcome::InputRequired => Status::Input,
                Outcome::Error { .. } | Outcome::Rejected { .. } => Status::Error,
                Outcome::Missing { .. } => Status::Missing,
                Outcome::Cancelled { .. } | Outcome::Abandoned { .. } => Status::Cancelled,
                Outcome::Refused { .. } => Status::Refused,
            },
            Event::Refusal(_) => Status::Refused,
            Event::Message(m) if m.kind == crate::rpc::Kind::Notification => Status::Notification,
            Event::Message(m) if m.kind == crate::rpc::Kind::Request => Status::Pending,
            _ => Status::Other,
        }
    }
    fn codes(&self) -> Vec<&str> {
        match self {
            Event::Call(c) => c.anomalies.to_vec(),
            Event::Anomaly(a) => vec![a.code],
            _ => vec![],
        }
    }
    fn has_text(&self, lower: &str) -> bool {
        let has = |s: &str| s.to_lowercase().contains(lower);
        has(self.method())
            || self.target().is_some_and(has)
            || matches!(self, Event::Message(m) if has(&m.json_text()))
            || matches!(self, Event::Anomaly(a) if has(&a.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::reader::parse_line;

    #[test]
    fn events_answer_the_same_terms_as_rows() {
        let call = parse_line(r#"{"event":"call","ts":3,"exchange":2,"scope":"session:abc","direction":"c2s","method":"tools/call","target":"search","id":7,"outcome":"error","code":-32602,"message":"bad","latency_us":5,"anomalies":["MCP_INPUT_SCHEMA"]}"#).unwrap();
        let ok = parse_line(r#"{"event":"call","ts":4,"exchange":3,"scope":"exchange:3","direction":"c2s","method":"add","id":1,"outcome":"result","latency_us":5}"#).unwrap();
        let f = |s: &str| Filter::parse(s).unwrap();
        for (q, want) in [
            ("error", (true, false)),
            ("status:ok", (false, true)),
            ("tool:search", (true, false)),
            ("method:tools/* -status:ok", (true, false)),
            ("id:7", (true, false)),
            ("session:abc", (true, false)),
            ("code:MCP_*", (true, false)),
            ("dir:c2s", (true, true)),
            ("search", (true, false)),
        ] {
            assert_eq!((f(q).matches(&call), f(q).matches(&ok)), want, "{q}");
        }
        let notice = parse_line(r#"{"event":"notice","ts":1,"what":"x","message":"m"}"#).unwrap();
        assert!(!f("error").matches(&notice) && f("").matches(&notice));
        assert!(f("").is_empty());
    }

    /// `skill:` reads the skill an A2A message's metadata names; `session:` an A2A call's
    /// conversation as well as its scope.
    #[test]
    fn a2a_skills_and_conversations_are_terms() {
        let msg = |method: &str, meta: &str| {
            parse_line(&format!(r#"{{"event":"message","ts":1,"exchange":1,"scope":"exchange:1","direction":"c2s","transport":"json","kind":"request","id":1,"method":"{method}","message":{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"message":{{"messageId":"m","role":"ROLE_USER","parts":[{{"text":"hi"}}],"metadata":{meta}}}}}}}}}"#)).unwrap()
        };
        let f = |s: &str| Filter::parse(s).unwrap();
        assert!(f("skill:trans*").matches(&msg("SendMessage", r#"{"skill":"translate"}"#)));
        assert!(f("skill:translate").matches(&msg("message/stream", r#"{"skillId":"translate"}"#)));
        assert!(!f("skill:translate").matches(&msg("SendMessage", r#"{"skill":"summarize"}"#)));
        assert!(!f("skill:*").matches(&msg("SendMessage", "{}")));
        // Only a message method names a skill.
        assert!(!f("skill:*").matches(&msg("tools/call", r#"{"skill":"x"}"#)));
        let call = parse_line(r#"{"event":"call","ts":3,"exchange":2,"scope":"exchange:2","direction":"c2s","method":"SendMessage","id":7,"outcome":"result","latency_us":5,"context":"ctx-9"}"#).unwrap();
        assert!(f("session:a2a:ctx-9").matches(&call));
        assert!(f("session:ctx-9").matches(&call));
        assert!(!f("session:ctx-8").matches(&call));
    }
}
