//! Limits shared through Redis (`store = "redis://…"` on a `[[limit]]` rule), so that every
//! rpctap sharing that Redis enforces one limit: the rate is GCRA — the algorithm `governor`
//! runs locally — in a Lua script run atomically (`EVALSHA`, the `redis` crate loading it again
//! after a Redis restart), on Redis's own clock (`TIME`), so the sidecars' clocks do not matter;
//! calls in flight are leases in a sorted set scored by their expiry, so a crashed sidecar's
//! leases time out. Keys are namespaced (`rpctap:limit:…`), expire, and name a key's value only
//! by its SHA-256 (an API key never reaches Redis in clear).
//!
//! Cost: one script call per (call, shared rule), all of a request's sent at once over one
//! multiplexed connection (`ConnectionManager`, which reconnects by itself) — one round trip. A
//! key refused until T stays refused locally until T, without asking Redis. Redis down or slower
//! than the rule's `store_timeout` (20 ms): the rule's `on_store_error` decides — `local`
//! (default: the rule's own limits, divided by `replicas`, kept locally), `allow` or `deny` —
//! with a warning when the store goes away and when it is back, and
//! `rpctap_limit_store_errors_total`.

use dashmap::DashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Store errors (and timeouts) since start, for the metrics.
pub static STORE_ERRORS: AtomicU64 = AtomicU64::new(0);

/// What a rule does when its store cannot answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    Allow,
    Deny,
    Local,
}

impl OnError {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "allow" => Ok(OnError::Allow),
            "deny" => Ok(OnError::Deny),
            "local" => Ok(OnError::Local),
            o => Err(format!("on_store_error {o:?}: use allow, deny or local")),
        }
    }
}

/// The GCRA step and the lease bookkeeping, atomically. KEYS: the rate key, the lease set.
/// ARGV: emission interval (µs; 0 = no rate), burst, concurrency cap (0 = none), lease id,
/// lease time to live (ms). Returns {1 allowed | 0 refused by the rate | 2 refused by the
/// concurrency, retry after (µs), leased}.
const SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local cap, lease, ttl = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local leased = 0
if cap > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= cap then
    return {2, 1000000, 0}
  end
end
if interval > 0 then
  local tat = tonumber(redis.call('GET', KEYS[1]) or now)
  if tat < now then tat = now end
  local new_tat = tat + interval
  local allow_at = new_tat - interval * burst
  if now < allow_at then
    return {0, allow_at - now, 0}
  end
  redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
end
if cap > 0 then
  redis.call('ZADD', KEYS[2], now + ttl * 1000, lease)
  redis.call('PEXPIRE', KEYS[2], ttl)
  leased = 1
end
return {1, 0, leased}
"#;

/// One Redis, shared by every rule naming the same URL.
pub struct Store {
    url: String,
    client: redis::Client,
    /// The connection once made (a watch, so that the first calls can wait for it).
    conn: tokio::sync::watch::Sender<Option<redis::aio::ConnectionManager>>,
    connecting: AtomicBool,
    /// The last call failed: a warning was given, the next success says it is back.
    down: AtomicBool,
    script: redis::Script,
    leases: AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.redacted())
            .finish()
    }
}

/// A lease on a shared concurrency limit, given back when the call ends.
#[derive(Debug)]
pub struct Lease {
    store: Arc<Store>,
    set: String,
    id: String,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let (Ok(rt), Some(mut conn)) = (tokio::runtime::Handle::try_current(), self.store.conn())
        else {
            return; // it times out in Redis
        };
        let (set, id) = (std::mem::take(&mut self.set), std::mem::take(&mut self.id));
        rt.spawn(async move {
            let _: Result<i64, _> = redis::cmd("ZREM")
                .arg(set)
                .arg(id)
                .query_async(&mut conn)
                .await;
        });
    }
}

/// What the store said about one call under one rule.
#[derive(Debug)]
pub enum Verdict {
    Allow(Option<Lease>),
    /// Refused, to retry after; `until`: the rate refused, so the key stays refused until then
    /// (a concurrency refusal may end any moment).
    Refuse {
        retry: Duration,
        until: bool,
    },
    /// No answer in time (or Redis down): the rule's `on_store_error` decides.
    Unavailable,
}

impl Store {
    pub fn open(url: &str) -> Result<Arc<Store>, String> {
        let client = redis::Client::open(url).map_err(|e| format!("store {url:?}: {e}"))?;
        Ok(Arc::new(Store {
            url: url.to_string(),
            client,
            conn: tokio::sync::watch::Sender::new(None),
            connecting: AtomicBool::new(false),
            down: AtomicBool::new(false),
            script: redis::Script::new(SCRIPT),
            leases: AtomicU64::new(0),
        }))
    }

    /// The URL without its password.
    pub fn redacted(&self) -> String {
        match (self.url.find("://"), self.url.rfind('@')) {
            (Some(s), Some(at)) if at > s => {
                format!("{}://…@{}", &self.url[..s], &self.url[at + 1..])
            }
            _ => self.url.clone(),
        }
    }

    fn conn(&self) -> Option<redis::aio::ConnectionManager> {
        self.conn.borrow().clone()
    }

    /// The connection; while it is being made (in the background, once), waits for it up to
    /// `wait`.
    async fn connection(self: &Arc<Self>, wait: Duration) -> Option<redis::aio::ConnectionManager> {
        if let Some(c) = self.conn() {
            return Some(c);
        }
        self.connect();
        let mut rx = self.conn.subscribe();
        let ready = tokio::time::timeout(wait, rx.wait_for(Option::is_some)).await;
        match ready {
            Ok(Ok(c)) => c.clone(),
            _ => None,
        }
    }

    /// Starts making the connection, once.
    fn connect(self: &Arc<Self>) {
        if !self.connecting.swap(true, Ordering::AcqRel) {
            let me = self.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let cfg = redis::aio::ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(Duration::from_secs(1)))
                        .set_max_delay(Duration::from_secs(1));
                    loop {
                        match redis::aio::ConnectionManager::new_with_config(
                            me.client.clone(),
                            cfg.clone(),
                        )
                        .await
                        {
                            Ok(c) => {
                                me.conn.send_replace(Some(c));
                                break;
                            }
                            Err(e) => {
                                me.failed(&e.to_string());
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                        }
                    }
                });
            } else {
                self.connecting.store(false, Ordering::Release);
            }
        }
    }

    fn failed(&self, why: &str) {
        STORE_ERRORS.fetch_add(1, Ordering::Relaxed);
        if !self.down.swap(true, Ordering::AcqRel) {
            tracing::warn!(store = %self.redacted(), error = why, "the rate-limit store does not answer: its rules fall back to their on_store_error");
        }
    }

    fn answered(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            tracing::warn!(store = %self.redacted(), "the rate-limit store answers again: its rules count shared again");
        }
    }

    /// Asks for every (rule, key) of one request at once; one verdict each, in order.
    pub async fn ask(self: &Arc<Self>, asks: &[Ask], timeout: Duration) -> Vec<Verdict> {
        let started = std::time::Instant::now();
        let Some(conn) = self.connection(timeout).await else {
            self.failed("not connected");
            return asks.iter().map(|_| Verdict::Unavailable).collect();
        };
        let calls = asks.iter().map(|a| {
            let mut conn = conn.clone();
            let lease = (a.cap > 0).then(|| {
                format!(
                    "{}-{}",
                    std::process::id(),
                    self.leases.fetch_add(1, Ordering::Relaxed)
                )
            });
            let mut inv = self.script.prepare_invoke();
            inv.key(&a.rate_key)
                .key(&a.lease_key)
                .arg(a.interval_us)
                .arg(a.burst)
                .arg(a.cap)
                .arg(lease.as_deref().unwrap_or(""))
                .arg(a.lease_ttl_ms);
            async move {
                let r: redis::RedisResult<(i64, i64, i64)> = inv.invoke_async(&mut conn).await;
                (r, lease)
            }
        });
        let left = timeout.saturating_sub(started.elapsed());
        let answers = tokio::time::timeout(left, futures_util::future::join_all(calls)).await;
        let Ok(answers) = answers else {
            self.failed(&format!("no answer within {timeout:?}"));
            return asks.iter().map(|_| Verdict::Unavailable).collect();
        };
        let mut out = Vec::with_capacity(asks.len());
        let mut ok = true;
        for (a, (r, lease)) in asks.iter().zip(answers) {
            out.push(match r {
                Ok((1, _, leased)) => Verdict::Allow((leased == 1).then(|| Lease {
                    store: self.clone(),
                    set: a.lease_key.clone(),
                    id: lease.unwrap_or_default(),
                })),
                Ok((code, retry_us, _)) => Verdict::Refuse {
                    retry: Duration::from_micros(retry_us.max(0) as u64),
                    until: code == 0,
                },
                Err(e) => {
                    if ok {
                        self.failed(&e.to_string());
                    }
                    ok = false;
                    Verdict::Unavailable
                }
            });
        }
        if ok {
            self.answered();
        }
        out
    }
}

/// One (call, shared rule) question.
#[derive(Debug, Clone)]
pub struct Ask {
    pub rate_key: String,
    pub lease_key: String,
    pub interval_us: u64,
    pub burst: u32,
    pub cap: u32,
    pub lease_ttl_ms: u64,
}

/// A shared rule's side of things: its store, its settings, and the refusals it remembers.
#[derive(Debug)]
pub struct Shared {
    pub store: Arc<Store>,
    pub on_error: OnError,
    pub timeout: Duration,
    /// Key (hash) → refused until.
    refused_until: DashMap<u64, Instant, foldhash::fast::RandomState>,
    /// The namespace of this rule's keys.
    prefix: String,
}

impl Shared {
    pub fn new(store: Arc<Store>, rule: &str, on_error: OnError, timeout: Duration) -> Self {
        Shared {
            store,
            on_error,
            timeout,
            refused_until: DashMap::default(),
            prefix: format!(
                "rpctap:limit:{}",
                hex(&sha256(rule.as_bytes()))[..16].to_owned()
            ),
        }
    }

    /// The key names for one key's value (its material hashed).
    pub fn keys(&self, material: &[u8]) -> (String, String) {
        let h = hex(&sha256(material));
        (
            format!("{}:rate:{}", self.prefix, &h[..32]),
            format!("{}:leases:{}", self.prefix, &h[..32]),
        )
    }

    /// Still refused locally (a refusal's retry time not reached).
    pub fn refused(&self, key: u64, now: Instant) -> Option<Duration> {
        let until = *self.refused_until.get(&key)?;
        if until > now {
            return Some(until - now);
        }
        self.refused_until.remove_if(&key, |_, u| *u <= now);
        None
    }

    pub fn remember(&self, key: u64, until: Instant) {
        self.refused_until.insert(key, until);
    }

    /// Forgets the refusals whose time has passed.
    pub fn retain(&self) {
        let now = Instant::now();
        self.refused_until.retain(|_, u| *u > now);
    }
}

fn sha256(b: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, b);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}
