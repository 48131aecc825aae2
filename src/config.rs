//! Configuration: every setting is a flag, an environment variable
//! `SHARDGATE_<FLAG>` and a key of the `--config` file, in that order of
//! precedence over the default ([`load`]).

mod load;

pub use load::{Setting, SettingSource};

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// The storage backends a server can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// fjall, in the data directory.
    Embedded,
    /// In memory, gone at exit.
    Memory,
    /// Partitions on a fleet of PostgreSQL servers (`--postgres`).
    Postgres,
}

/// Where the HTTP side port listens, if anywhere (`--http-bind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpBind(pub Option<SocketAddr>);

impl std::str::FromStr for HttpBind {
    type Err = String;

    fn from_str(s: &str) -> Result<HttpBind, String> {
        if s == "off" {
            return Ok(HttpBind(None));
        }
        s.parse()
            .map(|addr| HttpBind(Some(addr)))
            .map_err(|e| format!("{e}: give an address such as 127.0.0.1:8088, or off"))
    }
}

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// A feature turned on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// Whether the wire port speaks TLS (`--tls-mode`), with mongod's names
/// and meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsMode {
    /// Plain connections only; a TLS handshake is recognised and closed.
    #[value(name = "disabled")]
    Disabled,
    /// Plain and TLS connections on the same port.
    #[value(name = "allowTLS")]
    AllowTls,
    /// Plain and TLS connections on the same port (mongod prefers TLS
    /// for its own outgoing connections, which Shardgate does not make).
    #[value(name = "preferTLS")]
    PreferTls,
    /// TLS connections only; a plain one is closed.
    #[value(name = "requireTLS")]
    RequireTls,
}

/// Shardgate: a MongoDB wire-protocol server that partitions collections
/// the way Azure Cosmos DB does.
#[derive(Debug, Clone, Parser)]
#[command(name = "shardgate", version)]
pub struct Config {
    /// A TOML file of settings, each flag's name a key
    /// (`max-connections = 500`); flags and environment variables
    /// override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:27017")]
    pub bind: SocketAddr,

    /// Directory that holds the data (created if missing).
    #[arg(long, default_value = "./shardgate-data")]
    pub data_dir: PathBuf,

    /// Address of the HTTP side port (`/metrics`, `/livez`, `/readyz`),
    /// or `off`.
    #[arg(long, default_value = "127.0.0.1:8088")]
    pub http_bind: HttpBind,

    /// Log level of Shardgate's own lines (error, warn, info, debug,
    /// trace; the libraries it uses log warnings and errors only), or a
    /// whole tracing filter such as `shardgate=debug,fjall=info`.
    #[arg(long, default_value = "info")]
    pub log_level: String,

    /// How log lines are written to stderr: `text`, or `json` (one object
    /// per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Most client connections served at once; one more is answered with
    /// an error and closed.
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,

    /// Most client connections from one IP address served at once (0: no
    /// limit); one more is answered with an error and closed.
    #[arg(long, default_value_t = 2_000)]
    pub max_connections_per_address: usize,

    /// Whether the wire port speaks TLS: `disabled`, `allowTLS` or
    /// `preferTLS` (plain and TLS on the same port), `requireTLS`.
    #[arg(long, value_enum, default_value_t = TlsMode::Disabled)]
    pub tls_mode: TlsMode,

    /// PEM file with the server's certificate chain, and its private key
    /// too unless --tls-key-file names another file (mongod's
    /// `--tlsCertificateKeyFile`). Read again on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM file with the private key of --tls-cert-file.
    #[arg(long, value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,

    /// PEM file of the certificate authorities client certificates are
    /// verified against; with it, TLS clients must present a certificate
    /// it signed.
    #[arg(long, value_name = "FILE")]
    pub tls_ca_file: Option<PathBuf>,

    /// With --tls-ca-file, TLS clients without a certificate are let in
    /// too (a certificate they do present must still verify).
    #[arg(long)]
    pub tls_allow_connections_without_certificates: bool,

    /// Seconds a reply may take to reach a client that does not read it;
    /// past that the connection is closed (0: wait forever). The next
    /// request is not read while a reply is unsent.
    #[arg(long, default_value_t = 60)]
    pub reply_timeout_secs: u64,

    /// Where the data lives: `embedded` (on disk in --data-dir),
    /// `postgres` (on the --postgres servers) or `memory` (lost at exit;
    /// for tests).
    #[arg(long, value_enum, default_value_t = Backend::Embedded)]
    pub backend: Backend,

    /// A PostgreSQL server of the fleet, as libpq takes it (a URL or
    /// `key=value` pairs; several hosts with
    /// `target_session_attrs=read-write` follow a replicated server's
    /// primary). Repeat once per server; the first also holds the
    /// metadata. Keep the order: a server's place in it is its identity.
    #[arg(long = "postgres", value_name = "URL")]
    pub postgres: Vec<String>,

    /// The schema the fleet's tables live in, on every server; fleets in
    /// different schemas of the same servers are independent.
    #[arg(long, default_value = "shardgate")]
    pub postgres_schema: String,

    /// Whether the balancer moves partitions between the --postgres
    /// servers to even their number per server.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub balancer: Switch,

    /// Test hook: `2pc-after-prepare` or `2pc-after-decision` ends the
    /// process at that step of the next cross-server commit.
    #[arg(long, hide = true)]
    pub postgres_failpoint: Option<String>,

    /// Test hook: the embedded engine's writes fail as on a full disk
    /// (`OutOfDiskSpace`) once this many bytes of keys and values were
    /// written, and every write after that, until a restart.
    #[arg(long, hide = true)]
    pub test_disk_full_after_bytes: Option<u64>,

    /// Test hook: storage takes this many more milliseconds to open, so
    /// a test sees the side port while the server starts.
    #[arg(long, hide = true)]
    pub test_storage_open_delay_ms: Option<u64>,

    /// Block cache of the embedded engine, in MiB. By default half of the
    /// memory less 1 GiB, at least 256 MiB, as mongod sizes its cache.
    #[arg(long)]
    pub cache_mb: Option<u64>,

    /// Most milliseconds between the embedded engine's journal syncs of
    /// writes acknowledged with `j: false` (mongod's
    /// `journalCommitInterval`). Other writes are synced before their
    /// reply.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=500))]
    pub journal_commit_interval_ms: u64,

    /// Physical partitions of a newly sharded collection when
    /// `shardCollection` names no `numInitialChunks`.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=8192))]
    pub initial_partitions: u64,

    /// Most partitions one query reads at once (0: all it targets).
    #[arg(long, default_value_t = 0)]
    pub fanout_parallelism: usize,

    /// A physical partition holding more bytes of documents than this
    /// splits in two, in the background.
    #[arg(long, default_value_t = 10 << 30)]
    pub partition_split_bytes: u64,

    /// Most bytes of documents with one shard-key value (one logical
    /// partition); a write past it fails.
    #[arg(long, default_value_t = 20 << 30)]
    pub logical_partition_max_bytes: u64,

    /// Hours the change log keeps each change; change streams can resume
    /// from any point within them. Fractions are allowed.
    #[arg(long, default_value_t = 24.0, value_parser = positive_hours)]
    pub change_log_retention_hours: f64,

    /// Most MiB the change log may take on disk; past it the oldest
    /// changes go first, whatever their age (0: no bound but the hours).
    #[arg(long, default_value_t = 10_240)]
    pub change_log_max_mb: u64,

    /// Seconds between passes of the TTL monitor, which deletes documents
    /// whose TTL index date has expired.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub ttl_monitor_interval_secs: u64,

    /// A command that takes at least this many milliseconds is logged
    /// as a slow operation, as mongod's `slowms` logs it.
    #[arg(long, default_value_t = 100)]
    pub slow_ms: u64,

    /// Bytes a blocking aggregation stage (`$group`, `$sort`,
    /// `$bucketAuto`, `$facet`) may hold in memory; past it, the stage
    /// spills to disk with `allowDiskUse: true` and fails without.
    #[arg(long, default_value_t = crate::aggregate::DEFAULT_MAX_BLOCKING_BYTES)]
    pub max_blocking_stage_bytes: usize,

    /// Seconds a client has to finish sending a message once its first
    /// bytes arrived; a connection still short of it is closed (0: wait
    /// forever). Idle connections are never closed.
    #[arg(long, default_value_t = 30)]
    pub partial_message_timeout_secs: u64,

    /// Wire compressors offered to clients, in the server's order
    /// (snappy, zstd, zlib, noop), or `disabled`; mongod's
    /// `net.compression.compressors`.
    #[arg(
        long,
        default_value = crate::base::CompressorList::DEFAULT_FLAG,
        value_parser = crate::base::CompressorList::parse_flag
    )]
    pub compressors: crate::base::CompressorList,

    /// Most cursors one connection may have open (opened by it and not
    /// yet exhausted, killed or timed out).
    #[arg(long, default_value_t = crate::cursor::DEFAULT_MAX_CURSORS_PER_CONNECTION)]
    pub max_cursors_per_connection: usize,

    /// Most cursors open in the whole server.
    #[arg(long, default_value_t = crate::cursor::DEFAULT_MAX_OPEN_CURSORS)]
    pub max_open_cursors: usize,

    /// Most bytes of results open cursors may hold in memory; past it no
    /// new cursor opens until some are read or closed.
    #[arg(long, default_value_t = crate::cursor::DEFAULT_MAX_CURSOR_MEMORY_BYTES)]
    pub max_cursor_memory_bytes: usize,

    /// Behave as Azure Cosmos DB for MongoDB (RU) where it is stricter
    /// than MongoDB: sorts need an index, Cosmos DB's index rules,
    /// `_ts` on every document, 2 MB documents.
    #[arg(long)]
    pub cosmos_strict: bool,

    /// With --cosmos-strict, allow documents up to 16 MB (Cosmos DB's
    /// 16 MB document option) instead of 2 MB.
    #[arg(long, requires = "cosmos_strict")]
    pub cosmos_16mb_documents: bool,
    /// RU/s of every collection that has no throughput of its own,
    /// divided evenly over its physical partitions; unset: such
    /// collections are not throttled.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub default_throughput: Option<u32>,

    /// An idle partition banks up to 300 s of its unused throughput and
    /// spends it at up to 3,000 RU/s.
    #[arg(long)]
    pub burst_capacity: bool,

    /// A throttled request waits on the server and retries, for up to
    /// 60 s, instead of failing with 16500.
    #[arg(long)]
    pub server_side_retry: bool,

    /// Offer the commands test suites use: `configureFailPoint`, with
    /// MongoDB's `failCommand` fail point. Never on a server others use.
    #[arg(long)]
    pub enable_test_commands: bool,

    /// Require clients to authenticate (SCRAM-SHA-256 or SCRAM-SHA-1)
    /// and check every command against the user's roles, as `mongod
    /// --auth`. While there is no user, a client on the loopback
    /// interface may create the first one, in `admin`.
    #[arg(long)]
    pub auth: bool,

    /// Failed authentications one client address may make in a second;
    /// further attempts from it that second are refused (0: no limit).
    #[arg(long, default_value_t = 5)]
    pub auth_failures_per_second: u32,

    /// Server-side JavaScript (`$where`, `$function`, `$accumulator`,
    /// `mapReduce`); `off` refuses them as `mongod --noscripting` does.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub javascript: Switch,

    /// Milliseconds one call of a script may run before it is stopped
    /// (the operation's `maxTimeMS` stops it too).
    #[arg(long, default_value_t = crate::query::js::DEFAULT_CALL_TIME_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub javascript_time_limit_ms: u64,

    /// MiB of memory the JavaScript runtime of one server thread may hold.
    #[arg(long, default_value_t = (crate::query::js::DEFAULT_MEMORY_BYTES >> 20) as u64, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub javascript_memory_mb: u64,

    /// Every setting's value and where it came from, as [`Config::load`]
    /// found them (`getCmdLineOpts` reports them).
    #[arg(skip)]
    pub settings: Vec<Setting>,
}

impl Config {
    /// Opens the chosen backend and the router over it: the one place
    /// that names a backend.
    pub fn open_router(&self) -> crate::error::Result<crate::router::Router> {
        if let Some(ms) = self.test_storage_open_delay_ms {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        crate::router::Router::open_with(self.open_store()?, self.partition_options())
    }

    /// The embedded engine's block cache: `--cache-mb`, or what mongod's
    /// WiredTiger would take on this host.
    pub fn cache_bytes(&self) -> u64 {
        match self.cache_mb {
            Some(mb) => mb.saturating_mul(1 << 20),
            None => default_cache_bytes(crate::base::host::usable_memory()),
        }
    }

    fn open_store(&self) -> crate::storage::StorageResult<crate::storage::SharedStore> {
        Ok(match self.backend {
            Backend::Embedded => {
                let cache = self.cache_bytes();
                tracing::info!("block cache of {} MiB", cache >> 20);
                crate::storage::embedded::EmbeddedEngine::open_store(
                    &self.data_dir,
                    cache,
                    std::time::Duration::from_millis(self.journal_commit_interval_ms),
                    self.test_disk_full_after_bytes,
                )?
            }
            Backend::Memory => crate::storage::memory::MemoryEngine::store().0,
            Backend::Postgres => {
                crate::storage::postgres::PgFleet::open(&crate::storage::postgres::PgOptions {
                    urls: self.postgres.clone(),
                    schema: self.postgres_schema.clone(),
                    failpoint: self.postgres_failpoint.clone(),
                    balancer: self.balancer == Switch::On,
                })?
            }
        })
    }

    pub fn partition_options(&self) -> crate::router::PartitionOptions {
        crate::router::PartitionOptions {
            initial_partitions: self.initial_partitions,
            fanout_parallelism: self.fanout_parallelism,
            split_bytes: self.partition_split_bytes,
            logical_max_bytes: self.logical_partition_max_bytes,
            host: self.bind.to_string(),
            cosmos_strict: self
                .cosmos_strict
                .then_some(crate::router::strict::CosmosStrict {
                    max_document_bytes: if self.cosmos_16mb_documents {
                        crate::base::limits::MAX_BSON_OBJECT_SIZE
                    } else {
                        crate::router::strict::COSMOS_MAX_DOCUMENT_BYTES
                    },
                }),
            throughput: crate::router::throttle::ThroughputOptions {
                default_rus: self.default_throughput,
                burst_capacity: self.burst_capacity,
                server_side_retry: self.server_side_retry,
            },
        }
    }

    /// The server-side JavaScript settings.
    pub fn javascript_limits(&self) -> crate::query::js::Limits {
        crate::query::js::Limits {
            enabled: self.javascript == Switch::On,
            call_time: std::time::Duration::from_millis(self.javascript_time_limit_ms),
            memory_bytes: usize::try_from(self.javascript_memory_mb.saturating_mul(1 << 20))
                .unwrap_or(usize::MAX),
        }
    }

    /// How long the rest of a begun message may take; `None` for ever.
    pub fn partial_message_timeout(&self) -> Option<std::time::Duration> {
        (self.partial_message_timeout_secs > 0)
            .then(|| std::time::Duration::from_secs(self.partial_message_timeout_secs))
    }

    /// How long an unread reply may wait to be sent; `None` for ever.
    pub fn reply_timeout(&self) -> Option<std::time::Duration> {
        (self.reply_timeout_secs > 0)
            .then(|| std::time::Duration::from_secs(self.reply_timeout_secs))
    }

    /// The caps on open cursors.
    pub fn cursor_limits(&self) -> crate::cursor::CursorLimits {
        crate::cursor::CursorLimits {
            per_connection: self.max_cursors_per_connection,
            total: self.max_open_cursors,
            memory_bytes: self.max_cursor_memory_bytes,
        }
    }

    /// The arguments as `getCmdLineOpts` reports them.
    pub fn argv() -> Vec<String> {
        std::env::args().collect()
    }
}

/// mongod's default WiredTiger cache: half of the memory less 1 GiB, at
/// least 256 MiB; 256 MiB when the memory is unknown.
fn default_cache_bytes(memory: Option<u64>) -> u64 {
    const FLOOR: u64 = 256 << 20;
    memory.map_or(FLOOR, |m| (m.saturating_sub(1 << 30) / 2).max(FLOOR))
}

impl Config {
    /// The tracing filter `--log-level` asks for. A bare level is
    /// Shardgate's own: the libraries under it (the storage engine, the
    /// HTTP server) log only warnings and errors, so a user sees
    /// Shardgate's lines and not the engine's internals. Anything else is
    /// a whole filter, taken as given.
    pub fn log_filter(&self) -> String {
        let level = self.log_level.trim();
        match level.to_ascii_lowercase().as_str() {
            "off" | "error" => level.to_string(),
            "warn" | "info" | "debug" | "trace" => format!("warn,shardgate={level}"),
            _ => level.to_string(),
        }
    }
}

/// A positive number of hours, at most ten years.
fn positive_hours(s: &str) -> Result<f64, String> {
    let hours: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if hours.is_finite() && hours > 0.0 && hours <= 87_600.0 {
        Ok(hours)
    } else {
        Err(format!(
            "{s} is not a number of hours above 0 and at most 87600"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_log_level_is_shardgates_own() {
        let filter =
            |level: &str| Config::parse_from(["shardgate", "--log-level", level]).log_filter();
        assert_eq!(
            Config::parse_from(["shardgate"]).log_filter(),
            "warn,shardgate=info"
        );
        assert_eq!(filter("debug"), "warn,shardgate=debug");
        assert_eq!(filter("error"), "error");
        assert_eq!(filter("off"), "off");
        assert_eq!(
            filter("shardgate=debug,fjall=info"),
            "shardgate=debug,fjall=info"
        );
        let json = Config::parse_from(["shardgate", "--log-format", "json"]).log_format;
        assert_eq!(json, LogFormat::Json);
    }

    #[test]
    fn the_cache_takes_what_mongod_would_unless_told() {
        assert_eq!(default_cache_bytes(Some(24 << 30)), 23 << 29);
        assert_eq!(default_cache_bytes(Some(1 << 30)), 256 << 20);
        assert_eq!(default_cache_bytes(None), 256 << 20);
        let told = Config::parse_from(["shardgate", "--cache-mb", "64"]);
        assert_eq!(told.cache_bytes(), 64 << 20);
        let chosen = Config::parse_from(["shardgate"]).cache_bytes();
        assert_eq!(
            chosen,
            default_cache_bytes(crate::base::host::usable_memory())
        );
        assert!(chosen >= 256 << 20);
    }

    #[test]
    fn the_http_port_listens_on_8088_unless_moved_or_off() {
        let default = Config::parse_from(["shardgate"]).http_bind;
        assert_eq!(default, HttpBind(Some("127.0.0.1:8088".parse().unwrap())));
        let off = Config::parse_from(["shardgate", "--http-bind", "off"]).http_bind;
        assert_eq!(off, HttpBind(None));
        assert!(Config::try_parse_from(["shardgate", "--http-bind", "8088"]).is_err());
    }
}
