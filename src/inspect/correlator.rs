//! The correlator: a concurrent map of pending calls keyed by (scope, direction, id), and the
//! MCP sessions seen, each bounded by configuration.
//!
//! Both maps are `DashMap`s (sharded locks, no global lock); every method here is synchronous
//! and releases its guards before returning, so nothing holds a guard across an `.await`.

use crate::events::{Direction, Scope};
use crate::rpc::Id;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

/// foldhash's randomly seeded hasher: faster than SipHash on these short keys and still
/// seeded per process, so a peer cannot aim ids at one shard's bucket.
pub(super) type Hasher = foldhash::fast::RandomState;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The key of a pending call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingKey {
    pub scope: Scope,
    /// The direction the request travelled.
    pub direction: Direction,
    pub id: Id,
}

/// Hashed by hand: one word for the scope, one byte for the direction and the id's kind, and
/// the id's text — fewer writes into the hasher than the derive's (a tag per enum, a length
/// per string), on every insert and take. Equal keys hash equally: every part is a function of
/// fields `Eq` compares.
impl std::hash::Hash for PendingKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match &self.scope {
            Scope::Exchange(n) | Scope::Stateless { exchange: n, .. } => state.write_u64(*n),
            Scope::Session(s) => state.write(s.as_bytes()),
        }
        let (kind, text) = match &self.id {
            Id::Num(t) => (0u8, &**t),
            Id::Str(t) => (1, &**t),
            Id::Null => (2, ""),
        };
        state.write_u8(kind << 1 | self.direction as u8);
        state.write(text.as_bytes());
    }
}

/// A call waiting for its reply.
#[derive(Clone, Debug)]
pub struct Pending {
    pub exchange: u64,
    pub method: Arc<str>,
    pub target: Option<Arc<str>>,
    pub started: Instant,
    /// Anomalies already flagged on the request (reported again with the outcome).
    pub anomalies: Vec<&'static str>,
    /// Later requests with the same key (duplicates) that also wait for a reply, in order, each
    /// with its own method, start and anomalies (`DUPLICATE_ID` among them).
    pub copies: Vec<Pending>,
    /// The request's index in its batch.
    pub index: Option<u32>,
    /// The request's `_meta.progressToken` (as JSON text), while it has one registered.
    pub progress: Option<Box<str>>,
    /// Its trace context (only with `--otlp`).
    pub trace: Option<Arc<crate::trace::CallTrace>>,
    /// What an MCP 2026-07-28 call keeps (its arguments' hash, declared capabilities, the round
    /// it continues).
    pub modern: Option<Box<super::modern::CallMeta>>,
    /// Its sender cancelled it (`notifications/cancelled`): with no reply it ends `cancelled`.
    pub cancelled: bool,
    /// The MCP task it created or concerns, for its event.
    pub task: Option<Box<crate::events::TaskRef>>,
    /// An A2A call's conversation (`contextId`), from its request or its reply.
    pub context: Option<Arc<str>>,
}

impl Pending {
    /// The call and each of its duplicates, oldest first, each without copies of its own.
    pub fn each_copy(mut self) -> impl Iterator<Item = Pending> {
        let copies = std::mem::take(&mut self.copies);
        std::iter::once(self).chain(copies)
    }
}

/// What `insert` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Inserted {
    New,
    /// The id was already pending: counted as one more call on the same key.
    Duplicate,
    /// The map is full and the oldest calls were evicted to make room; they are returned so
    /// each ends as missing.
    Evicted(usize),
}

#[derive(Debug, Default)]
pub struct Session {
    used_c2s: HashSet<Id>,
    used_s2c: HashSet<Id>,
    /// rpctap saw the `initialize` reply that created it.
    pub seen_start: bool,
    pub initialized: bool,
    pub last_seen: Option<Instant>,
    /// Ids stopped being remembered because the per-session cap was reached.
    pub ids_capped: bool,
    /// What the MCP rules know of the session (handshake, tools).
    pub mcp: super::mcp_checks::McpState,
}

/// Limits of the correlator's memory.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_pending: usize,
    pub max_sessions: usize,
    pub max_ids_per_session: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pending: 100_000,
            max_sessions: 10_000,
            max_ids_per_session: 100_000,
        }
    }
}

#[derive(Debug, Default)]
pub struct Correlator {
    pending: DashMap<PendingKey, Pending, Hasher>,
    sessions: DashMap<Arc<str>, Session, Hasher>,
    limits: Limits,
    pub evicted_calls: AtomicU64,
    pub evicted_sessions: AtomicU64,
}

impl Correlator {
    pub fn new(limits: Limits) -> Self {
        Correlator {
            pending: DashMap::default(),
            sessions: DashMap::default(),
            limits,
            evicted_calls: AtomicU64::new(0),
            evicted_sessions: AtomicU64::new(0),
        }
    }

    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Pending calls made in direction `dir` (walks the map).
    pub fn pending_in(&self, dir: Direction) -> usize {
        self.pending
            .iter()
            .filter(|e| e.key().direction == dir)
            .count()
    }

    pub fn sessions_len(&self) -> usize {
        self.sessions.len()
    }

    /// Registers a call; evicted calls (when full) are pushed to `evicted`.
    pub fn insert(
        &self,
        key: PendingKey,
        p: Pending,
        evicted: &mut Vec<(PendingKey, Pending)>,
    ) -> Inserted {
        let mut result = Inserted::New;
        if self.pending.len() >= self.limits.max_pending {
            let n = self.evict_oldest(evicted);
            result = Inserted::Evicted(n);
        }
        match self.pending.entry(key) {
            Entry::Occupied(mut o) => {
                let mut p = p;
                p.anomalies.push(super::anomaly::Code::DuplicateId.as_str());
                o.get_mut().copies.push(p);
                Inserted::Duplicate
            }
            Entry::Vacant(v) => {
                v.insert(p);
                result
            }
        }
    }

    /// Evicts the oldest sixteenth of the pending calls (at least one): amortised O(16) per
    /// insert at the cap, instead of a scan for every insert.
    fn evict_oldest(&self, out: &mut Vec<(PendingKey, Pending)>) -> usize {
        let mut ages: Vec<Instant> = self.pending.iter().map(|e| e.started).collect();
        if ages.is_empty() {
            return 0;
        }
        let k = (ages.len() / 16).max(1) - 1;
        let (_, cutoff, _) = ages.select_nth_unstable(k);
        let cutoff = *cutoff;
        let keys: Vec<PendingKey> = self
            .pending
            .iter()
            .filter(|e| e.started <= cutoff)
            .map(|e| e.key().clone())
            .collect();
        let before = out.len();
        for k in keys {
            if let Some(kv) = self.pending.remove(&k) {
                out.push(kv);
            }
        }
        let n = out.len() - before;
        self.evicted_calls.fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Takes one call off a key: the entry goes when its last duplicate is answered. The
    /// common case (no duplicates) is one lookup by reference; only a key with copies is
    /// looked up again.
    pub fn take(&self, key: &PendingKey) -> Option<Pending> {
        if let Some((_, p)) = self.pending.remove_if(key, |_, p| p.copies.is_empty()) {
            return Some(p);
        }
        // A key with copies (or none): decided under the entry's lock, as another thread may
        // have taken a copy since.
        match self.pending.entry(key.clone()) {
            Entry::Occupied(mut o) => {
                if !o.get().copies.is_empty() {
                    // The oldest answers first; the next copy takes its place.
                    let mut copies = std::mem::take(&mut o.get_mut().copies);
                    let mut next = copies.remove(0);
                    next.copies = copies;
                    Some(std::mem::replace(o.get_mut(), next))
                } else {
                    Some(o.remove())
                }
            }
            Entry::Vacant(_) => None,
        }
    }

    /// Removes a key with all its duplicates.
    pub fn remove_all(&self, key: &PendingKey) -> Option<Pending> {
        self.pending.remove(key).map(|(_, p)| p)
    }

    /// Whether a call of `method` waits under `key`.
    pub fn waits(&self, key: &PendingKey, method: &str) -> bool {
        self.pending.get(key).is_some_and(|p| &*p.method == method)
    }

    /// The method of the call pending under `key`.
    /// The method and target of the call waiting under `key`.
    pub fn pending_call(&self, key: &PendingKey) -> Option<(Arc<str>, Option<Arc<str>>)> {
        self.pending
            .get(key)
            .map(|p| (p.method.clone(), p.target.clone()))
    }

    pub fn contains(&self, key: &PendingKey) -> bool {
        self.pending.contains_key(key)
    }

    /// Marks the call waiting under `key` as cancelled by its sender; whether one waits.
    pub fn cancel(&self, key: &PendingKey) -> bool {
        match self.pending.get_mut(key) {
            Some(mut p) => {
                p.cancelled = true;
                true
            }
            None => false,
        }
    }

    /// Removes the calls whose `started` is before `deadline`.
    pub fn expired(&self, deadline: Instant) -> Vec<(PendingKey, Pending)> {
        let keys: Vec<PendingKey> = self
            .pending
            .iter()
            // A `subscriptions/listen` call lasts as long as its stream, by design.
            .filter(|e| e.started < deadline && &*e.method != "subscriptions/listen")
            .map(|e| e.key().clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.pending.remove(&k))
            .collect()
    }

    /// Removes every call of a scope (its session ended).
    pub fn drain_scope(&self, scope: &Scope) -> Vec<(PendingKey, Pending)> {
        let keys: Vec<PendingKey> = self
            .pending
            .iter()
            .filter(|e| &e.key().scope == scope)
            .map(|e| e.key().clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.pending.remove(&k))
            .collect()
    }

    /// Records that `id` was used by a request in a session; true when it had been used before.
    /// Returns the evicted session's id when the session map was full.
    pub fn use_session_id(
        &self,
        sid: &Arc<str>,
        dir: Direction,
        id: &Id,
    ) -> (bool, Option<Arc<str>>) {
        let evicted = self.ensure_session(sid);
        let max = self.limits.max_ids_per_session;
        let mut s = self.sessions.entry(sid.clone()).or_default();
        s.last_seen = Some(Instant::now());
        let capped = s.ids_capped;
        let set = match dir {
            Direction::ClientToServer => &mut s.used_c2s,
            Direction::ServerToClient => &mut s.used_s2c,
        };
        if set.contains(id) {
            return (true, evicted);
        }
        if set.len() < max {
            set.insert(id.clone());
        } else if !capped {
            s.ids_capped = true;
        }
        (false, evicted)
    }

    /// Makes room for a new session if the map is full; returns the evicted one.
    fn ensure_session(&self, sid: &Arc<str>) -> Option<Arc<str>> {
        if self.sessions.contains_key(sid) || self.sessions.len() < self.limits.max_sessions {
            return None;
        }
        let oldest = self
            .sessions
            .iter()
            .min_by_key(|e| e.last_seen)
            .map(|e| e.key().clone())?;
        self.sessions.remove(&oldest);
        self.evicted_sessions.fetch_add(1, Ordering::Relaxed);
        Some(oldest)
    }

    /// Runs `f` on a session's state (created if absent); returns the evicted session if any.
    pub fn with_session<R>(
        &self,
        sid: &Arc<str>,
        f: impl FnOnce(&mut Session) -> R,
    ) -> (R, Option<Arc<str>>) {
        let evicted = self.ensure_session(sid);
        let mut s = self.sessions.entry(sid.clone()).or_default();
        s.last_seen = Some(Instant::now());
        (f(&mut s), evicted)
    }

    /// Runs `f` on a session's state if rpctap knows the session (never creates it).
    pub fn peek_session<R>(&self, sid: &str, f: impl FnOnce(&Session) -> R) -> Option<R> {
        self.sessions.get(sid).map(|s| f(&s))
    }

    /// Whether a request of the session already used `id` in direction `dir` (never creates
    /// the session).
    pub fn session_used(&self, sid: &str, dir: Direction, id: &Id) -> bool {
        self.peek_session(sid, |s| match dir {
            Direction::ClientToServer => s.used_c2s.contains(id),
            Direction::ServerToClient => s.used_s2c.contains(id),
        })
        .unwrap_or(false)
    }

    pub fn end_session(&self, sid: &Arc<str>) {
        self.sessions.remove(sid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> PendingKey {
        PendingKey {
            scope: Scope::Exchange(1),
            direction: Direction::ClientToServer,
            id: Id::Num(n.to_string().into()),
        }
    }
    fn pend() -> Pending {
        Pending {
            exchange: 1,
            method: "m".into(),
            target: None,
            started: Instant::now(),
            anomalies: vec![],
            copies: Vec::new(),
            index: None,
            progress: None,
            trace: None,
            modern: None,
            cancelled: false,
            task: None,
            context: None,
        }
    }

    #[test]
    fn duplicates_each_get_taken() {
        let c = Correlator::new(Limits::default());
        let mut ev = vec![];
        assert_eq!(c.insert(key(1), pend(), &mut ev), Inserted::New);
        assert_eq!(c.insert(key(1), pend(), &mut ev), Inserted::Duplicate);
        assert!(c.take(&key(1)).is_some());
        assert!(c.take(&key(1)).is_some());
        assert!(c.take(&key(1)).is_none());
    }

    #[test]
    fn pending_is_bounded() {
        let c = Correlator::new(Limits {
            max_pending: 100,
            ..Limits::default()
        });
        let mut ev = vec![];
        for i in 0..1000 {
            c.insert(key(i), pend(), &mut ev);
        }
        assert!(c.pending_len() <= 100);
        assert_eq!(ev.len() + c.pending_len(), 1000);
        assert_eq!(c.evicted_calls.load(Ordering::Relaxed) as usize, ev.len());
    }

    #[test]
    fn sessions_are_bounded() {
        let c = Correlator::new(Limits {
            max_sessions: 10,
            ..Limits::default()
        });
        let mut evicted = 0;
        for i in 0..100 {
            let sid: Arc<str> = format!("s{i}").into();
            if c.use_session_id(&sid, Direction::ClientToServer, &Id::Null)
                .1
                .is_some()
            {
                evicted += 1;
            }
        }
        assert_eq!(c.sessions_len(), 10);
        assert_eq!(evicted, 90);
    }
}
