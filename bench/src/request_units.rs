//! `ru-enforcement`: how closely a server holds a collection to its
//! provisioned throughput, on the server under test only.
//!
//! The server must run with `--default-throughput T` (`--ru-throughput`
//! tells the benchmark the same T). For each count in `--ru-partitions`,
//! a collection `ru_<n>` is sharded on `{k: "hashed"}` over n partitions
//! and filled with `--ru-docs` documents of about 10 KB; then
//! `--concurrency` clients read random documents by `_id` and shard key
//! for `--duration` seconds (after `--warmup`), each honouring the
//! `RetryAfterMs` of a 16500 before its next request, as a Cosmos DB
//! client does. Served RU/s is the reads answered times the charge of one
//! read (from `getLastRequestStatistics`); the figure reported is served
//! ÷ provisioned, which should be close to 1.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongodb::bson::{doc, Bson, Document};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::Client;
use rand::Rng;

use crate::report::Outcome;
use crate::workload::Target;
use crate::Args;

/// Bytes of each document (a point read of it costs about 1.8 RU).
const DOC_BYTES: usize = 10 * 1024;

fn document(i: i64) -> Document {
    doc! {"_id": i, "k": i, "pad": "x".repeat(DOC_BYTES - 40)}
}

/// The wait a 16500 asks for, or `None` for any other outcome.
fn retry_after(e: &mongodb::error::Error) -> Option<u64> {
    let message = match &*e.kind {
        ErrorKind::Command(c) if c.code == 16500 => c.message.clone(),
        ErrorKind::Write(WriteFailure::WriteError(w)) if w.code == 16500 => w.message.clone(),
        ErrorKind::InsertMany(m) => m
            .write_errors
            .iter()
            .flatten()
            .find(|w| w.code == 16500)?
            .message
            .clone(),
        _ => return None,
    };
    let rest = message.split("RetryAfterMs=").nth(1)?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Fills `ru_<n>`, inserting again what a throttled partition refused.
async fn fill(t: &Target, n: u32, docs: u64) -> Result<(), String> {
    let db = t.client.database(&t.db);
    let name = format!("ru_{n}");
    db.collection::<Document>(&name)
        .drop()
        .await
        .map_err(|e| e.to_string())?;
    db.client()
        .database("admin")
        .run_command(doc! {
            "shardCollection": format!("{}.{name}", t.db),
            "key": {"k": "hashed"},
            "numInitialChunks": n as i64,
        })
        .await
        .map_err(|e| format!("shardCollection {name}: {e}"))?;
    let coll = db.collection::<Document>(&name);
    for i in 0..docs as i64 {
        loop {
            match coll.insert_one(document(i)).await {
                Ok(_) => break,
                Err(e) => match retry_after(&e) {
                    Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                    None => return Err(format!("loading {name}: {e}")),
                },
            }
        }
    }
    Ok(())
}

/// The charge of one point read, asked on the connection that made it.
async fn read_charge(args: &Args, t: &Target, name: &str) -> Result<f64, String> {
    let mut options = args.client_options(&args.uri).await?;
    options.max_pool_size = Some(1);
    let client = Client::with_options(options).map_err(|e| e.to_string())?;
    let db = client.database(&t.db);
    loop {
        match db
            .collection::<Document>(name)
            .find_one(doc! {"_id": 0i64, "k": 0i64})
            .await
        {
            Ok(_) => break,
            Err(e) => match retry_after(&e) {
                Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                None => return Err(e.to_string()),
            },
        }
    }
    let stats = db
        .run_command(doc! {"getLastRequestStatistics": 1})
        .await
        .map_err(|e| e.to_string())?;
    match stats.get("RequestCharge") {
        Some(Bson::Double(v)) => Ok(*v),
        other => Err(format!("RequestCharge is {other:?}")),
    }
}

/// RU charged to `name` so far, from `collStats`.
async fn consumed(t: &Target, name: &str) -> Result<f64, String> {
    let stats = t
        .client
        .database(&t.db)
        .run_command(doc! {"collStats": name})
        .await
        .map_err(|e| e.to_string())?;
    stats
        .get_document("requestUnits")
        .ok()
        .and_then(|u| u.get_f64("consumed").ok())
        .ok_or_else(|| format!("no requestUnits.consumed in {stats}"))
}

pub async fn ru_enforcement(args: &Args, target: &Target) -> Result<Outcome, String> {
    let mut summary = vec![format!(
        "ru-enforcement: provisioned {} RU/s, {} clients, {}s",
        args.ru_throughput,
        args.max_concurrency(),
        args.duration
    )];
    for &n in &args.ru_partitions {
        fill(target, n, args.ru_docs).await?;
        let name = format!("ru_{n}");
        let charge = read_charge(args, target, &name).await?;
        let served = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let counting = Arc::new(AtomicBool::new(false));
        let end = Instant::now() + Duration::from_secs_f64(args.warmup + args.duration);
        let mut tasks = Vec::new();
        for _ in 0..args.max_concurrency() {
            let coll = target
                .client
                .database(&target.db)
                .collection::<Document>(&name);
            let (served, refused, counting) = (served.clone(), refused.clone(), counting.clone());
            let docs = args.ru_docs as i64;
            tasks.push(tokio::spawn(async move {
                while Instant::now() < end {
                    let k = rand::rng().random_range(0..docs);
                    match coll.find_one(doc! {"_id": k, "k": k}).await {
                        Ok(None) => return Err(format!("document {k} is missing")),
                        Ok(Some(_)) => {
                            if counting.load(Ordering::Relaxed) {
                                served.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) => match retry_after(&e) {
                            Some(ms) => {
                                refused.fetch_add(1, Ordering::Relaxed);
                                tokio::time::sleep(Duration::from_millis(ms)).await;
                            }
                            None => return Err(e.to_string()),
                        },
                    }
                }
                Ok(())
            }));
        }
        tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
        counting.store(true, Ordering::Relaxed);
        let from = Instant::now();
        let consumed_before = consumed(target, &name).await?;
        for t in tasks {
            t.await.map_err(|e| e.to_string())??;
        }
        let secs = from.elapsed().as_secs_f64();
        let server_rate = (consumed(target, &name).await? - consumed_before) / secs;
        let rate = served.load(Ordering::Relaxed) as f64 * charge / secs;
        let ratio = rate / args.ru_throughput as f64;
        let line = format!(
            "RESULT workload=ru-enforcement partitions={n} provisioned={} served_rus={rate:.0} ratio={ratio:.3} read_charge={charge} server_consumed_rus={server_rate:.0} refusals={}",
            args.ru_throughput,
            refused.load(Ordering::Relaxed)
        );
        println!("{line}");
        summary.push(line);
    }
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}
