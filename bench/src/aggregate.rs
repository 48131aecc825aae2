//! Aggregation workloads, on the server under test only (a comparison
//! server such as the ceiling stores nothing to aggregate). Both use the
//! same `--agg-docs` documents, loaded with parallel `insertMany` into two
//! collections: `<db>.agg_sharded`, sharded on `{k: "hashed"}` over
//! `--agg-partitions` partitions, and `<db>.agg_plain`, not sharded. A
//! workload reuses them when they already hold exactly these documents
//! (so `agg-topk` after `agg-group` loads nothing), and loads them
//! otherwise.
//!
//! * `agg-group`: `aggregate([{$match: {v: {$gte: 0}}}, {$group: {_id:
//!   "$cat", n: {$sum: 1}, total: {$sum: "$v"}}}])`, which the server splits
//!   into a partial group per partition plus a final group at the router.
//! * `agg-topk`: `aggregate([{$sort: {v: -1}}, {$limit: 10}])`.
//! * `agg-window`: `aggregate([{$setWindowFields: {partitionBy: "$cat",
//!   sortBy: {v: 1}, output: {running: {$sum: "$v", window: {documents:
//!   ["unbounded", "current"]}}}}}, {$group: {_id: "$cat", n: {$sum: 1},
//!   total: {$max: "$running"}}}], {allowDiskUse: true})`: every document
//!   through a window, the running sum's last value checked against the
//!   group's total.
//!
//! Each is timed at concurrency 1 and every `--concurrency` level, on the
//! sharded and then the unsharded collection, with the server's CPU use
//! (`--server-pid`, or `--rss-pid`) during each run, and sums up with the
//! sharded / unsharded ratio. Every answer is checked against the
//! documents, which are computed from the seed and their number: a wrong
//! one counts as an error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::Collection;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::dataset::{mix, Generated};
use crate::report::{self, CpuUse, Measurement, Outcome};
use crate::sharded;
use crate::workload::{self, Deadlines, Target, TaskStats, Workload};
use crate::Args;

/// The collection sharded on `{k: "hashed"}`.
pub const SHARDED_COLLECTION: &str = "agg_sharded";
/// The same documents, unsharded.
pub const PLAIN_COLLECTION: &str = "agg_plain";
/// `cat` takes the values `0..CATS`.
pub const CATS: i32 = 100;
/// Results of `agg-topk`.
pub const TOP_K: usize = 10;
/// `v` is uniform in `0..VALUE_RANGE`, so ties at the top are rare and
/// the sums per `cat` need 64 bits.
const VALUE_RANGE: i32 = 1 << 30;
/// Approximate encoded size of a document.
const DOC_BYTES: usize = 150;
/// Bytes of a document outside its `pad` string: header and terminator 5,
/// `_id` 13, `k` 11, `cat` 9, `v` 7, and `pad`'s type, name, length and
/// terminator 10.
const FIXED_BYTES: usize = 5 + 13 + 11 + 9 + 7 + 10;

/// `{_id: i, k, cat, v, pad}` for `i` in `0..docs`: `k` (the shard key) a
/// random 63-bit integer, so distinct but for chance, `cat` in `0..100`,
/// `v` random in `0..2^30`, `pad` filling the document to about 150 bytes.
/// Every value is a hash of the seed and `i`, so batches can be built on
/// their own and every answer is known in advance.
pub struct AggData {
    pub docs: u64,
    batch: usize,
    salt: u64,
    text: Vec<u8>,
    /// Documents per `cat` value.
    counts: Vec<i64>,
    /// Sum of `v` per `cat` value.
    totals: Vec<i64>,
    /// The `TOP_K` largest `v`, descending.
    top: Vec<i32>,
}

impl AggData {
    pub fn new(docs: u64, batch: usize, seed: u64) -> AggData {
        let mut data = AggData {
            docs,
            batch: batch.max(1),
            salt: mix(seed ^ 0xa66_0000),
            text: Vec::new(),
            counts: vec![0; CATS as usize],
            totals: vec![0; CATS as usize],
            top: Vec::new(),
        };
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let mut rng = SmallRng::seed_from_u64(data.salt);
        data.text = (0..16 * 1024)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())])
            .collect();
        let mut values = Vec::with_capacity(usize::try_from(docs).unwrap_or(0));
        for i in 0..docs {
            let (cat, v) = (data.cat(i) as usize, data.v(i));
            data.counts[cat] += 1;
            data.totals[cat] += i64::from(v);
            values.push(v);
        }
        values.sort_unstable_by(|a, b| b.cmp(a));
        values.truncate(TOP_K);
        data.top = values;
        data
    }

    fn value(&self, i: u64, field: u64) -> u64 {
        mix(self
            .salt
            .wrapping_add(i.wrapping_mul(8).wrapping_add(field)))
    }

    fn k(&self, i: u64) -> i64 {
        (self.value(i, 0) >> 1) as i64
    }

    fn cat(&self, i: u64) -> i32 {
        (self.value(i, 1) % CATS as u64) as i32
    }

    fn v(&self, i: u64) -> i32 {
        (self.value(i, 2) % VALUE_RANGE as u64) as i32
    }

    fn pad(&self, i: u64) -> String {
        let len = DOC_BYTES - FIXED_BYTES;
        let start = (self.value(i, 3) % (self.text.len() - len) as u64) as usize;
        // The pool is ASCII, so any cut is a valid string.
        String::from_utf8_lossy(&self.text[start..start + len]).into_owned()
    }

    pub fn document(&self, i: u64) -> Document {
        doc! {
            "_id": i as i64,
            "k": self.k(i),
            "cat": self.cat(i),
            "v": self.v(i),
            "pad": self.pad(i),
        }
    }
}

impl Generated for AggData {
    fn docs(&self) -> u64 {
        self.docs
    }

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn document(&self, i: u64) -> Document {
        AggData::document(self, i)
    }
}

/// The pipeline a workload repeats.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Query {
    Group,
    TopK,
    Window,
}

impl Query {
    fn of(w: Workload) -> Query {
        match w {
            Workload::AggTopk => Query::TopK,
            Workload::AggWindow => Query::Window,
            _ => Query::Group,
        }
    }

    fn pipeline(self) -> Vec<Document> {
        match self {
            Query::Group => vec![
                doc! { "$match": { "v": { "$gte": 0 } } },
                doc! { "$group": {
                    "_id": "$cat",
                    "n": { "$sum": 1 },
                    "total": { "$sum": "$v" },
                } },
            ],
            Query::TopK => vec![
                doc! { "$sort": { "v": -1 } },
                doc! { "$limit": TOP_K as i64 },
            ],
            Query::Window => vec![
                doc! { "$setWindowFields": {
                    "partitionBy": "$cat",
                    "sortBy": { "v": 1 },
                    "output": { "running": {
                        "$sum": "$v",
                        "window": { "documents": ["unbounded", "current"] },
                    } },
                } },
                doc! { "$group": {
                    "_id": "$cat",
                    "n": { "$sum": 1 },
                    "total": { "$max": "$running" },
                } },
            ],
        }
    }

    fn text(self) -> &'static str {
        match self {
            Query::Group => {
                "aggregate([{$match: {v: {$gte: 0}}}, {$group: {_id: \"$cat\", n: {$sum: 1}, total: {$sum: \"$v\"}}}])"
            }
            Query::TopK => "aggregate([{$sort: {v: -1}}, {$limit: 10}])",
            Query::Window => {
                "aggregate([{$setWindowFields: {partitionBy: \"$cat\", sortBy: {v: 1}, output: {running: {$sum: \"$v\", window: {documents: [\"unbounded\", \"current\"]}}}}}, {$group: {_id: \"$cat\", n: {$sum: 1}, total: {$max: \"$running\"}}}])"
            }
        }
    }
}

/// An integer from a reply, whichever numeric type it came as.
fn as_i64(value: &Bson) -> Option<i64> {
    match *value {
        Bson::Int32(n) => Some(i64::from(n)),
        Bson::Int64(n) => Some(n),
        Bson::Double(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => Some(n as i64),
        _ => None,
    }
}

/// Runs the pipeline once and checks the answer.
async fn query(
    coll: &Collection<RawDocumentBuf>,
    data: &AggData,
    q: Query,
) -> Result<bool, String> {
    let cursor = coll
        .aggregate(q.pipeline())
        .allow_disk_use(q == Query::Window)
        .await
        .map_err(|e| e.to_string())?;
    let docs: Vec<Document> = cursor.try_collect().await.map_err(|e| e.to_string())?;
    match q {
        // Every `v` is non-negative, so the largest running sum of a
        // `cat` is its total.
        Query::Group | Query::Window => check_group(data, &docs),
        Query::TopK => check_topk(data, &docs),
    }
    .map_err(|e| format!("wrong answer: {e}"))?;
    Ok(true)
}

/// 100 groups, one per `cat`, each with its count and sum of `v`.
fn check_group(data: &AggData, docs: &[Document]) -> Result<(), String> {
    if docs.len() != CATS as usize {
        return Err(format!("{} groups, expected {CATS}", docs.len()));
    }
    let mut seen = vec![false; CATS as usize];
    let mut sum = 0_i64;
    for d in docs {
        let cat = d
            .get("_id")
            .and_then(as_i64)
            .filter(|c| (0..i64::from(CATS)).contains(c))
            .ok_or_else(|| format!("a group has _id {:?}, not a cat value", d.get("_id")))?
            as usize;
        if std::mem::replace(&mut seen[cat], true) {
            return Err(format!("cat {cat} appears in two groups"));
        }
        let n = d
            .get("n")
            .and_then(as_i64)
            .ok_or_else(|| format!("group {cat} has n {:?}", d.get("n")))?;
        let total = d
            .get("total")
            .and_then(as_i64)
            .ok_or_else(|| format!("group {cat} has total {:?}", d.get("total")))?;
        if n != data.counts[cat] || total != data.totals[cat] {
            return Err(format!(
                "group {cat}: n={n} total={total}, expected n={} total={}",
                data.counts[cat], data.totals[cat]
            ));
        }
        sum += n;
    }
    if u64::try_from(sum).ok() != Some(data.docs) {
        return Err(format!("counts sum to {sum}, expected {}", data.docs));
    }
    Ok(())
}

/// The `TOP_K` documents with the largest `v`, in descending order, each
/// exactly as loaded.
fn check_topk(data: &AggData, docs: &[Document]) -> Result<(), String> {
    let vs = docs
        .iter()
        .map(|d| d.get_i32("v"))
        .collect::<Result<Vec<i32>, _>>()
        .map_err(|e| format!("a result has no int `v`: {e}"))?;
    if vs != data.top {
        return Err(format!("v values {vs:?}, expected {:?}", data.top));
    }
    for d in docs {
        let id = d
            .get("_id")
            .and_then(as_i64)
            .and_then(|i| u64::try_from(i).ok())
            .filter(|&i| i < data.docs)
            .ok_or_else(|| format!("a result has _id {:?}", d.get("_id")))?;
        if *d != data.document(id) {
            return Err(format!("result {id} differs from the document loaded"));
        }
    }
    Ok(())
}

/// Whether `target`'s collection already holds exactly `data`, sharded
/// over `partitions` partitions or not sharded (`None`): the same count,
/// the first, middle and last documents as generated, and `collStats`
/// agreeing on the sharding. Any error reading it counts as no.
async fn holds(target: &Target, data: &AggData, partitions: Option<u32>) -> bool {
    let Ok(count) = target.docs.estimated_document_count().await else {
        return false;
    };
    if count != data.docs {
        return false;
    }
    for i in [0, data.docs / 2, data.docs - 1] {
        match target.docs.find_one(doc! { "_id": i as i64 }).await {
            Ok(Some(d)) if d == data.document(i) => {}
            _ => return false,
        }
    }
    let Ok(stats) = target
        .client
        .database(&target.db)
        .run_command(doc! { "collStats": target.docs.name() })
        .await
    else {
        return false;
    };
    let is_sharded = stats.get_bool("sharded").unwrap_or(false);
    let chunks = stats.get("nchunks").and_then(as_i64);
    match partitions {
        Some(n) => is_sharded && chunks.is_none_or(|c| c == i64::from(n)),
        None => !is_sharded,
    }
}

/// Makes `target`'s collection hold `data`: reused when it does already,
/// else dropped (and sharded on `{k: "hashed"}` when `partitions` is
/// given) and loaded with parallel `insertMany`, printing a `SETUP` line.
/// A failed batch or a load cut short is an error.
async fn prepare(
    args: &Args,
    target: &Target,
    data: &Arc<AggData>,
    partitions: Option<u32>,
    w: Workload,
) -> Result<(), String> {
    let ns = target.namespace();
    if holds(target, data, partitions).await {
        println!(
            "{}: {ns} already holds these {} documents; reusing it",
            w.name(),
            data.docs
        );
        return Ok(());
    }
    match partitions {
        Some(n) => sharded::shard_collection(target, "k", n).await?,
        None => target
            .docs
            .drop()
            .await
            .map_err(|e| format!("{}: dropping {ns}: {e}", target.label))?,
    }
    let (loaders, timeout) = args.setup_load();
    let loaders = loaders.max(4);
    let m = workload::load(target, data, loaders, true, timeout)
        .await
        .map_err(|e| format!("{}: loading {ns}: {e}", target.label))?;
    println!(
        "SETUP target={} workload={} ns={ns} sharded={} partitions={} docs={} secs={:.3} docs_per_sec={:.1} conc={loaders}",
        target.label,
        w.name(),
        report::yes_no(partitions.is_some()),
        partitions.map_or_else(|| "-".to_owned(), |n| n.to_string()),
        m.ops,
        m.elapsed.as_secs_f64(),
        m.ops_per_sec(),
    );
    if let Some(e) = m.first_error {
        return Err(format!(
            "{}: loading {ns}: {} batches failed, the first with: {e}",
            target.label, m.errors
        ));
    }
    if m.ops < data.docs {
        return Err(format!(
            "{}: loading {ns} stopped at --load-timeout with {} of {} documents",
            target.label, m.ops, data.docs
        ));
    }
    Ok(())
}

/// Runs the pipeline for `duration` with `concurrency` tasks, checking
/// every answer, and measures the CPU process `pid` uses meanwhile.
/// Queries still running `grace` (at least a second) after the run ended
/// are abandoned.
async fn timed(
    target: &Target,
    data: &Arc<AggData>,
    (w, concurrency): (Workload, usize),
    (duration, grace): (Duration, Duration),
    pid: Option<u32>,
) -> Result<Measurement, String> {
    target
        .warm_pool(concurrency)
        .await
        .map_err(|e| format!("{}: {}: {e}", target.label, w.name()))?;
    let q = Query::of(w);
    let cpu_before = pid.map(report::read_cpu_secs);
    let start = Instant::now();
    let stop = start + duration;
    let deadlines = Deadlines {
        stop,
        abandon: stop + grace.max(Duration::from_secs(1)),
    };
    let mut set = JoinSet::new();
    for _ in 0..concurrency {
        let coll = target.raw.clone();
        let data = Arc::clone(data);
        set.spawn(async move {
            let mut stats = TaskStats::new();
            while Instant::now() < deadlines.stop {
                if !stats.attempt(deadlines, query(&coll, &data, q)).await {
                    break;
                }
            }
            stats
        });
    }
    let tasks = workload::join_all(set).await;
    let elapsed = start.elapsed();
    let cpu_after = pid.map(report::read_cpu_secs);

    let mut m = workload::merge(target, w, concurrency, elapsed, tasks);
    if let (Some(pid), Some(before), Some(after)) = (pid, cpu_before, cpu_after) {
        match before.and_then(|b| after.map(|a| a - b)) {
            Ok(secs) => m.server_cpu = Some(CpuUse { pid, secs }),
            Err(e) => println!("CPU pid={pid}: {e}"),
        }
    }
    Ok(m)
}

/// The server's cores for a table cell.
fn cores_text(m: &Measurement) -> String {
    m.server_cores()
        .map_or_else(|| "-".to_owned(), |c| format!("{c:.2}"))
}

/// `report::row` with ops/s to two decimals (these queries run well
/// below one a second), same widths.
fn row(m: &Measurement) -> String {
    format!(
        "{:<12} {:<16} {:>5} {:>5} {:>10} {:>12.2} {:>9} {:>9} {:>9} {:>7} {:>7}",
        m.target,
        m.workload.name(),
        m.partitions
            .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        m.concurrency,
        m.ops,
        m.ops_per_sec(),
        report::human_us(m.p50_us()),
        report::human_us(m.p99_us()),
        report::human_us(m.max_us()),
        m.errors,
        m.misses,
    )
}

/// A run's row and `RESULT` line (with the collection and the server's
/// CPU use), and its first error.
fn print_run(m: &Measurement, collection: &str) {
    println!("{}", row(m));
    // These queries run well below one a second: more digits than
    // `report` gives.
    let line = report::result_line(m).replacen(
        &format!(" ops_per_sec={:.1} ", m.ops_per_sec()),
        &format!(" ops_per_sec={:.3} ", m.ops_per_sec()),
        1,
    );
    let fields = format!(
        "collection={collection} sharded={}",
        report::yes_no(m.partitions.is_some())
    );
    let mut line = match line.find(" conc=") {
        Some(at) => format!("{} {fields}{}", &line[..at], &line[at..]),
        None => format!("{line} {fields}"),
    };
    if let (Some(cpu), Some(cores)) = (&m.server_cpu, m.server_cores()) {
        line.push_str(&format!(
            " server_pid={} server_cpu_secs={:.2} server_cores={cores:.2}",
            cpu.pid, cpu.secs
        ));
    }
    println!("{line}");
    if let Some(e) = &m.first_error {
        println!("  first error ({} in all): {e}", m.errors);
    }
}

/// `agg-group`.
pub async fn agg_group(args: &Args, target: &Target) -> Result<Outcome, String> {
    run(args, target, Workload::AggGroup).await
}

/// `agg-topk`.
pub async fn agg_topk(args: &Args, target: &Target) -> Result<Outcome, String> {
    run(args, target, Workload::AggTopk).await
}

/// `agg-window`.
pub async fn agg_window(args: &Args, target: &Target) -> Result<Outcome, String> {
    run(args, target, Workload::AggWindow).await
}

async fn run(args: &Args, target: &Target, w: Workload) -> Result<Outcome, String> {
    if args.agg_docs == 0 || args.agg_docs > i64::MAX as u64 {
        return Err("--agg-docs must be at least 1".into());
    }
    let n = args.agg_partitions;
    let started = Instant::now();
    let data = Arc::new(AggData::new(args.agg_docs, args.batch, args.seed));
    println!(
        "aggregation data set: {} documents of about {DOC_BYTES} bytes, {CATS} cat values, built in {:.2}s",
        data.docs,
        started.elapsed().as_secs_f64()
    );
    let sharded = target.for_collection(SHARDED_COLLECTION);
    let plain = target.for_collection(PLAIN_COLLECTION);
    prepare(args, &sharded, &data, Some(n), w).await?;
    prepare(args, &plain, &data, None, w).await?;

    let mut levels = args.concurrency.clone();
    levels.push(1);
    levels.sort_unstable();
    levels.dedup();
    let (warmup, duration) = args.timing();
    let pid = args.server_pid();
    let q = Query::of(w);
    let mut measurements = Vec::new();
    let mut pairs = Vec::new();
    for &conc in &levels {
        let mut pair = Vec::new();
        for (t, partitions) in [(&sharded, Some(n)), (&plain, None)] {
            // The warm-up waits as long as a timed run for its last
            // queries: one abandoned would still load the server during
            // the timed run (a query over 1,000,000 documents takes
            // seconds).
            if !warmup.is_zero() {
                timed(t, &data, (w, conc), (warmup, duration), None)
                    .await
                    .map_err(|e| format!("warm-up: {e}"))?;
            }
            let mut m = timed(t, &data, (w, conc), (duration, duration), pid).await?;
            m.partitions = partitions;
            print_run(&m, t.docs.name());
            pair.push(m);
        }
        let (s, p) = (&pair[0], &pair[1]);
        let ratio = (p.ops_per_sec() > 0.0).then(|| s.ops_per_sec() / p.ops_per_sec());
        let ratio_text = ratio.map_or_else(|| "inf".to_owned(), |r| format!("{r:.3}"));
        println!(
            "RESULT target={} workload={}-ratio conc={conc} ratio={ratio_text} sharded_ops_per_sec={:.2} unsharded_ops_per_sec={:.2} sharded_p50_us={} unsharded_p50_us={} sharded_p99_us={} unsharded_p99_us={} sharded_server_cores={} unsharded_server_cores={} partitions={n}",
            target.label,
            w.name(),
            s.ops_per_sec(),
            p.ops_per_sec(),
            s.p50_us(),
            p.p50_us(),
            s.p99_us(),
            p.p99_us(),
            cores_text(s),
            cores_text(p),
        );
        pairs.push(ratio_text);
        measurements.extend(pair);
    }

    let mut summary = vec![
        format!(
            "{}: {} over {} documents, {SHARDED_COLLECTION} sharded on {{k: \"hashed\"}} in {n} partitions vs {PLAIN_COLLECTION} unsharded",
            w.name(),
            q.text(),
            data.docs,
        ),
        format!(
            "{:<5} {:>14} {:>14} {:>9} {:>21} {:>21} {:>13}",
            "conc",
            "sharded ops/s",
            "plain ops/s",
            "ratio",
            "p50 (sharded/plain)",
            "p99 (sharded/plain)",
            "server cores"
        ),
    ];
    for (pair, ratio) in measurements.chunks(2).zip(&pairs) {
        let (s, p) = (&pair[0], &pair[1]);
        summary.push(format!(
            "{:<5} {:>14.2} {:>14.2} {:>9} {:>21} {:>21} {:>13}",
            s.concurrency,
            s.ops_per_sec(),
            p.ops_per_sec(),
            ratio,
            format!(
                "{} / {}",
                report::human_us(s.p50_us()),
                report::human_us(p.p50_us())
            ),
            format!(
                "{} / {}",
                report::human_us(s.p99_us()),
                report::human_us(p.p99_us())
            ),
            format!("{} / {}", cores_text(s), cores_text(p)),
        ));
    }
    // The runs go in this summary, with ops/s to two decimals, rather
    // than in the table of every workload's runs (which rounds them to
    // whole numbers).
    summary.push(String::new());
    summary.push(report::header());
    summary.extend(measurements.iter().map(row));
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Batches;

    #[test]
    fn documents_match_their_answers() {
        let data = AggData::new(5_000, 128, 3);
        let docs: Vec<Document> = (0..data.batch_count())
            .flat_map(|b| data.batch(b).into_owned())
            .collect();
        assert_eq!(docs.len(), 5_000);
        let mut bytes = Vec::new();
        docs[0].to_writer(&mut bytes).expect("encodes");
        assert_eq!(bytes.len(), DOC_BYTES);

        let groups: Vec<Document> = (0..CATS)
            .map(|c| {
                let mine = docs.iter().filter(|d| d.get_i32("cat") == Ok(c));
                let (n, total) = mine.fold((0_i64, 0_i64), |(n, t), d| {
                    (n + 1, t + i64::from(d.get_i32("v").expect("v")))
                });
                doc! { "_id": c, "n": n as i32, "total": total }
            })
            .collect();
        assert_eq!(check_group(&data, &groups), Ok(()));
        assert!(check_group(&data, &groups[1..]).is_err());
        let mut wrong = groups.clone();
        wrong[3].insert("n", 0);
        assert!(check_group(&data, &wrong).is_err());

        let mut sorted = docs.clone();
        sorted.sort_by_key(|d| std::cmp::Reverse(d.get_i32("v").expect("v")));
        sorted.truncate(TOP_K);
        assert_eq!(check_topk(&data, &sorted), Ok(()));
        assert!(check_topk(&data, &sorted[1..]).is_err());
        let mut altered = sorted.clone();
        altered[0].insert("pad", "x");
        assert!(check_topk(&data, &altered).is_err());
    }
}
