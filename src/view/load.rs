//! What a recording or a feed becomes in the view: its events applied with the clock following
//! their time, and the endpoints its header names (the title line of every renderer).

use super::App;
use crate::events::Event;
use crate::record::reader::Capture;

impl App {
    /// Applies a recording to a fresh state (`rpctap view`, `open`).
    pub fn load_recording(&mut self, rec: &Capture) {
        for e in &rec.events {
            self.apply_seen(e);
        }
        if let Some(first) = rec.messages().next() {
            self.started_ns = first.ts;
        }
        let span = |e: Option<&Event>| e.map_or(0, Event::ts);
        self.recorded_ns = Some(span(rec.events.last()).saturating_sub(span(rec.events.first())));
    }

    /// Applies one event of a recording or a feed, the clock following its time.
    pub fn apply_seen(&mut self, e: &Event) {
        self.apply(e);
        let ts = match e {
            Event::Message(m) => m.ts,
            Event::Call(c) => c.ts,
            _ => 0,
        };
        if ts > self.now_ns {
            self.tick(ts);
        }
    }
}

/// The `listen → upstream` the header names: a recording's header or a feed's. A stdio
/// session's is `stdio` and its command line (the recording says `transport`, the feed `mode`).
pub fn header_endpoints(h: &serde_json::Value) -> (String, String) {
    let s = |k: &str| h.get(k).and_then(|v| v.as_str());
    if s("mode") == Some("stdio") || s("transport") == Some("stdio") {
        let command = h
            .get("command")
            .and_then(|c| c.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        return ("stdio".into(), command);
    }
    let or_unknown = |k: &str| s(k).unwrap_or("?").to_string();
    (or_unknown("listen"), or_unknown("upstream"))
}
