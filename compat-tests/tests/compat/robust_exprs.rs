//! One request must not take the server down or hold its memory: what
//! expressions and accumulators build is bounded, and array work is linear.
//!
//! Each bounded case runs through the official driver and must fail with
//! MongoDB 7.0's code (16493 for strings, 10334 `BSONObjectTooLarge` for
//! arrays and documents, 146 `ExceededMemoryLimit` for `$range` and
//! accumulators, 15 `Overflow` for nesting); afterwards the server still
//! answers `ping` and, within a few seconds, its resident memory is back
//! within 100 MB of where it was. (A value legal in size, like an 11 MB
//! array, occupies several times that in memory while it is built; the
//! allocator hands it back to the system once the thread that built it
//! moves on or exits, which is what this waits for.)
//! The array cases run operations over 100,000 elements and check their
//! results (their speed is a benchmark's business, not a test's).

use std::time::Duration;

use compat_tests::{
    bson::{doc, Bson, Document},
    expect_command_error, first_batch,
    mongodb::Database,
    num, TestServer,
};

/// The server's resident set size in bytes, from `/proc/<pid>/status`.
fn rss_bytes(srv: &TestServer) -> u64 {
    let pid = srv.pid().expect("server is running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS in status");
    kb * 1024
}

async fn assert_alive(srv: &TestServer, after: &str) {
    let r = tokio::time::timeout(
        Duration::from_secs(15),
        srv.db("admin").run_command(doc! {"ping": 1}),
    )
    .await;
    match r {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("no answer to ping after {after}: {e}"),
        Err(_) => panic!("ping timed out after {after}"),
    }
}

/// `{aggregate: 1, pipeline: [{$documents: [{}]}, ...stages], cursor: {}}`.
fn on_one_document(stages: Vec<Document>) -> Document {
    let mut pipeline = vec![Bson::Document(doc! {"$documents": [{"a": 1}]})];
    pipeline.extend(stages.into_iter().map(Bson::Document));
    doc! {"aggregate": 1, "pipeline": pipeline, "cursor": {}}
}

/// An expression for a string of `2 * 2^doublings` bytes, built by the
/// server.
fn doubled_string(doublings: i32) -> Bson {
    Bson::Document(doc! {"$reduce": {
        "input": {"$range": [0, doublings]},
        "initialValue": "ab",
        "in": {"$concat": ["$$value", "$$value"]},
    }})
}

/// How much the resident set may stay above its level before a request.
const RETAINED_LIMIT: u64 = 100 * 1024 * 1024;

/// Runs `cmd` on `admin`, expects `code`, then checks the server is alive
/// and its memory comes back to within [`RETAINED_LIMIT`] of its level
/// before, within five seconds.
async fn expect_bounded(srv: &TestServer, what: &str, cmd: Document, code: i32, name: &str) {
    let db = srv.db("admin");
    let before = rss_bytes(srv);
    let f = expect_command_error(&db, cmd, code, name).await;
    assert_alive(srv, what).await;
    let mut after = rss_bytes(srv);
    for _ in 0..50 {
        if after.saturating_sub(before) < RETAINED_LIMIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = rss_bytes(srv);
    }
    let grown = after.saturating_sub(before);
    println!("{what}: RSS {} -> {} MB", before >> 20, after >> 20);
    assert!(
        grown < RETAINED_LIMIT,
        "{what}: RSS grew by {} MB ({} -> {} MB); error was {f:?}",
        grown >> 20,
        before >> 20,
        after >> 20
    );
}

#[tokio::test]
async fn growing_values_fail_with_mongodb_errors() {
    let srv = TestServer::start().await;

    // The reproducer: doubling "ab" 30 times asked for 2 GB and aborted.
    let cmd = on_one_document(vec![doc! {"$project": {"x": doubled_string(30)}}]);
    expect_bounded(&srv, "$reduce/$concat to 2 GB", cmd, 16493, "Location16493").await;
    // A longer $range asked for 17 GB.
    let cmd = on_one_document(vec![doc! {"$project": {"x": doubled_string(33)}}]);
    expect_bounded(
        &srv,
        "$reduce/$concat to 17 GB",
        cmd,
        16493,
        "Location16493",
    )
    .await;

    // $replaceAll with an empty `find` inserts between every character.
    let cmd = on_one_document(vec![doc! {"$project": {"x": {"$replaceAll": {
        "input": doubled_string(19), "find": "", "replacement": "0123456789abcdef",
    }}}}]);
    expect_bounded(&srv, "$replaceAll", cmd, 16493, "Location16493").await;

    // Arrays: doubling with $concatArrays, copying $$ROOT with $map, $zip
    // defaults repeated for every row.
    let cmd = on_one_document(vec![doc! {"$project": {"x": {"$reduce": {
        "input": {"$range": [0, 40]},
        "initialValue": ["abcdefgh"],
        "in": {"$concatArrays": ["$$value", "$$value"]},
    }}}}]);
    expect_bounded(&srv, "$concatArrays", cmd, 10334, "BSONObjectTooLarge").await;
    let cmd = on_one_document(vec![
        doc! {"$project": {"s": doubled_string(20)}},
        doc! {"$project": {"x": {"$map": {"input": {"$range": [0, 1000]}, "in": "$$ROOT"}}}},
    ]);
    expect_bounded(&srv, "$map of $$ROOT", cmd, 10334, "BSONObjectTooLarge").await;
    let cmd = on_one_document(vec![
        doc! {"$project": {"s": doubled_string(20)}},
        doc! {"$project": {"x": {"$zip": {
            "inputs": [{"$range": [0, 1000]}, []],
            "useLongestLength": true,
            "defaults": [0, "$s"],
        }}}},
    ]);
    expect_bounded(&srv, "$zip defaults", cmd, 10334, "BSONObjectTooLarge").await;
    // Documents: merging many large fields.
    let cmd = on_one_document(vec![
        doc! {"$project": {"s": doubled_string(21)}},
        doc! {"$project": {"x": {"$mergeObjects": [
            {"a": "$s"}, {"b": "$s"}, {"c": "$s"}, {"d": "$s"}, {"e": "$s"}, {"f": "$s"},
        ]}}},
    ]);
    expect_bounded(&srv, "$mergeObjects", cmd, 10334, "BSONObjectTooLarge").await;

    // $range has MongoDB's own memory limit.
    let cmd = on_one_document(vec![doc! {"$project": {"x": {"$range": [0, 100_000_000]}}}]);
    let f = expect_command_error(&srv.db("admin"), cmd, 146, "ExceededMemoryLimit").await;
    assert!(
        f.message.contains("$range would use too much memory"),
        "{f:?}"
    );

    // One level of nesting per element.
    let cmd = on_one_document(vec![doc! {"$project": {"x": {"$reduce": {
        "input": {"$range": [0, 100_000]}, "initialValue": [], "in": ["$$value"],
    }}}}]);
    expect_bounded(&srv, "nesting", cmd, 15, "Overflow").await;

    // An accumulator holds at most 100 MB for one group ($addToSet counts
    // each value twice: once kept, once for its lookup key).
    let cmd = doc! {"aggregate": 1, "pipeline": [
        {"$documents": {"$map": {"input": {"$range": [0, 8]}, "in": {"i": "$$this"}}}},
        {"$project": {"s": {"$concat": [{"$toString": "$i"}, doubled_string(22)]}}},
        {"$group": {"_id": null, "r": {"$addToSet": "$s"}}},
    ], "cursor": {}};
    let f = expect_command_error(&srv.db("admin"), cmd, 146, "ExceededMemoryLimit").await;
    assert!(
        f.message.starts_with("$addToSet used too much memory"),
        "{f:?}"
    );
    assert_alive(&srv, "$addToSet").await;
}

/// Every value of a cursor's first batch (the tests ask for one document).
async fn one(db: &Database, cmd: Document) -> Document {
    let reply = db.run_command(cmd).await.expect("command");
    let mut batch = first_batch(&reply);
    assert_eq!(batch.len(), 1, "{reply}");
    batch.remove(0)
}

#[tokio::test]
async fn array_work_over_100k_elements_completes() {
    let srv = TestServer::start().await;
    let db = srv.db("robust");
    let coll = db.collection::<Document>("arrays");
    let n = 100_000;
    let ints = |from: i32, to: i32| Bson::Array((from..to).map(Bson::Int32).collect());
    // Each document $unwind makes is a copy of the rest of its input, so
    // the unwound one carries nothing else large.
    coll.insert_one(doc! {"_id": 0, "a": ints(0, n)})
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": 1, "a": ints(0, n), "b": ints(n / 2, n + n / 2)})
        .await
        .unwrap();

    // $unwind of 100,000 elements took most of a minute before.
    let counted = one(
        &db,
        doc! {"aggregate": "arrays", "pipeline": [
            {"$match": {"_id": 0}},
            {"$unwind": {"path": "$a", "includeArrayIndex": "i"}},
            {"$group": {"_id": null, "n": {"$sum": 1}, "last": {"$max": "$i"},
                        "distinct": {"$addToSet": "$a"}}},
            {"$project": {"n": 1, "last": 1, "distinct": {"$size": "$distinct"}}},
        ], "cursor": {}},
    )
    .await;
    assert_eq!(num(&counted, "n"), n as i64);
    assert_eq!(num(&counted, "last"), n as i64 - 1);
    assert_eq!(num(&counted, "distinct"), n as i64);

    let sizes = one(&db, doc! {"aggregate": "arrays", "pipeline": [
        {"$match": {"_id": 1}},
        {"$project": {
            "union": {"$size": {"$setUnion": ["$a", "$b"]}},
            "both": {"$size": {"$setIntersection": ["$a", "$b"]}},
            "diff": {"$size": {"$setDifference": ["$a", "$b"]}},
            "filtered": {"$size": {"$filter": {"input": "$a", "cond": {"$lt": ["$$this", 10]}}}},
            "sliced": {"$size": {"$slice": ["$a", -99_000]}},
            "joined": {"$size": {"$concatArrays": ["$a", "$b"]}},
            "mapped": {"$size": {"$map": {"input": "$a", "in": {"$add": ["$$this", 1]}}}},
        }},
    ], "cursor": {}})
    .await;
    for (field, want) in [
        ("union", 150_000),
        ("both", 50_000),
        ("diff", 50_000),
        ("filtered", 10),
        ("sliced", 99_000),
        ("joined", 200_000),
        ("mapped", 100_000),
    ] {
        assert_eq!(num(&sizes, field), want, "{field} in {sizes}");
    }

    // Updates: $addToSet and $pullAll with many values, $push with $each
    // and $position, positional updates of every element.
    let size_of = |field: &str| doc! {"$size": format!("${field}")};
    let filter = doc! {"_id": 1};
    coll.update_one(
        filter.clone(),
        doc! {"$addToSet": {"a": {"$each": ints(n / 2, n + n / 2)}}},
    )
    .await
    .unwrap();
    coll.update_one(filter.clone(), doc! {"$pullAll": {"b": ints(0, n)}})
        .await
        .unwrap();
    coll.update_one(
        filter.clone(),
        doc! {"$push": {"c": {"$each": ints(0, n), "$position": 0}}},
    )
    .await
    .unwrap();
    coll.update_one(filter.clone(), doc! {"$inc": {"c.$[]": 1}})
        .await
        .unwrap();
    let lengths = one(
        &db,
        doc! {"aggregate": "arrays", "pipeline": [
            {"$match": {"_id": 1}},
            {"$project": {"a": size_of("a"), "b": size_of("b"), "c": size_of("c"),
                          "c_last": {"$last": "$c"}}},
        ], "cursor": {}},
    )
    .await;
    assert_eq!(num(&lengths, "a"), 150_000, "{lengths}");
    assert_eq!(num(&lengths, "b"), 50_000, "{lengths}");
    assert_eq!(num(&lengths, "c"), 100_000, "{lengths}");
    assert_eq!(num(&lengths, "c_last"), n as i64, "{lengths}");
}
