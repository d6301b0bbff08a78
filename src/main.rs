//! The `rpctap` binary: parse the command line, set up tracing, run the subcommand on a tokio
//! runtime, map the outcome to an exit code — one rule for every subcommand: 0 ok, 1 the run
//! failed (an address that cannot be bound, an I/O error while serving), 2 the command line or
//! its input is wrong (a bad flag or config, a file that cannot be read, nothing to check).

use clap::Parser;

/// mimalloc: the proxy path allocates small, short-lived buffers per request (headers, frames,
/// events), where glibc's malloc was a visible share of the proxy's CPU under load (perf;
/// benches/RESULTS.md).
#[global_allocator]
static GLOBAL: rpctap::alloc::Mimalloc = rpctap::alloc::Mimalloc;
use rpctap::cli::{Cli, Command};
use rpctap::{app, server};

fn main() {
    let cli = Cli::parse();
    // Bare `rpctap`: the dashboard over this machine's sessions on a terminal, the help
    // elsewhere (a script gets a clear answer, not a screen it cannot use).
    let command = match cli.command {
        Some(c) => c,
        None if std::io::IsTerminal::is_terminal(&std::io::stdout()) => {
            Command::Watch(rpctap::cli::WatchArgs {
                history: 100,
                max_rows: 100_000,
            })
        }
        None => {
            let _ = <Cli as clap::CommandFactory>::command().print_help();
            std::process::exit(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RPCTAP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a file or a pipe gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // `RPCTAP_THREADS=N` sets the number of runtime threads (default: one per core).
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // An idle worker gives its freed memory back (see `alloc::give_back_when_idle`).
    builder.on_thread_park(rpctap::alloc::give_back_when_idle);
    if let Some(v) = std::env::var_os("RPCTAP_THREADS") {
        match v.to_str().and_then(|v| v.parse::<usize>().ok()) {
            Some(n) if n >= 1 => {
                builder.worker_threads(n);
            }
            _ => {
                eprintln!("rpctap: RPCTAP_THREADS must be a whole number ≥ 1, not {v:?}");
                std::process::exit(2);
            }
        }
    }
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rpctap: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = rt.block_on(async move {
        let shutdown = server::shutdown_signal();
        // One error type for every subcommand: its variant decides the code.
        let code = |r: Result<i32, app::AppError>| match r {
            Ok(code) => code,
            Err(e) => {
                eprintln!("rpctap: {e}");
                e.exit_code()
            }
        };
        let served = |r: Result<(), app::AppError>| code(r.map(|()| 0));
        let offline = code;
        match command {
            Command::Proxy(a) => served(app::proxy::run(a, shutdown).await),
            Command::Demo(a) => served(app::demo::run(a, shutdown).await),
            Command::DemoServer(a) => served(app::demo::server(a, shutdown).await),
            Command::Replay(a) => offline(app::replay::run(a).await),
            Command::Mock(a) => offline(app::replay::mock(a, shutdown).await),
            Command::Probe(a) => offline(app::probe::probe(a).await),
            Command::Test(a) => offline(app::probe::test(a).await),
            Command::Check(a) => offline(app::check::run(a)),
            Command::Diff(a) => offline(app::check::diff(a)),
            Command::Baseline(a) => offline(app::check::baseline(a)),
            Command::Mcp(a) => offline(app::agent::run(a).await),
            Command::Cost(a) => offline(app::check::cost(a)),
            Command::Export(a) => offline(app::export::run(a)),
            Command::View(a) => offline(app::view::run(a, shutdown).await),
            Command::Stdio(a) => offline(app::stdio::run(a).await),
            Command::Serve(a) => served(app::serve::run(a, shutdown).await),
            Command::Attach(a) => offline(app::view::attach(a, shutdown).await),
            Command::Watch(a) => offline(app::hub::watch(a, shutdown).await),
            Command::Sessions(a) => offline(app::hub::sessions(a)),
            Command::Open(a) => offline(app::hub::open(a, shutdown).await),
            Command::Prune(a) => offline(app::hub::prune(a)),
            Command::Config(a) => offline(app::wrap::config(a)),
            Command::Completions(a) => offline(app::completions(a)),
            Command::Man => offline(app::man()),
        }
    });
    // Connections still open after the grace period must not hold the exit.
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    std::process::exit(code);
}
