//! The cases a description calls for, before they are tried: per tool a happy path (arguments
//! from its input schema, its output schema checked when declared), a required argument
//! missing and an argument of the wrong type; per prompt and resource a get and a read; then an
//! unknown tool, an unknown method, an invalid envelope, text that is not JSON, a notification
//! and — where the version allows them — a batch. Each negative case first expects what the
//! specification calls for; `pin` (in `run`) then writes what the server really answers.

use super::describe::{Description, Method};
use super::suite::{Call, Case, Expect, Kind, Protocol};
use super::values;
use serde_json::{json, Map, Value};

/// The tool name no server has.
pub const NO_SUCH_TOOL: &str = "rpctap-probe-no-such-tool";
/// The method no server has.
pub const NO_SUCH_METHOD: &str = "rpctap/no-such-method";
/// A notification no server knows: it must be ignored, with no reply.
pub const NOTIFICATION: &str = "notifications/rpctap/probe";
/// Not JSON: the JSON-RPC spec's own parse-error example.
pub const NOT_JSON: &str = r#"{"jsonrpc": "2.0", "method": "foobar", "params": "bar", "baz]"#;
/// An envelope whose method is not a string (the spec's invalid-request example, with an id).
pub const INVALID_ENVELOPE: &str =
    r#"{"jsonrpc": "2.0", "method": 1, "params": "bar", "id": "rpctap-invalid"}"#;

/// How many resources are read and templates tried (a server may list thousands).
const MAX_RESOURCES: usize = 20;

/// What the generator is told.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Tools that do not declare `readOnlyHint: true` are run too.
    pub include_writes: bool,
}

fn happy_expect(tool: bool) -> Expect {
    Expect {
        no_error: Some(true),
        result_exists: Some(true),
        tool_call_succeeded: tool.then_some(true),
        reply_matches_call: Some(true),
        ..Default::default()
    }
}

/// What the spec calls for when a call is refused with `code`.
fn refused(code: i64) -> Expect {
    Expect {
        has_error: Some(true),
        error_code: Some(code),
        ..Default::default()
    }
}

fn call_case(
    name: String,
    kind: Kind,
    method: &str,
    params: Option<Value>,
    expect: Expect,
) -> Case {
    Case::call(name, kind, method, params, expect)
}

fn raw_case(name: &str, kind: Kind, raw: &str, expect: Expect) -> Case {
    Case {
        method: None,
        raw: Some(raw.to_string()),
        ..Case::call(name, kind, "", None, expect)
    }
}

/// Whether an MCP version allows batches (2025-03-26 only).
fn batches(version: Option<&str>) -> bool {
    version == Some("2025-03-26")
}

/// Every case `d` calls for.
pub fn cases(d: &Description, opts: &Options) -> Vec<Case> {
    let mut out = Vec::new();
    match d.protocol {
        Protocol::Mcp => mcp_cases(d, opts, &mut out),
        Protocol::Jsonrpc => jsonrpc_cases(d, &mut out),
    }
    out.push(call_case(
        "unknown method".into(),
        Kind::UnknownMethod,
        NO_SUCH_METHOD,
        Some(json!({})),
        refused(-32601),
    ));
    out.push(raw_case(
        "invalid envelope",
        Kind::InvalidRequest,
        INVALID_ENVELOPE,
        refused(-32600),
    ));
    out.push(raw_case(
        "not JSON",
        Kind::ParseError,
        NOT_JSON,
        refused(-32700),
    ));
    out
}

fn mcp_cases(d: &Description, opts: &Options, out: &mut Vec<Case>) {
    for t in &d.tools {
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            continue;
        };
        let schema = t
            .get("inputSchema")
            .cloned()
            .unwrap_or(json!({"type": "object"}));
        let args = values::valid(&schema);
        let read_only = t
            .pointer("/annotations/readOnlyHint")
            .and_then(Value::as_bool)
            == Some(true);
        let disabled = (!read_only && !opts.include_writes).then(|| {
            "may change data: the tool does not declare readOnlyHint: true (probe with --include-writes, or delete this line)".to_string()
        });
        let call = |args: Value| json!({"name": name, "arguments": args});
        let mut happy = happy_expect(true);
        happy.output_schema = t.get("outputSchema").cloned();
        let mut mine = vec![call_case(
            format!("tool {name}: happy path"),
            Kind::Happy,
            "tools/call",
            Some(call(args.clone())),
            happy,
        )];
        let required = values::required(&schema, &schema);
        if let (Some(first), Value::Object(a)) = (required.first(), &args) {
            let mut less = a.clone();
            less.remove(*first);
            mine.push(call_case(
                format!("tool {name}: required argument {first} missing"),
                Kind::MissingRequired,
                "tools/call",
                Some(call(Value::Object(less))),
                refused(-32602),
            ));
        }
        if let Some((prop, wrong)) = values::properties(&schema, &schema)
            .into_iter()
            .find_map(|(k, p)| values::wrong_type(&schema, p).map(|w| (k, w)))
        {
            let mut a = args.as_object().cloned().unwrap_or_default();
            a.insert(prop.to_string(), wrong);
            mine.push(call_case(
                format!("tool {name}: argument {prop} of the wrong type"),
                Kind::WrongType,
                "tools/call",
                Some(call(Value::Object(a))),
                refused(-32602),
            ));
        }
        for c in &mut mine {
            c.disabled = disabled.clone();
        }
        out.extend(mine);
    }
    if !d.tools.is_empty() {
        out.push(call_case(
            "unknown tool".into(),
            Kind::UnknownTool,
            "tools/call",
            Some(json!({"name": NO_SUCH_TOOL, "arguments": {}})),
            refused(-32602),
        ));
    }
    for p in &d.prompts {
        let Some(name) = p.get("name").and_then(Value::as_str) else {
            continue;
        };
        let args: Vec<(&str, bool)> = p
            .get("arguments")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| {
                        Some((
                            x.get("name")?.as_str()?,
                            x.get("required").and_then(Value::as_bool).unwrap_or(false),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let given: Map<String, Value> = args
            .iter()
            .filter(|(_, r)| *r)
            .map(|(k, _)| (k.to_string(), json!("example")))
            .collect();
        out.push(call_case(
            format!("prompt {name}: get"),
            Kind::Happy,
            "prompts/get",
            Some(json!({"name": name, "arguments": given.clone()})),
            happy_expect(false),
        ));
        if let Some((first, _)) = args.iter().find(|(_, r)| *r) {
            let mut less = given.clone();
            less.remove(*first);
            out.push(call_case(
                format!("prompt {name}: required argument {first} missing"),
                Kind::MissingRequired,
                "prompts/get",
                Some(json!({"name": name, "arguments": less})),
                refused(-32602),
            ));
        }
    }
    for r in d.resources.iter().take(MAX_RESOURCES) {
        let Some(uri) = r.get("uri").and_then(Value::as_str) else {
            continue;
        };
        out.push(call_case(
            format!("resource {uri}: read"),
            Kind::Happy,
            "resources/read",
            Some(json!({"uri": uri})),
            happy_expect(false),
        ));
    }
    for t in d.templates.iter().take(MAX_RESOURCES) {
        let Some(tpl) = t.get("uriTemplate").and_then(Value::as_str) else {
            continue;
        };
        out.push(call_case(
            format!("resource template {tpl}: read"),
            Kind::Happy,
            "resources/read",
            Some(json!({"uri": expand(tpl)})),
            happy_expect(false),
        ));
    }
    out.push(Case {
        notification: true,
        ..call_case(
            "notification gets no reply".into(),
            Kind::Notification,
            NOTIFICATION,
            None,
            Expect {
                no_reply: Some(true),
                ..Default::default()
            },
        )
    });
    if batches(d.mcp_version.as_deref()) {
        out.push(batch_case(vec![
            Call {
                method: "ping".into(),
                params: None,
                notification: false,
            },
            Call {
                method: NO_SUCH_METHOD.into(),
                params: None,
                notification: false,
            },
        ]));
    }
}

/// A URI template with every expression given a value (RFC 6570's simple and reserved forms).
fn expand(tpl: &str) -> String {
    let mut out = String::new();
    let mut rest = tpl;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        match rest[i..].find('}') {
            Some(j) => {
                out.push('1');
                rest = &rest[i + j + 1..];
            }
            None => {
                rest = &rest[i..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

fn batch_case(calls: Vec<Call>) -> Case {
    let answered = calls.iter().filter(|c| !c.notification).count();
    Case {
        method: None,
        batch: Some(calls),
        ..Case::call(
            "batch",
            Kind::Batch,
            "",
            None,
            Expect {
                replies: Some(answered),
                ..Default::default()
            },
        )
    }
}

/// A method's params from its declared parameters: by name, the required ones; by position,
/// every one up to the last required.
pub fn params_of(
    m: &Method,
    root: &Value,
    drop: Option<usize>,
    wrong: Option<usize>,
) -> Option<Value> {
    let ps = m.params.as_ref()?;
    let value = |i: usize| -> Option<Value> {
        let p = &ps[i];
        if Some(i) == wrong {
            return values::wrong_type(root, &p.schema);
        }
        Some(values::valid_with_root(root, &p.schema))
    };
    if m.by_position {
        let last = ps.iter().rposition(|p| p.required).map_or(0, |i| i + 1);
        let upto = match drop {
            Some(d) => d.min(last),
            None => last,
        };
        Some(Value::Array((0..upto).filter_map(value).collect()))
    } else {
        let mut o = Map::new();
        for (i, p) in ps.iter().enumerate() {
            if (p.required || Some(i) == wrong) && Some(i) != drop {
                if let Some(v) = value(i) {
                    o.insert(p.name.clone(), v);
                }
            }
        }
        Some(Value::Object(o))
    }
}

fn jsonrpc_cases(d: &Description, out: &mut Vec<Case>) {
    let root = &d.document;
    for m in &d.methods {
        let name = &m.name;
        // The documented code for invalid params if the method promises one, else the spec's.
        let invalid = if m.errors.is_empty() || m.errors.contains(&-32602) {
            -32602
        } else {
            m.errors[0]
        };
        out.push(call_case(
            format!("method {name}: happy path"),
            Kind::Happy,
            name,
            params_of(m, root, None, None),
            happy_expect(false),
        ));
        let Some(ps) = &m.params else {
            continue;
        };
        if let Some(first) = ps.iter().position(|p| p.required) {
            out.push(call_case(
                format!("method {name}: required param {} missing", ps[first].name),
                Kind::MissingRequired,
                name,
                params_of(m, root, Some(first), None),
                refused(invalid),
            ));
        }
        if let Some(i) = ps
            .iter()
            .position(|p| p.required && values::wrong_type(root, &p.schema).is_some())
        {
            out.push(call_case(
                format!("method {name}: param {} of the wrong type", ps[i].name),
                Kind::WrongType,
                name,
                params_of(m, root, None, Some(i)),
                refused(invalid),
            ));
        }
    }
    if let Some(m) = d.methods.first() {
        out.push(Case {
            notification: true,
            ..call_case(
                format!("method {}: as a notification gets no reply", m.name),
                Kind::Notification,
                &m.name,
                params_of(m, root, None, None),
                Expect {
                    no_reply: Some(true),
                    ..Default::default()
                },
            )
        });
        out.push(batch_case(vec![
            Call {
                method: m.name.clone(),
                params: params_of(m, root, None, None),
                notification: false,
            },
            Call {
                method: NO_SUCH_METHOD.into(),
                params: None,
                notification: false,
            },
            Call {
                method: m.name.clone(),
                params: params_of(m, root, None, None),
                notification: true,
            },
        ]));
    }
}

/// Points a JSON-RPC suite's notification and batch at a method whose happy path the server
/// answered (they were generated for the first method, before any case was tried): the first
/// such `happy` case's method and params.
pub fn retarget(c: &mut Case, happy: &Case) {
    let (Some(method), params) = (happy.method.clone(), happy.params.clone()) else {
        return;
    };
    match c.kind {
        Kind::Notification => {
            c.name = format!("method {method}: as a notification gets no reply");
            c.method = Some(method);
            c.params = params;
        }
        Kind::Batch => {
            if let Some(calls) = &mut c.batch {
                for call in calls.iter_mut().filter(|k| k.method != NO_SUCH_METHOD) {
                    call.method = method.clone();
                    call.params = params.clone();
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::describe::Param;

    #[test]
    fn a_tool_gets_a_happy_path_and_two_refusals_disabled_unless_read_only() {
        let d = Description {
            protocol: Protocol::Mcp,
            mcp_version: Some("2025-11-25".into()),
            tools: vec![
                json!({"name": "add", "inputSchema": {"type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}),
                json!({"name": "now", "annotations": {"readOnlyHint": true},
                    "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}}),
            ],
            ..Default::default()
        };
        let c = cases(&d, &Options::default());
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "tool add: happy path",
                "tool add: required argument a missing",
                "tool add: argument a of the wrong type",
                "tool now: happy path",
                "unknown tool",
                "notification gets no reply",
                "unknown method",
                "invalid envelope",
                "not JSON"
            ]
        );
        assert!(c[0].disabled.as_deref().unwrap().contains("readOnlyHint"));
        assert!(c[3].disabled.is_none());
        assert_eq!(
            c[0].params,
            Some(json!({"name": "add", "arguments": {"a": 0, "b": 0}}))
        );
        assert_eq!(
            c[1].params,
            Some(json!({"name": "add", "arguments": {"b": 0}}))
        );
        assert_eq!(
            c[2].params,
            Some(json!({"name": "add", "arguments": {"a": {}, "b": 0}}))
        );
        assert_eq!(c[3].expect.output_schema, Some(json!({"type": "object"})));
        let all = cases(
            &d,
            &Options {
                include_writes: true,
            },
        );
        assert!(all.iter().all(|c| c.disabled.is_none()));
        // 2025-03-26 allows batches.
        let d = Description {
            mcp_version: Some("2025-03-26".into()),
            ..d
        };
        assert!(cases(&d, &Options::default())
            .iter()
            .any(|c| c.kind == Kind::Batch));
    }

    #[test]
    fn openrpc_methods_by_name_and_by_position() {
        let m = Method {
            name: "subtract".into(),
            params: Some(vec![
                Param {
                    name: "minuend".into(),
                    schema: json!({"type": "integer"}),
                    required: true,
                },
                Param {
                    name: "subtrahend".into(),
                    schema: json!({"type": "integer", "minimum": 1}),
                    required: true,
                },
                Param {
                    name: "note".into(),
                    schema: json!({"type": "string"}),
                    required: false,
                },
            ]),
            by_position: false,
            errors: vec![],
        };
        let root = json!({});
        assert_eq!(
            params_of(&m, &root, None, None),
            Some(json!({"minuend": 0, "subtrahend": 1}))
        );
        assert_eq!(
            params_of(&m, &root, Some(0), None),
            Some(json!({"subtrahend": 1}))
        );
        assert_eq!(
            params_of(&m, &root, None, Some(1)),
            Some(json!({"minuend": 0, "subtrahend": {}}))
        );
        let p = Method {
            by_position: true,
            ..m
        };
        assert_eq!(params_of(&p, &root, None, None), Some(json!([0, 1])));
        assert_eq!(params_of(&p, &root, Some(1), None), Some(json!([0])));
        assert_eq!(expand("demo://item/{id}/{+rest}"), "demo://item/1/1");
    }
}
