//! `move-partition`: how long moving a partition between two PostgreSQL
//! servers takes, and what the move costs the operations running
//! meanwhile. Needs a server with `moveChunk` and at least two shards in
//! `config.shards` (a `--backend postgres` fleet of two servers or more,
//! with `--balancer off` so nothing else moves); bench/run-move.sh sets one
//! up.
//!
//! The collection `moving` is sharded on `{_id: "hashed"}` over two
//! partitions and filled with `--move-docs` documents of `--doc-size`
//! bytes (half in each partition); then `--concurrency` tasks run point
//! reads and updates by `_id`, half each, counted per second of completion
//! time. After `--move-before-secs` the partition starting at MinKey moves
//! to a server it is not on; the load goes on while it moves and
//! `--move-after-secs` after (long enough to include the deletion of the
//! old copy, which the server does a minute after the switch).
//!
//! Reported: each second's operations and errors, the move's duration (the
//! command's `millis`), the documents and bytes moved (the source server's
//! `collStats` figures before and after), and the throughput before, during
//! and after the move; with `--cost`, the cores each group of processes
//! used in each phase.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::Collection;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::cost::{self, CostGroup};
use crate::dataset::WideRows;
use crate::report::{self, Outcome};
use crate::sharded;
use crate::workload::{Target, Workload};
use crate::Args;

/// The collection the workload shards, fills and moves a partition of.
const COLLECTION: &str = "moving";

/// Seconds of timeline kept beyond the planned before and after phases,
/// for the move itself; a move longer than this is still timed, but the
/// seconds past it are not counted.
const MOVE_ALLOWANCE_SECS: u64 = 3 * 3600;

/// Operations, errors and the slowest operation per second of completion
/// time since the load started; shared by the load tasks.
struct Timeline {
    start: Instant,
    ops: Vec<AtomicU64>,
    errors: Vec<AtomicU64>,
    max_us: Vec<AtomicU64>,
    misses: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Timeline {
    fn new(start: Instant, secs: u64) -> Timeline {
        let n = usize::try_from(secs).unwrap_or(usize::MAX / 4);
        let zeros = || (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Timeline {
            start,
            ops: zeros(),
            errors: zeros(),
            max_us: zeros(),
            misses: AtomicU64::new(0),
            first_error: Mutex::new(None),
        }
    }

    /// Counts an operation begun at `began` in the second it ended in.
    fn record(&self, began: Instant, outcome: Result<bool, String>) {
        let now = Instant::now();
        let second = now.duration_since(self.start).as_secs() as usize;
        let Some(ops) = self.ops.get(second) else {
            return;
        };
        let us = u64::try_from(now.duration_since(began).as_micros()).unwrap_or(u64::MAX);
        self.max_us[second].fetch_max(us, Ordering::Relaxed);
        match outcome {
            Ok(hit) => {
                ops.fetch_add(1, Ordering::Relaxed);
                if !hit {
                    self.misses.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => {
                self.errors[second].fetch_add(1, Ordering::Relaxed);
                // A poisoned lock only loses the message, never the count.
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert(e);
                }
            }
        }
    }
}

/// Where a second of the timeline falls against the move's window.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Before,
    /// Partly before or after the move, partly during it: shown, not summed.
    Edge,
    During,
    After,
}

impl Phase {
    /// The phase of second `[s, s + 1)` for a move from `from` to `to`
    /// (seconds since the load started).
    fn of(s: u64, (from, to): (f64, f64)) -> Phase {
        let (start, end) = (s as f64, s as f64 + 1.0);
        if end <= from {
            Phase::Before
        } else if start >= to {
            Phase::After
        } else if start >= from && end <= to {
            Phase::During
        } else {
            Phase::Edge
        }
    }

    fn name(self) -> &'static str {
        match self {
            Phase::Before => "before",
            Phase::Edge => "edge",
            Phase::During => "during",
            Phase::After => "after",
        }
    }
}

/// A collection's documents and bytes per shard, from `collStats`.
type ShardFigures = BTreeMap<String, (u64, u64)>;

/// One chunk of `config.chunks`: its bounds as the server wrote them, and
/// its shard.
struct Chunk {
    min: Document,
    max: Document,
    shard: String,
}

pub async fn move_partition(args: &Args, target: &Target) -> Result<Outcome, String> {
    let t = target.for_collection(COLLECTION);
    let ns = t.namespace();
    let shards = shard_names(&t).await?;
    if shards.len() < 2 {
        return Err(format!(
            "{}: move-partition needs at least two shards, config.shards lists {shards:?}",
            t.label
        ));
    }
    sharded::shard_collection(&t, "_id", 2).await?;
    let data = Arc::new(WideRows::new(
        args.move_docs,
        args.doc_size,
        args.batch,
        args.seed,
    ));
    let w = Workload::MovePartition;
    sharded::fill(&t, &data, args.setup_load(), (w, 2)).await?;

    let chunks = chunks(&t).await?;
    let Some(chunk) = chunks.first() else {
        return Err(format!("{}: config.chunks lists no chunk of {ns}", t.label));
    };
    let Some(to) = shards.iter().find(|s| **s != chunk.shard).cloned() else {
        return Err(format!(
            "{}: no shard other than {} to move to",
            t.label, chunk.shard
        ));
    };
    let from = chunk.shard.clone();
    let before_move = shard_figures(&t).await?;
    println!(
        "move-partition: {} documents in {ns}, per shard (docs, bytes): {before_move:?}; moving [{}, {}) from {from} to {to}",
        data.docs, chunk.min, chunk.max
    );
    let settle = Duration::from_secs_f64(args.settle_secs);
    if !settle.is_zero() {
        println!("move-partition: settling for {:.1}s", settle.as_secs_f64());
        tokio::time::sleep(settle).await;
    }

    // The load: `conc` tasks until `stop`.
    let conc = args.max_concurrency();
    t.warm_pool(conc + 1)
        .await
        .map_err(|e| format!("{}: {e}", t.label))?;
    let (before_secs, after_secs) = (args.move_before_secs, args.move_after_secs);
    let planned = before_secs.ceil() as u64 + after_secs.ceil() as u64;
    let start = Instant::now();
    let timeline = Arc::new(Timeline::new(start, planned + MOVE_ALLOWANCE_SECS));
    let stop = Arc::new(AtomicBool::new(false));
    let mut samples = vec![cost::sample(&args.costs)?];
    let mut set = JoinSet::new();
    for task in 0..conc {
        let coll = t.raw.clone();
        let data = Arc::clone(&data);
        let (timeline, stop) = (Arc::clone(&timeline), Arc::clone(&stop));
        let seed = args.seed.wrapping_mul(1_000_003).wrapping_add(task as u64);
        set.spawn(async move { worker(coll, data, timeline, stop, seed).await });
    }

    tokio::time::sleep(Duration::from_secs_f64(before_secs)).await;
    samples.push(cost::sample(&args.costs)?);
    let move_from = start.elapsed().as_secs_f64();
    let command = doc! {
        "moveChunk": &ns,
        "bounds": [chunk.min.clone(), chunk.max.clone()],
        "to": &to,
    };
    let reply = t.client.database("admin").run_command(command).await;
    let move_to = start.elapsed().as_secs_f64();
    samples.push(cost::sample(&args.costs)?);
    let millis = match &reply {
        Ok(r) => r
            .get("millis")
            .and_then(Bson::as_i64)
            .unwrap_or(((move_to - move_from) * 1000.0) as i64),
        Err(_) => 0,
    };
    if reply.is_ok() {
        tokio::time::sleep(Duration::from_secs_f64(after_secs)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let end = start.elapsed().as_secs_f64();
    while let Some(r) = set.join_next().await {
        r.map_err(|e| format!("{}: a load task failed: {e}", t.label))?;
    }
    samples.push(cost::sample(&args.costs)?);
    if let Err(e) = reply {
        return Err(format!(
            "{}: moveChunk [{}, {}) of {ns} from {from} to {to} failed after {:.1}s: {e}",
            t.label,
            chunk.min,
            chunk.max,
            move_to - move_from
        ));
    }
    let after_move = shard_figures(&t).await?;

    // Per second, then the phases.
    let window = (move_from, move_to);
    let seconds = (end.floor() as usize).min(timeline.ops.len());
    let mut phases: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut errors = 0;
    for s in 0..seconds {
        let phase = Phase::of(s as u64, window);
        let ops = timeline.ops[s].load(Ordering::Relaxed);
        let errs = timeline.errors[s].load(Ordering::Relaxed);
        errors += errs;
        let max_ms = timeline.max_us[s].load(Ordering::Relaxed) as f64 / 1000.0;
        println!(
            "SECOND target={} t={s} phase={} ops={ops} errors={errs} max_ms={max_ms:.1}",
            t.label,
            phase.name()
        );
        phases.entry(phase.name()).or_default().push(ops as f64);
    }

    let (src_before, src_after) = (
        before_move.get(&from).copied().unwrap_or((0, 0)),
        after_move.get(&from).copied().unwrap_or((0, 0)),
    );
    let moved_docs = src_before.0.saturating_sub(src_after.0);
    let moved_bytes = src_before.1.saturating_sub(src_after.1);
    let secs = millis as f64 / 1000.0;
    let mb = moved_bytes as f64 / 1e6;
    let mb_per_sec = if secs > 0.0 { mb / secs } else { 0.0 };
    let counted: u64 = after_move.values().map(|(c, _)| c).sum();
    let misses = timeline.misses.load(Ordering::Relaxed);

    let stat = |phase: &str| {
        let v = phases.get(phase).map(Vec::as_slice).unwrap_or(&[]);
        let median = report::median(v).unwrap_or(0.0);
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let mean = if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        };
        (v.len(), median, if v.is_empty() { 0.0 } else { min }, mean)
    };
    let (b, d, a) = (stat("before"), stat("during"), stat("after"));
    let ratio = |x: f64| if b.1 > 0.0 { x / b.1 } else { 0.0 };
    // The slowest second that overlaps the move at all, edges included:
    // the dip of a move shorter than two seconds.
    let lowest = ["during", "edge"]
        .iter()
        .filter_map(|p| phases.get(p))
        .flatten()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let lowest = if lowest.is_finite() { lowest } else { 0.0 };
    let mut summary = vec![
        format!(
            "move-partition: {} documents of about {} bytes in {ns}, 2 partitions; {conc} tasks of point reads and updates by _id, half each",
            data.docs, args.doc_size
        ),
        format!(
            "  moved [{}, {}) from {from} to {to}: {millis} ms (the command's millis), {moved_docs} documents, {mb:.1} MB of documents (collStats size), {mb_per_sec:.1} MB/s",
            chunk.min, chunk.max
        ),
        format!(
            "  ops/s per second: before ({} s) median {:.0} min {:.0}; during ({} whole s) median {:.0} ({:.0}% of before) min {:.0} ({:.0}%) mean {:.0}; lowest second touching the move {lowest:.0} ({:.0}%); after ({} s) median {:.0} min {:.0}",
            b.0, b.1, b.2, d.0, d.1, 100.0 * ratio(d.1), d.2, 100.0 * ratio(d.2), d.3, 100.0 * ratio(lowest), a.0, a.1, a.2
        ),
        format!(
            "  errors {errors}, reads or updates that found no document {misses}; documents counted after the move {counted} of {}",
            data.docs
        ),
    ];
    if let Ok(Some(e)) = timeline.first_error.lock().map(|e| e.clone()) {
        summary.push(format!("  first error: {e}"));
    }
    summary.extend(phase_cpu(
        &args.costs,
        &samples,
        [move_from, move_to - move_from, end - move_to],
    ));
    let machine = format!(
        "MOVE target={} ns={ns} docs={} from={from} to={to} millis={millis} moved_docs={moved_docs} moved_bytes={moved_bytes} mb_per_sec={mb_per_sec:.2} before_median={:.1} before_min={:.1} during_secs={} during_median={:.1} during_min={:.1} during_mean={:.1} lowest={lowest:.1} after_median={:.1} after_min={:.1} errors={errors} misses={misses} counted={counted}",
        t.label, data.docs, b.1, b.2, d.0, d.1, d.2, d.3, a.1, a.2
    );
    for line in &summary {
        println!("{line}");
    }
    println!("{machine}");
    t.docs
        .drop()
        .await
        .map_err(|e| format!("{}: dropping {ns}: {e}", t.label))?;
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}

/// Point reads and updates by `_id`, half each, until `stop`.
async fn worker(
    coll: Collection<RawDocumentBuf>,
    data: Arc<WideRows>,
    timeline: Arc<Timeline>,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let keys = data.docs.max(1);
    while !stop.load(Ordering::Relaxed) {
        let key = rng.random_range(0..keys) as i64;
        let began = Instant::now();
        let outcome = if rng.random_bool(0.5) {
            coll.find_one(doc! { "_id": key })
                .await
                .map(|d| d.is_some())
        } else {
            coll.update_one(doc! { "_id": key }, data.update(&mut rng))
                .await
                .map(|r| r.matched_count > 0)
        };
        timeline.record(began, outcome.map_err(|e| e.to_string()));
    }
}

/// Cores each `--cost` group used before, during and after the move
/// (CPU seconds over wall seconds), from the samples taken at the
/// boundaries.
fn phase_cpu(groups: &[CostGroup], samples: &[cost::Sample], secs: [f64; 3]) -> Vec<String> {
    let mut parts = Vec::new();
    for (i, name) in ["before", "during", "after"].iter().enumerate() {
        let (Some(a), Some(b)) = (samples.get(i), samples.get(i + 1)) else {
            continue;
        };
        let Some(used) = cost::between(groups, a, b) else {
            continue;
        };
        let cores = used
            .groups
            .iter()
            .map(|(g, cpu)| format!("{g} {:.2}", cpu / secs[i].max(1e-9)))
            .collect::<Vec<_>>()
            .join(", ");
        parts.push(format!("{name}: {cores}"));
    }
    if parts.is_empty() {
        return Vec::new();
    }
    vec![format!("  cores used: {}", parts.join("; "))]
}

/// The shard names `config.shards` lists, in its order.
async fn shard_names(t: &Target) -> Result<Vec<String>, String> {
    let found: Vec<Document> = t
        .client
        .database("config")
        .collection::<Document>("shards")
        .find(doc! {})
        .await
        .map_err(|e| format!("{}: reading config.shards: {e}", t.label))?
        .try_collect()
        .await
        .map_err(|e| format!("{}: reading config.shards: {e}", t.label))?;
    Ok(found
        .iter()
        .filter_map(|s| s.get_str("_id").ok().map(str::to_owned))
        .collect())
}

/// The collection's chunks from `config.chunks`, in the order of their
/// lower bound (MinKey first).
async fn chunks(t: &Target) -> Result<Vec<Chunk>, String> {
    let ns = t.namespace();
    let config = t.client.database("config");
    let fail = |e: mongodb::error::Error| format!("{}: reading the chunks of {ns}: {e}", t.label);
    let entry = config
        .collection::<Document>("collections")
        .find_one(doc! { "_id": &ns })
        .await
        .map_err(fail)?
        .ok_or_else(|| format!("{}: {ns} is not in config.collections", t.label))?;
    let uuid = entry
        .get("uuid")
        .cloned()
        .ok_or_else(|| format!("{}: config.collections has no uuid for {ns}", t.label))?;
    let found: Vec<Document> = config
        .collection::<Document>("chunks")
        .find(doc! { "uuid": uuid })
        .await
        .map_err(fail)?
        .try_collect()
        .await
        .map_err(fail)?;
    let mut chunks = found
        .into_iter()
        .map(|c| {
            let bound = |name| {
                c.get_document(name)
                    .cloned()
                    .map_err(|_| format!("{}: a chunk of {ns} without {name}: {c}", t.label))
            };
            Ok(Chunk {
                min: bound("min")?,
                max: bound("max")?,
                shard: c
                    .get_str("shard")
                    .map_err(|_| format!("{}: a chunk of {ns} without shard: {c}", t.label))?
                    .to_owned(),
            })
        })
        .collect::<Result<Vec<Chunk>, String>>()?;
    chunks.sort_by_key(|c| lower_bound(&c.min));
    Ok(chunks)
}

/// A hashed chunk's lower bound as a number: MinKey first.
fn lower_bound(min: &Document) -> i64 {
    match min.iter().next().map(|(_, v)| v) {
        Some(Bson::Int64(h)) => *h,
        Some(Bson::Int32(h)) => i64::from(*h),
        Some(Bson::MaxKey) => i64::MAX,
        _ => i64::MIN,
    }
}

/// Documents and bytes per shard from `collStats`' `shards`.
async fn shard_figures(t: &Target) -> Result<ShardFigures, String> {
    let ns = t.namespace();
    let stats = t
        .client
        .database(&t.db)
        .run_command(doc! { "collStats": COLLECTION })
        .await
        .map_err(|e| format!("{}: collStats {ns}: {e}", t.label))?;
    let shards = stats
        .get_document("shards")
        .map_err(|_| format!("{}: collStats {ns} has no per-shard figures", t.label))?;
    let number = |d: &Document, f: &str| match d.get(f) {
        Some(Bson::Int64(n)) => u64::try_from(*n).unwrap_or(0),
        Some(Bson::Int32(n)) => u64::try_from(*n).unwrap_or(0),
        Some(Bson::Double(n)) if *n >= 0.0 => *n as u64,
        _ => 0,
    };
    Ok(shards
        .iter()
        .filter_map(|(name, f)| {
            let f = f.as_document()?;
            Some((name.clone(), (number(f, "count"), number(f, "size"))))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_fall_into_phases_around_the_move() {
        let window = (10.0, 13.5);
        assert_eq!(Phase::of(8, window), Phase::Before);
        assert_eq!(Phase::of(9, window), Phase::Before);
        assert_eq!(Phase::of(10, window), Phase::During);
        assert_eq!(Phase::of(12, window), Phase::During);
        assert_eq!(Phase::of(13, window), Phase::Edge);
        assert_eq!(Phase::of(14, window), Phase::After);
        // A move shorter than a second leaves only an edge.
        assert_eq!(Phase::of(3, (3.2, 3.7)), Phase::Edge);
    }

    #[test]
    fn operations_count_in_the_second_they_end() {
        let start = Instant::now();
        let t = Timeline::new(start, 4);
        t.record(start, Ok(true));
        t.record(start, Ok(false));
        t.record(start, Err("boom".into()));
        assert_eq!(t.ops[0].load(Ordering::Relaxed), 2);
        assert_eq!(t.errors[0].load(Ordering::Relaxed), 1);
        assert_eq!(t.misses.load(Ordering::Relaxed), 1);
        assert_eq!(t.first_error.lock().expect("lock").as_deref(), Some("boom"));
        // Past the end of the timeline nothing is counted, and nothing fails.
        let late = Timeline::new(start, 0);
        late.record(start, Ok(true));
    }

    #[test]
    fn chunks_sort_from_min_key() {
        assert_eq!(lower_bound(&doc! { "_id": Bson::MinKey }), i64::MIN);
        assert_eq!(lower_bound(&doc! { "_id": 0_i64 }), 0);
        assert!(lower_bound(&doc! { "_id": -5_i64 }) < lower_bound(&doc! { "_id": 0_i64 }));
    }
}
