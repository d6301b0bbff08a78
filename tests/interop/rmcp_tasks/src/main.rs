//! The official Rust MCP SDK (rmcp) speaking the tasks extension (`io.modelcontextprotocol/tasks`,
//! MCP 2026-07-28), for rpctap's suite:
//!
//!   rmcp-tasks serve-stdio
//!   rmcp-tasks serve-http PORT
//!   rmcp-tasks client SCENARIO http URL
//!   rmcp-tasks client SCENARIO stdio COMMAND ARGS...
//!
//! Tools: `sum` (a task that ends after 200 ms with a + b), `slow` (a task that runs until
//! cancelled, at most 30 s), `ask` (a task that asks the client for a name with an elicitation,
//! then greets it). Scenarios: `complete` (sum, polling at the server's interval), `fast` (sum,
//! polling without waiting), `cancel` (slow, cancelled), `input` (ask, answered). The client
//! prints one JSON line: the task's final status, its text, and how many polls it took.

use rmcp::{
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::*,
    service::{RequestContext, RoleServer},
    task_manager::{TaskExit, TaskManager, TaskOptions},
    tool, tool_router, ErrorData as McpError, ServerHandler, ServiceExt,
};
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct SumArgs {
    a: i64,
    b: i64,
}

#[derive(Clone)]
struct TaskServer {
    tool_router: ToolRouter<TaskServer>,
    tasks: TaskManager,
}

#[tool_router]
impl TaskServer {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
            tasks: TaskManager::new(),
        }
    }

    #[tool(description = "Sum two numbers (as a task)")]
    async fn sum(
        &self,
        Parameters(SumArgs { a, b }): Parameters<SumArgs>,
    ) -> Result<CallToolResult, McpError> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            (a + b).to_string(),
        )]))
    }

    #[tool(description = "Runs until cancelled (as a task)")]
    async fn slow(&self) -> Result<CallToolResult, McpError> {
        Ok(CallToolResult::success(vec![ContentBlock::text("done")]))
    }

    #[tool(description = "Asks for a name, then greets it (as a task)")]
    async fn ask(&self) -> Result<CallToolResult, McpError> {
        Ok(CallToolResult::success(vec![ContentBlock::text("hello")]))
    }
}

fn text(t: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(t)])
}

impl ServerHandler for TaskServer {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if !tasks {
            let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
            return self.tool_router.call(tcc).await;
        }
        let opts = TaskOptions::new()
            .with_poll_interval_ms(50)
            .with_ttl_ms(60_000);
        let task = match request.name.as_ref() {
            "sum" => {
                let args: SumArgs = serde_json::from_value(Value::Object(
                    request.arguments.clone().unwrap_or_default(),
                ))
                .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
                self.tasks.spawn(opts, move |ctx| {
                    Box::pin(async move {
                        tokio::select! {
                            _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                                Ok(text((args.a + args.b).to_string()))
                            }
                        }
                    })
                })
            }
            "slow" => self.tasks.spawn(opts, |ctx| {
                Box::pin(async move {
                    tokio::select! {
                        _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                        _ = tokio::time::sleep(Duration::from_secs(30)) => Ok(text("done".into())),
                    }
                })
            }),
            "ask" => self.tasks.spawn(opts, |ctx| {
                Box::pin(async move {
                    let ask: InputRequest = serde_json::from_value(json!({
                        "method": "elicitation/create",
                        "params": {
                            "mode": "form",
                            "message": "Your name?",
                            "requestedSchema": {
                                "type": "object",
                                "properties": {"name": {"type": "string"}},
                                "required": ["name"]
                            }
                        }
                    }))
                    .map_err(|e| TaskExit::Error(McpError::internal_error(e.to_string(), None)))?;
                    let answer = ctx.request_input("name", ask).await?;
                    let name = answer["content"]["name"].as_str().unwrap_or("?").to_string();
                    Ok(text(format!("Hello, {name}!")))
                })
            }),
            other => {
                return Err(McpError::invalid_params(format!("no tool {other}"), None));
            }
        };
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("rmcp-tasks", "0.1.0"))
    }
}

async fn serve_http(port: u16) -> anyhow::Result<()> {
    use rmcp::transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    };
    let config = StreamableHttpServerConfig::default().with_sse_keep_alive(None);
    let service: StreamableHttpService<TaskServer, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(TaskServer::new()), Default::default(), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    axum::serve(listener, router).await?;
    Ok(())
}

fn client_info() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::builder()
            .enable_tasks()
            .enable_elicitation()
            .build(),
        Implementation::new("rmcp-tasks-client", "0.1.0"),
    )
}

/// Runs one scenario; returns its JSON line.
async fn scenario<S>(client: &rmcp::service::RunningService<rmcp::RoleClient, S>, which: &str) -> anyhow::Result<Value>
where
    S: rmcp::service::Service<rmcp::RoleClient>,
{
    let (tool, args) = match which {
        "complete" | "fast" => ("sum", json!({"a": 40, "b": 2})),
        "cancel" => ("slow", json!({})),
        "input" => ("ask", json!({})),
        other => anyhow::bail!("no scenario {other}"),
    };
    let params = CallToolRequestParams::new(tool).with_arguments(serde_json::from_value(args)?);
    let create = match client.call_tool_once(params).await? {
        CallToolResponse::Task(c) => c,
        other => anyhow::bail!("expected a task, got {other:?}"),
    };
    let id = create.task.task_id.clone();
    let interval = Duration::from_millis(create.task.poll_interval_ms.unwrap_or(50));
    if which == "cancel" {
        tokio::time::sleep(interval).await;
        client.peer().cancel_task(CancelTaskParams::new(id.clone())).await?;
    }
    let mut polls = 0u32;
    let mut answered = false;
    let last = loop {
        if which != "fast" {
            tokio::time::sleep(interval).await;
        }
        polls += 1;
        anyhow::ensure!(polls < 1000, "task {id} never ended");
        let got = client.peer().get_task(GetTaskParams::new(id.clone())).await?;
        let v = serde_json::to_value(&got)?;
        match v["status"].as_str() {
            Some("completed" | "failed" | "cancelled") => break v,
            Some("input_required") if !answered => {
                let keys: Vec<String> = v["inputRequests"]
                    .as_object()
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                let mut answers = serde_json::Map::new();
                for k in keys {
                    answers.insert(k, json!({"action": "accept", "content": {"name": "Luca"}}));
                }
                let input_responses = serde_json::from_value(Value::Object(answers))?;
                let mut p = UpdateTaskParams::new(id.clone(), input_responses);
                p.meta = None;
                client.peer().update_task(p).await?;
                answered = true;
            }
            _ => {}
        }
    };
    Ok(json!({
        "status": last["status"],
        "text": last["result"]["content"][0]["text"],
        "polls": polls,
    }))
}

async fn client(args: &[String]) -> anyhow::Result<()> {
    let [which, transport, rest @ ..] = args else {
        anyhow::bail!("client SCENARIO (http URL | stdio COMMAND ARGS...)");
    };
    let out = match transport.as_str() {
        "http" => {
            let url = rest.first().ok_or_else(|| anyhow::anyhow!("no URL"))?;
            let t = rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
            let c = client_info().serve(t).await?;
            let out = scenario(&c, which).await;
            let _ = c.cancel().await;
            out?
        }
        "stdio" => {
            let (cmd, cargs) = rest.split_first().ok_or_else(|| anyhow::anyhow!("no command"))?;
            let mut command = tokio::process::Command::new(cmd);
            command.args(cargs);
            let t = rmcp::transport::TokioChildProcess::new(command)?;
            let c = client_info().serve(t).await?;
            let out = scenario(&c, which).await;
            let _ = c.cancel().await;
            out?
        }
        other => anyhow::bail!("no transport {other}"),
    };
    println!("{out}");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve-stdio") => {
            let s = TaskServer::new().serve(rmcp::transport::stdio()).await?;
            s.waiting().await?;
        }
        Some("serve-http") => {
            let port = args.get(1).and_then(|p| p.parse().ok()).unwrap_or(8000);
            serve_http(port).await?;
        }
        Some("client") => client(&args[1..]).await?,
        _ => anyhow::bail!("serve-stdio | serve-http PORT | client SCENARIO TRANSPORT ..."),
    }
    Ok(())
}
