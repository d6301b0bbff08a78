//! Header names read off the wire by the engine's two readers (a request's head on the lean
//! reader, an upstream reply's on the lean leg). `http::HeaderName::from_bytes` lowers every
//! name through a table into a scratch buffer before it looks the standard ones up (~120
//! instructions a name, six names on a plain call: benches/RESULTS.md, session 40); the names
//! nearly every JSON-RPC exchange carries, in the two spellings clients and servers send (all
//! lower case, as HTTP/2 and most servers write them, and Title-Case, as curl, wrk and many
//! clients do), are recognised here by their exact bytes first. Anything else — another
//! spelling, another name — goes to `from_bytes`, so what is accepted and how it is named
//! cannot differ from it (`every_known_spelling_is_what_from_bytes_makes`).

use http::header::{self, HeaderName, InvalidHeaderName};

/// The name as `HeaderName::from_bytes` would make it.
#[inline]
pub fn header_name(bytes: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
    match known(bytes) {
        Some(name) => Ok(name),
        None => HeaderName::from_bytes(bytes),
    }
}

/// One of the common names in one of its two usual spellings: dispatched on the length, then
/// compared whole with constants of that length (which the compiler compares in a few word
/// loads, no `memcmp` call).
#[inline]
fn known(b: &[u8]) -> Option<HeaderName> {
    macro_rules! either {
        ($lower:literal, $title:literal, $name:expr) => {
            (b == $lower || b == $title).then_some($name)
        };
    }
    match b.len() {
        4 => match b[0] {
            b'h' | b'H' => either!(b"host", b"Host", header::HOST),
            b'd' | b'D' => either!(b"date", b"Date", header::DATE),
            _ => None,
        },
        6 => match b[0] {
            b'a' | b'A' => either!(b"accept", b"Accept", header::ACCEPT),
            b's' | b'S' => either!(b"server", b"Server", header::SERVER),
            _ => None,
        },
        10 => match b[0] {
            b'c' | b'C' => either!(b"connection", b"Connection", header::CONNECTION),
            b'u' | b'U' => either!(b"user-agent", b"User-Agent", header::USER_AGENT),
            _ => None,
        },
        12 => either!(b"content-type", b"Content-Type", header::CONTENT_TYPE),
        13 => either!(b"authorization", b"Authorization", header::AUTHORIZATION),
        14 => match b[0] {
            b'c' | b'C' => either!(b"content-length", b"Content-Length", header::CONTENT_LENGTH),
            b'm' | b'M' => either!(b"mcp-session-id", b"Mcp-Session-Id", MCP_SESSION_ID),
            _ => None,
        },
        17 => either!(
            b"transfer-encoding",
            b"Transfer-Encoding",
            header::TRANSFER_ENCODING
        ),
        _ => None,
    }
}

/// MCP's session header, as `from_bytes` names it (lower case, not one of http's own).
const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_spelling_is_what_from_bytes_makes() {
        let names = [
            "host",
            "date",
            "accept",
            "server",
            "connection",
            "user-agent",
            "content-type",
            "authorization",
            "content-length",
            "mcp-session-id",
            "transfer-encoding",
        ];
        for n in names {
            let title: String = n
                .split('-')
                .map(|w| w[..1].to_ascii_uppercase() + &w[1..])
                .collect::<Vec<_>>()
                .join("-");
            for spelling in [n.to_string(), title, n.to_ascii_uppercase()] {
                let b = spelling.as_bytes();
                assert_eq!(header_name(b).unwrap(), HeaderName::from_bytes(b).unwrap());
                assert_eq!(header_name(b).unwrap().as_str(), n);
            }
            assert!(
                known(n.as_bytes()).is_some(),
                "{n} is recognised by its bytes"
            );
        }
        // Near misses and what `from_bytes` refuses are its verdicts, not ours.
        for b in [
            &b"hos t"[..],
            b"Host:",
            b"h\xc3\xb3st",
            b"",
            b"content-typf",
            b"Mcp-Session-Idx",
            b"x-custom",
        ] {
            assert_eq!(
                header_name(b).map_err(|_| ()),
                HeaderName::from_bytes(b).map_err(|_| ())
            );
        }
    }
}
