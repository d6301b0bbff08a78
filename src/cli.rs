//! The command line, defined in one place (clap derive). `config` turns it into validated
//! options; nothing else reads flags.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "rpctap",
    version,
    about = "A transparent, inspecting reverse proxy for JSON-RPC 2.0 and MCP"
)]
pub struct Cli {
    /// Without one: `watch` on a terminal, this help elsewhere.
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Proxy a JSON-RPC / MCP server, inspecting every frame.
    Proxy(ProxyArgs),
    /// Run the demo: the demo server on a free port and the proxy in front of it.
    Demo(DemoArgs),
    /// Run the embedded demo upstream (JSON-RPC test methods on /jsonrpc, MCP on /mcp).
    DemoServer(DemoServerArgs),
    /// Re-send a recording's client traffic to a server and compare the replies (exit 1 on any
    /// regression).
    Replay(ReplayArgs),
    /// Serve a recording as the server.
    Mock(MockArgs),
    /// Write a test suite for a server from its own description: `rpctap probe URL`,
    /// `rpctap probe -- COMMAND …` (a stdio server), `rpctap probe api.openrpc.json`. Each tool,
    /// prompt, resource or method gets a happy path and refusals, tried once so each expects
    /// what the server really answers.
    Probe(ProbeArgs),
    /// Run a test suite (`rpctap probe` writes one) against a server, through the inspector:
    /// verdicts, assertions and protocol findings per case (exit 1 on a failure, 2 when it
    /// cannot run).
    Test(TestArgs),
    /// Check an exchange document (or a recording, scope by scope) offline, as a gate.
    Check(CheckArgs),
    /// Show, accept or reset a server's tool baseline (what `MCP_TOOL_DRIFT` compares with).
    Baseline(BaselineArgs),
    /// Serve the recorded sessions as an MCP server on stdio, for an AI agent: list_sessions,
    /// list_calls, get_call, find_anomalies, stats, cost, check, diff, replay_call.
    Mcp(McpArgs),
    /// What changed between two sessions (recordings or session names): tools, prompts and
    /// resources offered, calls' outcomes and latencies (exit 1 on a regression with
    /// `--exit-code`).
    Diff(DiffArgs),
    /// What a recorded session costs an agent's context, in tokens: each tool, prompt and
    /// resource definition (biggest first), each method's arguments and results (p50, p95,
    /// max), each session's totals.
    Cost(CostArgs),
    /// Export a recording as exchange documents, HAR or an HTML report.
    Export(ExportArgs),
    /// Open a recording in the dashboard.
    View(ViewArgs),
    /// Wrap a stdio MCP server: `rpctap stdio [OPTIONS] -- COMMAND [ARGS…]` relays the
    /// client's stdin/stdout to the command, inspecting every line.
    Stdio(StdioArgs),
    /// Serve a stdio MCP server over Streamable HTTP: `rpctap serve --listen ADDR -- COMMAND …`
    /// runs one child per MCP session (or one for all with `--shared`), inspected as the proxy
    /// inspects.
    Serve(ServeArgs),
    /// Open the dashboard on a running rpctap's live feed (its `--admin` address).
    Attach(AttachArgs),
    /// The dashboard over every rpctap on this machine: live shims and proxies joined with
    /// `--hub`, and the newest past sessions.
    Watch(WatchArgs),
    /// List the sessions in the state directory, live and ended.
    Sessions(SessionsArgs),
    /// Open a session (its name, a unique prefix of it, or a label: its newest), a recording
    /// file, or `-` (a recording on stdin) in the dashboard.
    Open(OpenArgs),
    /// Delete ended sessions older than an age.
    Prune(PruneArgs),
    /// Wrap (or unwrap) every stdio server of a desktop client's MCP config in `rpctap stdio`.
    Config(ConfigArgs),
    /// Print a shell completion script: `source <(rpctap completions bash)`.
    Completions(CompletionsArgs),
    /// Print the manual page (roff): `rpctap man | man -l -`.
    Man,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, powershell or elvish.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// How many past sessions are loaded at start (the newest).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub history: usize,
    /// Most calls kept in the list.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_rows: usize,
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// One JSON array (name, label, command, pid, live, started, recording, bytes, calls,
    /// errors, anomalies).
    #[arg(long)]
    pub json: bool,
    /// Most sessions listed (the newest).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub struct OpenArgs {
    /// A session name or prefix, a label, a file, or `-` for stdin.
    pub session: String,
    /// Most calls kept in the list.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_rows: usize,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// The age beyond which an ended session goes, e.g. `30d`, `12h`, `90min` (required: there
    /// is no default).
    #[arg(long, value_name = "AGE", value_parser = parse_duration)]
    pub older_than: std::time::Duration,
    /// List what would go, delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub action: ConfigAction,
}

/// Desktop clients whose MCP config `config wrap` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClientKind {
    /// Claude Desktop's `claude_desktop_config.json`.
    ClaudeDesktop,
    /// Claude Code's project `.mcp.json`.
    ClaudeCode,
    /// Cursor's `~/.cursor/mcp.json` (or a project's `.cursor/mcp.json`).
    Cursor,
    /// VS Code's `.vscode/mcp.json` (its `servers` key).
    Vscode,
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Make each stdio server run through `rpctap stdio --label NAME --` (idempotent; the file
    /// is backed up first).
    Wrap(WrapArgs),
    /// Undo `wrap`: the file as it was (byte for byte when it was not edited since).
    Unwrap(WrapArgs),
}

#[derive(Debug, Args)]
pub struct WrapArgs {
    /// The config file (default: the client's usual location; every client's found one
    /// without --client).
    pub file: Option<PathBuf>,
    /// Which client's default location to use.
    #[arg(long, value_enum)]
    pub client: Option<ClientKind>,
    /// Print the change as a diff, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The rpctap the wrapped entries run (default: this one's absolute path).
    #[arg(long, value_name = "PATH")]
    pub rpctap: Option<PathBuf>,
}

/// A duration as every flag takes it (`30d`, `12h`, `90min`, `2s`, a bare number of seconds).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    crate::units::secs(s).and_then(|v| {
        std::time::Duration::try_from_secs_f64(v).map_err(|_| format!("{s:?} is out of range"))
    })
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The admin address (`IP:PORT`, `:PORT`, `unix:PATH`) or its URL (`http://HOST:PORT`).
    pub addr: String,
    /// The admin token, when the feed needs one.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "RPCTAP_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Most calls kept in the list.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_rows: usize,
    /// Print the feed as the headless log does (`--log text`: a line per call, notification and
    /// finding) instead of the dashboard; the default when stdout is not a terminal.
    #[arg(long)]
    pub text: bool,
    /// Only what this filter matches (the dashboard's filter language, e.g. `tool:search
    /// error`), asked of the feed itself.
    #[arg(long, value_name = "FILTER")]
    pub filter: Option<String>,
}

#[derive(Debug, Args)]
pub struct StdioArgs {
    #[command(flatten)]
    pub shared: SharedFlags,
    /// The name the server is shown by (default: the script, package or binary the command
    /// runs).
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,
    /// Do not record this session (by default it is recorded into the state directory).
    #[arg(long, conflicts_with = "record")]
    pub no_record: bool,
    /// Stay out of the hub: no session file, no registration, no live feed unless --admin.
    #[arg(long)]
    pub no_hub: bool,
    /// Write the log to this file instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Be a stdio server for a remote Streamable HTTP MCP server at this URL (instead of
    /// running a command).
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub upstream: Option<String>,
    /// With --upstream: a header sent with every request, `NAME=VALUE` or `NAME=env:VAR`
    /// (repeatable; its value is never recorded).
    #[arg(long = "header", value_name = "NAME=VALUE", requires = "upstream")]
    pub headers: Vec<String>,
    /// With --upstream: skip the certificate check (as `proxy --upstream-insecure`).
    #[arg(long, requires = "upstream")]
    pub upstream_insecure: bool,
    /// The dashboard on this terminal (/dev/tty) while the client that started rpctap talks
    /// over its stdin and stdout: for a client run from a terminal. The one place a stdio
    /// session's messages can be intercepted (`I`).
    #[arg(long)]
    pub dashboard: bool,
    /// With --dashboard: how long an intercepted message waits for a verdict before it
    /// forwards itself (default 60s).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs, requires = "dashboard")]
    pub intercept_timeout: Option<f64>,
    /// With --dashboard: start intercepting the messages this filter matches (`I` changes it).
    #[arg(long, value_name = "FILTER", requires = "dashboard")]
    pub intercept: Option<String>,
    /// The server command and its arguments, after `--`.
    #[arg(
        last = true,
        required_unless_present = "upstream",
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

impl StdioArgs {
    /// The settings as `proxy`'s flags carry them (HTTP's own at their defaults).
    pub fn flags(&self) -> ProxyFlags {
        self.shared.clone().into()
    }
}

#[derive(Debug, Args)]
pub struct ViewArgs {
    /// The recording.
    pub file: PathBuf,
    /// Most calls kept in the list.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_rows: usize,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recording (rotated parts FILE.1, FILE.2… are read too).
    pub file: PathBuf,
    /// The server to replay against (an HTTP recording).
    #[arg(
        long,
        short = 't',
        value_name = "URL",
        conflicts_with = "target_command"
    )]
    pub target: Option<String>,
    /// A stdio recording: replay against the command after `--` (default: the recorded one).
    #[arg(long)]
    pub target_command: bool,
    /// The stdio server's command and arguments (with --target-command).
    #[arg(last = true, value_name = "COMMAND", requires = "target_command")]
    pub command: Vec<String>,
    /// A path not to compare, e.g. `result.serverInfo.version` or `result.content[*].text`
    /// (repeatable; also `[replay] ignore` in the config file).
    #[arg(long, value_name = "PATH")]
    pub ignore: Vec<String>,
    /// Config file with a `[replay] ignore = [...]` list of volatile paths.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// How long to wait for each reply (`30s`).
    #[arg(long, value_name = "DURATION", default_value_t = 30.0, value_parser = crate::units::secs)]
    pub timeout: f64,
    /// An extra request header, `Name: value` (repeatable; e.g. the Authorization the recording
    /// redacted).
    #[arg(long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Write JUnit XML (one test case per call) to this file.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Print a machine-readable JSON report instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not verify the target's TLS certificate.
    #[arg(long)]
    pub insecure: bool,
    /// A call that takes longer than this fails (whatever its reply).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub max_duration: Option<f64>,
    /// Wait this long for a target that is still starting (it is tried every 100 ms).
    #[arg(long, value_name = "DURATION", default_value_t = 0.0, value_parser = crate::units::secs)]
    pub wait: f64,
    /// Keep the recorded client's pace: each request waits until as long after the first one,
    /// and after the end of the exchange before it, as it came in the recording (a client polling
    /// a task, waiting on a server's work; a slower answer pushes what follows back).
    #[arg(long)]
    pub pace: bool,
    /// Golden files: replay through a recording proxy and make what the target answered the
    /// recording's new expectations (the old recording is kept as FILE.bak). HTTP recordings.
    #[arg(long, conflicts_with_all = ["target_command", "junit"])]
    pub update: bool,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// A Streamable HTTP MCP endpoint, a JSON-RPC URL or a `ws://` one; an OpenRPC document
    /// (a file, or a URL whose path ends in `.json` or names `openrpc`) or a method list
    /// (`{"httpPath": "/rpc", "methods": [...]}`, a file); or nothing, with `-- COMMAND …`.
    #[arg(value_name = "TARGET", required_unless_present = "command")]
    pub target: Option<String>,
    /// A stdio server's command and arguments (started for the probe, stopped after).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Where the suite is written.
    #[arg(
        long,
        short = 'o',
        value_name = "FILE",
        default_value = "rpctap-suite.json"
    )]
    pub out: PathBuf,
    /// Replace a suite already at `--out`.
    #[arg(long)]
    pub force: bool,
    /// The server's URL when TARGET is a document (default: an OpenRPC document's first
    /// `servers` entry; a method list's `httpPath` is joined to it).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Run the cases of tools that do not declare `readOnlyHint: true` too (they may change
    /// data: a happy path really runs the tool).
    #[arg(long)]
    pub include_writes: bool,
    /// The bearer token, as `env:NAME` (the variable holding it; written into the suite as
    /// that reference, never as the token).
    #[arg(long, value_name = "env:NAME")]
    pub bearer: Option<String>,
    /// The MCP protocol version asked for: `initialize`'s, or from 2026-07-28 on
    /// `server/discover` and stateless requests (each the other's fallback).
    #[arg(long, value_name = "VERSION", default_value = "2025-11-25")]
    pub mcp_version: String,
    /// How long each reply is waited for (`10s`).
    #[arg(long, value_name = "DURATION", default_value_t = 10.0, value_parser = crate::units::secs)]
    pub timeout: f64,
    /// Also send N seeded random inputs (valid and invalid) to each tool whose happy path runs;
    /// each crash, hang or broken output schema is shrunk and added to the suite as a case.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub fuzz: usize,
    /// The seed of `--fuzz` (the same seed sends the same inputs).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
}

/// `test`'s report formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TestFormat {
    Text,
    Json,
    Junit,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The suite (`rpctap probe` writes one; its format: docs/suites.md), or a recording (each
    /// answered client call expecting what the recorded server answered).
    pub suite: PathBuf,
    /// Run against this URL instead of the suite's.
    #[arg(long, short = 't', value_name = "URL", conflicts_with = "command")]
    pub target: Option<String>,
    /// Run against this stdio server instead of the suite's (started fresh for the run).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: TestFormat,
    /// Keep the run as a recording (`replay`, `diff`, `check` and the baseline read it).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// The bearer token, as `env:NAME` (instead of the suite's).
    #[arg(long, value_name = "env:NAME")]
    pub bearer: Option<String>,
    /// How long each reply is waited for (`30s`).
    #[arg(long, value_name = "DURATION", default_value_t = 30.0, value_parser = crate::units::secs)]
    pub timeout: f64,
    /// Which protocol findings fail a case, as for `check`: `error`, `warning`, `info`, `none`
    /// or codes (default: errors and warnings).
    #[arg(long, value_name = "LIST")]
    pub fail_on: Vec<String>,
    /// Accept a finding: `CODE` or `CODE:METHOD-OR-TOOL` (listed, failing nothing).
    #[arg(long, value_name = "CODE")]
    pub allow: Vec<String>,
}

#[derive(Debug, Args)]
pub struct MockArgs {
    /// The recording to serve.
    pub file: PathBuf,
    /// Address to listen on.
    #[arg(
        long,
        short = 'l',
        value_name = "ADDR",
        default_value = "127.0.0.1:9000"
    )]
    pub listen: SocketAddr,
    /// Serve as a stdio server instead: requests on stdin, replies on stdout (one JSON-RPC
    /// message per line).
    #[arg(long, conflicts_with = "listen")]
    pub stdio: bool,
    /// Which recorded reply a request gets: `method-params` (the same method and params,
    /// `_meta` aside; ties in recording order), `sequential` (the next recorded reply of the
    /// same method, whatever its params), `strict` (the same method and params, `_meta` too).
    #[arg(long = "match", value_enum, default_value = "method-params")]
    pub matching: MockMatch,
}

/// How `mock` matches a request to a recorded one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum MockMatch {
    #[default]
    MethodParams,
    Sequential,
    Strict,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// An exchange document (JSON, or JSON Lines of documents), a recording, or `-` for stdin.
    pub file: String,
    /// Largest document, in bytes.
    #[arg(long, value_name = "SIZE", default_value_t = 100_000, value_parser = crate::units::size_usize)]
    pub max_bytes: usize,
    /// Deepest nesting.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub max_depth: usize,
    /// Most JSON nodes.
    #[arg(long, value_name = "N", default_value_t = 8_000)]
    pub max_nodes: usize,
    /// Most envelopes on each side.
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub max_envelopes: usize,
    /// What fails the run: severities (`error`, `warning`, `info`, `none`) and codes, comma
    /// separated or repeated.
    #[arg(long, value_name = "SEVERITY|CODE,…", default_value = "error,warning")]
    pub fail_on: Vec<String>,
    /// Accept a finding: `CODE`, or `CODE:METHOD-OR-TOOL` (listed, marked allowed, failing
    /// nothing). Repeatable.
    #[arg(long, value_name = "CODE[:WHAT]")]
    pub allow: Vec<String>,
    /// Fail unless the recording calls this tool (`tools/call`). Repeatable.
    #[arg(long, value_name = "NAME")]
    pub expect_tool: Vec<String>,
    /// Fail if the recording calls this tool. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub forbid_tool: Vec<String>,
    /// Fail if any call took longer than this of the server's time (a multi round-trip call:
    /// its rounds summed, the client's time between them left out).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub max_duration: Option<f64>,
    /// Fail if any call took longer than this from its first request to its last reply (the
    /// client's time between a multi round-trip call's rounds included).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub max_wall_duration: Option<f64>,
    /// Fail if any call's result is more than this many tokens (`--tokenizer`'s).
    #[arg(long, value_name = "TOKENS")]
    pub max_tokens: Option<usize>,
    /// Fail if a definition set the server offers (its tools, prompts, resources or resource
    /// templates, as its last complete list gives them) is more than this many tokens.
    #[arg(long, value_name = "TOKENS")]
    pub max_definition_tokens: Option<usize>,
    /// The encoding `--max-tokens` and `--max-definition-tokens` count in (`o200k`,
    /// `cl100k`).
    #[arg(long, default_value = "o200k", value_parser = clap::value_parser!(crate::tokens::Tokenizer))]
    pub tokenizer: crate::tokens::Tokenizer,
    /// `json` (seed 004's result, one line per scope), `text` (a summary), `junit` (XML),
    /// `sarif` (SARIF 2.1.0, for code scanning: a result per finding at its recording line),
    /// `html` (the recording's report with the gate's verdict on top).
    #[arg(long, value_enum, default_value = "json")]
    pub format: CheckFormat,
    /// With `--format html`: the diff of this golden recording against the checked one, in the
    /// report (as `rpctap diff GOLDEN FILE` says it).
    #[arg(long, value_name = "GOLDEN")]
    pub diff_from: Option<String>,
    /// With `--format html`: a replay's output (`rpctap replay … > FILE`), in the report.
    #[arg(long, value_name = "FILE")]
    pub replay_report: Option<PathBuf>,
    /// Write the report here instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Compare complete tools/lists with the server label's baseline in this directory
    /// (default: the state directory's `baselines/`, when it has one for the label).
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve the recordings (`*.jsonl`) in this directory instead of the state directory's
    /// sessions.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Let `replay_call` send a recorded call to a target the agent names.
    #[arg(long)]
    pub allow_replay: bool,
}

#[derive(Debug, Args)]
pub struct BaselineArgs {
    #[command(subcommand)]
    pub action: BaselineAction,
    /// The baselines' directory (default: the state directory's `baselines/`).
    #[arg(long, value_name = "DIR", global = true)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum BaselineAction {
    /// Print a label's baseline (every label's names without one).
    Show {
        /// The server's label.
        label: Option<String>,
    },
    /// Make a recording's (or session's) last complete tools/list its label's baseline.
    Accept {
        /// A recording, or a session name in the state directory.
        session: String,
        /// The label to file it under (default: the recording's).
        #[arg(long)]
        label: Option<String>,
    },
    /// Forget a label's baseline (the next complete list becomes it).
    Reset { label: String },
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The session before: a recording, or a session name in the state directory.
    pub a: String,
    /// The session after.
    pub b: String,
    /// Exit 1 when anything got worse (a removal, a less safe annotation, a changed schema, an
    /// outcome or latency regression); improvements and other changes alone exit 0.
    #[arg(long)]
    pub exit_code: bool,
    #[arg(long, value_enum, default_value = "text")]
    pub format: DiffFormat,
    /// A latency shift is reported when it is at least this much…
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = crate::units::secs)]
    pub duration_threshold: f64,
    /// …and the slower is at least this many times the faster.
    #[arg(long, value_name = "RATIO", default_value_t = 2.0)]
    pub duration_ratio: f64,
    /// The encoding a changed definition's tokens are counted in (`o200k`, `cl100k`).
    #[arg(long, default_value = "o200k", value_parser = clap::value_parser!(crate::tokens::Tokenizer))]
    pub tokenizer: crate::tokens::Tokenizer,
}

/// `rpctap cost`'s arguments.
#[derive(Debug, Args)]
pub struct CostArgs {
    /// A recording, a session name in the state directory, or `-` for stdin.
    pub file: String,
    /// The encoding tokens are counted in: `o200k` (o200k_base: GPT-4o, GPT-4.1, GPT-5,
    /// o-series) or `cl100k` (cl100k_base: GPT-4, GPT-3.5).
    #[arg(long, default_value = "o200k", value_parser = clap::value_parser!(crate::tokens::Tokenizer))]
    pub tokenizer: crate::tokens::Tokenizer,
    /// `text` for a person, `json` for a program.
    #[arg(long, value_enum, default_value = "text")]
    pub format: CostFormat,
    /// The biggest definitions listed of each set (`text`).
    #[arg(long, default_value_t = 20)]
    pub top: usize,
}

/// `cost`'s formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CostFormat {
    Text,
    Json,
}

/// `diff`'s formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffFormat {
    Text,
    Json,
    /// For a pull-request comment.
    Markdown,
}

/// `check`'s report formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CheckFormat {
    Json,
    Text,
    Junit,
    Sarif,
    Html,
}

/// Export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// Exchange documents `{"request": …, "response": …}`, one per line.
    Exchange,
    /// HAR 1.2.
    Har,
    /// One self-contained HTML report (findings, latency per method and tool, every call).
    Html,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The recording.
    pub file: PathBuf,
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Most envelopes on each side of one exchange document.
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub max_envelopes: usize,
    /// Largest exchange document, in bytes.
    #[arg(long, value_name = "SIZE", default_value_t = 100_000, value_parser = crate::units::size_usize)]
    pub max_bytes: usize,
    /// Write here instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// How the headless log prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line per finished call and per anomaly.
    Text,
    /// Every event as one JSON line.
    Json,
    /// Nothing.
    Off,
}

/// Flags every subcommand that carries traffic shares (`proxy`, `demo`, `stdio`): declared once
/// here and flattened into each. Every one can also be set in the config file.
#[derive(Debug, Args, Default, Clone)]
pub struct SharedFlags {
    /// TOML config file; flags win over it (for `stdio`, its HTTP-only settings do not apply).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Headless log format (for `stdio` off by default: stdout belongs to the client; the log
    /// goes to stderr or --log-file).
    #[arg(long, value_enum)]
    pub log: Option<LogFormat>,
    /// Record the traffic to this JSON Lines file (created mode 0600).
    #[arg(long, short = 'r', value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Compare every complete tools/list with the server's tool baseline in this directory
    /// (the first one becomes it when there is none): `MCP_TOOL_DRIFT`. Joined to the hub,
    /// the state directory's `baselines/` is used without it.
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
    /// Add to an existing recording: a new run with its own header after what is there
    /// (without it, an existing FILE is refused).
    #[arg(long, requires = "record", conflicts_with = "force")]
    pub record_append: bool,
    /// Overwrite an existing recording (and its rotated parts).
    #[arg(long, requires = "record")]
    pub force: bool,
    /// Rotate the recording to FILE.1, FILE.2, … when it reaches this size.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size)]
    pub record_max_bytes: Option<u64>,
    /// Redact this JSON path inside messages, e.g. `params.arguments.password` (repeatable;
    /// `*` matches any key or index).
    #[arg(long = "redact-path", value_name = "PATH")]
    pub redact_paths: Vec<String>,
    /// A quick rate limit keyed globally, `METHOD_GLOB=N/UNIT` (repeatable), e.g.
    /// `--limit 'tools/call=10/s'`. Full rules go in the config file's `[[limit]]` tables.
    #[arg(long = "limit", value_name = "RULE")]
    pub limits: Vec<String>,
    /// Injects a fault (repeatable): the `[[fault]]` keys comma separated, e.g.
    /// `--fault 'tool=slow,delay=2s,at=reply'`, `--fault 'tool=boom,error=-32000'`,
    /// `--fault 'method=tools/call,drop,count=1'`. Faults are recorded as injected.
    #[arg(long = "fault", value_name = "RULE")]
    pub faults: Vec<String>,
    /// Denies a tool or a method (repeatable): the `[[deny]]` keys comma separated, e.g.
    /// `--deny 'tool=run_*'`, `--deny 'method=resources/*,code=-32000'`. A denied call is
    /// answered with an error (-32601) and never reaches the server; a denied tool is hidden
    /// from `tools/list` replies. Both are recorded as injected.
    #[arg(long = "deny", value_name = "RULE")]
    pub deny: Vec<String>,
    /// The codes of the errors rpctap answers with itself (upstream unreachable or too slow, a
    /// request it could not read, a connection or rate cap): `auto` gives an A2A request codes
    /// A2A does not use (-32091…-32096) and anything else the classic ones (-32001,
    /// -32003…-32006); `classic` and `distinct` pick one range for every request. Each such
    /// error says it is rpctap's in `error.data.rpctap`.
    #[arg(long, value_enum, value_name = "RANGE")]
    pub error_codes: Option<crate::rpc::own::Range>,
    /// Serve /healthz, /readyz, /metrics, the live feed (/events) and /calls on this address:
    /// `IP:PORT`, `:PORT` (loopback) or `unix:PATH`.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
    /// The bearer token /events and /calls require (needed to start on a non-loopback --admin).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "RPCTAP_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// Time between readiness probes (`5s`; a bare number is seconds).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub ready_interval: Option<f64>,
    /// Distinct values of the metrics' `method` and `target` labels before `other`.
    #[arg(long, value_name = "N")]
    pub metrics_max_labels: Option<usize>,
    /// Largest message inspected (a body, an SSE event, a line), in bytes; larger ones pass
    /// uninspected.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size_usize)]
    pub max_frame_bytes: Option<usize>,
    /// How long a call may wait for its reply before it ends as missing (`5m`, `30s`…).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub call_timeout: Option<f64>,
    /// Most calls waiting for a reply at once (the oldest are ended as missing beyond it).
    #[arg(long, value_name = "N")]
    pub max_pending: Option<usize>,
    /// Most MCP sessions remembered at once (the least recently seen is forgotten beyond it);
    /// `serve`: also the most sessions served at once (default 100; beyond, `503`).
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<usize>,
    /// An MCP result larger than this many bytes is flagged MCP_LARGE_RESULT (default 1 MiB).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size_usize)]
    pub large_result: Option<usize>,
    /// Most compiled MCP tool schemas kept, shared by all sessions (default 1000).
    #[arg(long, value_name = "N")]
    pub max_schemas: Option<usize>,
    /// Export one OpenTelemetry span per call over OTLP/HTTP (protobuf) to this collector
    /// (`http://HOST:4318`, or its full `/v1/traces` URL).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// The share of traces without a parent that are sampled, 0 to 1 (default 1; a parent's
    /// decision is always followed).
    #[arg(long, value_name = "RATIO")]
    pub otlp_sample: Option<f64>,
    /// Also write the attribute names the conventions replaced (`rpc.system`, `rpc.jsonrpc.*`,
    /// `network.protocol.name="stdio"`) beside the current ones, for dashboards not yet moved
    /// (kept for one release).
    #[arg(long)]
    pub otlp_legacy_names: bool,
    /// Put each tool call's arguments and result on its span (`gen_ai.tool.call.arguments`,
    /// `.result`; redacted as recordings are, each cut at 8 KiB). Off: they may hold anything.
    #[arg(long)]
    pub otlp_tool_content: bool,
    /// How often the MCP metrics (`mcp.server.operation.duration`, …) are exported over OTLP
    /// (default 60s).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub otlp_metrics_interval: Option<f64>,
}

/// `proxy`'s and `demo`'s flags: the shared ones and HTTP's own.
#[derive(Debug, Args, Default, Clone)]
pub struct ProxyFlags {
    #[command(flatten)]
    pub shared: SharedFlags,
    /// Run headless (the default when stdout is not a terminal).
    #[arg(long)]
    pub no_tui: bool,
    /// Most calls the dashboard keeps (the newest).
    #[arg(long, value_name = "N")]
    pub max_rows: Option<usize>,
    /// Keep the client's Host header instead of the upstream's.
    #[arg(long)]
    pub preserve_host: bool,
    /// Do not verify the upstream's TLS certificate.
    #[arg(long)]
    pub upstream_insecure: bool,
    /// How long in-flight exchanges get to finish after SIGINT/SIGTERM (`30s`).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub grace: Option<f64>,
    /// Seconds to wait for the upstream's response headers (then 504).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub upstream_timeout: Option<f64>,
    /// Most upstream connections kept alive between requests; idle client connections beyond it
    /// hold none (default 64).
    #[arg(long, value_name = "N")]
    pub upstream_idle_max: Option<usize>,
    /// Seconds a kept upstream connection may sit unused before it is closed (default 90).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub upstream_idle_timeout: Option<f64>,
    /// Most client connections at once; beyond it a new one gets a 503 and is closed
    /// (default 10000).
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Seconds a client has to send a whole request head (default 10).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub header_timeout: Option<f64>,
    /// Seconds a request body may bring nothing before the exchange ends with 408 (default 30).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub body_timeout: Option<f64>,
    /// How long a message the dashboard's intercept holds waits for a verdict before it
    /// forwards itself (default 60s). Intercept is the dashboard's (`I`); not over `attach`.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub intercept_timeout: Option<f64>,
    /// Start the dashboard intercepting the messages this filter matches (the filter
    /// language; `I` changes it). Needs the dashboard.
    #[arg(long, value_name = "FILTER")]
    pub intercept: Option<String>,
    /// Seconds a client connection may sit with no exchange before it is closed (default 300;
    /// an open reply stream, such as SSE, is an exchange).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub keepalive_timeout: Option<f64>,
    /// Largest request head in bytes, HTTP/1 and HTTP/2 (default 65536; 431 beyond it).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size_usize)]
    pub max_header_bytes: Option<usize>,
    /// Most header fields in an HTTP/1 request (default 100; 431 beyond it).
    #[arg(long, value_name = "N")]
    pub max_headers: Option<usize>,
    /// Most concurrent streams per HTTP/2 connection (default 100).
    #[arg(long, value_name = "N")]
    pub h2_max_streams: Option<u32>,
    /// Seconds to wait for a TCP/TLS connection to the upstream (then 502).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::secs)]
    pub connect_timeout: Option<f64>,
    /// Also redact this header everywhere (repeatable; Authorization, Proxy-Authorization,
    /// Cookie and Set-Cookie always are).
    #[arg(long = "redact-header", value_name = "NAME")]
    pub redact_headers: Vec<String>,
    /// Readiness probes the upstream with GET of this path (default: a TCP connect).
    #[arg(long, value_name = "PATH")]
    pub ready_path: Option<String>,
    /// Set the upstream request's `traceparent` to rpctap's span (rewrites that header; off:
    /// headers pass unchanged).
    #[arg(long)]
    pub otlp_propagate: bool,
    /// `serve`: an origin besides the listen address's own whose web pages may call the
    /// endpoint (`https://app.example`); any other `Origin` gets 403 (a proxy passes `Origin`
    /// to its upstream unchanged: the check is the upstream's). Repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// A host name besides the listen address that requests may name in `Host`
    /// (`mcp.internal`, `mcp.internal:8931`); any other gets 403 — on a loopback listener (a
    /// page under a rebound name), and for `serve` everywhere. Repeatable.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_host: Vec<String>,
}

impl From<SharedFlags> for ProxyFlags {
    fn from(shared: SharedFlags) -> Self {
        ProxyFlags {
            shared,
            ..Default::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Address to listen on: `IP:PORT`, `localhost:PORT` or `:PORT` (loopback).
    #[arg(long, short = 'l', value_name = "ADDR", value_parser = parse_listen)]
    pub listen: Option<SocketAddr>,
    /// The server to proxy (http:// or https://, optionally with a base path).
    #[arg(long, short = 'u', value_name = "URL")]
    pub upstream: Option<String>,
    /// Join this machine's hub: record into the state directory (unless --record or
    /// --no-record), serve the live feed on a socket there (unless --admin) and register, so
    /// that `rpctap watch` shows this proxy beside the stdio shims.
    #[arg(long)]
    pub hub: bool,
    /// The name this proxy is shown by in the hub (default: its upstream's host).
    #[arg(long, value_name = "NAME", requires = "hub")]
    pub label: Option<String>,
    /// With --hub: do not record.
    #[arg(long, requires = "hub", conflicts_with = "record")]
    pub no_record: bool,
    #[command(flatten)]
    pub flags: ProxyFlags,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on: `IP:PORT`, `localhost:PORT` or `:PORT` (loopback).
    #[arg(long, short = 'l', value_name = "ADDR", value_parser = parse_listen)]
    pub listen: Option<SocketAddr>,
    /// The MCP endpoint's path.
    #[arg(long, value_name = "PATH", default_value = "/mcp")]
    pub path: String,
    /// One child for every session (ids rewritten so that each reply reaches its client),
    /// instead of one per session.
    #[arg(long)]
    pub shared: bool,
    /// With --shared: when a child that exited is started again (backoff from 0.5 s to 30 s).
    #[arg(long, value_enum, default_value = "on-failure", requires = "shared")]
    pub restart: crate::bridge::Restart,
    /// A session with nothing in flight ends after this long (`10m`, `30s`).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = crate::units::secs)]
    pub session_idle: f64,
    /// Between SIGTERM and SIGKILL when a child is stopped.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = crate::units::secs)]
    pub stop_grace: f64,
    /// Also serve the 2024-11-05 HTTP+SSE transport: `GET /sse`, `POST /message?sessionId=`.
    #[arg(long)]
    pub legacy_sse: bool,
    /// Join this machine's hub (as `proxy --hub`).
    #[arg(long)]
    pub hub: bool,
    /// The name shown in the hub (default: the command's script, package or binary).
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,
    /// With --hub: do not record.
    #[arg(long, requires = "hub", conflicts_with = "record")]
    pub no_record: bool,
    /// Require `Authorization: Bearer TOKEN` on every request (needed off loopback).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "RPCTAP_SERVE_TOKEN",
        hide_env_values = true
    )]
    pub auth_token: Option<String>,
    #[command(flatten)]
    pub flags: ProxyFlags,
    /// The stdio server's command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Address the proxy listens on: `IP:PORT`, `localhost:PORT` or `:PORT` (loopback).
    #[arg(long, short = 'l', value_name = "ADDR", default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub flags: ProxyFlags,
}

#[derive(Debug, Args)]
pub struct DemoServerArgs {
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// Cap of the `sleep` method (`30s`; a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::units::secs)]
    pub max_delay: f64,
    /// Make `add` answer one more than the sum (a "changed server" for regression tests).
    #[arg(long)]
    pub alter_add: bool,
}

/// A listen address: `IP:PORT`, `[IPv6]:PORT`, `localhost:PORT`, or `:PORT` (loopback).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let port = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| format!("{s:?}: the port must be a number from 0 to 65535"))
    };
    if let Some(p) = s.strip_prefix(':') {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port(p)?)));
    }
    match s.rsplit_once(':') {
        Some((host, p)) if host.eq_ignore_ascii_case("localhost") => {
            Ok(SocketAddr::from(([127, 0, 0, 1], port(p)?)))
        }
        _ => Err(format!(
            "{s:?} is not a listen address: use IP:PORT, localhost:PORT or :PORT"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn listen_addresses_as_users_type_them() {
        assert_eq!(parse_listen(":8080").unwrap().to_string(), "127.0.0.1:8080");
        assert_eq!(
            parse_listen("localhost:9").unwrap().to_string(),
            "127.0.0.1:9"
        );
        assert_eq!(parse_listen("0.0.0.0:1").unwrap().to_string(), "0.0.0.0:1");
        assert_eq!(parse_listen("[::1]:2").unwrap().to_string(), "[::1]:2");
        assert!(parse_listen("localhost").is_err());
        assert!(parse_listen("example.com:80").is_err());
        assert!(parse_listen(":99999").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    fn proxy(args: &[&str]) -> ProxyArgs {
        let mut v = vec!["rpctap", "proxy"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v).unwrap().command {
            Some(Command::Proxy(p)) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn durations_and_sizes_take_units_and_equal_their_bare_forms() {
        let a = proxy(&[
            "--grace",
            "30s",
            "--call-timeout",
            "5m",
            "--max-frame-bytes",
            "16MiB",
            "--record-max-bytes",
            "1M",
            "--upstream-timeout",
            "250ms",
            "--ready-interval",
            "1h",
        ]);
        let b = proxy(&[
            "--grace",
            "30",
            "--call-timeout",
            "300",
            "--max-frame-bytes",
            "16777216",
            "--record-max-bytes",
            "1048576",
            "--upstream-timeout",
            "0.25",
            "--ready-interval",
            "3600",
        ]);
        for p in [&a, &b] {
            assert_eq!(p.flags.grace, Some(30.0));
            assert_eq!(p.flags.shared.call_timeout, Some(300.0));
            assert_eq!(p.flags.shared.max_frame_bytes, Some(16 << 20));
            assert_eq!(p.flags.shared.record_max_bytes, Some(1 << 20));
            assert_eq!(p.flags.upstream_timeout, Some(0.25));
            assert_eq!(p.flags.shared.ready_interval, Some(3600.0));
        }
        let e = Cli::try_parse_from(["rpctap", "proxy", "--grace", "soon"]).unwrap_err();
        assert!(e.to_string().contains("not a duration"), "{e}");
        let e = Cli::try_parse_from(["rpctap", "proxy", "--max-frame-bytes", "16 parsecs"])
            .unwrap_err();
        assert!(e.to_string().contains("unknown size unit"), "{e}");
    }

    #[test]
    fn the_common_options_have_short_flags() {
        let p = proxy(&[
            "-l", ":9", "-u", "http://x", "-r", "f.jsonl", "-c", "c.toml",
        ]);
        assert_eq!(p.listen.map(|a| a.port()), Some(9));
        assert_eq!(p.upstream.as_deref(), Some("http://x"));
        assert_eq!(
            p.flags.shared.record.as_deref(),
            Some(std::path::Path::new("f.jsonl"))
        );
        assert_eq!(
            p.flags.shared.config.as_deref(),
            Some(std::path::Path::new("c.toml"))
        );
        match Cli::try_parse_from(["rpctap", "replay", "f", "-t", "http://y"])
            .unwrap()
            .command
        {
            Some(Command::Replay(r)) => assert_eq!(r.target.as_deref(), Some("http://y")),
            other => panic!("{other:?}"),
        }
    }
}
