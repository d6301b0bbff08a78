//! Sampling for displays: the stride a display (the dashboard, a feed client) takes exchanges
//! at under load, decided per exchange when it begins.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The events per second a display (the dashboard, a feed client) takes in before it samples: about 2,000 calls/s of
/// plain JSON-RPC (five events per call) — more rows than anyone reads. Past that it shows one
/// exchange in k, k chosen every half second from the traffic, so that its cost to the proxy
/// stays flat however high the load; the header says so.
pub const EVENT_BUDGET: f64 = 10_000.0;

/// The budget in force: [`EVENT_BUDGET`], or `RPCTAP_EVENT_BUDGET` (events a second) when set —
/// for a display on a slow terminal, and for tests that must see sampling start whatever the
/// machine's speed.
fn budget() -> f64 {
    static B: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *B.get_or_init(|| {
        std::env::var("RPCTAP_EVENT_BUDGET")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|b| *b >= 1.0)
            .unwrap_or(EVENT_BUDGET)
    })
}

/// The stride that keeps `seen_per_sec` events per second — taken in at stride `current` —
/// within the budget ([`EVENT_BUDGET`]). It rises at once, and falls only when the traffic would
/// fit in half the stride (no flapping at the edge).
pub fn next_stride(current: u64, seen_per_sec: f64) -> u64 {
    let current = current.max(1);
    let offered = seen_per_sec * current as f64;
    let want = (offered / budget()).ceil().clamp(1.0, 1024.0) as u64;
    if want > current || want * 2 <= current {
        want
    } else {
        current
    }
}

/// A subscriber's share of the exchanges: it reads the events of exchange `n` when
/// `n % stride == 0` (and every event that belongs to no exchange). A stride of 1 — the default,
/// and all a lossless subscriber ever has — is every exchange. A subscriber that may sample
/// (the dashboard) raises it under load, so that a whole exchange is shown or not, and the
/// events it does not show are never built.
///
/// A change applies to the exchanges that begin after it: an exchange keeps the decision made
/// when it began (so a call shown is never left without its outcome). The last `STRIDES`
/// changes are kept, each with the first exchange number it applies to, packed in one atomic
/// (`first << 16 | stride`); an exchange older than all of them is admitted.
#[derive(Clone, Debug)]
pub struct Stride(Arc<StrideInner>);

const STRIDES: usize = 8;

#[derive(Debug)]
struct StrideInner {
    /// The inspector's next exchange number (shared through the bus).
    next_exchange: Arc<AtomicU64>,
    ring: [AtomicU64; STRIDES],
    head: std::sync::atomic::AtomicUsize,
}

impl Stride {
    pub(super) fn new(next_exchange: Arc<AtomicU64>) -> Self {
        let ring: [AtomicU64; STRIDES] = Default::default();
        ring[0].store(1, Ordering::Relaxed); // from exchange 0, stride 1
        Stride(Arc::new(StrideInner {
            next_exchange,
            ring,
            head: Default::default(),
        }))
    }
    pub fn get(&self) -> u64 {
        let h = self.0.head.load(Ordering::Acquire);
        (self.0.ring[h].load(Ordering::Relaxed) & 0xffff).max(1)
    }
    /// From the next exchange on, one in `n` (at most 65,535).
    pub fn set(&self, n: u64) {
        let n = n.clamp(1, 0xffff);
        if n == self.get() {
            return;
        }
        let first = self.0.next_exchange.load(Ordering::Relaxed);
        let h = (self.0.head.load(Ordering::Relaxed) + 1) % STRIDES;
        self.0.ring[h].store(first << 16 | n, Ordering::Relaxed);
        self.0.head.store(h, Ordering::Release);
    }
    pub(super) fn admits(&self, exchange: Option<u64>) -> bool {
        let Some(x) = exchange else { return true };
        let h = self.0.head.load(Ordering::Acquire);
        for i in 0..STRIDES {
            let e = self.0.ring[(h + STRIDES - i) % STRIDES].load(Ordering::Relaxed);
            if e == 0 {
                break;
            }
            if x >= e >> 16 {
                return x % (e & 0xffff).max(1) == 0;
            }
        }
        true
    }
}
