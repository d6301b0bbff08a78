//! The filter language of the Calls view (and, in time, of `view`, `attach`, the feed and the
//! agent API).

use super::{Row, RowOutcome};
use crate::events::Direction;

/// The filter language (the Calls view's `/`): terms separated by spaces, all of which must
/// hold (AND); `-term` negates one. A term is a word — `error` (the call failed: a JSON-RPC
/// error, refused, rejected or missing), `anomaly` (flagged), `pending`, `http` (the
/// authorization rows) — or `field:value`:
/// `method:GLOB`, `tool:GLOB` (also `prompt:` and `resource:`: the call's target), `status:`
/// (`ok`, `error`, `missing`, `refused`, `pending`, `flagged`, `notification`), `dir:` (`c2s`
/// or `s2c`), `id:`, `session:` (part of the scope), `code:` (an anomaly code, a glob),
/// `subscription:`, `server:` (a `watch` server's label or session name, a glob); a token with `/` or `*` is a method glob; anything else is free text,
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
    Http,
    Ok,
    Missing,
    Refused,
    Notification,
    Dir(Direction),
    Id(String),
    Session(String),
    Subscription(String),
    Method(globset::GlobMatcher),
    Target(globset::GlobMatcher),
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
                            "refused" => Term::Refused,
                            "pending" => Term::Pending,
                            "flagged" | "anomaly" => Term::Anomaly,
                            "notification" | "notif" => Term::Notification,
                            _ => {
                                return Err(format!(
                                    "status:{value}: use ok, error, missing, refused, pending, flagged or notification"
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

    pub fn matches(&self, r: &Row) -> bool {
        self.terms.iter().all(|(neg, t)| Self::holds(t, r) != *neg)
    }

    fn holds(t: &Term, r: &Row) -> bool {
        let target_is =
            |g: &globset::GlobMatcher| r.target.as_ref().is_some_and(|t| g.is_match(&**t));
        match t {
            Term::Error => r.outcome.is_error(),
            Term::Anomaly => !r.anomalies.is_empty(),
            Term::Pending => r.outcome == RowOutcome::Pending,
            Term::Http => r.transport == "http",
            Term::Ok => r.outcome == RowOutcome::Result,
            Term::Missing => matches!(r.outcome, RowOutcome::Missing(_)),
            Term::Refused => matches!(r.outcome, RowOutcome::Refused(_)),
            Term::Notification => r.outcome == RowOutcome::Notification,
            Term::Dir(d) => r.direction == *d,
            Term::Id(i) => r.id.trim_matches('"') == i,
            Term::Session(s) => r.scope.contains(s.as_str()),
            Term::Subscription(s) => r
                .target
                .as_deref()
                .is_some_and(|t| t.trim_matches('"') == s),
            Term::Method(g) => g.is_match(&*r.method) || target_is(g),
            Term::Target(g) => target_is(g),
            Term::Code(g) => r.anomalies.iter().any(|a| g.is_match(a)),
            // The label, or the session's name (a shim's scope is its session).
            Term::Server(g) => {
                g.is_match(&*r.server)
                    || r.scope
                        .strip_prefix("session:")
                        .is_some_and(|s| g.is_match(s))
                    || r.scope.rsplit_once('@').is_some_and(|(_, s)| g.is_match(s))
            }
            Term::Text(t) => {
                let has = |s: &str| s.to_lowercase().contains(t.as_str());
                has(&r.method)
                    || r.target.as_deref().is_some_and(has)
                    || has(&r.id)
                    || r.request.as_deref().is_some_and(has)
                    || r.reply.as_deref().is_some_and(has)
            }
        }
    }
}
