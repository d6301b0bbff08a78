//! The views, the selection and the keys: what a key does to the state, and the action it
//! asks the event loop to carry out (I/O stays out of the state).

use super::{App, Back, Row, NO_SESSION};
use crate::filter::Filter;

/// The tabs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Calls,
    Anomalies,
    Methods,
    Sessions,
    /// What stdio servers wrote on their stderr.
    Stderr,
}

impl View {
    pub const ALL: [View; 5] = [
        View::Calls,
        View::Anomalies,
        View::Methods,
        View::Sessions,
        View::Stderr,
    ];
    pub fn title(self) -> &'static str {
        match self {
            View::Calls => "Calls",
            View::Anomalies => "Anomalies",
            View::Methods => "Methods",
            View::Sessions => "Sessions",
            View::Stderr => "Stderr",
        }
    }
    fn next(self) -> View {
        match self {
            View::Calls => View::Anomalies,
            View::Anomalies => View::Methods,
            View::Methods => View::Sessions,
            View::Sessions => View::Stderr,
            View::Stderr => View::Calls,
        }
    }
}

/// What a key asks the event loop to do (I/O stays out of the state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Copy this text to the clipboard (OSC 52) and save it to a file; `what` names it for
    /// the status line (`curl`, …).
    Copy {
        text: String,
        what: &'static str,
    },
    /// Write this exchange document to a file.
    Export(String),
    /// Re-send this request body to the upstream (proxy mode).
    Resend {
        path: String,
        body: String,
    },
    /// Set the intercept's filter (`None`: off).
    Intercept(Option<String>),
    /// Decide held message `n`.
    Held {
        n: u64,
        what: super::HeldKey,
    },
}

/// Keys the dashboard understands (independent of the terminal library).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    Tab,
    Backspace,
    ScrollUp,
    ScrollDown,
}

impl App {
    /// Rows shown in the Calls view (the Anomalies view shows anomalies).
    pub fn visible(&self) -> Vec<&Row> {
        self.visible_range(0, usize::MAX)
    }

    /// How many rows the Calls view shows. Without a filter that is every row, counted without
    /// a scan: the screen is drawn ten times a second over up to `max_rows` rows.
    pub fn visible_len(&self) -> usize {
        if self.filter.trim().is_empty() {
            return self.rows.len() - self.folded;
        }
        let f = self.filter_parsed();
        self.rows
            .iter()
            .filter(|r| !r.folded && f.matches(*r))
            .count()
    }

    /// `n` rows of the Calls view from position `start`.
    pub fn visible_range(&self, start: usize, n: usize) -> Vec<&Row> {
        if self.filter.trim().is_empty() && self.folded == 0 {
            let end = start.saturating_add(n).min(self.rows.len());
            return self.rows.range(start.min(end)..end).collect();
        }
        let f = self.filter_parsed();
        self.rows
            .iter()
            .filter(|r| !r.folded && f.matches(*r))
            .skip(start)
            .take(n)
            .collect()
    }

    /// The applied filter (only a filter that parsed is ever applied).
    fn filter_parsed(&self) -> Filter {
        Filter::parse(&self.filter).unwrap_or_default()
    }

    /// The list filters as the input is typed (as k9s and lazygit do): whenever what is typed so
    /// far reads, it is in force; while it does not, the last one that did stays.
    fn filter_as_typed(&mut self) {
        if Filter::parse(&self.filter_input).is_ok() && self.filter != self.filter_input {
            self.filter = self.filter_input.clone();
            self.selected = 0;
        }
    }

    /// Why the filter being typed cannot be read, if it cannot.
    pub fn filter_error(&self) -> Option<String> {
        Filter::parse(&self.filter_input).err()
    }

    fn list_len(&self) -> usize {
        match self.view {
            View::Calls => self.visible_len(),
            View::Anomalies => self.anomaly_rows.len(),
            View::Methods => self.methods.len(),
            View::Sessions if !self.servers.is_empty() => self.servers.len(),
            View::Sessions => self.sessions_sorted().len(),
            View::Stderr => self.stderr.len(),
        }
    }

    /// The selected row of the Calls view, following the newest when `follow`.
    pub fn selected_row(&self) -> Option<&Row> {
        let n = self.visible_len();
        if n == 0 {
            return None;
        }
        let i = if self.follow {
            n - 1
        } else {
            self.selected.min(n - 1)
        };
        self.visible_range(i, 1).into_iter().next()
    }

    pub fn selected_index(&self) -> usize {
        let n = self.list_len();
        if n == 0 {
            0
        } else if self.follow && self.view == View::Calls {
            n - 1
        } else {
            self.selected.min(n - 1)
        }
    }

    fn move_by(&mut self, delta: isize) {
        let n = self.list_len();
        if n == 0 {
            return;
        }
        let cur = self.selected_index() as isize;
        let next = (cur + delta).clamp(0, n as isize - 1) as usize;
        self.selected = next;
        self.follow = false;
        self.detail_scroll = 0;
    }

    fn remember(&mut self) {
        self.back = Some(Back {
            view: self.view,
            filter: self.filter.clone(),
            selected: self.selected_index(),
            follow: self.follow,
        });
    }

    /// The Calls view with `filter`, the newest selected; Esc comes back here.
    fn open_calls(&mut self, filter: String) {
        self.remember();
        self.view = View::Calls;
        self.filter = filter;
        self.selected = 0;
        self.follow = true;
        self.detail = false;
    }

    /// The call an anomaly was pinned on, selected in the unfiltered Calls view.
    fn open_anomaly(&mut self) {
        let i = self.selected_index();
        let Some(a) = self.anomaly_rows.get(i) else {
            return;
        };
        let Some(pos) = a
            .row
            .and_then(|seq| Some(seq.checked_sub(self.rows.front()?.seq)? as usize))
            .filter(|p| *p < self.rows.len())
        else {
            self.say("that finding's call is no longer in the list");
            return;
        };
        self.remember();
        self.view = View::Calls;
        self.filter.clear();
        self.selected = pos;
        self.follow = false;
        self.detail = true;
        self.detail_scroll = 0;
    }

    /// Handles a key; returns what the event loop should do.
    pub fn handle_key(&mut self, key: Key) -> Action {
        if self.editing_filter {
            match key {
                Key::Esc => {
                    self.editing_filter = false;
                    self.filter_input.clear();
                    self.filter = std::mem::take(&mut self.filter_before);
                    self.selected = 0;
                }
                Key::Enter => match Filter::parse(&self.filter_input) {
                    Ok(_) => {
                        self.editing_filter = false;
                        self.filter = std::mem::take(&mut self.filter_input);
                        self.filter_before.clear();
                        self.selected = 0;
                    }
                    // Kept open, the reason beside what was typed.
                    Err(why) => self.say(format!("filter not applied: {why}")),
                },
                Key::Backspace => {
                    self.filter_input.pop();
                    self.filter_as_typed();
                }
                Key::Char(c) => {
                    self.filter_input.push(c);
                    self.filter_as_typed();
                }
                _ => {}
            }
            return Action::None;
        }
        if let Some(a) = self.intercept_input_key(key) {
            return a;
        }
        if self.editing_find {
            match key {
                Key::Esc => {
                    self.editing_find = false;
                    self.find_input.clear();
                }
                Key::Enter => {
                    self.editing_find = false;
                    self.find = std::mem::take(&mut self.find_input);
                    self.find_hit = 0;
                }
                Key::Backspace => {
                    self.find_input.pop();
                }
                Key::Char(c) => self.find_input.push(c),
                _ => {}
            }
            return Action::None;
        }
        if self.info {
            self.info = false;
            return if key == Key::Char('q') {
                Action::Quit
            } else {
                Action::None
            };
        }
        if self.help {
            // The popup scrolls; any other key closes it.
            match key {
                Key::Up | Key::Char('k') | Key::ScrollUp => {
                    self.help_scroll = self.help_scroll.saturating_sub(1)
                }
                Key::Down | Key::Char('j') | Key::ScrollDown => {
                    self.help_scroll = self.help_scroll.saturating_add(1)
                }
                Key::PageUp => self.help_scroll = self.help_scroll.saturating_sub(10),
                Key::PageDown => self.help_scroll = self.help_scroll.saturating_add(10),
                Key::Char('q') => return Action::Quit,
                _ => {
                    self.help = false;
                    self.help_scroll = 0;
                }
            }
            return Action::None;
        }
        if let Some(a) = self.intercept_key(key) {
            return a;
        }
        match key {
            Key::Char('q') => return Action::Quit,
            Key::Char('?') => self.help = true,
            Key::Up | Key::Char('k') => {
                if self.detail {
                    self.find.clear();
                    self.detail_scroll = self.detail_scroll.saturating_sub(1);
                } else {
                    self.move_by(-1)
                }
            }
            Key::Down | Key::Char('j') => {
                if self.detail {
                    self.find.clear();
                    self.detail_scroll = self.detail_scroll.saturating_add(1);
                } else {
                    self.move_by(1)
                }
            }
            Key::PageUp => self.move_by(-(self.page as isize)),
            Key::PageDown => self.move_by(self.page as isize),
            Key::Char('g') | Key::Home => {
                self.selected = 0;
                self.follow = false;
            }
            Key::Char('G') | Key::End => {
                self.follow = true;
            }
            // In the servers' list, Enter opens one: its calls.
            Key::Enter if self.view == View::Sessions && !self.servers.is_empty() => {
                let i = self.selected_index();
                if let Some(name) = self.servers_sorted().get(i).map(|s| s.name.clone()) {
                    self.open_calls(format!("server:{name}"));
                }
            }
            // Enter on a summary opens the calls behind it (Esc comes back).
            Key::Enter if self.view == View::Anomalies => self.open_anomaly(),
            Key::Enter if self.view == View::Methods => {
                let i = self.selected_index();
                if let Some(key) = self.methods_sorted().get(i).map(|(k, _)| k.to_string()) {
                    let filter = match key.split_once(' ') {
                        Some((m, t)) => format!("method:{m} tool:{t}"),
                        None => format!("method:{key}"),
                    };
                    self.open_calls(filter);
                }
            }
            Key::Enter if self.view == View::Sessions => {
                let i = self.selected_index();
                if let Some(scope) = self.sessions_sorted().get(i).map(|(k, _)| k.to_string()) {
                    let filter = if scope == NO_SESSION {
                        "session:exchange:".to_string()
                    } else {
                        format!("session:{}", scope.trim_start_matches("session:"))
                    };
                    self.open_calls(filter);
                }
            }
            Key::Enter => {
                self.detail = !self.detail;
                self.detail_scroll = 0;
            }
            Key::Tab => {
                self.view = self.view.next();
                self.selected = 0;
            }
            // In the detail pane `/` finds in the frame; elsewhere it filters the list.
            Key::Char('/') if self.detail && self.view == View::Calls => {
                self.editing_find = true;
                self.find_input = self.find.clone();
            }
            Key::Char('/') => {
                self.editing_filter = true;
                self.filter_input = self.filter.clone();
                self.filter_before = self.filter.clone();
            }
            Key::Char('n') if self.detail && !self.find.is_empty() => {
                self.find_hit = self.find_hit.wrapping_add(1);
            }
            Key::Char('z') if self.detail => self.detail_full = !self.detail_full,
            Key::Char('i') => self.info = true,
            Key::Esc => {
                if self.detail && !self.find.is_empty() {
                    self.find.clear();
                } else if self.detail {
                    self.detail = false;
                    self.detail_full = false;
                } else if let Some(b) = self.back.take() {
                    self.view = b.view;
                    self.filter = b.filter;
                    self.selected = b.selected;
                    self.follow = b.follow;
                } else {
                    self.filter.clear();
                }
            }
            Key::Char('f') => {
                if !self.follow {
                    self.follow = true;
                } else {
                    self.selected = self.selected_index();
                    self.follow = false;
                }
            }
            Key::Char('c') => self.clear(),
            Key::Char('h') => {
                // Hides (or shows again) the `http` rows: the `-http` filter token.
                let mut toks: Vec<&str> = self.filter.split_whitespace().collect();
                let had = toks.len();
                toks.retain(|t| *t != "-http");
                if toks.len() == had {
                    toks.push("-http");
                }
                self.filter = toks.join(" ");
                self.selected = 0;
            }
            Key::Char('y') => {
                if let Some(r) = self.selected_row() {
                    if let Some(req) = &r.request {
                        return self.copy_request(r, req);
                    }
                }
            }
            Key::Char('e') => return Action::Export(self.export_document()),
            Key::Char('r') => {
                if !self.can_resend {
                    self.say(if self.listen == "stdio" {
                        "re-send is unavailable for a stdio session: its stdin belongs to the client"
                    } else {
                        "re-send works in proxy mode only"
                    });
                } else if let Some(req) = self.selected_row().and_then(|r| r.request.clone()) {
                    let path = self
                        .selected_row()
                        .and_then(|r| self.http.get(&r.exchange))
                        .map_or_else(|| "/".to_string(), |h| h.path.clone());
                    return Action::Resend {
                        path,
                        body: req.to_string(),
                    };
                }
            }
            Key::ScrollUp => self.move_by(-3),
            Key::ScrollDown => self.move_by(3),
            _ => {}
        }
        Action::None
    }
}
