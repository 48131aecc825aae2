//! `js-cost`: what server-side JavaScript costs per document, each figure
//! measured back to back with the same query written without it.
//!
//! `--js-docs` documents `{_id: i, v: i % 1000}` are loaded into
//! `js_cost` (unsharded); then, `--js-repeats` times each, alternating:
//! * `find({$where: "this.v >= 0"})` against `find({$expr: {$gte: ["$v", 0]}})`;
//! * `aggregate([{$addFields: {w: {$function: {body: "function(v) {
//!   return v * 2 }", args: ["$v"], lang: "js"}}}}, {$group: {_id: null,
//!   s: {$sum: "$w"}}}])` against the same with `{$multiply: ["$v", 2]}`.
//!
//! Every answer is checked (all documents found; the sum right). The
//! report gives each query's documents/s and µs per document (the median
//! run), and the JavaScript's extra µs per document.

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::Collection;

use crate::report::Outcome;
use crate::workload::Target;
use crate::Args;

const BATCH: u64 = 1000;

async fn load(coll: &Collection<Document>, docs: u64) -> Result<(), String> {
    coll.drop()
        .await
        .map_err(|e| format!("drop js_cost: {e}"))?;
    let mut start = 0;
    while start < docs {
        let end = (start + BATCH * 4).min(docs);
        let mut inserts = Vec::new();
        let mut at = start;
        while at < end {
            let stop = (at + BATCH).min(end);
            let batch: Vec<Document> = (at..stop)
                .map(|i| doc! {"_id": i as i64, "v": (i % 1000) as i32})
                .collect();
            inserts.push(async move { coll.insert_many(batch).await });
            at = stop;
        }
        futures::future::try_join_all(inserts)
            .await
            .map_err(|e| format!("load js_cost: {e}"))?;
        start = end;
    }
    Ok(())
}

async fn time_find(
    coll: &Collection<Document>,
    filter: Document,
    docs: u64,
) -> Result<Duration, String> {
    let started = Instant::now();
    let found: Vec<Document> = coll
        .find(filter.clone())
        .batch_size(10_000)
        .await
        .map_err(|e| format!("{filter}: {e}"))?
        .try_collect()
        .await
        .map_err(|e| format!("{filter}: {e}"))?;
    let elapsed = started.elapsed();
    if found.len() as u64 != docs {
        return Err(format!(
            "{filter}: {} documents, expected {docs}",
            found.len()
        ));
    }
    Ok(elapsed)
}

async fn time_aggregate(
    coll: &Collection<Document>,
    w: Document,
    expected_sum: f64,
) -> Result<Duration, String> {
    let pipeline = vec![
        doc! {"$addFields": {"w": w}},
        doc! {"$group": {"_id": Bson::Null, "s": {"$sum": "$w"}}},
    ];
    let started = Instant::now();
    let out: Vec<Document> = coll
        .aggregate(pipeline.clone())
        .await
        .map_err(|e| format!("{pipeline:?}: {e}"))?
        .try_collect()
        .await
        .map_err(|e| format!("{pipeline:?}: {e}"))?;
    let elapsed = started.elapsed();
    let sum = match out.first().and_then(|d| d.get("s")) {
        Some(Bson::Double(f)) => *f,
        Some(Bson::Int32(i)) => f64::from(*i),
        Some(Bson::Int64(i)) => *i as f64,
        other => return Err(format!("unexpected group result {other:?}")),
    };
    if sum != expected_sum {
        return Err(format!("sum {sum}, expected {expected_sum}"));
    }
    Ok(elapsed)
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

fn line(label: &str, query: &str, runs: Vec<Duration>, docs: u64) -> (String, f64) {
    let m = median(runs);
    let secs = m.as_secs_f64();
    let per_doc_us = secs * 1e6 / docs as f64;
    (
        format!(
            "RESULT workload=js-cost query={query} docs={docs} secs={secs:.3} docs_per_sec={:.0} us_per_doc={per_doc_us:.3}  # {label}",
            docs as f64 / secs
        ),
        per_doc_us,
    )
}

/// `js-cost`.
pub async fn js_cost(args: &Args, target: &Target) -> Result<Outcome, String> {
    let docs = args.js_docs;
    let repeats = args.js_repeats.max(1);
    let coll = target
        .client
        .database(&target.db)
        .collection::<Document>("js_cost");
    println!("js-cost: loading {docs} documents");
    load(&coll, docs).await?;
    let expected_sum: f64 = (0..docs).map(|i| 2.0 * (i % 1000) as f64).sum();
    let where_filter = doc! {"$where": "this.v >= 0"};
    let expr_filter = doc! {"$expr": {"$gte": ["$v", 0]}};
    let function =
        doc! {"$function": {"body": "function(v) { return v * 2 }", "args": ["$v"], "lang": "js"}};
    let multiply = doc! {"$multiply": ["$v", 2]};
    let (mut expr_runs, mut where_runs, mut mul_runs, mut fn_runs) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeats {
        expr_runs.push(time_find(&coll, expr_filter.clone(), docs).await?);
        where_runs.push(time_find(&coll, where_filter.clone(), docs).await?);
        mul_runs.push(time_aggregate(&coll, multiply.clone(), expected_sum).await?);
        fn_runs.push(time_aggregate(&coll, function.clone(), expected_sum).await?);
    }
    let (expr_line, expr_us) = line("find $expr", "find-expr", expr_runs, docs);
    let (where_line, where_us) = line("find $where", "find-where", where_runs, docs);
    let (mul_line, mul_us) = line("aggregate $multiply", "agg-multiply", mul_runs, docs);
    let (fn_line, fn_us) = line("aggregate $function", "agg-function", fn_runs, docs);
    let mut summary = vec![expr_line, where_line, mul_line, fn_line];
    summary.push(format!(
        "RESULT workload=js-cost query=where-extra us_per_doc={:.3}",
        where_us - expr_us
    ));
    summary.push(format!(
        "RESULT workload=js-cost query=function-extra us_per_doc={:.3}",
        fn_us - mul_us
    ));
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}
