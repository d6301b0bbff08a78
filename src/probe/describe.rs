//! What a server offers, from wherever it is said: a live MCP server's lists (`tools/list`,
//! `prompts/list`, `resources/list`, `resources/templates/list`, every page of each), an
//! OpenRPC document (a file, a URL, or the server's own `rpc.discover`), or a plain method list
//! (`{"httpPath": "/rpc", "methods": [...]}`, the seed's import format).

use super::session::Session;
use super::suite::Protocol;
use super::ProbeError;
use serde_json::Value;

/// The most pages of one list read (a server whose cursor never ends is cut off, and says so).
const MAX_PAGES: usize = 100;

/// A JSON-RPC method, as an OpenRPC document or a method list declares it.
#[derive(Debug, Clone, Default)]
pub struct Method {
    pub name: String,
    /// Its parameters (`None`: not declared — a method list names only the method).
    pub params: Option<Vec<Param>>,
    /// Its params go as an array (`paramStructure: "by-position"`).
    pub by_position: bool,
    /// The error codes its documentation promises.
    pub errors: Vec<i64>,
}

#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub schema: Value,
    pub required: bool,
}

/// What a server offers.
#[derive(Debug, Clone, Default)]
pub struct Description {
    pub protocol: Protocol,
    /// `name version` from `serverInfo` or the document's `info`.
    pub server: Option<String>,
    pub mcp_version: Option<String>,
    pub tools: Vec<Value>,
    pub prompts: Vec<Value>,
    pub resources: Vec<Value>,
    pub templates: Vec<Value>,
    pub methods: Vec<Method>,
    /// The document's own root (its `$ref`s resolve in it).
    pub document: Value,
    /// What could not be read whole.
    pub notes: Vec<String>,
}

/// Reads a live MCP server's lists through `s` (its session open), every page of each.
pub async fn mcp(s: &mut Session, init: &Value) -> Description {
    let mut d = Description {
        protocol: Protocol::Mcp,
        // `initialize` names it in its result; 2026-07-28's `server/discover` in `_meta`.
        server: init
            .get("serverInfo")
            .or_else(|| init.pointer("/_meta/io.modelcontextprotocol~1serverInfo"))
            .map(|i| {
                format!(
                    "{} {}",
                    i.get("name").and_then(Value::as_str).unwrap_or("?"),
                    i.get("version").and_then(Value::as_str).unwrap_or("")
                )
                .trim()
                .to_string()
            }),
        mcp_version: s.protocol_version.clone(),
        ..Default::default()
    };
    let caps = init.get("capabilities").cloned().unwrap_or(Value::Null);
    let lists: [(&str, &str, &str); 4] = [
        ("tools", "tools/list", "tools"),
        ("prompts", "prompts/list", "prompts"),
        ("resources", "resources/list", "resources"),
        ("resources", "resources/templates/list", "resourceTemplates"),
    ];
    for (cap, method, key) in lists {
        if caps.get(cap).is_none() {
            continue;
        }
        let mut out = Vec::new();
        let mut cursor: Option<Value> = None;
        let mut pages = 0;
        loop {
            let params = match &cursor {
                Some(c) => serde_json::json!({ "cursor": c }),
                None => serde_json::json!({}),
            };
            match s.call(method, params).await {
                Ok(r) => {
                    if let Some(items) = r.get(key).and_then(Value::as_array) {
                        out.extend(items.iter().cloned());
                    }
                    cursor = r.get("nextCursor").filter(|c| !c.is_null()).cloned();
                }
                Err(e) => {
                    d.notes.push(format!("{method}: {e}"));
                    break;
                }
            }
            pages += 1;
            if cursor.is_none() {
                break;
            }
            if pages >= MAX_PAGES {
                d.notes.push(format!(
                    "{method}: more than {MAX_PAGES} pages; the list may be incomplete"
                ));
                break;
            }
        }
        match key {
            "tools" => d.tools = out,
            "prompts" => d.prompts = out,
            "resources" => d.resources = out,
            _ => d.templates = out,
        }
    }
    d
}

/// Reads an OpenRPC document (`shown` names it in errors).
pub fn openrpc(doc: &Value, shown: &str) -> Result<Description, ProbeError> {
    let bad = |m: String| ProbeError::OpenRpc(shown.to_string(), m);
    if !doc.get("openrpc").is_some_and(Value::is_string) {
        return Err(bad("no \"openrpc\" version string at its top".into()));
    }
    let methods = doc
        .get("methods")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no \"methods\" array".into()))?;
    let deref = |v: &'_ Value| -> Value {
        let mut v = v.clone();
        for _ in 0..16 {
            match v.get("$ref").and_then(Value::as_str) {
                Some(r) if r.starts_with('#') => match doc.pointer(&r[1..]) {
                    Some(t) => v = t.clone(),
                    None => break,
                },
                _ => break,
            }
        }
        v
    };
    let mut d = Description {
        protocol: Protocol::Jsonrpc,
        server: doc.get("info").map(|i| {
            format!(
                "{} {}",
                i.get("title").and_then(Value::as_str).unwrap_or("?"),
                i.get("version").and_then(Value::as_str).unwrap_or("")
            )
            .trim()
            .to_string()
        }),
        document: doc.clone(),
        ..Default::default()
    };
    for (i, m) in methods.iter().enumerate() {
        let m = deref(m);
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("methods[{i}] has no \"name\"")))?;
        let mut params = Vec::new();
        for (j, p) in m
            .get("params")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let p = deref(p);
            let pname = p.get("name").and_then(Value::as_str).ok_or_else(|| {
                bad(format!(
                    "methods[{i}] ({name}): params[{j}] has no \"name\""
                ))
            })?;
            let schema = p.get("schema").cloned().ok_or_else(|| {
                bad(format!(
                    "methods[{i}] ({name}): param {pname:?} has no \"schema\""
                ))
            })?;
            params.push(Param {
                name: pname.to_string(),
                schema,
                required: p.get("required").and_then(Value::as_bool).unwrap_or(false),
            });
        }
        d.methods.push(Method {
            name: name.to_string(),
            params: Some(params),
            by_position: m.get("paramStructure").and_then(Value::as_str) == Some("by-position"),
            errors: m
                .get("errors")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(&deref)
                        .filter_map(|e| e.get("code").and_then(Value::as_i64))
                        .collect()
                })
                .unwrap_or_default(),
        });
    }
    Ok(d)
}

/// Reads a plain method list; gives back the description and its `httpPath`.
pub fn method_list(doc: &Value, shown: &str) -> Result<(Description, Option<String>), ProbeError> {
    let bad = |m: &str| ProbeError::MethodList(shown.to_string(), m.to_string());
    let methods = doc
        .get("methods")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no \"methods\" array of names"))?;
    let mut d = Description {
        protocol: Protocol::Jsonrpc,
        ..Default::default()
    };
    for m in methods {
        let name = m
            .as_str()
            .ok_or_else(|| bad("\"methods\" holds something that is not a method name"))?;
        d.methods.push(Method {
            name: name.to_string(),
            ..Default::default()
        });
    }
    let path = doc
        .get("httpPath")
        .map(|p| {
            p.as_str()
                .map(str::to_string)
                .ok_or_else(|| bad("\"httpPath\" is not a string"))
        })
        .transpose()?;
    Ok((d, path))
}

/// Whether a JSON document is an OpenRPC document or a method list (by its keys).
pub enum Document {
    OpenRpc,
    MethodList,
}

pub fn kind_of(doc: &Value) -> Option<Document> {
    if doc.get("openrpc").is_some() {
        Some(Document::OpenRpc)
    } else if doc
        .get("methods")
        .is_some_and(|m| m.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
    {
        Some(Document::MethodList)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_openrpc_document_gives_methods_params_and_error_codes() {
        let doc = json!({
            "openrpc": "1.3.2",
            "info": {"title": "calc", "version": "1.0"},
            "methods": [
                {"name": "subtract", "paramStructure": "by-name",
                 "params": [{"$ref": "#/components/contentDescriptors/Minuend"},
                            {"name": "subtrahend", "schema": {"type": "integer"}, "required": true}],
                 "errors": [{"code": -32602, "message": "Invalid params"}, {"$ref": "#/components/errors/Odd"}]},
                {"name": "sum", "paramStructure": "by-position", "params": []}
            ],
            "components": {
                "contentDescriptors": {"Minuend": {"name": "minuend", "schema": {"type": "integer"}, "required": true}},
                "errors": {"Odd": {"code": 42, "message": "odd"}}
            }
        });
        let d = openrpc(&doc, "calc.json").unwrap();
        assert_eq!(d.server.as_deref(), Some("calc 1.0"));
        assert_eq!(d.methods.len(), 2);
        let p = d.methods[0].params.as_ref().unwrap();
        assert_eq!((p[0].name.as_str(), p[0].required), ("minuend", true));
        assert_eq!(d.methods[0].errors, vec![-32602, 42]);
        assert!(d.methods[1].by_position);
        let e = openrpc(
            &json!({"openrpc": "1.3.2", "methods": [{"params": []}]}),
            "x.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("x.json") && e.contains("methods[0]"), "{e}");
        assert!(openrpc(&json!({"methods": []}), "y.json").is_err());
    }

    #[test]
    fn a_method_list_names_its_path() {
        let (d, p) = method_list(
            &json!({"httpPath": "/rpc", "methods": ["a", "b"]}),
            "m.json",
        )
        .unwrap();
        assert_eq!(p.as_deref(), Some("/rpc"));
        assert_eq!(d.methods.len(), 2);
        assert!(d.methods[0].params.is_none());
        assert!(method_list(&json!({"methods": [1]}), "m.json").is_err());
    }
}
