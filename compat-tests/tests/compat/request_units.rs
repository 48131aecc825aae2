//! Request units through the official driver, as a Cosmos DB for MongoDB
//! user sees them: the charge of each operation kind
//! (`getLastRequestStatistics`), throughput enforcement with 16500 and
//! `RetryAfterMs`, hot partitions, partly applied bulk writes, burst
//! capacity, server-side retry, and the figures `collStats`,
//! `serverStatus` and `explain` show.
//!
//! Collections are provisioned with `--default-throughput` and sharded
//! over a chosen number of partitions with `numInitialChunks`. A client
//! with a pool of one connection asks `getLastRequestStatistics` on the
//! connection its operation ran on.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    bson_len, failure,
    mongodb::{error::ErrorKind, options::InsertManyOptions, Client, Collection, Database},
    num, numf, Rng, TestServer,
};

/// A document of exactly `total` bytes: `{_id, k, pad}`.
fn sized(id: i64, k: i64, total: usize) -> Document {
    let mut d = doc! {"_id": id, "k": k, "pad": ""};
    let base = bson_len(&d);
    d.insert("pad", "x".repeat(total - base));
    assert_eq!(bson_len(&d), total);
    d
}

/// A client whose operations all run on one connection.
async fn one_connection(srv: &TestServer) -> Client {
    srv.client_with(|o| o.max_pool_size = Some(1)).await
}

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

/// Shards `db.name` on `{k: "hashed"}` over `partitions` partitions.
async fn shard(srv: &TestServer, db: &str, name: &str, partitions: i64) {
    let reply = run(
        &srv.db("admin"),
        doc! {
            "shardCollection": format!("{db}.{name}"),
            "key": {"k": "hashed"},
            "numInitialChunks": partitions,
        },
    )
    .await;
    assert_ok(&reply);
}

/// `RequestCharge` of the last operation on `db`'s client's connection.
async fn last_charge(db: &Database) -> f64 {
    let r = run(db, doc! {"getLastRequestStatistics": 1}).await;
    match r.get("RequestCharge") {
        Some(Bson::Double(v)) => *v,
        other => panic!("RequestCharge is not a double: {other:?} in {r}"),
    }
}

/// The partition that owns shard-key value `k`, as explain names it.
async fn partition_of(db: &Database, coll: &str, k: i64) -> String {
    let e = run(
        db,
        doc! {"explain": {"find": coll, "filter": {"k": k}}, "verbosity": "queryPlanner"},
    )
    .await;
    let shards = e
        .get_document("queryPlanner")
        .and_then(|p| p.get_document("winningPlan"))
        .and_then(|w| w.get_array("shards"))
        .unwrap_or_else(|_| panic!("no winningPlan.shards in {e}"));
    assert_eq!(shards.len(), 1, "{e}");
    shards[0]
        .as_document()
        .and_then(|s| s.get_str("shardName").ok())
        .expect("shardName")
        .to_string()
}

/// The `RetryAfterMs` of a 16500 message.
#[track_caller]
fn retry_after_ms(message: &str) -> u64 {
    let rest = message
        .split("RetryAfterMs=")
        .nth(1)
        .unwrap_or_else(|| panic!("no RetryAfterMs in {message:?}"));
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("RetryAfterMs is not a number in {message:?}"))
}

/// Finds `{_id, k}`; `Err(RetryAfterMs)` when throttled. Any other
/// failure fails the test.
async fn point_read(coll: &Collection<Document>, id: i64, k: i64) -> Result<(), u64> {
    match coll.find_one(doc! {"_id": id, "k": k}).await {
        Ok(found) => {
            assert!(found.is_some(), "document {id} missing");
            Ok(())
        }
        Err(e) => {
            let f = failure(&e).unwrap_or_else(|| panic!("not a server error: {e:?}"));
            assert_eq!(f.code, 16500, "{f:?}");
            assert_eq!(f.code_name, "TooManyRequests", "{f:?}");
            Err(retry_after_ms(&f.message))
        }
    }
}

// ---------------------------------------------------------------------------
// charges
// ---------------------------------------------------------------------------

#[tokio::test]
async fn charges_of_each_operation_kind_are_pinned() {
    let srv = TestServer::start().await;
    let client = one_connection(&srv).await;
    let db = client.database("ru");
    shard(&srv, "ru", "c", 8).await;
    let c = db.collection::<Document>("c");

    // Insert 1 KB: 5 RU for the write, 0.5 for its `_id` index entry.
    c.insert_one(sized(1, 1, 1024)).await.unwrap();
    let insert = last_charge(&db).await;
    assert_eq!(insert, 5.5);

    // Point read by _id and shard key: 1 KB is 1 RU, 100 KB 10 RU.
    c.find_one(doc! {"_id": 1, "k": 1}).await.unwrap().unwrap();
    assert_eq!(last_charge(&db).await, 1.0);
    c.insert_one(sized(2, 2, 100 * 1024)).await.unwrap();
    c.find_one(doc! {"_id": 2, "k": 2}).await.unwrap().unwrap();
    assert_eq!(last_charge(&db).await, 10.0);

    // An update rewrites the document: about twice an insert.
    c.update_one(
        doc! {"_id": 1, "k": 1},
        doc! {"$set": {"pad": "y".repeat(980)}},
    )
    .await
    .unwrap();
    let update = last_charge(&db).await;
    assert_eq!(update, 11.5, "point read 1 + replace 10.5");
    assert!(
        (1.8..=2.2).contains(&(update / insert)),
        "{update} vs {insert}"
    );

    // A delete is charged like an insert.
    c.insert_one(sized(3, 3, 1024)).await.unwrap();
    c.delete_one(doc! {"_id": 3, "k": 3}).await.unwrap();
    assert_eq!(last_charge(&db).await, 6.5, "point read 1 + delete 5.5");

    // Queries: the same query twice costs the same; fanned out over 8
    // partitions it costs more than targeted at one.
    let docs: Vec<Document> = (10..110).map(|i| sized(i, i % 10, 600)).collect();
    c.insert_many(docs).await.unwrap();
    let fanned = doc! {"pad": {"$exists": true}, "_id": {"$gte": 10}};
    let n = c.count_documents(fanned.clone()).await.unwrap();
    assert_eq!(n, 100);
    let mut charges = Vec::new();
    for _ in 0..2 {
        let found: Vec<Document> = run(
            &db,
            doc! {"find": "c", "filter": fanned.clone(), "batchSize": 1000},
        )
        .await
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap()
        .iter()
        .map(|d| d.as_document().unwrap().clone())
        .collect();
        assert_eq!(found.len(), 100);
        charges.push(last_charge(&db).await);
    }
    assert_eq!(charges[0], charges[1], "same query, same data, same charge");
    let mut targeted = fanned.clone();
    targeted.insert("k", 4);
    run(&db, doc! {"find": "c", "filter": targeted}).await;
    let one = last_charge(&db).await;
    assert!(one > 2.5, "a query costs at least one partition: {one}");
    assert!(
        charges[0] >= one + 7.0 * 2.5,
        "fan-out over 8 partitions ({}) vs targeted ({one})",
        charges[0]
    );
}

#[tokio::test]
async fn pages_of_a_cursor_sum_to_the_charge_of_one_page() {
    let srv = TestServer::start().await;
    let client = one_connection(&srv).await;
    let db = client.database("ru");
    shard(&srv, "ru", "p", 8).await;
    let docs: Vec<Document> = (0..300)
        .map(|i| sized(i, i, 300 + (i as usize % 7) * 50))
        .collect();
    db.collection::<Document>("p")
        .insert_many(docs)
        .await
        .unwrap();

    for sort in [None, Some(doc! {"pad": 1, "_id": 1})] {
        let mut find = doc! {"find": "p", "filter": {"_id": {"$gte": 0}}, "batchSize": 10_000};
        if let Some(s) = &sort {
            find.insert("sort", s.clone());
        }
        let whole = run(&db, find.clone()).await;
        assert_eq!(
            whole.get_document("cursor").unwrap().get_i64("id").unwrap(),
            0
        );
        let single = last_charge(&db).await;

        find.insert("batchSize", 7);
        let reply = run(&db, find).await;
        let mut total = last_charge(&db).await;
        let mut pages = 1;
        let mut id = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
        while id != 0 {
            let more = run(&db, doc! {"getMore": id, "collection": "p", "batchSize": 7}).await;
            total += last_charge(&db).await;
            pages += 1;
            id = more.get_document("cursor").unwrap().get_i64("id").unwrap();
        }
        assert!(pages > 40, "{pages}");
        assert!(
            (total - single).abs() <= 0.01 * pages as f64,
            "sort {sort:?}: {pages} pages sum to {total}, one page costs {single}"
        );
    }
}

#[tokio::test]
async fn get_last_request_statistics_has_cosmos_shape() {
    let srv = TestServer::start().await;
    let client = one_connection(&srv).await;
    let db = client.database("ru");
    let c = db.collection::<Document>("plain");
    c.insert_one(sized(1, 1, 1024)).await.unwrap();
    // A ping between does not replace the last operation.
    run(&db, doc! {"ping": 1}).await;
    let r = run(&db, doc! {"getLastRequestStatistics": 1}).await;
    assert_eq!(r.get_str("_t"), Ok("GetRequestStatisticsResponse"), "{r}");
    assert_ok(&r);
    assert_eq!(r.get_str("CommandName"), Ok("insert"), "{r}");
    assert_eq!(r.get("RequestCharge"), Some(&Bson::Double(5.5)), "{r}");
    assert!(
        matches!(
            r.get("RequestDurationInMilliSeconds"),
            Some(Bson::Int64(_) | Bson::Int32(_))
        ),
        "{r}"
    );
    let activity = r.get_str("ActivityId").unwrap();
    assert_eq!(activity.len(), 36, "a UUID string: {activity}");
    assert_eq!(activity.matches('-').count(), 4, "{activity}");
    // Asking again answers the same.
    let again = run(&db, doc! {"getLastRequestStatistics": 1}).await;
    assert_eq!(again.get_str("ActivityId"), Ok(activity));
}

// ---------------------------------------------------------------------------
// throttling
// ---------------------------------------------------------------------------

/// Loads `n` documents of `bytes` with keys 0..n into `c`, inserting
/// again the documents a throttled partition refused.
async fn load(c: &Collection<Document>, n: i64, bytes: usize) {
    let docs: Vec<Document> = (0..n).map(|i| sized(i, i, bytes)).collect();
    for chunk in docs.chunks(50) {
        let mut pending = chunk.to_vec();
        while !pending.is_empty() {
            let err = match c.insert_many(pending.clone()).ordered(false).await {
                Ok(_) => break,
                Err(e) => e,
            };
            let ErrorKind::InsertMany(m) = &*err.kind else {
                panic!("{err:?}");
            };
            let refused: Vec<usize> = m
                .write_errors
                .iter()
                .flatten()
                .map(|w| {
                    assert_eq!(w.code, 16500, "{w:?}");
                    w.index
                })
                .collect();
            pending = refused.iter().map(|&i| pending[i].clone()).collect();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tokio::test]
async fn a_provisioned_collection_serves_its_throughput_under_load() {
    let srv = TestServer::start_with_args(&["--default-throughput", "1000"]).await;
    shard(&srv, "ru", "t", 4).await;
    let c = srv.db("ru").collection::<Document>("t");
    const DOCS: i64 = 200;
    // A 20 KB point read costs 1 + 19 * 9 / 99 RU.
    let bytes = 20 * 1024;
    load(&c, DOCS, bytes).await;
    let probe = one_connection(&srv).await.database("ru");
    // Loading spent the partitions' budgets: a read right after it may
    // be throttled, as it would be on Cosmos DB, until they refill.
    while let Err(ms) = point_read(&probe.collection("t"), 0, 0).await {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let per_read = last_charge(&probe).await;
    assert_eq!(per_read, 2.73);

    let served = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let warmup = Duration::from_secs(2);
    let window = Duration::from_secs(20);
    let start = Instant::now();
    let mut clients = Vec::new();
    for seed in 0..8u64 {
        let coll = srv
            .new_client()
            .await
            .database("ru")
            .collection::<Document>("t");
        let (served, refused, measuring) = (served.clone(), refused.clone(), measuring.clone());
        clients.push(tokio::spawn(async move {
            let mut rng = Rng::new(seed + 1);
            while start.elapsed() < warmup + window {
                let key = rng.below(DOCS as u64) as i64;
                let counting = measuring.load(Ordering::Relaxed);
                match point_read(&coll, key, key).await {
                    Ok(()) => {
                        if counting {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(ms) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(warmup).await;
    measuring.store(true, Ordering::Relaxed);
    let measured_from = Instant::now();
    for c in clients {
        c.await.unwrap();
    }
    let secs = measured_from.elapsed().as_secs_f64();
    let rate = served.load(Ordering::Relaxed) as f64 * per_read / secs;
    eprintln!(
        "served {rate:.0} RU/s over {secs:.1} s; {} refusals",
        refused.load(Ordering::Relaxed)
    );
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "the load never saturated"
    );
    assert!(
        (900.0..=1100.0).contains(&rate),
        "served {rate:.0} RU/s of 1000"
    );
}

#[tokio::test]
async fn a_client_that_waits_retry_after_ms_succeeds() {
    let srv = TestServer::start_with_args(&["--default-throughput", "400"]).await;
    shard(&srv, "ru", "w", 4).await;
    let c = srv.db("ru").collection::<Document>("w");
    load(&c, 20, 1024).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // One key's partition (100 RU/s) is read until it refuses.
    let mut refusals = 0;
    for _ in 0..20 {
        let wait = loop {
            if let Err(ms) = point_read(&c, 5, 5).await {
                break ms;
            }
        };
        assert!((1..=1000).contains(&wait), "{wait}");
        tokio::time::sleep(Duration::from_millis(wait)).await;
        point_read(&c, 5, 5)
            .await
            .unwrap_or_else(|ms| panic!("refused again after waiting {wait} ms: {ms}"));
        refusals += 1;
    }
    assert_eq!(refusals, 20);
}

#[tokio::test]
async fn a_hot_key_throttles_only_its_own_partition() {
    let srv = TestServer::start_with_args(&["--default-throughput", "1000"]).await;
    shard(&srv, "ru", "h", 4).await;
    let db = srv.db("ru");
    let c = db.collection::<Document>("h");
    load(&c, 40, 1024).await;
    let hot = partition_of(&db, "h", 0).await;
    let mut cold = Vec::new();
    for k in 1..40 {
        if partition_of(&db, "h", k).await != hot {
            cold.push(k);
        }
    }
    assert!(cold.len() > 10, "{cold:?}");

    let until = Instant::now() + Duration::from_secs(4);
    let hot_refused = Arc::new(AtomicU64::new(0));
    let mut hammers = Vec::new();
    for _ in 0..4 {
        let coll = srv
            .new_client()
            .await
            .database("ru")
            .collection::<Document>("h");
        let refused = hot_refused.clone();
        hammers.push(tokio::spawn(async move {
            while Instant::now() < until {
                if point_read(&coll, 0, 0).await.is_err() {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Meanwhile reads of keys on the other partitions, well within their
    // 250 RU/s each, are never refused.
    let mut reads = 0;
    let mut i = 0;
    while Instant::now() < until {
        let k = cold[i % cold.len()];
        point_read(&c, k, k)
            .await
            .unwrap_or_else(|ms| panic!("key {k} off the hot partition refused ({ms} ms)"));
        reads += 1;
        i += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for h in hammers {
        h.await.unwrap();
    }
    assert!(reads > 50, "{reads}");
    assert!(
        hot_refused.load(Ordering::Relaxed) > 0,
        "the hot key was never throttled"
    );

    // collStats shows which partition was hot. The hot partition's budget
    // refills first: `$collStats` below reads every partition and would be
    // refused while the hot one still owes request units.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stats = run(&db, doc! {"collStats": "h"}).await;
    let shards = stats.get_document("shards").unwrap();
    for (name, s) in shards {
        let units = s
            .as_document()
            .unwrap()
            .get_document("requestUnits")
            .unwrap();
        assert_eq!(num(units, "provisioned"), 250, "{stats}");
        assert!(
            matches!(units.get("consumed"), Some(Bson::Double(_))),
            "{units}"
        );
        if *name == hot {
            assert!(num(units, "throttled") > 0, "{name}: {units}");
        } else {
            assert_eq!(num(units, "throttled"), 0, "{name}: {units}");
        }
    }
    let reply = run(
        &db,
        doc! {"aggregate": "h", "pipeline": [{"$collStats": {"count": {}}}], "cursor": {}},
    )
    .await;
    let per_partition = reply
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .unwrap();
    assert_eq!(per_partition.len(), 4, "{reply}");
    for d in per_partition {
        let d = d.as_document().unwrap();
        let units = d.get_document("requestUnits").unwrap();
        assert_eq!(num(units, "provisioned"), 250, "{d}");
        assert_eq!(
            num(units, "throttled") > 0,
            d.get_str("shard") == Ok(hot.as_str()),
            "{d}"
        );
    }
    let status = run(&srv.db("admin"), doc! {"serverStatus": 1}).await;
    let totals = status.get_document("requestUnits").unwrap();
    assert!(numf(totals, "consumed") > 100.0, "{totals}");
    assert!(num(totals, "throttled") > 0, "{totals}");
}

#[tokio::test]
async fn bulk_inserts_are_partly_applied_with_one_16500_per_rejected_document() {
    // 100 RU/s per partition; a 1 MB insert leaves its partition ~370 RU
    // in debt, nearly four seconds of throttling.
    let srv = TestServer::start_with_args(&["--default-throughput", "400"]).await;
    shard(&srv, "ru", "b", 4).await;
    let db = srv.db("ru");
    let c = db.collection::<Document>("b");
    let hot = partition_of(&db, "b", 0).await;
    let mut cold = Vec::new();
    let mut k = 1;
    while cold.len() < 6 {
        if partition_of(&db, "b", k).await != hot {
            cold.push(k);
        }
        k += 1;
    }
    c.insert_one(sized(0, 0, 1 << 20)).await.unwrap();

    // Unordered: every document for the hot partition is refused, the
    // others are written.
    let docs = vec![
        sized(100, cold[0], 1024),
        sized(101, 0, 1024),
        sized(102, cold[1], 1024),
        sized(103, 0, 1024),
        sized(104, cold[2], 1024),
    ];
    let err = c
        .insert_many(docs)
        .with_options(InsertManyOptions::builder().ordered(false).build())
        .await
        .unwrap_err();
    let ErrorKind::InsertMany(m) = &*err.kind else {
        panic!("{err:?}");
    };
    let errors = m.write_errors.clone().unwrap_or_default();
    let indexes: Vec<usize> = errors.iter().map(|w| w.index).collect();
    assert_eq!(indexes, vec![1, 3], "{errors:?}");
    for w in &errors {
        assert_eq!(w.code, 16500, "{w:?}");
        retry_after_ms(&w.message);
    }
    for (id, k) in [(100, cold[0]), (102, cold[1]), (104, cold[2])] {
        point_read(&c, id, k).await.unwrap();
    }

    // Ordered: the first refused document stops the batch.
    let docs = vec![
        sized(200, cold[3], 1024),
        sized(201, cold[4], 1024),
        sized(202, 0, 1024),
        sized(203, cold[5], 1024),
    ];
    let err = c.insert_many(docs).await.unwrap_err();
    let ErrorKind::InsertMany(m) = &*err.kind else {
        panic!("{err:?}");
    };
    let errors = m.write_errors.clone().unwrap_or_default();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!((errors[0].index, errors[0].code), (2, 16500));
    point_read(&c, 200, cold[3]).await.unwrap();
    point_read(&c, 201, cold[4]).await.unwrap();
    let missing = c.find_one(doc! {"_id": 203, "k": cold[5]}).await.unwrap();
    assert!(
        missing.is_none(),
        "a document after the refused one was written"
    );
}

/// How many 1 KB point reads of one key succeed before the first 16500.
async fn reads_until_throttled(c: &Collection<Document>) -> u64 {
    let mut n = 0;
    while point_read(c, 0, 0).await.is_ok() {
        n += 1;
        assert!(n < 100_000, "never throttled");
    }
    n
}

#[tokio::test]
async fn burst_capacity_spends_banked_idle_throughput() {
    let mut served = Vec::new();
    for burst in [false, true] {
        let mut args = vec!["--default-throughput", "400"];
        if burst {
            args.push("--burst-capacity");
        }
        let srv = TestServer::start_with_args(&args).await;
        shard(&srv, "ru", "u", 4).await;
        let c = srv.db("ru").collection::<Document>("u");
        c.insert_one(sized(0, 0, 1024)).await.unwrap();
        // Idle for 3 s: 300 RU of the partition's 100 RU/s banked.
        tokio::time::sleep(Duration::from_secs(3)).await;
        served.push(reads_until_throttled(&c).await);
    }
    eprintln!(
        "reads before the first 16500: without burst {}, with {}",
        served[0], served[1]
    );
    assert!(served[0] < 200, "{served:?}");
    assert!(served[1] >= 350, "{served:?}");
}

#[tokio::test]
async fn server_side_retry_waits_instead_of_refusing() {
    let srv =
        TestServer::start_with_args(&["--default-throughput", "400", "--server-side-retry"]).await;
    shard(&srv, "ru", "s", 4).await;
    let c = srv.db("ru").collection::<Document>("s");
    c.insert_one(sized(1, 0, 1024)).await.unwrap();
    // Leaves the partition ~370 RU in debt at 100 RU/s.
    c.insert_one(sized(0, 0, 1 << 20)).await.unwrap();
    let started = Instant::now();
    point_read(&c, 1, 0)
        .await
        .unwrap_or_else(|ms| panic!("refused ({ms} ms) despite server-side retry"));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2),
        "answered after {waited:?}"
    );
}

#[tokio::test]
async fn explain_shows_the_charge_per_partition_and_in_total() {
    let srv = TestServer::start().await;
    shard(&srv, "ru", "e", 4).await;
    let db = srv.db("ru");
    let c = db.collection::<Document>("e");
    load(&c, 40, 500).await;
    let e = run(
        &db,
        doc! {"explain": {"find": "e", "filter": {"pad": {"$exists": true}}}, "verbosity": "executionStats"},
    )
    .await;
    let stats = e.get_document("executionStats").unwrap();
    let total = match stats.get("requestCharge") {
        Some(Bson::Double(v)) => *v,
        other => panic!("{other:?} in {stats}"),
    };
    let shards = stats
        .get_document("executionStages")
        .unwrap()
        .get_array("shards")
        .unwrap();
    assert_eq!(shards.len(), 4);
    let sum: f64 = shards
        .iter()
        .map(|s| numf(s.as_document().unwrap(), "requestCharge"))
        .sum();
    assert!(total >= 4.0 * 2.5, "{total}");
    assert!((sum - total).abs() < 0.05, "{sum} vs {total}");
}

/// Throughput set with Cosmos DB's custom commands is what throttles: a
/// collection created at 400 RU/s refuses point reads once its second's
/// budget is spent, one raised to 10,000 RU/s serves that many reads, and
/// a collection without throughput on a server without
/// `--default-throughput` is never throttled.
#[tokio::test]
async fn throughput_from_custom_commands_is_enforced() {
    let srv = TestServer::start().await;
    let db = srv.db("ru");
    run(
        &db,
        doc! {"customAction": "CreateCollection", "collection": "slow", "shardKey": "k", "offerThroughput": 400},
    )
    .await;
    let slow = db.collection::<Document>("slow");
    slow.insert_one(sized(0, 0, 1024)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let started = Instant::now();
    let served = reads_until_throttled(&slow).await;
    // One second of the share, plus what refilled while reading.
    let most = 400.0 + 400.0 * started.elapsed().as_secs_f64() + 5.0;
    assert!(
        served >= 395 && (served as f64) <= most,
        "{served} reads at 400 RU/s, at most {most:.0} expected"
    );

    run(
        &db,
        doc! {"customAction": "UpdateCollection", "collection": "slow", "offerThroughput": 10000},
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..2_000 {
        point_read(&slow, 0, 0)
            .await
            .expect("2,000 reads fit in 10,000 RU/s");
    }

    let free = db.collection::<Document>("free");
    free.insert_one(sized(0, 0, 1024)).await.unwrap();
    for _ in 0..2_000 {
        point_read(&free, 0, 0)
            .await
            .expect("a collection without throughput is not throttled");
    }
}
