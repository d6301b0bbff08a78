//! Rate limits per JSON-RPC call: rules that match a method glob, an MCP tool name glob and a
//! resource URI glob, keyed globally, by peer IP, by a header's value (hashed, never kept in
//! clear) or by MCP session; each a GCRA rate with burst (the `governor` crate) and/or a cap on
//! calls in flight. `shadow` rules only count what they would refuse.
//!
//! A rule with `store = "redis://…"` keeps its counters in Redis, shared by every rpctap using
//! it ([`store`]); the proxy asks the store for a request's calls at once (`ask_shared`) before
//! deciding them.
//!
//! The limiter decides per call; the proxy splits batches, answers refusals and merges replies
//! (see `proxy`). Idle keys are evicted by `retain`, which the proxy runs every second, so
//! memory follows the keys active within a rule's replenish window, not traffic.

pub mod enforce;
pub mod store;

use dashmap::DashMap;
use globset::{Glob, GlobMatcher};
use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use http::HeaderMap;
use serde::Deserialize;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// The default JSON-RPC error code of a refusal.
pub const DEFAULT_CODE: i64 = -32001;

/// One rule as written in the config file (`[[limit]]`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// Shown in refusals (`data.limit`); defaults to the rule's position.
    pub name: Option<String>,
    /// Method glob, e.g. `tools/*`.
    pub method: Option<String>,
    /// MCP tool name glob (`params.name` of `tools/call`).
    pub tool: Option<String>,
    /// Resource URI glob (`params.uri`).
    pub resource: Option<String>,
    /// A2A skill glob (the skill a message names: `rpc::a2a::skill_of`).
    pub skill: Option<String>,
    /// `global` (default), `peer`, `session`, or `header:NAME`.
    pub key: Option<String>,
    /// `N/s`, `N/min`, `N/h` (`N/sec`, `N/second`, `N/minute`, `N/hour` too).
    pub rate: Option<String>,
    /// Calls allowed at once above the steady rate (default: N of the rate).
    pub burst: Option<u32>,
    /// Most calls in flight per key.
    pub concurrency: Option<u32>,
    /// Only count and flag what it would refuse.
    #[serde(default)]
    pub shadow: bool,
    /// `429`: answer whole-request refusals with HTTP 429 and `Retry-After`/`RateLimit-*`
    /// headers instead of a JSON-RPC error at 200.
    pub status: Option<u16>,
    /// The JSON-RPC error code (default -32001).
    pub code: Option<i64>,
    /// `redis://host:port[/db]`: the counters live there, shared by every rpctap using it.
    pub store: Option<String>,
    /// When the store does not answer in time: `local` (default), `allow` or `deny`.
    pub on_store_error: Option<String>,
    /// How many rpctap share the store: `local` fallback divides the rule's limits by it.
    pub replicas: Option<u32>,
    /// How long a call waits for the store (default 20ms).
    pub store_timeout: Option<String>,
    /// A shared concurrency lease's time to live (default 5min): a crashed rpctap's leases go
    /// after it.
    pub lease_ttl: Option<String>,
}

/// Rule errors, naming the rule and the setting.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("limit rule {rule}: {message}")]
pub struct RuleError {
    pub rule: String,
    pub message: String,
}

impl RuleSpec {
    /// A quick rule from `--limit 'METHOD_GLOB=N/UNIT'`, keyed globally.
    pub fn parse_flag(s: &str) -> Result<RuleSpec, RuleError> {
        let (method, rate) = s.rsplit_once('=').ok_or_else(|| RuleError {
            rule: s.to_string(),
            message: "--limit takes METHOD_GLOB=N/UNIT, e.g. 'tools/call=10/s'".into(),
        })?;
        if method.trim().is_empty() {
            return Err(RuleError {
                rule: s.to_string(),
                message:
                    "--limit needs a method glob before `=`, e.g. 'tools/call=10/s' or '*=100/s'"
                        .into(),
            });
        }
        Ok(RuleSpec {
            name: Some(s.to_string()),
            method: Some(method.trim().to_string()),
            rate: Some(rate.trim().to_string()),
            ..Default::default()
        })
    }
}

/// Parses `N/unit` into (N, period of N).
pub fn parse_rate(s: &str) -> Result<(u32, Duration), String> {
    let (n, unit) = s
        .split_once('/')
        .ok_or_else(|| format!("rate {s:?} must look like 10/s, 600/min or 100/h"))?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("rate {s:?}: {n:?} is not a whole number"))?;
    if n == 0 {
        return Err(format!("rate {s:?} must allow at least 1 call"));
    }
    let period = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        u => return Err(format!("rate {s:?}: unknown unit {u:?} (s, min, h)")),
    };
    Ok((n, period))
}

#[derive(Debug, Clone, PartialEq)]
enum KeyBy {
    Global,
    Peer,
    Session,
    Header(http::HeaderName),
}

/// A permit for one call in flight; released when dropped (the call ended): a local count, or a
/// lease in a shared store.
#[derive(Debug)]
pub struct Permit {
    map: Option<Arc<DashMap<u64, u32>>>,
    key: u64,
    _lease: Option<store::Lease>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(map) = &self.map else { return };
        if let dashmap::mapref::entry::Entry::Occupied(mut o) = map.entry(self.key) {
            if *o.get() <= 1 {
                o.remove();
            } else {
                *o.get_mut() -= 1;
            }
        }
    }
}

type Keyed<C> = RateLimiter<
    u64,
    DashMapStateStore<u64>,
    C,
    governor::middleware::NoOpMiddleware<<C as Clock>::Instant>,
>;

struct Rule<C: Clock> {
    name: Arc<str>,
    calls: crate::rpc::CallGlobs,
    key: KeyBy,
    rate: Option<(Keyed<C>, u32, Duration)>,
    concurrency: Option<(u32, Arc<DashMap<u64, u32>>)>,
    shadow: bool,
    status: Option<u16>,
    /// Written on the rule or as `limit_code`; `None`: rpctap's own (`rpc::own`), chosen per call.
    code: Option<i64>,
    /// Counted in a shared store; `rate` and `concurrency` above are then the local fallback.
    shared: Option<Shared>,
}

/// A shared rule's store side and its limits as the store counts them.
struct Shared {
    side: store::Shared,
    /// The limit as written (for `RateLimit-Limit`): the rate's N, else the concurrency.
    limit: u32,
    interval_us: u64,
    burst: u32,
    cap: u32,
    lease_ttl: Duration,
}

/// The store's verdicts for a request: (call index, rule index) → verdict.
pub type SharedVerdicts = std::collections::HashMap<(usize, usize), store::Verdict>;

/// What a call carries that rules match on (defined with the envelope, below the rules that
/// match on it: rate limits here, faults in `crate::flow::fault`).
pub use crate::rpc::CallInfo;

/// What the HTTP request carries that rules key on.
#[derive(Debug, Clone, Copy)]
pub struct RequestKeys<'a> {
    pub peer: IpAddr,
    pub session: Option<&'a str>,
    pub headers: &'a HeaderMap,
}

/// A refusal (or, for a shadow rule, what would have been one).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub rule: Arc<str>,
    pub retry_after: Duration,
    pub status: Option<u16>,
    pub code: i64,
    /// The limit as written, for `RateLimit-Limit`.
    pub limit: u32,
    /// Not a rate limit: a `[[fault]]` rule's injected error (its code, message and data are
    /// the answer's).
    pub fault: Option<crate::flow::fault::Fired>,
}

/// The decision for one call.
#[derive(Debug)]
pub enum Decision {
    /// Allowed; the permits are held until the call ends.
    Allow(Vec<Permit>),
    Refuse(Refusal),
}

/// The rules, in order.
pub struct Limiter<C: Clock = DefaultClock> {
    rules: Vec<Rule<C>>,
    /// The `[[fault]]` rules (also the last of `stages`).
    pub faults: Arc<crate::flow::fault::Faults>,
    /// The acting pipeline's stages (`crate::flow`), decided on the calls the rate limits let
    /// through: the `[[deny]]` rules, then the faults.
    pub stages: crate::flow::Stages,
    hasher: std::collections::hash_map::RandomState,
    clock: C,
}

impl<C: Clock> std::fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("rules", &self.rules.len())
            .finish()
    }
}

fn glob(
    rule: &str,
    what: &str,
    pattern: &Option<String>,
) -> Result<Option<GlobMatcher>, RuleError> {
    pattern
        .as_deref()
        .map(|p| {
            Glob::new(p)
                .map(|g| g.compile_matcher())
                .map_err(|e| RuleError {
                    rule: rule.to_string(),
                    message: format!("{what} glob {p:?}: {e}"),
                })
        })
        .transpose()
}

impl Limiter<DefaultClock> {
    pub fn new(
        specs: &[RuleSpec],
        default_code: impl Into<Option<i64>>,
    ) -> Result<Self, RuleError> {
        Self::with_clock(specs, default_code, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Limiter<C> {
    /// Builds the rules with a given clock (tests pass a `FakeRelativeClock`).
    pub fn with_clock(
        specs: &[RuleSpec],
        default_code: impl Into<Option<i64>>,
        clock: C,
    ) -> Result<Self, RuleError> {
        let default_code = default_code.into();
        let mut rules = Vec::new();
        // One connection per store URL, whatever the number of rules using it.
        let mut stores: std::collections::HashMap<String, Arc<store::Store>> = Default::default();
        for (i, s) in specs.iter().enumerate() {
            let name: Arc<str> = s
                .name
                .clone()
                .unwrap_or_else(|| format!("rule {}", i + 1))
                .into();
            let err = |m: String| RuleError {
                rule: name.to_string(),
                message: m,
            };
            let key = match s.key.as_deref().unwrap_or("global") {
                "global" => KeyBy::Global,
                "peer" | "ip" => KeyBy::Peer,
                "session" => KeyBy::Session,
                h if h.starts_with("header:") => KeyBy::Header(
                    http::HeaderName::from_bytes(h["header:".len()..].trim().as_bytes())
                        .map_err(|e| err(format!("key {h:?}: {e}")))?,
                ),
                other => {
                    return Err(err(format!(
                        "key {other:?}: use global, peer, session or header:NAME"
                    )))
                }
            };
            // A shared rule's local fallback counts its share: the limits divided by `replicas`.
            let div = match (&s.store, s.replicas) {
                (None, Some(_)) | (None, None)
                    if s.on_store_error.is_some()
                        || s.replicas.is_some()
                        || s.store_timeout.is_some()
                        || s.lease_ttl.is_some() =>
                {
                    return Err(err(
                        "on_store_error, replicas, store_timeout and lease_ttl need a `store`"
                            .into(),
                    ))
                }
                (_, Some(0)) => return Err(err("replicas must be at least 1".into())),
                (Some(_), Some(r)) => r,
                _ => 1,
            };
            let rate = match &s.rate {
                Some(r) => {
                    let (n, period) = parse_rate(r).map_err(err)?;
                    let burst = s.burst.unwrap_or(n);
                    if burst == 0 {
                        return Err(err("burst must be at least 1".into()));
                    }
                    let (n, burst) = ((n / div).max(1), (burst / div).max(1));
                    let burst = NonZeroU32::new(burst)
                        .ok_or_else(|| err("burst must be at least 1".into()))?;
                    let quota = Quota::with_period(period / n)
                        .ok_or_else(|| err(format!("rate {r:?} is too fast")))?
                        .allow_burst(burst);
                    Some((
                        RateLimiter::dashmap_with_clock(quota, clock.clone()),
                        n,
                        period,
                    ))
                }
                None => None,
            };
            let concurrency = match s.concurrency {
                Some(0) => return Err(err("concurrency must be at least 1".into())),
                Some(n) => Some(((n / div).max(1), Arc::new(DashMap::new()))),
                None => None,
            };
            let shared = match &s.store {
                None => None,
                Some(url) => {
                    if !url.starts_with("redis://") {
                        return Err(err(format!(
                            "store {url:?}: only redis://host:port[/db] is supported"
                        )));
                    }
                    let st = match stores.get(url) {
                        Some(st) => st.clone(),
                        None => {
                            let st = store::Store::open(url).map_err(err)?;
                            stores.insert(url.clone(), st.clone());
                            st
                        }
                    };
                    let on_error =
                        store::OnError::parse(s.on_store_error.as_deref().unwrap_or("local"))
                            .map_err(err)?;
                    let dur = |what: &str, v: &Option<String>, default: &str| {
                        humantime::parse_duration(v.as_deref().unwrap_or(default))
                            .map_err(|e| err(format!("{what}: {e}")))
                    };
                    let timeout = dur("store_timeout", &s.store_timeout, "20ms")?;
                    let lease_ttl = dur("lease_ttl", &s.lease_ttl, "5min")?;
                    let (interval_us, burst) = match &s.rate {
                        Some(r) => {
                            let (n, period) = parse_rate(r).map_err(err)?;
                            (
                                (period.as_micros() as u64 / u64::from(n)).max(1),
                                s.burst.unwrap_or(n),
                            )
                        }
                        None => (0, 0),
                    };
                    let limit = match &s.rate {
                        Some(r) => parse_rate(r).map_err(err)?.0,
                        None => s.concurrency.unwrap_or(0),
                    };
                    Some(Shared {
                        side: store::Shared::new(st, &name, on_error, timeout),
                        limit,
                        interval_us,
                        burst,
                        cap: s.concurrency.unwrap_or(0),
                        lease_ttl,
                    })
                }
            };
            if rate.is_none() && concurrency.is_none() {
                return Err(err("set `rate` and/or `concurrency`".into()));
            }
            if let Some(st) = s.status {
                if st != 429 {
                    return Err(err(format!("status {st}: only 429 is supported (the default answers 200 with a JSON-RPC error)")));
                }
            }
            rules.push(Rule {
                calls: crate::rpc::CallGlobs {
                    method: glob(&name, "method", &s.method)?,
                    tool: glob(&name, "tool", &s.tool)?,
                    resource: glob(&name, "resource", &s.resource)?,
                    skill: glob(&name, "skill", &s.skill)?,
                },
                name,
                key,
                rate,
                concurrency,
                shadow: s.shadow,
                status: s.status,
                code: s.code.or(default_code),
                shared,
            });
        }
        Ok(Limiter {
            rules,
            faults: Default::default(),
            stages: Default::default(),
            hasher: std::collections::hash_map::RandomState::new(),
            clock,
        })
    }

    /// No rate-limit rule and no stage (deny, fault): nothing to decide.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.stages.is_empty()
    }

    /// How many rate-limit rules are in force.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether any rate-limit rule is in force (fault rules aside).
    pub fn has_rate_rules(&self) -> bool {
        !self.rules.is_empty()
    }

    /// The same rules with `faults` decided after them.
    pub fn with_faults(self, faults: crate::flow::fault::Faults) -> Self {
        self.with_stages(faults, None)
    }

    /// The same rules with the pipeline's stages after them: `deny`, then `faults`.
    pub fn with_stages(
        mut self,
        faults: crate::flow::fault::Faults,
        deny: Option<crate::flow::deny::Deny>,
    ) -> Self {
        let faults = Arc::new(faults);
        let mut stages: Vec<Box<dyn crate::flow::Stage>> = Vec::new();
        if let Some(d) = deny {
            stages.push(Box::new(d));
        }
        if !faults.is_empty() {
            stages.push(Box::new(crate::flow::FaultStage(faults.clone())));
        }
        self.faults = faults;
        self.stages = crate::flow::Stages::new(stages);
        self
    }

    fn key(&self, i: usize, rule: &Rule<C>, keys: &RequestKeys<'_>) -> u64 {
        let mut h = self.hasher.build_hasher();
        i.hash(&mut h);
        match &rule.key {
            KeyBy::Global => {}
            KeyBy::Peer => keys.peer.hash(&mut h),
            KeyBy::Session => keys.session.hash(&mut h),
            KeyBy::Header(name) => {
                for v in keys.headers.get_all(name) {
                    v.as_bytes().hash(&mut h);
                }
            }
        }
        h.finish()
    }

    /// A key's value as the shared store names it (hashed there): the same in every rpctap.
    fn material(rule: &Rule<C>, keys: &RequestKeys<'_>) -> Vec<u8> {
        match &rule.key {
            KeyBy::Global => b"global".to_vec(),
            KeyBy::Peer => format!("peer:{}", keys.peer).into_bytes(),
            KeyBy::Session => format!("session:{}", keys.session.unwrap_or("")).into_bytes(),
            KeyBy::Header(name) => {
                let mut m = format!("header:{name}").into_bytes();
                for v in keys.headers.get_all(name) {
                    m.push(0);
                    m.extend_from_slice(v.as_bytes());
                }
                m
            }
        }
    }

    /// Whether a rule matches a call.
    fn matches(r: &Rule<C>, call: &CallInfo<'_>) -> bool {
        r.calls.matches(call)
    }

    /// Whether any rule keeps its counters in a shared store.
    pub fn has_shared(&self) -> bool {
        self.rules.iter().any(|r| r.shared.is_some())
    }

    /// Asks the shared stores about a request's calls (`None`: a member that is not a call or
    /// notification), all at once: one round trip per store. A key refused until T is refused
    /// here until T without asking.
    pub async fn ask_shared(
        &self,
        calls: &[Option<CallInfo<'_>>],
        keys: &RequestKeys<'_>,
    ) -> SharedVerdicts {
        let mut out = SharedVerdicts::new();
        let now = std::time::Instant::now();
        type Group = (
            Arc<store::Store>,
            Duration,
            Vec<store::Ask>,
            Vec<(usize, usize)>,
        );
        let mut groups: Vec<Group> = Vec::new();
        for (ci, call) in calls.iter().enumerate() {
            let Some(call) = call else { continue };
            for (ri, r) in self.rules.iter().enumerate() {
                let Some(sh) = &r.shared else { continue };
                if !Self::matches(r, call) {
                    continue;
                }
                let key = self.key(ri, r, keys);
                if let Some(d) = sh.side.refused(key, now) {
                    out.insert(
                        (ci, ri),
                        store::Verdict::Refuse {
                            retry: d,
                            until: false,
                        },
                    );
                    continue;
                }
                let (rate_key, lease_key) = sh.side.keys(&Self::material(r, keys));
                let ask = store::Ask {
                    rate_key,
                    lease_key,
                    interval_us: sh.interval_us,
                    burst: sh.burst,
                    cap: sh.cap,
                    lease_ttl_ms: sh.lease_ttl.as_millis() as u64,
                };
                match groups
                    .iter_mut()
                    .find(|g| Arc::ptr_eq(&g.0, &sh.side.store))
                {
                    Some(g) => {
                        g.1 = g.1.max(sh.side.timeout);
                        g.2.push(ask);
                        g.3.push((ci, ri));
                    }
                    None => groups.push((
                        sh.side.store.clone(),
                        sh.side.timeout,
                        vec![ask],
                        vec![(ci, ri)],
                    )),
                }
            }
        }
        let answers =
            futures_util::future::join_all(groups.iter().map(|(st, t, asks, _)| st.ask(asks, *t)))
                .await;
        for ((_, _, _, pos), verdicts) in groups.into_iter().zip(answers) {
            out.extend(pos.into_iter().zip(verdicts));
        }
        out
    }

    fn refusal(r: &Rule<C>, retry_after: Duration, limit: u32) -> Refusal {
        Refusal {
            rule: r.name.clone(),
            retry_after,
            status: r.status,
            code: r.code.unwrap_or(DEFAULT_CODE),
            limit,
            fault: None,
        }
    }

    /// A rule's own local counting (for a shared rule: its fallback share).
    fn local(&self, r: &Rule<C>, key: u64) -> (Option<Refusal>, Option<Permit>) {
        let mut refusal: Option<Refusal> = None;
        let mut permit = None;
        if let Some((max, map)) = &r.concurrency {
            let mut e = map.entry(key).or_insert(0);
            if *e >= *max {
                refusal = Some(Self::refusal(r, Duration::from_secs(1), *max));
            } else if !r.shadow {
                *e += 1;
                permit = Some(Permit {
                    map: Some(map.clone()),
                    key,
                    _lease: None,
                });
            }
        }
        if refusal.is_none() {
            if let Some((lim, n, _)) = &r.rate {
                if let Err(not_until) = lim.check_key(&key) {
                    refusal = Some(Self::refusal(
                        r,
                        not_until.wait_time_from(self.clock.now()),
                        *n,
                    ));
                }
            }
        }
        (refusal, permit)
    }

    /// Decides one call. Shadow rules' would-be refusals go to `shadow`.
    pub fn check(
        &self,
        call: &CallInfo<'_>,
        keys: &RequestKeys<'_>,
        shadow: &mut Vec<Refusal>,
    ) -> Decision {
        self.check_with(call, keys, shadow, None)
    }

    /// Like `check`, with the shared stores' verdicts for this call (its index in the request
    /// and what `ask_shared` returned); a shared rule without a verdict falls back to its
    /// `on_store_error`.
    pub fn check_with(
        &self,
        call: &CallInfo<'_>,
        keys: &RequestKeys<'_>,
        shadow: &mut Vec<Refusal>,
        mut verdicts: Option<(usize, &mut SharedVerdicts)>,
    ) -> Decision {
        let mut permits = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            if !Self::matches(r, call) {
                continue;
            }
            let key = self.key(i, r, keys);
            let (refusal, permit) = match &r.shared {
                None => self.local(r, key),
                Some(sh) => {
                    let limit = sh.limit;
                    let v = verdicts.as_mut().and_then(|(ci, v)| v.remove(&(*ci, i)));
                    match v {
                        Some(store::Verdict::Allow(lease)) => (
                            None,
                            lease.map(|l| Permit {
                                map: None,
                                key,
                                _lease: Some(l),
                            }),
                        ),
                        Some(store::Verdict::Refuse { retry, until }) => {
                            if until {
                                sh.side.remember(key, std::time::Instant::now() + retry);
                            }
                            (Some(Self::refusal(r, retry, limit)), None)
                        }
                        Some(store::Verdict::Unavailable) | None => match sh.side.on_error {
                            store::OnError::Allow => (None, None),
                            store::OnError::Deny => {
                                (Some(Self::refusal(r, Duration::from_secs(1), limit)), None)
                            }
                            store::OnError::Local => self.local(r, key),
                        },
                    }
                }
            };
            // A rule with no code of its own answers with rpctap's, which keeps off A2A's codes
            // for an A2A call.
            let refusal = refusal.map(|mut f| {
                if r.code.is_none() {
                    let a2a = crate::rpc::a2a::is_a2a_only(call.method);
                    f.code = crate::rpc::own::What::RateLimited.code(a2a);
                }
                f
            });
            match (refusal, r.shadow) {
                (Some(f), true) => shadow.push(f),
                (Some(f), false) => return Decision::Refuse(f), // permits drop: released
                (None, _) => permits.extend(permit),
            }
        }
        Decision::Allow(permits)
    }

    /// Evicts idle keys (those whose state equals a fresh one).
    pub fn retain(&self) {
        for r in &self.rules {
            if let Some(sh) = &r.shared {
                sh.side.retain();
            }
            if let Some((lim, _, _)) = &r.rate {
                lim.retain_recent();
                lim.shrink_to_fit();
            }
        }
    }

    /// Keys held by the rate limiters.
    pub fn keys(&self) -> usize {
        self.rules
            .iter()
            .filter_map(|r| r.rate.as_ref())
            .map(|(l, _, _)| l.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn keys(h: &HeaderMap) -> RequestKeys<'_> {
        RequestKeys {
            peer: "127.0.0.1".parse().unwrap(),
            session: None,
            headers: h,
        }
    }

    fn allowed(
        l: &Limiter<FakeRelativeClock>,
        call: CallInfo<'_>,
        h: &HeaderMap,
        n: usize,
    ) -> usize {
        let mut shadow = vec![];
        (0..n)
            .filter(|_| matches!(l.check(&call, &keys(h), &mut shadow), Decision::Allow(_)))
            .count()
    }

    const CALL: CallInfo<'static> = CallInfo {
        method: "tools/call",
        tool: Some("search"),
        resource: None,
        raw: b"",
    };

    #[test]
    fn rate_and_burst_exact_counts() {
        let clock = FakeRelativeClock::default();
        let spec = RuleSpec {
            method: Some("tools/*".into()),
            rate: Some("10/s".into()),
            burst: Some(20),
            ..Default::default()
        };
        let l = Limiter::with_clock(&[spec], DEFAULT_CODE, clock.clone()).unwrap();
        let h = HeaderMap::new();
        assert_eq!(allowed(&l, CALL, &h, 100), 20, "the burst");
        clock.advance(Duration::from_millis(500));
        assert_eq!(
            allowed(&l, CALL, &h, 100),
            5,
            "10/s replenishes 5 in 500 ms"
        );
        clock.advance(Duration::from_secs(10));
        assert_eq!(allowed(&l, CALL, &h, 100), 20, "never more than the burst");
        let mut sh = vec![];
        match l.check(&CALL, &keys(&h), &mut sh) {
            Decision::Refuse(r) => assert_eq!(r.retry_after, Duration::from_millis(100)),
            Decision::Allow(_) => panic!(),
        }
        // Another method is not matched.
        let other = CallInfo {
            method: "ping",
            ..CALL
        };
        assert_eq!(allowed(&l, other, &h, 50), 50);
    }

    #[test]
    fn per_minute_and_tool_globs_and_header_keys() {
        let clock = FakeRelativeClock::default();
        let spec = RuleSpec {
            tool: Some("sea*".into()),
            key: Some("header:x-api-key".into()),
            rate: Some("600/min".into()),
            burst: Some(1),
            ..Default::default()
        };
        let l = Limiter::with_clock(&[spec], DEFAULT_CODE, clock.clone()).unwrap();
        let mut a = HeaderMap::new();
        a.insert("x-api-key", "A".parse().unwrap());
        let mut b = HeaderMap::new();
        b.insert("x-api-key", "B".parse().unwrap());
        assert_eq!(allowed(&l, CALL, &a, 5), 1);
        assert_eq!(allowed(&l, CALL, &b, 5), 1, "each key has its own budget");
        clock.advance(Duration::from_millis(100)); // 600/min = one per 100 ms
        assert_eq!(allowed(&l, CALL, &a, 5), 1);
        let other_tool = CallInfo {
            tool: Some("fetch"),
            ..CALL
        };
        assert_eq!(allowed(&l, other_tool, &a, 5), 5);
    }

    #[test]
    fn concurrency_permits_release_on_drop() {
        let spec = RuleSpec {
            concurrency: Some(2),
            ..Default::default()
        };
        let l = Limiter::with_clock(&[spec], DEFAULT_CODE, FakeRelativeClock::default()).unwrap();
        let h = HeaderMap::new();
        let mut sh = vec![];
        let p1 = l.check(&CALL, &keys(&h), &mut sh);
        let p2 = l.check(&CALL, &keys(&h), &mut sh);
        assert!(matches!(
            l.check(&CALL, &keys(&h), &mut sh),
            Decision::Refuse(_)
        ));
        drop(p1);
        assert!(matches!(
            l.check(&CALL, &keys(&h), &mut sh),
            Decision::Allow(_)
        ));
        drop(p2);
    }

    #[test]
    fn shadow_rules_only_count() {
        let spec = RuleSpec {
            name: Some("try".into()),
            rate: Some("1/h".into()),
            shadow: true,
            ..Default::default()
        };
        let l = Limiter::with_clock(&[spec], DEFAULT_CODE, FakeRelativeClock::default()).unwrap();
        let h = HeaderMap::new();
        let mut sh = vec![];
        for _ in 0..5 {
            assert!(matches!(
                l.check(&CALL, &keys(&h), &mut sh),
                Decision::Allow(_)
            ));
        }
        assert_eq!(sh.len(), 4);
        assert_eq!(&*sh[0].rule, "try");
    }

    #[test]
    fn a_million_distinct_clients_leave_no_keys_behind() {
        let clock = FakeRelativeClock::default();
        let spec = RuleSpec {
            key: Some("header:authorization".into()),
            rate: Some("10/s".into()),
            ..Default::default()
        };
        let l = Limiter::with_clock(&[spec], DEFAULT_CODE, clock.clone()).unwrap();
        let mut sh = vec![];
        let mut h = HeaderMap::new();
        for i in 0..1_000_000u32 {
            h.insert("authorization", http::HeaderValue::from(i));
            let _ = l.check(&CALL, &keys(&h), &mut sh);
            if i % 100_000 == 99_999 {
                clock.advance(Duration::from_secs(2));
                l.retain();
                assert!(l.keys() <= 100_000, "{}", l.keys());
            }
        }
        clock.advance(Duration::from_secs(2));
        l.retain();
        assert_eq!(l.keys(), 0);
    }

    #[test]
    fn bad_rules_are_clear_errors() {
        let bad = |s: RuleSpec| Limiter::new(&[s], DEFAULT_CODE).unwrap_err().to_string();
        assert!(bad(RuleSpec {
            rate: Some("10/fortnight".into()),
            ..Default::default()
        })
        .contains("unit"));
        assert!(bad(RuleSpec {
            rate: Some("x/s".into()),
            ..Default::default()
        })
        .contains("whole number"));
        assert!(bad(RuleSpec::default()).contains("rate"));
        assert!(bad(RuleSpec {
            rate: Some("1/s".into()),
            key: Some("cookie".into()),
            ..Default::default()
        })
        .contains("header:NAME"));
        assert!(bad(RuleSpec {
            rate: Some("1/s".into()),
            method: Some("a[".into()),
            ..Default::default()
        })
        .contains("glob"));
        assert!(RuleSpec::parse_flag("tools/call").is_err());
        assert_eq!(
            RuleSpec::parse_flag("tools/call=10/s")
                .unwrap()
                .method
                .as_deref(),
            Some("tools/call")
        );
    }

    #[test]
    fn shared_rules_are_checked_and_name_the_same_keys_in_every_process() {
        let bad = |spec: RuleSpec| Limiter::new(&[spec], DEFAULT_CODE).unwrap_err().message;
        let shared = RuleSpec {
            name: Some("s".into()),
            rate: Some("10/min".into()),
            key: Some("header:x-api-key".into()),
            store: Some("redis://127.0.0.1:6379".into()),
            ..Default::default()
        };
        assert!(bad(RuleSpec {
            replicas: Some(2),
            store: None,
            ..shared.clone()
        })
        .contains("need a `store`"));
        assert!(bad(RuleSpec {
            on_store_error: Some("maybe".into()),
            ..shared.clone()
        })
        .contains("allow, deny or local"));
        assert!(bad(RuleSpec {
            store: Some("memcached://x".into()),
            ..shared.clone()
        })
        .contains("redis://"));
        assert!(bad(RuleSpec {
            store_timeout: Some("soon".into()),
            ..shared.clone()
        })
        .contains("store_timeout"));
        // Two limiters (two processes) name a key's value alike, and never in clear.
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "secret-key-1".parse().unwrap());
        let names = || {
            let l = Limiter::new(std::slice::from_ref(&shared), DEFAULT_CODE).unwrap();
            let r = &l.rules[0];
            r.shared
                .as_ref()
                .unwrap()
                .side
                .keys(&Limiter::material(r, &keys(&h)))
        };
        let (a, b) = (names(), names());
        assert_eq!(a, b);
        assert!(
            a.0.starts_with("rpctap:limit:") && !a.0.contains("secret"),
            "{a:?}"
        );
        // The local fallback counts a replica's share.
        let l = Limiter::new(
            &[RuleSpec {
                replicas: Some(4),
                rate: Some("8/min".into()),
                ..shared
            }],
            DEFAULT_CODE,
        )
        .unwrap();
        let mut shadow = vec![];
        let allowed = (0..10)
            .filter(|_| matches!(l.check(&CALL, &keys(&h), &mut shadow), Decision::Allow(_)))
            .count();
        assert_eq!(allowed, 2, "8 / 4 replicas, without the store's verdicts");
    }
}
