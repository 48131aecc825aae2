//! `kind-insert`: insert throughput into an ordinary, a capped and a
//! time-series collection, in that order, each freshly created as
//! `<db>.kind_insert` and loaded with the same `--kind-docs` measurements
//! (`{_id, m: {sensor}, t: date, v, pad}`, about 160 bytes) in batches of
//! `--kind-batch`, at each `--concurrency` level.
//!
//! The capped collection holds a quarter of the data (`size` is a quarter
//! of the documents' bytes), so once it is full every insert also deletes
//! the oldest documents: the cost a capped collection pays in its steady
//! state. The time-series collection has a meta field, so it carries the
//! `{m: 1, t: 1}` index MongoDB 7.0 creates with it. After each load the
//! document count is checked (all of them; for the capped collection
//! between one and the quarter that fits). With `--compare-uri` (the
//! ceiling) the ordinary load also runs there.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongodb::bson::{doc, Bson, DateTime, Document};

use crate::dataset::Generated;
use crate::indexes::{print_run, row, speedup};
use crate::report::{self, Measurement, Outcome};
use crate::workload::{self, Target, Workload};
use crate::Args;

const COLLECTION: &str = "kind_insert";
/// 2021-01-01T00:00:00Z: the first measurement's time.
const FIRST_MILLIS: i64 = 1_609_459_200_000;
const SENSORS: u64 = 100;

/// The collection kinds compared, with their `create` options.
fn kinds(data_bytes: u64) -> [(&'static str, Document); 3] {
    // At least 4 KiB, so every document fits.
    let capped_size = (data_bytes / 4).max(4096) as i64;
    [
        ("ordinary", doc! {}),
        ("capped", doc! {"capped": true, "size": capped_size}),
        (
            "timeseries",
            doc! {"timeseries": {"timeField": "t", "metaField": "m", "granularity": "seconds"}},
        ),
    ]
}

/// One measurement a second, the sensors taking turns.
struct Measurements {
    docs: u64,
    batch: usize,
    pad: String,
}

impl Generated for Measurements {
    fn docs(&self) -> u64 {
        self.docs
    }

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn document(&self, i: u64) -> Document {
        doc! {
            "_id": i as i64,
            "m": {"sensor": (i % SENSORS) as i32},
            "t": DateTime::from_millis(FIRST_MILLIS + i as i64 * 1000),
            "v": (i % 1000) as f64 / 10.0,
            "pad": &self.pad,
        }
    }
}

impl Measurements {
    /// The bytes of one document (they all have the same size).
    fn doc_bytes(&self) -> u64 {
        let mut bytes = Vec::new();
        self.document(0)
            .to_writer(&mut bytes)
            .map_or(0, |()| bytes.len() as u64)
    }
}

async fn count(t: &Target) -> Result<u64, String> {
    t.docs
        .count_documents(doc! {})
        .await
        .map_err(|e| format!("{}: counting {}: {e}", t.label, t.namespace()))
}

/// Runs on `targets[0]`; with a second target (the ceiling, which stores
/// nothing) the ordinary load runs there too, right after Shardgate's,
/// so each kind can be read as a fraction of what the wire allows.
pub async fn kind_insert(args: &Args, targets: &[Target]) -> Result<Outcome, String> {
    if args.kind_docs == 0 || args.kind_batch == 0 {
        return Err("--kind-docs and --kind-batch must be at least 1".into());
    }
    let w = Workload::KindInsert;
    let Some(target) = targets.first() else {
        return Err("kind-insert needs a server".into());
    };
    let ceiling = targets.get(1).map(|c| c.for_collection(COLLECTION));
    let t = target.for_collection(COLLECTION);
    let data = Arc::new(Measurements {
        docs: args.kind_docs,
        batch: args.kind_batch,
        pad: "x".repeat(100),
    });
    let doc_bytes = data.doc_bytes();
    println!(
        "kind-insert data set: {} measurements of {doc_bytes} bytes in batches of {}",
        data.docs, args.kind_batch
    );
    let timeout = Duration::from_secs_f64(args.load_timeout);
    let db = t.client.database(&t.db);
    let mut runs: Vec<(&str, Measurement)> = Vec::new();
    let mut ceiling_runs: Vec<Measurement> = Vec::new();
    for &conc in &args.concurrency {
        for (kind, options) in kinds(data.docs * doc_bytes) {
            t.docs
                .drop()
                .await
                .map_err(|e| format!("{}: dropping {}: {e}", t.label, t.namespace()))?;
            let mut create = doc! {"create": COLLECTION};
            create.extend(options.clone());
            db.run_command(create)
                .await
                .map_err(|e| format!("{}: creating a {kind} collection: {e}", t.label))?;
            let started = Instant::now();
            let mut m = workload::load(&t, &data, conc, true, timeout)
                .await
                .map_err(|e| format!("{}: {}: {e}", t.label, w.name()))?;
            m.workload = w;
            let took = started.elapsed();
            let held = count(&t).await?;
            // The size is kept rounded up to 256 bytes.
            let fits = options
                .get("size")
                .and_then(Bson::as_i64)
                .map_or(data.docs, |size| ((size as u64 + 255) & !255) / doc_bytes);
            let right = match kind {
                "capped" => held >= 1 && held <= fits,
                _ => held == data.docs,
            };
            if !right {
                m.errors += 1;
                m.first_error.get_or_insert_with(|| {
                    format!("{kind}: {held} documents after the load, expected {fits}")
                });
            }
            print_run(
                &m,
                &format!("kind-insert/{kind}"),
                &format!(
                    "kind={kind} docs={} held={held} batch={} secs={:.2}",
                    data.docs,
                    args.kind_batch,
                    took.as_secs_f64()
                ),
            );
            runs.push((kind, m));
            if let (Some(c), "ordinary") = (&ceiling, kind) {
                let mut m = workload::load(c, &data, conc, false, timeout)
                    .await
                    .map_err(|e| format!("{}: {}: {e}", c.label, w.name()))?;
                m.workload = w;
                print_run(
                    &m,
                    "kind-insert/ceiling",
                    &format!("kind=ceiling docs={} batch={}", data.docs, args.kind_batch),
                );
                ceiling_runs.push(m);
            }
        }
    }
    t.docs
        .drop()
        .await
        .map_err(|e| format!("{}: dropping {}: {e}", t.label, t.namespace()))?;

    let mut summary = vec![
        format!(
            "kind-insert: docs/s inserting {} measurements of {doc_bytes} bytes in batches of {} \
             into an ordinary, a capped (a quarter of the data fits) and a time-series collection; \
             latency per batch",
            data.docs, args.kind_batch,
        ),
        report::header(),
    ];
    summary.extend(
        runs.iter()
            .map(|(kind, m)| row(m, &format!("kind-insert/{kind}"))),
    );
    summary.extend(ceiling_runs.iter().map(|m| row(m, "kind-insert/ceiling")));
    summary.push(String::new());
    for (kind, m) in &runs {
        let ceiling = ceiling_runs
            .iter()
            .find(|c| c.concurrency == m.concurrency)
            .map(Measurement::ops_per_sec);
        if let Some(f) = ceiling.and_then(|c| speedup(m.ops_per_sec(), c)) {
            summary.push(format!(
                "  conc={} {kind}: {f:.3} of the ceiling's rate",
                m.concurrency
            ));
            println!(
                "RESULT workload=kind-insert-ceiling-ratio kind={kind} conc={} ratio={f:.3}",
                m.concurrency
            );
        }
    }
    for (kind, m) in runs.iter().filter(|(kind, _)| *kind != "ordinary") {
        let ordinary = runs
            .iter()
            .find(|(k, o)| *k == "ordinary" && o.concurrency == m.concurrency)
            .map(|(_, o)| o.ops_per_sec());
        if let Some(f) = ordinary.and_then(|o| speedup(m.ops_per_sec(), o)) {
            summary.push(format!(
                "  conc={} {kind}: {:.0} docs/s, {f:.2} of the ordinary collection's rate",
                m.concurrency,
                m.ops_per_sec(),
            ));
            println!(
                "RESULT workload=kind-insert-ratio kind={kind} conc={} ratio={f:.3}",
                m.concurrency
            );
        }
    }
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}
