//! What a recorded session costs an agent's context (`rpctap cost FILE`, and `check`'s
//! `--max-tokens` / `--max-definition-tokens`): the tokens of what the server offers — each
//! tool, prompt, resource and resource template definition of its last complete lists, which
//! an agent pays on every turn it keeps them, biggest first — and of each call's arguments and
//! result, per tool with percentiles and per session in total.
//!
//! A definition is counted as the compact JSON the server sent for it; a call's arguments as
//! its `params.arguments` (else its `params`), its result as its `result` (or its `error`).
//! That is what crosses the wire: a client may present definitions to its model in another
//! form, so the counts are the wire's, for comparing servers, tools and builds.

use super::diff::last_list;
use crate::events::{Direction, Event, Scope};
use crate::record::reader::Capture;
use crate::rpc::Kind;
use crate::tokens::Tokenizer;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// One definition and its tokens.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Definition {
    pub name: String,
    pub tokens: usize,
}

/// A definition set (`tools`, `prompts`, `resources`, `resourceTemplates`), biggest first.
#[derive(Debug, Clone, Serialize)]
pub struct DefinitionSet {
    pub kind: &'static str,
    pub total: usize,
    pub items: Vec<Definition>,
}

/// The distribution of a token count over calls.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Spread {
    pub total: usize,
    pub p50: usize,
    pub p95: usize,
    pub max: usize,
}

impl Spread {
    fn of(mut v: Vec<usize>) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
        Spread {
            total: v.iter().sum(),
            p50: at(0.50),
            p95: at(0.95),
            max: v[v.len() - 1],
        }
    }
}

/// The calls of one method (and tool, prompt or resource).
#[derive(Debug, Clone, Serialize)]
pub struct Method {
    /// `tools/call search`.
    pub key: String,
    pub calls: usize,
    pub arguments: Spread,
    pub results: Spread,
}

/// One call's cost, for the gate.
#[derive(Debug, Clone, Serialize)]
pub struct CallCost {
    pub scope: String,
    pub key: String,
    pub id: String,
    pub arguments: usize,
    pub result: usize,
}

/// One session's (scope's) totals.
#[derive(Debug, Clone, Serialize)]
pub struct Session {
    pub scope: String,
    pub calls: usize,
    /// The arguments' tokens (what the agent sent).
    pub arguments: usize,
    /// The results' tokens (what came back into its context).
    pub results: usize,
}

/// The whole account.
#[derive(Debug, Clone, Serialize)]
pub struct Cost {
    pub tokenizer: &'static str,
    pub definitions: Vec<DefinitionSet>,
    /// Biggest total results first.
    pub methods: Vec<Method>,
    pub sessions: Vec<Session>,
    #[serde(skip)]
    pub calls: Vec<CallCost>,
    /// Texts the tokenizer could not read, counted by their bytes.
    pub estimated: usize,
}

/// The definition sets of a recording's last complete lists.
pub fn definitions(rec: &Capture, tok: Tokenizer, estimated: &mut usize) -> Vec<DefinitionSet> {
    let mut out = Vec::new();
    for (method, field, key) in [
        ("tools/list", "tools", "name"),
        ("prompts/list", "prompts", "name"),
        ("resources/list", "resources", "uri"),
        (
            "resources/templates/list",
            "resourceTemplates",
            "uriTemplate",
        ),
    ] {
        let Some(list) = last_list(rec, method, field, key) else {
            continue;
        };
        let mut items: Vec<Definition> = list
            .iter()
            .map(|(name, v)| {
                let c = tok.count_json(v);
                *estimated += usize::from(c.estimated);
                Definition {
                    name: name.clone(),
                    tokens: c.tokens,
                }
            })
            .collect();
        items.sort_by(|a, b| b.tokens.cmp(&a.tokens).then_with(|| a.name.cmp(&b.name)));
        out.push(DefinitionSet {
            kind: field,
            total: items.iter().map(|d| d.tokens).sum(),
            items,
        });
    }
    out
}

/// The account of a recording under `tok`.
pub fn cost(rec: &Capture, tok: Tokenizer) -> Cost {
    let mut estimated = 0;
    let definitions = definitions(rec, tok, &mut estimated);
    // Each message's tokens, by (scope, direction of the call, id): the request's arguments,
    // the reply's result.
    type Key = (Scope, Direction, String);
    let mut args: HashMap<Key, usize> = HashMap::new();
    let mut results: HashMap<Key, usize> = HashMap::new();
    for ev in &rec.events {
        let Event::Message(m) = ev else { continue };
        let Some(id) = m.id.as_ref().map(|i| i.to_json_text()) else {
            continue;
        };
        let (member, dir) = match m.kind {
            Kind::Request => ("params", m.direction),
            Kind::Result => ("result", m.direction.reverse()),
            Kind::Error => ("error", m.direction.reverse()),
            Kind::Notification | Kind::Invalid => continue,
        };
        let Ok(v) = serde_json::from_slice::<Value>(&m.message) else {
            continue;
        };
        let mut part = &v[member];
        if m.kind == Kind::Request && !part["arguments"].is_null() {
            part = &part["arguments"];
        }
        let c = if part.is_null() {
            Default::default()
        } else {
            tok.count_json(part)
        };
        estimated += usize::from(c.estimated);
        let into = if m.kind == Kind::Request {
            &mut args
        } else {
            &mut results
        };
        into.insert((m.scope.clone(), dir, id), c.tokens);
    }
    let mut per_method: BTreeMap<String, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    let mut per_session: BTreeMap<String, Session> = BTreeMap::new();
    let mut calls = Vec::new();
    for c in rec.calls() {
        let key = (c.scope.clone(), c.direction, c.id.to_json_text());
        let (a, r) = (
            args.get(&key).copied().unwrap_or(0),
            results.get(&key).copied().unwrap_or(0),
        );
        let mut name = c.method.to_string();
        if let Some(t) = &c.target {
            name.push(' ');
            name.push_str(t);
        }
        let m = per_method.entry(name.clone()).or_default();
        m.0.push(a);
        m.1.push(r);
        let scope = c.scope.report_key();
        let s = per_session.entry(scope.clone()).or_insert_with(|| Session {
            scope: scope.clone(),
            calls: 0,
            arguments: 0,
            results: 0,
        });
        s.calls += 1;
        s.arguments += a;
        s.results += r;
        calls.push(CallCost {
            scope,
            key: name,
            id: c.id.to_string(),
            arguments: a,
            result: r,
        });
    }
    let mut methods: Vec<Method> = per_method
        .into_iter()
        .map(|(key, (a, r))| Method {
            key,
            calls: a.len(),
            arguments: Spread::of(a),
            results: Spread::of(r),
        })
        .collect();
    methods.sort_by(|a, b| {
        b.results
            .total
            .cmp(&a.results.total)
            .then_with(|| a.key.cmp(&b.key))
    });
    Cost {
        tokenizer: tok.name(),
        definitions,
        methods,
        sessions: per_session.into_values().collect(),
        calls,
        estimated,
    }
}

/// The account for a person: the definitions biggest first (at most `top` of each set), then
/// the methods by the tokens their results brought back, then the sessions.
pub fn text(c: &Cost, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Tokens under {} (the wire's JSON):", c.tokenizer);
    if c.definitions.is_empty() {
        let _ = writeln!(
            out,
            "\nNo complete tools/prompts/resources list in the recording."
        );
    }
    for d in &c.definitions {
        let _ = writeln!(
            out,
            "\n{} definitions: {} tokens in {} (an agent pays them every turn it keeps them)",
            d.kind,
            d.total,
            d.items.len()
        );
        for i in d.items.iter().take(top) {
            let _ = writeln!(out, "  {:>7}  {}", i.tokens, i.name);
        }
        if d.items.len() > top {
            let _ = writeln!(out, "  … {} more", d.items.len() - top);
        }
    }
    if !c.methods.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<40} {:>6} {:>10} {:>8} {:>8} {:>8}",
            "calls (by result tokens)", "calls", "results", "p50", "p95", "max"
        );
        for m in &c.methods {
            let _ = writeln!(
                out,
                "{:<40} {:>6} {:>10} {:>8} {:>8} {:>8}",
                m.key, m.calls, m.results.total, m.results.p50, m.results.p95, m.results.max
            );
        }
    }
    for s in &c.sessions {
        let _ = writeln!(
            out,
            "\n{}: {} calls, {} tokens of arguments, {} of results",
            s.scope, s.calls, s.arguments, s.results
        );
    }
    if c.estimated > 0 {
        let _ = writeln!(
            out,
            "\n{} text(s) the tokenizer could not read were counted by their bytes (4 a token)",
            c.estimated
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_the_nearest_rank() {
        let s = Spread::of((1..=100).collect());
        assert_eq!((s.p50, s.p95, s.max, s.total), (50, 95, 100, 5050));
        assert_eq!(Spread::of(vec![7]).p95, 7);
        assert_eq!(Spread::of(vec![]), Spread::default());
    }
}
