//! The event bus: cheap to clone, never blocking. Each subscriber has its own bounded queue
//! (an event that does not fit is counted as dropped for it); a sink takes each event on the
//! publishing thread; the subscriber list is fixed once the bus is built, so publishing takes no
//! lock.

use super::sample::Stride;
use super::Event;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Which events a subscriber reads. The bus sends a subscriber only those, and the inspector
/// does not build an event (or copy an HTTP message's headers) that no subscriber reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interest(u16);

impl Interest {
    /// HTTP request heads (method, path) and legacy stream endpoints.
    pub const HTTP_REQUEST: Interest = Interest(1);
    /// HTTP response heads (status, content type), rpctap's own answers included.
    pub const HTTP_STATUS: Interest = Interest(1 << 8);
    /// Both heads of every exchange.
    pub const HTTP: Interest = Interest(1 | 1 << 8);
    /// The headers of those heads (otherwise they come empty).
    pub const HTTP_HEADERS: Interest = Interest(1 << 1);
    /// The end of each exchange.
    pub const HTTP_END: Interest = Interest(1 << 2);
    /// Every message (the two below together).
    pub const MESSAGE: Interest = Interest(1 << 3 | 1 << 11);
    /// Requests, replies and frames that are not notifications.
    pub const MESSAGE_REST: Interest = Interest(1 << 3);
    /// Notifications, and WebSocket binary messages (shown, not parsed): what a one-line log
    /// prints of messages — without every request and reply being built for it.
    pub const NOTIFICATIONS: Interest = Interest(1 << 11);
    pub const CALL: Interest = Interest(1 << 4);
    pub const ANOMALY: Interest = Interest(1 << 5);
    pub const REFUSAL: Interest = Interest(1 << 6);
    pub const NOTICE: Interest = Interest(1 << 7);
    /// Authorization exchanges around MCP endpoints ([`HttpEvent::Auth`]) and A2A agent cards
    /// ([`HttpEvent::AgentCard`]): HTTP documents around JSON-RPC that matter to users.
    pub const HTTP_AUTH: Interest = Interest(1 << 9);
    /// What a wrapped stdio server writes on its stderr.
    pub const STDERR: Interest = Interest(1 << 10);
    /// What `[[fault]]` rules injected.
    pub const FAULT: Interest = Interest(1 << 12);
    pub const NONE: Interest = Interest(0);
    pub const ALL: Interest = Interest(u16::MAX);

    pub const fn and(self, other: Interest) -> Interest {
        Interest(self.0 | other.0)
    }
    pub const fn contains(self, other: Interest) -> bool {
        self.0 & other.0 == other.0
    }
}

/// One subscriber's queue.
#[derive(Debug)]
struct Subscriber {
    name: &'static str,
    interest: Interest,
    /// A gated subscriber reads nothing while its gate is closed (the live feed with no client
    /// attached): nothing is built for it then.
    gate: Option<Arc<std::sync::atomic::AtomicBool>>,
    stride: Stride,
    tx: mpsc::Sender<Arc<Event>>,
    /// Events that did not fit in the queue; read by the subscriber to report the loss.
    dropped: Arc<AtomicU64>,
}

/// The receiving end of a subscription.
#[derive(Debug)]
pub struct Subscription {
    pub rx: mpsc::Receiver<Arc<Event>>,
    /// How many events this subscriber lost because its queue was full.
    pub dropped: Arc<AtomicU64>,
    /// Its share of the exchanges (1: all); only a sampling subscriber changes it.
    pub stride: Stride,
}

impl Subscriber {
    fn reads(&self, interest: Interest, exchange: Option<u64>) -> bool {
        self.interest.contains(interest)
            && self.gate.as_ref().is_none_or(|g| g.load(Ordering::Relaxed))
            && self.stride.admits(exchange)
    }
}

/// An observer that takes each event as it is published, on the publishing thread, without a
/// queue: for work cheaper than handing the event to another thread (the recorder serializes a
/// line into a bounded buffer). It must not block and must bound what it keeps.
pub trait Sink: Send + Sync + std::fmt::Debug {
    fn accept(&self, ev: &Event);
    /// Its name in a log line.
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
}

/// A sink on the bus, and whether it panicked (then it is dropped: mitmproxy's `safecall` —
/// one failing observer is logged, the exchange and the other observers go on).
#[derive(Debug)]
struct SinkEntry {
    interest: Interest,
    sink: Arc<dyn Sink>,
    dead: std::sync::atomic::AtomicBool,
}

/// Builds a [`Bus`]: subscribe everything first, then `build`.
#[derive(Debug)]
pub struct BusBuilder {
    subs: Vec<Subscriber>,
    sinks: Vec<SinkEntry>,
    /// The exchange numbers the inspector hands out (strides change from the next one on).
    next_exchange: Arc<AtomicU64>,
}

impl Default for BusBuilder {
    fn default() -> Self {
        BusBuilder {
            subs: Vec::new(),
            sinks: Vec::new(),
            next_exchange: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl BusBuilder {
    /// Subscribes to every event.
    pub fn subscribe(&mut self, name: &'static str, capacity: usize) -> Subscription {
        self.subscribe_to(name, capacity, Interest::ALL)
    }
    /// Subscribes to the events `interest` names.
    pub fn subscribe_to(
        &mut self,
        name: &'static str,
        capacity: usize,
        interest: Interest,
    ) -> Subscription {
        self.subscribe_gated(name, capacity, interest, None)
    }
    /// Subscribes to the events `interest` names while `gate` is open.
    pub fn subscribe_gated(
        &mut self,
        name: &'static str,
        capacity: usize,
        interest: Interest,
        gate: Option<Arc<std::sync::atomic::AtomicBool>>,
    ) -> Subscription {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let stride = Stride::new(self.next_exchange.clone());
        self.subs.push(Subscriber {
            name,
            interest,
            gate,
            stride: stride.clone(),
            tx,
            dropped: dropped.clone(),
        });
        Subscription {
            rx,
            dropped,
            stride,
        }
    }
    /// Adds a sink for the events `interest` names. A sink reads every exchange.
    pub fn sink(&mut self, interest: Interest, sink: Arc<dyn Sink>) {
        self.sinks.push(SinkEntry {
            interest,
            sink,
            dead: Default::default(),
        });
    }

    pub fn build(self) -> Bus {
        let wants = self
            .subs
            .iter()
            .map(|s| s.interest)
            .chain(self.sinks.iter().map(|s| s.interest))
            .fold(Interest::NONE, |w, i| w.and(i));
        Bus {
            subs: Arc::from(self.subs),
            sinks: Arc::from(self.sinks),
            wants,
            next_exchange: self.next_exchange,
        }
    }
}

/// The event bus: cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct Bus {
    subs: Arc<[Subscriber]>,
    sinks: Arc<[SinkEntry]>,
    /// What any subscriber or sink reads.
    wants: Interest,
    /// The next exchange number (the inspector takes its numbers from here).
    next_exchange: Arc<AtomicU64>,
}

impl Default for Bus {
    fn default() -> Self {
        BusBuilder::default().build()
    }
}

impl Bus {
    /// The counter exchange numbers come from.
    pub fn exchange_counter(&self) -> Arc<AtomicU64> {
        self.next_exchange.clone()
    }

    /// Whether any subscriber reads events of `interest` (lets the inspector skip building
    /// what nobody reads).
    pub fn wants(&self, interest: Interest) -> bool {
        self.wants.contains(interest)
    }

    /// Whether any subscriber reads events of `interest` from `exchange` (its interest, and its
    /// share of the exchanges).
    pub fn wants_in(&self, interest: Interest, exchange: u64) -> bool {
        self.wants.contains(interest)
            && (self.sinks.iter().any(|s| s.interest.contains(interest))
                || self.subs.iter().any(|s| s.reads(interest, Some(exchange))))
    }

    pub fn publish(&self, ev: Event) {
        let kind = ev.interest();
        if !self.wants.contains(kind) {
            return;
        }
        for s in self.sinks.iter() {
            if s.interest.contains(kind) && !s.dead.load(Ordering::Relaxed) {
                let ok =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.sink.accept(&ev)));
                if ok.is_err() && !s.dead.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        observer = s.sink.name(),
                        "an observer panicked: dropped, the others go on"
                    );
                }
            }
        }
        if self.subs.is_empty() {
            return;
        }
        let exchange = ev.exchange();
        let mut readers = self.subs.iter().filter(|s| s.reads(kind, exchange));
        let mut next = readers.next();
        if next.is_none() {
            return;
        }
        let mut ev = Some(Arc::new(ev));
        while let Some(s) = next {
            next = readers.next();
            // The last reader takes the event itself; the others a reference each.
            let e = match (next.is_some(), &ev) {
                (true, Some(e)) => e.clone(),
                _ => match ev.take() {
                    Some(e) => e,
                    None => return,
                },
            };
            if let Err(e) = s.tx.try_send(e) {
                if matches!(e, mpsc::error::TrySendError::Full(_)) {
                    let n = s.dropped.fetch_add(1, Ordering::Relaxed);
                    if n == 0 {
                        tracing::warn!(subscriber = s.name, "event queue full; dropping events");
                    }
                }
            }
        }
    }
}
