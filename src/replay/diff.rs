//! A structural diff of two JSON values, path by path, with ignored paths.
//!
//! Paths read like `result.content[0].text`; an ignore pattern may use `*` for any key and
//! `[*]` for any index (`result.content[*].text`), and ignores the whole subtree it names.

use serde_json::Value;

/// One difference.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Diff {
    pub path: String,
    pub expected: String,
    pub actual: String,
}

impl std::fmt::Display for Diff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: expected {}, got {}",
            self.path, self.expected, self.actual
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
    AnyKey,
    AnyIndex,
}

/// A compiled ignore pattern.
#[derive(Debug, Clone)]
pub struct Pattern(Vec<Seg>);

impl Pattern {
    pub fn parse(s: &str) -> Pattern {
        let mut segs = Vec::new();
        for part in s.split('.').filter(|p| !p.is_empty()) {
            let (name, mut rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if !name.is_empty() {
                segs.push(if name == "*" {
                    Seg::AnyKey
                } else {
                    Seg::Key(name.to_string())
                });
            }
            while let Some(end) = rest.find(']') {
                let inner = &rest[1..end];
                segs.push(match inner {
                    "*" => Seg::AnyIndex,
                    n => n.parse().map(Seg::Index).unwrap_or(Seg::Key(n.to_string())),
                });
                rest = &rest[end + 1..];
            }
        }
        Pattern(segs)
    }

    fn matches_prefix_of(&self, path: &[Seg]) -> bool {
        self.0.len() <= path.len()
            && self.0.iter().zip(path).all(|(p, s)| match (p, s) {
                (Seg::AnyKey, Seg::Key(_)) | (Seg::AnyIndex, Seg::Index(_)) => true,
                (a, b) => a == b,
            })
    }
}

fn render(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
            Seg::AnyKey => s.push_str(".*"),
            Seg::AnyIndex => s.push_str("[*]"),
        }
    }
    if s.is_empty() {
        "$".into()
    } else {
        s
    }
}

fn short(v: Option<&Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(v) => {
            let s = v.to_string();
            if s.chars().count() > 120 {
                format!("{}…", s.chars().take(120).collect::<String>())
            } else {
                s
            }
        }
    }
}

/// The differences between `expected` and `actual` below `root` (e.g. `result`).
pub fn diff(
    root: &str,
    expected: Option<&Value>,
    actual: Option<&Value>,
    ignore: &[Pattern],
) -> Vec<Diff> {
    let mut out = Vec::new();
    let mut path = vec![Seg::Key(root.to_string())];
    walk(&mut path, expected, actual, ignore, &mut out);
    out
}

fn walk(
    path: &mut Vec<Seg>,
    e: Option<&Value>,
    a: Option<&Value>,
    ignore: &[Pattern],
    out: &mut Vec<Diff>,
) {
    if ignore.iter().any(|p| p.matches_prefix_of(path)) {
        return;
    }
    match (e, a) {
        (Some(Value::Object(eo)), Some(Value::Object(ao))) => {
            let mut keys: Vec<&String> = eo.keys().collect();
            for k in ao.keys() {
                if !eo.contains_key(k) {
                    keys.push(k);
                }
            }
            for k in keys {
                path.push(Seg::Key(k.clone()));
                walk(path, eo.get(k), ao.get(k), ignore, out);
                path.pop();
            }
        }
        (Some(Value::Array(ea)), Some(Value::Array(aa))) => {
            for i in 0..ea.len().max(aa.len()) {
                path.push(Seg::Index(i));
                walk(path, ea.get(i), aa.get(i), ignore, out);
                path.pop();
            }
        }
        (e, a) if e == a => {}
        (e, a) => out.push(Diff {
            path: render(path),
            expected: short(e),
            actual: short(a),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_and_ignores() {
        let e = json!({"content":[{"type":"text","text":"3"}],"isError":false,"meta":{"v":"1"}});
        let a = json!({"content":[{"type":"text","text":"4"}],"isError":false,"meta":{"v":"2"},"extra":1});
        let d = diff("result", Some(&e), Some(&a), &[]);
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            vec!["result.content[0].text", "result.meta.v", "result.extra"]
        );
        assert_eq!(
            d[0].to_string(),
            "result.content[0].text: expected \"3\", got \"4\""
        );
        let ign = [
            Pattern::parse("result.content[*].text"),
            Pattern::parse("result.meta"),
            Pattern::parse("result.*"),
        ];
        assert!(diff("result", Some(&e), Some(&a), &ign[..2])
            .iter()
            .all(|d| d.path == "result.extra"));
        assert!(diff("result", Some(&e), Some(&a), &ign).is_empty());
    }
}
