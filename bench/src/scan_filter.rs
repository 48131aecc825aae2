//! `scan-filter`: how fast the server examines documents that no index
//! serves, on the YCSB `usertable` (which `load` fills first; the workload
//! only reads it). Two queries, each timed on its own:
//!
//! * `find`: `find({field0: {$gte: p, $lt: p'}})`, where `p` is a random
//!   two-character prefix and `p'` the prefix after it, so about one
//!   document in 3,844 matches and the reply costs little next to the scan;
//! * `group`: `aggregate([{$match: {field0: {$gte: "A", $lt: "a"}}},
//!   {$group: {_id: "$counter", n: {$sum: 1}}}])`, where about four
//!   documents in ten match and `counter` (0 until `update` runs) gives a
//!   handful of groups.
//!
//! Neither can use an index, so every operation examines every document
//! of the collection. The figure is documents examined per second of the
//! server's CPU time (`--server-pid` or `--rss-pid`; else the first
//! `--cost` group): operations × documents ÷ CPU seconds, independent of
//! how many cores the server had to itself. Answers are checked: every
//! `find` result lies in its range and the groups count no more documents
//! than the collection holds.

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::Collection;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::cost::{self, CostGroup};
use crate::report::{self, CpuUse, Measurement, Outcome};
use crate::workload::{self, Deadlines, Target, TaskStats, Workload};
use crate::Args;

/// The characters `usertable`'s payload strings are made of, in byte
/// order, so a prefix's successor is the next character.
const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The two queries, timed one after the other.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Query {
    Find,
    Group,
}

impl Query {
    fn name(self) -> &'static str {
        match self {
            Query::Find => "find",
            Query::Group => "group",
        }
    }

    fn text(self) -> &'static str {
        match self {
            Query::Find => "find({field0: {$gte: p, $lt: p'}}), p a random 2-character prefix",
            Query::Group => {
                "aggregate([{$match: {field0: {$gte: \"A\", $lt: \"a\"}}}, {$group: {_id: \"$counter\", n: {$sum: 1}}}])"
            }
        }
    }
}

/// A random two-character prefix and the prefix after it: the bounds of
/// the `find`.
fn prefix_range(rng: &mut impl Rng) -> (String, String) {
    let first = rng.random_range(0..ALPHABET.len());
    let second = rng.random_range(0..ALPHABET.len());
    let low = [ALPHABET[first], ALPHABET[second]];
    let high = match ALPHABET.get(second + 1) {
        Some(&next) => vec![ALPHABET[first], next],
        // `pz` is followed by everything that starts with `p` and a byte
        // above `z`: none of the alphabet's.
        None => vec![ALPHABET[first] + 1],
    };
    (
        String::from_utf8_lossy(&low).into_owned(),
        String::from_utf8_lossy(&high).into_owned(),
    )
}

/// One `find`, all results collected, each checked to lie in its range.
async fn find(coll: &Collection<RawDocumentBuf>, rng: &mut SmallRng) -> Result<bool, String> {
    let (low, high) = prefix_range(rng);
    let cursor = coll
        .find(doc! { "field0": { "$gte": &low, "$lt": &high } })
        .await
        .map_err(|e| e.to_string())?;
    let docs: Vec<RawDocumentBuf> = cursor.try_collect().await.map_err(|e| e.to_string())?;
    for d in &docs {
        let value = d
            .get_str("field0")
            .map_err(|e| format!("wrong answer: a result has no string field0: {e}"))?;
        if value < low.as_str() || value >= high.as_str() {
            return Err(format!(
                "wrong answer: field0 {value:?} is outside [{low:?}, {high:?})"
            ));
        }
    }
    Ok(!docs.is_empty())
}

/// One `$match` + `$group`, checked to count at most `docs` documents.
async fn group(coll: &Collection<RawDocumentBuf>, docs: u64) -> Result<bool, String> {
    let pipeline = vec![
        doc! { "$match": { "field0": { "$gte": "A", "$lt": "a" } } },
        doc! { "$group": { "_id": "$counter", "n": { "$sum": 1 } } },
    ];
    let cursor = coll.aggregate(pipeline).await.map_err(|e| e.to_string())?;
    let groups: Vec<Document> = cursor.try_collect().await.map_err(|e| e.to_string())?;
    let mut total = 0_i64;
    for g in &groups {
        let n = match g.get("n") {
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Int64(n)) => *n,
            other => return Err(format!("wrong answer: a group has n {other:?}")),
        };
        if n <= 0 {
            return Err(format!("wrong answer: a group counts {n} documents"));
        }
        total += n;
    }
    if u64::try_from(total).map_or(true, |t| t > docs) {
        return Err(format!(
            "wrong answer: the groups count {total} documents of {docs}"
        ));
    }
    Ok(!groups.is_empty())
}

/// Runs `q` for `duration` with `concurrency` tasks and measures the CPU
/// the server process `pid` and the `costs` groups use meanwhile.
async fn timed(
    target: &Target,
    (q, docs): (Query, u64),
    (concurrency, duration, seed): (usize, Duration, u64),
    (pid, costs): (Option<u32>, &[CostGroup]),
) -> Result<Measurement, String> {
    target
        .warm_pool(concurrency)
        .await
        .map_err(|e| format!("{}: scan-filter: {e}", target.label))?;
    let cost_before = cost::sample(costs)?;
    let cpu_before = pid.map(report::read_cpu_secs);
    let start = Instant::now();
    let deadlines = Deadlines::after(start, duration);
    let mut set = JoinSet::new();
    for task in 0..concurrency {
        let coll = target.raw.clone();
        let seed = seed.wrapping_mul(1_000_003).wrapping_add(task as u64);
        set.spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut stats = TaskStats::new();
            while Instant::now() < deadlines.stop {
                let done = match q {
                    Query::Find => stats.attempt(deadlines, find(&coll, &mut rng)).await,
                    Query::Group => stats.attempt(deadlines, group(&coll, docs)).await,
                };
                if !done {
                    break;
                }
            }
            stats
        });
    }
    let tasks = workload::join_all(set).await;
    let elapsed = start.elapsed();
    let cpu_after = pid.map(report::read_cpu_secs);
    let cost_after = cost::sample(costs)?;

    let mut m = workload::merge(target, Workload::ScanFilter, concurrency, elapsed, tasks);
    m.cost = cost::between(costs, &cost_before, &cost_after);
    if let (Some(pid), Some(before), Some(after)) = (pid, cpu_before, cpu_after) {
        match before.and_then(|b| after.map(|a| a - b)) {
            Ok(secs) => m.server_cpu = Some(CpuUse { pid, secs }),
            Err(e) => println!("CPU pid={pid}: {e}"),
        }
    }
    Ok(m)
}

/// The server's CPU seconds during a run: its process's, else the first
/// `--cost` group's.
fn server_secs(m: &Measurement) -> Option<f64> {
    m.server_cpu
        .as_ref()
        .map(|c| c.secs)
        .or_else(|| m.cost.as_ref()?.groups.first().map(|(_, secs)| *secs))
}

/// Documents examined per second of server CPU.
fn docs_per_cpu_sec(m: &Measurement, docs: u64) -> Option<f64> {
    server_secs(m)
        .filter(|&s| s > 0.0)
        .map(|secs| m.ops as f64 * docs as f64 / secs)
}

/// A run's row, `RESULT` and `COST` lines, and its first error (the
/// `CPU` line's goal is fanout-query's, so this prints its own `SCAN`).
fn print_run(m: &Measurement) {
    println!("{}", report::row(m));
    println!("{}", report::result_line(m));
    if let Some(e) = &m.first_error {
        println!("  first error ({} in all): {e}", m.errors);
    }
    if let Some(line) = cost::cost_line(m) {
        println!("{line}");
    }
}

/// Runs both queries at each `--concurrency` level on the server under
/// test (the ceiling stores nothing to scan).
pub async fn scan_filter(args: &Args, target: &Target) -> Result<Outcome, String> {
    let w = Workload::ScanFilter;
    let docs = target
        .docs
        .estimated_document_count()
        .await
        .map_err(|e| format!("{}: counting {}: {e}", target.label, target.namespace()))?;
    if docs == 0 {
        return Err(format!(
            "scan-filter reads {}, which is empty: run `load` first (--workloads load,scan-filter)",
            target.namespace()
        ));
    }
    let (warmup, duration) = args.timing();
    let pid = args.server_pid();
    let mut measurements = Vec::new();
    let mut lines = Vec::new();
    for (level, &conc) in args.concurrency.iter().enumerate() {
        for q in [Query::Find, Query::Group] {
            let seed = args.seed ^ ((level as u64) << 32) ^ ((w as u64) << 40) ^ (q as u64);
            if !warmup.is_zero() {
                timed(target, (q, docs), (conc, warmup, seed ^ 1), (None, &[])).await?;
            }
            let m = timed(
                target,
                (q, docs),
                (conc, duration, seed),
                (pid, &args.costs),
            )
            .await?;
            print_run(&m);
            let rate = docs_per_cpu_sec(&m, docs);
            let line = format!(
                "SCAN target={} workload={} query={} conc={conc} ops={} docs_per_op={docs} server_cpu_secs={} docs_examined_per_cpu_sec={}",
                m.target,
                w.name(),
                q.name(),
                m.ops,
                server_secs(&m).map_or_else(|| "-".to_owned(), |s| format!("{s:.2}")),
                rate.map_or_else(|| "-".to_owned(), |r| format!("{r:.0}")),
            );
            println!("{line}");
            lines.push((q, m.concurrency, m.ops_per_sec(), rate));
            measurements.push(m);
        }
    }
    let mut summary = vec![
        format!(
            "scan-filter over {docs} documents of {} (no index serves either query):",
            target.namespace()
        ),
        format!("  find:  {}", Query::Find.text()),
        format!("  group: {}", Query::Group.text()),
        format!(
            "{:<6} {:>5} {:>10} {:>26}",
            "query", "conc", "ops/s", "docs examined / CPU sec"
        ),
    ];
    for (q, conc, ops, rate) in lines {
        summary.push(format!(
            "{:<6} {:>5} {:>10.1} {:>26}",
            q.name(),
            conc,
            ops,
            rate.map_or_else(|| "- (no --server-pid)".to_owned(), |r| format!("{r:.0}")),
        ));
    }
    Ok(Outcome {
        measurements,
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ranges_hold_exactly_their_prefix() {
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..1_000 {
            let (low, high) = prefix_range(&mut rng);
            assert!(low < high);
            assert_eq!(low.len(), 2);
            for &c in ALPHABET {
                let inside = format!("{low}{}", char::from(c));
                assert!(inside.as_str() >= low.as_str() && inside.as_str() < high.as_str());
            }
        }
        assert!(ALPHABET.windows(2).all(|w| w[0] < w[1]));
    }
}
