//! Configuration: the TOML file (`--config`, see `config/rpctap.toml`) merged with the flags
//! (flags win), validated once into [`ProxyConfig`].

use crate::cli::{LogFormat, ProxyFlags};
use crate::inspect::correlator::Limits;
use crate::inspect::InspectConfig;
use crate::limit::RuleSpec;
use crate::proxy::ProxyOptions;
use crate::record::Options;
use crate::redact::Redactor;
use http::Uri;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Configuration errors; each names the setting (and the file) at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// The file's shape. Every key is optional; unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub upstream: Option<String>,
    pub log: Option<LogFormat>,
    pub no_tui: Option<bool>,
    pub max_rows: Option<usize>,
    pub preserve_host: Option<bool>,
    pub upstream_insecure: Option<bool>,
    #[serde(default, deserialize_with = "crate::units::de_secs")]
    pub grace_secs: Option<f64>,
    #[serde(default, deserialize_with = "crate::units::de_secs")]
    pub upstream_timeout_secs: Option<f64>,
    pub upstream_idle_max: Option<usize>,
    #[serde(default, deserialize_with = "crate::units::de_secs")]
    pub upstream_idle_timeout_secs: Option<f64>,
    #[serde(default, deserialize_with = "crate::units::de_secs")]
    pub connect_timeout_secs: Option<f64>,
    pub max_connections: Option<usize>,
    #[serde(default, deserialize_with = "crate::units::de_secs")]
    pub header_timeout_secs: Option<f64>,
    #[serde(default, deserialize_with = "crate::units::de_secs")]
    pub body_timeout_secs: Option<f64>,
    pub intercept_timeout_secs: Option<f64>,
    #[serde(default, deserialize_with = "crate::units::de_secs")]
    pub keepalive_timeout_secs: Option<f64>,
    #[serde(default, deserialize_with = "crate::units::de_size_usize")]
    pub max_header_bytes: Option<usize>,
    pub max_headers: Option<usize>,
    pub h2_max_streams: Option<u32>,
    pub record: Option<PathBuf>,
    #[serde(default, deserialize_with = "crate::units::de_size")]
    pub record_max_bytes: Option<u64>,
    #[serde(default)]
    pub redact_headers: Vec<String>,
    #[serde(default)]
    pub redact_paths: Vec<String>,
    #[serde(default)]
    pub inspect: InspectFile,
    #[serde(default)]
    pub replay: ReplayFile,
    /// `[otel]`: OpenTelemetry traces.
    #[serde(default)]
    pub otel: OtelFile,
    /// Rate-limit rules, `[[limit]]` tables.
    #[serde(default)]
    pub limit: Vec<RuleSpec>,
    /// The JSON-RPC error code of refusals (default: rpctap's own, -32001, or -32091 for an A2A
    /// call under `error_codes = "auto"`); a rule's `code` wins.
    pub limit_code: Option<i64>,
    /// The codes of rpctap's own errors (`--error-codes`: `auto`, `classic`, `distinct`).
    pub error_codes: Option<crate::rpc::own::Range>,
    /// Fault injection rules, `[[fault]]` tables (`crate::flow::fault`).
    #[serde(default)]
    pub fault: Vec<crate::flow::fault::FaultSpec>,
    /// Tools and methods denied, `[[deny]]` tables (`crate::flow::deny`).
    #[serde(default)]
    pub deny: Vec<crate::flow::deny::DenySpec>,
    /// The admin listener's address (`IP:PORT`, `:PORT` or `unix:PATH`).
    pub admin: Option<String>,
    pub ready_path: Option<String>,
    #[serde(default, deserialize_with = "crate::units::de_secs")]
    pub ready_interval_secs: Option<f64>,
    pub metrics_max_labels: Option<usize>,
}

/// `[otel]`: one span per call, exported over OTLP/HTTP.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtelFile {
    /// The collector (`http://HOST:4318` or its `/v1/traces` URL); `--otlp`.
    pub endpoint: Option<String>,
    /// The share of root traces sampled, 0 to 1 (default 1); `--otlp-sample`.
    pub sample: Option<f64>,
    /// Set the upstream request's `traceparent` to rpctap's span; `--otlp-propagate`.
    pub propagate: Option<bool>,
    /// The `service.name` of the spans (default `rpctap`).
    pub service_name: Option<String>,
    /// Finished calls waiting for export; beyond, dropped and counted (default 65536).
    pub queue: Option<usize>,
    /// Also write the attribute names the conventions replaced; `--otlp-legacy-names`.
    pub legacy_names: Option<bool>,
    /// How often the MCP metrics are exported (default `60s`); `--otlp-metrics-interval`.
    pub metrics_interval: Option<String>,
    /// A tool call's arguments and result on its span; `--otlp-tool-content`.
    pub tool_content: Option<bool>,
}

/// `[replay]`: settings of `rpctap replay`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayFile {
    /// Volatile paths not compared.
    #[serde(default)]
    pub ignore: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectFile {
    #[serde(default, deserialize_with = "crate::units::de_size_usize")]
    pub max_frame_bytes: Option<usize>,
    #[serde(default, deserialize_with = "crate::units::de_secs")]
    pub call_timeout_secs: Option<f64>,
    pub max_pending: Option<usize>,
    pub max_sessions: Option<usize>,
    #[serde(default, deserialize_with = "crate::units::de_size_usize")]
    pub large_result_bytes: Option<usize>,
    pub max_schemas: Option<usize>,
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|message| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        })
    }
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

/// Everything `proxy` needs, validated.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub listen: SocketAddr,
    pub proxy: ProxyOptions,
    pub inspect: InspectConfig,
    pub log: LogFormat,
    pub no_tui: bool,
    /// Most calls the dashboard keeps.
    pub max_rows: usize,
    pub grace: Duration,
    /// The listener's connection limits.
    pub conn: crate::server::ConnLimits,
    pub record: Option<Options>,
    /// The rate-limit rules: the `--limit` flags' first, then the file's.
    pub limits: Vec<RuleSpec>,
    /// `limit_code`, when the file sets one (otherwise rpctap's own, `rpc::own`).
    pub limit_code: Option<i64>,
    /// Where the rules came from, for SIGHUP reloads.
    pub config_path: Option<PathBuf>,
    /// The `--limit` flags' rules, kept across reloads.
    pub flag_limits: Vec<RuleSpec>,
    /// The fault rules: the `--fault` flags' first, then the file's; the flags' kept across
    /// reloads.
    pub faults: Vec<crate::flow::fault::FaultSpec>,
    pub flag_faults: Vec<crate::flow::fault::FaultSpec>,
    /// The deny rules: the `--deny` flags' first, then the file's; the flags' kept across
    /// reloads.
    pub deny: Vec<crate::flow::deny::DenySpec>,
    pub flag_deny: Vec<crate::flow::deny::DenySpec>,
    /// The admin listener, when on.
    pub admin: Option<crate::admin::AdminConfig>,
    /// OpenTelemetry traces, when on.
    pub otel: Option<crate::observe::otel::OtelConfig>,
    /// What the hub knows of this run (label, session name, start), added to the recording's
    /// and the feed's headers (`proxy --hub`).
    pub session_meta: Option<serde_json::Value>,
    /// `--baseline DIR` (see [`Shared::baseline_dir`]).
    pub baseline_dir: Option<PathBuf>,
    /// `rpctap serve`: the upstream is this bridge to stdio servers, in this process.
    pub bridge: Option<crate::bridge::BridgeOptions>,
    /// Who may send requests (`serve`'s Host, Origin, content type and token checks), made a
    /// [`crate::server::guard::Guard`] once the listener has its address.
    pub guard: Option<crate::server::guard::GuardConfig>,
}

/// The admin settings from flags over the file (`None`: no admin listener).
pub fn admin_config(
    flags: &ProxyFlags,
    file: &FileConfig,
) -> Result<Option<crate::admin::AdminConfig>, ConfigError> {
    let Some(addr) = flags.shared.admin.clone().or(file.admin.clone()) else {
        return Ok(None);
    };
    let addr = crate::admin::AdminAddr::parse(&addr)
        .map_err(|e| ConfigError::Invalid(format!("--admin: {e}")))?;
    let ready_path = flags.ready_path.clone().or(file.ready_path.clone());
    if let Some(p) = &ready_path {
        if !p.starts_with('/') {
            return Err(ConfigError::Invalid(format!(
                "--ready-path {p:?} must start with /"
            )));
        }
    }
    let ready_interval = secs(
        "--ready-interval",
        flags
            .shared
            .ready_interval
            .or(file.ready_interval_secs)
            .unwrap_or(5.0),
    )?
    .max(Duration::from_millis(50));
    let cfg = crate::admin::AdminConfig {
        addr,
        token: flags.shared.admin_token.clone().filter(|t| !t.is_empty()),
        ready_path,
        ready_interval,
        max_label_values: positive(
            "--metrics-max-labels",
            flags
                .shared
                .metrics_max_labels
                .or(file.metrics_max_labels)
                .unwrap_or(crate::observe::metrics::MAX_LABEL_VALUES),
        )?,
    };
    if !cfg.addr.is_local() && cfg.token.is_none() {
        return Err(ConfigError::Invalid(
            crate::admin::AdminError::TokenRequired(cfg.addr.clone()).to_string(),
        ));
    }
    Ok(Some(cfg))
}

/// `check`'s gate from its flags, validated before anything is read (as every subcommand's
/// flags are, here): `--fail-on` and `--allow` read, and the flags that only mean something
/// together checked.
pub fn check_gate(args: &crate::cli::CheckArgs) -> Result<crate::offline::gate::Gate, ConfigError> {
    if args.format != crate::cli::CheckFormat::Html
        && (args.diff_from.is_some() || args.replay_report.is_some())
    {
        return Err(ConfigError::Invalid(
            "--diff-from and --replay-report go into the HTML report: add --format html".into(),
        ));
    }
    let mut gate = crate::offline::gate::Gate::new(&args.fail_on, &args.allow)
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    gate.expect_tools = args.expect_tool.clone();
    gate.forbid_tools = args.forbid_tool.clone();
    gate.max_duration = args.max_duration.map(std::time::Duration::from_secs_f64);
    gate.max_wall_duration = args
        .max_wall_duration
        .map(std::time::Duration::from_secs_f64);
    gate.max_tokens = args.max_tokens;
    gate.max_definition_tokens = args.max_definition_tokens;
    gate.tokenizer = args.tokenizer;
    Ok(gate)
}

/// Whether the dashboard runs in front of a proxying subcommand: not `--no-tui`, and stdout is
/// a terminal.
pub fn dashboard_on(cfg: &ProxyConfig) -> bool {
    use std::io::IsTerminal;
    !cfg.no_tui && std::io::stdout().is_terminal()
}

/// Sessions `serve` serves at once unless `--max-sessions` says otherwise.
pub const SERVE_MAX_SESSIONS: usize = 100;

/// `serve`'s options: the proxy's, with the bridge as its upstream.
pub struct Serve {
    pub cfg: ProxyConfig,
    /// The server's label (`--label`, else from its command).
    pub label: String,
    /// The command as the recording, the feed and the hub hold it (its secrets scrubbed).
    pub command: Vec<String>,
}

/// Resolves `serve`'s flags: the proxy's options with the bridge (named after the command,
/// never reached by network) as the upstream, the guard in front, the headers' session meta.
pub fn resolve_serve(args: &crate::cli::ServeArgs) -> Result<Serve, ConfigError> {
    let label = args
        .label
        .as_deref()
        .map(crate::hub::command::sanitize)
        .unwrap_or_else(|| crate::hub::command::label_of(&args.command));
    let mut cfg = resolve(args.listen, Some("http://localhost/"), &args.flags)?;
    cfg.proxy.upstream = format!("stdio://{label}/")
        .parse()
        .unwrap_or_else(|_| Uri::from_static("stdio://server/"));
    if !args.path.starts_with('/') {
        return Err(ConfigError::Invalid(format!(
            "--path {:?} must start with /",
            args.path
        )));
    }
    let token = args.auth_token.clone().filter(|t| !t.is_empty());
    if token.is_none() && crate::server::guard::Guard::needs_token(&cfg.listen) {
        return Err(ConfigError::Invalid(format!(
            "--listen {} is not a loopback address: anyone who reaches it could run the server's tools; set --auth-token (or RPCTAP_SERVE_TOKEN)",
            cfg.listen
        )));
    }
    cfg.guard = Some(crate::server::guard::GuardConfig {
        allow_hosts: args.flags.allow_host.clone(),
        allow_origins: args.flags.allow_origin.clone(),
        token,
        json_posts: true,
        host_only: false,
    });
    // `--max-sessions` caps the sessions served (each a child) and, as everywhere, those the
    // inspector remembers.
    let max_sessions = args.flags.shared.max_sessions.unwrap_or(SERVE_MAX_SESSIONS);
    let (command, secrets) = crate::hub::command::scrub(&args.command);
    cfg.session_meta = Some(serde_json::json!({
        "transport": "serve",
        "command": command,
        "label": label,
    }));
    cfg.bridge = Some(crate::bridge::BridgeOptions {
        command: args.command.clone(),
        path: args.path.clone(),
        shared: args.shared,
        restart: args.restart,
        session_idle: std::time::Duration::from_secs_f64(args.session_idle.max(0.01)),
        max_sessions,
        stop_grace: std::time::Duration::from_secs_f64(args.stop_grace),
        legacy_sse: args.legacy_sse,
        max_line: cfg.inspect.max_frame_bytes,
        keepalive: std::time::Duration::from_secs(15),
        // Under the dashboard the children's stderr is shown there, not written over it.
        pass_stderr: !dashboard_on(&cfg),
        secrets,
    });
    Ok(Serve {
        cfg,
        label,
        command,
    })
}

/// `replay`'s flags, validated before the recording is read (as every subcommand's are, here).
#[derive(Clone, Debug)]
pub struct Replay {
    /// The paths ignored when replies are compared: the flags', then the config file's.
    pub ignore: Vec<String>,
    /// `--header NAME: VALUE`, in order.
    pub headers: Vec<(String, String)>,
    pub timeout: std::time::Duration,
    pub wait: std::time::Duration,
    /// `--target`, read as an upstream URL.
    pub target: Option<Uri>,
    pub max_duration: Option<std::time::Duration>,
}

/// Reads and checks `replay`'s flags (and the `[replay]` table of its `--config`).
pub fn replay(args: &crate::cli::ReplayArgs) -> Result<Replay, ConfigError> {
    let mut ignore = args.ignore.clone();
    if let Some(p) = &args.config {
        ignore.extend(FileConfig::load(p)?.replay.ignore);
    }
    let mut headers = Vec::new();
    for h in &args.headers {
        let (k, v) = h.split_once(':').ok_or_else(|| {
            ConfigError::Invalid(format!("--header {h:?} must look like `Name: value`"))
        })?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(ConfigError::Invalid(format!(
            "--timeout must be a positive number of seconds, not {}",
            args.timeout
        )));
    }
    Ok(Replay {
        ignore,
        headers,
        timeout: std::time::Duration::from_secs_f64(args.timeout),
        wait: std::time::Duration::from_secs_f64(args.wait),
        target: args.target.as_deref().map(parse_upstream).transpose()?,
        max_duration: args.max_duration.map(std::time::Duration::from_secs_f64),
    })
}

/// Rebuilds the rules from the config file (a SIGHUP reload): the flags' rules, then the file's.
pub fn reload_limits(cfg: &ProxyConfig) -> Result<crate::limit::Limiter, ConfigError> {
    let Some(path) = &cfg.config_path else {
        return Err(ConfigError::Invalid("no --config file to reload".into()));
    };
    let file = FileConfig::load(path)?;
    let specs = [cfg.flag_limits.clone(), file.limit].concat();
    let faults = [cfg.flag_faults.clone(), file.fault].concat();
    let deny = [cfg.flag_deny.clone(), file.deny].concat();
    let code = file.limit_code;
    limiter(
        &specs,
        code,
        &faults,
        &deny,
        crate::flow::fault::Carrier::Http,
    )
    .map_err(|e| ConfigError::Parse {
        path: path.clone(),
        message: e.to_string(),
    })
}

/// The rate-limit rules with the pipeline's stages — the deny rules, the fault rules for
/// `carrier` — after them (a bad rule named in the error).
pub fn limiter(
    limits: &[RuleSpec],
    code: Option<i64>,
    faults: &[crate::flow::fault::FaultSpec],
    deny: &[crate::flow::deny::DenySpec],
    carrier: crate::flow::fault::Carrier,
) -> Result<crate::limit::Limiter, ConfigError> {
    let l = crate::limit::Limiter::new(limits, code)
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let f = crate::flow::fault::Faults::new(faults, carrier)
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let d = crate::flow::deny::Deny::new(deny).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    Ok(l.with_stages(f, d))
}

/// The listener's connection limits from flags over the file over the defaults.
pub fn conn_limits(
    flags: &ProxyFlags,
    file: &FileConfig,
) -> Result<crate::server::ConnLimits, ConfigError> {
    let d = crate::server::ConnLimits::default();
    let max_header_bytes = flags
        .max_header_bytes
        .or(file.max_header_bytes)
        .unwrap_or(d.max_header_bytes);
    if max_header_bytes < 8192 {
        return Err(ConfigError::Invalid(format!(
            "--max-header-bytes must be at least 8192, not {max_header_bytes}"
        )));
    }
    Ok(crate::server::ConnLimits {
        max_connections: positive(
            "--max-connections",
            flags
                .max_connections
                .or(file.max_connections)
                .unwrap_or(d.max_connections),
        )?,
        header_timeout: positive_secs(
            "--header-timeout",
            flags
                .header_timeout
                .or(file.header_timeout_secs)
                .unwrap_or(d.header_timeout.as_secs_f64()),
        )?,
        keepalive_timeout: positive_secs(
            "--keepalive-timeout",
            flags
                .keepalive_timeout
                .or(file.keepalive_timeout_secs)
                .unwrap_or(d.keepalive_timeout.as_secs_f64()),
        )?,
        max_header_bytes,
        max_headers: positive(
            "--max-headers",
            flags
                .max_headers
                .or(file.max_headers)
                .unwrap_or(d.max_headers),
        )?,
        h2_max_streams: positive(
            "--h2-max-streams",
            flags
                .h2_max_streams
                .or(file.h2_max_streams)
                .map_or(d.h2_max_streams as usize, |n| n as usize),
        )? as u32,
    })
}

/// A timeout: seconds > 0 (a zero timeout would close every connection at once).
fn positive_secs(name: &str, v: f64) -> Result<Duration, ConfigError> {
    match secs(name, v)? {
        d if d < Duration::from_millis(10) => Err(ConfigError::Invalid(format!(
            "{name} must be at least 0.01 seconds, not {v}"
        ))),
        d => Ok(d),
    }
}

fn secs(name: &str, v: f64) -> Result<Duration, ConfigError> {
    if (0.0..1.0e9).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(ConfigError::Invalid(format!(
            "{name} must be a number of seconds ≥ 0, not {v}"
        )))
    }
}

fn above_zero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

fn positive(name: &str, v: usize) -> Result<usize, ConfigError> {
    if v == 0 {
        Err(ConfigError::Invalid(format!("{name} must be at least 1")))
    } else {
        Ok(v)
    }
}

/// Parses and checks an upstream URL ([`crate::proxy::upstream::parse_url`]).
pub fn parse_upstream(s: &str) -> Result<Uri, ConfigError> {
    crate::proxy::upstream::parse_url(s).map_err(ConfigError::Invalid)
}

/// The settings every traffic-carrying subcommand shares (`proxy`, `demo`, `stdio`).
#[derive(Debug, Clone)]
pub struct Shared {
    pub inspect: InspectConfig,
    pub log: LogFormat,
    pub record: Option<Options>,
    pub limits: Vec<RuleSpec>,
    /// `limit_code`, when the file sets one (otherwise rpctap's own, `rpc::own`).
    pub limit_code: Option<i64>,
    pub config_path: Option<PathBuf>,
    pub flag_limits: Vec<RuleSpec>,
    pub faults: Vec<crate::flow::fault::FaultSpec>,
    pub flag_faults: Vec<crate::flow::fault::FaultSpec>,
    pub deny: Vec<crate::flow::deny::DenySpec>,
    pub flag_deny: Vec<crate::flow::deny::DenySpec>,
    pub admin: Option<crate::admin::AdminConfig>,
    pub otel: Option<crate::observe::otel::OtelConfig>,
    /// `--baseline DIR`: where the server's tool baseline is kept (joined to the hub without it:
    /// the state directory's `baselines/`).
    pub baseline_dir: Option<PathBuf>,
}

/// `--otlp*` over `[otel]`; `None` without an endpoint.
fn otel_config(
    flags: &ProxyFlags,
    file: &FileConfig,
) -> Result<Option<crate::observe::otel::OtelConfig>, ConfigError> {
    let Some(url) = flags.shared.otlp.clone().or(file.otel.endpoint.clone()) else {
        return Ok(None);
    };
    let sample = flags.shared.otlp_sample.or(file.otel.sample).unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample) {
        return Err(ConfigError::Invalid(format!(
            "--otlp-sample {sample}: a share from 0 to 1"
        )));
    }
    let metrics_interval = match (
        flags.shared.otlp_metrics_interval,
        &file.otel.metrics_interval,
    ) {
        (Some(s), _) => s,
        (None, Some(text)) => crate::units::secs(text)
            .map_err(|e| ConfigError::Invalid(format!("[otel] metrics_interval: {e}")))?,
        (None, None) => 60.0,
    };
    if metrics_interval < 0.05 {
        return Err(ConfigError::Invalid(format!(
            "--otlp-metrics-interval {metrics_interval}s: at least 50ms"
        )));
    }
    Ok(Some(crate::observe::otel::OtelConfig {
        endpoint: crate::observe::otel::OtelConfig::endpoint_url(&url)
            .map_err(ConfigError::Invalid)?,
        sample,
        propagate: flags.otlp_propagate || file.otel.propagate.unwrap_or(false),
        service_name: file
            .otel
            .service_name
            .clone()
            .unwrap_or_else(|| "rpctap".into()),
        queue: positive("[otel] queue", file.otel.queue.unwrap_or(65_536))?,
        legacy_names: flags.shared.otlp_legacy_names || file.otel.legacy_names.unwrap_or(false),
        metrics_interval: std::time::Duration::from_secs_f64(metrics_interval),
        tool_content: flags.shared.otlp_tool_content || file.otel.tool_content.unwrap_or(false),
    }))
}

/// Merges flags over the file over the defaults: the settings all modes share. The log is
/// `default_log` unless a flag or the file says (`stdio` gives `off`: its stdout is the
/// client's).
pub fn resolve_shared(
    flags: &ProxyFlags,
    file: &FileConfig,
    default_log: LogFormat,
) -> Result<Shared, ConfigError> {
    crate::rpc::own::set_range(
        flags
            .shared
            .error_codes
            .or(file.error_codes)
            .unwrap_or_default(),
    );
    let d = InspectConfig::default();
    let inspect = InspectConfig {
        max_frame_bytes: positive(
            "--max-frame-bytes",
            flags
                .shared
                .max_frame_bytes
                .or(file.inspect.max_frame_bytes)
                .unwrap_or(d.max_frame_bytes),
        )?,
        call_timeout: above_zero(secs(
            "--call-timeout",
            flags
                .shared
                .call_timeout
                .or(file.inspect.call_timeout_secs)
                .unwrap_or(d.call_timeout.as_secs_f64()),
        )?)
        .ok_or_else(|| {
            ConfigError::Invalid(
                "--call-timeout must be above 0 (at 0 every call would end missing)".into(),
            )
        })?,
        limits: Limits {
            max_pending: positive(
                "--max-pending",
                flags
                    .shared
                    .max_pending
                    .or(file.inspect.max_pending)
                    .unwrap_or(d.limits.max_pending),
            )?,
            max_sessions: positive(
                "--max-sessions",
                flags
                    .shared
                    .max_sessions
                    .or(file.inspect.max_sessions)
                    .unwrap_or(d.limits.max_sessions),
            )?,
            ..d.limits
        },
        large_result: positive(
            "--large-result",
            flags
                .shared
                .large_result
                .or(file.inspect.large_result_bytes)
                .unwrap_or(d.large_result),
        )?,
        max_schemas: positive(
            "--max-schemas",
            flags
                .shared
                .max_schemas
                .or(file.inspect.max_schemas)
                .unwrap_or(d.max_schemas),
        )?,
        redact: Arc::new(Redactor::new(
            &[flags.redact_headers.clone(), file.redact_headers.clone()].concat(),
            &[flags.shared.redact_paths.clone(), file.redact_paths.clone()].concat(),
        )),
        trace: None,    // set from `otel` below
        baseline: None, // set by the mode, which knows the server's label
    };
    let record = flags
        .shared
        .record
        .clone()
        .or(file.record.clone())
        .map(|path| Options {
            path,
            max_bytes: flags.shared.record_max_bytes.or(file.record_max_bytes),
            mode: if flags.shared.record_append {
                crate::record::OpenMode::Append
            } else if flags.shared.force {
                crate::record::OpenMode::Overwrite
            } else {
                crate::record::OpenMode::New
            },
        });
    for h in flags.redact_headers.iter().chain(&file.redact_headers) {
        if http::HeaderName::from_bytes(h.trim().as_bytes()).is_err() {
            return Err(ConfigError::Invalid(format!(
                "--redact-header {h:?} is not a header name (letters, digits and -, no spaces)"
            )));
        }
    }
    for p in flags.shared.redact_paths.iter().chain(&file.redact_paths) {
        if p.trim().is_empty() || p.split('.').any(|seg| seg.trim().is_empty()) {
            return Err(ConfigError::Invalid(format!(
                "--redact-path {p:?} is not a path: dot-separated keys, e.g. params.arguments.password"
            )));
        }
    }
    let flag_limits = flags
        .shared
        .limits
        .iter()
        .map(|l| RuleSpec::parse_flag(l))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let limits = [flag_limits.clone(), file.limit.clone()].concat();
    let limit_code = file.limit_code;
    let flag_faults = flags
        .shared
        .faults
        .iter()
        .map(|f| crate::flow::fault::FaultSpec::parse_flag(f))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let faults = [flag_faults.clone(), file.fault.clone()].concat();
    let flag_deny = flags
        .shared
        .deny
        .iter()
        .map(|f| crate::flow::deny::DenySpec::parse_flag(f))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let deny = [flag_deny.clone(), file.deny.clone()].concat();
    crate::flow::deny::Deny::new(&deny).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    // Built once here so a bad rule is a usage error naming the rule (each transport builds its
    // own, refusing the actions that mean nothing there).
    crate::limit::Limiter::new(&limits, limit_code)
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    crate::flow::fault::Faults::new(&faults, crate::flow::fault::Carrier::Any)
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    if record.as_ref().is_some_and(|r| r.max_bytes == Some(0)) {
        return Err(ConfigError::Invalid(
            "--record-max-bytes must be at least 1".into(),
        ));
    }
    let otel = otel_config(flags, file)?;
    let inspect = InspectConfig {
        trace: otel.as_ref().map(|o| crate::trace::TraceSettings {
            sample: o.sample,
            propagate: o.propagate,
        }),
        ..inspect
    };
    Ok(Shared {
        inspect,
        log: flags.shared.log.or(file.log).unwrap_or(default_log),
        record,
        limits,
        limit_code,
        config_path: flags.shared.config.clone(),
        flag_limits,
        faults,
        flag_faults,
        deny,
        flag_deny,
        admin: admin_config(flags, file)?,
        otel,
        baseline_dir: flags.shared.baseline.clone(),
    })
}

/// Loads `--config` (an empty file config without it).
pub fn load_file(flags: &ProxyFlags) -> Result<FileConfig, ConfigError> {
    match &flags.shared.config {
        Some(p) => FileConfig::load(p),
        None => Ok(FileConfig::default()),
    }
}

/// Merges flags over the file over the defaults.
pub fn resolve(
    listen: Option<SocketAddr>,
    upstream: Option<&str>,
    flags: &ProxyFlags,
) -> Result<ProxyConfig, ConfigError> {
    let file = load_file(flags)?;
    let listen = listen
        .or(file.listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)));
    let upstream = upstream
        .map(str::to_string)
        .or(file.upstream.clone())
        .ok_or_else(|| {
            ConfigError::Invalid("--upstream is required (or `upstream` in the config file)".into())
        })?;
    let upstream = parse_upstream(&upstream)?;
    let Shared {
        inspect,
        log,
        record,
        limits,
        limit_code,
        config_path,
        flag_limits,
        faults,
        flag_faults,
        deny,
        flag_deny,
        admin,
        otel,
        baseline_dir,
    } = resolve_shared(flags, &file, LogFormat::Text)?;
    if let Some(crate::admin::AdminAddr::Tcp(a)) = admin.as_ref().map(|a| &a.addr) {
        if *a == listen && a.port() != 0 {
            return Err(ConfigError::Invalid(format!(
                "--admin {a} is the --listen address: the admin listener needs a port of its own"
            )));
        }
    }
    let conn = conn_limits(flags, &file)?;
    Ok(ProxyConfig {
        listen,
        proxy: ProxyOptions {
            upstream,
            preserve_host: flags.preserve_host || file.preserve_host.unwrap_or(false),
            upstream_insecure: flags.upstream_insecure || file.upstream_insecure.unwrap_or(false),
            connect_timeout: secs(
                "--connect-timeout",
                flags
                    .connect_timeout
                    .or(file.connect_timeout_secs)
                    .unwrap_or(5.0),
            )?,
            upstream_idle_max: flags
                .upstream_idle_max
                .or(file.upstream_idle_max)
                .unwrap_or(64),
            upstream_idle_timeout: secs(
                "--upstream-idle-timeout",
                flags
                    .upstream_idle_timeout
                    .or(file.upstream_idle_timeout_secs)
                    .unwrap_or(90.0),
            )?,
            upstream_timeout: secs(
                "--upstream-timeout",
                flags
                    .upstream_timeout
                    .or(file.upstream_timeout_secs)
                    .unwrap_or(120.0),
            )?,
            body_timeout: positive_secs(
                "--body-timeout",
                flags
                    .body_timeout
                    .or(file.body_timeout_secs)
                    .unwrap_or(30.0),
            )?,
            intercept_timeout: positive_secs(
                "--intercept-timeout",
                flags
                    .intercept_timeout
                    .or(file.intercept_timeout_secs)
                    .unwrap_or(60.0),
            )?,
            intercept: match &flags.intercept {
                Some(f) => {
                    crate::filter::Filter::parse(f)
                        .map_err(|why| ConfigError::Invalid(format!("--intercept: {why}")))?;
                    Some(f.clone())
                }
                None => None,
            },
            guard: None,
            max_header_bytes: conn.max_header_bytes,
        },
        conn,
        inspect,
        log,
        no_tui: flags.no_tui || file.no_tui.unwrap_or(false),
        max_rows: positive(
            "--max-rows",
            flags.max_rows.or(file.max_rows).unwrap_or(100_000),
        )?,
        grace: secs("--grace", flags.grace.or(file.grace_secs).unwrap_or(10.0))?,
        record,
        limits,
        limit_code,
        config_path,
        flag_limits,
        faults,
        flag_faults,
        deny,
        flag_deny,
        admin,
        otel,
        session_meta: None,
        baseline_dir,
        bridge: None,
        guard: loopback_guard(listen, flags),
    })
}

/// A proxy listening on loopback answers only requests that name it (`Host`): a web page the
/// user opens can reach loopback, and a name it controls can be made to resolve to 127.0.0.1
/// (DNS rebinding). rpctap sends the upstream its
/// own `Host` (the upstream's name), so an upstream's own check can no longer see the page's:
/// rpctap makes it (`Origin` goes to the upstream unchanged, and with `--preserve-host` the
/// `Host` too: then the checks stay the upstream's). Off loopback the listener is exposed on
/// purpose (a sidecar, an ingress) and names are the network's business.
fn loopback_guard(
    listen: SocketAddr,
    flags: &ProxyFlags,
) -> Option<crate::server::guard::GuardConfig> {
    (listen.ip().is_loopback() && !flags.preserve_host).then(|| crate::server::guard::GuardConfig {
        allow_hosts: flags.allow_host.clone(),
        allow_origins: flags.allow_origin.clone(),
        token: None,
        json_posts: false,
        host_only: true,
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    /// The Host check guards a loopback proxy only: off loopback the listener is exposed on
    /// purpose, and with `--preserve-host` the upstream sees the page's `Host` itself.
    #[test]
    fn only_a_loopback_proxy_checks_host_names() {
        let flags = ProxyFlags::default();
        let g = loopback_guard("127.0.0.1:8080".parse().unwrap(), &flags).unwrap();
        assert!(g.host_only && g.token.is_none() && !g.json_posts);
        assert!(loopback_guard("[::1]:8080".parse().unwrap(), &flags).is_some());
        assert!(loopback_guard("10.0.0.5:8080".parse().unwrap(), &flags).is_none());
        assert!(loopback_guard("0.0.0.0:8080".parse().unwrap(), &flags).is_none());
        let preserved = ProxyFlags {
            preserve_host: true,
            ..Default::default()
        };
        assert!(loopback_guard("127.0.0.1:8080".parse().unwrap(), &preserved).is_none());
    }

    /// `replay`'s flags are checked before the recording is read: a wrong flag is named, not
    /// hidden behind the missing file.
    #[test]
    fn replay_flags_are_read_and_checked_before_the_file() {
        use clap::Parser as _;
        let args = |extra: &[&str]| {
            let mut v = vec!["rpctap", "replay", "/nonexistent/r.jsonl"];
            v.extend_from_slice(extra);
            match crate::cli::Cli::try_parse_from(v).unwrap().command {
                Some(crate::cli::Command::Replay(a)) => a,
                _ => unreachable!(),
            }
        };
        let err = |extra: &[&str]| replay(&args(extra)).unwrap_err().to_string();
        assert!(err(&["-t", "http://x", "--header", "novalue"]).contains("must look like"));
        assert!(err(&["-t", "http://x", "--timeout", "0"]).contains("positive number of seconds"));
        assert!(err(&["-t", "ftp://x"]).contains("must start with http"));
        let ok = replay(&args(&[
            "-t",
            "http://127.0.0.1:9/",
            "--header",
            "Authorization: Bearer x",
            "--timeout",
            "2s",
            "--max-duration",
            "1s",
        ]))
        .unwrap();
        assert_eq!(
            ok.headers,
            [("Authorization".to_string(), "Bearer x".to_string())]
        );
        assert_eq!(ok.timeout, std::time::Duration::from_secs(2));
        assert_eq!(ok.max_duration, Some(std::time::Duration::from_secs(1)));
        assert_eq!(ok.target.unwrap().port_u16(), Some(9));
    }

    #[test]
    fn shipped_config_parses() {
        let text = include_str!("../config/rpctap.toml");
        let f = FileConfig::parse(text).unwrap();
        assert!(f.upstream.is_some());
        assert_eq!(f.metrics_max_labels, Some(500));
        // The connection limits it spells out are the defaults.
        assert_eq!(
            conn_limits(&ProxyFlags::default(), &f).unwrap(),
            crate::server::ConnLimits::default()
        );
        // Its commented fault rule parses and builds, uncommented.
        let start = text.find("# [[fault]]").unwrap();
        let rule: String = text[start..]
            .lines()
            .take_while(|l| l.starts_with("# "))
            .map(|l| format!("{}\n", &l[2..]))
            .collect();
        let f = FileConfig::parse(&rule).unwrap();
        assert_eq!(f.fault.len(), 1);
        assert_eq!(f.fault[0].probability, Some(0.2));
        crate::flow::fault::Faults::new(&f.fault, crate::flow::fault::Carrier::Http).unwrap();
        // Its commented keys parse too, uncommented.
        let all = text
            .replace("# admin = ", "admin = ")
            .replace("# ready_path = ", "ready_path = ")
            .replace("# endpoint = ", "endpoint = ");
        let f = FileConfig::parse(&all).unwrap();
        assert_eq!(f.admin.as_deref(), Some("127.0.0.1:9100"));
        let o = otel_config(&ProxyFlags::default(), &f).unwrap().unwrap();
        assert_eq!(o.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!((o.sample, o.propagate, o.queue), (1.0, false, 65_536));
        // The commented [[limit]] example, every key uncommented, is a valid rule (a shared one).
        let example: String = text[text.find("# [[limit]]").unwrap()..]
            .lines()
            .take_while(|l| l.starts_with('#'))
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| !l.starts_with("Shared by") && !l.starts_with("limit_code"))
            .map(|l| format!("{l}\n"))
            .collect();
        let rules = FileConfig::parse(&example).unwrap().limit;
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].store.as_deref(), Some("redis://127.0.0.1:6379"));
        crate::limit::Limiter::new(&rules, -32001).unwrap();
        let a = admin_config(&ProxyFlags::default(), &f).unwrap().unwrap();
        assert_eq!(a.ready_path.as_deref(), Some("/health"));
        assert_eq!(a.ready_interval, Duration::from_secs(5));
        // Off loopback without a token: refused, naming the fix.
        let f = FileConfig::parse("admin = \"0.0.0.0:9100\"").unwrap();
        let e = admin_config(&ProxyFlags::default(), &f).unwrap_err();
        assert!(e.to_string().contains("RPCTAP_ADMIN_TOKEN"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_clear_errors() {
        assert!(FileConfig::parse("bogus = 1")
            .unwrap_err()
            .contains("bogus"));
        let flags = ProxyFlags {
            shared: crate::cli::SharedFlags {
                max_pending: Some(0),
                ..Default::default()
            },
            ..Default::default()
        };
        let e = resolve(None, Some("http://127.0.0.1:1"), &flags).unwrap_err();
        assert!(e.to_string().contains("--max-pending"));
        let e = resolve(None, Some("ftp://x"), &ProxyFlags::default()).unwrap_err();
        assert!(e.to_string().contains("http://"));
        assert!(resolve(None, None, &ProxyFlags::default())
            .unwrap_err()
            .to_string()
            .contains("--upstream"));
    }

    #[test]
    fn flags_win_over_file() {
        let dir = std::env::temp_dir().join(format!("rpctap-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.toml");
        std::fs::write(
            &p,
            "upstream = \"http://127.0.0.1:1\"\ngrace_secs = 3\n[inspect]\nmax_pending = 7\n",
        )
        .unwrap();
        let flags = ProxyFlags {
            shared: crate::cli::SharedFlags {
                config: Some(p),
                ..Default::default()
            },
            grace: Some(1.0),
            ..Default::default()
        };
        let c = resolve(None, None, &flags).unwrap();
        assert_eq!(c.grace, Duration::from_secs(1));
        assert_eq!(c.inspect.limits.max_pending, 7);
        assert_eq!(c.proxy.upstream.port_u16(), Some(1));
    }
}
