//! `rpctap mcp`: the recordings served to an AI agent as MCP tools, on stdio.

use super::AppError;

/// `rpctap mcp`: the recordings as an MCP server on stdio.
pub async fn run(args: crate::cli::McpArgs) -> Result<i32, AppError> {
    let source = match args.dir {
        Some(d) => crate::offline::agent::Source::Dir(d),
        None => crate::offline::agent::Source::Home(
            crate::hub::Home::from_env().map_err(|e| AppError::Io(e.to_string()))?,
        ),
    };
    crate::offline::agent::serve_stdio(crate::offline::agent::Agent {
        source: Some(source),
        own: None,
        allow_replay: args.allow_replay,
    })
    .await
    .map_err(|e| AppError::Io(format!("stdio: {e}")))?;
    Ok(0)
}
