//! `fanout-query`: a query no single partition can answer. `<db>.fanout` is
//! sharded on `{k: "hashed"}`, and the query filters on another field,
//! sorts and limits — `find({f: {$lt: 10}}).sort({score: -1}).limit(50)` —
//! so the server has to ask every partition and merge their sorted answers.
//! Timed like the other workloads, plus the server's CPU use during each
//! run: a server that asks its partitions in parallel keeps both cores of
//! these machines busy even for one query at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::bson::{doc, RawDocumentBuf};
use mongodb::Collection;
use tokio::task::JoinSet;

use crate::cost::{self, CostGroup};
use crate::dataset::{FanoutData, FANOUT_F_BELOW, FANOUT_LIMIT};
use crate::report::{self, CpuUse, Measurement, Outcome};
use crate::sharded;
use crate::workload::{self, Deadlines, Target, TaskStats, Workload};
use crate::Args;

/// Loads `--fanout-docs` documents into every server, then runs the query
/// at concurrency 1 and at each `--concurrency` level, on every server in
/// turn. Answers are checked on the server under test only (the ceiling
/// answers every query with the same document); the server's CPU is read
/// for it only, from `--server-pid` (or `--rss-pid`).
pub async fn fanout_query(args: &Args, targets: &[Target]) -> Result<Outcome, String> {
    let w = Workload::FanoutQuery;
    let n = args.fanout_partitions;
    let data = Arc::new(FanoutData::new(args.fanout_docs(), args.batch, args.seed));
    let sharded: Vec<Target> = targets.iter().map(|t| t.for_collection("fanout")).collect();
    for t in &sharded {
        sharded::shard_collection(t, "k", n).await?;
        sharded::fill(t, &data, args.setup_load(), (w, n)).await?;
    }

    let mut levels = args.concurrency.clone();
    levels.push(1);
    levels.sort_unstable();
    levels.dedup();
    let (warmup, duration) = args.timing();
    let mut measurements = Vec::new();
    for &conc in &levels {
        for (index, t) in sharded.iter().enumerate() {
            let primary = index == 0;
            if !warmup.is_zero() {
                timed(t, &data, conc, warmup, primary, (None, &[])).await?;
            }
            let pid = args.server_pid().filter(|_| primary);
            let costs = args.costs_for(index);
            let mut m = timed(t, &data, conc, duration, primary, (pid, costs)).await?;
            m.partitions = Some(n);
            report::print_measurement(&m);
            measurements.push(m);
        }
    }
    let summary = summary(&data, n, &measurements);
    Ok(Outcome {
        measurements,
        summary,
    })
}

/// Runs the query for `duration` with `concurrency` tasks, comparing every
/// answer with the known one when `check` is set, and measures the CPU
/// process `pid` and the `costs` groups use meanwhile.
async fn timed(
    target: &Target,
    data: &Arc<FanoutData>,
    concurrency: usize,
    duration: Duration,
    check: bool,
    (pid, costs): (Option<u32>, &[CostGroup]),
) -> Result<Measurement, String> {
    target
        .warm_pool(concurrency)
        .await
        .map_err(|e| format!("{}: fanout-query: {e}", target.label))?;
    let cost_before = cost::sample(costs)?;
    let cpu_before = pid.map(report::read_cpu_secs);
    let start = Instant::now();
    let deadlines = Deadlines::after(start, duration);
    let mut set = JoinSet::new();
    for _ in 0..concurrency {
        let coll = target.raw.clone();
        let data = Arc::clone(data);
        set.spawn(async move {
            let expected = check.then_some(data.expected_scores.as_slice());
            let mut stats = TaskStats::new();
            while Instant::now() < deadlines.stop {
                if !stats.attempt(deadlines, query(&coll, expected)).await {
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

    let mut m = workload::merge(target, Workload::FanoutQuery, concurrency, elapsed, tasks);
    m.cost = cost::between(costs, &cost_before, &cost_after);
    if let (Some(pid), Some(before), Some(after)) = (pid, cpu_before, cpu_after) {
        match before.and_then(|b| after.map(|a| a - b)) {
            Ok(secs) => m.server_cpu = Some(CpuUse { pid, secs }),
            Err(e) => println!("CPU pid={pid}: {e}"),
        }
    }
    Ok(m)
}

/// One query, all results collected; with `expected`, an answer whose
/// scores differ from it is an error.
async fn query(
    coll: &Collection<RawDocumentBuf>,
    expected: Option<&[f64]>,
) -> Result<bool, String> {
    let cursor = coll
        .find(doc! { "f": { "$lt": FANOUT_F_BELOW } })
        .sort(doc! { "score": -1 })
        .limit(FANOUT_LIMIT as i64)
        .await
        .map_err(|e| e.to_string())?;
    let docs: Vec<RawDocumentBuf> = cursor.try_collect().await.map_err(|e| e.to_string())?;
    let Some(expected) = expected else {
        return Ok(!docs.is_empty());
    };
    let scores = docs
        .iter()
        .map(|d| d.get_f64("score"))
        .collect::<Result<Vec<f64>, _>>()
        .map_err(|e| format!("wrong answer: a result has no double `score`: {e}"))?;
    if scores == expected {
        return Ok(!docs.is_empty());
    }
    let differs = scores
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(scores.len().min(expected.len()));
    Err(format!(
        "wrong answer: {} results where {} were expected; result {differs} has score {}, expected {}",
        scores.len(),
        expected.len(),
        scores
            .get(differs)
            .map_or_else(|| "none".to_owned(), f64::to_string),
        expected
            .get(differs)
            .map_or_else(|| "none".to_owned(), f64::to_string),
    ))
}

/// Queries per second, latency and server cores per server and level (the
/// `CPU` lines were printed with each run).
fn summary(data: &FanoutData, partitions: u32, measurements: &[Measurement]) -> Vec<String> {
    let mut lines = vec![
        format!(
            "fanout-query: find({{f: {{$lt: {FANOUT_F_BELOW}}}}}).sort({{score: -1}}).limit({FANOUT_LIMIT}) over {} documents in {partitions} partitions; goal > {:.1} server cores",
            data.docs,
            report::FANOUT_CORES_GOAL,
        ),
        format!(
            "{:<12} {:>5} {:>10} {:>9} {:>9} {:>7} {:>13} {:>4}",
            "target", "conc", "queries/s", "p50", "p99", "errors", "server cores", "met"
        ),
    ];
    for m in measurements {
        let (cores, met) = m.server_cores().map_or_else(
            || ("-".to_owned(), "-"),
            |c| {
                (
                    format!("{c:.2}"),
                    report::yes_no(c > report::FANOUT_CORES_GOAL),
                )
            },
        );
        lines.push(format!(
            "{:<12} {:>5} {:>10.1} {:>9} {:>9} {:>7} {:>13} {:>4}",
            m.target,
            m.concurrency,
            m.ops_per_sec(),
            report::human_us(m.p50_us()),
            report::human_us(m.p99_us()),
            m.errors,
            cores,
            met
        ));
    }
    lines
}
