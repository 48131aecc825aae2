//! `shardgate-bench`: YCSB-style workloads against a MongoDB-wire server,
//! driven through the official Rust driver, optionally alternating with a
//! second server (the wire-path ceiling) so figures can be read as a fraction
//! of what this machine allows.
//!
//! Flow: parse the CLI → build every document up front (`dataset`) → connect
//! one shared `Client` per server → for each workload and concurrency level,
//! time it on the primary server and then on the comparison server
//! (`workload`) → print a row and a `RESULT` line per run and, at the end, a
//! summary and the ratios (`report`). See docs/BENCHMARKS.md.
//!
//! The sharded workloads (`partitioned-read`, `distribution` in `sharded`,
//! `fanout-query` in `fanout`) first shard and fill collections of their
//! own, then time them the same way (partitioned-read in rounds, see
//! `sharded`); they also sum themselves up after the ratios.
//! bench/run-partitions.sh runs them.
//!
//! `move-partition` (`partition_move`) times moving a partition between
//! two PostgreSQL servers under load; bench/run-move.sh runs it.
//!
//! `change-latency` (`changes`) times the delivery of inserts through a
//! change stream, and `--watchers` holds change streams open during
//! `load`, `update` and `mixed`; bench/run-changes.sh runs both.
//!
//! `txn-single` and `txn-cross` (`transactions`) time multi-document
//! transactions through the driver's convenient API, and add the
//! accounts up after each run; bench/run-transactions.sh runs them.

mod aggregate;
mod changes;
mod cost;
mod dataset;
mod fanout;
mod indexes;
mod javascript;
mod kinds;
mod partition_move;
mod report;
mod request_units;
mod robustness;
mod scan_filter;
mod search;
mod sharded;
mod transactions;
mod workload;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use mongodb::bson::{doc, Document, RawDocumentBuf};
use mongodb::options::{ClientOptions, Compressor};
use mongodb::{Client, IndexModel};

use crate::dataset::{Batches, Dataset};
use crate::report::{Measurement, Outcome};
use crate::workload::{Target, Workload};

/// YCSB-style benchmark for MongoDB-wire servers (Shardgate, the ceiling, mongod).
///
/// A flag given more than once takes its last value (list flags such as
/// `--concurrency` add up instead), so a script's defaults can be
/// overridden by arguments passed after them.
#[derive(Parser, Debug)]
#[command(version, args_override_self = true)]
struct Args {
    /// Server under test.
    #[arg(
        long,
        default_value = "mongodb://127.0.0.1:27017/?directConnection=true"
    )]
    uri: String,
    /// Name printed for the server under test.
    #[arg(long, default_value = "shardgate")]
    label: String,
    /// Second server run alternately with the same workloads (e.g. the ceiling);
    /// the primary's figures are then printed as a fraction of its figures.
    #[arg(long)]
    compare_uri: Option<String>,
    /// Name printed for the comparison server.
    #[arg(long, default_value = "ceiling")]
    compare_label: String,
    #[arg(long, default_value = "bench")]
    db: String,
    #[arg(long, default_value = "usertable")]
    collection: String,
    /// Documents loaded; `_id`s are the integers 0..N. Also what
    /// partitioned-read loads per partition count, and the accounts of
    /// txn-single and txn-cross.
    #[arg(long, default_value_t = 200_000)]
    docs: u64,
    /// Approximate encoded size of each document in bytes.
    #[arg(long, default_value_t = 1000)]
    doc_size: usize,
    /// Concurrent in-flight operations; a list such as `1,16` runs each level.
    #[arg(long, value_delimiter = ',', default_value = "16")]
    concurrency: Vec<usize>,
    /// Seconds each timed workload runs, per concurrency level and server.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Untimed seconds of the same workload before each timed run (0 to skip).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Workloads to run, in this order whatever order they are given in.
    /// The sharded ones (partitioned-read, fanout-query, distribution) need
    /// a server with shardCollection and are only run when named.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "load,read,update,mixed,scan"
    )]
    workloads: Vec<Workload>,
    /// partitioned-read: partition counts to compare, each in its own
    /// collection `pread_<n>` sharded on `{_id: "hashed"}`.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    partitions: Vec<u32>,
    /// partitioned-read: rounds of measurement; each round measures every
    /// partition count once, starting one count later than the round
    /// before, and the figures compared are the medians over the rounds.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// partitioned-read: seconds to wait after loading every collection and
    /// before the first measurement, while the server settles (0 to skip).
    #[arg(long, default_value_t = 5.0)]
    settle_secs: f64,
    /// fanout-query: partitions of `fanout`, sharded on `{k: "hashed"}`.
    #[arg(long, default_value_t = 16)]
    fanout_partitions: u32,
    /// fanout-query: documents in `fanout` [default: --docs].
    #[arg(long)]
    fanout_docs: Option<u64>,
    /// distribution: partitions of `dist`, sharded on `{k: "hashed"}`.
    #[arg(long, default_value_t = 16)]
    distribution_partitions: u32,
    /// distribution: documents in `dist`, one per shard-key value.
    #[arg(long, default_value_t = 100_000)]
    distribution_docs: u64,
    /// index-eq, index-range: documents in `indexed`, about 200 bytes each.
    #[arg(long, default_value_t = 1_000_000)]
    index_docs: u64,
    /// index-eq, index-insert: distinct values of the `cat` field.
    #[arg(long, default_value_t = 100_000)]
    index_cats: u64,
    /// index-insert: documents inserted for each index count.
    #[arg(long, default_value_t = 200_000)]
    index_insert_docs: u64,
    /// index-insert: documents per insertMany.
    #[arg(long, default_value_t = 100)]
    index_batch: usize,
    /// index-eq, index-range: when not 0, `indexed` is sharded on
    /// `{_id: "hashed"}` over this many partitions before it is loaded, so
    /// every query fans out and each partition reads the index.
    #[arg(long, default_value_t = 0)]
    index_partitions: u32,
    /// index-insert: secondary index counts to compare (0 to 5), each in a
    /// fresh `idx_insert` with single-field indexes on cat, score, a, b, c.
    #[arg(long, value_delimiter = ',', default_value = "0,1,5")]
    index_counts: Vec<usize>,
    /// geo-near: points in `places`.
    #[arg(long, default_value_t = 1_000_000)]
    geo_docs: u64,
    /// text-search: documents in `articles`, 33 words each.
    #[arg(long, default_value_t = 100_000)]
    text_docs: u64,
    /// collated-eq: user names in `users`.
    #[arg(long, default_value_t = 200_000)]
    collation_docs: u64,
    /// geo-near, text-search, collated-eq: when not 0, their collection is
    /// sharded on `{_id: "hashed"}` over this many partitions before it is
    /// loaded, so every query fans out.
    #[arg(long, default_value_t = 0)]
    search_partitions: u32,
    /// kind-insert: measurements inserted into each collection kind.
    #[arg(long, default_value_t = 200_000)]
    kind_docs: u64,
    /// kind-insert: documents per insertMany.
    #[arg(long, default_value_t = 100)]
    kind_batch: usize,
    /// agg-group, agg-topk: documents in `agg_sharded` and `agg_plain`,
    /// about 150 bytes each.
    #[arg(long, default_value_t = 1_000_000)]
    agg_docs: u64,
    /// js-cost: documents in `js_cost`.
    #[arg(long, default_value_t = 200_000)]
    js_docs: u64,
    /// js-cost: timed runs of each query (the median is reported).
    #[arg(long, default_value_t = 3)]
    js_repeats: u32,
    /// agg-group, agg-topk: partitions of `agg_sharded`, sharded on
    /// `{k: "hashed"}`.
    #[arg(long, default_value_t = 16)]
    agg_partitions: u32,
    /// unwind: array lengths, one document each.
    #[arg(long, value_delimiter = ',', default_value = "10000,40000,100000")]
    unwind_sizes: Vec<u64>,
    /// unwind: timed runs per size (the median is reported).
    #[arg(long, default_value_t = 3)]
    unwind_repeats: u32,
    /// unwind: seconds after which one run is abandoned (and larger sizes skipped).
    #[arg(long, default_value_t = 120.0)]
    unwind_timeout: f64,
    /// cursor-memory: documents in `cursor_probe`, about 100 bytes each.
    #[arg(long, default_value_t = 100_000)]
    cursor_docs: u64,
    /// cursor-memory: sorted cursors left open after their first batch.
    #[arg(long, default_value_t = 200)]
    cursors: usize,
    /// cursor-memory: stop opening cursors once the server's RSS passes this (MiB).
    #[arg(long, default_value_t = 6144)]
    cursor_rss_cap_mb: u64,
    /// ru-enforcement: partition counts, each in its own collection
    /// `ru_<n>` sharded on `{k: "hashed"}`.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    ru_partitions: Vec<u32>,
    /// ru-enforcement: the RU/s the server provisions each collection
    /// with (its `--default-throughput`).
    #[arg(long, default_value_t = 2000)]
    ru_throughput: u64,
    /// ru-enforcement: documents of about 10 KB in each collection.
    #[arg(long, default_value_t = 2000)]
    ru_docs: u64,
    /// move-partition: documents in `moving`, sharded on `{_id: "hashed"}`
    /// over 2 partitions (half in each), of `--doc-size` bytes.
    #[arg(long, default_value_t = 200_000)]
    move_docs: u64,
    /// move-partition: seconds of load before the move starts.
    #[arg(long, default_value_t = 20.0)]
    move_before_secs: f64,
    /// move-partition: seconds of load after the move ends (the old copy
    /// is deleted a minute after the move).
    #[arg(long, default_value_t = 75.0)]
    move_after_secs: f64,
    /// change-latency: documents inserted a second, one at a time, by the
    /// one writer (for `--duration` seconds).
    #[arg(long, default_value_t = 1000)]
    change_rate: u64,
    /// load, update, mixed: change streams held open on the workload's
    /// collection during each timed run, each consumed by its own task;
    /// a server that refuses them runs without.
    #[arg(long, default_value_t = 0)]
    watchers: usize,
    /// Documents per insertMany during load.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Seconds after which load stops starting new batches.
    #[arg(long, default_value_t = 600.0)]
    load_timeout: f64,
    /// Keep the collection before load instead of dropping it (load only:
    /// the sharded workloads always drop and re-shard theirs).
    #[arg(long)]
    no_drop: bool,
    /// Process whose VmRSS/VmHWM is printed after each load and at the end.
    #[arg(long)]
    rss_pid: Option<u32>,
    /// Server process whose CPU use fanout-query, agg-group, agg-topk and
    /// scan-filter report [default: --rss-pid].
    #[arg(long)]
    server_pid: Option<u32>,
    /// `NAME=PID[,PID...]`: processes (each with every process below it,
    /// e.g. a PostgreSQL postmaster and its backends) whose CPU time during
    /// each timed run on the server under test is printed per operation on
    /// a `COST` line (read, update, mixed, scan, partitioned-read,
    /// fanout-query, txn-single, txn-cross). Repeat for several groups.
    #[arg(long = "cost", value_name = "NAME=PIDS", value_parser = cost::parse_group)]
    costs: Vec<cost::CostGroup>,
    /// `--cost` for the comparison server's runs (e.g. the ceiling itself).
    #[arg(long = "compare-cost", value_name = "NAME=PIDS", value_parser = cost::parse_group)]
    compare_costs: Vec<cost::CostGroup>,
    /// When not 0, `--collection` is sharded on `{_id: "hashed"}` over this
    /// many partitions before `load` fills it, so read, update, mixed and
    /// scan run on a sharded collection.
    #[arg(long, default_value_t = 0)]
    usertable_partitions: u32,
    /// When not 0, every `usertable` document gets `tenant: "tNNN"` (its
    /// `_id` modulo this); read and update then name `{_id, tenant}`, scan
    /// becomes `find({tenant, _id: {$gte: k}}).sort({_id: 1})`, and
    /// `--usertable-partitions` shards on `{tenant: "hashed"}`.
    #[arg(long, default_value_t = 0)]
    tenants: u64,
    /// Documents each `scan` returns at most.
    #[arg(long, default_value_t = 10)]
    scan_limit: i64,
    /// With `--tenants`: `load` creates the index `{tenant: 1, _id: 1}`
    /// on `--collection`, the index that serves `scan` on an unsharded
    /// collection as the shard-key layout serves it on a sharded one.
    #[arg(long)]
    tenant_index: bool,
    /// Tokio worker threads for the client (default: one per CPU).
    #[arg(long)]
    client_threads: Option<usize>,
    /// Seed for keys and payloads; runs with the same seed send the same requests.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Wire compressors every client offers (`snappy`, `zlib`, `zstd`; a
    /// list in order of preference), as the URI's `compressors` option; a
    /// server that agrees gets compressed requests and answers in kind.
    #[arg(long, value_delimiter = ',', value_parser = parse_compressor)]
    compressors: Vec<String>,
}

/// A compressor name the driver knows.
fn parse_compressor(name: &str) -> Result<String, String> {
    name.parse::<Compressor>()
        .map(|_| name.to_owned())
        .map_err(|e| e.to_string())
}

impl Args {
    fn check(&mut self) -> Result<(), String> {
        if self.docs == 0 || self.batch == 0 {
            return Err("--docs and --batch must be at least 1".into());
        }
        if self.concurrency.is_empty() || self.concurrency.contains(&0) {
            return Err("--concurrency levels must be at least 1".into());
        }
        if let Err(e) = cost::sample(&self.costs).and(cost::sample(&self.compare_costs)) {
            return Err(format!("cannot read the CPU use of a --cost group: {e}"));
        }
        if self.partitions.is_empty()
            || self.partitions.contains(&0)
            || self.fanout_partitions == 0
            || self.distribution_partitions == 0
            || self.agg_partitions == 0
            || self.ru_partitions.contains(&0)
            || self.ru_throughput == 0
        {
            return Err("partition counts must be at least 1".into());
        }
        if self.change_rate == 0 || self.change_rate > 1_000_000 {
            return Err("--change-rate must be between 1 and 1000000".into());
        }
        if self.watchers > 1000 {
            return Err("--watchers must be at most 1000".into());
        }
        if self.rounds == 0 {
            return Err("--rounds must be at least 1".into());
        }
        if self.fanout_docs == Some(0) || self.distribution_docs == 0 || self.move_docs == 0 {
            return Err(
                "--fanout-docs, --distribution-docs and --move-docs must be at least 1".into(),
            );
        }
        if let Some(pid) = self.server_pid() {
            if self.workloads.iter().any(|w| {
                matches!(
                    w,
                    Workload::FanoutQuery
                        | Workload::AggGroup
                        | Workload::AggTopk
                        | Workload::AggWindow
                        | Workload::ScanFilter
                )
            }) {
                report::read_cpu_secs(pid)
                    .map_err(|e| format!("cannot read the server's CPU use: {e}"))?;
            }
        }
        for (name, secs) in [
            ("--duration", self.duration),
            ("--warmup", self.warmup),
            ("--load-timeout", self.load_timeout),
            ("--settle-secs", self.settle_secs),
            ("--move-before-secs", self.move_before_secs),
            ("--move-after-secs", self.move_after_secs),
        ] {
            if !(0.0..=86_400.0).contains(&secs) {
                return Err(format!("{name} must be between 0 and 86400 seconds"));
            }
        }
        self.workloads.sort();
        self.workloads.dedup();
        self.partitions.sort_unstable();
        self.partitions.dedup();
        Ok(())
    }

    /// Untimed warm-up and timed duration of each run.
    fn timing(&self) -> (Duration, Duration) {
        (
            Duration::from_secs_f64(self.warmup),
            Duration::from_secs_f64(self.duration),
        )
    }

    /// Loaders and time limit for filling a sharded workload's collection:
    /// as many loaders as the highest concurrency level.
    fn setup_load(&self) -> (usize, Duration) {
        (
            self.max_concurrency(),
            Duration::from_secs_f64(self.load_timeout),
        )
    }

    fn max_concurrency(&self) -> usize {
        self.concurrency.iter().copied().max().unwrap_or(1)
    }

    fn fanout_docs(&self) -> u64 {
        self.fanout_docs.unwrap_or(self.docs)
    }

    fn server_pid(&self) -> Option<u32> {
        self.server_pid.or(self.rss_pid)
    }

    /// The driver's options for `uri`, with `--compressors` when given.
    pub async fn client_options(&self, uri: &str) -> Result<ClientOptions, String> {
        let mut options = ClientOptions::parse(uri)
            .await
            .map_err(|e| format!("bad URI {uri}: {e}"))?;
        if !self.compressors.is_empty() {
            let parsed: Result<Vec<Compressor>, _> =
                self.compressors.iter().map(|name| name.parse()).collect();
            options.compressors = Some(parsed.map_err(|e| e.to_string())?);
        }
        Ok(options)
    }

    /// The `--cost` groups of the `index`th server (0: the server under
    /// test, 1: the comparison server).
    fn costs_for(&self, index: usize) -> &[cost::CostGroup] {
        match index {
            0 => &self.costs,
            _ => &self.compare_costs,
        }
    }
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    if let Err(e) = args.check() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(n) = args.client_threads {
        runtime.worker_threads(n.max(1));
    }
    let result = runtime
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))
        .and_then(|rt| rt.block_on(run(args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let mut usertable = None;
    if args.workloads.iter().any(|w| w.uses_usertable()) {
        dataset(&args, &mut usertable);
    }

    let pool = args.max_concurrency();
    let mut targets = vec![connect(&args, &args.label, &args.uri, pool).await?];
    if let Some(uri) = &args.compare_uri {
        targets.push(connect(&args, &args.compare_label, uri, pool).await?);
    }
    println!(
        "workloads: {}; concurrency: {:?}; {}s each (+{}s warm-up)",
        args.workloads
            .iter()
            .map(|w| w.name())
            .collect::<Vec<_>>()
            .join(","),
        args.concurrency,
        args.duration,
        args.warmup,
    );
    println!();
    println!("{}", report::header());

    let mut results: Vec<Measurement> = Vec::new();
    let mut summaries: Vec<String> = Vec::new();
    for &w in &args.workloads {
        let outcome = match w {
            Workload::PartitionedRead => {
                let data = dataset(&args, &mut usertable);
                sharded::partitioned_read(&args, &targets, &data).await?
            }
            Workload::ScanFilter => scan_filter::scan_filter(&args, &targets[0]).await?,
            Workload::FanoutQuery => fanout::fanout_query(&args, &targets).await?,
            Workload::Distribution => sharded::distribution(&args, &targets[0]).await?,
            Workload::IndexEq => indexes::index_eq(&args, &targets[0]).await?,
            Workload::IndexRange => indexes::index_range(&args, &targets[0]).await?,
            Workload::IndexInsert => indexes::index_insert(&args, &targets[0]).await?,
            Workload::KindInsert => kinds::kind_insert(&args, &targets).await?,
            Workload::GeoNear => search::geo_near(&args, &targets).await?,
            Workload::TextSearch => search::text_search(&args, &targets).await?,
            Workload::CollatedEq => search::collated_eq(&args, &targets).await?,
            Workload::AggGroup => aggregate::agg_group(&args, &targets[0]).await?,
            Workload::AggTopk => aggregate::agg_topk(&args, &targets[0]).await?,
            Workload::AggWindow => aggregate::agg_window(&args, &targets[0]).await?,
            Workload::JsCost => javascript::js_cost(&args, &targets[0]).await?,
            Workload::Unwind => robustness::unwind(&args, &targets[0]).await?,
            Workload::CursorMemory => robustness::cursor_memory(&args, &targets[0]).await?,
            Workload::RuEnforcement => request_units::ru_enforcement(&args, &targets[0]).await?,
            Workload::MovePartition => partition_move::move_partition(&args, &targets[0]).await?,
            Workload::ChangeLatency => changes::change_latency(&args, &targets).await?,
            Workload::TxnSingle | Workload::TxnCross => {
                transactions::run(&args, &targets, w).await?
            }
            _ => {
                let data = dataset(&args, &mut usertable);
                unsharded(&args, &targets, &data, w).await?
            }
        };
        results.extend(outcome.measurements);
        if !outcome.summary.is_empty() {
            summaries.push(String::new());
            summaries.extend(outcome.summary);
        }
    }
    print_memory(args.rss_pid, "end");

    println!();
    println!("summary");
    println!("{}", report::header());
    for m in &results {
        println!("{}", report::row(m));
    }
    if targets.len() > 1 {
        // Runs taken in rounds (partitioned-read) are compared by their
        // workload's own summary, as medians over the rounds.
        let (primary, other): (Vec<Measurement>, Vec<Measurement>) = results
            .into_iter()
            .filter(|m| m.round.is_none())
            .partition(|m| m.target == targets[0].label);
        let lines = report::comparison(&primary, &other);
        if !lines.is_empty() {
            println!();
        }
        for line in lines {
            println!("{line}");
        }
    }
    for line in &summaries {
        println!("{line}");
    }
    Ok(())
}

/// The YCSB data set, built on first use and printed then.
fn dataset(args: &Args, slot: &mut Option<Arc<Dataset>>) -> Arc<Dataset> {
    let data = slot.get_or_insert_with(|| {
        let started = Instant::now();
        let mut data = Dataset::generate(
            args.docs,
            args.doc_size,
            args.batch,
            args.tenants,
            args.seed,
        );
        data.scan_limit = args.scan_limit;
        println!(
            "data set: {} documents of {} bytes ({} batches of {}), built in {:.2}s",
            data.docs,
            data.doc_bytes,
            data.batch_count(),
            args.batch,
            started.elapsed().as_secs_f64()
        );
        Arc::new(data)
    });
    Arc::clone(data)
}

/// One of the YCSB workloads on `--collection`: each concurrency level on
/// each server in turn.
async fn unsharded(
    args: &Args,
    targets: &[Target],
    data: &Arc<Dataset>,
    w: Workload,
) -> Result<Outcome, String> {
    let mut measurements = Vec::new();
    let watched = args.watchers > 0 && w.takes_watchers();
    for (level, &conc) in args.concurrency.iter().enumerate() {
        for (index, target) in targets.iter().enumerate() {
            let mut watchers = None;
            let m = if w == Workload::Load {
                let timeout = Duration::from_secs_f64(args.load_timeout);
                let n = args.usertable_partitions;
                let mut keep = if n > 0 && !args.no_drop {
                    let key = if args.tenants > 0 { "tenant" } else { "_id" };
                    sharded::shard_collection(target, key, n).await?;
                    true
                } else {
                    args.no_drop
                };
                if watched {
                    // Dropping a watched collection ends its streams: drop
                    // it first, then open them.
                    if !keep {
                        target.docs.drop().await.map_err(|e| {
                            format!("{}: dropping {}: {e}", target.label, target.namespace())
                        })?;
                        keep = true;
                    }
                    watchers = changes::Watchers::start(target, args.watchers, (w, conc)).await;
                }
                let mut m = workload::load(target, data, conc, keep, timeout)
                    .await
                    .map_err(|e| format!("{}: {}: {e}", target.label, w.name()))?;
                if args.tenant_index && args.tenants > 0 {
                    let index = IndexModel::builder()
                        .keys(doc! {"tenant": 1, "_id": 1})
                        .build();
                    target.docs.create_index(index).await.map_err(|e| {
                        format!("{}: creating {{tenant: 1, _id: 1}}: {e}", target.label)
                    })?;
                }
                m.partitions = (n > 0).then_some(n);
                m
            } else {
                let seed = args.seed ^ ((level as u64) << 32) ^ (w as u64) << 40;
                let costs = args.costs_for(index);
                let mut timing = args.timing();
                if watched {
                    // The streams open after the warm-up, so that they
                    // start with no backlog.
                    let (warmup, duration) = timing;
                    if !warmup.is_zero() {
                        workload::timed(target, data, w, conc, warmup, seed ^ 1)
                            .await
                            .map_err(|e| format!("{}: warm-up: {e}", target.label))?;
                    }
                    timing = (Duration::ZERO, duration);
                    watchers = changes::Watchers::start(target, args.watchers, (w, conc)).await;
                }
                let mut m =
                    workload::warmed_up(target, data, (w, conc), timing, seed, costs).await?;
                m.partitions = (args.usertable_partitions > 0).then_some(args.usertable_partitions);
                m
            };
            report::print_measurement(&m);
            if let Some(watchers) = watchers {
                watchers.finish(&m).await;
            }
            if w == Workload::Load && index == 0 {
                print_memory(args.rss_pid, &format!("load conc={conc}"));
            }
            measurements.push(m);
        }
    }
    Ok(Outcome {
        measurements,
        summary: Vec::new(),
    })
}

async fn connect(args: &Args, label: &str, uri: &str, pool: usize) -> Result<Target, String> {
    let mut options = args
        .client_options(uri)
        .await
        .map_err(|e| format!("{label}: {e}"))?;
    // Each change stream holds a connection while it waits for events.
    let want = u32::try_from(pool.saturating_add(args.watchers))
        .unwrap_or(u32::MAX)
        .saturating_add(2);
    options.max_pool_size = Some(options.max_pool_size.unwrap_or(0).max(want));
    options
        .app_name
        .get_or_insert_with(|| "shardgate-bench".into());
    options
        .server_selection_timeout
        .get_or_insert(Duration::from_secs(5));
    let client = Client::with_options(options).map_err(|e| format!("{label}: {e}"))?;
    let db = client.database(&args.db);
    db.run_command(mongodb::bson::doc! { "ping": 1 })
        .await
        .map_err(|e| format!("{label}: cannot reach {uri}: {e}"))?;
    if args.compressors.is_empty() {
        println!("{label}: {uri}");
    } else {
        println!(
            "{label}: {uri} (compressors: {})",
            args.compressors.join(",")
        );
    }
    Ok(Target {
        label: label.to_owned(),
        docs: db.collection::<Document>(&args.collection),
        raw: db.collection::<RawDocumentBuf>(&args.collection),
        db: args.db.clone(),
        client,
    })
}

fn print_memory(pid: Option<u32>, when: &str) {
    let Some(pid) = pid else { return };
    match report::read_memory(pid) {
        Ok(mem) => println!(
            "RSS pid={pid} after={} vm_rss_kib={} vm_hwm_kib={}   ({:.1} MiB resident, {:.1} MiB peak)",
            when.replace(' ', "_"),
            mem.rss_kib,
            mem.hwm_kib,
            mem.rss_kib as f64 / 1024.0,
            mem.hwm_kib as f64 / 1024.0,
        ),
        Err(e) => println!("RSS pid={pid} after={}: {e}", when.replace(' ', "_")),
    }
}
