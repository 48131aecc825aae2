//! Sharded collections: creating them (`shardCollection`), filling them, and
//! reading back how the server split them (`collStats`), plus the two
//! workloads built on that alone, `partitioned-read` and `distribution`.
//! The third sharded workload, `fanout-query`, is in `fanout`.
//!
//! Every sharded workload drops and re-shards its collection, whatever
//! `--no-drop` says: a collection keeps the partitioning it was created with.

use std::sync::Arc;
use std::time::Duration;

use mongodb::bson::{doc, Bson, Document};
use mongodb::error::ErrorKind;

use crate::dataset::{Batches, Dataset, KeyRange};
use crate::report::{self, Balance, Measurement, Outcome, Round};
use crate::workload::{self, Target, Workload};
use crate::Args;

/// MongoDB's error code for a command the server does not have.
const COMMAND_NOT_FOUND: i32 = 59;

/// Drops `target`'s collection and shards it again on `{field: "hashed"}`
/// over `partitions` initial partitions, then checks with `collStats` that
/// the server did so (when it reports those figures at all).
pub async fn shard_collection(target: &Target, field: &str, partitions: u32) -> Result<(), String> {
    let ns = target.namespace();
    target
        .docs
        .drop()
        .await
        .map_err(|e| format!("{}: dropping {ns}: {e}", target.label))?;
    let command = doc! {
        "shardCollection": &ns,
        "key": { field: "hashed" },
        "numInitialChunks": i64::from(partitions),
    };
    if let Err(e) = target.client.database("admin").run_command(command).await {
        let what = format!(
            "{}: shardCollection {ns} with key {{{field}: \"hashed\"}} and numInitialChunks {partitions}",
            target.label
        );
        return Err(match *e.kind {
            ErrorKind::Command(ref c) if c.code == COMMAND_NOT_FOUND => format!(
                "{what}: the server does not support sharding (it answered CommandNotFound: {}); \
                 partitioned-read, fanout-query and distribution need a server with shardCollection",
                c.message
            ),
            _ => format!(
                "{what} failed: {e}; partitioned-read, fanout-query and distribution need a server \
                 that shards collections on a single hashed field"
            ),
        });
    }
    check_sharded(target, partitions).await
}

/// Fails when `collStats` contradicts a `shardCollection` that answered ok:
/// `sharded: false`, or a partition count other than the one asked for.
/// A server that reports neither (the ceiling stores nothing) passes.
async fn check_sharded(target: &Target, partitions: u32) -> Result<(), String> {
    let ns = target.namespace();
    let stats = coll_stats(target).await?;
    if let Ok(false) = stats.get_bool("sharded") {
        return Err(format!(
            "{}: shardCollection {ns} answered ok but collStats says sharded: false",
            target.label
        ));
    }
    match stats.get("nchunks").and_then(as_count) {
        Some(n) if n != u64::from(partitions) => Err(format!(
            "{}: shardCollection {ns} asked for {partitions} partitions but collStats says nchunks: {n}",
            target.label
        )),
        _ => Ok(()),
    }
}

async fn coll_stats(target: &Target) -> Result<Document, String> {
    target
        .client
        .database(&target.db)
        .run_command(doc! { "collStats": target.docs.name() })
        .await
        .map_err(|e| format!("{}: collStats {}: {e}", target.label, target.namespace()))
}

/// A count from a server reply, whichever numeric type it came as.
fn as_count(value: &Bson) -> Option<u64> {
    match *value {
        Bson::Int32(n) => u64::try_from(n).ok(),
        Bson::Int64(n) => u64::try_from(n).ok(),
        Bson::Double(n) if n >= 0.0 && n.fract() == 0.0 => Some(n as u64),
        _ => None,
    }
}

/// Documents per partition from `collStats`' `shards` (partition id →
/// `{count, ...}`), in partition-id order (`p2` before `p10`).
async fn partition_counts(target: &Target) -> Result<Vec<(String, u64)>, String> {
    let ns = target.namespace();
    let stats = coll_stats(target).await?;
    let shards = stats.get_document("shards").map_err(|_| {
        format!(
            "{}: collStats {ns} has no `shards` document of per-partition figures; \
             the server does not report how it partitioned the collection",
            target.label
        )
    })?;
    let mut counts = shards
        .iter()
        .map(|(id, figures)| {
            figures
                .as_document()
                .and_then(|f| f.get("count"))
                .and_then(as_count)
                .map(|count| (id.clone(), count))
                .ok_or_else(|| {
                    format!(
                        "{}: collStats {ns}: shards.{id} has no numeric count",
                        target.label
                    )
                })
        })
        .collect::<Result<Vec<_>, String>>()?;
    counts.sort_by(|(a, _), (b, _)| (a.len(), a).cmp(&(b.len(), b)));
    Ok(counts)
}

/// Loads every batch of `data` into `target`'s (freshly sharded) collection
/// with `concurrency` loaders and prints a `SETUP` line. Unlike the `load`
/// workload, any failed batch or a load cut short by `timeout` is an error:
/// the timed part would otherwise measure a different data set.
pub async fn fill<B: Batches>(
    target: &Target,
    data: &Arc<B>,
    (concurrency, timeout): (usize, Duration),
    (workload, partitions): (Workload, u32),
) -> Result<(), String> {
    let ns = target.namespace();
    let docs = data.doc_count();
    let m = workload::load(target, data, concurrency, true, timeout)
        .await
        .map_err(|e| format!("{}: loading {ns}: {e}", target.label))?;
    println!(
        "SETUP target={} workload={} ns={ns} partitions={partitions} docs={} secs={:.3} docs_per_sec={:.1} conc={concurrency}",
        target.label,
        workload.name(),
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

/// `partitioned-read`: for each `--partitions` count `n`, the data set in
/// `<db>.pread_<n>` sharded on `{_id: "hashed"}` over `n` partitions, read
/// as the `read` workload does.
///
/// Built to be fair to every count: all the collections are loaded first
/// (the same data in each, so every count runs with the same data stored),
/// then the server gets `--settle-secs` to finish what a bulk load leaves
/// behind (background compaction), and only then is anything timed. The
/// timing runs in `--rounds` rounds; each round measures every count once,
/// at every concurrency level, on every server in turn, and starts one
/// count later than the round before (1,8,64 / 8,64,1 / 64,1,8), so no count
/// is always first. Within a round every count gets the same requests; each
/// round draws new ones. The collections are dropped at the end. Sums up
/// with the median throughput over the rounds per count and its spread.
pub async fn partitioned_read(
    args: &Args,
    targets: &[Target],
    data: &Arc<Dataset>,
) -> Result<Outcome, String> {
    let w = Workload::PartitionedRead;
    let collections: Vec<(u32, Vec<Target>)> = args
        .partitions
        .iter()
        .map(|&n| {
            let sharded = targets
                .iter()
                .map(|t| t.for_collection(&format!("pread_{n}")))
                .collect();
            (n, sharded)
        })
        .collect();
    for (n, sharded) in &collections {
        for t in sharded {
            shard_collection(t, "_id", *n).await?;
            fill(t, data, args.setup_load(), (w, *n)).await?;
        }
    }
    let settle = Duration::from_secs_f64(args.settle_secs);
    if !settle.is_zero() {
        println!(
            "partitioned-read: {} collections loaded; settling for {:.1}s before measuring",
            collections.len(),
            settle.as_secs_f64()
        );
        tokio::time::sleep(settle).await;
    }

    let rounds = args.rounds;
    let mut measurements = Vec::new();
    for number in 1..=rounds {
        let order = round_order(&collections, number - 1);
        println!(
            "partitioned-read: round {number} of {rounds}, partitions in the order {}",
            join(order.iter().map(|(n, _)| n))
        );
        for (n, sharded) in order {
            for (level, &conc) in args.concurrency.iter().enumerate() {
                // The same requests whatever the partition count; new ones
                // each round (round 1 sends what a single run used to).
                let seed = args.seed
                    ^ ((level as u64) << 32)
                    ^ ((w as u64) << 40)
                    ^ (u64::from(number - 1) << 48);
                for (index, t) in sharded.iter().enumerate() {
                    let costs = args.costs_for(index);
                    let mut m =
                        workload::warmed_up(t, data, (w, conc), args.timing(), seed, costs).await?;
                    m.partitions = Some(*n);
                    m.round = Some(Round { number, of: rounds });
                    report::print_measurement(&m);
                    measurements.push(m);
                }
            }
        }
    }
    for (_, sharded) in &collections {
        for t in sharded {
            t.docs
                .drop()
                .await
                .map_err(|e| format!("{}: dropping {}: {e}", t.label, t.namespace()))?;
        }
    }
    let summary = spread_summary(args, targets, &measurements);
    Ok(Outcome {
        measurements,
        summary,
    })
}

/// The order of round `round` (from 0): `items` rotated left by `round`.
fn round_order<T>(items: &[T], round: u32) -> Vec<&T> {
    let len = items.len().max(1);
    let skip = usize::try_from(round).unwrap_or(0) % len;
    items.iter().cycle().skip(skip).take(items.len()).collect()
}

/// `1,8,64`.
fn join<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Figures with one decimal (or four for fractions), comma-separated.
fn list(values: &[f64], decimals: usize) -> String {
    join(values.iter().map(|v| format!("{v:.decimals$}")))
}

/// Per server and concurrency: the median throughput over the rounds at
/// each partition count and the spread of those medians; with a comparison
/// server, also the median of each round's fraction of it and the spread
/// of those, and a `RATIO` line per count and concurrency from the medians.
fn spread_summary(args: &Args, targets: &[Target], measurements: &[Measurement]) -> Vec<String> {
    let counts = &args.partitions;
    let rounds = args.rounds;
    let find = |target: &str, conc: usize, n: u32, round: u32| {
        measurements.iter().find(|m| {
            m.target == target
                && m.concurrency == conc
                && m.partitions == Some(n)
                && m.round.map(|r| r.number) == Some(round)
        })
    };
    // ops/s of each round, in round order.
    let by_round = |target: &str, conc: usize, n: u32| -> Vec<f64> {
        (1..=rounds)
            .filter_map(|r| find(target, conc, n, r).map(Measurement::ops_per_sec))
            .collect()
    };
    // This round's ops/s as a fraction of the baseline's in the same round.
    let fractions_by_round = |target: &str, baseline: &str, conc: usize, n: u32| -> Vec<f64> {
        (1..=rounds)
            .filter_map(|r| {
                let ours = find(target, conc, n, r)?.ops_per_sec();
                let theirs = find(baseline, conc, n, r)?.ops_per_sec();
                Some(if theirs > 0.0 { ours / theirs } else { 0.0 })
            })
            .collect()
    };
    let medians = |per_count: &[Vec<f64>]| -> Vec<f64> {
        per_count.iter().filter_map(|v| report::median(v)).collect()
    };
    let partitions = join(counts);
    let columns = counts
        .iter()
        .map(|n| format!("{:>12}", format!("{n} parts")))
        .collect::<String>();
    let goal = report::percent(report::SPREAD_GOAL);
    let mut lines = vec![
        format!(
            "partitioned-read: point reads per second by partition count, median over {rounds} round(s) in rotated order; spread = fastest / slowest median - 1, goal <= {goal}"
        ),
        format!(
            "{:<12} {:>5} {columns} {:>8} {:>4}",
            "target", "conc", "spread", "met"
        ),
    ];
    let mut detail = vec!["  each round (ops/s; the round's own spread):".to_owned()];
    let mut ratios = Vec::new();
    let mut spreads = Vec::new();
    let baseline = targets.get(1).filter(|b| b.label != targets[0].label);
    for target in targets {
        for &conc in &args.concurrency {
            let per_count: Vec<Vec<f64>> = counts
                .iter()
                .map(|&n| by_round(&target.label, conc, n))
                .collect();
            let values = medians(&per_count);
            if values.len() != counts.len() {
                continue;
            }
            let Some(spread) = report::spread(&values) else {
                continue;
            };
            let met = report::yes_no(spread <= report::SPREAD_GOAL);
            lines.push(format!(
                "{:<12} {:>5} {} {:>8} {:>4}",
                target.label,
                conc,
                values
                    .iter()
                    .map(|v| format!("{v:>12.0}"))
                    .collect::<String>(),
                report::percent(spread),
                met
            ));
            let mut round_spreads = Vec::new();
            for r in 0..rounds as usize {
                let row: Vec<f64> = per_count.iter().filter_map(|v| v.get(r).copied()).collect();
                let Some(s) = report::spread(&row).filter(|_| row.len() == counts.len()) else {
                    continue;
                };
                round_spreads.push(s);
                detail.push(format!(
                    "  {:<12} {:>5} {} {:>8}   round {}",
                    target.label,
                    conc,
                    row.iter().map(|v| format!("{v:>12.0}")).collect::<String>(),
                    report::percent(s),
                    r + 1
                ));
            }
            let mut line = format!(
                "SPREAD target={} workload=partitioned-read conc={conc} partitions={partitions} ops_per_sec={} spread={spread:.4} goal={:.2} met={met}",
                target.label,
                list(&values, 1),
                report::SPREAD_GOAL,
            );
            if let Some(b) = baseline.filter(|b| b.label != target.label) {
                let fraction_rounds: Vec<Vec<f64>> = counts
                    .iter()
                    .map(|&n| fractions_by_round(&target.label, &b.label, conc, n))
                    .collect();
                let fractions = medians(&fraction_rounds);
                let theirs = medians(
                    &counts
                        .iter()
                        .map(|&n| by_round(&b.label, conc, n))
                        .collect::<Vec<_>>(),
                );
                if fractions.len() == counts.len() && theirs.len() == counts.len() {
                    for (i, &n) in counts.iter().enumerate() {
                        ratios.push(format!(
                            "RATIO workload=partitioned-read partitions={n} conc={conc} target={} baseline={} fraction={:.4} target_ops_per_sec={:.1} baseline_ops_per_sec={:.1} rounds={rounds}",
                            target.label, b.label, fractions[i], values[i], theirs[i],
                        ));
                    }
                    if let Some(s) = report::spread(&fractions) {
                        line.push_str(&format!(
                            " baseline={} fractions={} fraction_spread={s:.4}",
                            b.label,
                            list(&fractions, 4),
                        ));
                    }
                }
            }
            line.push_str(&format!(
                " rounds={rounds} round_spreads={}",
                list(&round_spreads, 4)
            ));
            spreads.push(line);
        }
    }
    if rounds > 1 {
        lines.push(String::new());
        lines.extend(detail);
    }
    if !ratios.is_empty() {
        lines.push(String::new());
        lines.push(format!(
            "  fraction = median over the rounds of each round's {} ops/s / {} ops/s; the ops/s are the medians",
            targets[0].label,
            baseline.map_or("", |b| b.label.as_str()),
        ));
    }
    lines.push(String::new());
    lines.extend(ratios);
    lines.extend(spreads);
    lines
}

/// `distribution`: `--distribution-docs` documents with distinct `k` in
/// `<db>.dist` sharded on `{k: "hashed"}`, then how many documents each
/// partition holds according to `collStats`. Untimed, and run on the
/// server under test only: a comparison server is there for speed. Prints
/// its figures and `DISTRIBUTION` line at once, and repeats the figures in
/// the summary.
pub async fn distribution(args: &Args, target: &Target) -> Result<Outcome, String> {
    let w = Workload::Distribution;
    let n = args.distribution_partitions;
    let t = target.for_collection("dist");
    let ns = t.namespace();
    shard_collection(&t, "k", n).await?;
    let data = Arc::new(KeyRange::new(args.distribution_docs, args.batch));
    fill(&t, &data, args.setup_load(), (w, n)).await?;

    let counts = partition_counts(&t).await?;
    let figures: Vec<u64> = counts.iter().map(|(_, c)| *c).collect();
    let Some(b) = Balance::of(&figures) else {
        return Err(format!(
            "{}: collStats {ns} counts no documents in its partitions after {} were inserted",
            t.label, data.docs
        ));
    };
    let met = report::yes_no(b.max_over_mean() <= report::DISTRIBUTION_GOAL);
    let mut summary = vec![
        format!(
            "distribution: {} documents with distinct k in {ns}, sharded on {{k: \"hashed\"}} over {n} partitions",
            data.docs
        ),
        format!(
            "  largest / mean {:.3} (goal <= {:.2}: {met}), smallest / mean {:.3}; {} per partition on average",
            b.max_over_mean(),
            report::DISTRIBUTION_GOAL,
            b.min_over_mean(),
            b.mean.round()
        ),
        format!(
            "  {}",
            counts
                .iter()
                .map(|(id, c)| format!("{id}={c}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ];
    if b.partitions != n as usize {
        summary.push(format!(
            "  note: collStats lists {} partitions, {n} were asked for",
            b.partitions
        ));
    }
    if b.total != data.docs {
        summary.push(format!(
            "  note: the partitions count {} documents in all, {} were inserted",
            b.total, data.docs
        ));
    }
    let machine = format!(
        "DISTRIBUTION target={} ns={ns} partitions={} asked_partitions={n} docs={} counted={} min={} max={} mean={:.1} max_over_mean={:.4} min_over_mean={:.4} goal={:.2} met={met}",
        t.label,
        b.partitions,
        data.docs,
        b.total,
        b.min,
        b.max,
        b.mean,
        b.max_over_mean(),
        b.min_over_mean(),
        report::DISTRIBUTION_GOAL,
    );
    for line in &summary {
        println!("{line}");
    }
    println!("{machine}");
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_of_any_numeric_type() {
        assert_eq!(as_count(&Bson::Int32(7)), Some(7));
        assert_eq!(as_count(&Bson::Int64(1 << 40)), Some(1 << 40));
        assert_eq!(as_count(&Bson::Double(12.0)), Some(12));
        assert_eq!(as_count(&Bson::Double(1.5)), None);
        assert_eq!(as_count(&Bson::Int32(-1)), None);
        assert_eq!(as_count(&Bson::String("3".into())), None);
    }

    #[test]
    fn rounds_rotate_the_order() {
        let counts = [1, 8, 64];
        let order = |round| {
            round_order(&counts, round)
                .into_iter()
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(order(0), [1, 8, 64]);
        assert_eq!(order(1), [8, 64, 1]);
        assert_eq!(order(2), [64, 1, 8]);
        assert_eq!(order(3), [1, 8, 64]);
        assert!(round_order::<u32>(&[], 2).is_empty());
    }
}
