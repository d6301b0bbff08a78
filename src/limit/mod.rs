//! Rate limits per JSON-RPC call: rules that match a method glob, an MCP tool name glob and a
//! resource URI glob, keyed globally, by peer IP, by a header's value (hashed, never kept in
//! clear) or by MCP session; each a GCRA rate with burst (the `governor` crate) and/or a cap on
//! calls in flight. `shadow` rules only count what they would refuse.
//!
//! The limiter decides per call; the proxy splits batches, answers refusals and merges replies
//! (see `proxy`). Idle keys are evicted by `retain`, which the proxy runs every second, so
//! memory follows the keys active within a rule's replenish window, not traffic.

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

/// A permit for one call in flight; released when dropped (the call ended).
#[derive(Debug)]
pub struct Permit {
    map: Arc<DashMap<u64, u32>>,
    key: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let dashmap::mapref::entry::Entry::Occupied(mut o) = self.map.entry(self.key) {
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
    method: Option<GlobMatcher>,
    tool: Option<GlobMatcher>,
    resource: Option<GlobMatcher>,
    key: KeyBy,
    rate: Option<(Keyed<C>, u32, Duration)>,
    concurrency: Option<(u32, Arc<DashMap<u64, u32>>)>,
    shadow: bool,
    status: Option<u16>,
    code: i64,
}

/// What a call carries that rules match on.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallInfo<'a> {
    pub method: &'a str,
    /// `params.name` of `tools/call` (or `prompts/get`).
    pub tool: Option<&'a str>,
    /// `params.uri`.
    pub resource: Option<&'a str>,
}

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
    pub fn new(specs: &[RuleSpec], default_code: i64) -> Result<Self, RuleError> {
        Self::with_clock(specs, default_code, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Limiter<C> {
    /// Builds the rules with a given clock (tests pass a `FakeRelativeClock`).
    pub fn with_clock(specs: &[RuleSpec], default_code: i64, clock: C) -> Result<Self, RuleError> {
        let mut rules = Vec::new();
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
            let rate = match &s.rate {
                Some(r) => {
                    let (n, period) = parse_rate(r).map_err(err)?;
                    let burst = s.burst.unwrap_or(n);
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
                Some(n) => Some((n, Arc::new(DashMap::new()))),
                None => None,
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
                method: glob(&name, "method", &s.method)?,
                tool: glob(&name, "tool", &s.tool)?,
                resource: glob(&name, "resource", &s.resource)?,
                name,
                key,
                rate,
                concurrency,
                shadow: s.shadow,
                status: s.status,
                code: s.code.unwrap_or(default_code),
            });
        }
        Ok(Limiter {
            rules,
            hasher: std::collections::hash_map::RandomState::new(),
            clock,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// How many rules are in force.
    pub fn len(&self) -> usize {
        self.rules.len()
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

    /// Decides one call. Shadow rules' would-be refusals go to `shadow`.
    pub fn check(
        &self,
        call: &CallInfo<'_>,
        keys: &RequestKeys<'_>,
        shadow: &mut Vec<Refusal>,
    ) -> Decision {
        let mut permits = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            let matches = r.method.as_ref().is_none_or(|g| g.is_match(call.method))
                && r.tool
                    .as_ref()
                    .is_none_or(|g| call.tool.is_some_and(|t| g.is_match(t)))
                && r.resource
                    .as_ref()
                    .is_none_or(|g| call.resource.is_some_and(|u| g.is_match(u)));
            if !matches {
                continue;
            }
            let key = self.key(i, r, keys);
            let mut refusal: Option<Refusal> = None;
            let mut permit = None;
            if let Some((max, map)) = &r.concurrency {
                let mut e = map.entry(key).or_insert(0);
                if *e >= *max {
                    refusal = Some(Refusal {
                        rule: r.name.clone(),
                        retry_after: Duration::from_secs(1),
                        status: r.status,
                        code: r.code,
                        limit: *max,
                    });
                } else if !r.shadow {
                    *e += 1;
                    permit = Some(Permit {
                        map: map.clone(),
                        key,
                    });
                }
            }
            if refusal.is_none() {
                if let Some((lim, n, _)) = &r.rate {
                    if let Err(not_until) = lim.check_key(&key) {
                        refusal = Some(Refusal {
                            rule: r.name.clone(),
                            retry_after: not_until.wait_time_from(self.clock.now()),
                            status: r.status,
                            code: r.code,
                            limit: *n,
                        });
                    }
                }
            }
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
}
