//! Tests from a server's own description (`rpctap probe`, `rpctap test`): what a server offers is
//! read (a live MCP server's lists, an OpenRPC document, a method list — [`describe`]), the cases
//! it calls for are generated from its schemas ([`generate`], [`values`]) and tried once, so each
//! negative case expects what the server really answers ([`run::pin`]), and written as a
//! reviewable suite ([`suite`]); a suite is run with the seed's verdicts and assertions
//! ([`run`]), reported as text, JSON or JUnit ([`report`]).
//!
//! Everything here speaks through [`session::Session`], an HTTP client to one URL: the
//! subcommands (`app::probe`) put rpctap's own proxy (or, for a stdio server, its bridge) in
//! front of the target and point the session at it, so every case is inspected and recorded as
//! live traffic is, and the findings are set beside the cases they are about.

pub mod describe;
pub mod findings;
pub mod generate;
pub mod recorded;
pub mod report;
pub mod run;
pub mod session;
pub mod suite;
pub mod values;

/// Why a probe or a test run cannot go on (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot reach {0}: {1}")]
    Unreachable(String, String),
    #[error("{0} is not an MCP server: {1}")]
    NotMcp(String, String),
    #[error(transparent)]
    Suite(#[from] suite::SuiteError),
    #[error("the OpenRPC document {0} is not valid: {1}")]
    OpenRpc(String, String),
    #[error("the method list {0} is not valid: {1}")]
    MethodList(String, String),
    #[error("{0}")]
    Usage(String),
}

/// The variable a bearer token is read from: `env:NAME` (a token is never written in a suite
/// or on a command line, where a shell's history keeps it).
pub fn bearer_env(spec: &str) -> Result<&str, String> {
    match spec.strip_prefix("env:") {
        Some(name) if !name.is_empty() => Ok(name),
        _ => Err(format!(
            "bearer {spec:?}: give it as env:NAME (the variable holding the token), never the token itself"
        )),
    }
}

/// The token `env:NAME` names.
pub fn bearer(spec: &str) -> Result<String, ProbeError> {
    let name = bearer_env(spec).map_err(ProbeError::Usage)?;
    std::env::var(name).map_err(|_| {
        ProbeError::Usage(format!("bearer env:{name}: the variable {name} is not set"))
    })
}

/// A JSON-RPC id as the findings name it (its JSON text).
pub fn id_text(id: &serde_json::Value) -> String {
    id.to_string()
}
