//! Resource workloads, on the server under test only: what one request or
//! a handful of idle cursors costs the server.
//!
//! * `unwind`: one document `{_id: n, arr: [0, 1, … n-1]}` per size in
//!   `--unwind-sizes`, then `aggregate([{$match: {_id: n}}, {$unwind:
//!   "$arr"}, {$count: "n"}])`, timed `--unwind-repeats` times per size
//!   (the count is checked). A run still going after `--unwind-timeout`
//!   seconds is abandoned and reported as such, and the larger sizes are
//!   skipped: an O(n²) `$unwind` takes minutes at 100,000 elements.
//! * `cursor-memory`: `--cursor-docs` documents of about 100 bytes with a
//!   random, unindexed `r`, then `--cursors` finds sorted on `r` with
//!   `batchSize: 1`, each left open after its first batch, as an
//!   application that forgot its cursors leaves them. The server's RSS is
//!   printed before, while opening (every tenth cursor) and after; opening
//!   stops early when RSS passes `--cursor-rss-cap-mb`. Then three cursors
//!   are read to the end (checking the order and the count) and all are
//!   killed.

use std::time::{Duration, Instant};

use mongodb::bson::{doc, Bson, Document};

use crate::report::{self, Outcome};
use crate::workload::Target;
use crate::Args;

const UNWIND_COLLECTION: &str = "unwind_probe";
const CURSOR_COLLECTION: &str = "cursor_probe";

pub async fn unwind(args: &Args, target: &Target) -> Result<Outcome, String> {
    let t = target.for_collection(UNWIND_COLLECTION);
    let err = |e: mongodb::error::Error| format!("{}: unwind: {e}", t.label);
    t.docs.drop().await.map_err(err)?;
    let mut summary = Vec::new();
    let timeout = Duration::from_secs_f64(args.unwind_timeout);
    for &n in &args.unwind_sizes {
        let arr: Vec<Bson> = (0..n as i64).map(Bson::Int64).collect();
        t.docs
            .insert_one(doc! {"_id": n as i64, "arr": arr})
            .await
            .map_err(err)?;
        let mut times = Vec::new();
        let mut abandoned = false;
        for _ in 0..args.unwind_repeats.max(1) {
            let pipeline = vec![
                doc! {"$match": {"_id": n as i64}},
                doc! {"$unwind": "$arr"},
                doc! {"$count": "n"},
            ];
            let started = Instant::now();
            let run = async {
                use futures::TryStreamExt;
                let cursor = t.docs.aggregate(pipeline).await?;
                cursor.try_collect::<Vec<Document>>().await
            };
            match tokio::time::timeout(timeout, run).await {
                Err(_) => {
                    abandoned = true;
                    break;
                }
                Ok(result) => {
                    let docs = result.map_err(err)?;
                    let counted = docs.first().and_then(|d| d.get("n")).and_then(as_i64);
                    if counted != Some(n as i64) {
                        return Err(format!(
                            "{}: unwind of {n} elements counted {counted:?}",
                            t.label
                        ));
                    }
                    times.push(started.elapsed().as_secs_f64());
                }
            }
        }
        let line = if abandoned {
            format!(
                "RESULT workload=unwind target={} elements={n} abandoned_after_s={:.0}",
                t.label,
                timeout.as_secs_f64()
            )
        } else {
            let median = report::median(&times).unwrap_or(0.0);
            format!(
                "RESULT workload=unwind target={} elements={n} runs={} median_s={median:.4} min_s={:.4} max_s={:.4}",
                t.label,
                times.len(),
                times.iter().copied().fold(f64::INFINITY, f64::min),
                times.iter().copied().fold(0.0, f64::max),
            )
        };
        println!("{line}");
        summary.push(line);
        if abandoned {
            break;
        }
    }
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}

pub async fn cursor_memory(args: &Args, target: &Target) -> Result<Outcome, String> {
    let t = target.for_collection(CURSOR_COLLECTION);
    let err = |e: mongodb::error::Error| format!("{}: cursor-memory: {e}", t.label);
    let db = t.client.database(&t.db);
    t.docs.drop().await.map_err(err)?;
    let docs = args.cursor_docs;
    let mut batch = Vec::with_capacity(1000);
    for i in 0..docs {
        // A cheap permutation of 0..2^31 as the sort field, so every
        // document has its own place in the order.
        let r = (i.wrapping_mul(2_654_435_761) % (1 << 31)) as i64;
        batch.push(doc! {"_id": i as i64, "r": r, "pad": "x".repeat(60)});
        if batch.len() == 1000 || i + 1 == docs {
            t.docs.insert_many(&batch).await.map_err(err)?;
            batch.clear();
        }
    }
    let pid = args.rss_pid;
    let rss = |pid: Option<u32>| pid.and_then(|p| report::read_memory(p).ok());
    let before = rss(pid);
    let mut summary = Vec::new();
    let mut ids = Vec::new();
    let started = Instant::now();
    let mut peak_kib = before.as_ref().map_or(0, |m| m.rss_kib);
    let mut stopped_early = None;
    for i in 0..args.cursors {
        let reply = db
            .run_command(doc! {
                "find": CURSOR_COLLECTION,
                "filter": {},
                "sort": {"r": 1},
                "batchSize": 1,
            })
            .await
            .map_err(err)?;
        let id = reply
            .get_document("cursor")
            .ok()
            .and_then(|c| c.get("id"))
            .and_then(as_i64)
            .unwrap_or(0);
        ids.push(id);
        if (i + 1) % 10 == 0 {
            if let Some(m) = rss(pid) {
                peak_kib = peak_kib.max(m.rss_kib);
                println!(
                    "cursor-memory: {} cursors open, RSS {:.1} MiB",
                    i + 1,
                    m.rss_kib as f64 / 1024.0
                );
                if m.rss_kib / 1024 > args.cursor_rss_cap_mb {
                    stopped_early = Some(i + 1);
                    break;
                }
            }
        }
    }
    let opened = ids.len();
    let open_secs = started.elapsed().as_secs_f64();
    let after = rss(pid);
    if let Some(m) = &after {
        peak_kib = peak_kib.max(m.rss_kib);
    }
    // A few cursors read to the end: every document, in order.
    for &id in ids.iter().filter(|&&id| id != 0).take(3) {
        let (n, ordered) = drain(&db, id).await.map_err(err)?;
        if n + 1 != docs || !ordered {
            return Err(format!(
                "{}: cursor-memory: a cursor returned {} documents after its first (want {}), in order: {ordered}",
                t.label,
                n,
                docs - 1
            ));
        }
    }
    let live: Vec<i64> = ids.iter().copied().filter(|&id| id != 0).collect();
    if !live.is_empty() {
        // Best effort: the drained ones are gone already.
        let _ = db
            .run_command(doc! {"killCursors": CURSOR_COLLECTION, "cursors": live})
            .await;
    }
    let mib = |m: Option<report::MemoryUse>| m.map_or(-1.0, |m| m.rss_kib as f64 / 1024.0);
    let line = format!(
        "RESULT workload=cursor-memory target={} docs={docs} cursors={opened} open_s={open_secs:.1} rss_before_mib={:.1} rss_after_mib={:.1} rss_peak_mib={:.1}{}",
        t.label,
        mib(before),
        mib(after),
        peak_kib as f64 / 1024.0,
        stopped_early.map_or(String::new(), |n| format!(
            " stopped_at_rss_cap_after={n}"
        )),
    );
    println!("{line}");
    summary.push(line);
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}

/// Reads cursor `id` to its end; returns how many documents came and
/// whether `r` never went down.
async fn drain(db: &mongodb::Database, id: i64) -> Result<(u64, bool), mongodb::error::Error> {
    let mut n = 0u64;
    let mut last = i64::MIN;
    let mut ordered = true;
    let mut id = id;
    while id != 0 {
        let reply = db
            .run_command(doc! {"getMore": id, "collection": CURSOR_COLLECTION, "batchSize": 10_000})
            .await?;
        let Ok(cursor) = reply.get_document("cursor") else {
            break;
        };
        if let Ok(batch) = cursor.get_array("nextBatch") {
            for d in batch {
                let r = d.as_document().and_then(|d| d.get("r")).and_then(as_i64);
                let r = r.unwrap_or(i64::MIN);
                ordered &= r >= last;
                last = r;
                n += 1;
            }
        }
        id = cursor.get("id").and_then(as_i64).unwrap_or(0);
    }
    Ok((n, ordered))
}

fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) => Some(*f as i64),
        _ => None,
    }
}
