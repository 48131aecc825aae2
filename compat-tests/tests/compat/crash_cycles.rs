//! Crash cycles: the whole engine under `kill -9`, again and again.
//!
//! Each cycle runs a mixed workload from several driver clients on one
//! data directory — inserts with known unique `_id`s, `$inc` on counter
//! documents, deletes of known documents, index builds and drops,
//! partition splits (the server runs with a small split size) and
//! `shardCollection` of an unsharded collection that holds data — kills
//! the server with SIGKILL at a random moment, restarts it and checks:
//!
//! - every acknowledged insert is there exactly once, nothing that was
//!   never sent is, and every acknowledged delete is gone;
//! - every counter is at least its acknowledged increments and at most
//!   those plus the increments in flight at the kill (with retryable
//!   writes off, an unacknowledged write may or may not have applied —
//!   the only slack);
//! - an acknowledged `createIndexes` or `dropIndexes` holds;
//! - `validate` passes for every collection, and every index returns the
//!   documents a collection scan returns for a sample of queries;
//! - the partition map of every sharded collection tiles the signed
//!   64-bit hash space (`config.chunks`), and agrees with `collStats`.
//!
//! Outcomes the kill left unknown are resolved by what the restarted
//! server shows, and must stay that way in later cycles.
//!
//! `SHARDGATE_CRASH_CYCLES` sets the number of cycles (default 20),
//! `SHARDGATE_CRASH_SEED` the seed (printed at the start; the workload's
//! choices follow from it, the timing of the kill against the writes
//! does not repeat exactly).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    config_chunks, failure,
    mongodb::{options::IndexOptions, Client, Collection, IndexModel},
    num, Rng, TestServer,
};
use futures::TryStreamExt;

const DB: &str = "cycles";
/// Sharded from the start; takes most inserts, deletes and `$set`s.
const DOCS: &str = "docs";
/// Sharded; `$inc` targets.
const COUNTERS: &str = "counters";
const N_COUNTERS: i32 = 16;
/// Created unsharded with data each cycle, sharded during the workload.
const UNSHARDED: [&str; 2] = ["u0", "u1"];
const U_PRELOAD: usize = 600;
/// Partitions split past this size, so they split during the run.
const SPLIT_BYTES: &str = "150000";
/// Beyond this many live documents in `docs` the deleter deletes more
/// than the inserters insert, so long runs stay small.
const DOCS_CAP: usize = 4_000;
/// The secondary indexes the index client builds and drops.
const INDEXES: [(&str, &str); 3] = [("k_1", "k"), ("g_1_k_-1", "g"), ("s_1", "s")];

fn index_model(name: &str) -> IndexModel {
    let keys = match name {
        "k_1" => doc! {"k": 1},
        "g_1_k_-1" => doc! {"g": 1, "k": -1},
        _ => doc! {"s": 1},
    };
    IndexModel::builder()
        .keys(keys)
        .options(IndexOptions::builder().name(name.to_string()).build())
        .build()
}

fn pad(rng: &mut Rng) -> String {
    "p".repeat(150 + rng.below(150) as usize)
}

/// The document inserted with `_id` `id`.
fn new_doc(id: &str, rng: &mut Rng) -> Document {
    doc! {
        "_id": id,
        "k": rng.below(1000) as i32,
        "g": rng.below(8) as i32,
        "s": format!("s{}", rng.below(50)),
        "pad": pad(rng),
    }
}

/// What the test knows about one collection's documents.
#[derive(Default)]
struct Docs {
    /// Every `_id` ever sent in an insert.
    sent: HashSet<String>,
    /// Present for sure (acknowledged insert, or seen after a restart),
    /// and not deleted since.
    present: HashSet<String>,
    /// Acknowledged deleted; never sent again.
    gone: HashSet<String>,
    /// Unknown outcome at the kill: inserts and deletes.
    maybe_inserted: HashSet<String>,
    maybe_deleted: HashSet<String>,
}

/// The outcome of one worker's operations in a cycle.
#[derive(Default)]
struct Outcome {
    inserted: Vec<(String, String)>,
    maybe_inserted: Vec<(String, String)>,
    deleted: Vec<(String, String)>,
    maybe_deleted: Vec<(String, String)>,
    /// Counter `_id` → increments acknowledged / in flight.
    incs: HashMap<i32, i64>,
    maybe_incs: HashMap<i32, i64>,
    /// (collection, index name, created?) in order, and the unknown one.
    index_ops: Vec<(String, String, bool)>,
    maybe_index_op: Option<(String, String, bool)>,
    /// Server errors other than the kill, shown at the end of the cycle.
    errors: Vec<String>,
    /// Whether `shardCollection` was acknowledged (`Some(true)`), in
    /// flight (`Some(false)`) or not sent.
    sharded: Option<bool>,
    ops: u64,
}

impl Outcome {
    /// Notes a failed operation: `Err(())` when the server is gone (the
    /// worker stops), `Ok(())` for a server error (the worker goes on).
    fn failed(&mut self, what: &str, e: &compat_tests::mongodb::error::Error) -> Result<(), ()> {
        match failure(e) {
            Some(f) => {
                self.errors
                    .push(format!("{what}: {} {}: {}", f.code, f.code_name, f.message));
                Ok(())
            }
            None => Err(()),
        }
    }
}

struct Workload {
    stop: Arc<AtomicBool>,
    cycle: usize,
    seed: u64,
}

impl Workload {
    fn rng(&self, worker: u64) -> Rng {
        Rng::new(
            self.seed ^ (self.cycle as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (worker << 48),
        )
    }

    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }
}

async fn client(srv: &TestServer) -> Client {
    srv.client_with(|o| {
        o.server_selection_timeout = Some(Duration::from_secs(2));
        o.connect_timeout = Some(Duration::from_secs(2));
        o.retry_writes = Some(false);
        o.retry_reads = Some(false);
    })
    .await
}

/// Inserts into `docs` (and, when `u` is given, into that collection),
/// single documents and small batches.
async fn inserter(w: Arc<Workload>, client: Client, worker: u64, u: Option<String>) -> Outcome {
    let mut rng = w.rng(worker);
    let mut out = Outcome::default();
    let db = client.database(DB);
    let mut i = 0u64;
    while w.running() {
        let coll_name = match &u {
            Some(u) if rng.below(3) == 0 => u.clone(),
            _ => DOCS.to_string(),
        };
        let coll = db.collection::<Document>(&coll_name);
        let n = if rng.below(3) == 0 {
            1 + rng.below(20)
        } else {
            1
        };
        let ids: Vec<String> = (0..n)
            .map(|k| format!("c{}-w{worker}-{i}-{k}", w.cycle))
            .collect();
        let docs: Vec<Document> = ids.iter().map(|id| new_doc(id, &mut rng)).collect();
        i += 1;
        out.ops += 1;
        let r = if n == 1 {
            coll.insert_one(docs.into_iter().next().unwrap_or_default())
                .await
                .map(|_| ())
        } else {
            coll.insert_many(docs).await.map(|_| ())
        };
        let tagged = ids.into_iter().map(|id| (coll_name.clone(), id));
        match r {
            Ok(()) => out.inserted.extend(tagged),
            Err(e) => {
                out.maybe_inserted.extend(tagged);
                if out.failed("insert", &e).is_err() {
                    break;
                }
            }
        }
    }
    out
}

/// `$inc` on the counters, one at a time or several in one `updateMany`;
/// now and then a `$set` that moves a document's index keys.
async fn updater(w: Arc<Workload>, client: Client, worker: u64, targets: Vec<String>) -> Outcome {
    let mut rng = w.rng(worker);
    let mut out = Outcome::default();
    let counters = client.database(DB).collection::<Document>(COUNTERS);
    let docs = client.database(DB).collection::<Document>(DOCS);
    while w.running() {
        out.ops += 1;
        match rng.below(10) {
            0..=5 => {
                let id = rng.below(N_COUNTERS as u64) as i32;
                match counters
                    .update_one(doc! {"_id": id}, doc! {"$inc": {"n": 1}})
                    .await
                {
                    Ok(r) => {
                        assert_eq!(
                            r.matched_count, 1,
                            "cycle {}: $inc of counter {id}",
                            w.cycle
                        );
                        *out.incs.entry(id).or_default() += 1;
                    }
                    Err(e) => {
                        *out.maybe_incs.entry(id).or_default() += 1;
                        if out.failed("$inc", &e).is_err() {
                            break;
                        }
                    }
                }
            }
            6..=7 => {
                let lo = rng.below(N_COUNTERS as u64 - 4) as i32;
                let ids: Vec<i32> = (lo..lo + 4).collect();
                match counters
                    .update_many(doc! {"_id": {"$in": &ids}}, doc! {"$inc": {"n": 1}})
                    .await
                {
                    Ok(r) => {
                        assert_eq!(r.matched_count, 4, "cycle {}: $inc of {ids:?}", w.cycle);
                        for id in ids {
                            *out.incs.entry(id).or_default() += 1;
                        }
                    }
                    Err(e) => {
                        for id in ids {
                            *out.maybe_incs.entry(id).or_default() += 1;
                        }
                        if out.failed("$inc many", &e).is_err() {
                            break;
                        }
                    }
                }
            }
            _ => {
                if targets.is_empty() {
                    continue;
                }
                let id = &targets[rng.below(targets.len() as u64) as usize];
                let set = doc! {"$set": {"k": rng.below(1000) as i32, "s": format!("s{}", rng.below(50))}};
                if let Err(e) = docs.update_one(doc! {"_id": id}, set).await {
                    if out.failed("$set", &e).is_err() {
                        break;
                    }
                }
            }
        }
    }
    out
}

/// Deletes known documents of `docs`, one at a time or by `$in`.
async fn deleter(
    w: Arc<Workload>,
    client: Client,
    worker: u64,
    mut targets: Vec<String>,
) -> Outcome {
    let mut rng = w.rng(worker);
    let mut out = Outcome::default();
    let docs = client.database(DB).collection::<Document>(DOCS);
    // Over the cap, delete in larger batches.
    let batch = if targets.len() > DOCS_CAP { 40 } else { 3 };
    while w.running() && !targets.is_empty() {
        out.ops += 1;
        let n = (1 + rng.below(batch)).min(targets.len() as u64) as usize;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let at = rng.below(targets.len() as u64) as usize;
            ids.push(targets.swap_remove(at));
        }
        let r = if n == 1 {
            docs.delete_one(doc! {"_id": &ids[0]}).await
        } else {
            docs.delete_many(doc! {"_id": {"$in": &ids}}).await
        };
        let tagged = ids.into_iter().map(|id| (DOCS.to_string(), id));
        match r {
            Ok(r) => {
                assert_eq!(
                    r.deleted_count as usize, n,
                    "cycle {}: a known document was not there to delete",
                    w.cycle
                );
                out.deleted.extend(tagged);
            }
            Err(e) => {
                out.maybe_deleted.extend(tagged);
                if out.failed("delete", &e).is_err() {
                    break;
                }
            }
        }
        if batch == 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    out
}

/// Builds and drops secondary indexes on `docs` and on `u`.
async fn indexer(w: Arc<Workload>, client: Client, worker: u64, u: String) -> Outcome {
    let mut rng = w.rng(worker);
    let mut out = Outcome::default();
    let db = client.database(DB);
    while w.running() {
        out.ops += 1;
        let coll_name = if rng.below(2) == 0 {
            DOCS.to_string()
        } else {
            u.clone()
        };
        let coll = db.collection::<Document>(&coll_name);
        let (name, _) = INDEXES[rng.below(INDEXES.len() as u64) as usize];
        let create = rng.below(2) == 0;
        let r = if create {
            coll.create_index(index_model(name)).await.map(|_| ())
        } else {
            coll.drop_index(name).await.map(|_| ())
        };
        match r {
            Ok(()) => out.index_ops.push((coll_name, name.to_string(), create)),
            Err(e) => match failure(&e) {
                // Dropping an index that is not there.
                Some(f) if f.code == 27 => out.index_ops.push((coll_name, name.to_string(), false)),
                Some(_) => {
                    out.maybe_index_op = Some((coll_name, name.to_string(), create));
                    let _ = out.failed("index", &e);
                    // Later operations on it are known again.
                }
                None => {
                    out.maybe_index_op = Some((coll_name, name.to_string(), create));
                    break;
                }
            },
        }
        tokio::time::sleep(Duration::from_millis(rng.below(100))).await;
    }
    out
}

/// Shards `u` (which holds data) after `delay`.
async fn sharder(w: Arc<Workload>, client: Client, u: String, delay: Duration) -> Outcome {
    let mut out = Outcome::default();
    tokio::time::sleep(delay).await;
    if !w.running() {
        return out;
    }
    out.ops += 1;
    out.sharded = Some(false);
    let r = client
        .database("admin")
        .run_command(doc! {"shardCollection": format!("{DB}.{u}"), "key": {"_id": "hashed"}})
        .await;
    match r {
        Ok(reply) => {
            assert_ok(&reply);
            out.sharded = Some(true);
        }
        Err(e) => {
            let _ = out.failed("shardCollection", &e);
        }
    }
    out
}

/// Every `_id` in `coll` with how often a full scan returned it.
async fn scan_ids(srv: &TestServer, coll: &str) -> HashMap<String, usize> {
    let docs: Vec<Document> = srv
        .db(DB)
        .collection::<Document>(coll)
        .find(doc! {})
        .projection(doc! {"_id": 1})
        .batch_size(10_000)
        .await
        .unwrap_or_else(|e| panic!("scan {coll}: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("scan {coll}: {e}"));
    let mut seen = HashMap::new();
    for d in docs {
        match d.get("_id") {
            Some(Bson::String(s)) => *seen.entry(s.clone()).or_default() += 1,
            other => panic!("{coll}: unexpected _id {other:?}"),
        }
    }
    seen
}

/// The `_id`s a query returns, sorted, with `hint`.
async fn hinted(coll: &Collection<Document>, filter: &Document, hint: Document) -> Vec<String> {
    let shown = format!("{filter} hint {hint}");
    let docs: Vec<Document> = coll
        .find(filter.clone())
        .hint(compat_tests::mongodb::options::Hint::Keys(hint))
        .projection(doc! {"_id": 1})
        .batch_size(10_000)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    let mut ids: Vec<String> = docs
        .iter()
        .map(|d| d.get_str("_id").unwrap_or_default().to_string())
        .collect();
    ids.sort();
    ids
}

/// Index names of `coll` other than `_id_`, with their key documents.
async fn secondary_indexes(srv: &TestServer, coll: &str) -> BTreeMap<String, Document> {
    let specs: Vec<Document> = srv
        .db(DB)
        .run_cursor_command(doc! {"listIndexes": coll})
        .await
        .unwrap_or_else(|e| panic!("listIndexes {coll}: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("listIndexes {coll}: {e}"));
    specs
        .into_iter()
        .filter_map(|s| {
            let name = s.get_str("name").ok()?.to_string();
            let key = s.get_document("key").ok()?.clone();
            (name != "_id_").then_some((name, key))
        })
        .collect()
}

/// `validate`, every index against a collection scan, and the partition
/// map of a sharded collection.
async fn check_structure(srv: &TestServer, cycle: usize, coll: &str, rng: &mut Rng) {
    let v = srv
        .db(DB)
        .run_command(doc! {"validate": coll})
        .await
        .unwrap_or_else(|e| panic!("cycle {cycle}: validate {coll}: {e}"));
    assert_eq!(
        v.get_bool("valid"),
        Ok(true),
        "cycle {cycle}: validate {coll}: {v}"
    );

    let c = srv.db(DB).collection::<Document>(coll);
    for (name, key) in secondary_indexes(srv, coll).await {
        let field = key.keys().next().cloned().unwrap_or_default();
        for _ in 0..3 {
            let filter = match field.as_str() {
                "k" => {
                    let lo = rng.below(1000) as i32;
                    doc! {"k": {"$gte": lo, "$lt": lo + 1 + rng.below(200) as i32}}
                }
                "g" => doc! {"g": rng.below(8) as i32},
                _ => {
                    doc! {"s": {"$in": [format!("s{}", rng.below(50)), format!("s{}", rng.below(50))]}}
                }
            };
            let by_index = hinted(&c, &filter, key.clone()).await;
            let by_scan = hinted(&c, &filter, doc! {"$natural": 1}).await;
            assert_eq!(
                by_index, by_scan,
                "cycle {cycle}: index {name} of {coll} disagrees with a collection scan for {filter}"
            );
        }
    }

    let stats = srv
        .db(DB)
        .run_command(doc! {"collStats": coll})
        .await
        .unwrap_or_else(|e| panic!("cycle {cycle}: collStats {coll}: {e}"));
    if stats.get_bool("sharded") == Ok(true) {
        // Asserts the chunks tile the hash space.
        let chunks = config_chunks(&srv.client, &format!("{DB}.{coll}")).await;
        assert_eq!(
            chunks.len() as i64,
            num(&stats, "nchunks"),
            "cycle {cycle}: config.chunks and collStats of {coll} disagree: {chunks:?}"
        );
    }
}

fn now_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_cycles_keep_every_acknowledged_change() {
    let cycles = env_number("SHARDGATE_CRASH_CYCLES").unwrap_or(20) as usize;
    let seed = env_number("SHARDGATE_CRASH_SEED").unwrap_or_else(now_seed);
    println!("crash cycles: {cycles} cycles, SHARDGATE_CRASH_SEED={seed}");
    let mut rng = Rng::new(seed);
    let args = [
        "--partition-split-bytes",
        SPLIT_BYTES,
        "--initial-partitions",
        "2",
    ];
    let mut srv = TestServer::start_with_args(&args).await;
    let started = Instant::now();

    // Set up: the sharded collections and the counters, all acknowledged.
    let admin = srv.db("admin");
    for coll in [DOCS, COUNTERS] {
        assert_ok(
            &admin
                .run_command(
                    doc! {"shardCollection": format!("{DB}.{coll}"), "key": {"_id": "hashed"}},
                )
                .await
                .unwrap(),
        );
    }
    srv.db(DB)
        .collection::<Document>(COUNTERS)
        .insert_many(
            (0..N_COUNTERS)
                .map(|i| doc! {"_id": i, "n": 0_i64})
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();

    let mut known: HashMap<String, Docs> = HashMap::new();
    let mut counters: Vec<i64> = vec![0; N_COUNTERS as usize];
    // (collection, index) → exists for sure (true) / absent for sure (false).
    let mut indexes: HashMap<(String, String), bool> = HashMap::new();

    for cycle in 0..cycles {
        srv.rearm_watchdog();
        // A collection that holds data, unsharded, to shard under load.
        let u = UNSHARDED[cycle % UNSHARDED.len()].to_string();
        let db = srv.db(DB);
        db.collection::<Document>(&u).drop().await.unwrap();
        known.remove(&u);
        indexes.retain(|(c, _), _| *c != u);
        let uc = db.collection::<Document>(&u);
        let mut state = Docs::default();
        let preload: Vec<String> = (0..U_PRELOAD)
            .map(|i| format!("c{cycle}-pre-{i}"))
            .collect();
        let docs: Vec<Document> = preload.iter().map(|id| new_doc(id, &mut rng)).collect();
        uc.insert_many(docs).await.unwrap();
        state.sent.extend(preload.iter().cloned());
        state.present.extend(preload);
        known.insert(u.clone(), state);

        let live: Vec<String> = known
            .get(DOCS)
            .map(|d| d.present.iter().cloned().collect())
            .unwrap_or_default();
        let mut live_sorted = live.clone();
        live_sorted.sort();
        let (to_delete, to_update) = live_sorted.split_at(live_sorted.len() / 2);

        let w = Arc::new(Workload {
            stop: Arc::new(AtomicBool::new(false)),
            cycle,
            seed,
        });
        let run_for = Duration::from_millis(300 + rng.below(2200));
        // Half the time just before the kill, so that the kill often
        // lands in the middle of the copy.
        let run_ms = run_for.as_millis() as u64;
        let shard_after = Duration::from_millis(if rng.below(2) == 0 {
            run_ms.saturating_sub(rng.below(80))
        } else {
            rng.below(run_ms)
        });
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(inserter(
            w.clone(),
            client(&srv).await,
            1,
            None,
        )));
        tasks.push(tokio::spawn(inserter(
            w.clone(),
            client(&srv).await,
            2,
            Some(u.clone()),
        )));
        tasks.push(tokio::spawn(updater(
            w.clone(),
            client(&srv).await,
            3,
            to_update.to_vec(),
        )));
        tasks.push(tokio::spawn(deleter(
            w.clone(),
            client(&srv).await,
            4,
            to_delete.to_vec(),
        )));
        tasks.push(tokio::spawn(indexer(
            w.clone(),
            client(&srv).await,
            5,
            u.clone(),
        )));
        tasks.push(tokio::spawn(sharder(
            w.clone(),
            client(&srv).await,
            u.clone(),
            shard_after,
        )));

        tokio::time::sleep(run_for).await;
        srv.kill9();
        w.stop.store(true, Ordering::Relaxed);

        let mut sharded = None;
        let mut slack: HashMap<i32, i64> = HashMap::new();
        let mut errors = Vec::new();
        let mut ops = 0;
        for t in tasks {
            let out = t.await.expect("a workload client panicked");
            ops += out.ops;
            errors.extend(out.errors);
            for (c, id) in out.inserted {
                let d = known.entry(c).or_default();
                d.sent.insert(id.clone());
                d.present.insert(id);
            }
            for (c, id) in out.maybe_inserted {
                let d = known.entry(c).or_default();
                d.sent.insert(id.clone());
                d.maybe_inserted.insert(id);
            }
            for (c, id) in out.deleted {
                let d = known.entry(c).or_default();
                d.present.remove(&id);
                d.gone.insert(id);
            }
            for (c, id) in out.maybe_deleted {
                known.entry(c).or_default().maybe_deleted.insert(id);
            }
            for (id, n) in out.incs {
                counters[id as usize] += n;
            }
            for (c, name, created) in out.index_ops {
                indexes.insert((c, name), created);
            }
            if let Some((c, name, _)) = out.maybe_index_op {
                indexes.remove(&(c, name));
            }
            if out.sharded.is_some() {
                sharded = out.sharded;
            }
            // In-flight increments widen this cycle's upper bound only.
            for (id, n) in out.maybe_incs {
                *slack.entry(id).or_default() += n;
            }
        }

        srv.restart_with_args(&args).await;
        let restarted = Instant::now();

        // Documents: acknowledged present exactly once, acknowledged
        // deletes gone, nothing never sent; unknowns resolved.
        for (coll, d) in known.iter_mut() {
            let seen = scan_ids(&srv, coll).await;
            let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
            assert!(
                doubled.is_empty(),
                "cycle {cycle} (seed {seed}): {coll}: documents returned twice: {doubled:?}"
            );
            let missing: Vec<_> = d
                .present
                .iter()
                .filter(|id| !seen.contains_key(*id) && !d.maybe_deleted.contains(*id))
                .take(5)
                .collect();
            assert!(
                missing.is_empty(),
                "cycle {cycle} (seed {seed}): {coll}: acknowledged documents lost, e.g. {missing:?} (of {} acknowledged)",
                d.present.len()
            );
            let phantom: Vec<_> = seen
                .keys()
                .filter(|id| !d.sent.contains(*id))
                .take(5)
                .collect();
            assert!(
                phantom.is_empty(),
                "cycle {cycle} (seed {seed}): {coll}: documents never sent: {phantom:?}"
            );
            let undead: Vec<_> = seen
                .keys()
                .filter(|id| d.gone.contains(*id))
                .take(5)
                .collect();
            assert!(
                undead.is_empty(),
                "cycle {cycle} (seed {seed}): {coll}: acknowledged deletes undone: {undead:?}"
            );
            let unknown: Vec<_> = seen
                .keys()
                .filter(|id| !d.present.contains(*id) && !d.maybe_inserted.contains(*id))
                .take(5)
                .collect();
            assert!(unknown.is_empty(), "cycle {cycle} (seed {seed}): {coll}: documents back that were known gone: {unknown:?}");
            for id in d.maybe_inserted.drain() {
                if seen.contains_key(&id) {
                    d.present.insert(id);
                } else {
                    d.gone.insert(id);
                }
            }
            for id in d.maybe_deleted.drain() {
                if !seen.contains_key(&id) {
                    d.present.remove(&id);
                    d.gone.insert(id);
                }
            }
            assert_eq!(
                seen.len(),
                d.present.len(),
                "cycle {cycle} (seed {seed}): {coll}: count after resolving"
            );
        }

        // Counters: acknowledged ≤ n ≤ acknowledged + in flight.
        let found: Vec<Document> = srv
            .db(DB)
            .collection::<Document>(COUNTERS)
            .find(doc! {})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(
            found.len(),
            N_COUNTERS as usize,
            "cycle {cycle} (seed {seed}): counters: {found:?}"
        );
        for c in &found {
            let id = c.get_i32("_id").unwrap_or(-1);
            let n = num(c, "n");
            let acked = counters[id as usize];
            let slack = slack.get(&id).copied().unwrap_or(0);
            assert!(
                acked <= n && n <= acked + slack,
                "cycle {cycle} (seed {seed}): counter {id} is {n}; {acked} increments acknowledged, {slack} in flight"
            );
            counters[id as usize] = n;
        }

        // Indexes an acknowledged createIndexes or dropIndexes left.
        for ((coll, name), exists) in &indexes {
            let names = secondary_indexes(&srv, coll).await;
            assert_eq!(
                names.contains_key(name),
                *exists,
                "cycle {cycle} (seed {seed}): index {name} of {coll} after an acknowledged {}",
                if *exists {
                    "createIndexes"
                } else {
                    "dropIndexes"
                }
            );
        }

        // shardCollection: acknowledged means sharded.
        let u_stats = srv
            .db(DB)
            .run_command(doc! {"collStats": &u})
            .await
            .unwrap();
        if sharded == Some(true) {
            assert_eq!(
                u_stats.get_bool("sharded"),
                Ok(true),
                "cycle {cycle} (seed {seed}): {u} after an acknowledged shardCollection: {u_stats}"
            );
        }

        for coll in [DOCS, COUNTERS, u.as_str()] {
            check_structure(&srv, cycle, coll, &mut rng).await;
        }
        let nchunks = num(
            &srv.db(DB)
                .run_command(doc! {"collStats": DOCS})
                .await
                .unwrap(),
            "nchunks",
        );
        println!(
            "cycle {cycle}: ran {run_for:?}, {ops} operations, {} server errors; {} documents, {nchunks} partitions of {DOCS}; {u} sharded: {:?}; checked in {:?}",
            errors.len(),
            known.get(DOCS).map(|d| d.present.len()).unwrap_or(0),
            sharded,
            restarted.elapsed()
        );
        for e in errors.iter().take(3) {
            println!("  {e}");
        }
    }
    println!(
        "crash cycles: {cycles} passed in {:?} (SHARDGATE_CRASH_SEED={seed})",
        started.elapsed()
    );
}
