//! The dashboard over many sources (`rpctap watch`): each server (a shim's session, a proxy
//! joined with `--hub`, a past session loaded from disk) is a source whose events are applied
//! as its own — its exchanges keyed by their source ([`Ex`]) and its exchange scopes named
//! after it, so that two processes' `exchange:1` never meet — and its rows carry its label (the
//! `server:` filter, the scope column).

use super::{App, Ex, Text};
use crate::events::{Event, Scope};

/// The stderr lines kept.
const STDERR_KEEP: usize = 2000;

/// One server under `watch`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerInfo {
    /// Its session's name (unique).
    pub name: Text,
    pub label: Text,
    pub command: String,
    pub pid: Option<u32>,
    pub live: bool,
    pub calls: u64,
    pub errors: u64,
    pub anomalies: u64,
    pub last_ns: u64,
}

impl App {
    /// Adds a server; returns its source number for [`App::apply_from`].
    pub fn add_server(&mut self, info: ServerInfo) -> u32 {
        self.servers.push(info);
        self.servers.len() as u32
    }

    /// The server of source `src` (from [`App::add_server`]).
    pub fn server(&mut self, src: u32) -> Option<&mut ServerInfo> {
        self.servers.get_mut((src as usize).checked_sub(1)?)
    }

    /// Applies one event of source `src`.
    pub fn apply_from(&mut self, src: u32, ev: &Event) {
        self.apply_in(src, ev);
        if let (Some(sv), ts) = (self.server(src), ev.ts()) {
            sv.last_ns = sv.last_ns.max(ts);
        }
    }

    /// The label of source `src`'s server (empty for the one source).
    pub(super) fn server_label(&self, src: u32) -> Text {
        match (src as usize)
            .checked_sub(1)
            .and_then(|i| self.servers.get(i))
        {
            Some(s) => s.label.clone(),
            None => Text::from(""),
        }
    }

    /// Exchange `n` of source `src`, as this state keys it.
    pub(super) fn ex(src: u32, n: u64) -> Ex {
        Ex { src, n }
    }

    /// The scope as this state keys and shows it: a session's id is unique across processes; an
    /// exchange's number is not, so under `watch` it is named after its server's session.
    pub(super) fn scope_of(&self, src: u32, scope: &Scope) -> Text {
        match (
            scope,
            (src as usize)
                .checked_sub(1)
                .and_then(|i| self.servers.get(i)),
        ) {
            (Scope::Exchange(n), Some(s)) => format!("exchange:{n}@{}", s.name).into(),
            _ => scope.to_string().into(),
        }
    }

    pub(super) fn apply_stderr(&mut self, src: u32, ts: u64, line: &str) {
        let server = self.server_label(src);
        self.stderr.push_back((ts, server, Text::from(line)));
        while self.stderr.len() > STDERR_KEEP {
            self.stderr.pop_front();
        }
    }

    /// The servers as the Sessions view lists them: live first, then the newest.
    pub fn servers_sorted(&self) -> Vec<&ServerInfo> {
        let mut v: Vec<&ServerInfo> = self.servers.iter().collect();
        v.sort_by(|a, b| {
            b.live
                .cmp(&a.live)
                .then(b.last_ns.cmp(&a.last_ns))
                .then(a.name.cmp(&b.name))
        });
        v
    }
}
