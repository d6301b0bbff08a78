//! Header rules of a reverse proxy: hop-by-hop headers (RFC 9110 §7.6.1) are removed, `Host` is
//! rewritten to the upstream's unless asked not to, and `X-Forwarded-For`/`-Proto` are added.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use std::net::IpAddr;

static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Whether a request asks for a protocol upgrade (WebSocket…): then `Connection: upgrade` and
/// `Upgrade` are kept so the upstream can answer 101.
pub fn is_upgrade(h: &HeaderMap) -> bool {
    h.contains_key(header::UPGRADE) && crate::server::connection_has(h, "upgrade")
}

/// The size of an HTTP/1 request head as written the usual way: its request line and each field
/// line (`name: value`, one space after the colon) with their line ends. What a sender wrote
/// otherwise (no space, or several) is not known once hyper has parsed the head.
pub fn head_size<B>(req: &http::Request<B>) -> usize {
    let target = req.uri().path_and_query().map_or(1, |p| p.as_str().len());
    let line = req.method().as_str().len() + 1 + target + 1 + "HTTP/1.1\r\n".len();
    let fields: usize = req
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .sum();
    line + fields + 2
}

/// The bytes a `Host` value may hold (RFC 3986 `host [":" port]`: unreserved, sub-delims,
/// `:`, `[`, `]`, `%`), as a table: this is asked for every request, and a table costs one load
/// per byte where a search through the punctuation was a call per byte.
const HOST_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric();
        c += 1;
    }
    let punct = b"-._~!$&'()*+,;=:[]%";
    let mut i = 0;
    while i < punct.len() {
        t[punct[i] as usize] = true;
        i += 1;
    }
    t
};

/// A `Host` value that is a `host[:port]` (an empty one is allowed: the target had no
/// authority).
fn host_text(v: &[u8]) -> bool {
    v.iter().all(|&c| HOST_BYTE[c as usize])
}

/// The MCP session header.
pub const MCP_SESSION: HeaderName = HeaderName::from_static("mcp-session-id");
pub const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Removes the hop-by-hop headers, including those the `Connection` header names.
/// With `keep_upgrade`, `Connection: upgrade` and `Upgrade` stay. `any` is what [`pick`] found
/// for this head (`hop_by_hop`): most messages carry none, and then nothing is looked up.
pub fn strip_hop_by_hop(h: &mut HeaderMap, keep_upgrade: bool, any: bool) {
    if any {
        let named: Vec<HeaderName> = h
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .filter(|n| !(keep_upgrade && n == header::UPGRADE))
            .collect();
        for n in named {
            h.remove(n);
        }
        for n in HOP_BY_HOP.iter() {
            h.remove(n);
        }
        if !keep_upgrade {
            h.remove(header::UPGRADE);
        }
    }
    if keep_upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// What the proxy and the inspector read from a message's head, found in one pass over its
/// few headers (cheaper than a hashed lookup for each, and than a pass per question); the
/// first value of a name counts, as with `HeaderMap::get`.
#[derive(Default)]
pub struct Picked<'a> {
    pub content_type: Option<&'a str>,
    pub session: Option<&'a str>,
    pub content_length: Option<u64>,
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a str>,
    /// `Mcp-Method`, `Mcp-Name` (requests), `WWW-Authenticate` (responses).
    pub mcp_method: Option<&'a str>,
    pub mcp_name: Option<&'a str>,
    /// `A2A-Version` (requests).
    pub a2a_version: Option<&'a str>,
    pub www_authenticate: Option<&'a str>,
    /// A hop-by-hop header is present (RFC 9110 §7.6.1: one of the fixed names or
    /// `Upgrade`; the names `Connection` lists come with a `Connection` header).
    pub hop_by_hop: bool,
    /// An `Accept` value takes `text/event-stream`, in any letter case.
    pub accepts_sse: bool,
    /// `Upgrade` is present and `Connection` lists `upgrade`: a protocol upgrade is asked for.
    pub upgrade: bool,
    /// A `Content-Length` that is not one value of plain digits (a second one, a list, a sign):
    /// a reply's is then replaced by rpctap's own before it is forwarded.
    pub odd_length: bool,
    /// How many `Host` headers there were (up to 2) and whether one was no host name: read in
    /// the same pass, so the check of RFC 9112 §3.2 ([`Picked::host_fault`]) looks nothing up.
    hosts: u8,
    host_invalid: bool,
}

impl Picked<'_> {
    /// What is wrong with a request's `Host` (RFC 9112 §3.2), if anything: none in an HTTP/1.1
    /// request, more than one, or a value that is no `host[:port]`. HTTP/2 names the authority
    /// in the request target instead.
    pub fn host_fault(&self, version: http::Version) -> Option<&'static str> {
        match self.hosts {
            0 if version == http::Version::HTTP_11 => Some("no Host header"),
            0 => None,
            1 if self.host_invalid => Some("the Host header is not a host name"),
            1 => None,
            _ => Some("more than one Host header"),
        }
    }
}

/// Reads a head in one pass (see [`Picked`]).
pub fn pick(h: &HeaderMap) -> Picked<'_> {
    let mut p = Picked::default();
    let (mut ct, mut session, mut len, mut version) = (false, false, false, false);
    let (mut upgrade_header, mut connection_upgrade) = (false, false);
    for (name, value) in h {
        // One match on the name's text: a standard name's text is a table entry, and a match
        // on strings dispatches on the length before comparing bytes (cheaper than comparing
        // the name with each of a dozen `HeaderName`s).
        match name.as_str() {
            "content-type" if !ct => {
                ct = true;
                p.content_type = value.to_str().ok();
            }
            "content-length" if !len => {
                len = true;
                p.content_length = crate::server::plain_length(value.as_bytes());
                p.odd_length = p.content_length.is_none();
            }
            "content-length" => p.odd_length = true,
            "mcp-session-id" if !session => {
                session = true;
                p.session = value.to_str().ok();
            }
            "mcp-protocol-version" if !version => {
                version = true;
                p.protocol_version = value.to_str().ok();
            }
            "host" => {
                p.hosts = p.hosts.saturating_add(1).min(2);
                p.host_invalid |= !host_text(value.as_bytes());
            }
            "mcp-method" if p.mcp_method.is_none() => p.mcp_method = value.to_str().ok(),
            "mcp-name" if p.mcp_name.is_none() => p.mcp_name = value.to_str().ok(),
            "a2a-version" if p.a2a_version.is_none() => p.a2a_version = value.to_str().ok(),
            "www-authenticate" if p.www_authenticate.is_none() => {
                p.www_authenticate = value.to_str().ok()
            }
            // A later challenge (`DPoP` beside `Bearer`): kept if it is the one that names the
            // protected-resource metadata (`media::better_challenge`).
            "www-authenticate" => match value.to_str() {
                Ok(v) if crate::media::better_challenge(p.www_authenticate, v) => {
                    p.www_authenticate = Some(v)
                }
                _ => {}
            },
            "accept" => {
                p.accepts_sse |= value
                    .to_str()
                    .is_ok_and(|v| crate::media::contains_ignore_case(v, "text/event-stream"))
            }
            "upgrade" => {
                p.hop_by_hop = true;
                upgrade_header = true;
            }
            "connection" => {
                p.hop_by_hop = true;
                connection_upgrade |= value
                    .to_str()
                    .is_ok_and(|v| crate::server::lists_option(v, "upgrade"));
            }
            "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding" => p.hop_by_hop = true,
            _ => {}
        }
    }
    p.upgrade = upgrade_header && connection_upgrade;
    p
}

/// Sets `name` to `value`, as `HeaderMap::insert` does (every earlier value gone). A name there
/// once has its value replaced in place: `insert` makes room for a new entry before it looks
/// for the name (http 1.x), and the map hyper builds for a head is full, so even a replacement
/// reallocated it — on every call, for `Host`.
///
/// The name is found by a walk over the head, not a lookup: a head holds a few headers, and
/// comparing a standard name is a byte compare where each lookup hashes the name (two lookups
/// cost more than the walk).
pub fn set(h: &mut HeaderMap, name: HeaderName, value: HeaderValue) {
    let (mut seen, mut slot) = (0, None);
    for (n, v) in h.iter_mut() {
        if *n == name {
            seen += 1;
            slot = Some(v);
        }
    }
    match slot {
        Some(v) if seen == 1 => *v = value,
        _ => {
            h.insert(name, value);
        }
    }
}

/// What a forwarded request says of its client: `X-Forwarded-For` gets the client's address
/// appended, `X-Forwarded-Proto` is set. Added by whatever writes the request upstream: the
/// lean path writes them into the request's bytes as it encodes the head
/// (`lean::encode_request`), the others add them to the head's map (`add_to`) — so the common
/// call never grows the client's header map for two headers.
#[derive(Clone, Copy)]
pub struct Forwarded<'a> {
    pub peer: &'a HeaderValue,
    pub proto: &'static str,
}

impl Forwarded<'_> {
    /// Adds them to `h` (an earlier `X-Forwarded-For` keeps its first value, then the client's
    /// address; any `X-Forwarded-Proto` is replaced).
    pub fn add_to(self, h: &mut HeaderMap) {
        match h.entry(X_FORWARDED_FOR) {
            header::Entry::Occupied(mut e) => {
                let v = self.appended_to(e.get());
                if let Ok(v) = HeaderValue::from_bytes(&v) {
                    e.insert(v);
                }
            }
            header::Entry::Vacant(e) => {
                e.insert(self.peer.clone());
            }
        }
        h.insert(X_FORWARDED_PROTO, HeaderValue::from_static(self.proto));
    }

    /// An earlier `X-Forwarded-For` value with the client's address appended.
    pub fn appended_to(self, prev: &HeaderValue) -> Vec<u8> {
        let mut v = Vec::with_capacity(prev.len() + 2 + self.peer.len());
        v.extend_from_slice(prev.as_bytes());
        v.extend_from_slice(b", ");
        v.extend_from_slice(self.peer.as_bytes());
        v
    }
}

/// An IP address as a header value (made once per client connection).
pub fn ip_header(ip: IpAddr) -> HeaderValue {
    // An address's text is always a valid header value; the fallback is unreachable.
    HeaderValue::from_str(&ip.to_string()).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_rules_read_in_the_one_pass() {
        let fault = |hosts: &[&[u8]], v| {
            let mut h = HeaderMap::new();
            for x in hosts {
                h.append(header::HOST, HeaderValue::from_bytes(x).unwrap());
            }
            pick(&h).host_fault(v)
        };
        let v11 = http::Version::HTTP_11;
        assert_eq!(fault(&[b"127.0.0.1:8080"], v11), None);
        assert_eq!(fault(&[b"[::1]:80"], v11), None);
        assert_eq!(fault(&[b"a-b.c_d~!$&'()*+,;=%41"], v11), None);
        assert_eq!(fault(&[b""], v11), None);
        assert_eq!(fault(&[], v11), Some("no Host header"));
        assert_eq!(fault(&[], http::Version::HTTP_10), None);
        assert_eq!(fault(&[], http::Version::HTTP_2), None);
        for bad in [&b"a b"[..], b"a/b", b"a@b", b"a\"b", b"\xe4"] {
            assert_eq!(
                fault(&[bad], v11),
                Some("the Host header is not a host name"),
                "{bad:?}"
            );
        }
        let two = fault(&[b"a", b"a"], v11);
        assert_eq!(two, Some("more than one Host header"));
        assert_eq!(fault(&[b"a", b"b", b"c"], v11), two);
    }

    #[test]
    fn strips_hop_by_hop_and_named() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert("mcp-session-id", HeaderValue::from_static("abc"));
        let any = pick(&h).hop_by_hop;
        strip_hop_by_hop(&mut h, false, any);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("mcp-session-id"));
    }

    #[test]
    fn keeps_upgrade_only_when_asked() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        let mut kept = h.clone();
        let any = pick(&kept).hop_by_hop;
        strip_hop_by_hop(&mut kept, true, any);
        assert_eq!(kept[header::CONNECTION], "upgrade");
        assert_eq!(kept[header::UPGRADE], "websocket");
        let any = pick(&h).hop_by_hop;
        strip_hop_by_hop(&mut h, false, any);
        assert!(h.is_empty());
        // Nothing hop-by-hop: nothing changes.
        let mut plain = HeaderMap::new();
        plain.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let any = pick(&plain).hop_by_hop;
        assert!(!any);
        strip_hop_by_hop(&mut plain, false, any);
        assert_eq!(plain.len(), 1);
    }

    #[test]
    fn pick_reads_the_first_value_of_each_name() {
        let mut h = HeaderMap::new();
        h.append(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.append(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        h.append("Mcp-Session-Id", HeaderValue::from_static("s1"));
        h.append(header::CONTENT_LENGTH, HeaderValue::from_static("42"));
        h.append("x-other", HeaderValue::from_static("1"));
        let p = pick(&h);
        assert_eq!(
            p.content_type,
            h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok())
        );
        assert_eq!(p.content_type, Some("application/json"));
        assert_eq!(p.session, Some("s1"));
        assert_eq!(p.content_length, Some(42));
        let mut bad = HeaderMap::new();
        bad.append(header::CONTENT_LENGTH, HeaderValue::from_static("x"));
        bad.append(header::CONTENT_LENGTH, HeaderValue::from_static("7"));
        let p = pick(&bad);
        assert_eq!(
            (p.content_type, p.session, p.content_length),
            (None, None, None)
        );
    }

    /// The one pass answers what the separate lookups answer, on heads with and without each
    /// kind of header (names in any letter case, several values, tokens with spaces).
    #[test]
    fn pick_agrees_with_the_lookups_it_replaces() {
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("Content-Type", "application/json"), ("Host", "x")],
            &[("Connection", "Upgrade"), ("Upgrade", "websocket")],
            &[("connection", "keep-alive, upgrade "), ("upgrade", "h2c")],
            &[("Upgrade", "websocket")],
            &[("Connection", "close")],
            &[("Connection", "x-hop"), ("x-hop", "1")],
            &[("TE", "trailers")],
            &[("Transfer-Encoding", "chunked")],
            &[("Keep-Alive", "timeout=5")],
            &[("Proxy-Authorization", "Basic eA==")],
            &[("Accept", "application/json, Text/Event-Stream")],
            &[
                ("Accept", "application/json"),
                ("accept", "text/event-stream"),
            ],
            &[("Accept", "text/html")],
            &[("mcp-session-id", "s"), ("x-forwarded-for", "10.0.0.1")],
        ];
        for case in cases {
            let mut h = HeaderMap::new();
            for (n, v) in case.iter() {
                h.append(
                    HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            let p = pick(&h);
            let reference =
                h.contains_key(header::UPGRADE) || HOP_BY_HOP.iter().any(|n| h.contains_key(n));
            assert_eq!(p.hop_by_hop, reference, "{case:?}");
            assert_eq!(p.upgrade, is_upgrade(&h), "{case:?}");
            assert_eq!(
                p.accepts_sse,
                h.get_all(header::ACCEPT).iter().any(|v| v
                    .to_str()
                    .unwrap()
                    .to_ascii_lowercase()
                    .contains("text/event-stream")),
                "{case:?}"
            );
            // Stripping with the flag is stripping every hop-by-hop name by a hashed removal.
            let mut a = h.clone();
            strip_hop_by_hop(&mut a, false, p.hop_by_hop);
            let mut reference_strip = h.clone();
            for n in HOP_BY_HOP.iter().chain([&header::UPGRADE]) {
                reference_strip.remove(n);
            }
            if let Some(named) = h.get(header::CONNECTION) {
                for t in named.to_str().unwrap().split(',') {
                    reference_strip.remove(t.trim());
                }
            }
            assert_eq!(a, reference_strip, "{case:?}");
        }
    }

    #[test]
    fn set_replaces_every_value_as_insert_does() {
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("host", "a")],
            &[("x-a", "1"), ("host", "a"), ("x-b", "2")],
            &[("host", "a"), ("x-a", "1"), ("host", "b")],
        ];
        for case in cases {
            let mut h = HeaderMap::new();
            for (k, v) in *case {
                h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
            }
            let mut reference = h.clone();
            reference.insert(header::HOST, HeaderValue::from_static("up"));
            set(&mut h, header::HOST, HeaderValue::from_static("up"));
            let pairs = |m: &HeaderMap| {
                m.iter()
                    .map(|(k, v)| format!("{k}={v:?}"))
                    .collect::<Vec<_>>()
            };
            assert_eq!(pairs(&h), pairs(&reference), "{case:?}");
        }
    }

    #[test]
    fn forwarded_for_appends() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        let local = ip_header("127.0.0.1".parse().unwrap());
        Forwarded {
            peer: &local,
            proto: "http",
        }
        .add_to(&mut h);
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        let mut fresh = HeaderMap::new();
        let v6 = ip_header("::1".parse().unwrap());
        Forwarded {
            peer: &v6,
            proto: "http",
        }
        .add_to(&mut fresh);
        assert_eq!(fresh["x-forwarded-for"], "::1");
    }
}
