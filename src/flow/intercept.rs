//! Intercept: messages held before they are forwarded, until the dashboard's user decides
//! (forward, edit, drop, answer) or `--intercept-timeout` forwards them anyway.
//!
//! One [`Intercept`] handle is shared by a proxy's transports and its dashboard. Off (no
//! filter), asking costs one atomic load per request. On, each transport describes a message as
//! a [`Message`] (the filter language's [`Subject`]), and a matching one is registered as
//! [`Held`] and waited on ([`Pending::wait`]) where the transport would forward it; a held message
//! never blocks the ones after it (each transport waits on its own task or thread). What was
//! decided is returned as a [`Decision`] for the transport to apply and record as injected
//! (`injected: "intercept"`). The state is plain data behind a std mutex never held across an
//! await, so tests build it without a terminal or a socket.

use crate::events::Direction;
use crate::filter::{Filter, Status, Subject};
use crate::locks::Locked as _;
use bytes::Bytes;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The rule name every intercept verdict is recorded under.
pub const RULE: &str = "intercept";

/// How long a held message waits for a verdict by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// At most this many messages are held at once, and at most [`MAX_HELD_BYTES`] of them; past
/// either, matching messages pass (and the dashboard says so): memory is bounded by these, not
/// by traffic.
pub const MAX_HELD: usize = 256;
pub const MAX_HELD_BYTES: usize = 64 << 20;
/// How far off a held message's deadline is put while it is being edited (its timer stopped;
/// quitting the dashboard forwards it anyway).
const EDITING: Duration = Duration::from_secs(24 * 3600);
/// How often a waiting message reads its deadline again.
const RECHECK: Duration = Duration::from_millis(100);

/// What the user decided for a held message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Sent on as it came.
    Forward,
    /// Sent on as edited (whole JSON text, validated before it gets here).
    Edit(Bytes),
    /// Never sent: for a call the client's timeout decides.
    Drop,
    /// A call answered by rpctap with this reply; the call never reaches the server.
    Answer(Bytes),
}

/// A verdict and how it came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    /// `--intercept-timeout` passed: forwarded unchanged.
    pub timed_out: bool,
    pub held_for: Duration,
}

impl Decision {
    /// The action name on the record.
    pub fn action(&self) -> &'static str {
        match (&self.verdict, self.timed_out) {
            (_, true) => "timeout",
            (Verdict::Forward, _) => "forward",
            (Verdict::Edit(_), _) => "edit",
            (Verdict::Drop, _) => "drop",
            (Verdict::Answer(_), _) => "answer",
        }
    }

    /// The frame rpctap sent in the original's place, if any.
    pub fn message(&self) -> Option<Bytes> {
        match &self.verdict {
            Verdict::Edit(b) | Verdict::Answer(b) => Some(b.clone()),
            _ => None,
        }
    }

    /// What happened, for the record's detail.
    pub fn detail(&self, direction: Direction) -> String {
        let held = crate::units::show_secs(self.held_for);
        let what = if direction == Direction::ClientToServer {
            "request"
        } else {
            "message"
        };
        match (&self.verdict, self.timed_out) {
            (_, true) => format!("the {what} held {held}, then forwarded itself (timeout)"),
            (Verdict::Forward, _) => format!("the {what} held {held}, then forwarded"),
            (Verdict::Edit(_), _) => format!("the {what} held {held}, then forwarded as edited"),
            (Verdict::Drop, _) => format!("the {what} held {held}, then dropped"),
            (Verdict::Answer(_), _) => {
                format!("the {what} held {held}, then answered by rpctap (not forwarded)")
            }
        }
    }
}

/// A message as a transport describes it to the filter.
#[derive(Debug)]
pub struct Message<'a> {
    pub direction: Direction,
    pub method: &'a str,
    pub target: Option<&'a str>,
    /// The id's JSON text; empty for none.
    pub id: String,
    pub rpc_id: Option<crate::rpc::Id>,
    pub scope: String,
    pub frame: &'a [u8],
}

impl<'a> Message<'a> {
    /// The same message with `frame` as its bytes (a whole body held for one member).
    pub fn with_frame(&self, frame: &'a [u8]) -> Message<'a> {
        Message {
            direction: self.direction,
            method: self.method,
            target: self.target,
            id: self.id.clone(),
            rpc_id: self.rpc_id.clone(),
            scope: self.scope.clone(),
            frame,
        }
    }
}

impl Subject for Message<'_> {
    fn method(&self) -> &str {
        self.method
    }
    fn target(&self) -> Option<&str> {
        self.target
    }
    fn id(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.id)
    }
    fn scope(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.scope)
    }
    fn direction(&self) -> Option<Direction> {
        Some(self.direction)
    }
    fn status(&self) -> Status {
        // Held before it is forwarded: a call is still pending.
        if self.direction == Direction::ClientToServer && !self.id.is_empty() {
            Status::Pending
        } else if self.id.is_empty() {
            Status::Notification
        } else {
            Status::Other
        }
    }
    fn codes(&self) -> Vec<&str> {
        Vec::new()
    }
    fn skill(&self) -> Option<String> {
        crate::rpc::a2a::message_skill(self.method, self.frame)
    }
    fn has_text(&self, lower: &str) -> bool {
        let has = |s: &str| s.to_lowercase().contains(lower);
        has(self.method)
            || self.target.is_some_and(has)
            || has(&self.id)
            || has(&String::from_utf8_lossy(self.frame))
    }
}

/// A held message as the dashboard shows it.
#[derive(Clone, Debug)]
pub struct Held {
    /// Its number (verdicts name it).
    pub n: u64,
    pub since: Instant,
    pub deadline: Instant,
    pub direction: Direction,
    pub method: String,
    pub target: Option<String>,
    pub id: String,
    pub scope: String,
    /// The whole frame as it arrived (a whole HTTP body: a batch is held as one): what an
    /// edit starts from.
    pub frame: Bytes,
    /// The frame as the screen may show it (secrets redacted).
    pub shown: Bytes,
}

struct Slot {
    held: Held,
    tx: tokio::sync::oneshot::Sender<Verdict>,
}

struct Inner {
    on: AtomicBool,
    /// A dashboard drives this intercept (transports that must prepare to hold, such as a
    /// WebSocket's, do so from the start).
    dashboard: AtomicBool,
    filter: Mutex<Option<Arc<Filter>>>,
    held: Mutex<Vec<Slot>>,
    seq: AtomicU64,
    /// Messages that matched while `MAX_HELD` were held (passed unheld).
    overflow: AtomicU64,
    timeout: Duration,
    redact: Option<Arc<crate::redact::Redactor>>,
}

/// The shared intercept state (cheap to clone).
#[derive(Clone)]
pub struct Intercept {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Intercept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intercept")
            .field("on", &self.is_on())
            .finish_non_exhaustive()
    }
}

impl Default for Intercept {
    fn default() -> Self {
        Self::new(DEFAULT_TIMEOUT)
    }
}

impl Intercept {
    /// Off until a filter is set; a held message forwards itself after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Intercept {
            inner: Arc::new(Inner {
                on: AtomicBool::new(false),
                dashboard: AtomicBool::new(false),
                filter: Mutex::new(None),
                held: Mutex::new(Vec::new()),
                seq: AtomicU64::new(0),
                overflow: AtomicU64::new(0),
                timeout,
                redact: None,
            }),
        }
    }

    /// Held frames shown with `redact`'s secrets replaced.
    pub fn redacting(timeout: Duration, redact: Arc<crate::redact::Redactor>) -> Self {
        let mut i = Self::new(timeout);
        if let Some(inner) = Arc::get_mut(&mut i.inner) {
            inner.redact = Some(redact);
        }
        i
    }

    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// A dashboard drives it from now on.
    pub fn set_dashboard(&self) {
        self.inner.dashboard.store(true, Ordering::Relaxed);
    }

    pub fn has_dashboard(&self) -> bool {
        self.inner.dashboard.load(Ordering::Relaxed)
    }

    /// Whether a filter is set (the one check every message pays while intercept is off).
    #[inline]
    pub fn is_on(&self) -> bool {
        self.inner.on.load(Ordering::Relaxed)
    }

    /// Sets the filter (`None`: off). Turned off, every held message is forwarded.
    pub fn set_filter(&self, f: Option<Filter>) {
        let on = f.is_some();
        *self.inner.filter.locked() = f.map(Arc::new);
        self.inner.on.store(on, Ordering::Relaxed);
        if !on {
            let slots = std::mem::take(&mut *self.inner.held.locked());
            for s in slots {
                let _ = s.tx.send(Verdict::Forward);
            }
        }
    }

    /// Whether `m` is to be held (there is room for it).
    pub fn wants(&self, m: &Message<'_>) -> bool {
        if !self.is_on() {
            return false;
        }
        let Some(f) = self.inner.filter.locked().clone() else {
            return false;
        };
        if !f.matches(m) {
            return false;
        }
        let full = {
            let held = self.inner.held.locked();
            let bytes: usize = held.iter().map(|s| s.held.frame.len()).sum();
            held.len() >= MAX_HELD || bytes + m.frame.len() > MAX_HELD_BYTES
        };
        if full {
            self.inner.overflow.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Holds `m` (the caller asked [`Intercept::wants`]); the verdict comes from
    /// [`Pending::wait`].
    pub fn hold(&self, m: &Message<'_>) -> Pending {
        let n = self.inner.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let since = Instant::now();
        let held = Held {
            n,
            since,
            deadline: since + self.inner.timeout,
            direction: m.direction,
            method: m.method.to_string(),
            target: m.target.map(str::to_string),
            id: m.id.clone(),
            scope: m.scope.clone(),
            frame: Bytes::copy_from_slice(m.frame),
            shown: match self.inner.redact.as_ref().and_then(|r| r.message(m.frame)) {
                Some(red) => Bytes::from(red),
                None => Bytes::copy_from_slice(m.frame),
            },
        };
        self.inner.held.locked().push(Slot { held, tx });
        Pending {
            rx,
            n,
            since,
            inner: self.inner.clone(),
        }
    }

    /// What is held now, oldest first.
    pub fn held(&self) -> Vec<Held> {
        self.inner
            .held
            .locked()
            .iter()
            .map(|s| s.held.clone())
            .collect()
    }

    /// Messages that matched but passed because `MAX_HELD` were held.
    pub fn overflow(&self) -> u64 {
        self.inner.overflow.load(Ordering::Relaxed)
    }

    /// Held message `n` is being edited (`true`): its timer stops (the deadline put a day off)
    /// until the editor returns (`false`), when it starts again from the whole timeout — a
    /// long edit never loses its message to the timeout. False when it is no longer held.
    pub fn editing(&self, n: u64, on: bool) -> bool {
        let mut held = self.inner.held.locked();
        let Some(s) = held.iter_mut().find(|s| s.held.n == n) else {
            return false;
        };
        s.held.deadline = Instant::now() + if on { EDITING } else { self.inner.timeout };
        true
    }

    /// Decides held message `n`; false when it is no longer held (it timed out meanwhile).
    pub fn decide(&self, n: u64, v: Verdict) -> bool {
        let slot = {
            let mut held = self.inner.held.locked();
            let Some(i) = held.iter().position(|s| s.held.n == n) else {
                return false;
            };
            held.remove(i)
        };
        slot.tx.send(v).is_ok()
    }
}

/// A held message's verdict, to come.
pub struct Pending {
    rx: tokio::sync::oneshot::Receiver<Verdict>,
    n: u64,
    since: Instant,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("n", &self.n).finish()
    }
}

impl Pending {
    /// Waits for the verdict; after the timeout the message is no longer held and forwards
    /// itself.
    pub async fn wait(mut self) -> Decision {
        let mut deadline = self.since + self.inner.timeout;
        let (verdict, timed_out) = loop {
            // The deadline can move (an edit): read again at least this often.
            let at = tokio::time::Instant::from_std(deadline.min(Instant::now() + RECHECK));
            match tokio::time::timeout_at(at, &mut self.rx).await {
                Ok(Ok(v)) => break (v, false),
                // The intercept was turned off (or its state dropped): forwarded.
                Ok(Err(_)) => break (Verdict::Forward, false),
                Err(_) => {
                    let gone = {
                        let mut held = self.inner.held.locked();
                        match held.iter().position(|s| s.held.n == self.n) {
                            // Its deadline moved (it is being edited): wait on.
                            Some(i) if held[i].held.deadline > Instant::now() => {
                                deadline = held[i].held.deadline;
                                continue;
                            }
                            Some(i) => {
                                held.remove(i);
                                None
                            }
                            None => Some(()),
                        }
                    };
                    // Decided in the same instant it timed out: the verdict wins.
                    break match (gone, self.rx.try_recv()) {
                        (Some(()), Ok(v)) => (v, false),
                        _ => (Verdict::Forward, true),
                    };
                }
            }
        };
        Decision {
            verdict,
            timed_out,
            held_for: self.since.elapsed(),
        }
    }
}

/// Checks an edited or typed message: one JSON value, returned compact (one line: what a
/// stdio line or an SSE event can carry; members keep their order); the error says where it is
/// wrong.
pub fn validate(text: &str) -> Result<Bytes, String> {
    match serde_json::from_str::<serde_json::Value>(text.trim()) {
        Ok(v) => serde_json::to_vec(&v)
            .map(Bytes::from)
            .map_err(|e| format!("not valid JSON ({e})")),
        Err(e) => Err(format!("not valid JSON ({e})")),
    }
}

/// The calls of a body, by id: a reply's method and target are its call's.
pub fn call_methods(body: &Bytes) -> Vec<(crate::rpc::Id, Arc<str>, Option<Arc<str>>)> {
    let parsed = crate::rpc::parse_body(body);
    let envs: Vec<&crate::rpc::Envelope> = match &parsed {
        crate::rpc::Body::Single(e) => vec![e],
        crate::rpc::Body::Batch(v) => v.iter().collect(),
        crate::rpc::Body::ParseError(_) => Vec::new(),
    };
    envs.into_iter()
        .filter_map(|e| Some((e.id.clone()?, e.method.clone()?, e.target.clone())))
        .collect()
}

/// Holds `body` (a whole message or batch as it came) when the filter matches one of its
/// messages; `call_of` names a reply's call. Returns the verdict to come, and the matching
/// message's id and method (for the record).
pub fn hold_body<'c>(
    ic: &Intercept,
    direction: Direction,
    body: &Bytes,
    scope: &str,
    call_of: impl Fn(&crate::rpc::Id) -> Option<(&'c str, Option<&'c str>)>,
) -> Option<(Pending, Option<crate::rpc::Id>, String)> {
    if !ic.is_on() {
        return None;
    }
    let parsed = crate::rpc::parse_body(body);
    let ms = messages(direction, &parsed, scope, call_of);
    let m = ms.iter().find(|m| ic.wants(m))?;
    Some((
        ic.hold(&m.with_frame(body)),
        m.rpc_id.clone(),
        m.method.to_string(),
    ))
}

/// The messages of a whole body as the filter sees them (a batch's members each), with
/// `call_of` naming a reply's call by its id: its method and target (`None`: not known).
pub fn messages<'a, 'c: 'a>(
    direction: Direction,
    body: &'a crate::rpc::Body,
    scope: &str,
    call_of: impl Fn(&crate::rpc::Id) -> Option<(&'c str, Option<&'c str>)>,
) -> Vec<Message<'a>> {
    let envs: Vec<&crate::rpc::Envelope> = match body {
        crate::rpc::Body::Single(e) => vec![e],
        crate::rpc::Body::Batch(v) => v.iter().collect(),
        crate::rpc::Body::ParseError(_) => Vec::new(),
    };
    envs.into_iter()
        .map(|e| {
            let call = match e.method {
                Some(_) => None,
                None => e.id.as_ref().and_then(&call_of),
            };
            Message {
                direction,
                method: e.method.as_deref().or(call.map(|c| c.0)).unwrap_or(""),
                target: e.target.as_deref().or(call.and_then(|c| c.1)),
                id: e.id.as_ref().map(|i| i.to_json_text()).unwrap_or_default(),
                rpc_id: e.id.clone(),
                scope: scope.to_string(),
                frame: &e.raw,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(frame: &[u8]) -> Message<'_> {
        Message {
            direction: Direction::ClientToServer,
            method: "tools/call",
            target: Some("echo"),
            id: "1".into(),
            rpc_id: None,
            scope: "exchange:1".into(),
            frame,
        }
    }

    #[tokio::test]
    async fn a_held_message_waits_for_its_verdict_and_is_listed_until_then() {
        let i = Intercept::new(Duration::from_secs(30));
        let m = call(b"{}");
        assert!(!i.wants(&m), "off: nothing is held");
        i.set_filter(Some(Filter::parse("tools/call tool:echo").unwrap()));
        assert!(i.wants(&m));
        let other = Message {
            method: "ping",
            target: None,
            ..call(b"{}")
        };
        assert!(!i.wants(&other), "the filter decides");
        // An A2A message held by the skill it names.
        i.set_filter(Some(Filter::parse("skill:translate").unwrap()));
        let frame = br#"{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hola"}],"metadata":{"skill":"translate"}}}}"#;
        let a2a = Message {
            method: "SendMessage",
            target: None,
            ..call(frame)
        };
        assert!(i.wants(&a2a));
        assert!(!i.wants(&m));
        i.set_filter(Some(Filter::parse("tools/call tool:echo").unwrap()));
        let p = i.hold(&m);
        let held = i.held();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].method, "tools/call");
        let n = held[0].n;
        let waiter = tokio::spawn(p.wait());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "nothing decided: still held");
        assert!(i.decide(n, Verdict::Edit(Bytes::from_static(b"[1]"))));
        let d = waiter.await.unwrap();
        assert_eq!(d.verdict, Verdict::Edit(Bytes::from_static(b"[1]")));
        assert_eq!(d.action(), "edit");
        assert!(i.held().is_empty());
        assert!(!i.decide(n, Verdict::Drop), "decided once");
    }

    #[tokio::test]
    async fn a_held_message_forwards_itself_after_the_timeout() {
        let i = Intercept::new(Duration::from_millis(50));
        i.set_filter(Some(Filter::parse("tools/call").unwrap()));
        let p = i.hold(&call(b"{}"));
        let d = p.wait().await;
        assert!(d.timed_out);
        assert_eq!(d.verdict, Verdict::Forward);
        assert_eq!(d.action(), "timeout");
        assert!(d.held_for >= Duration::from_millis(50));
        assert!(i.held().is_empty(), "no longer listed");
    }

    #[tokio::test]
    async fn a_message_being_edited_does_not_time_out_and_its_timer_starts_again_after() {
        let i = Intercept::new(Duration::from_millis(150));
        i.set_filter(Some(Filter::parse("tools/call").unwrap()));
        let p = i.hold(&call(b"{}"));
        let n = i.held()[0].n;
        let waiting = tokio::spawn(p.wait());
        assert!(i.editing(n, true));
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!waiting.is_finished(), "held while the editor is open");
        assert_eq!(i.held().len(), 1);
        // The editor returned: the whole timeout again, then it forwards itself.
        assert!(i.editing(n, false));
        let d = waiting.await.unwrap();
        assert!(d.timed_out);
        assert!(d.held_for >= Duration::from_millis(540), "{:?}", d.held_for);
        assert!(!i.editing(n, true), "no longer held");
        // An edit decided in time wins.
        let p = i.hold(&call(b"{}"));
        let n = i.held()[0].n;
        let waiting = tokio::spawn(p.wait());
        i.editing(n, true);
        tokio::time::sleep(Duration::from_millis(300)).await;
        i.editing(n, false);
        assert!(i.decide(n, Verdict::Drop));
        let d = waiting.await.unwrap();
        assert_eq!((d.verdict, d.timed_out), (Verdict::Drop, false));
    }

    #[tokio::test]
    async fn turning_intercept_off_forwards_everything_held() {
        let i = Intercept::new(Duration::from_secs(60));
        i.set_filter(Some(Filter::parse("tools/call").unwrap()));
        let a = tokio::spawn(i.hold(&call(b"{}")).wait());
        let b = tokio::spawn(i.hold(&call(b"{}")).wait());
        i.set_filter(None);
        for d in [a.await.unwrap(), b.await.unwrap()] {
            assert_eq!(d.verdict, Verdict::Forward);
            assert!(!d.timed_out);
        }
        assert!(!i.is_on());
    }

    #[test]
    fn the_held_list_is_bounded() {
        let i = Intercept::new(Duration::from_secs(60));
        i.set_filter(Some(Filter::parse("tools/call").unwrap()));
        let mut kept = Vec::new();
        for _ in 0..MAX_HELD {
            assert!(i.wants(&call(b"{}")));
            kept.push(i.hold(&call(b"{}")));
        }
        assert!(!i.wants(&call(b"{}")), "full: passes unheld");
        assert_eq!(i.overflow(), 1);
        // And by bytes.
        let j = Intercept::new(Duration::from_secs(60));
        j.set_filter(Some(Filter::parse("tools/call").unwrap()));
        let big = vec![b' '; MAX_HELD_BYTES / 2 + 1];
        assert!(j.wants(&call(&big)));
        let _kept = j.hold(&call(&big));
        assert!(!j.wants(&call(&big)), "past the bytes bound: passes unheld");
    }

    #[test]
    fn edits_are_validated_and_messages_read_from_a_batch() {
        assert_eq!(
            validate(" {\"b\": 1,\n \"a\": [2, 3]}\n").unwrap(),
            Bytes::from_static(b"{\"b\":1,\"a\":[2,3]}"),
            "one line, members in order"
        );
        let e = validate("{\"a\": ").unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
        let body = crate::rpc::parse_body(&Bytes::from_static(
            br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}},{"jsonrpc":"2.0","id":2,"result":{}}]"#,
        ));
        let ms = messages(Direction::ClientToServer, &body, "exchange:3", |_| {
            Some(("tools/call", Some("add")))
        });
        assert_eq!(ms.len(), 2);
        assert_eq!(ms[0].target, Some("echo"));
        assert_eq!(ms[1].method, "tools/call", "a reply's method by its id");
        assert_eq!(ms[1].target, Some("add"), "and its call's target");
        assert!(ms[0].has_text("echo"));
    }
}
