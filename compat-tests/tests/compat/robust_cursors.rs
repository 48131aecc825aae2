//! Open cursors and large replies cannot exhaust the server, seen
//! through the official driver.
//!
//! Covered: many idle sorted cursors keep the server's memory small and
//! still read to the end in order (unsharded and sharded); the caps on
//! open cursors per connection, in total and by memory fail with 146
//! while other clients go on; a sorted `find` with `allowDiskUse: false`
//! past `--max-blocking-stage-bytes` fails with 292 and spills without
//! it; batches of large documents stay within a reply and continue with
//! `getMore`; a result document over the reply limit fails with 10334;
//! `distinct` past 16 MB fails with 17217. After each, the server still
//! answers `ping` and its resident memory grew less than 100 MB.

use std::time::{Duration, Instant};

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    cursor_id, expect_command_error, first_batch,
    mongodb::{Client, Database},
    next_batch, num, TestServer,
};

const DB: &str = "robust";
const MB: u64 = 1024 * 1024;

/// The server's resident memory in bytes, from /proc.
fn rss(srv: &TestServer) -> u64 {
    let pid = srv.pid().expect("server running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .expect("VmRSS line");
    kb * 1024
}

/// The server's resident memory once work has ended: freed memory goes
/// back to the system when the threads that ran big queries go idle.
async fn settled_rss(srv: &TestServer) -> u64 {
    tokio::time::sleep(Duration::from_secs(3)).await;
    rss(srv)
}

/// The server answers `ping` quickly and, once settled, its memory grew
/// less than 100 MB since `before`.
async fn still_healthy(srv: &TestServer, before: u64) {
    let started = Instant::now();
    let reply = srv
        .new_client()
        .await
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .expect("ping after the test");
    assert_ok(&reply);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "ping took {:?}",
        started.elapsed()
    );
    let after = settled_rss(srv).await;
    assert!(
        after < before + 100 * MB,
        "RSS grew from {} MB to {} MB",
        before / MB,
        after / MB
    );
}

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    let reply = db
        .run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert_ok(&reply);
    reply
}

/// Inserts `n` documents `{_id: i, x: <scrambled>, pad}` in batches.
async fn fill(db: &Database, coll: &str, n: i32) {
    let c = db.collection::<Document>(coll);
    let mut i = 0;
    while i < n {
        let batch: Vec<Document> = (i..(i + 10_000).min(n))
            .map(|i| doc! {"_id": i, "x": (i as i64 * 7919) % 100_003, "pad": "p".repeat(60)})
            .collect();
        i += batch.len() as i32;
        c.insert_many(batch).await.expect("insert");
    }
}

/// Reads a cursor to its end with large batches; returns its `x` values.
async fn drain(db: &Database, coll: &str, first: &Document) -> Vec<i64> {
    let mut xs: Vec<i64> = first_batch(first).iter().map(|d| num(d, "x")).collect();
    let mut id = cursor_id(first);
    while id != 0 {
        let reply = run(
            db,
            doc! {"getMore": id, "collection": coll, "batchSize": 50_000},
        )
        .await;
        xs.extend(next_batch(&reply).iter().map(|d| num(d, "x")));
        id = cursor_id(&reply);
    }
    xs
}

fn assert_sorted(xs: &[i64]) {
    assert!(xs.windows(2).all(|w| w[0] <= w[1]), "results out of order");
}

// ---------------------------------------------------------------------------
// idle cursors
// ---------------------------------------------------------------------------

/// 200 sorted cursors over 100,000 documents, each left after its first
/// document, keep the server under 500 MB; each still reads to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_idle_sorted_cursors_stay_small() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    fill(&db, "big", 100_000).await;
    let before = settled_rss(&srv).await;
    let mut cursors = Vec::new();
    for _ in 0..200 {
        let reply = run(
            &db,
            doc! {"find": "big", "filter": {}, "sort": {"x": 1}, "batchSize": 1},
        )
        .await;
        assert_eq!(first_batch(&reply).len(), 1);
        assert_ne!(cursor_id(&reply), 0);
        cursors.push(reply);
    }
    let at_once = rss(&srv);
    let with_cursors = settled_rss(&srv).await;
    eprintln!(
        "RSS with 100,000 documents: {} MB; with 200 open sorted cursors: {} MB \
         right after opening them, {} MB settled",
        before / MB,
        at_once / MB,
        with_cursors / MB
    );
    assert!(
        at_once < 500 * MB,
        "opening 200 cursors took {} MB",
        at_once / MB
    );
    assert!(
        with_cursors < 500 * MB,
        "200 idle cursors hold {} MB",
        with_cursors / MB
    );
    let status = run(&srv.db("admin"), doc! {"serverStatus": 1}).await;
    let cursor = status
        .get_document("metrics")
        .and_then(|m| m.get_document("cursor"))
        .expect("metrics.cursor");
    assert_eq!(num(cursor.get_document("open").unwrap(), "total"), 200);
    assert!(cursor.contains_key("memoryBytes"), "{cursor}");
    // A few read to the end, in order; the rest are closed.
    for reply in &cursors[..3] {
        let xs = drain(&db, "big", reply).await;
        assert_eq!(xs.len(), 100_000);
        assert_sorted(&xs);
    }
    let rest: Vec<i64> = cursors[3..].iter().map(cursor_id).collect();
    let killed = run(&db, doc! {"killCursors": "big", "cursors": rest}).await;
    assert_eq!(killed.get_array("cursorsKilled").unwrap().len(), 197);
    still_healthy(&srv, with_cursors).await;
}

/// The same over a sharded collection: every partition parks its sorted
/// rows and the merge reads ahead little.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sorted_cursors_over_partitions_stay_small() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    run(
        &srv.db("admin"),
        doc! {"shardCollection": "robust.parts", "key": {"_id": "hashed"}, "numInitialChunks": 8},
    )
    .await;
    fill(&db, "parts", 40_000).await;
    let before = settled_rss(&srv).await;
    let mut cursors = Vec::new();
    for _ in 0..50 {
        let reply = run(
            &db,
            doc! {"find": "parts", "sort": {"x": -1}, "batchSize": 1},
        )
        .await;
        cursors.push(reply);
    }
    let with_cursors = settled_rss(&srv).await;
    eprintln!(
        "sharded: RSS {} MB before, {} MB with 50 open sorted cursors",
        before / MB,
        with_cursors / MB
    );
    assert!(with_cursors < before + 100 * MB);
    let mut xs = drain(&db, "parts", &cursors[0]).await;
    assert_eq!(xs.len(), 40_000);
    xs.reverse();
    assert_sorted(&xs);
    still_healthy(&srv, with_cursors).await;
}

// ---------------------------------------------------------------------------
// caps
// ---------------------------------------------------------------------------

/// A client with one connection, so every cursor it opens counts against
/// that connection.
async fn one_connection(srv: &TestServer) -> Client {
    srv.client_with(|o| {
        o.max_pool_size = Some(1);
        o.min_pool_size = Some(1);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_caps_fail_with_146_and_spare_other_clients() {
    let srv = TestServer::start_with_args(&[
        "--max-cursors-per-connection",
        "3",
        "--max-open-cursors",
        "5",
    ])
    .await;
    fill(&srv.db(DB), "c", 50).await;
    let before = settled_rss(&srv).await;
    let open = doc! {"find": "c", "batchSize": 1};
    let a = one_connection(&srv).await.database(DB);
    let mut mine = Vec::new();
    for _ in 0..3 {
        mine.push(cursor_id(&run(&a, open.clone()).await));
    }
    let f = expect_command_error(&a, open.clone(), 146, "ExceededMemoryLimit").await;
    assert!(f.message.contains("--max-cursors-per-connection"), "{f:?}");
    // Aggregate cursors count too; a query whose results fit one batch
    // needs no cursor and still runs.
    expect_command_error(
        &a,
        doc! {"aggregate": "c", "pipeline": [], "cursor": {"batchSize": 1}},
        146,
        "ExceededMemoryLimit",
    )
    .await;
    let all = run(&a, doc! {"find": "c", "sort": {"x": 1}}).await;
    assert_eq!(first_batch(&all).len(), 50);
    assert_eq!(cursor_id(&all), 0);
    let one = run(&a, doc! {"find": "c", "batchSize": 1, "singleBatch": true}).await;
    assert_eq!(first_batch(&one).len(), 1);

    // Another client opens up to the server's total.
    let b = one_connection(&srv).await.database(DB);
    for _ in 0..2 {
        run(&b, open.clone()).await;
    }
    let f = expect_command_error(&b, open.clone(), 146, "ExceededMemoryLimit").await;
    assert!(f.message.contains("--max-open-cursors"), "{f:?}");
    // The first client's cursors still read, and closing one makes room.
    let more = run(
        &a,
        doc! {"getMore": mine[0], "collection": "c", "batchSize": 2},
    )
    .await;
    assert_eq!(next_batch(&more).len(), 2);
    run(&a, doc! {"killCursors": "c", "cursors": [mine[0]]}).await;
    run(&b, open.clone()).await;
    still_healthy(&srv, before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_memory_cap_fails_with_146() {
    let srv = TestServer::start_with_args(&["--max-cursor-memory-bytes", "1000"]).await;
    let db = srv.db(DB);
    fill(&db, "c", 200).await;
    let before = settled_rss(&srv).await;
    // A sorted result parked in memory is more than 1000 bytes.
    let f = expect_command_error(
        &db,
        doc! {"find": "c", "sort": {"x": 1}, "batchSize": 1},
        146,
        "ExceededMemoryLimit",
    )
    .await;
    assert!(f.message.contains("--max-cursor-memory-bytes"), "{f:?}");
    // Queries that need no cursor still answer, for every client.
    let other = srv.new_client().await.database(DB);
    let all = run(
        &other,
        doc! {"find": "c", "sort": {"x": 1}, "batchSize": 500},
    )
    .await;
    assert_eq!(first_batch(&all).len(), 200);
    assert_eq!(cursor_id(&all), 0);
    still_healthy(&srv, before).await;
}

// ---------------------------------------------------------------------------
// blocking sort limits
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_sort_spills_unless_allow_disk_use_is_false() {
    let srv = TestServer::start_with_args(&["--max-blocking-stage-bytes", "200000"]).await;
    let db = srv.db(DB);
    fill(&db, "s", 20_000).await;
    let before = settled_rss(&srv).await;
    let f = expect_command_error(
        &db,
        doc! {"find": "s", "sort": {"x": 1}, "allowDiskUse": false},
        292,
        "QueryExceededMemoryLimitNoDiskUseAllowed",
    )
    .await;
    assert!(
        f.message
            .starts_with("Sort exceeded memory limit of 200000 bytes"),
        "{f:?}"
    );
    // MongoDB 7.0 spills by default (allowDiskUseByDefault).
    let reply = run(&db, doc! {"find": "s", "sort": {"x": 1}, "batchSize": 10}).await;
    let xs = drain(&db, "s", &reply).await;
    assert_eq!(xs.len(), 20_000);
    assert_sorted(&xs);
    // A sort under a limit holds only its top documents.
    let top = run(
        &db,
        doc! {"find": "s", "sort": {"x": -1}, "limit": 5, "allowDiskUse": false},
    )
    .await;
    let top: Vec<i64> = first_batch(&top).iter().map(|d| num(d, "x")).collect();
    assert_eq!(top.len(), 5);
    assert!(top.windows(2).all(|w| w[0] >= w[1]));
    still_healthy(&srv, before).await;
}

// ---------------------------------------------------------------------------
// replies within the advertised limits
// ---------------------------------------------------------------------------

/// Six 15 MB strings: grouped one per group they come back one per batch
/// (each reply under 16 MiB + 16 KiB, far under 48 MB), following the
/// cursor with getMore; pushed into one group they make a 90 MB document,
/// which fails with 10334.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_of_big_strings_batches_within_limits_or_fails_with_10334() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let big = "s".repeat(15_000_000);
    for i in 0..6 {
        db.collection::<Document>("big")
            .insert_one(doc! {"_id": i, "g": i, "s": &big})
            .await
            .expect("insert 15 MB document");
    }
    drop(big);
    // Read once so the engine's block cache already holds the documents:
    // the baseline is then the cache's, and what follows measures the
    // queries alone.
    let mut seen = 0;
    let mut cursor = db
        .collection::<Document>("big")
        .find(doc! {})
        .await
        .expect("find");
    while cursor.advance().await.expect("read a document") {
        seen += 1;
    }
    assert_eq!(seen, 6);
    let before = settled_rss(&srv).await;
    let first = run(
        &db,
        doc! {
            "aggregate": "big",
            "pipeline": [{"$group": {"_id": "$g", "s": {"$push": "$s"}}}],
            "cursor": {},
        },
    )
    .await;
    let mut sizes = vec![first_batch(&first).len()];
    let mut id = cursor_id(&first);
    while id != 0 {
        let reply = run(&db, doc! {"getMore": id, "collection": "big"}).await;
        let docs = next_batch(&reply);
        let bytes = compat_tests::bson_len(&reply);
        assert!(
            bytes <= 16 * 1024 * 1024 + 16 * 1024,
            "reply of {bytes} bytes"
        );
        sizes.push(docs.len());
        id = cursor_id(&reply);
    }
    assert_eq!(sizes.iter().sum::<usize>(), 6);
    assert!(sizes.iter().all(|&n| n <= 1), "batches {sizes:?}");

    let f = expect_command_error(
        &db,
        doc! {
            "aggregate": "big",
            "pipeline": [{"$group": {"_id": null, "s": {"$push": "$s"}}}],
            "cursor": {},
        },
        10334,
        "BSONObjectTooLarge",
    )
    .await;
    assert!(
        f.message
            .contains("is invalid. Size must be between 0 and 16793600(16MB)"),
        "{f:?}"
    );
    still_healthy(&srv, before).await;
}

/// A projected document of two 9 MB strings is 18 MB: 10334, and the
/// connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_document_over_16_mib_fails_with_10334() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    db.collection::<Document>("nine")
        .insert_one(doc! {"_id": 1, "a": "a".repeat(9_000_000)})
        .await
        .expect("insert");
    let before = settled_rss(&srv).await;
    let f = expect_command_error(
        &db,
        doc! {
            "aggregate": "nine",
            "pipeline": [{"$project": {"x": "$a", "y": "$a"}}],
            "cursor": {},
        },
        10334,
        "BSONObjectTooLarge",
    )
    .await;
    // The document is refused while `$project` builds it, before it
    // exists whole, so the message names its size so far (MongoDB, which
    // fails when the reply is built, also names its first element).
    assert!(f.message.starts_with("BSONObj size: 180000"), "{f:?}");
    assert!(f.message.contains("is invalid"), "{f:?}");
    // The same client goes on.
    let ok = run(&db, doc! {"find": "nine", "projection": {"a": 0}}).await;
    assert_eq!(first_batch(&ok), vec![doc! {"_id": 1}]);
    still_healthy(&srv, before).await;
}

/// `distinct` values passing 16 MB fail with 17217 instead of a reply
/// drivers cannot read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_over_16_mb_fails_with_17217() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c = db.collection::<Document>("d");
    for i in 0..3 {
        c.insert_one(doc! {"_id": i, "v": format!("{i}{}", "v".repeat(7_000_000))})
            .await
            .expect("insert");
    }
    let before = settled_rss(&srv).await;
    expect_command_error(
        &db,
        doc! {"distinct": "d", "key": "v"},
        17217,
        "Location17217",
    )
    .await;
    let ok = run(&db, doc! {"distinct": "d", "key": "_id"}).await;
    assert_eq!(
        ok.get_array("values").unwrap(),
        &vec![Bson::Int32(0), Bson::Int32(1), Bson::Int32(2)]
    );
    still_healthy(&srv, before).await;
}
