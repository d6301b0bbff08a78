//! The intercept as the dashboard shows it (`crate::flow::intercept`): the filter being typed (`I`),
//! a snapshot of what is held (refreshed by the loop each frame), the selection among the held
//! and what the keys ask (`F` forward, `E` edit, `D` drop, `A` answer). Plain data: the loop
//! does the deciding and the editor.

use super::{Action, App, Key, RowOutcome};
use crate::events::Direction;
use crate::filter::Filter;

/// What the dashboard knows of the intercept.
#[derive(Debug, Default)]
pub struct HeldPane {
    /// The dashboard drives an intercept (a live proxy, `stdio --dashboard`; not a recording,
    /// `attach` or `watch`).
    pub available: bool,
    /// The filter in force (empty: off).
    pub filter: String,
    pub editing: bool,
    pub input: String,
    pub held: Vec<HeldRow>,
    /// The selected held message (an index into `held`).
    pub sel: usize,
    /// Messages that matched while the held list was full.
    pub overflow: u64,
}

/// One held message as shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldRow {
    pub n: u64,
    pub direction: Direction,
    pub method: String,
    pub target: Option<String>,
    pub id: String,
    pub scope: String,
    pub held_ms: u64,
    /// Until it forwards itself.
    pub left_ms: u64,
    /// The frame with its secrets redacted (the screen's).
    pub shown: String,
    /// The frame as it came (what an edit starts from).
    pub frame: String,
}

/// What a held message's verdict is to be (the loop carries it out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeldKey {
    Forward,
    Drop,
    /// Opens `$EDITOR` on this text; what comes back goes on in the message's place.
    Edit(String),
    /// Opens `$EDITOR` on this reply; what comes back answers the call.
    Answer(String),
}

impl HeldRow {
    pub fn from_held(h: &crate::flow::intercept::Held, now: std::time::Instant) -> HeldRow {
        HeldRow {
            n: h.n,
            direction: h.direction,
            method: h.method.clone(),
            target: h.target.clone(),
            id: h.id.clone(),
            scope: h.scope.clone(),
            held_ms: now.saturating_duration_since(h.since).as_millis() as u64,
            left_ms: h.deadline.saturating_duration_since(now).as_millis() as u64,
            shown: String::from_utf8_lossy(&h.shown).into_owned(),
            frame: String::from_utf8_lossy(&h.frame).into_owned(),
        }
    }
}

impl App {
    /// The held list as the intercept has it now; the selection stays on its message.
    pub fn set_held(&mut self, held: Vec<HeldRow>, overflow: u64) {
        let was = self.held.held.get(self.held.sel).map(|h| h.n);
        self.held.held = held;
        self.held.overflow = overflow;
        self.held.sel = was
            .and_then(|n| self.held.held.iter().position(|h| h.n == n))
            .unwrap_or(0)
            .min(self.held.held.len().saturating_sub(1));
    }

    /// The selected held message.
    pub fn held_selected(&self) -> Option<&HeldRow> {
        self.held.held.get(self.held.sel)
    }

    /// Keys while the intercept filter is typed; `None` when not typing.
    pub(super) fn intercept_input_key(&mut self, key: Key) -> Option<Action> {
        if !self.held.editing {
            return None;
        }
        match key {
            Key::Esc => {
                self.held.editing = false;
                self.held.input.clear();
            }
            Key::Enter => {
                let text = std::mem::take(&mut self.held.input);
                if text.trim().is_empty() {
                    self.held.editing = false;
                    self.held.filter.clear();
                    return Some(Action::Intercept(None));
                }
                match Filter::parse(&text) {
                    Ok(_) => {
                        self.held.editing = false;
                        self.held.filter = text.clone();
                        return Some(Action::Intercept(Some(text)));
                    }
                    Err(why) => {
                        self.held.input = text;
                        self.say(format!("intercept not set: {why}"));
                    }
                }
            }
            Key::Backspace => {
                self.held.input.pop();
            }
            Key::Char(c) => self.held.input.push(c),
            _ => {}
        }
        Some(Action::None)
    }

    /// The intercept's keys; `None` for a key that is not one of them.
    pub(super) fn intercept_key(&mut self, key: Key) -> Option<Action> {
        match key {
            Key::Char('I') => {
                if !self.held.available {
                    self.say("intercept works in a live proxy's dashboard (HTTP, WebSocket) and `rpctap stdio --dashboard`: not over attach or watch, nor on a recording");
                } else {
                    self.held.editing = true;
                    self.held.input = self.held.filter.clone();
                }
                Some(Action::None)
            }
            Key::Char(']') if !self.held.held.is_empty() => {
                self.held.sel = (self.held.sel + 1) % self.held.held.len();
                Some(Action::None)
            }
            Key::Char('[') if !self.held.held.is_empty() => {
                let n = self.held.held.len();
                self.held.sel = (self.held.sel + n - 1) % n;
                Some(Action::None)
            }
            Key::Char(c @ ('F' | 'D' | 'E' | 'A')) => {
                let Some(h) = self.held_selected().cloned() else {
                    self.say("nothing is held (I sets what the intercept holds)");
                    return Some(Action::None);
                };
                let what = match c {
                    'F' => HeldKey::Forward,
                    'D' => HeldKey::Drop,
                    'E' => HeldKey::Edit(pretty(&h.frame)),
                    _ if h.direction == Direction::ClientToServer && !h.id.is_empty() => {
                        HeldKey::Answer(self.answer_template(&h))
                    }
                    _ => {
                        self.say("A answers a held call; a reply or notification is edited (E) or dropped (D)");
                        return Some(Action::None);
                    }
                };
                Some(Action::Held { n: h.n, what })
            }
            _ => None,
        }
    }

    /// A reply to answer `h` with: the recording's latest result for the same method and
    /// target, its id made `h`'s; else an empty result.
    fn answer_template(&self, h: &HeldRow) -> String {
        let earlier = self
            .rows
            .iter()
            .rev()
            .filter(|r| {
                r.method.as_ref() == h.method
                    && r.target.as_deref() == h.target.as_deref()
                    && matches!(r.outcome, RowOutcome::Result | RowOutcome::Error(_))
            })
            .find_map(|r| r.reply.as_deref())
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok());
        let id: serde_json::Value = serde_json::from_str(&h.id).unwrap_or(serde_json::Value::Null);
        let v = match earlier {
            Some(mut v) if v.is_object() => {
                v["id"] = id;
                v
            }
            _ => serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {}}),
        };
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }
}

/// A frame made readable for editing (as it came when it is not JSON).
fn pretty(frame: &str) -> String {
    serde_json::from_str::<serde_json::Value>(frame)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| frame.to_string())
}
