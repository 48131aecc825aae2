//! The profiler (`profile`, `<db>.system.profile`), `currentOp` and
//! `$currentOp` with an index build's progress, `killOp`, `top`, and
//! `serverStatus`'s live counters, through the official driver.
//!
//! Profiling levels and running operations belong to one process (a
//! gateway, as they belong to one mongod in a sharded cluster), so
//! these tests talk to the first gateway only.

use std::time::{Duration, Instant};

use compat_tests::{
    bson::{doc, Bson, Document},
    expect_command_error, num, numf, TestServer,
};
use futures::TryStreamExt;
use mongodb::Database;

const DB: &str = "prof";

/// The profile entries of `db` in the order they were written, without
/// the commands the test itself ran on `system.profile`.
async fn profile_entries(db: &Database, filter: Document) -> Vec<Document> {
    db.collection::<Document>("system.profile")
        .find(filter)
        .sort(doc! {"ts": 1, "_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test]
async fn level_2_records_each_operation_with_mongodb_shape() {
    let srv = TestServer::start().await;
    let db = srv.pinned_db(DB);
    let status = db.run_command(doc! {"profile": -1}).await.unwrap();
    assert_eq!(num(&status, "was"), 0);
    assert_eq!(num(&status, "slowms"), 100);
    assert_eq!(numf(&status, "sampleRate"), 1.0);

    let c = db.collection::<Document>("c");
    c.insert_one(doc! {"_id": 0, "a": 0}).await.unwrap();
    // Not profiled: level 0.
    assert!(profile_entries(&db, doc! {}).await.is_empty());

    let was = db.run_command(doc! {"profile": 2}).await.unwrap();
    assert_eq!(num(&was, "was"), 0);
    c.insert_many(vec![
        doc! {"_id": 1, "a": 1},
        doc! {"_id": 2, "a": 2},
        doc! {"_id": 3, "a": 3},
    ])
    .await
    .unwrap();
    let found: Vec<Document> = c
        .find(doc! {"a": {"$gte": 2}})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 2);
    c.update_one(doc! {"a": 3}, doc! {"$set": {"b": 1}})
        .await
        .unwrap();
    c.delete_one(doc! {"_id": 1}).await.unwrap();
    c.find_one(doc! {"_id": 2}).await.unwrap();

    let entries = profile_entries(&db, doc! {"ns": "prof.c"}).await;
    let ops: Vec<&str> = entries.iter().map(|e| e.get_str("op").unwrap()).collect();
    assert_eq!(
        ops,
        ["insert", "query", "update", "remove", "query"],
        "{entries:?}"
    );

    let insert = &entries[0];
    assert_eq!(num(insert, "ninserted"), 3);
    assert_eq!(
        insert.get_document("command").unwrap().get_str("insert"),
        Ok("c")
    );

    let query = &entries[1];
    let command = query.get_document("command").unwrap();
    assert_eq!(command.get_str("find"), Ok("c"));
    assert_eq!(
        command.get_document("filter").unwrap(),
        &doc! {"a": {"$gte": 2}}
    );
    assert_eq!(command.get_str("$db"), Ok(DB));
    assert_eq!(num(query, "nreturned"), 2);
    assert_eq!(num(query, "docsExamined"), 4);
    assert_eq!(num(query, "keysExamined"), 0);
    assert_eq!(query.get_str("planSummary"), Ok("COLLSCAN"));
    assert!(num(query, "millis") >= 0);
    assert!(
        matches!(query.get("ts"), Some(Bson::DateTime(_))),
        "{query}"
    );
    assert_eq!(query.get_str("client"), Ok("127.0.0.1"));
    assert_eq!(query.get_str("protocol"), Ok("op_msg"));

    let update = &entries[2];
    assert_eq!(
        update
            .get_document("command")
            .unwrap()
            .get_document("q")
            .unwrap(),
        &doc! {"a": 3}
    );
    assert_eq!(num(update, "nMatched"), 1);
    assert_eq!(num(update, "nModified"), 1);
    assert_eq!(num(update, "nUpserted"), 0);

    let remove = &entries[3];
    assert_eq!(num(remove, "ndeleted"), 1);
    assert_eq!(
        remove
            .get_document("command")
            .unwrap()
            .get_document("q")
            .unwrap(),
        &doc! {"_id": 1}
    );

    let point = &entries[4];
    assert_eq!(point.get_str("planSummary"), Ok("IDHACK"));
    assert_eq!(num(point, "nreturned"), 1);
    assert_eq!(num(point, "docsExamined"), 1);

    // An index shows in the plan's summary, and its keys are counted.
    c.create_index(mongodb::IndexModel::builder().keys(doc! {"a": 1}).build())
        .await
        .unwrap();
    c.find_one(doc! {"a": 2}).await.unwrap();
    let last = profile_entries(&db, doc! {"ns": "prof.c", "op": "query"})
        .await
        .pop()
        .unwrap();
    assert_eq!(last.get_str("planSummary"), Ok("IXSCAN { a: 1 }"));
    assert_eq!(num(&last, "keysExamined"), 1);
    assert_eq!(num(&last, "docsExamined"), 1);

    // A failed command is recorded with its error.
    let _ = db
        .run_command(doc! {"find": "c", "filter": {"$bad": 1}})
        .await
        .unwrap_err();
    let failed = profile_entries(&db, doc! {"ok": 0.0}).await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(num(&failed[0], "errCode"), 2);

    // `system.profile` is capped, as MongoDB makes it.
    let stats = db
        .run_command(doc! {"collStats": "system.profile"})
        .await
        .unwrap();
    assert_eq!(stats.get_bool("capped"), Ok(true), "{stats}");

    // Back to 0: nothing more is written.
    let was = db.run_command(doc! {"profile": 0}).await.unwrap();
    assert_eq!(num(&was, "was"), 2);
    let before = profile_entries(&db, doc! {}).await.len();
    c.find_one(doc! {}).await.unwrap();
    assert_eq!(profile_entries(&db, doc! {}).await.len(), before);
}

#[tokio::test]
async fn level_1_keeps_slow_operations_or_what_the_filter_matches() {
    let srv = TestServer::start().await;
    let db = srv.pinned_db(DB);
    let c = db.collection::<Document>("c");
    c.insert_many((0..20).map(|i| doc! {"_id": i}))
        .await
        .unwrap();

    // Nothing here takes 100 ms.
    db.run_command(doc! {"profile": 1}).await.unwrap();
    c.find_one(doc! {"_id": 3}).await.unwrap();
    assert!(profile_entries(&db, doc! {}).await.is_empty());

    // slowms 0: every operation is slow (and slowms is the server's).
    let was = db
        .run_command(doc! {"profile": 1, "slowms": 0})
        .await
        .unwrap();
    assert_eq!(num(&was, "slowms"), 100);
    c.find_one(doc! {"_id": 4}).await.unwrap();
    assert_eq!(profile_entries(&db, doc! {"op": "query"}).await.len(), 1);
    let other = srv.pinned_db("other");
    let status = other.run_command(doc! {"profile": -1}).await.unwrap();
    assert_eq!(num(&status, "slowms"), 0);
    assert_eq!(num(&status, "was"), 0);

    // sampleRate 0 keeps none of them.
    db.run_command(doc! {"profile": 1, "sampleRate": 0.0})
        .await
        .unwrap();
    c.find_one(doc! {"_id": 5}).await.unwrap();
    assert_eq!(profile_entries(&db, doc! {"op": "query"}).await.len(), 1);

    // A filter decides alone: only the inserts.
    let set = db
        .run_command(doc! {"profile": 1, "filter": {"op": "insert"}})
        .await
        .unwrap();
    assert!(set.get_str("note").is_ok(), "{set}");
    c.find_one(doc! {"_id": 6}).await.unwrap();
    c.insert_one(doc! {"_id": 100}).await.unwrap();
    assert_eq!(profile_entries(&db, doc! {"op": "query"}).await.len(), 1);
    assert_eq!(profile_entries(&db, doc! {"op": "insert"}).await.len(), 1);
    let status = db.run_command(doc! {"profile": -1}).await.unwrap();
    assert_eq!(
        status.get_document("filter").unwrap(),
        &doc! {"op": "insert"}
    );
    db.run_command(doc! {"profile": 0, "filter": "unset", "slowms": 100, "sampleRate": 1.0})
        .await
        .unwrap();
    let status = db.run_command(doc! {"profile": -1}).await.unwrap();
    assert!(status.get("filter").is_none(), "{status}");

    // MongoDB's errors.
    expect_command_error(&db, doc! {"profile": 3}, 2, "BadValue").await;
    expect_command_error(&db, doc! {"profile": 1, "sampleRate": 1.5}, 2, "BadValue").await;
    expect_command_error(&db, doc! {"profile": 1, "filter": 7}, 2, "BadValue").await;
    expect_command_error(
        &db,
        doc! {"profile": 1, "filter": {"$bad": 1}},
        2,
        "BadValue",
    )
    .await;
}

#[tokio::test]
async fn a_sharded_query_is_profiled_once_with_every_partition_counted() {
    let srv = TestServer::start().await;
    let admin = srv.pinned_db("admin");
    let db = srv.pinned_db(DB);
    admin
        .run_command(
            doc! {"shardCollection": "prof.s", "key": {"k": "hashed"}, "numInitialChunks": 8},
        )
        .await
        .unwrap();
    let s = db.collection::<Document>("s");
    s.insert_many((0..40).map(|i| doc! {"_id": i, "k": i}))
        .await
        .unwrap();
    db.run_command(doc! {"profile": 2}).await.unwrap();
    let all: Vec<Document> = s
        .find(doc! {"_id": {"$lt": 30}})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(all.len(), 30);
    s.find_one(doc! {"k": 7}).await.unwrap();
    let queries = profile_entries(&db, doc! {"ns": "prof.s", "op": "query"}).await;
    assert_eq!(queries.len(), 2, "{queries:?}");
    assert_eq!(num(&queries[0], "nreturned"), 30);
    // Every partition scanned its documents: 40 in all.
    assert_eq!(num(&queries[0], "docsExamined"), 40);
    // The targeted query read one logical partition through the key.
    assert_eq!(
        queries[1].get_str("planSummary"),
        Ok("IXSCAN { k: \"hashed\" }")
    );
    assert_eq!(num(&queries[1], "nreturned"), 1);
}

/// The first operation `currentOp` lists that `pick` accepts, polling
/// until one shows or `within` passes.
async fn wait_for_op(
    admin: &Database,
    within: Duration,
    pick: impl Fn(&Document) -> bool,
) -> Option<Document> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let reply = admin.run_command(doc! {"currentOp": 1}).await.unwrap();
        let found = reply
            .get_array("inprog")
            .unwrap()
            .iter()
            .filter_map(Bson::as_document)
            .find(|op| pick(op))
            .cloned();
        if found.is_some() {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

/// A collection large enough that building an index on it takes a
/// while: `n` documents in batches.
async fn fill(db: &Database, coll: &str, n: i64) {
    let c = db.collection::<Document>(coll);
    let batch = 10_000;
    for start in (0..n).step_by(batch as usize) {
        c.insert_many((start..(start + batch).min(n)).map(|i| {
            doc! {"_id": i, "a": i % 977, "b": format!("value {i}"), "c": i * 3}
        }))
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn current_op_shows_an_index_build_and_its_progress_and_kill_op_stops_it() {
    let srv = TestServer::start().await;
    let admin = srv.pinned_db("admin");
    let db = srv.pinned_db(DB);
    fill(&db, "big", 300_000).await;

    // A build, seen while it runs, with how far it has come.
    let build_db = db.clone();
    let build = tokio::spawn(async move {
        build_db
            .run_command(doc! {"createIndexes": "big", "indexes": [
                {"key": {"b": 1, "a": 1, "c": 1}, "name": "b_a_c"}
            ]})
            .await
    });
    let op = wait_for_op(&admin, Duration::from_secs(20), |op| {
        op.get_document("command")
            .is_ok_and(|c| c.get_str("createIndexes") == Ok("big"))
            && op
                .get_document("progress")
                .is_ok_and(|p| num(p, "done") > 0)
    })
    .await
    .expect("the index build shows in currentOp with progress");
    assert_eq!(op.get_str("ns"), Ok("prof.big"));
    assert_eq!(op.get_str("op"), Ok("command"));
    assert_eq!(op.get_bool("active"), Ok(true));
    assert!(op.get_str("desc").unwrap().starts_with("conn"), "{op}");
    assert!(
        op.get_str("client").unwrap().starts_with("127.0.0.1:"),
        "{op}"
    );
    let progress = op.get_document("progress").unwrap();
    assert_eq!(num(progress, "total"), 300_000);
    assert!(num(progress, "done") <= 300_000);
    assert!(
        op.get_str("msg")
            .unwrap()
            .starts_with("Index Build: scanning collection"),
        "{op}"
    );
    assert!(num(&op, "opid") > 0);
    assert!(op.get("secs_running").is_some() && op.get("microsecs_running").is_some());
    build.await.unwrap().unwrap();

    // killOp stops a second build: it fails with 11601 and leaves no index.
    let build_db = db.clone();
    let build = tokio::spawn(async move {
        build_db
            .run_command(doc! {"createIndexes": "big", "indexes": [
                {"key": {"c": 1, "b": 1}, "name": "c_b"}
            ]})
            .await
    });
    let op = wait_for_op(&admin, Duration::from_secs(20), |op| {
        op.get_document("command")
            .is_ok_and(|c| c.get_str("createIndexes") == Ok("big"))
    })
    .await
    .expect("the second build shows in currentOp");
    let killed = admin
        .run_command(doc! {"killOp": 1, "op": op.get("opid").unwrap().clone()})
        .await
        .unwrap();
    assert_eq!(killed.get_str("info"), Ok("attempting to kill op"));
    let e = build.await.unwrap().unwrap_err();
    let f = compat_tests::failure(&e).expect("a server error");
    assert_eq!(f.code, 11601, "{f:?}");
    let names: Vec<String> = db
        .collection::<Document>("big")
        .list_index_names()
        .await
        .unwrap();
    assert_eq!(names, ["_id_", "b_a_c"]);
    // Gone from currentOp once stopped.
    assert!(wait_for_op(&admin, Duration::from_millis(200), |op| {
        op.get_document("command")
            .is_ok_and(|c| c.get_str("createIndexes") == Ok("big"))
    })
    .await
    .is_none());
}

#[tokio::test]
async fn current_op_filters_and_the_stage_lists_the_running_aggregate() {
    let srv = TestServer::start().await;
    let admin = srv.pinned_db("admin");

    // The command lists itself; a filter keeps what it matches.
    let reply = admin
        .run_command(doc! {"currentOp": 1, "command.currentOp": {"$exists": true}})
        .await
        .unwrap();
    let inprog = reply.get_array("inprog").unwrap();
    assert_eq!(inprog.len(), 1, "{reply}");
    let me = inprog[0].as_document().unwrap();
    assert_eq!(me.get_str("ns"), Ok("admin.$cmd"));
    assert_eq!(me.get_str("type"), Ok("op"));
    let none = admin
        .run_command(doc! {"currentOp": 1, "ns": "nowhere.c"})
        .await
        .unwrap();
    assert!(none.get_array("inprog").unwrap().is_empty());

    let listed: Vec<Document> = admin
        .aggregate(vec![
            doc! {"$currentOp": {"allUsers": true}},
            doc! {"$match": {"command.aggregate": 1}},
            doc! {"$project": {"op": 1, "ns": 1}},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].get_str("op"), Ok("command"));

    // MongoDB's errors.
    let db = srv.pinned_db(DB);
    expect_command_error(
        &db,
        doc! {"aggregate": 1, "pipeline": [{"$currentOp": {}}], "cursor": {}},
        73,
        "InvalidNamespace",
    )
    .await;
    expect_command_error(
        &admin,
        doc! {"aggregate": 1, "pipeline": [{"$match": {}}, {"$currentOp": {}}], "cursor": {}},
        40602,
        "",
    )
    .await;
    expect_command_error(&db, doc! {"currentOp": 1}, 13, "Unauthorized").await;
    expect_command_error(&admin, doc! {"killOp": 1}, 50759, "").await;
    // An id nothing runs under is no error.
    let reply = admin
        .run_command(doc! {"killOp": 1, "op": 123_456_789})
        .await
        .unwrap();
    assert_eq!(reply.get_str("info"), Ok("attempting to kill op"));
}

#[tokio::test]
async fn top_and_server_status_count_what_ran() {
    let srv = TestServer::start().await;
    let admin = srv.pinned_db("admin");
    let db = srv.pinned_db(DB);
    let c = db.collection::<Document>("t");

    let before = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
    c.insert_many((0..5).map(|i| doc! {"_id": i, "v": i}))
        .await
        .unwrap();
    let found: Vec<Document> = c.find(doc! {}).await.unwrap().try_collect().await.unwrap();
    assert_eq!(found.len(), 5);
    c.update_many(doc! {"v": {"$lt": 2}}, doc! {"$inc": {"v": 10}})
        .await
        .unwrap();
    c.delete_many(doc! {"v": {"$gte": 10}}).await.unwrap();
    let after = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();

    let document = |s: &Document, field: &str| {
        num(
            s.get_document("metrics")
                .unwrap()
                .get_document("document")
                .unwrap(),
            field,
        )
    };
    assert_eq!(
        document(&after, "inserted") - document(&before, "inserted"),
        5
    );
    assert_eq!(
        document(&after, "returned") - document(&before, "returned"),
        5
    );
    assert_eq!(
        document(&after, "updated") - document(&before, "updated"),
        2
    );
    assert_eq!(
        document(&after, "deleted") - document(&before, "deleted"),
        2
    );
    let network = |s: &Document, field: &str| num(s.get_document("network").unwrap(), field);
    assert!(network(&after, "bytesIn") > network(&before, "bytesIn"));
    assert!(network(&after, "bytesOut") > network(&before, "bytesOut"));
    // The four writes and reads and the second serverStatus, at least.
    assert!(network(&after, "numRequests") - network(&before, "numRequests") >= 5);
    assert!(after
        .get_document("metrics")
        .unwrap()
        .get_document("cursor")
        .is_ok());

    let top = admin.run_command(doc! {"top": 1}).await.unwrap();
    let totals = top.get_document("totals").unwrap();
    assert_eq!(totals.get_str("note"), Ok("all times in microseconds"));
    let t = totals.get_document("prof.t").expect("prof.t in top");
    let count = |field: &str| num(t.get_document(field).unwrap(), "count");
    assert_eq!(count("insert"), 1);
    assert_eq!(count("queries"), 1);
    assert_eq!(count("update"), 1);
    assert_eq!(count("remove"), 1);
    assert_eq!(count("writeLock"), 3);
    assert_eq!(count("total"), 4);
    assert!(num(t.get_document("total").unwrap(), "time") > 0);
    expect_command_error(&db, doc! {"top": 1}, 13, "Unauthorized").await;

    // A dropped collection leaves `top`.
    c.drop().await.unwrap();
    let top = admin.run_command(doc! {"top": 1}).await.unwrap();
    assert!(top.get_document("totals").unwrap().get("prof.t").is_none());
}
