//! The `shardgate` binary: parse flags, set up logging, run until a signal.

use std::io::IsTerminal;

use mimalloc::MiMalloc;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use shardgate::base::recent_log::RecentLog;

use shardgate::config::{Config, LogFormat};
use shardgate::server;

/// Documents are many small allocations freed across threads; mimalloc
/// handles that pattern far better than the system allocator.
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() -> std::process::ExitCode {
    let config = match Config::load() {
        Ok(config) => config,
        Err(e) => e.exit(),
    };
    shardgate::query::js::configure(config.javascript_limits());
    // Before any thread or file exists: everything the server creates
    // (data directory, journal, tables, spill files) is private to its
    // user, whatever umask it was started with.
    #[cfg(unix)]
    rustix::process::umask(rustix::fs::Mode::from_bits_truncate(0o077));
    let filter = EnvFilter::try_new(config.log_filter())
        .unwrap_or_else(|_| EnvFilter::new("warn,shardgate=info"));
    // Colour only for a person at a terminal, and never with NO_COLOR.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    // Beside stderr, the recent lines `getLog` returns.
    let logs = tracing_subscriber::registry().with(filter).with(RecentLog);
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match config.log_format {
        LogFormat::Text => logs.with(stderr).init(),
        LogFormat::Json => logs.with(stderr.json()).init(),
    }
    // Large queries run on blocking-pool threads; mimalloc gives a
    // thread's freed memory back to the system only as that thread
    // allocates again or exits, so idle pool threads leave quickly.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(std::time::Duration::from_secs(1))
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // The side port answers "starting" while storage opens.
    let side_port = runtime.block_on(server::start_side_port(&config));
    let router = match server::secure_data_dir(&config.data_dir)
        .map_err(|e| e.to_string())
        .and_then(|()| config.open_router().map_err(|e| e.to_string()))
    {
        Ok(router) => router,
        Err(e) => {
            tracing::error!("cannot open storage in {}: {e}", config.data_dir.display());
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(server::run(config, router, side_port)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("shardgate stopped: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
