//! Who may drive a listener rpctap serves itself — `serve`'s MCP endpoint and the admin
//! listener — checked on every request before anything else reads it.
//!
//! Why: a listener on loopback is reachable by every web page the user opens. A page cannot
//! read another origin's answers, but it can *send*: a `POST` with `Content-Type: text/plain`
//! goes without a preflight, and a name the attacker controls can be made to resolve to
//! 127.0.0.1 (DNS rebinding), after which the page reads the answers too. MCP's Streamable HTTP
//! transport requires servers to validate `Origin` for this reason. The checks, in order:
//!
//! - **Token** (when one is set): `Authorization: Bearer TOKEN`, compared in constant time, or
//!   `401`. A page cannot know it, so with a token the name checks below are not needed.
//! - **Host**: exactly one, naming the listen address — its IP, or `localhost` on loopback, any
//!   IP literal when listening on all addresses — or a name given with `--allow-host`; else
//!   `400` (none, or two) or `403` (another name: a rebound one).
//! - **Origin** (browsers send it on every cross-origin request and on `POST`s): absent, the
//!   listen address's own (`http://127.0.0.1:PORT`, `http://localhost:PORT`), or one given
//!   with `--allow-origin`; else `403`.
//! - **Content type** (where JSON is all the endpoint takes): a `POST` whose `Content-Type` is
//!   not `application/json` is `415` — the content types a page may send without a preflight
//!   are all refused.

use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use std::net::{IpAddr, SocketAddr};
use subtle::ConstantTimeEq as _;

/// What a listener allows beyond its own address (`--allow-host`, `--allow-origin`) and the
/// token it asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuardConfig {
    /// Host names (with or without a port) a request's `Host` may give.
    pub allow_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) a request's `Origin` may give.
    pub allow_origins: Vec<String>,
    /// `Authorization: Bearer` value required on every request.
    pub token: Option<String>,
    /// `POST`s must be `application/json` (`415` otherwise).
    pub json_posts: bool,
    /// A proxy's check (`proxy` on loopback): only a `Host` naming another server is refused.
    /// rpctap sends the upstream a `Host` of its own, so the upstream's check can no longer
    /// see the page's: rpctap makes that one. An absent `Host` (HTTP/1.0) and a malformed one
    /// are the proxy's framing rules' to answer, and `Origin` goes to the upstream unchanged,
    /// whose check it stays.
    pub host_only: bool,
}

/// The checks of one bound listener ([`GuardConfig`] and the address it got).
#[derive(Clone, Debug)]
pub struct Guard {
    cfg: GuardConfig,
    addr: SocketAddr,
    /// `Host` values that name this listener as clients write them (`IP:PORT`, and
    /// `localhost:PORT` on loopback): compared as bytes first, so the usual request costs no
    /// parsing (a loopback proxy checks every request).
    own: Vec<String>,
}

/// Why a request was refused: the status and a one-line reason for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub status: StatusCode,
    pub why: String,
}

/// A head's first two `Host` values, found by a walk over its few headers (a hashed lookup of
/// the name costs more than comparing a handful of standard names: this runs on every request
/// a loopback proxy takes).
fn hosts(headers: &HeaderMap) -> (Option<&HeaderValue>, Option<&HeaderValue>) {
    let mut found = headers.iter().filter(|(n, _)| *n == HOST).map(|(_, v)| v);
    (found.next(), found.next())
}

fn refused(status: StatusCode, why: impl Into<String>) -> Refused {
    Refused {
        status,
        why: why.into(),
    }
}

impl Guard {
    pub fn new(mut cfg: GuardConfig, addr: SocketAddr) -> Guard {
        cfg.token = cfg.token.filter(|t| !t.is_empty());
        for h in cfg
            .allow_hosts
            .iter_mut()
            .chain(cfg.allow_origins.iter_mut())
        {
            *h = h.trim().trim_end_matches('/').to_ascii_lowercase();
        }
        let mut own = vec![addr.to_string()];
        if addr.ip().is_loopback() {
            own.push(format!("localhost:{}", addr.port()));
        }
        Guard { cfg, addr, own }
    }

    /// Whether a listen address needs a token: anything but loopback is reachable from other
    /// machines, where no name check keeps anyone out.
    pub fn needs_token(addr: &SocketAddr) -> bool {
        !addr.ip().is_loopback()
    }

    /// Checks one request's head (see the module's comment for the rules).
    pub fn check(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), Refused> {
        if self.cfg.host_only {
            return self.check_host_name(uri, headers);
        }
        if let Some(token) = &self.cfg.token {
            let given = headers
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
                return Err(refused(
                    StatusCode::UNAUTHORIZED,
                    "this endpoint needs `Authorization: Bearer TOKEN` (the token it was started with)",
                ));
            }
        } else {
            self.check_host(uri, headers)?;
        }
        if let Some(origin) = headers.get(ORIGIN) {
            let ok = origin.to_str().is_ok_and(|o| self.origin_allowed(o));
            if !ok {
                return Err(refused(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Origin {:?} is not allowed here (allow it with --allow-origin)",
                        String::from_utf8_lossy(origin.as_bytes())
                    ),
                ));
            }
        }
        if self.cfg.json_posts && method == Method::POST && !is_json(headers) {
            return Err(refused(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a POST here must have Content-Type: application/json",
            ));
        }
        Ok(())
    }

    fn check_host(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), Refused> {
        let host = match hosts(headers) {
            (Some(h), None) => h.to_str().ok(),
            (Some(_), Some(_)) => {
                return Err(refused(
                    StatusCode::BAD_REQUEST,
                    "more than one Host header",
                ))
            }
            // HTTP/2 names the authority in the request target instead.
            (None, _) => uri.authority().map(|a| a.as_str()),
        };
        let Some(host) = host else {
            return Err(refused(StatusCode::BAD_REQUEST, "no Host header"));
        };
        if self.host_verdict(host) == Some(true) {
            Ok(())
        } else {
            Err(refused(
                StatusCode::FORBIDDEN,
                format!("Host {host:?} does not name this listener (allow it with --allow-host)"),
            ))
        }
    }

    /// [`GuardConfig::host_only`]'s check: a well-formed `Host` that names another server.
    fn check_host_name(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), Refused> {
        let host = match hosts(headers) {
            // The listener's own `IP:PORT` as clients write it (no letters to compare in any
            // case): nothing more to read. This runs on every request a loopback proxy takes.
            (Some(h), None) if self.own.iter().any(|o| o.as_bytes() == h.as_bytes()) => {
                return Ok(())
            }
            (Some(h), None) => h.to_str().ok(),
            (None, _) => uri.authority().map(|a| a.as_str()),
            _ => None,
        };
        if host.is_some_and(|h| self.own.iter().any(|o| o.eq_ignore_ascii_case(h))) {
            return Ok(());
        }
        match host {
            // A malformed `Host` is the framing rules' (400), not this check's.
            Some(h) if self.host_verdict(h) == Some(false) => {
                Err(refused(
                    StatusCode::FORBIDDEN,
                    format!("Host {h:?} does not name this listener: a page under another name (DNS rebinding) is refused on loopback (allow the name with --allow-host)"),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether a `Host` value (`name[:port]`) names this listener or an allowed name, compared
    /// in any letter case without a lowered copy (a loopback proxy asks this of every request
    /// whose `Host` is not one of `own`); `None` for a value that is no `name[:port]` (and not
    /// allowed as written): one split of the value decides both.
    fn host_verdict(&self, host: &str) -> Option<bool> {
        let host = host.trim();
        let allowed = |v: &str| {
            self.cfg
                .allow_hosts
                .iter()
                .any(|a| a.eq_ignore_ascii_case(v))
        };
        if allowed(host) {
            return Some(true);
        }
        let (name, _port) = split_host(host)?;
        Some(allowed(name) || self.names_me(name))
    }

    /// A host name (no port) that is this listener's address. `own` (the byte-compared fast
    /// path) must stay a subset of what this accepts.
    fn names_me(&self, name: &str) -> bool {
        let ip = self.addr.ip();
        if name.eq_ignore_ascii_case("localhost") {
            return ip.is_loopback() || ip.is_unspecified();
        }
        match name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            Ok(given) => {
                given == ip || ip.is_unspecified() || (ip.is_loopback() && given.is_loopback())
            }
            Err(_) => false,
        }
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
        if self.cfg.allow_origins.contains(&origin) {
            return true;
        }
        // The listener's own origin: a page it served itself (same name and port).
        let Some(rest) = origin.strip_prefix("http://") else {
            return false;
        };
        match split_host(rest) {
            Some((name, Some(port))) => port == self.addr.port() && self.names_me(name),
            _ => false,
        }
    }
}

/// Whether a head's `Content-Type` is `application/json` (parameters allowed): the one type a
/// web page cannot send without asking first.
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// `name[:port]` (a bracketed IPv6 name keeps its brackets); `None` when it is not one.
fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')?;
        let (name, rest) = host.split_at(end + 1);
        match rest {
            "" => (name, None),
            r => (name, Some(r.strip_prefix(':')?)),
        }
    } else {
        match host.rsplit_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (host, None),
        }
    };
    if name.is_empty() || name.contains(['/', '@', ' ']) {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    Some((name, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn guard(cfg: GuardConfig) -> Guard {
        Guard::new(cfg, "127.0.0.1:8931".parse().unwrap())
    }

    #[test]
    fn a_proxys_check_refuses_only_a_well_formed_other_name() {
        let g = guard(GuardConfig {
            host_only: true,
            ..Default::default()
        });
        let uri = Uri::from_static("/mcp");
        let check = |pairs: &[(&str, &str)]| g.check(&Method::POST, &uri, &head(pairs));
        assert_eq!(
            check(&[("host", "evil.example:8931")]).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        for ok in [
            &[("host", "localhost:8931")][..],
            &[("host", "LocalHost:8931")],
            &[("host", "127.0.0.1")],
            &[],
            &[("host", "a b")],
            &[("host", "a"), ("host", "b")],
            &[("host", "localhost"), ("origin", "http://evil.example")],
            &[("host", "localhost"), ("content-type", "text/plain")],
        ] {
            assert!(check(ok).is_ok(), "{ok:?}");
        }
        let named = guard(GuardConfig {
            host_only: true,
            allow_hosts: vec!["Evil.Example".into()],
            ..Default::default()
        });
        assert!(named
            .check(&Method::GET, &uri, &head(&[("host", "EVIL.example:1")]))
            .is_ok());
    }

    fn status(g: &Guard, m: Method, pairs: &[(&str, &str)]) -> u16 {
        match g.check(&m, &Uri::from_static("/mcp"), &head(pairs)) {
            Ok(()) => 200,
            Err(r) => r.status.as_u16(),
        }
    }

    #[test]
    fn hosts_name_the_listener_or_are_allowed() {
        let g = guard(GuardConfig {
            allow_hosts: vec!["Bridge.Internal".into()],
            ..Default::default()
        });
        for ok in [
            "127.0.0.1:8931",
            "localhost:8931",
            "localhost",
            "[::1]:8931",
            "bridge.internal:80",
        ] {
            assert_eq!(status(&g, Method::GET, &[("host", ok)]), 200, "{ok}");
        }
        assert_eq!(
            status(&g, Method::GET, &[("host", "evil.example:8931")]),
            403
        );
        assert_eq!(status(&g, Method::GET, &[("host", "10.0.0.1:8931")]), 403);
        assert_eq!(status(&g, Method::GET, &[]), 400);
        assert_eq!(
            status(
                &g,
                Method::GET,
                &[("host", "localhost"), ("host", "localhost")]
            ),
            400
        );
        assert_eq!(status(&g, Method::GET, &[("host", "local host")]), 403);
    }

    #[test]
    fn origins_are_the_listeners_own_or_allowed() {
        let g = guard(GuardConfig {
            allow_origins: vec!["https://app.example/".into()],
            ..Default::default()
        });
        let h = ("host", "127.0.0.1:8931");
        for ok in [
            "http://127.0.0.1:8931",
            "http://localhost:8931",
            "https://app.example",
        ] {
            assert_eq!(status(&g, Method::GET, &[h, ("origin", ok)]), 200, "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost:3000",
            "null",
            "http://127.0.0.1",
            "https://app.example.evil",
        ] {
            assert_eq!(status(&g, Method::GET, &[h, ("origin", bad)]), 403, "{bad}");
        }
    }

    #[test]
    fn posts_must_be_json_where_asked() {
        let g = guard(GuardConfig {
            json_posts: true,
            ..Default::default()
        });
        let h = ("host", "localhost:8931");
        assert_eq!(
            status(&g, Method::POST, &[h, ("content-type", "text/plain")]),
            415
        );
        assert_eq!(status(&g, Method::POST, &[h]), 415);
        assert_eq!(
            status(
                &g,
                Method::POST,
                &[h, ("content-type", "Application/JSON; charset=utf-8")]
            ),
            200
        );
        assert_eq!(status(&g, Method::GET, &[h]), 200);
    }

    #[test]
    fn a_token_stands_in_for_the_name_checks() {
        let g = Guard::new(
            GuardConfig {
                token: Some("s3cret".into()),
                ..Default::default()
            },
            "0.0.0.0:8931".parse().unwrap(),
        );
        assert_eq!(status(&g, Method::GET, &[("host", "any.name")]), 401);
        assert_eq!(
            status(
                &g,
                Method::GET,
                &[("host", "any.name"), ("authorization", "Bearer nope")]
            ),
            401
        );
        assert_eq!(
            status(
                &g,
                Method::GET,
                &[("host", "any.name"), ("authorization", "Bearer s3cret")]
            ),
            200
        );
        assert!(Guard::needs_token(&"0.0.0.0:1".parse().unwrap()));
        assert!(!Guard::needs_token(&"127.0.0.1:1".parse().unwrap()));
    }
}
