//! The live event feed: what `GET /events` on the admin listener streams and `rpctap attach`
//! reads. Built once for the HTTP proxy and `rpctap stdio`.
//!
//! It costs the proxy nothing while nobody watches: its bus subscription is *gated* — closed
//! while no client is attached, so the inspector builds no event for it — and only a sink for
//! ended calls and anomalies runs, keeping the most recent ones (bounded) for `GET /calls` and
//! for a client that attaches late. When a client attaches the gate opens: the client gets the
//! header, the recent calls and anomalies in their order, a `{"event":"feed","live":true,"sample":1}` line, then every event from then
//! on — or, past the display budget (10,000 events/s, as the dashboard), whole exchanges one in
//! k, announced by a `{"event":"feed","sample":k}` line. The queue is drained on a timer (the proxy's threads never wake this task per
//! event); each event is serialized once, as its recording line (`record::write_line`, so a
//! reader of recordings reads the feed), and handed to every client's own bounded queue: a
//! client that reads too slowly loses lines — counted, and told by a `notice` line — and never
//! slows the relay or the others. The gate closes again when the last client leaves.
//!
//! Wire format (NDJSON, `application/x-ndjson`): the header line
//! `{"rpctap_feed":1,"version":…,"started":NS,"mode":"proxy","listen":…,"upstream":…}` (for
//! `stdio`: `"mode":"stdio","command":[…],"pid":N`), the backlog's call and anomaly lines, the live marker,
//! then one recording line per event. Lines carry what the recording carries (secrets already
//! redacted).

use crate::events::{AnomalyEvent, CallEvent, Event, Interest, Sink, Subscription};
use crate::locks::Locked as _;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The feed format version in its header line.
pub const FEED_VERSION: u64 = 1;
/// How often the bus queue is drained.
pub const DRAIN: Duration = Duration::from_millis(20);
/// The bus queue's capacity (events).
pub const BUS_QUEUE: usize = 65_536;
/// A client's queue (lines).
pub const CLIENT_QUEUE: usize = 16_384;

/// Bounds of what the feed keeps.
#[derive(Clone, Copy, Debug)]
pub struct FeedLimits {
    /// Recent ended calls kept for `GET /calls` and late clients.
    pub recent_calls: usize,
    /// Clients attached at once.
    pub max_clients: usize,
}

impl Default for FeedLimits {
    fn default() -> Self {
        FeedLimits {
            recent_calls: 1_000,
            max_clients: 16,
        }
    }
}

/// Why a client could not attach.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("too many feed clients (at most {0})")]
    TooManyClients(usize),
}

struct Client {
    tx: mpsc::Sender<Bytes>,
    dropped: u64,
    reported: u64,
    /// `?filter=`: only the events it matches (its backlog too).
    filter: Option<crate::filter::Filter>,
}

struct Inner {
    header: Bytes,
    limits: FeedLimits,
    /// The recent calls. A std lock of its own, held only to append one (on the publishing
    /// threads) or to copy them out: the drain's work never makes the proxy wait on it.
    calls: Mutex<VecDeque<CallEvent>>,
    /// The recent anomalies (as many as calls), for a late client's counts and rows.
    anomalies: Mutex<VecDeque<AnomalyEvent>>,
    /// The attached clients. A std lock, never held across an `.await`.
    clients: Mutex<Vec<Client>>,
    /// Open while a client is attached (the bus builds the feed's events only then).
    gate: Arc<AtomicBool>,
    /// Lines dropped because a client's queue was full.
    dropped: AtomicU64,
    /// Events the feed's bus queue dropped.
    bus_dropped: Mutex<Option<Arc<AtomicU64>>>,
    /// The feed carries one exchange in this many (1: all).
    sample: AtomicU64,
}

/// The feed: cheap to clone.
#[derive(Clone)]
pub struct Feed {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").finish_non_exhaustive()
    }
}

/// An attached client: its lines (header and backlog first).
pub struct FeedClient {
    pub rx: mpsc::Receiver<Bytes>,
}

fn line_of(ev: &Event) -> Option<Bytes> {
    let mut out = Vec::with_capacity(256);
    crate::record::write_line(&mut out, ev).ok()?;
    out.push(b'\n');
    Some(Bytes::from(out))
}

impl Feed {
    /// A feed described by `header` (mode, listen, upstream or command).
    pub fn new(header: serde_json::Value, limits: FeedLimits) -> Self {
        let mut h = serde_json::json!({
            "rpctap_feed": FEED_VERSION,
            "version": env!("CARGO_PKG_VERSION"),
            // Tells a reconnecting client whether this is the process it saw before.
            "started": crate::events::now_ns(),
        });
        if let (Some(h), serde_json::Value::Object(extra)) = (h.as_object_mut(), header) {
            h.extend(extra);
        }
        let mut header = h.to_string().into_bytes();
        header.push(b'\n');
        Feed {
            inner: Arc::new(Inner {
                header: Bytes::from(header),
                limits,
                calls: Mutex::new(VecDeque::new()),
                anomalies: Mutex::new(VecDeque::new()),
                clients: Mutex::new(Vec::new()),
                gate: Arc::new(AtomicBool::new(false)),
                dropped: AtomicU64::new(0),
                bus_dropped: Mutex::new(None),
                sample: AtomicU64::new(1),
            }),
        }
    }

    /// Puts the feed on `bus`: a gated subscription to every event, and a sink for ended calls.
    pub fn subscribe(&self, bus: &mut crate::events::BusBuilder) -> Subscription {
        bus.sink(
            Interest::CALL.and(Interest::ANOMALY),
            Arc::new(self.clone()),
        );
        let sub = bus.subscribe_gated(
            "feed",
            BUS_QUEUE,
            Interest::ALL,
            Some(self.inner.gate.clone()),
        );
        *self.inner.bus_dropped.locked() = Some(sub.dropped.clone());
        sub
    }

    fn clients_locked(&self) -> std::sync::MutexGuard<'_, Vec<Client>> {
        self.inner.clients.locked()
    }

    fn anomalies_locked(&self) -> std::sync::MutexGuard<'_, VecDeque<AnomalyEvent>> {
        self.inner.anomalies.locked()
    }

    fn calls_locked(&self) -> std::sync::MutexGuard<'_, VecDeque<CallEvent>> {
        self.inner.calls.locked()
    }

    /// Lines lost to slow clients plus events lost by the feed's bus queue.
    pub fn dropped(&self) -> u64 {
        let bus = self
            .inner
            .bus_dropped
            .locked()
            .as_ref()
            .map_or(0, |d| d.load(Ordering::Relaxed));
        self.inner.dropped.load(Ordering::Relaxed) + bus
    }

    pub fn clients(&self) -> usize {
        self.clients_locked().len()
    }

    /// Whether the bus builds events for the feed now (a client is attached).
    pub fn is_open(&self) -> bool {
        self.inner.gate.load(Ordering::Relaxed)
    }

    /// Drains `sub` every [`DRAIN`] until every publisher is gone.
    pub fn spawn(&self, mut sub: Subscription) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(DRAIN);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut batch = Vec::new();
            let mut window = std::time::Instant::now();
            let mut seen = 0u64;
            loop {
                tick.tick().await;
                let open = loop {
                    match sub.rx.try_recv() {
                        Ok(ev) => batch.push(ev),
                        Err(mpsc::error::TryRecvError::Empty) => break true,
                        Err(mpsc::error::TryRecvError::Disconnected) => break false,
                    }
                };
                seen += batch.len() as u64;
                me.push(&mut batch);
                // Like the dashboard: past the display budget, whole exchanges one in k, so
                // that watching costs the proxy a bounded share however high the load.
                let elapsed = window.elapsed();
                if elapsed >= Duration::from_millis(500) {
                    let k = if me.is_open() {
                        crate::events::next_stride(
                            sub.stride.get(),
                            seen as f64 / elapsed.as_secs_f64(),
                        )
                    } else {
                        1
                    };
                    if k != sub.stride.get() {
                        sub.stride.set(k);
                        me.tell_sample(k);
                    }
                    window = std::time::Instant::now();
                    seen = 0;
                }
                if !open {
                    // The publishers are gone: the clients' streams end.
                    me.clients_locked().clear();
                    return;
                }
            }
        })
    }

    /// Hands a batch of events to the clients (emptying it); forgets clients that left, and
    /// closes the gate when none is left.
    pub fn push(&self, batch: &mut Vec<Arc<Event>>) {
        // Serialized before the clients' lock is taken (once, whatever the clients' filters).
        let lines: Vec<(Arc<Event>, Bytes)> = if self.is_open() {
            batch
                .drain(..)
                .filter_map(|ev| line_of(&ev).map(|l| (ev, l)))
                .collect()
        } else {
            Vec::new()
        };
        batch.clear();
        let mut clients = self.clients_locked();
        if !clients.is_empty() {
            for (ev, line) in lines {
                let mut dropped = 0;
                for c in clients.iter_mut() {
                    if c.filter.as_ref().is_some_and(|f| !f.matches(&*ev)) {
                        continue;
                    }
                    if let Err(mpsc::error::TrySendError::Full(_)) = c.tx.try_send(line.clone()) {
                        c.dropped += 1;
                        dropped += 1;
                    }
                }
                if dropped > 0 {
                    self.inner.dropped.fetch_add(dropped, Ordering::Relaxed);
                }
            }
        }
        clients.retain(|c| !c.tx.is_closed());
        if clients.is_empty() {
            self.inner.gate.store(false, Ordering::Relaxed);
        }
        // Tell each client that lost lines since the last report how many.
        for c in clients.iter_mut() {
            if c.dropped > c.reported {
                let ev = Event::Notice(crate::events::NoticeEvent {
                    ts: crate::events::now_ns(),
                    what: "feed_dropped",
                    message: format!(
                        "{} events were not sent to this client: it read too slowly",
                        c.dropped - c.reported
                    ),
                });
                if let Some(line) = line_of(&ev) {
                    if c.tx.try_send(line).is_ok() {
                        c.reported = c.dropped;
                    }
                }
            }
        }
    }

    /// Tells every client the feed now carries one exchange in `k`.
    fn tell_sample(&self, k: u64) {
        self.inner.sample.store(k, Ordering::Relaxed);
        let line = Bytes::from(format!("{{\"event\":\"feed\",\"sample\":{k}}}\n"));
        for c in self.clients_locked().iter() {
            let _ = c.tx.try_send(line.clone());
        }
    }

    /// Attaches a client: its queue holds the header, the recent calls and the live marker,
    /// then live lines.
    pub fn attach(&self) -> Result<FeedClient, FeedError> {
        self.attach_filtered(None)
    }

    /// Like [`Feed::attach`], the client getting only the events `filter` matches.
    pub fn attach_filtered(
        &self,
        filter: Option<crate::filter::Filter>,
    ) -> Result<FeedClient, FeedError> {
        let mut clients = self.clients_locked();
        clients.retain(|c| !c.tx.is_closed());
        if clients.len() >= self.inner.limits.max_clients {
            return Err(FeedError::TooManyClients(self.inner.limits.max_clients));
        }
        let backlog = self.backlog();
        // The backlog may be larger than the queue: it goes first, whole.
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE + backlog.len() + 2);
        let _ = tx.try_send(self.inner.header.clone());
        for e in backlog {
            if filter.as_ref().is_some_and(|f| !f.matches(&e)) {
                continue;
            }
            if let Some(line) = line_of(&e) {
                let _ = tx.try_send(line);
            }
        }
        let k = self.inner.sample.load(Ordering::Relaxed).max(1);
        let _ = tx.try_send(Bytes::from(format!(
            "{{\"event\":\"feed\",\"live\":true,\"sample\":{k}}}\n"
        )));
        clients.push(Client {
            tx,
            dropped: 0,
            reported: 0,
            filter,
        });
        self.inner.gate.store(true, Ordering::Relaxed);
        Ok(FeedClient { rx })
    }

    /// The recent calls and anomalies, in the order they happened.
    fn backlog(&self) -> Vec<Event> {
        let mut events: Vec<Event> = self
            .calls_locked()
            .iter()
            .cloned()
            .map(Event::Call)
            .collect();
        events.extend(self.anomalies_locked().iter().cloned().map(Event::Anomaly));
        events.sort_by_key(Event::ts);
        events
    }

    /// What the feed keeps, as a recording: its header, and the recent calls and findings in
    /// the order they happened (no message bodies: the feed keeps none).
    pub fn snapshot(&self) -> crate::record::reader::Capture {
        let header = serde_json::from_slice(&self.inner.header).unwrap_or_default();
        crate::record::reader::Capture {
            header,
            events: self.backlog(),
            ..Default::default()
        }
    }

    /// The most recent ended calls, newest last, as recording lines' JSON values.
    pub fn recent_calls(&self, limit: usize) -> Vec<serde_json::Value> {
        let recent: Vec<CallEvent> = {
            let calls = self.calls_locked();
            let skip = calls.len().saturating_sub(limit);
            calls.iter().skip(skip).cloned().collect()
        };
        recent
            .into_iter()
            .filter_map(|c| serde_json::to_value(Event::Call(c)).ok())
            .collect()
    }
}

impl Sink for Feed {
    /// Keeps the most recent ended calls and anomalies (on the publishing thread: a clone and a
    /// short lock).
    fn accept(&self, ev: &Event) {
        let cap = self.inner.limits.recent_calls;
        if cap == 0 {
            return;
        }
        fn keep<T: Clone>(q: &mut VecDeque<T>, cap: usize, v: &T) {
            if q.len() >= cap {
                q.pop_front();
            }
            q.push_back(v.clone());
        }
        match ev {
            Event::Call(c) => keep(&mut self.calls_locked(), cap, c),
            Event::Anomaly(a) => keep(&mut self.anomalies_locked(), cap, a),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{BusBuilder, NoticeEvent, Scope};

    fn notice(i: u64) -> Event {
        Event::Notice(NoticeEvent {
            ts: i,
            what: "test",
            message: "x".into(),
        })
    }

    fn call(i: u64) -> Event {
        let id = crate::rpc::Id::Num(i.to_string().into());
        let mut c = CallEvent::for_test("m", id, crate::events::Outcome::Result, 1);
        (c.ts, c.exchange, c.scope) = (i, i, Scope::Exchange(i));
        Event::Call(c)
    }

    fn lines(c: &mut FeedClient) -> Vec<serde_json::Value> {
        let mut v = Vec::new();
        while let Ok(l) = c.rx.try_recv() {
            v.push(serde_json::from_slice(&l).unwrap());
        }
        v
    }

    #[test]
    fn nothing_is_built_for_the_feed_until_a_client_attaches_then_backlog_then_live() {
        let feed = Feed::new(
            serde_json::json!({"mode": "proxy"}),
            FeedLimits {
                recent_calls: 3,
                ..Default::default()
            },
        );
        let mut b = BusBuilder::default();
        let mut sub = feed.subscribe(&mut b);
        let bus = b.build();
        assert!(
            !bus.wants_in(Interest::MESSAGE, 1),
            "gate closed: no message built"
        );
        assert!(
            bus.wants_in(Interest::CALL, 1),
            "the calls sink reads calls"
        );
        for i in 0..5 {
            bus.publish(call(i));
        }
        assert!(sub.rx.try_recv().is_err(), "nothing queued while closed");
        let mut c = feed.attach().unwrap();
        assert!(
            bus.wants_in(Interest::MESSAGE, 1),
            "open while a client is attached"
        );
        bus.publish(notice(9));
        let mut batch = Vec::new();
        while let Ok(e) = sub.rx.try_recv() {
            batch.push(e);
        }
        feed.push(&mut batch);
        let got = lines(&mut c);
        assert_eq!(got[0]["rpctap_feed"], 1);
        assert_eq!(got[0]["mode"], "proxy");
        let ids: Vec<u64> = got[1..4]
            .iter()
            .map(|l| l["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, vec![2, 3, 4], "the recent calls, bounded");
        assert_eq!(
            got[4],
            serde_json::json!({"event": "feed", "live": true, "sample": 1})
        );
        assert_eq!(got[5]["ts"], 9, "then live");
        assert_eq!(got.len(), 6);
        // The client leaves: the gate closes at the next drain.
        drop(c);
        feed.push(&mut Vec::new());
        assert_eq!(feed.clients(), 0);
        assert!(!bus.wants_in(Interest::MESSAGE, 1));
        assert_eq!(
            feed.recent_calls(2)
                .iter()
                .map(|c| c["id"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            vec![3, 4]
        );
    }

    #[test]
    fn a_slow_client_loses_lines_counted_and_is_told_so() {
        let feed = Feed::new(serde_json::json!({}), FeedLimits::default());
        let mut c = feed.attach().unwrap();
        let n = CLIENT_QUEUE + 100;
        let mut batch: Vec<Arc<Event>> = (0..n as u64).map(|i| Arc::new(notice(i))).collect();
        feed.push(&mut batch);
        assert_eq!(feed.dropped(), 100);
        let got = lines(&mut c);
        assert_eq!(
            got.len(),
            CLIENT_QUEUE + 2,
            "header, marker, then what fitted"
        );
        feed.push(&mut Vec::new()); // the next drain tells it
        let got = lines(&mut c);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["what"], "feed_dropped");
        assert!(got[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("100 events"));
    }

    #[test]
    fn a_late_client_gets_the_recent_anomalies_with_the_calls_in_their_order() {
        let feed = Feed::new(serde_json::json!({"mode": "proxy"}), FeedLimits::default());
        let anomaly = |ts: u64| {
            Event::Anomaly(crate::events::AnomalyEvent {
                ts,
                exchange: 1,
                scope: Scope::Exchange(1),
                code: "UNMATCHED_RESPONSE",
                severity: crate::events::Severity::Error,
                id: None,
                method: None,
                direction: None,
                batch_index: None,
                message: "x".into(),
            })
        };
        for e in [call(1), anomaly(2), call(3), anomaly(4)] {
            feed.accept(&e);
        }
        let mut c = feed.attach().unwrap();
        let got: Vec<String> = lines(&mut c)[1..5]
            .iter()
            .map(|l| format!("{}@{}", l["event"].as_str().unwrap(), l["ts"]))
            .collect();
        assert_eq!(got, ["call@1", "anomaly@2", "call@3", "anomaly@4"]);
    }
}
