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

mod dataset;
mod report;
mod workload;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use mongodb::bson::{Document, RawDocumentBuf};
use mongodb::options::ClientOptions;
use mongodb::Client;

use crate::dataset::Dataset;
use crate::report::Measurement;
use crate::workload::{Target, Workload};

/// YCSB-style benchmark for MongoDB-wire servers (Shardgate, the ceiling, mongod).
#[derive(Parser, Debug)]
#[command(version)]
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
    /// Documents loaded; `_id`s are the integers 0..N.
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
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "load,read,update,mixed,scan"
    )]
    workloads: Vec<Workload>,
    /// Documents per insertMany during load.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Seconds after which load stops starting new batches.
    #[arg(long, default_value_t = 600.0)]
    load_timeout: f64,
    /// Keep the collection before load instead of dropping it.
    #[arg(long)]
    no_drop: bool,
    /// Process whose VmRSS/VmHWM is printed after each load and at the end.
    #[arg(long)]
    rss_pid: Option<u32>,
    /// Tokio worker threads for the client (default: one per CPU).
    #[arg(long)]
    client_threads: Option<usize>,
    /// Seed for keys and payloads; runs with the same seed send the same requests.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

impl Args {
    fn check(&mut self) -> Result<(), String> {
        if self.docs == 0 || self.batch == 0 {
            return Err("--docs and --batch must be at least 1".into());
        }
        if self.concurrency.is_empty() || self.concurrency.contains(&0) {
            return Err("--concurrency levels must be at least 1".into());
        }
        for (name, secs) in [
            ("--duration", self.duration),
            ("--warmup", self.warmup),
            ("--load-timeout", self.load_timeout),
        ] {
            if !(0.0..=86_400.0).contains(&secs) {
                return Err(format!("{name} must be between 0 and 86400 seconds"));
            }
        }
        self.workloads.sort();
        self.workloads.dedup();
        Ok(())
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
    let started = Instant::now();
    let data = Arc::new(Dataset::generate(
        args.docs,
        args.doc_size,
        args.batch,
        args.seed,
    ));
    println!(
        "data set: {} documents of {} bytes ({} batches of {}), built in {:.2}s",
        data.docs,
        data.doc_bytes,
        data.batches.len(),
        args.batch,
        started.elapsed().as_secs_f64()
    );

    let pool = args.concurrency.iter().copied().max().unwrap_or(1);
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

    let duration = Duration::from_secs_f64(args.duration);
    let warmup = Duration::from_secs_f64(args.warmup);
    let mut results: Vec<Measurement> = Vec::new();
    for &w in &args.workloads {
        for (level, &conc) in args.concurrency.iter().enumerate() {
            for (index, target) in targets.iter().enumerate() {
                let m = if w == Workload::Load {
                    let timeout = Duration::from_secs_f64(args.load_timeout);
                    workload::load(target, &data, conc, args.no_drop, timeout).await
                } else {
                    let seed = args.seed ^ ((level as u64) << 32) ^ (w as u64) << 40;
                    if !warmup.is_zero() {
                        workload::timed(target, &data, w, conc, warmup, seed ^ 1)
                            .await
                            .map_err(|e| format!("{}: warm-up: {e}", target.label))?;
                    }
                    workload::timed(target, &data, w, conc, duration, seed).await
                }
                .map_err(|e| format!("{}: {}: {e}", target.label, w.name()))?;
                print_measurement(&m);
                if w == Workload::Load && index == 0 {
                    print_memory(args.rss_pid, &format!("load conc={conc}"));
                }
                results.push(m);
            }
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
        let (primary, other): (Vec<Measurement>, Vec<Measurement>) = results
            .into_iter()
            .partition(|m| m.target == targets[0].label);
        println!();
        for line in report::comparison(&primary, &other) {
            println!("{line}");
        }
    }
    Ok(())
}

async fn connect(args: &Args, label: &str, uri: &str, pool: usize) -> Result<Target, String> {
    let mut options = ClientOptions::parse(uri)
        .await
        .map_err(|e| format!("{label}: bad URI {uri}: {e}"))?;
    let want = u32::try_from(pool).unwrap_or(u32::MAX).saturating_add(2);
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
    println!("{label}: {uri}");
    Ok(Target {
        label: label.to_owned(),
        docs: db.collection::<Document>(&args.collection),
        raw: db.collection::<RawDocumentBuf>(&args.collection),
        db: args.db.clone(),
        client,
    })
}

fn print_measurement(m: &Measurement) {
    println!("{}", report::row(m));
    println!("{}", report::result_line(m));
    if let Some(e) = &m.first_error {
        println!("  first error ({} in all): {e}", m.errors);
    }
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
