//! The five workloads and the machinery that times them.
//!
//! Every run shares one driver `Client` per server across `C` tasks; each task
//! owns its random generator and its latency histogram, and the histograms are
//! merged when the run ends, so the hot loop touches no shared state.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use hdrhistogram::Histogram;
use mongodb::bson::{doc, Document, RawDocumentBuf};
use mongodb::{Client, Collection};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::dataset::Dataset;
use crate::report::Measurement;

/// A YCSB-style workload; the order of the variants is the order they run in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Workload {
    /// `insertMany` of the whole data set in batches, keys split across tasks.
    Load,
    /// `find_one({_id: k})` with uniformly random `k`.
    Read,
    /// `update_one({_id: k}, {$set: {fieldN: ..}, $inc: {counter: 1}})`.
    Update,
    /// Half reads, half updates, chosen at random per operation.
    Mixed,
    /// `find({_id: {$gte: k}}).sort({_id: 1}).limit(10)`, all results collected.
    Scan,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Load => "load",
            Workload::Read => "read",
            Workload::Update => "update",
            Workload::Mixed => "mixed",
            Workload::Scan => "scan",
        }
    }
}

/// One server under test.
pub struct Target {
    pub label: String,
    pub client: Client,
    pub db: String,
    pub docs: Collection<Document>,
    /// The same collection, read as raw BSON so replies are not parsed into trees.
    pub raw: Collection<RawDocumentBuf>,
}

impl Target {
    /// Opens as many pooled connections as the run will use, so that the
    /// timed part measures requests and not connection handshakes.
    pub async fn warm_pool(&self, connections: usize) -> Result<(), mongodb::error::Error> {
        let db = self.client.database(&self.db);
        let pings = (0..connections).map(|_| db.run_command(doc! { "ping": 1 }).into_future());
        futures::future::try_join_all(pings).await.map(|_| ())
    }
}

/// What one task saw; merged into a [`Measurement`].
struct TaskStats {
    ops: u64,
    errors: u64,
    misses: u64,
    latency_us: Histogram<u64>,
    first_error: Option<String>,
}

impl TaskStats {
    fn new() -> TaskStats {
        TaskStats {
            ops: 0,
            errors: 0,
            misses: 0,
            latency_us: new_histogram(),
            first_error: None,
        }
    }

    /// `units` is 1 per operation, or the batch size for `insertMany`.
    fn record(&mut self, took: Duration, units: u64, outcome: Result<bool, String>) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.latency_us.saturating_record(us.max(1));
        match outcome {
            Ok(hit) => {
                self.ops += units;
                if !hit {
                    self.misses += 1;
                }
            }
            Err(e) => {
                self.errors += 1;
                if self.first_error.is_none() {
                    self.first_error = Some(e);
                }
            }
        }
    }
}

/// Latencies from 1 µs to an hour at three significant digits.
fn new_histogram() -> Histogram<u64> {
    // Constant bounds that satisfy hdrhistogram's rules (low ≥ 1, high ≥ 2·low,
    // sigfig ≤ 5), so construction cannot fail.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid constant histogram bounds")
}

fn merge(
    target: &Target,
    workload: Workload,
    concurrency: usize,
    elapsed: Duration,
    tasks: Vec<Result<TaskStats, tokio::task::JoinError>>,
) -> Measurement {
    let mut m = Measurement {
        target: target.label.clone(),
        workload,
        concurrency,
        ops: 0,
        elapsed,
        latency_us: new_histogram(),
        errors: 0,
        misses: 0,
        first_error: None,
    };
    for task in tasks {
        match task {
            Ok(t) => {
                m.ops += t.ops;
                m.errors += t.errors;
                m.misses += t.misses;
                // Same bounds on both sides, so adding cannot go out of range.
                let _ = m.latency_us.add(&t.latency_us);
                if m.first_error.is_none() {
                    m.first_error = t.first_error;
                }
            }
            Err(e) => {
                m.errors += 1;
                m.first_error
                    .get_or_insert_with(|| format!("task failed: {e}"));
            }
        }
    }
    m
}

/// Inserts the whole data set with `concurrency` loaders, each taking a
/// contiguous run of batches (so a contiguous range of `_id`s). Drops the
/// collection first unless `keep` is set. Stops starting new batches after
/// `timeout`, and reports what was inserted by then.
pub async fn load(
    target: &Target,
    data: &Arc<Dataset>,
    concurrency: usize,
    keep: bool,
    timeout: Duration,
) -> Result<Measurement, mongodb::error::Error> {
    if !keep {
        target.docs.drop().await?;
    }
    target.warm_pool(concurrency).await?;
    let batches = data.batches.len();
    let start = Instant::now();
    let deadline = start + timeout;
    let mut set = JoinSet::new();
    for loader in 0..concurrency {
        let (from, to) = (
            batches * loader / concurrency,
            batches * (loader + 1) / concurrency,
        );
        let coll = target.docs.clone();
        let data = Arc::clone(data);
        set.spawn(async move {
            let mut stats = TaskStats::new();
            for batch in &data.batches[from..to] {
                let t0 = Instant::now();
                if t0 >= deadline {
                    break;
                }
                let outcome = coll
                    .insert_many(batch)
                    .await
                    .map(|_| true)
                    .map_err(|e| e.to_string());
                stats.record(t0.elapsed(), batch.len() as u64, outcome);
            }
            stats
        });
    }
    let tasks = join_all(set).await;
    Ok(merge(
        target,
        Workload::Load,
        concurrency,
        start.elapsed(),
        tasks,
    ))
}

/// Runs a read/update/mixed/scan workload for `duration` with `concurrency`
/// tasks, each issuing one operation at a time.
pub async fn timed(
    target: &Target,
    data: &Arc<Dataset>,
    workload: Workload,
    concurrency: usize,
    duration: Duration,
    seed: u64,
) -> Result<Measurement, mongodb::error::Error> {
    target.warm_pool(concurrency).await?;
    let start = Instant::now();
    let deadline = start + duration;
    // Requests still in flight this long after the deadline are dropped, so
    // a run takes at most about twice its duration however slow the server.
    let hard_stop = deadline + duration.max(Duration::from_secs(1));
    let mut set = JoinSet::new();
    for task in 0..concurrency {
        let coll = target.raw.clone();
        let data = Arc::clone(data);
        let seed = seed.wrapping_mul(1_000_003).wrapping_add(task as u64);
        set.spawn(async move { worker(coll, data, workload, deadline, hard_stop, seed).await });
    }
    let tasks = join_all(set).await;
    Ok(merge(target, workload, concurrency, start.elapsed(), tasks))
}

async fn worker(
    coll: Collection<RawDocumentBuf>,
    data: Arc<Dataset>,
    workload: Workload,
    deadline: Instant,
    hard_stop: Instant,
    seed: u64,
) -> TaskStats {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut stats = TaskStats::new();
    let keys = data.docs.max(1);
    loop {
        let t0 = Instant::now();
        if t0 >= deadline {
            break;
        }
        let key = rng.random_range(0..keys) as i64;
        let op = match workload {
            Workload::Mixed if rng.random_bool(0.5) => Workload::Read,
            Workload::Mixed => Workload::Update,
            other => other,
        };
        let update = (op == Workload::Update).then(|| data.update(&mut rng).clone());
        let request = async {
            match (op, update) {
                (Workload::Read, _) => coll
                    .find_one(doc! { "_id": key })
                    .await
                    .map(|d| d.is_some()),
                (Workload::Update, Some(update)) => coll
                    .update_one(doc! { "_id": key }, update)
                    .await
                    .map(|r| r.matched_count > 0),
                (Workload::Scan, _) => scan(&coll, key).await,
                _ => Ok(true),
            }
        };
        match tokio::time::timeout_at(hard_stop.into(), request).await {
            Ok(outcome) => stats.record(t0.elapsed(), 1, outcome.map_err(|e| e.to_string())),
            Err(_) => {
                stats.record(
                    t0.elapsed(),
                    1,
                    Err(format!(
                        "abandoned: still running {:.1}s after the run ended",
                        (hard_stop - deadline).as_secs_f64()
                    )),
                );
                break;
            }
        }
    }
    stats
}

async fn scan(coll: &Collection<RawDocumentBuf>, key: i64) -> Result<bool, mongodb::error::Error> {
    let cursor = coll
        .find(doc! { "_id": { "$gte": key } })
        .sort(doc! { "_id": 1 })
        .limit(10)
        .await?;
    let docs: Vec<RawDocumentBuf> = cursor.try_collect().await?;
    Ok(!docs.is_empty())
}

/// Waits for every task, keeping a panicked task as an error instead of
/// propagating the panic.
async fn join_all<T: 'static>(mut set: JoinSet<T>) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut out = Vec::with_capacity(set.len());
    while let Some(r) = set.join_next().await {
        out.push(r);
    }
    out
}
