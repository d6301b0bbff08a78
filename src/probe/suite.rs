//! The suite file: what `rpctap probe` writes and `rpctap test` runs — a JSON document, one key
//! per line when written, so a review reads it and a diff shows what changed (JSON rather than
//! TOML: a JSON-RPC call's params are JSON, `null` included, and are written as they are sent).
//! Its format is documented in `docs/suites.md`; every unknown key is an error naming it (a
//! typo never silently turns an assertion off).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// The format's version, in every suite's `suite` key.
pub const VERSION: u32 = 1;

/// A suite of cases for one server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// The format's version ([`VERSION`]).
    pub suite: u32,
    pub target: Target,
    /// Findings of rpctap's accepted on the session itself (its opening, its end), as a case's
    /// `allow` (codes; the probe writes what it found).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default)]
    pub cases: Vec<Case>,
}

/// What a suite runs against (`rpctap test --target` overrides `url` and `command`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// A Streamable HTTP MCP endpoint or a JSON-RPC URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A stdio server's command and arguments (started fresh for every run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    pub protocol: Protocol,
    /// The MCP protocol version `initialize` asks for (MCP only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_version: Option<String>,
    /// The bearer token, as `env:NAME` (never the token itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<String>,
    /// What the server said it is when the suite was made (for the reader).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// An MCP server: a session is opened (`initialize`) before the cases and closed after.
    #[default]
    Mcp,
    /// A plain JSON-RPC 2.0 server: the cases are sent as they are.
    Jsonrpc,
}

/// What a case tests (for the reader and the report; the assertions decide).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Happy,
    MissingRequired,
    WrongType,
    UnknownMethod,
    UnknownTool,
    InvalidRequest,
    ParseError,
    Notification,
    Batch,
    /// Added by `--fuzz`: an input that crashed, hung or broke the output schema.
    Fuzz,
    /// A call a recording holds, expecting what the recorded server answered.
    Recorded,
}

impl Kind {
    /// A case that sends what the server must refuse.
    pub fn negative(self) -> bool {
        !matches!(
            self,
            Kind::Happy | Kind::Notification | Kind::Batch | Kind::Recorded
        )
    }

    /// A case whose request is invalid on purpose: what rpctap finds in it is the case's doing.
    pub fn sends_invalid(self) -> bool {
        matches!(
            self,
            Kind::MissingRequired | Kind::WrongType | Kind::InvalidRequest | Kind::ParseError
        )
    }
}

/// One call of a batch case.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Call {
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
    /// Sent without an id: it gets no reply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notification: bool,
}

/// One case: a request (a call, a notification, a batch or raw bytes) and what its reply must be.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    pub kind: Kind,
    /// Why the case is not run (a tool that may change data, arguments that did not succeed);
    /// delete the line to run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
    /// Sent without an id (it must get no reply).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notification: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<Vec<Call>>,
    /// The body sent as it is (an invalid envelope, text that is not JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    pub expect: Expect,
    /// Findings of rpctap's accepted on this case (codes): what the server's answer to an
    /// invalid input is flagged for when the probe made the suite (listed, failing nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// What the generator noticed (the code the server gave where the spec calls for another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Case {
    /// A case that calls `method` with `params` (nothing else set).
    pub fn call(
        name: impl Into<String>,
        kind: Kind,
        method: &str,
        params: Option<Value>,
        expect: Expect,
    ) -> Case {
        Case {
            name: name.into(),
            kind,
            disabled: None,
            method: Some(method.to_string()),
            params,
            notification: false,
            batch: None,
            raw: None,
            expect,
            allow: vec![],
            note: None,
        }
    }
}

/// A case's assertions (the seed's vocabulary); each one given is checked.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// JSON-RPC: No Error — the reply has no `error` member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_error: Option<bool>,
    /// JSON-RPC: Has Error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_error: Option<bool>,
    /// JSON-RPC: Error Code Equals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<i64>,
    /// JSON-RPC: Error Message Contains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message_contains: Option<String>,
    /// JSON-RPC: Result Exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_exists: Option<bool>,
    /// MCP: Tool Call Succeeded — a result not flagged `isError`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_succeeded: Option<bool>,
    /// MCP: the tool refused the input as a tool error (`isError: true`), which MCP allows for
    /// input validation from 2025-11-25 on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_error: Option<bool>,
    /// MCP: Tool Output Contains — the text the tool returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_output_contains: Option<String>,
    /// JSON-RPC: Reply Matches Call — the reply carries the id the request sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_matches_call: Option<bool>,
    /// The tool's declared output schema, which `structuredContent` must meet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Refused at the HTTP layer with this status, without a JSON-RPC reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<u16>,
    /// No reply at all (a notification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_reply: Option<bool>,
    /// The server answers without breaking: a reply (a result, or an error other than the
    /// internal error -32603), neither a 5xx nor nothing (what `--fuzz` cases expect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_crash: Option<bool>,
    /// A batch: this many replies, each to one of its calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replies: Option<usize>,
}

/// Why a suite cannot be read (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("cannot read the suite {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the suite {path} is not valid: {message}")]
    Invalid { path: String, message: String },
    #[error("cannot write the suite {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

impl Suite {
    /// Reads and checks a suite file.
    pub fn load(path: &Path) -> Result<Suite, SuiteError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SuiteError::Read {
            path: shown.clone(),
            source,
        })?;
        Suite::parse(&text).map_err(|message| SuiteError::Invalid {
            path: shown,
            message,
        })
    }

    /// Parses a suite's text and checks what serde cannot: the version, that every case sends
    /// exactly one thing, unique names, a target that names how to reach the server.
    pub fn parse(text: &str) -> Result<Suite, String> {
        let s: Suite = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if s.suite != VERSION {
            return Err(format!(
                "\"suite\": {} — this rpctap reads version {VERSION}",
                s.suite
            ));
        }
        if let Some(b) = &s.target.bearer {
            crate::probe::bearer_env(b)?;
        }
        let mut names = std::collections::HashSet::new();
        for c in &s.cases {
            let sends = [c.method.is_some(), c.batch.is_some(), c.raw.is_some()]
                .iter()
                .filter(|x| **x)
                .count();
            if sends != 1 {
                return Err(format!(
                    "case {:?}: give exactly one of \"method\", \"batch\" or \"raw\"",
                    c.name
                ));
            }
            if !names.insert(c.name.as_str()) {
                return Err(format!("case {:?} is named twice", c.name));
            }
            if let Some(v) = &c.expect.output_schema {
                jsonschema::validator_for(v)
                    .map_err(|e| format!("case {:?}: output_schema: {e}", c.name))?;
            }
        }
        Ok(s)
    }

    /// The suite as written: pretty JSON, keys in their declared order, a newline at the end.
    pub fn to_text(&self) -> String {
        let mut t = serde_json::to_string_pretty(self).unwrap_or_default();
        t.push('\n');
        t
    }

    pub fn save(&self, path: &Path) -> Result<(), SuiteError> {
        std::fs::write(path, self.to_text()).map_err(|source| SuiteError::Write {
            path: path.display().to_string(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_in_a_suite_is_an_error_naming_it() {
        let ok = r#"{"suite": 1, "target": {"url": "http://x/mcp", "protocol": "mcp"},
            "cases": [{"name": "a", "kind": "happy", "method": "ping", "expect": {"no_error": true}}]}"#;
        let s = Suite::parse(ok).unwrap();
        assert_eq!(Suite::parse(&s.to_text()).unwrap(), s);
        let typo = ok.replace("no_error", "no_eror");
        let e = Suite::parse(&typo).unwrap_err();
        assert!(e.contains("no_eror") && e.contains("line"), "{e}");
        let two = ok.replace(r#""method": "ping""#, r#""method": "ping", "raw": "{}""#);
        assert!(Suite::parse(&two).unwrap_err().contains("exactly one"));
        let v2 = ok.replace(r#""suite": 1"#, r#""suite": 2"#);
        assert!(Suite::parse(&v2).unwrap_err().contains("version 1"));
        let token = ok.replace(
            r#""protocol": "mcp""#,
            r#""protocol": "mcp", "bearer": "abc""#,
        );
        assert!(Suite::parse(&token).unwrap_err().contains("env:NAME"));
    }
}
