//! `POST /jsonrpc`: the generic JSON-RPC 2.0 test endpoint (seed 000): `echo`, `add`,
//! `subtract`, `sleep`, `error`; concurrent batches of at most 100; notifications answered 204;
//! the standard error codes; HTTP 200 for every reply. `rpc.discover` answers its OpenRPC
//! document (what `rpctap probe` reads to write a suite for it).

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::time::Duration;

pub const METHODS: [&str; 5] = ["echo", "add", "subtract", "sleep", "error"];
pub const MAX_BATCH: usize = 100;

/// Demo behaviour knobs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// The cap of `sleep`.
    pub max_delay: Duration,
    /// Makes `add` (and the MCP `add` tool) answer one more than the sum: a "changed server"
    /// for regression tests.
    pub alter_add: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            max_delay: Duration::from_secs(30),
            alter_add: false,
        }
    }
}

/// An error reply with the id as raw JSON text (kept exactly as the request wrote it).
fn err(id: &str, code: i64, message: &str, data: Option<Value>) -> String {
    let mut e = json!({ "code": code, "message": message });
    if let Some(d) = data {
        e["data"] = d;
    }
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{e}}}"#)
}

#[derive(serde::Deserialize)]
struct IdOnly<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue as serde::Deserialize>::deserialize(d).map(Some)
}

/// Answers one body; `None` means no reply (204). Ids are echoed exactly as written.
pub async fn handle_body(body: &[u8], opts: &DemoOptions) -> Option<String> {
    let raw: &RawValue = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => return Some(err("null", -32700, "Parse error", None)),
    };
    if raw.get().starts_with('[') {
        let items: Vec<&RawValue> = match serde_json::from_str(raw.get()) {
            Ok(i) => i,
            Err(_) => return Some(err("null", -32700, "Parse error", None)),
        };
        if items.is_empty() {
            return Some(err(
                "null",
                -32600,
                "Invalid Request",
                Some(json!("empty batch")),
            ));
        }
        if items.len() > MAX_BATCH {
            return Some(err(
                "null",
                -32600,
                "Invalid Request",
                Some(json!(format!(
                    "batch of {} entries; at most {MAX_BATCH}",
                    items.len()
                ))),
            ));
        }
        let replies =
            futures_util::future::join_all(items.into_iter().map(|m| handle_one(m, opts))).await;
        let replies: Vec<String> = replies.into_iter().flatten().collect();
        if replies.is_empty() {
            None
        } else {
            Some(format!("[{}]", replies.join(",")))
        }
    } else {
        handle_one(raw, opts).await
    }
}

/// Answers one message; `None` for a notification.
pub async fn handle_one(raw: &RawValue, opts: &DemoOptions) -> Option<String> {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(raw.get()) else {
        return Some(err("null", -32600, "Invalid Request", None));
    };
    let id_raw = serde_json::from_str::<IdOnly>(raw.get())
        .ok()
        .and_then(|i| i.id)
        .map(RawValue::get);
    let id = match obj.get("id") {
        None => None,
        Some(Value::String(_) | Value::Number(_) | Value::Null) => Some(id_raw.unwrap_or("null")),
        Some(_) => {
            return Some(err(
                "null",
                -32600,
                "Invalid Request",
                Some(json!("id must be a string, a number or null")),
            ))
        }
    };
    let reply_id = id.unwrap_or("null");
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Some(err(
            reply_id,
            -32600,
            "Invalid Request",
            Some(json!("jsonrpc must be \"2.0\"")),
        ));
    }
    let Some(Value::String(method)) = obj.get("method") else {
        return Some(err(
            reply_id,
            -32600,
            "Invalid Request",
            Some(json!("method must be a string")),
        ));
    };
    let params = obj.get("params").cloned();
    if params
        .as_ref()
        .is_some_and(|p| !p.is_array() && !p.is_object())
    {
        return Some(err(
            reply_id,
            -32600,
            "Invalid Request",
            Some(json!("params must be an array or an object")),
        ));
    }
    let out = call(method, params, opts).await;
    let id = id?; // a notification: executed, never answered
    Some(match out {
        Ok(result) => format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#),
        Err(e) => format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{e}}}"#),
    })
}

fn invalid_params(why: &str) -> Value {
    json!({ "code": -32602, "message": "Invalid params", "data": why })
}

fn positional_or_named<'a>(params: &'a Option<Value>, names: &[&str]) -> Option<Vec<&'a Value>> {
    match params {
        Some(Value::Array(a)) => Some(a.iter().collect()),
        Some(Value::Object(o)) => names.iter().map(|n| o.get(*n)).collect(),
        _ => None,
    }
}

/// A number as i64 when it is an integer, else f64.
enum Num {
    I(i64),
    F(f64),
}

fn num(v: &Value) -> Option<Num> {
    v.as_i64().map(Num::I).or_else(|| v.as_f64().map(Num::F))
}

fn num_value(n: Num) -> Result<Value, Value> {
    match n {
        Num::I(i) => Ok(json!(i)),
        Num::F(f) if f.is_finite() => Ok(json!(f)),
        Num::F(_) => Err(
            json!({ "code": -32603, "message": "Internal error", "data": "the result is not a finite number" }),
        ),
    }
}

fn add2(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::I(x), Num::I(y)) => x
            .checked_add(y)
            .map(Num::I)
            .unwrap_or(Num::F(x as f64 + y as f64)),
        (x, y) => Num::F(as_f(x) + as_f(y)),
    }
}

fn as_f(n: Num) -> f64 {
    match n {
        Num::I(i) => i as f64,
        Num::F(f) => f,
    }
}

/// The endpoint's OpenRPC document (`rpc.discover`).
pub fn openrpc() -> Value {
    let num = json!({"type": "number"});
    let p = |name: &str, schema: &Value, required: bool| json!({"name": name, "schema": schema, "required": required});
    let invalid = json!([{"code": -32602, "message": "Invalid params"}]);
    json!({
        "openrpc": "1.3.2",
        "info": {"title": "rpctap demo", "version": env!("CARGO_PKG_VERSION")},
        "methods": [
            {"name": "echo", "summary": "Answers its params as they are.", "paramStructure": "either",
             "params": [p("value", &json!({}), false)], "result": {"name": "params", "schema": {}}},
            {"name": "add", "summary": "The sum of its numbers.", "paramStructure": "by-name",
             "params": [p("a", &num, true), p("b", &num, true)],
             "result": {"name": "sum", "schema": num}, "errors": invalid},
            {"name": "subtract", "summary": "minuend - subtrahend.", "paramStructure": "by-name",
             "params": [p("minuend", &num, true), p("subtrahend", &num, true)],
             "result": {"name": "difference", "schema": num}, "errors": invalid},
            {"name": "sleep", "summary": "Answers after ms milliseconds.", "paramStructure": "by-name",
             "params": [p("ms", &json!({"type": "integer", "minimum": 0}), true)],
             "result": {"name": "slept", "schema": {"type": "object"}}, "errors": invalid},
            {"name": "error", "summary": "Answers the error it is given.", "paramStructure": "by-name",
             "params": [p("code", &json!({"type": "integer"}), true), p("message", &json!({"type": "string"}), false), p("data", &json!({}), false)],
             "result": {"name": "never", "schema": {}}, "errors": invalid}
        ]
    })
}

async fn call(method: &str, params: Option<Value>, opts: &DemoOptions) -> Result<Value, Value> {
    match method {
        "rpc.discover" => Ok(openrpc()),
        "echo" => Ok(params.unwrap_or(Value::Null)),
        "add" => {
            let terms: Vec<&Value> = match &params {
                Some(Value::Array(a)) => a.iter().collect(),
                Some(Value::Object(_)) => positional_or_named(&params, &["a", "b"])
                    .ok_or_else(|| invalid_params("add takes [n, ...] or {\"a\", \"b\"}"))?,
                _ => return Err(invalid_params("add takes [n, ...] or {\"a\", \"b\"}")),
            };
            let mut sum = Num::I(0);
            for t in terms {
                let n = num(t).ok_or_else(|| invalid_params("add takes numbers"))?;
                sum = add2(sum, n);
            }
            if opts.alter_add {
                sum = add2(sum, Num::I(1));
            }
            num_value(sum)
        }
        "subtract" => {
            let p = positional_or_named(&params, &["minuend", "subtrahend"])
                .filter(|p| p.len() == 2)
                .ok_or_else(|| {
                    invalid_params(
                        "subtract takes [minuend, subtrahend] or {\"minuend\", \"subtrahend\"}",
                    )
                })?;
            let (Some(a), Some(b)) = (num(p[0]), num(p[1])) else {
                return Err(invalid_params("subtract takes numbers"));
            };
            let neg = match b {
                Num::I(i) => i.checked_neg().map(Num::I).unwrap_or(Num::F(-(i as f64))),
                Num::F(f) => Num::F(-f),
            };
            num_value(add2(a, neg))
        }
        "sleep" => {
            let p = positional_or_named(&params, &["ms"])
                .filter(|p| p.len() == 1)
                .ok_or_else(|| invalid_params("sleep takes [ms] or {\"ms\"}"))?;
            let ms = p[0]
                .as_u64()
                .ok_or_else(|| invalid_params("ms must be a non-negative integer"))?;
            let d = Duration::from_millis(ms).min(opts.max_delay);
            tokio::time::sleep(d).await;
            Ok(json!({ "slept_ms": d.as_millis() as u64 }))
        }
        "error" => {
            let (code, message, data) = match &params {
                Some(Value::Array(a)) => (a.first(), a.get(1), a.get(2)),
                Some(Value::Object(o)) => (o.get("code"), o.get("message"), o.get("data")),
                _ => (None, None, None),
            };
            let code = code.and_then(Value::as_i64).ok_or_else(|| {
                invalid_params("error takes [code, message?, data?] with an integer code")
            })?;
            let mut e = Map::new();
            e.insert("code".into(), json!(code));
            e.insert(
                "message".into(),
                message
                    .cloned()
                    .filter(Value::is_string)
                    .unwrap_or_else(|| json!("Error")),
            );
            if let Some(d) = data {
                e.insert("data".into(), d.clone());
            }
            Err(Value::Object(e))
        }
        _ => Err(json!({ "code": -32601, "message": "Method not found", "data": METHODS })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ask(s: &str) -> Option<Value> {
        handle_body(s.as_bytes(), &DemoOptions::default())
            .await
            .map(|t| serde_json::from_str(&t).unwrap())
    }

    #[tokio::test]
    async fn seed_examples() {
        let r = ask(r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 1}"#).await.unwrap();
        assert_eq!(r, json!({"jsonrpc":"2.0","id":1,"result":19}));
        let r = ask(r#"[{"jsonrpc": "2.0", "method": "add", "params": [1, 2, 4], "id": "1"},{"jsonrpc": "2.0", "method": "echo", "params": {"hello": "world"}},{"jsonrpc": "2.0", "method": "echo", "params": ["x"], "id": "2"},{"jsonrpc": "2.0", "method": "nope", "id": "3"}]"#).await.unwrap();
        assert_eq!(r[0]["result"], 7);
        assert_eq!(r[1]["result"][0], "x");
        assert_eq!(r[2]["error"]["code"], -32601);
        assert_eq!(r.as_array().unwrap().len(), 3);
        assert!(
            ask(r#"{"jsonrpc": "2.0", "method": "echo", "params": ["fire and forget"]}"#)
                .await
                .is_none()
        );
        let r = ask(r#"{"jsonrpc": "2.0", "method": "error", "params": {"code": -32001, "message": "Rate limited", "data": {"retry_after": 1}}, "id": 7}"#).await.unwrap();
        assert_eq!(
            r["error"],
            json!({"code":-32001,"message":"Rate limited","data":{"retry_after":1}})
        );
        let r = ask(r#"{"jsonrpc": "2.0", "method":"#).await.unwrap();
        assert_eq!(
            (r["error"]["code"].clone(), r["id"].clone()),
            (json!(-32700), Value::Null)
        );
        let r = ask("[]").await.unwrap();
        assert_eq!(r["error"]["code"], -32600);
        let r = ask(r#"{"jsonrpc":"2.0","method":"add","params":"x","id":2}"#)
            .await
            .unwrap();
        assert_eq!(r["error"]["code"], -32600);
        let r = ask(r#"{"jsonrpc":"2.0","method":"add","params":["x"],"id":2}"#)
            .await
            .unwrap();
        assert_eq!(r["error"]["code"], -32602);
        let r = ask(r#"{"jsonrpc":"2.0","method":"add","params":[1e308, 1e308],"id":2}"#)
            .await
            .unwrap();
        assert_eq!(r["error"]["code"], -32603);
        let t = handle_body(
            br#"{"jsonrpc":"2.0","method":"echo","id":9.5e0}"#,
            &DemoOptions::default(),
        )
        .await
        .unwrap();
        assert!(t.contains(r#""id":9.5e0"#), "ids are echoed exactly: {t}");
    }
}
