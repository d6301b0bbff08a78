//! A structural diff of two JSON values, path by path, with ignored paths.
//!
//! Paths read like `result.content[0].text`; a key that is not a plain name is written as a JSON
//! string in brackets (`result._meta["io.modelcontextprotocol/serverInfo"].name`). An ignore
//! pattern is written the same way, may use `*` for any key and `[*]` for any index
//! (`result.content[*].text`), and ignores the whole subtree it names: a printed path pastes into
//! `--ignore` as it is.

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
    /// Parses a path as `parse` does, refusing what is not one: an empty path, a `[` without
    /// its `]`, an unterminated quoted key.
    pub fn parse_checked(s: &str) -> Result<Pattern, String> {
        if s.trim().is_empty() {
            return Err("an empty path would ignore everything".into());
        }
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'[' {
                if b.get(i + 1) == Some(&b'"') {
                    let mut j = i + 2;
                    while j < b.len() && b[j] != b'"' {
                        j += if b[j] == b'\\' { 2 } else { 1 };
                    }
                    if b.get(j + 1) != Some(&b']') {
                        return Err(format!("the quoted key at {i} has no closing `\"]`"));
                    }
                    i = j + 2;
                    continue;
                }
                match s[i..].find(']') {
                    Some(1) => return Err(format!("`[]` at {i} names nothing")),
                    Some(e) => i += e + 1,
                    None => return Err(format!("the `[` at {i} has no `]`")),
                }
                continue;
            }
            i += 1;
        }
        Ok(Pattern::parse(s))
    }

    /// Parses a path in the syntax the diff prints: `.key`, `[N]`, `*` / `[*]`, and
    /// `["any key"]` (a JSON string) for a key with dots, brackets, quotes, `*` or spaces —
    /// so a printed path can be pasted into `--ignore` as it is.
    pub fn parse(s: &str) -> Pattern {
        let b = s.as_bytes();
        let mut segs = Vec::new();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'.' => i += 1,
                b'[' if b.get(i + 1) == Some(&b'"') => {
                    // A quoted key: a JSON string, then `]`.
                    let mut j = i + 2;
                    while j < b.len() && b[j] != b'"' {
                        j += if b[j] == b'\\' { 2 } else { 1 };
                    }
                    let lit = s.get(i + 1..(j + 1).min(s.len())).unwrap_or("");
                    let key = serde_json::from_str::<String>(lit)
                        .unwrap_or_else(|_| lit.trim_matches('"').to_string());
                    segs.push(Seg::Key(key));
                    i = j + 1;
                    if b.get(i) == Some(&b']') {
                        i += 1;
                    }
                }
                b'[' => {
                    let end = s[i..].find(']').map_or(s.len(), |e| i + e);
                    segs.push(match &s[i + 1..end] {
                        "*" => Seg::AnyIndex,
                        n => n.parse().map(Seg::Index).unwrap_or(Seg::Key(n.to_string())),
                    });
                    i = end + 1;
                }
                _ => {
                    let end = s[i..].find(['.', '[']).map_or(s.len(), |e| i + e);
                    let name = &s[i..end];
                    segs.push(if name == "*" {
                        Seg::AnyKey
                    } else {
                        Seg::Key(name.to_string())
                    });
                    i = end;
                }
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

/// A key printed bare: nothing in it that the path syntax reads (`.`, `[`, `]`, `"`, `*`,
/// spaces), and not empty.
fn is_plain_key(k: &str) -> bool {
    !k.is_empty()
        && !k
            .chars()
            .any(|c| matches!(c, '.' | '[' | ']' | '"' | '*') || c.is_whitespace())
}

fn render(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if is_plain_key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Key(k) => {
                s.push('[');
                s.push_str(&serde_json::Value::String(k.clone()).to_string());
                s.push(']');
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
        (Some(Value::Array(ea)), Some(Value::Array(aa))) => match name_key(ea, aa) {
            // Named things (tools, prompts, resources, content parts with ids) are compared by
            // name: one added tool is one difference, not one per tool after it.
            Some(k) => {
                let name = |v: &Value| v[k].as_str().map(str::to_string);
                for (i, e) in ea.iter().enumerate() {
                    let a = aa.iter().find(|a| name(a) == name(e));
                    path.push(Seg::Index(i));
                    match a {
                        Some(a) => walk(path, Some(e), Some(a), ignore, out),
                        None => {
                            if !ignore.iter().any(|p| p.matches_prefix_of(path)) {
                                out.push(Diff {
                                    path: format!("{} ({k} {})", render(path), short(Some(&e[k]))),
                                    expected: short(Some(e)),
                                    actual: "absent".into(),
                                });
                            }
                        }
                    }
                    path.pop();
                }
                for (j, a) in aa.iter().enumerate() {
                    if ea.iter().any(|e| name(e) == name(a)) {
                        continue;
                    }
                    path.push(Seg::Index(j));
                    if !ignore.iter().any(|p| p.matches_prefix_of(path)) {
                        out.push(Diff {
                            path: format!("{} ({k} {})", render(path), short(Some(&a[k]))),
                            expected: "absent".into(),
                            actual: short(Some(a)),
                        });
                    }
                    path.pop();
                }
            }
            None => {
                for i in 0..ea.len().max(aa.len()) {
                    path.push(Seg::Index(i));
                    walk(path, ea.get(i), aa.get(i), ignore, out);
                    path.pop();
                }
            }
        },
        (e, a) if e == a => {}
        (e, a) => out.push(Diff {
            path: render(path),
            expected: short(e),
            actual: short(a),
        }),
    }
}

/// The key arrays of named things are matched by: `name` (tools, prompts), `uri` (resources),
/// `id` — when every element on both sides is an object with a distinct string under it.
fn name_key(a: &[Value], b: &[Value]) -> Option<&'static str> {
    ["name", "uri", "id"].into_iter().find(|k| {
        let names = |xs: &[Value]| -> Option<std::collections::HashSet<String>> {
            let mut seen = std::collections::HashSet::new();
            for x in xs {
                if !seen.insert(x.get(*k)?.as_str()?.to_string()) {
                    return None;
                }
            }
            Some(seen)
        };
        !a.is_empty() && !b.is_empty() && names(a).is_some() && names(b).is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn named_things_are_compared_by_name_not_position() {
        let e = json!({"tools": [{"name": "echo", "d": 1}, {"name": "add", "d": 2}]});
        let a = json!({"tools": [{"name": "new", "d": 0}, {"name": "echo", "d": 1}, {"name": "add", "d": 3}]});
        let d = diff("result", Some(&e), Some(&a), &[]);
        let got: Vec<String> = d.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "result.tools[1].d: expected 2, got 3".to_string(),
                r#"result.tools[0] (name "new"): expected absent, got {"name":"new","d":0}"#
                    .to_string(),
            ]
        );
        // Plain arrays stay positional.
        let d = diff("result", Some(&json!([1, 2])), Some(&json!([2, 1])), &[]);
        assert_eq!(d.len(), 2);
    }

    #[test]
    fn a_printed_path_pastes_into_ignore() {
        let key = "io.modelcontextprotocol/serverInfo";
        let exp =
            json!({"_meta": {key: {"name": "a", "version": "1"}}, "x": {"a b": 1, "q\"[*]": 2}});
        let act =
            json!({"_meta": {key: {"name": "b", "version": "1"}}, "x": {"a b": 3, "q\"[*]": 4}});
        let d = diff("result", Some(&exp), Some(&act), &[]);
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                r#"result._meta["io.modelcontextprotocol/serverInfo"].name"#,
                r#"result.x["a b"]"#,
                r#"result.x["q\"[*]"]"#,
            ]
        );
        for p in &paths {
            let rest = diff("result", Some(&exp), Some(&act), &[Pattern::parse(p)]);
            assert!(
                !rest.iter().any(|d| d.path == *p),
                "{p} ignores itself: {rest:?}"
            );
        }
        let all: Vec<Pattern> = paths.iter().map(|p| Pattern::parse(p)).collect();
        assert!(diff("result", Some(&exp), Some(&act), &all).is_empty());
        // The old forms still parse.
        let p = Pattern::parse("result.content[*].text");
        assert!(p.matches_prefix_of(&[
            Seg::Key("result".into()),
            Seg::Key("content".into()),
            Seg::Index(3),
            Seg::Key("text".into()),
        ]));
    }

    #[test]
    fn a_path_that_is_not_one_is_refused() {
        for bad in ["", " ", "result[", "result[]", r#"result["a"#, r#"x["a"x"#] {
            assert!(Pattern::parse_checked(bad).is_err(), "{bad:?}");
        }
        for good in [
            "result",
            "result[0]",
            "result[*].x",
            r#"result._meta["a.b"].n"#,
        ] {
            assert!(Pattern::parse_checked(good).is_ok(), "{good:?}");
        }
    }

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
