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
use crate::report::{self, Balance, Measurement, Outcome};
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
/// as the `read` workload does at every concurrency level, on every server
/// in turn; the collection is dropped once measured, so that each count
/// runs with the same amount of data stored. Sums up with the spread of
/// throughput across partition counts.
pub async fn partitioned_read(
    args: &Args,
    targets: &[Target],
    data: &Arc<Dataset>,
) -> Result<Outcome, String> {
    let w = Workload::PartitionedRead;
    let mut measurements = Vec::new();
    for &n in &args.partitions {
        let sharded: Vec<Target> = targets
            .iter()
            .map(|t| t.for_collection(&format!("pread_{n}")))
            .collect();
        for t in &sharded {
            shard_collection(t, "_id", n).await?;
            fill(t, data, args.setup_load(), (w, n)).await?;
        }
        for (level, &conc) in args.concurrency.iter().enumerate() {
            // The same requests whatever the partition count.
            let seed = args.seed ^ ((level as u64) << 32) ^ (w as u64) << 40;
            for t in &sharded {
                let mut m = workload::warmed_up(t, data, w, conc, args.timing(), seed).await?;
                m.partitions = Some(n);
                report::print_measurement(&m);
                measurements.push(m);
            }
        }
        for t in &sharded {
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

/// Per server and concurrency: throughput at each partition count and its
/// spread; with a comparison server, also the spread of the fraction.
fn spread_summary(args: &Args, targets: &[Target], measurements: &[Measurement]) -> Vec<String> {
    let counts = &args.partitions;
    let ops = |target: &str, conc: usize| -> Vec<f64> {
        counts
            .iter()
            .filter_map(|&n| {
                measurements
                    .iter()
                    .find(|m| {
                        m.target == target && m.concurrency == conc && m.partitions == Some(n)
                    })
                    .map(Measurement::ops_per_sec)
            })
            .collect()
    };
    let list = |values: &[f64]| -> String {
        values
            .iter()
            .map(|v| format!("{v:.1}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let partitions = counts
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut lines = vec![
        format!(
            "partitioned-read: point reads per second by partition count; spread = fastest / slowest - 1, goal <= {}",
            report::percent(report::SPREAD_GOAL)
        ),
        format!(
            "{:<12} {:>5} {} {:>8} {:>4}",
            "target",
            "conc",
            counts
                .iter()
                .map(|n| format!("{:>12}", format!("{n} parts")))
                .collect::<String>(),
            "spread",
            "met"
        ),
    ];
    let mut machine = Vec::new();
    for target in targets {
        for &conc in &args.concurrency {
            let values = ops(&target.label, conc);
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
            let mut line = format!(
                "SPREAD target={} workload=partitioned-read conc={conc} partitions={partitions} ops_per_sec={} spread={spread:.4} goal={:.2} met={met}",
                target.label,
                list(&values),
                report::SPREAD_GOAL,
            );
            if let Some(baseline) = targets.get(1).filter(|b| b.label != target.label) {
                let theirs = ops(&baseline.label, conc);
                let fractions: Vec<f64> = values
                    .iter()
                    .zip(&theirs)
                    .map(|(a, b)| if *b > 0.0 { a / b } else { 0.0 })
                    .collect();
                if let Some(s) = report::spread(&fractions) {
                    line.push_str(&format!(
                        " baseline={} fractions={} fraction_spread={s:.4}",
                        baseline.label,
                        fractions
                            .iter()
                            .map(|f| format!("{f:.4}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    ));
                }
            }
            machine.push(line);
        }
    }
    lines.push(String::new());
    lines.extend(machine);
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
}
