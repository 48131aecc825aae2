//! Command-line configuration.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// Shardgate: a MongoDB wire-protocol server that partitions collections
/// the way Azure Cosmos DB does.
#[derive(Debug, Clone, Parser)]
#[command(name = "shardgate", version)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:27017")]
    pub bind: SocketAddr,

    /// Directory that holds the data (created if missing).
    #[arg(long, default_value = "./shardgate-data")]
    pub data_dir: PathBuf,

    /// Log level or tracing filter (error, warn, info, debug, trace).
    #[arg(long, default_value = "info")]
    pub log_level: String,

    /// Most client connections served at once; more wait to be accepted.
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,

    /// Block cache of the embedded engine, in MiB.
    #[arg(long, default_value_t = 256)]
    pub cache_mb: u64,
}

impl Config {
    /// The arguments as `getCmdLineOpts` reports them.
    pub fn argv() -> Vec<String> {
        std::env::args().collect()
    }
}
