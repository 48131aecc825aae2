//! Secondary-index workloads, each on the server under test only (a
//! comparison server such as the ceiling stores nothing to index):
//!
//! * `index-eq`: `--index-docs` documents in `<db>.indexed` with `cat`
//!   taking `--index-cats` values; `find({cat: v})` (all results collected)
//!   timed without an index, then `createIndexes {cat: 1}` (its build time
//!   reported), then the same query with it, at concurrency 1 and each
//!   `--concurrency` level. Sums up with indexed / unindexed ops/s.
//! * `index-range`: on the same collection (reused when it already holds
//!   the same documents, loaded otherwise) with `{score: 1}`,
//!   `find({score: {$gte: x}}).sort({score: 1}).limit(20)` for random `x`.
//! * `index-insert`: `--index-insert-docs` documents inserted in batches of
//!   `--index-batch` into a fresh `<db>.idx_insert` carrying 0, 1 and 5
//!   (`--index-counts`) single-field secondary indexes, at each
//!   `--concurrency` level as `load` does.
//!
//! Every answer is checked against the documents, which are computed from
//! the seed and their number, so an index that returns too few or too
//! many documents shows as errors, not as speed.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::error::ErrorKind;
use mongodb::Collection;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::dataset::{mix, Batches, Generated};
use crate::report::{self, Measurement, Outcome};
use crate::workload::{self, Deadlines, Target, TaskStats, Workload};
use crate::Args;

/// The collection `index-eq` and `index-range` share.
const QUERY_COLLECTION: &str = "indexed";
/// The collection `index-insert` refills for each index count.
const INSERT_COLLECTION: &str = "idx_insert";
/// Results of one `index-range` query at most.
pub const RANGE_LIMIT: usize = 20;
/// `score`, `a`, `b` and `c` are uniform in `0..VALUE_RANGE`.
const VALUE_RANGE: i32 = 1 << 30;
/// The fields `index-insert` indexes, the first N of them for N indexes.
pub const INSERT_FIELDS: [&str; 5] = ["cat", "score", "a", "b", "c"];
/// Approximate encoded size of a document.
const DOC_BYTES: usize = 200;
/// Bytes of a document outside its `pad` string: header and terminator 5,
/// `_id` 13, `cat` 9, `score` 11, `a`/`b`/`c` 7 each, and `pad`'s type,
/// name, length and terminator 10.
const FIXED_BYTES: usize = 5 + 13 + 9 + 11 + 3 * 7 + 10;
/// MongoDB's error code for a namespace that does not exist.
const NAMESPACE_NOT_FOUND: i32 = 26;

/// `{_id: i, cat, score, a, b, c, pad}` for `i` in `0..docs`: `cat` in
/// `0..cats`, so about `docs / cats` documents share a value, and `score`,
/// `a`, `b`, `c` random in `0..2^30`; `pad` fills the document to about
/// 200 bytes. Every value is a hash of the seed and `i`, so batches can be
/// built on their own and every answer is known in advance.
pub struct IndexData {
    pub docs: u64,
    pub cats: u64,
    batch: usize,
    salt: u64,
    text: Vec<u8>,
    /// Documents per `cat` value.
    cat_counts: Vec<u32>,
    /// Every `score`, ascending.
    sorted_scores: Vec<i32>,
}

impl IndexData {
    pub fn new(docs: u64, cats: u64, batch: usize, seed: u64) -> IndexData {
        let mut data = IndexData {
            docs,
            cats: cats.max(1),
            batch: batch.max(1),
            salt: mix(seed ^ 0x1dec_5000),
            text: Vec::new(),
            cat_counts: Vec::new(),
            sorted_scores: Vec::new(),
        };
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let mut rng = SmallRng::seed_from_u64(data.salt);
        data.text = (0..16 * 1024)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())])
            .collect();
        let mut counts = vec![0_u32; usize::try_from(data.cats).unwrap_or(usize::MAX)];
        let mut scores = Vec::with_capacity(usize::try_from(docs).unwrap_or(0));
        for i in 0..docs {
            counts[data.cat(i) as usize] += 1;
            scores.push(data.field(i, 1));
        }
        scores.sort_unstable();
        data.cat_counts = counts;
        data.sorted_scores = scores;
        data
    }

    fn value(&self, i: u64, field: u64) -> u64 {
        mix(self
            .salt
            .wrapping_add(i.wrapping_mul(8).wrapping_add(field)))
    }

    fn cat(&self, i: u64) -> i32 {
        // Below `cats`, which `check_args` keeps within i32.
        (self.value(i, 0) % self.cats) as i32
    }

    /// `score` (1), `a` (2), `b` (3) or `c` (4), in `0..VALUE_RANGE`.
    fn field(&self, i: u64, field: u64) -> i32 {
        (self.value(i, field) >> 34) as i32
    }

    fn pad(&self, i: u64) -> String {
        let len = DOC_BYTES - FIXED_BYTES;
        let start = (self.value(i, 5) % (self.text.len() - len) as u64) as usize;
        // The pool is ASCII, so any cut is a valid string.
        String::from_utf8_lossy(&self.text[start..start + len]).into_owned()
    }

    pub fn document(&self, i: u64) -> Document {
        doc! {
            "_id": i as i64,
            "cat": self.cat(i),
            "score": self.field(i, 1),
            "a": self.field(i, 2),
            "b": self.field(i, 3),
            "c": self.field(i, 4),
            "pad": self.pad(i),
        }
    }

    /// How many documents `find({cat})` should return.
    pub fn cat_count(&self, cat: i32) -> u32 {
        usize::try_from(cat)
            .ok()
            .and_then(|c| self.cat_counts.get(c))
            .copied()
            .unwrap_or(0)
    }

    /// The scores `find({score: {$gte: x}}).sort({score: 1}).limit(n)`
    /// should return, in order.
    pub fn scores_from(&self, x: i32, n: usize) -> &[i32] {
        let first = self.sorted_scores.partition_point(|&s| s < x);
        let last = (first + n).min(self.sorted_scores.len());
        &self.sorted_scores[first..last]
    }

    /// Batch `index` built in one go, for runs that time the inserts.
    pub fn prebuilt(self) -> Prebuilt {
        let batches = (0..self.batch_count())
            .map(|b| self.batch(b).into_owned())
            .collect();
        Prebuilt {
            docs: self.docs,
            batches,
        }
    }
}

impl Generated for IndexData {
    fn docs(&self) -> u64 {
        self.docs
    }

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn document(&self, i: u64) -> Document {
        IndexData::document(self, i)
    }
}

/// Documents built before a timed load, so the client spends its CPU on
/// sending them.
pub struct Prebuilt {
    docs: u64,
    batches: Vec<Vec<Document>>,
}

impl Batches for Prebuilt {
    fn doc_count(&self) -> u64 {
        self.docs
    }

    fn batch_count(&self) -> usize {
        self.batches.len()
    }

    fn batch(&self, index: usize) -> Cow<'_, [Document]> {
        Cow::Borrowed(&self.batches[index])
    }
}

/// The name MongoDB gives an ascending single-field index.
fn index_name(field: &str) -> String {
    format!("{field}_1")
}

/// Fails on flags the index workloads cannot run with.
fn check_args(args: &Args) -> Result<(), String> {
    if args.index_docs == 0 || args.index_cats == 0 {
        return Err("--index-docs and --index-cats must be at least 1".into());
    }
    if args.index_cats > i32::MAX as u64 {
        return Err("--index-cats must be below 2^31".into());
    }
    if args.index_insert_docs == 0 || args.index_batch == 0 {
        return Err("--index-insert-docs and --index-batch must be at least 1".into());
    }
    if args.index_counts.is_empty() || args.index_counts.iter().any(|&n| n > INSERT_FIELDS.len()) {
        return Err(format!(
            "--index-counts must list counts from 0 to {}",
            INSERT_FIELDS.len()
        ));
    }
    Ok(())
}

/// Concurrency 1 and every `--concurrency` level, ascending.
fn query_levels(args: &Args) -> Vec<usize> {
    let mut levels = args.concurrency.clone();
    levels.push(1);
    levels.sort_unstable();
    levels.dedup();
    levels
}

/// `report::row` with `label` in the workload column, so the runs of one
/// workload with and without an index tell apart.
pub(crate) fn row(m: &Measurement, label: &str) -> String {
    relabel(&report::row(m), m.workload.name(), label)
}

/// Replaces the workload column (after the 12-character target column)
/// of a table row.
fn relabel(row: &str, name: &str, label: &str) -> String {
    let column = format!(" {name:<16} ");
    match row.find(&column) {
        Some(at) => format!("{} {label:<16} {}", &row[..at], &row[at + column.len()..]),
        None => row.to_owned(),
    }
}

/// `report::result_line` with `fields` (`key=value ...`) after the workload.
fn result_line(m: &Measurement, fields: &str) -> String {
    with_fields(&report::result_line(m), fields)
}

/// Puts `fields` before the ` conc=` of a `RESULT` line.
fn with_fields(line: &str, fields: &str) -> String {
    match line.find(" conc=") {
        Some(at) => format!("{} {fields}{}", &line[..at], &line[at..]),
        None => format!("{line} {fields}"),
    }
}

/// Prints a run's labelled row and its `RESULT` line, as
/// `report::print_measurement` does.
pub(crate) fn print_run(m: &Measurement, label: &str, fields: &str) {
    println!("{}", row(m, label));
    println!("{}", result_line(m, fields));
    if let Some(e) = &m.first_error {
        println!("  first error ({} in all): {e}", m.errors);
    }
}

/// The names `listIndexes` gives for `target`'s collection; none when the
/// collection does not exist.
async fn index_names(target: &Target) -> Result<Vec<String>, String> {
    let reply = target
        .client
        .database(&target.db)
        .run_command(doc! { "listIndexes": target.docs.name() })
        .await;
    let reply = match reply {
        Ok(r) => r,
        Err(e) => {
            return match *e.kind {
                ErrorKind::Command(ref c) if c.code == NAMESPACE_NOT_FOUND => Ok(Vec::new()),
                _ => Err(format!(
                    "{}: listIndexes {}: {e}",
                    target.label,
                    target.namespace()
                )),
            }
        }
    };
    let batch = reply
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .map_err(|e| {
            format!(
                "{}: listIndexes {}: no cursor.firstBatch in the reply: {e}",
                target.label,
                target.namespace()
            )
        })?;
    Ok(batch
        .iter()
        .filter_map(Bson::as_document)
        .filter_map(|d| d.get_str("name").ok())
        .map(str::to_owned)
        .collect())
}

/// What building some indexes took, and whether `listIndexes` shows them
/// afterwards (a server may acknowledge `createIndexes` without building).
struct Built {
    secs: f64,
    listed: bool,
    /// The server's `note`, if its reply carried one.
    note: Option<String>,
}

/// `createIndexes` of `{field: 1}` for each of `fields`, timed.
async fn create_indexes(target: &Target, fields: &[&str]) -> Result<Built, String> {
    let names: Vec<String> = fields.iter().map(|f| index_name(f)).collect();
    let specs: Vec<Document> = fields
        .iter()
        .zip(&names)
        .map(|(f, name)| doc! { "key": { *f: 1 }, "name": name })
        .collect();
    let command = doc! { "createIndexes": target.docs.name(), "indexes": specs };
    let started = Instant::now();
    let reply = target
        .client
        .database(&target.db)
        .run_command(command)
        .await
        .map_err(|e| {
            format!(
                "{}: createIndexes {} on {}: {e}; the index workloads need a server that builds secondary indexes",
                target.label,
                names.join(","),
                target.namespace()
            )
        })?;
    let secs = started.elapsed().as_secs_f64();
    let listed_names = index_names(target).await?;
    Ok(Built {
        secs,
        listed: names.iter().all(|n| listed_names.contains(n)),
        note: reply.get_str("note").ok().map(str::to_owned),
    })
}

/// Prints the build's `RESULT` line, and a warning when the server does
/// not list what it acknowledged.
fn print_build(target: &Target, names: &str, docs: u64, built: &Built) {
    println!(
        "RESULT target={} workload=index-build ns={} index={names} docs={docs} secs={:.3} listed={}",
        target.label,
        target.namespace(),
        built.secs,
        report::yes_no(built.listed),
    );
    if !built.listed {
        println!(
            "  warning: createIndexes {names} answered ok but listIndexes does not show it{}; the runs \"with\" it may scan",
            built
                .note
                .as_ref()
                .map_or_else(String::new, |n| format!(" (the server notes: {n})"))
        );
    }
}

/// Drops `target`'s collection (sharding it again over `partitions` on
/// `{_id: "hashed"}` when that is not 0) and loads `data` into it with
/// `(loaders, timeout)`, printing a `SETUP` line. A failed batch or a load cut short
/// is an error: the queries would otherwise find other answers.
pub(crate) async fn fill<B: Batches>(
    target: &Target,
    data: &Arc<B>,
    (loaders, timeout): (usize, Duration),
    w: Workload,
    partitions: u32,
) -> Result<(), String> {
    let ns = target.namespace();
    let docs = data.doc_count();
    let sharded = partitions > 0;
    if sharded {
        crate::sharded::shard_collection(target, "_id", partitions).await?;
    }
    let m = workload::load(target, data, loaders, sharded, timeout)
        .await
        .map_err(|e| format!("{}: loading {ns}: {e}", target.label))?;
    println!(
        "SETUP target={} workload={} ns={ns} docs={} secs={:.3} docs_per_sec={:.1} conc={loaders} partitions={partitions}",
        target.label,
        w.name(),
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
    if m.ops < docs {
        return Err(format!(
            "{}: loading {ns} stopped at --load-timeout with {} of {docs} documents",
            target.label, m.ops
        ));
    }
    Ok(())
}

/// Whether `target`'s collection already holds exactly `data`: the same
/// count, and the first, middle and last documents as generated.
async fn holds(target: &Target, data: &IndexData) -> Result<bool, String> {
    let count = target
        .docs
        .estimated_document_count()
        .await
        .map_err(|e| format!("{}: counting {}: {e}", target.label, target.namespace()))?;
    if count != data.docs {
        return Ok(false);
    }
    for i in [0, data.docs / 2, data.docs - 1] {
        let stored = target
            .docs
            .find_one(doc! { "_id": i as i64 })
            .await
            .map_err(|e| format!("{}: reading {}: {e}", target.label, target.namespace()))?;
        if stored.as_ref() != Some(&data.document(i)) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The query collection's documents as the flags describe them.
fn query_data(args: &Args) -> Arc<IndexData> {
    let started = Instant::now();
    let data = IndexData::new(args.index_docs, args.index_cats, args.batch, args.seed);
    println!(
        "index data set: {} documents of about {DOC_BYTES} bytes, {} cat values, built in {:.2}s",
        data.docs,
        data.cats,
        started.elapsed().as_secs_f64()
    );
    Arc::new(data)
}

/// A query a timed run repeats: the request for one random draw and the
/// check of its answer.
#[derive(Clone, Copy)]
enum Query {
    /// `find({cat: v})`, every result collected.
    Eq,
    /// `find({score: {$gte: x}}).sort({score: 1}).limit(20)`.
    Range,
}

/// Runs `query` for `duration` with `concurrency` tasks, checking every
/// answer.
async fn timed(
    target: &Target,
    data: &Arc<IndexData>,
    (w, query): (Workload, Query),
    concurrency: usize,
    duration: Duration,
    seed: u64,
) -> Result<Measurement, String> {
    target
        .warm_pool(concurrency)
        .await
        .map_err(|e| format!("{}: {}: {e}", target.label, w.name()))?;
    let start = Instant::now();
    let deadlines = Deadlines::after(start, duration);
    let mut set = JoinSet::new();
    for task in 0..concurrency {
        let coll = target.raw.clone();
        let data = Arc::clone(data);
        let seed = seed.wrapping_mul(1_000_003).wrapping_add(task as u64);
        set.spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut stats = TaskStats::new();
            while Instant::now() < deadlines.stop {
                let request = match query {
                    Query::Eq => {
                        // `cats` fits an i32 (checked with the flags).
                        let cat = rng.random_range(0..data.cats) as i32;
                        futures::future::Either::Left(eq(&coll, &data, cat))
                    }
                    Query::Range => {
                        let x = rng.random_range(0..VALUE_RANGE);
                        futures::future::Either::Right(range(&coll, &data, x))
                    }
                };
                if !stats.attempt(deadlines, request).await {
                    break;
                }
            }
            stats
        });
    }
    let tasks = workload::join_all(set).await;
    Ok(workload::merge(
        target,
        w,
        concurrency,
        start.elapsed(),
        tasks,
    ))
}

/// [`timed`] for `--warmup` untimed (unless zero), then for `--duration`.
async fn warmed_up(
    args: &Args,
    target: &Target,
    data: &Arc<IndexData>,
    what: (Workload, Query),
    concurrency: usize,
    seed: u64,
) -> Result<Measurement, String> {
    let (warmup, duration) = args.timing();
    if !warmup.is_zero() {
        timed(target, data, what, concurrency, warmup, seed ^ 1)
            .await
            .map_err(|e| format!("warm-up: {e}"))?;
    }
    timed(target, data, what, concurrency, duration, seed).await
}

async fn eq(coll: &Collection<RawDocumentBuf>, data: &IndexData, cat: i32) -> Result<bool, String> {
    let cursor = coll
        .find(doc! { "cat": cat })
        .await
        .map_err(|e| e.to_string())?;
    let docs: Vec<RawDocumentBuf> = cursor.try_collect().await.map_err(|e| e.to_string())?;
    let expected = data.cat_count(cat) as usize;
    if docs.len() != expected {
        return Err(format!(
            "wrong answer: find({{cat: {cat}}}) returned {} documents, {expected} hold it",
            docs.len()
        ));
    }
    if let Some(d) = docs.iter().find(|d| d.get_i32("cat").ok() != Some(cat)) {
        return Err(format!(
            "wrong answer: find({{cat: {cat}}}) returned a document with cat {:?}",
            d.get("cat").ok().flatten()
        ));
    }
    Ok(expected > 0)
}

async fn range(
    coll: &Collection<RawDocumentBuf>,
    data: &IndexData,
    x: i32,
) -> Result<bool, String> {
    let cursor = coll
        .find(doc! { "score": { "$gte": x } })
        .sort(doc! { "score": 1 })
        .limit(RANGE_LIMIT as i64)
        .await
        .map_err(|e| e.to_string())?;
    let docs: Vec<RawDocumentBuf> = cursor.try_collect().await.map_err(|e| e.to_string())?;
    let scores = docs
        .iter()
        .map(|d| d.get_i32("score"))
        .collect::<Result<Vec<i32>, _>>()
        .map_err(|e| format!("wrong answer: a result has no int `score`: {e}"))?;
    let expected = data.scores_from(x, RANGE_LIMIT);
    if scores != expected {
        return Err(format!(
            "wrong answer: find({{score: {{$gte: {x}}}}}).sort({{score: 1}}).limit({RANGE_LIMIT}) returned scores {scores:?}, expected {expected:?}"
        ));
    }
    Ok(!scores.is_empty())
}

/// `index-eq`: the equality query on `cat` without and then with
/// `{cat: 1}`, at concurrency 1 and each `--concurrency` level.
pub async fn index_eq(args: &Args, target: &Target) -> Result<Outcome, String> {
    check_args(args)?;
    let w = Workload::IndexEq;
    let t = target.for_collection(QUERY_COLLECTION);
    let data = query_data(args);
    fill(&t, &data, args.setup_load(), w, args.index_partitions).await?;

    let levels = query_levels(args);
    let seed_of = |level: usize| args.seed ^ ((level as u64) << 32) ^ ((w as u64) << 40);
    let mut without = Vec::new();
    for (level, &conc) in levels.iter().enumerate() {
        let m = warmed_up(args, &t, &data, (w, Query::Eq), conc, seed_of(level)).await?;
        print_run(&m, "index-eq/none", "index=none");
        without.push(m);
    }

    // On failure the runs without the index were printed already: they
    // are what this server can do.
    let built = create_indexes(&t, &["cat"]).await?;
    print_build(&t, "cat_1", data.docs, &built);

    let mut with = Vec::new();
    for (level, &conc) in levels.iter().enumerate() {
        // The same requests as without the index.
        let m = warmed_up(args, &t, &data, (w, Query::Eq), conc, seed_of(level)).await?;
        print_run(&m, "index-eq/cat_1", "index=cat_1");
        with.push(m);
    }

    let mut summary = vec![
        format!(
            "index-eq: find({{cat: v}}) over {} documents ({} cat values, about {:.0} per value), without and with {{cat: 1}}; built in {:.2}s{}",
            data.docs,
            data.cats,
            data.docs as f64 / data.cats as f64,
            built.secs,
            if built.listed { "" } else { " (not listed by listIndexes)" },
        ),
        report::header(),
    ];
    for m in &without {
        summary.push(row(m, "index-eq/none"));
    }
    for m in &with {
        summary.push(row(m, "index-eq/cat_1"));
    }
    summary.push(String::new());
    summary.push(format!(
        "{:<5} {:>14} {:>14} {:>9} {:>21} {:>21}",
        "conc",
        "without ops/s",
        "with ops/s",
        "ratio",
        "p50 (with / without)",
        "p99 (with / without)"
    ));
    for (a, b) in without.iter().zip(&with) {
        let ratio = speedup(b.ops_per_sec(), a.ops_per_sec());
        let ratio_text = ratio.map_or_else(|| "inf".to_owned(), |r| format!("{r:.2}"));
        summary.push(format!(
            "{:<5} {:>14.1} {:>14.1} {:>9} {:>21} {:>21}",
            a.concurrency,
            a.ops_per_sec(),
            b.ops_per_sec(),
            ratio_text,
            format!(
                "{} / {}",
                report::human_us(b.p50_us()),
                report::human_us(a.p50_us())
            ),
            format!(
                "{} / {}",
                report::human_us(b.p99_us()),
                report::human_us(a.p99_us())
            ),
        ));
        println!(
            "RESULT target={} workload=index-eq-ratio conc={} ratio={} indexed_ops_per_sec={:.1} unindexed_ops_per_sec={:.1} indexed_p50_us={} unindexed_p50_us={} build_secs={:.3} listed={}",
            t.label,
            a.concurrency,
            ratio_text,
            b.ops_per_sec(),
            a.ops_per_sec(),
            b.p50_us(),
            a.p50_us(),
            built.secs,
            report::yes_no(built.listed),
        );
    }
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}

/// `with / without`; `None` when `without` is zero (nothing completed).
pub(crate) fn speedup(with: f64, without: f64) -> Option<f64> {
    (without > 0.0).then(|| with / without)
}

/// `index-range`: the sorted range query on `score` with `{score: 1}`.
pub async fn index_range(args: &Args, target: &Target) -> Result<Outcome, String> {
    check_args(args)?;
    let w = Workload::IndexRange;
    let t = target.for_collection(QUERY_COLLECTION);
    let data = query_data(args);
    if holds(&t, &data).await? {
        println!(
            "index-range: {} already holds these {} documents; reusing it",
            t.namespace(),
            data.docs
        );
    } else {
        fill(&t, &data, args.setup_load(), w, args.index_partitions).await?;
    }
    let existed = index_names(&t).await?.contains(&index_name("score"));
    let built = create_indexes(&t, &["score"]).await?;
    print_build(&t, "score_1", data.docs, &built);
    if existed {
        println!("  note: score_1 existed before, so that was no build");
    }

    let mut runs = Vec::new();
    for (level, &conc) in query_levels(args).iter().enumerate() {
        let seed = args.seed ^ ((level as u64) << 32) ^ ((w as u64) << 40);
        let m = warmed_up(args, &t, &data, (w, Query::Range), conc, seed).await?;
        print_run(&m, "index-range", "index=score_1");
        runs.push(m);
    }
    let mut summary = vec![
        format!(
            "index-range: find({{score: {{$gte: x}}}}).sort({{score: 1}}).limit({RANGE_LIMIT}) over {} documents with {{score: 1}}{}",
            data.docs,
            if built.listed { "" } else { " (not listed by listIndexes)" },
        ),
        report::header(),
    ];
    summary.extend(runs.iter().map(|m| row(m, "index-range")));
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}

/// `index-insert`: at each `--concurrency` level, for each `--index-counts`
/// count `n`, drops `<db>.idx_insert`, creates `n` single-field indexes on
/// it while empty, and times inserting `--index-insert-docs` documents.
pub async fn index_insert(args: &Args, target: &Target) -> Result<Outcome, String> {
    check_args(args)?;
    let w = Workload::IndexInsert;
    let t = target.for_collection(INSERT_COLLECTION);
    let started = Instant::now();
    let data = Arc::new(
        IndexData::new(
            args.index_insert_docs,
            args.index_cats,
            args.index_batch,
            args.seed ^ 0x15e7,
        )
        .prebuilt(),
    );
    println!(
        "index-insert data set: {} documents of about {DOC_BYTES} bytes in batches of {}, built in {:.2}s",
        data.docs,
        args.index_batch,
        started.elapsed().as_secs_f64()
    );
    let timeout = Duration::from_secs_f64(args.load_timeout);
    let mut runs: Vec<(usize, Measurement)> = Vec::new();
    for &conc in &args.concurrency {
        for &n in &args.index_counts {
            t.docs
                .drop()
                .await
                .map_err(|e| format!("{}: dropping {}: {e}", t.label, t.namespace()))?;
            let fields = &INSERT_FIELDS[..n];
            if n > 0 {
                let built = create_indexes(&t, fields).await?;
                if !built.listed {
                    print_build(&t, &fields.join(","), 0, &built);
                }
            }
            let mut m = workload::load(&t, &data, conc, true, timeout)
                .await
                .map_err(|e| format!("{}: {}: {e}", t.label, w.name()))?;
            m.workload = w;
            let names = if n == 0 {
                "none".to_owned()
            } else {
                fields
                    .iter()
                    .map(|f| index_name(f))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            print_run(
                &m,
                &format!("index-insert/{n}"),
                &format!("indexes={n} index={names} batch={}", args.index_batch),
            );
            runs.push((n, m));
        }
    }
    t.docs
        .drop()
        .await
        .map_err(|e| format!("{}: dropping {}: {e}", t.label, t.namespace()))?;

    let mut summary = vec![
        format!(
            "index-insert: docs/s inserting {} documents in batches of {} with N single-field indexes ({}); latency per batch",
            data.docs,
            args.index_batch,
            INSERT_FIELDS.join(", "),
        ),
        report::header(),
    ];
    summary.extend(
        runs.iter()
            .map(|(n, m)| row(m, &format!("index-insert/{n}"))),
    );
    let mut fractions = Vec::new();
    for (n, m) in &runs {
        let base = runs
            .iter()
            .find(|(b, o)| *b == 0 && o.concurrency == m.concurrency)
            .map(|(_, o)| o.ops_per_sec());
        if let Some(f) = base
            .and_then(|b| speedup(m.ops_per_sec(), b))
            .filter(|_| *n > 0)
        {
            fractions.push(format!(
                "  conc={} indexes={n}: {:.0} docs/s, {:.2} of the rate without indexes",
                m.concurrency,
                m.ops_per_sec(),
                f
            ));
        }
    }
    if !fractions.is_empty() {
        summary.push(String::new());
        summary.extend(fractions);
    }
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_match_their_answers() {
        let data = IndexData::new(5_000, 500, 128, 3);
        let docs: Vec<Document> = (0..data.batch_count())
            .flat_map(|b| data.batch(b).into_owned())
            .collect();
        assert_eq!(docs.len(), 5_000);
        let mut bytes = Vec::new();
        docs[0].to_writer(&mut bytes).expect("encodes");
        assert_eq!(bytes.len(), DOC_BYTES);

        let cat = |d: &Document| d.get_i32("cat").expect("cat");
        let score = |d: &Document| d.get_i32("score").expect("score");
        for c in [0, 7, 499] {
            let n = docs.iter().filter(|d| cat(d) == c).count();
            assert_eq!(n, data.cat_count(c) as usize);
        }
        assert_eq!(data.cat_count(500), 0);
        assert_eq!(data.cat_count(-1), 0);
        assert!(docs.iter().all(|d| (0..500).contains(&cat(d))));

        let mut scores: Vec<i32> = docs.iter().map(score).collect();
        scores.sort_unstable();
        let x = scores[1234];
        let expected: Vec<i32> = scores
            .iter()
            .copied()
            .filter(|&s| s >= x)
            .take(20)
            .collect();
        assert_eq!(data.scores_from(x, 20), expected.as_slice());
        assert!(data.scores_from(VALUE_RANGE, 20).is_empty());
        assert_eq!(data.scores_from(0, 20).len(), 20);
        assert!(docs.iter().all(|d| ["score", "a", "b", "c"]
            .iter()
            .all(|f| (0..VALUE_RANGE).contains(&d.get_i32(f).expect("field")))));
    }

    #[test]
    fn prebuilt_keeps_every_document_once() {
        let data = IndexData::new(1_001, 10, 100, 9);
        let first = data.document(0);
        let pre = data.prebuilt();
        assert_eq!(pre.batch_count(), 11);
        assert_eq!(pre.batch(10).len(), 1);
        assert_eq!(pre.batch(0)[0], first);
        let ids: Vec<i64> = (0..pre.batch_count())
            .flat_map(|b| pre.batch(b).into_owned())
            .map(|d| d.get_i64("_id").expect("_id"))
            .collect();
        assert_eq!(ids, (0..1_001).collect::<Vec<i64>>());
    }

    #[test]
    fn rows_and_results_carry_the_label() {
        let row = format!("{:<12} {:<16} {:>5} {:>5}", "shardgate", "index-eq", "-", 1);
        let relabelled = relabel(&row, "index-eq", "index-eq/cat_1");
        assert_eq!(
            relabelled,
            format!(
                "{:<12} {:<16} {:>5} {:>5}",
                "shardgate", "index-eq/cat_1", "-", 1
            )
        );
        assert_eq!(relabelled.len(), row.len());
        assert_eq!(relabel(&row, "other", "x"), row);
        assert_eq!(
            with_fields(
                "RESULT target=s workload=index-eq conc=1 ops=3",
                "index=none"
            ),
            "RESULT target=s workload=index-eq index=none conc=1 ops=3"
        );
        assert_eq!(speedup(10.0, 2.0), Some(5.0));
        assert_eq!(speedup(10.0, 0.0), None);
        assert_eq!(index_name("cat"), "cat_1");
    }
}
