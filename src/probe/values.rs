//! Values from a JSON Schema, for the cases a suite sends: the smallest valid value of a tool's
//! input schema (its `const`, examples, default, first enum member or format first — what a
//! schema's author says a value looks like — else the least the type allows), a value of a type
//! the schema refuses (the wrong-type case), and seeded random values valid and invalid for
//! `--fuzz`, with the shrinking of a failing one.
//!
//! Written here rather than taken from a crate: the generators on crates.io draw random values
//! for property tests (proptest strategies) and know neither the examples nor the formats a
//! schema declares, and none shrinks towards the smallest *valid* value of a schema.

use serde_json::{json, Map, Value};

/// How deep `$ref`s and nesting are followed before a value is cut short (`null`).
const DEPTH: usize = 24;

/// The schema `s` names, its local `$ref` followed (`#/$defs/…`, `#/definitions/…`).
fn resolve<'a>(root: &'a Value, mut s: &'a Value) -> &'a Value {
    for _ in 0..DEPTH {
        match s.get("$ref").and_then(Value::as_str) {
            Some(r) if r.starts_with('#') => match root.pointer(&r[1..]) {
                Some(t) => s = t,
                None => return s,
            },
            _ => return s,
        }
    }
    s
}

/// The JSON types a schema allows (empty: any).
fn types(root: &Value, s: &Value) -> Vec<&'static str> {
    let s = resolve(root, s);
    let name = |t: &str| -> Option<&'static str> {
        [
            "string", "integer", "number", "boolean", "array", "object", "null",
        ]
        .into_iter()
        .find(|n| *n == t)
    };
    match s.get("type") {
        Some(Value::String(t)) => name(t).into_iter().collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .filter_map(name)
            .collect(),
        _ => {
            if let Some(c) = s.get("const") {
                return vec![type_of(c)];
            }
            if let Some(Value::Array(e)) = s.get("enum") {
                let mut v: Vec<&'static str> = e.iter().map(type_of).collect();
                v.dedup();
                return v;
            }
            if s.get("properties").is_some() {
                return vec!["object"];
            }
            for k in ["anyOf", "oneOf"] {
                if let Some(Value::Array(alts)) = s.get(k) {
                    let mut v: Vec<&'static str> =
                        alts.iter().flat_map(|a| types(root, a)).collect();
                    if alts.iter().any(|a| types(root, a).is_empty()) {
                        return vec![];
                    }
                    v.sort_unstable();
                    v.dedup();
                    return v;
                }
            }
            vec![]
        }
    }
}

/// A value's JSON type, as a schema names it.
pub fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `t` is among `allowed` (an integer is a number).
fn allows(allowed: &[&str], t: &str) -> bool {
    allowed.contains(&t) || (t == "integer" && allowed.contains(&"number"))
}

/// The smallest valid value of `schema` (a document of its own: its `$ref`s resolve in it).
pub fn valid(schema: &Value) -> Value {
    valid_in(schema, schema, 0)
}

/// The smallest valid value of `schema`, a part of the document `root` (its `$ref`s resolve there).
pub fn valid_with_root(root: &Value, schema: &Value) -> Value {
    valid_in(root, schema, 0)
}

/// A value of a type `schema` refuses, or `None` when it allows every type.
pub fn wrong_type(root: &Value, schema: &Value) -> Option<Value> {
    let allowed = types(root, schema);
    if allowed.is_empty() {
        return None;
    }
    [json!({}), json!("wrong type"), json!([]), json!(true)]
        .into_iter()
        .find(|c| !allows(&allowed, type_of(c)))
}

/// The object schema's properties, in their declared order.
pub fn properties<'a>(root: &'a Value, schema: &'a Value) -> Vec<(&'a str, &'a Value)> {
    resolve(root, schema)
        .get("properties")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default()
}

/// The object schema's required properties, in their declared order.
pub fn required<'a>(root: &'a Value, schema: &'a Value) -> Vec<&'a str> {
    resolve(root, schema)
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn valid_in(root: &Value, s: &Value, depth: usize) -> Value {
    if depth > DEPTH {
        return Value::Null;
    }
    let s = resolve(root, s);
    if let Some(c) = s.get("const") {
        return c.clone();
    }
    if let Some(e) = s
        .get("examples")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        return e.clone();
    }
    for k in ["example", "default"] {
        if let Some(v) = s.get(k) {
            return v.clone();
        }
    }
    if let Some(e) = s
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        return e.clone();
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        // The parts merged: what each requires, each property once.
        let mut merged = Map::new();
        let mut req: Vec<Value> = Vec::new();
        let mut props = Map::new();
        for part in all {
            let part = resolve(root, part);
            if let Some(o) = part.as_object() {
                for (k, v) in o {
                    match k.as_str() {
                        "properties" => {
                            if let Some(p) = v.as_object() {
                                props.extend(p.clone());
                            }
                        }
                        "required" => req.extend(v.as_array().cloned().unwrap_or_default()),
                        _ => {
                            merged.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
        }
        if !props.is_empty() {
            merged.insert("properties".into(), Value::Object(props));
        }
        if !req.is_empty() {
            merged.insert("required".into(), Value::Array(req));
        }
        return valid_in(root, &Value::Object(merged), depth + 1);
    }
    for k in ["anyOf", "oneOf"] {
        if let Some(Value::Array(alts)) = s.get(k) {
            // The first alternative that is not `null` (an optional value's schema says
            // `anyOf: [T, null]`: T is what a caller would send).
            let pick = alts
                .iter()
                .find(|a| types(root, a) != ["null"])
                .or(alts.first());
            return pick.map_or(Value::Null, |a| valid_in(root, a, depth + 1));
        }
    }
    let allowed = types(root, s);
    let t = allowed
        .iter()
        .copied()
        .find(|t| *t != "null")
        .or(allowed.first().copied());
    match t {
        Some("string") => Value::String(string(s)),
        Some("integer") => number(s, true),
        Some("number") => number(s, false),
        Some("boolean") => Value::Bool(false),
        Some("array") => {
            let n = s.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
            let tuple = s
                .get("prefixItems")
                .or_else(|| s.get("items").filter(|i| i.is_array()))
                .and_then(Value::as_array);
            let mut out = Vec::new();
            if let Some(t) = tuple {
                out.extend(t.iter().map(|i| valid_in(root, i, depth + 1)));
            }
            let items = s.get("items").filter(|i| i.is_object());
            while out.len() < n {
                out.push(items.map_or(Value::Null, |i| valid_in(root, i, depth + 1)));
            }
            Value::Array(out)
        }
        Some("object") => {
            let mut out = Map::new();
            for name in required(root, s) {
                let p = properties(root, s)
                    .into_iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v);
                out.insert(
                    name.to_string(),
                    p.map_or(Value::String(String::new()), |p| {
                        valid_in(root, p, depth + 1)
                    }),
                );
            }
            Value::Object(out)
        }
        _ => Value::Null,
    }
}

/// The smallest string the schema allows: its format's example, padded to `minLength`.
fn string(s: &Value) -> String {
    let mut v = match s.get("format").and_then(Value::as_str) {
        Some("date-time") => "2026-01-01T00:00:00Z",
        Some("date") => "2026-01-01",
        Some("time") => "00:00:00Z",
        Some("email" | "idn-email") => "user@example.com",
        Some("uri" | "iri" | "url") => "https://example.com/",
        Some("uri-reference" | "iri-reference") => "/",
        Some("uuid") => "00000000-0000-4000-8000-000000000000",
        Some("ipv4") => "127.0.0.1",
        Some("ipv6") => "::1",
        Some("hostname" | "idn-hostname") => "example.com",
        Some("duration") => "PT1S",
        Some("regex") => ".*",
        _ => "",
    }
    .to_string();
    let min = s.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    while v.chars().count() < min {
        v.push('a');
    }
    v
}

/// The number nearest 0 the schema allows (its bounds, exclusive or not, and `multipleOf`).
fn number(s: &Value, integer: bool) -> Value {
    let f = |k: &str| s.get(k).and_then(Value::as_f64);
    let step = if integer { 1.0 } else { 0.5 };
    let lo = match (f("minimum"), f("exclusiveMinimum")) {
        (_, Some(x)) => Some(if integer { x.floor() + 1.0 } else { x + step }),
        (Some(x), None) => Some(if integer { x.ceil() } else { x }),
        _ => None,
    };
    let hi = match (f("maximum"), f("exclusiveMaximum")) {
        (_, Some(x)) => Some(if integer { x.ceil() - 1.0 } else { x - step }),
        (Some(x), None) => Some(if integer { x.floor() } else { x }),
        _ => None,
    };
    let mut v = 0.0_f64;
    if let Some(l) = lo {
        v = v.max(l);
    }
    if let Some(h) = hi {
        v = v.min(h);
    }
    if let Some(m) = f("multipleOf").filter(|m| *m > 0.0) {
        v = (v / m).ceil() * m;
    }
    if integer || v.fract() == 0.0 {
        json!(v as i64)
    } else {
        json!(v)
    }
}

/// A small seeded generator (SplitMix64): the same seed gives the same cases on every machine.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A random value for `schema`: mostly valid (within its bounds, its enum, its required
/// properties and some optional ones), sometimes at an edge (an empty string, 0, a negative
/// number, a long string) — the inputs that crash tools.
pub fn random(root: &Value, s: &Value, rng: &mut Rng, depth: usize) -> Value {
    if depth > 8 {
        return valid_in(root, s, 0);
    }
    let s = resolve(root, s);
    if let Some(Value::Array(e)) = s.get("enum") {
        if !e.is_empty() {
            return e[rng.below(e.len() as u64) as usize].clone();
        }
    }
    if s.get("const").is_some() {
        return valid_in(root, s, 0);
    }
    for k in ["anyOf", "oneOf"] {
        if let Some(Value::Array(alts)) = s.get(k) {
            if !alts.is_empty() {
                let a = &alts[rng.below(alts.len() as u64) as usize];
                return random(root, a, rng, depth + 1);
            }
        }
    }
    let allowed = types(root, s);
    let t = if allowed.is_empty() {
        "string"
    } else {
        allowed[rng.below(allowed.len() as u64) as usize]
    };
    let f = |k: &str| s.get(k).and_then(Value::as_f64);
    match t {
        "string" => {
            if s.get("format").is_some() && rng.below(2) == 0 {
                return Value::String(string(s));
            }
            const EDGES: [&str; 8] = ["", " ", "a", "0", "-1", "null", "ünïcödé ✓", "../"];
            let min = s.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
            let max = s
                .get("maxLength")
                .and_then(Value::as_u64)
                .map_or(usize::MAX, |m| m as usize);
            let mut v = match rng.below(4) {
                0 => "x".repeat(rng.below(300) as usize),
                _ => EDGES[rng.below(EDGES.len() as u64) as usize].to_string(),
            };
            while v.chars().count() < min {
                v.push('a');
            }
            if v.chars().count() > max {
                v = v.chars().take(max).collect();
            }
            Value::String(v)
        }
        "integer" | "number" => {
            const EDGES: [i64; 7] = [0, 1, -1, 2, 100, -1000, i32::MAX as i64];
            let lo = f("minimum").or(f("exclusiveMinimum").map(|x| x + 1.0));
            let hi = f("maximum").or(f("exclusiveMaximum").map(|x| x - 1.0));
            let mut v = EDGES[rng.below(EDGES.len() as u64) as usize] as f64;
            if t == "number" && rng.below(3) == 0 {
                v += 0.5;
            }
            if let Some(l) = lo {
                v = v.max(l);
            }
            if let Some(h) = hi {
                v = v.min(h);
            }
            if t == "integer" || v.fract() == 0.0 {
                json!(v as i64)
            } else {
                json!(v)
            }
        }
        "boolean" => Value::Bool(rng.below(2) == 1),
        "null" => Value::Null,
        "array" => {
            let min = s.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let max = s.get("maxItems").and_then(Value::as_u64).unwrap_or(min + 3);
            let n = min + rng.below(max.saturating_sub(min) + 1);
            let items = s.get("items").filter(|i| i.is_object());
            Value::Array(
                (0..n)
                    .map(|_| items.map_or(Value::Null, |i| random(root, i, rng, depth + 1)))
                    .collect(),
            )
        }
        _ => {
            let req = required(root, s);
            let mut out = Map::new();
            for (k, p) in properties(root, s) {
                if req.contains(&k) || rng.below(2) == 0 {
                    out.insert(k.to_string(), random(root, p, rng, depth + 1));
                }
            }
            for k in req {
                out.entry(k.to_string())
                    .or_insert_with(|| Value::String(String::new()));
            }
            Value::Object(out)
        }
    }
}

/// Smaller versions of `v`, the smallest first: what shrinking tries in place of a failing input
/// (an object without an optional member or with a member shrunk, a shorter string, a number
/// nearer 0, a shorter array).
pub fn shrinks(v: &Value, keep: &[&str]) -> Vec<Value> {
    let mut out = Vec::new();
    match v {
        Value::String(s) if !s.is_empty() => {
            out.push(Value::String(String::new()));
            let half: String = s.chars().take(s.chars().count() / 2).collect();
            if !half.is_empty() {
                out.push(Value::String(half));
            }
        }
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                if i != 0 {
                    out.push(json!(0));
                    if i.abs() > 1 {
                        out.push(json!(i / 2));
                    }
                    if i < -1 {
                        out.push(json!(-1));
                    }
                }
            } else if let Some(f) = n.as_f64() {
                out.push(json!(f.trunc() as i64));
            }
        }
        Value::Array(a) if !a.is_empty() => {
            out.push(Value::Array(a[..a.len() / 2].to_vec()));
            out.push(Value::Array(a[1..].to_vec()));
        }
        Value::Object(o) => {
            for (k, child) in o {
                if !keep.contains(&k.as_str()) {
                    let mut less = o.clone();
                    less.remove(k);
                    out.push(Value::Object(less));
                }
                for smaller in shrinks(child, &[]) {
                    let mut m = o.clone();
                    m.insert(k.clone(), smaller);
                    out.push(Value::Object(m));
                }
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_valid_value_follows_what_the_schema_says() {
        let s = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 3},
                "n": {"type": "integer", "minimum": 5, "maximum": 9},
                "x": {"type": "number", "exclusiveMinimum": 0},
                "mode": {"enum": ["fast", "slow"]},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "opt": {"type": "string"},
                "thing": {"$ref": "#/$defs/Thing"},
                "maybe": {"anyOf": [{"type": "null"}, {"type": "integer", "default": 7}]},
                "ex": {"type": "string", "examples": ["hello"]}
            },
            "required": ["path", "n", "x", "mode", "when", "tags", "thing", "maybe", "ex"],
            "$defs": {"Thing": {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]}}
        });
        assert_eq!(
            valid(&s),
            json!({
                "path": "aaa", "n": 5, "x": 0.5, "mode": "fast", "when": "2026-01-01T00:00:00Z",
                "tags": ["", ""], "thing": {"on": false}, "maybe": 7, "ex": "hello"
            })
        );
        // Integers stay integers; negative bounds are met nearest 0.
        assert_eq!(valid(&json!({"type": "integer", "maximum": -3})), json!(-3));
        assert_eq!(
            valid(&json!({"type": "integer", "minimum": 1, "multipleOf": 5})),
            json!(5)
        );
    }

    #[test]
    fn a_wrong_type_is_one_the_schema_refuses() {
        let root = json!({});
        assert_eq!(
            wrong_type(&root, &json!({"type": "string"})),
            Some(json!({}))
        );
        assert_eq!(
            wrong_type(&root, &json!({"type": "object"})),
            Some(json!("wrong type"))
        );
        assert_eq!(
            wrong_type(&root, &json!({"type": ["object", "string"]})),
            Some(json!([]))
        );
        // An integer is a number: a number field is not given 1 as "wrong".
        assert_eq!(
            wrong_type(&root, &json!({"type": "number"})),
            Some(json!({}))
        );
        assert_eq!(wrong_type(&root, &json!({})), None);
        assert_eq!(
            wrong_type(&root, &json!({"enum": ["a", "b"]})),
            Some(json!({}))
        );
    }

    #[test]
    fn random_values_are_seeded_and_shrinks_get_smaller() {
        let s = json!({"type": "object", "properties": {"t": {"type": "string"}, "n": {"type": "integer", "minimum": -5}}, "required": ["t"]});
        let a: Vec<Value> = {
            let mut r = Rng::new(7);
            (0..20).map(|_| random(&s, &s, &mut r, 0)).collect()
        };
        let b: Vec<Value> = {
            let mut r = Rng::new(7);
            (0..20).map(|_| random(&s, &s, &mut r, 0)).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().all(|v| v["t"].is_string()));
        assert!(a
            .iter()
            .all(|v| v.get("n").is_none_or(|n| n.as_i64().unwrap() >= -5)));
        let sh = shrinks(&json!({"t": "abcd", "n": -40}), &["t"]);
        assert!(sh.contains(&json!({"t": "abcd"})));
        assert!(sh.contains(&json!({"t": "", "n": -40})));
        assert!(sh.contains(&json!({"t": "abcd", "n": 0})));
        assert!(!sh.iter().any(|v| v.get("t").is_none()));
    }
}
