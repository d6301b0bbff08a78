//! HTTP media types, read in any letter case: shared by the proxy, the inspector, the demo
//! server, replay, the mock and the exports.

/// Whether `hay` contains `needle` (ASCII, lower-case) in any letter case — a media type check
/// without lower-casing a copy.
pub fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    let Some(first) = needle.as_bytes().first().map(u8::to_ascii_lowercase) else {
        return true;
    };
    let (hay_b, needle_b) = (hay.as_bytes(), needle.as_bytes());
    // Each request's and reply's content type is searched, and most start or end with the
    // needle (`text/event-stream`, `application/json`): those two places are compared first.
    // Exactly first (a compare of whole words), then in any case (byte by byte).
    let n = needle_b.len();
    if hay_b.len() >= n {
        let (start, end) = (&hay_b[..n], &hay_b[hay_b.len() - n..]);
        if start == needle_b
            || end == needle_b
            || start.eq_ignore_ascii_case(needle_b)
            || end.eq_ignore_ascii_case(needle_b)
        {
            return true;
        }
    }
    // Elsewhere the whole needle is compared only where its first letter is.
    hay_b
        .windows(n)
        .any(|w| w[0].to_ascii_lowercase() == first && w.eq_ignore_ascii_case(needle_b))
}

/// Whether a `Content-Type` is `text/event-stream` (parameters allowed), in any letter case.
pub fn is_event_stream(content_type: &str) -> bool {
    content_type
        .get(..17)
        .is_some_and(|p| p.eq_ignore_ascii_case("text/event-stream"))
}

/// Whether a request's `Accept` headers take `text/event-stream`, in any letter case.
pub fn accepts_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| contains_ignore_case(v, "text/event-stream"))
}

/// Of a response's `WWW-Authenticate` headers (a server may offer several challenges, one per
/// header: `Bearer …`, `DPoP …` of RFC 9449), the one MCP's authorization rule reads: the first
/// that names the protected-resource metadata, else the first. Whether `next` takes the place
/// of the one kept so far (`have`).
pub fn better_challenge(have: Option<&str>, next: &str) -> bool {
    let named = |w: &str| contains_ignore_case(w, "resource_metadata");
    match have {
        None => true,
        Some(h) => !named(h) && named(next),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_match_in_any_letter_case() {
        assert!(contains_ignore_case(
            "Application/JSON; charset=UTF-8",
            "json"
        ));
        assert!(contains_ignore_case("application/vnd.api+Json", "json"));
        assert!(!contains_ignore_case("text/plain", "json"));
        assert!(!contains_ignore_case("", "json"));
        assert!(contains_ignore_case("", ""));
        assert!(is_event_stream("Text/Event-Stream; charset=utf-8"));
        assert!(is_event_stream("text/event-stream"));
        assert!(!is_event_stream("text/event"));
        assert!(!is_event_stream("application/json"));
        let mut h = http::HeaderMap::new();
        assert!(!accepts_event_stream(&h));
        h.append(http::header::ACCEPT, "application/json".parse().unwrap());
        assert!(!accepts_event_stream(&h));
        h.append(http::header::ACCEPT, "Text/Event-Stream".parse().unwrap());
        assert!(accepts_event_stream(&h));
    }
}
