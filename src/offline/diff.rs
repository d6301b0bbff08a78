//! What changed between two recorded sessions of a server — `rpctap diff A B` — sorted the way a
//! reviewer reads it: the tools, prompts and resources the server offers (added, removed, and
//! each field that changed; a safety annotation that got less safe first of all), then the calls
//! of A matched to the calls of B by method, target and arguments (never by position), whose
//! outcome got worse or better and whose latency moved beyond the thresholds.
//!
//! A regression is what a gate should stop: a removed offering, a less safe annotation, a
//! changed schema, an outcome that got worse, a call that got slower. Everything else is a
//! change (or an improvement) and is reported without failing `--exit-code`.

use crate::baseline::{offer_changes, Change, Kind};
use crate::events::{CallEvent, Direction, Event, Outcome, Scope};
use crate::record::reader::Capture;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// The thresholds a latency shift must pass (both) to be reported.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// The absolute shift, in microseconds.
    pub min_us: u64,
    /// The ratio between the slower and the faster.
    pub ratio: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_us: 100_000,
            ratio: 2.0,
        }
    }
}

/// The whole comparison.
#[derive(Debug, Serialize)]
pub struct Diff {
    pub a: String,
    pub b: String,
    pub changes: Vec<Change>,
    pub matched_calls: usize,
}

impl Diff {
    pub fn regressions(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| c.kind == Kind::Regression)
            .count()
    }
}

/// What a recording says the server offers: each kind's items by name (or URI), the last
/// definition seen winning.
#[derive(Default, Debug)]
struct Offer {
    tools: BTreeMap<String, Value>,
    prompts: BTreeMap<String, Value>,
    resources: BTreeMap<String, Value>,
}

/// A call as the comparison reads it.
#[derive(Debug)]
struct Call<'a> {
    key: String,
    event: &'a CallEvent,
}

/// The request messages and list results of a recording, read once.
fn read(rec: &Capture) -> (Offer, Vec<Call<'_>>) {
    let mut requests: HashMap<(Scope, Direction, String), Value> = HashMap::new();
    let mut offer = Offer::default();
    let mut lists: HashMap<(Scope, String), String> = HashMap::new();
    for ev in &rec.events {
        let Event::Message(m) = ev else { continue };
        let Ok(v) = serde_json::from_slice::<Value>(&m.message) else {
            continue;
        };
        let id = m.id.as_ref().map(|i| i.to_json_text());
        match (m.kind, id) {
            (crate::rpc::Kind::Request, Some(id)) => {
                if let Some(method) = &m.method {
                    if matches!(&**method, "tools/list" | "prompts/list" | "resources/list") {
                        lists.insert((m.scope.clone(), id.clone()), method.to_string());
                    }
                }
                requests.insert((m.scope.clone(), m.direction, id), v);
            }
            (crate::rpc::Kind::Result, Some(id)) => {
                let Some(list) = lists.remove(&(m.scope.clone(), id)) else {
                    continue;
                };
                let (field, key, into) = match list.as_str() {
                    "tools/list" => ("tools", "name", &mut offer.tools),
                    "prompts/list" => ("prompts", "name", &mut offer.prompts),
                    _ => ("resources", "uri", &mut offer.resources),
                };
                for item in v["result"][field].as_array().into_iter().flatten() {
                    if let Some(k) = item[key].as_str() {
                        into.insert(k.to_string(), item.clone());
                    }
                }
            }
            _ => {}
        }
    }
    let calls = rec
        .calls()
        .filter(|c| c.direction == Direction::ClientToServer)
        .map(|c| {
            let params = requests
                .get(&(c.scope.clone(), c.direction, c.id.to_json_text()))
                .map(|v| {
                    let p = &v["params"];
                    // The arguments that make a call what it is: a tool's, a prompt's, a
                    // resource's URI, else the params without the per-request `_meta`.
                    match (&p["arguments"], &p["uri"]) {
                        (a, _) if !a.is_null() => crate::rpc::canonical(a),
                        (_, u) if !u.is_null() => crate::rpc::canonical(u),
                        _ => {
                            let mut p = p.clone();
                            if let Some(o) = p.as_object_mut() {
                                o.remove("_meta");
                                o.remove("cursor");
                            }
                            if p.as_object().is_some_and(|o| o.is_empty()) || p.is_null() {
                                String::new()
                            } else {
                                crate::rpc::canonical(&p)
                            }
                        }
                    }
                })
                .unwrap_or_default();
            let mut key = c.method.to_string();
            if let Some(t) = &c.target {
                key.push(' ');
                key.push_str(t);
            }
            if !params.is_empty() {
                key.push(' ');
                key.push_str(&params);
            }
            Call { key, event: c }
        })
        .collect();
    (offer, calls)
}

/// The tools of a recording's last complete `tools/list` (all pages of it), by name.
pub fn last_tool_list(rec: &crate::record::reader::Capture) -> Option<BTreeMap<String, Value>> {
    last_list(rec, "tools/list", "tools", "name")
}

/// A recording's last complete answer to a list method (`tools/list` → its `tools`, …; all
/// pages of it), each item by its `key` member.
pub fn last_list(
    rec: &crate::record::reader::Capture,
    method: &str,
    field: &str,
    key: &str,
) -> Option<BTreeMap<String, Value>> {
    use crate::events::Event;
    use crate::rpc::Kind as K;
    let mut asked: std::collections::HashMap<(crate::events::Scope, String), bool> =
        Default::default();
    let mut building: BTreeMap<String, Value> = BTreeMap::new();
    let mut last = None;
    for ev in &rec.events {
        let Event::Message(m) = ev else { continue };
        let Some(id) = m.id.as_ref().map(|i| i.to_json_text()) else {
            continue;
        };
        match m.kind {
            K::Request if m.method.as_deref() == Some(method) => {
                let v: Value = serde_json::from_slice(&m.message).unwrap_or_default();
                let first = v["params"]["cursor"].is_null();
                asked.insert((m.scope.clone(), id), first);
            }
            K::Result => {
                let Some(first) = asked.remove(&(m.scope.clone(), id)) else {
                    continue;
                };
                let v: Value = serde_json::from_slice(&m.message).unwrap_or_default();
                if first {
                    building.clear();
                }
                for t in v["result"][field].as_array().into_iter().flatten() {
                    if let Some(n) = t[key].as_str() {
                        building.insert(n.to_string(), t.clone());
                    }
                }
                if v["result"]["nextCursor"].is_null() {
                    last = Some(building.clone());
                }
            }
            _ => {}
        }
    }
    last
}

/// What the changed definitions cost now: each one whose tokens moved, then the set's total
/// (an agent pays a definition on every turn it keeps it). A change, never a regression by
/// itself: `check --max-definition-tokens` gates the totals.
fn token_changes(
    kind: &'static str,
    a: &BTreeMap<String, Value>,
    b: &BTreeMap<String, Value>,
    tok: crate::tokens::Tokenizer,
    out: &mut Vec<Change>,
) {
    let changed: Vec<(&String, &Value, &Value)> = a
        .iter()
        .filter_map(|(n, x)| b.get(n).filter(|y| *y != x).map(|y| (n, x, y)))
        .collect();
    let added_or_removed =
        a.keys().any(|n| !b.contains_key(n)) || b.keys().any(|n| !a.contains_key(n));
    if changed.is_empty() && !added_or_removed {
        return;
    }
    let moved = |x: usize, y: usize| {
        format!(
            "{x} → {y} tokens ({}{}, {})",
            if y >= x { "+" } else { "-" },
            x.abs_diff(y),
            tok.name()
        )
    };
    for (name, x, y) in changed {
        let (tx, ty) = (tok.count_json(x).tokens, tok.count_json(y).tokens);
        if tx != ty {
            out.push(Change {
                kind: Kind::Change,
                area: kind,
                subject: format!("{kind} {name}"),
                what: format!("definition {}", moved(tx, ty)),
            });
        }
    }
    let total = |m: &BTreeMap<String, Value>| -> usize {
        m.values().map(|v| tok.count_json(v).tokens).sum()
    };
    let (tx, ty) = (total(a), total(b));
    if tx != ty {
        out.push(Change {
            kind: Kind::Change,
            area: kind,
            subject: format!("{kind}s (all {})", b.len()),
            what: format!("definitions {}", moved(tx, ty)),
        });
    }
}

/// How good an outcome is: 0 a clean result, 1 a flagged one, 2 an error or worse.
fn rank(c: &CallEvent, info: &std::collections::HashSet<&str>) -> u8 {
    match &c.outcome {
        Outcome::Result | Outcome::InputRequired => {
            // Flagged: a code the recording gave a failing severity (not `info`).
            let flagged = c.anomalies.iter().any(|a| !info.contains(a));
            u8::from(flagged)
        }
        _ => 2,
    }
}

/// The codes a recording flagged only as `info` (a tool's own error, a deprecation).
fn info_codes(rec: &Capture) -> std::collections::HashSet<&str> {
    let mut info = std::collections::HashSet::new();
    let mut failing = std::collections::HashSet::new();
    for e in &rec.events {
        if let Event::Anomaly(a) = e {
            if a.severity.fails_by_default() {
                failing.insert(a.code);
            } else {
                info.insert(a.code);
            }
        }
    }
    info.retain(|c| !failing.contains(c));
    info
}

fn outcome_text(c: &CallEvent) -> String {
    let mut t = c.outcome.label();
    if !c.anomalies.is_empty() {
        t.push_str(&format!(" [{}]", c.anomalies.join(", ")));
    }
    t
}

/// Compares two recordings.
pub fn diff(a_name: &str, a: &Capture, b_name: &str, b: &Capture, th: Thresholds) -> Diff {
    diff_counting(
        a_name,
        a,
        b_name,
        b,
        th,
        crate::tokens::Tokenizer::default(),
    )
}

/// [`diff`], the definitions' tokens counted in `tok`.
pub fn diff_counting(
    a_name: &str,
    a: &Capture,
    b_name: &str,
    b: &Capture,
    th: Thresholds,
    tok: crate::tokens::Tokenizer,
) -> Diff {
    let (oa, ca) = read(a);
    let (ob, cb) = read(b);
    let (info_a, info_b) = (info_codes(a), info_codes(b));
    let mut changes = Vec::new();
    for (kind, x, y) in [
        ("tool", &oa.tools, &ob.tools),
        ("prompt", &oa.prompts, &ob.prompts),
        ("resource", &oa.resources, &ob.resources),
    ] {
        offer_changes(kind, x, y, &mut changes);
        token_changes(kind, x, y, tok, &mut changes);
    }
    // Calls: the n-th call of a key in A with the n-th of that key in B.
    let mut by_key: BTreeMap<&str, (Vec<&CallEvent>, Vec<&CallEvent>)> = BTreeMap::new();
    for c in &ca {
        by_key.entry(&c.key).or_default().0.push(c.event);
    }
    for c in &cb {
        by_key.entry(&c.key).or_default().1.push(c.event);
    }
    let mut matched = 0;
    for (key, (xs, ys)) in &by_key {
        for (x, y) in xs.iter().zip(ys.iter()) {
            matched += 1;
            let (rx, ry) = (rank(x, &info_a), rank(y, &info_b));
            if rx != ry {
                changes.push(Change {
                    kind: if ry > rx {
                        Kind::Regression
                    } else {
                        Kind::Improvement
                    },
                    area: "call",
                    subject: key.to_string(),
                    what: format!("{} → {}", outcome_text(x), outcome_text(y)),
                });
            }
            if let (Some(lx), Some(ly)) = (x.latency_us, y.latency_us) {
                let (lo, hi) = (lx.min(ly), lx.max(ly));
                if hi - lo >= th.min_us && hi as f64 >= lo.max(1) as f64 * th.ratio {
                    let slower = ly > lx;
                    changes.push(Change {
                        kind: if slower {
                            Kind::Regression
                        } else {
                            Kind::Improvement
                        },
                        area: "latency",
                        subject: key.to_string(),
                        what: format!(
                            "{} → {} ({:.1}× {})",
                            crate::units::show_secs(std::time::Duration::from_micros(lx)),
                            crate::units::show_secs(std::time::Duration::from_micros(ly)),
                            hi as f64 / lo.max(1) as f64,
                            if slower { "slower" } else { "faster" }
                        ),
                    });
                }
            }
        }
        if xs.len() != ys.len() {
            changes.push(Change {
                kind: Kind::Change,
                area: "call",
                subject: key.to_string(),
                what: format!("made {} time(s) in A, {} in B", xs.len(), ys.len()),
            });
        }
    }
    // Safety first, then regressions, changes, improvements; stable within each.
    changes.sort_by_key(|c| (c.area != "safety", c.kind));
    Diff {
        a: a_name.to_string(),
        b: b_name.to_string(),
        changes,
        matched_calls: matched,
    }
}

fn kind_word(k: Kind) -> &'static str {
    match k {
        Kind::Regression => "regression",
        Kind::Change => "change",
        Kind::Improvement => "improvement",
    }
}

/// For a terminal.
pub fn text(d: &Diff) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "rpctap diff {} → {}", d.a, d.b);
    if d.changes.is_empty() {
        let _ = writeln!(out, "no differences ({} calls matched)", d.matched_calls);
        return out;
    }
    for c in &d.changes {
        let _ = writeln!(
            out,
            "{:<11} {:<8} {}: {}",
            kind_word(c.kind),
            c.area,
            c.subject,
            c.what
        );
    }
    let _ = writeln!(
        out,
        "{} regression(s), {} change(s) in all, {} calls matched",
        d.regressions(),
        d.changes.len(),
        d.matched_calls
    );
    out
}

/// For a pull-request comment.
pub fn markdown(d: &Diff) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### rpctap diff: `{}` → `{}`\n", d.a, d.b);
    if d.changes.is_empty() {
        let _ = writeln!(out, "No differences ({} calls matched).", d.matched_calls);
        return out;
    }
    let _ = writeln!(
        out,
        "**{} regression(s)**, {} change(s) in all, {} calls matched.\n",
        d.regressions(),
        d.changes.len(),
        d.matched_calls
    );
    let _ = writeln!(out, "| | area | what | change |\n|---|---|---|---|");
    for c in &d.changes {
        let icon = match c.kind {
            Kind::Regression => "🔴",
            Kind::Change => "⚪",
            Kind::Improvement => "🟢",
        };
        let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
        let _ = writeln!(
            out,
            "| {icon} | {} | `{}` | {} |",
            c.area,
            cell(&c.subject),
            cell(&c.what)
        );
    }
    out
}
