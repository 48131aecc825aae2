//! The workloads and the machinery that times them. The three sharded
//! workloads set up their own collections (`sharded`, `fanout`) and time
//! them with the pieces here.
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

use crate::cost::{self, CostGroup};
use crate::dataset::{Batches, Dataset};
use crate::report::Measurement;

/// A workload; the order of the variants is the order they run in.
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
    /// `find({_id: {$gte: k}}).sort({_id: 1}).limit(--scan-limit)`, all
    /// results collected; within one tenant with `--tenants`.
    Scan,
    /// `find` and `$match` + `$group` on `field0`, which no index serves:
    /// documents examined per second of server CPU (`scan_filter`).
    ScanFilter,
    /// `read` against a copy of the data set in a collection sharded on
    /// `{_id: "hashed"}`, once per `--partitions` count.
    PartitionedRead,
    /// `find({f: {$lt: 10}}).sort({score: -1}).limit(50)` on a collection
    /// sharded on another field, so every partition answers; with the
    /// server's CPU use.
    FanoutQuery,
    /// How evenly distinct shard-key values spread over the partitions,
    /// from `collStats`; untimed.
    Distribution,
    /// `find({cat: v})` without, then with, an index on `cat` (`indexes`).
    IndexEq,
    /// `find({score: {$gte: x}}).sort({score: 1}).limit(20)` with an index
    /// on `score`.
    IndexRange,
    /// Insert throughput with 0, 1 and 5 secondary indexes.
    IndexInsert,
    /// Insert throughput into an ordinary, a capped and a time-series
    /// collection (`kinds`).
    KindInsert,
    /// `$near` limit 10 over `--geo-docs` points with a 2dsphere index
    /// (`search`).
    GeoNear,
    /// A two-word `$text` search sorted by score, limit 10 (`search`).
    TextSearch,
    /// An equality lookup through a unique index with a case-insensitive
    /// collation (`search`).
    CollatedEq,
    /// `aggregate([{$match}, {$group: {_id: "$cat"}}])` on a sharded and an
    /// unsharded collection (`aggregate`).
    AggGroup,
    /// `aggregate([{$sort: {v: -1}}, {$limit: 10}])` on the same two.
    AggTopk,
    /// `$setWindowFields` (a running sum of `v` per `cat`) then `$group`,
    /// on the same two.
    AggWindow,
    /// `ping`: the per-request path alone, no storage.
    Ping,
    /// `$unwind` of one document's array of 10,000 to 100,000 elements
    /// (`robustness`).
    Unwind,
    /// Server RSS with hundreds of idle sorted cursors open.
    CursorMemory,
    /// Served RU/s ÷ provisioned under saturating point reads, at
    /// several partition counts (`request_units`).
    RuEnforcement,
    /// A partition moved between two servers under point reads and
    /// updates: the move's duration and the throughput around it
    /// (`partition_move`).
    MovePartition,
    /// `find({})` limited to [`FIND_MANY_DOCS`] documents, every batch
    /// read: replies large enough for wire compression to matter. Last
    /// so that the workloads before it keep their seeds (a seed mixes in
    /// the workload's position).
    FindMany,
    /// `$where` and `$function` against the same queries without
    /// JavaScript, per document (`javascript`). After `find-many` so that
    /// the workloads before it keep their seeds.
    JsCost,
    /// One writer inserting at `--change-rate` while a change stream
    /// receives the inserts: the delivery latency from acknowledgement to
    /// event (`changes`). After `js-cost` so that the workloads before
    /// it keep their seeds.
    ChangeLatency,
    /// Transactions through the driver's convenient API, each two
    /// updates of one account (`acct: k`, the shard key) and a commit
    /// (`transactions`). After `change-latency` so that the workloads
    /// before it keep their seeds.
    TxnSingle,
    /// Transactions moving 1 between two random accounts, so (mostly)
    /// two partitions (`transactions`).
    TxnCross,
}

/// Documents one `find-many` operation reads (fewer when `--docs` is less).
pub const FIND_MANY_DOCS: u64 = 1000;

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Load => "load",
            Workload::Read => "read",
            Workload::Update => "update",
            Workload::Mixed => "mixed",
            Workload::Scan => "scan",
            Workload::ScanFilter => "scan-filter",
            Workload::PartitionedRead => "partitioned-read",
            Workload::FanoutQuery => "fanout-query",
            Workload::Distribution => "distribution",
            Workload::IndexEq => "index-eq",
            Workload::IndexRange => "index-range",
            Workload::IndexInsert => "index-insert",
            Workload::KindInsert => "kind-insert",
            Workload::GeoNear => "geo-near",
            Workload::TextSearch => "text-search",
            Workload::CollatedEq => "collated-eq",
            Workload::AggGroup => "agg-group",
            Workload::AggTopk => "agg-topk",
            Workload::AggWindow => "agg-window",
            Workload::Ping => "ping",
            Workload::Unwind => "unwind",
            Workload::CursorMemory => "cursor-memory",
            Workload::RuEnforcement => "ru-enforcement",
            Workload::MovePartition => "move-partition",
            Workload::FindMany => "find-many",
            Workload::JsCost => "js-cost",
            Workload::ChangeLatency => "change-latency",
            Workload::TxnSingle => "txn-single",
            Workload::TxnCross => "txn-cross",
        }
    }

    /// Whether the workload needs the YCSB `usertable` data set built.
    pub fn uses_usertable(self) -> bool {
        !matches!(
            self,
            Workload::ScanFilter
                | Workload::FanoutQuery
                | Workload::Distribution
                | Workload::IndexEq
                | Workload::IndexRange
                | Workload::IndexInsert
                | Workload::KindInsert
                | Workload::GeoNear
                | Workload::TextSearch
                | Workload::CollatedEq
                | Workload::AggGroup
                | Workload::AggTopk
                | Workload::AggWindow
                | Workload::Ping
                | Workload::Unwind
                | Workload::CursorMemory
                | Workload::RuEnforcement
                | Workload::MovePartition
                | Workload::JsCost
                | Workload::ChangeLatency
                | Workload::TxnSingle
                | Workload::TxnCross
        )
    }

    /// Whether `--watchers` streams are held open during the workload.
    pub fn takes_watchers(self) -> bool {
        matches!(self, Workload::Load | Workload::Update | Workload::Mixed)
    }
}

/// One server under test, and the collection a workload uses on it.
pub struct Target {
    pub label: String,
    pub client: Client,
    pub db: String,
    pub docs: Collection<Document>,
    /// The same collection, read as raw BSON so replies are not parsed into trees.
    pub raw: Collection<RawDocumentBuf>,
}

impl Target {
    /// The same server with `collection` in the same database.
    pub fn for_collection(&self, collection: &str) -> Target {
        let db = self.client.database(&self.db);
        Target {
            label: self.label.clone(),
            client: self.client.clone(),
            db: self.db.clone(),
            docs: db.collection(collection),
            raw: db.collection(collection),
        }
    }

    /// `db.collection`, for messages.
    pub fn namespace(&self) -> String {
        format!("{}.{}", self.db, self.docs.name())
    }

    /// Opens as many pooled connections as the run will use, so that the
    /// timed part measures requests and not connection handshakes.
    pub async fn warm_pool(&self, connections: usize) -> Result<(), mongodb::error::Error> {
        let db = self.client.database(&self.db);
        let pings = (0..connections).map(|_| db.run_command(doc! { "ping": 1 }).into_future());
        futures::future::try_join_all(pings).await.map(|_| ())
    }
}

/// When a timed run stops starting operations, and when it gives up on those
/// still in flight.
#[derive(Clone, Copy)]
pub struct Deadlines {
    pub stop: Instant,
    pub abandon: Instant,
}

impl Deadlines {
    /// Requests still in flight `duration` (at least a second) after the
    /// run ends are dropped, so a run takes at most about twice its duration
    /// however slow the server.
    pub fn after(start: Instant, duration: Duration) -> Deadlines {
        let stop = start + duration;
        Deadlines {
            stop,
            abandon: stop + duration.max(Duration::from_secs(1)),
        }
    }
}

/// What one task saw; merged into a [`Measurement`].
pub struct TaskStats {
    ops: u64,
    errors: u64,
    misses: u64,
    latency_us: Histogram<u64>,
    first_error: Option<String>,
}

impl TaskStats {
    pub fn new() -> TaskStats {
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

    /// Times one operation and records it; `Ok(false)` counts as a miss.
    /// Returns false when the operation was abandoned at
    /// `deadlines.abandon`, after which the task should stop.
    pub async fn attempt<F>(&mut self, deadlines: Deadlines, request: F) -> bool
    where
        F: IntoFuture<Output = Result<bool, String>>,
    {
        let t0 = Instant::now();
        match tokio::time::timeout_at(deadlines.abandon.into(), request).await {
            Ok(outcome) => {
                self.record(t0.elapsed(), 1, outcome);
                true
            }
            Err(_) => {
                let late = deadlines.abandon - deadlines.stop;
                self.record(
                    t0.elapsed(),
                    1,
                    Err(format!(
                        "abandoned: still running {:.1}s after the run ended",
                        late.as_secs_f64()
                    )),
                );
                false
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

/// Adds up what the tasks of one run saw.
pub fn merge(
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
        partitions: None,
        round: None,
        ops: 0,
        elapsed,
        latency_us: new_histogram(),
        errors: 0,
        misses: 0,
        first_error: None,
        server_cpu: None,
        cost: None,
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
pub async fn load<B: Batches>(
    target: &Target,
    data: &Arc<B>,
    concurrency: usize,
    keep: bool,
    timeout: Duration,
) -> Result<Measurement, mongodb::error::Error> {
    if !keep {
        target.docs.drop().await?;
    }
    target.warm_pool(concurrency).await?;
    let batches = data.batch_count();
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
            for index in from..to {
                let t0 = Instant::now();
                if t0 >= deadline {
                    break;
                }
                let batch = data.batch(index);
                let outcome = coll
                    .insert_many(batch.iter())
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

/// [`timed`] for `warmup` untimed (unless zero), then for `duration`,
/// with the CPU the `costs` groups use during the timed part.
pub async fn warmed_up(
    target: &Target,
    data: &Arc<Dataset>,
    (workload, concurrency): (Workload, usize),
    (warmup, duration): (Duration, Duration),
    seed: u64,
    costs: &[CostGroup],
) -> Result<Measurement, String> {
    if !warmup.is_zero() {
        timed(target, data, workload, concurrency, warmup, seed ^ 1)
            .await
            .map_err(|e| format!("{}: warm-up: {e}", target.label))?;
    }
    let before = cost::sample(costs)?;
    let mut m = timed(target, data, workload, concurrency, duration, seed)
        .await
        .map_err(|e| format!("{}: {}: {e}", target.label, workload.name()))?;
    m.cost = cost::between(costs, &before, &cost::sample(costs)?);
    Ok(m)
}

/// Runs a read/update/mixed/scan/find-many/partitioned-read workload for `duration`
/// with `concurrency` tasks, each issuing one operation at a time.
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
    let deadlines = Deadlines::after(start, duration);
    let mut set = JoinSet::new();
    for task in 0..concurrency {
        let coll = target.raw.clone();
        let data = Arc::clone(data);
        let seed = seed.wrapping_mul(1_000_003).wrapping_add(task as u64);
        set.spawn(async move { worker(coll, data, workload, deadlines, seed).await });
    }
    let tasks = join_all(set).await;
    Ok(merge(target, workload, concurrency, start.elapsed(), tasks))
}

async fn worker(
    coll: Collection<RawDocumentBuf>,
    data: Arc<Dataset>,
    workload: Workload,
    deadlines: Deadlines,
    seed: u64,
) -> TaskStats {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut stats = TaskStats::new();
    let keys = data.docs.max(1);
    while Instant::now() < deadlines.stop {
        let key = rng.random_range(0..keys) as i64;
        let op = match workload {
            Workload::Mixed if rng.random_bool(0.5) => Workload::Read,
            Workload::Mixed => Workload::Update,
            Workload::PartitionedRead => Workload::Read,
            other => other,
        };
        let update = (op == Workload::Update).then(|| data.update(&mut rng).clone());
        let tenant = data.tenant(key);
        let point = match &tenant {
            Some(t) => doc! { "_id": key, "tenant": t },
            None => doc! { "_id": key },
        };
        let request = async {
            match (op, update) {
                (Workload::Read, _) => coll.find_one(point).await.map(|d| d.is_some()),
                (Workload::Update, Some(update)) => coll
                    .update_one(point, update)
                    .await
                    .map(|r| r.matched_count > 0),
                (Workload::Scan, _) => scan(&coll, tenant, key, data.scan_limit).await,
                (Workload::FindMany, _) => find_many(&coll, FIND_MANY_DOCS.min(keys)).await,
                (Workload::Ping, _) => coll
                    .client()
                    .database("admin")
                    .run_command(doc! { "ping": 1 })
                    .await
                    .map(|_| true),
                _ => Ok(true),
            }
            .map_err(|e| e.to_string())
        };
        if !stats.attempt(deadlines, request).await {
            break;
        }
    }
    stats
}

/// `find({_id: {$gte: key}})`, within `tenant` when there is one, in
/// `_id` order, `limit` documents at most.
async fn scan(
    coll: &Collection<RawDocumentBuf>,
    tenant: Option<String>,
    key: i64,
    limit: i64,
) -> Result<bool, mongodb::error::Error> {
    let filter = match tenant {
        Some(t) => doc! { "tenant": t, "_id": { "$gte": key } },
        None => doc! { "_id": { "$gte": key } },
    };
    let cursor = coll
        .find(filter)
        .sort(doc! { "_id": 1 })
        .limit(limit)
        .await?;
    let docs: Vec<RawDocumentBuf> = cursor.try_collect().await?;
    Ok(!docs.is_empty())
}

/// Reads `find({})` limited to [`FIND_MANY_DOCS`] to its end, without
/// parsing the documents; a hit when `expected` documents came.
async fn find_many(
    coll: &Collection<RawDocumentBuf>,
    expected: u64,
) -> Result<bool, mongodb::error::Error> {
    let mut cursor = coll.find(doc! {}).limit(FIND_MANY_DOCS as i64).await?;
    let mut n = 0;
    while cursor.advance().await? {
        n += 1;
    }
    Ok(n == expected)
}

/// Waits for every task, keeping a panicked task as an error instead of
/// propagating the panic.
pub async fn join_all<T: 'static>(mut set: JoinSet<T>) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut out = Vec::with_capacity(set.len());
    while let Some(r) = set.join_next().await {
        out.push(r);
    }
    out
}
