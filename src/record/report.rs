//! `rpctap export --format html`: one self-contained page to attach to a failed CI job — the
//! findings, per-method (and per-tool) latency percentiles, and every call with its request and
//! reply as collapsible, pretty-printed JSON, with a search box. Nothing is fetched: the styles
//! and the few lines of script are inline, and every text from the recording is escaped.
//!
//! Bounded: at most [`MAX_CALLS`] calls are listed (the first ones, the cut said) and each
//! message shown is cut at [`MAX_MESSAGE`] bytes.

use crate::events::{Direction, Event, Outcome};
use crate::record::reader::Capture;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// The most calls listed.
pub const MAX_CALLS: usize = 10_000;
/// The most bytes of one message shown.
pub const MAX_MESSAGE: usize = 64 << 10;

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn pretty(raw: &[u8]) -> String {
    let text = match serde_json::from_slice::<serde_json::Value>(raw) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(raw).into_owned(),
    };
    if text.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}\n… ({} bytes in all; cut)", &text[..end], text.len())
    } else {
        text
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}th{background:#f4f4f4}.error{color:#b00}.warning{color:#a60}.info{color:#06c}.ok{color:#080}pre{background:#f8f8f8;padding:6px;overflow:auto;max-height:30em;margin:2px 0}details summary{cursor:pointer;color:#555}#q{width:30em;padding:4px;margin:.5em 0}.n{text-align:right;font-variant-numeric:tabular-nums}";

const SCRIPT: &str = "const q=document.getElementById('q');q.addEventListener('input',()=>{const t=q.value.toLowerCase();let n=0;for(const r of document.querySelectorAll('tr.call')){const s=r.textContent.toLowerCase().includes(t);r.style.display=s?'':'none';if(s)n++;}document.getElementById('shown').textContent=n;});";

/// A section above the report's own: the gate's verdict, a diff, a replay's output — each
/// said as its command says it.
pub struct Section {
    pub id: &'static str,
    pub title: String,
    /// Whether it says the run failed (shown as an error).
    pub failed: bool,
    pub text: String,
}

/// The report of a recording.
pub fn html(rec: &Capture, name: &str) -> String {
    html_with(rec, name, &[])
}

/// The report of a recording, `sections` first (`check --format html`).
pub fn html_with(rec: &Capture, name: &str, sections: &[Section]) -> String {
    let label = super::label(&rec.header);
    // The messages of each call, by (scope, direction of the request, id).
    let mut requests: HashMap<(String, Direction, String), &[u8]> = HashMap::new();
    let mut replies: HashMap<(String, Direction, String), &[u8]> = HashMap::new();
    let mut findings = Vec::new();
    for ev in &rec.events {
        match ev {
            Event::Message(m) => {
                let Some(id) = m.id.as_ref().map(|i| i.to_json_text()) else {
                    continue;
                };
                let scope = m.scope.to_string();
                if m.kind == crate::rpc::Kind::Request {
                    requests.insert((scope, m.direction, id), &m.message);
                } else if m.kind.is_response() {
                    replies.insert((scope, m.direction.reverse(), id), &m.message);
                }
            }
            Event::Anomaly(a) => findings.push(a),
            _ => {}
        }
    }
    let calls: Vec<_> = rec.calls().collect();
    let t0 = rec.events.first().map_or(0, Event::ts);
    // Latency percentiles per method and tool.
    let mut per: BTreeMap<String, (Vec<u64>, u64)> = BTreeMap::new();
    for c in &calls {
        let key = crate::events::stat_key(&c.method, c.target.as_deref()).into_owned();
        let e = per.entry(key).or_default();
        if let Some(l) = c.latency_us {
            e.0.push(l);
        }
        if !matches!(c.outcome, Outcome::Result | Outcome::InputRequired) {
            e.1 += 1;
        }
    }
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>rpctap report: {}</title><style>{STYLE}</style></head><body>",
        esc(&label)
    );
    let _ = write!(
        o,
        "<h1>rpctap report: {}</h1><p>{} · {} calls · {} findings</p>",
        esc(&label),
        esc(name),
        calls.len(),
        findings.len()
    );
    for s in sections {
        let class = if s.failed { "error" } else { "ok" };
        let _ = write!(
            o,
            "<h2 id=\"{}\" class=\"{class}\">{}</h2><pre>{}</pre>",
            s.id,
            esc(&s.title),
            esc(&s.text)
        );
    }
    let _ = write!(
        o,
        "<h2 id=\"findings\">Findings recorded live ({})</h2>",
        findings.len()
    );
    if findings.is_empty() {
        o.push_str("<p class=\"ok\">none</p>");
    } else {
        o.push_str("<table><tr><th>severity</th><th>code</th><th>scope</th><th>method</th><th>id</th><th>message</th></tr>");
        for a in &findings {
            let sev = a.severity.as_str();
            let _ = write!(
                o,
                "<tr class=\"finding\"><td class=\"{sev}\">{sev}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(a.code),
                esc(&a.scope.to_string()),
                esc(a.method.as_deref().unwrap_or("")),
                esc(&a.id.as_ref().map(|i| i.to_string()).unwrap_or_default()),
                esc(&a.message)
            );
        }
        o.push_str("</table>");
    }
    o.push_str("<h2 id=\"latency\">Latency by method and tool</h2><table><tr><th>method</th><th class=\"n\">calls</th><th class=\"n\">failed</th><th class=\"n\">p50</th><th class=\"n\">p95</th><th class=\"n\">p99</th><th class=\"n\">max</th></tr>");
    for (k, (mut l, failed)) in per {
        l.sort_unstable();
        let _ = write!(
            o,
            "<tr class=\"method\"><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{failed}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&k),
            l.len(),
            ms(percentile(&l, 0.5)),
            ms(percentile(&l, 0.95)),
            ms(percentile(&l, 0.99)),
            ms(l.last().copied().unwrap_or(0))
        );
    }
    o.push_str("</table>");
    let shown = calls.len().min(MAX_CALLS);
    let _ = write!(
        o,
        "<h2 id=\"calls\">Calls (<span id=\"shown\">{shown}</span> of {})</h2><input id=\"q\" type=\"search\" placeholder=\"search calls: method, tool, id, outcome, code, text\">",
        calls.len()
    );
    if calls.len() > MAX_CALLS {
        let _ = write!(
            o,
            "<p>Only the first {MAX_CALLS} calls are listed here; the recording holds them all.</p>"
        );
    }
    o.push_str("<table><tr><th class=\"n\">at</th><th>scope</th><th>method</th><th>id</th><th>outcome</th><th class=\"n\">latency</th><th>findings</th></tr>");
    for c in calls.iter().take(MAX_CALLS) {
        let key = (c.scope.to_string(), c.direction, c.id.to_json_text());
        let class = match c.outcome {
            Outcome::Result | Outcome::InputRequired if c.anomalies.is_empty() => "ok",
            Outcome::Result | Outcome::InputRequired => "warning",
            _ => "error",
        };
        let method = match &c.target {
            Some(t) => format!("{} {t}", c.method),
            None => c.method.to_string(),
        };
        let _ = write!(
            o,
            "<tr class=\"call\"><td class=\"n\">{:.3} s</td><td>{}</td><td>{}{}</td><td>{}</td><td class=\"{class}\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            c.ts.saturating_sub(t0) as f64 / 1e9,
            esc(&c.scope.short()),
            esc(&method),
            {
                let mut d = String::new();
                for (title, m) in [("request", requests.get(&key)), ("reply", replies.get(&key))] {
                    if let Some(m) = m {
                        let _ = write!(d, "<details><summary>{title}</summary><pre>{}</pre></details>", esc(&pretty(m)));
                    }
                }
                d
            },
            esc(&c.id.to_string()),
            esc(&c.outcome.label()),
            c.latency_us.map(ms).unwrap_or_default(),
            esc(&c.anomalies.join(", "))
        );
    }
    let _ = writeln!(o, "</table><script>{SCRIPT}</script></body></html>");
    o
}
