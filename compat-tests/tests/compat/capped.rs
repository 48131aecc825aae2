//! Capped collections through the official driver, as a MongoDB 7.0 user
//! sees them: `create` with `capped`, `size` and `max` (and MongoDB's
//! errors for malformed ones); documents read back in insertion order and
//! the oldest removed past either bound, whether inserted one by one or
//! in one batch; `{$natural: -1}`; deletes and updates; tailable and
//! `awaitData` cursors, through raw commands and through the driver's own
//! tailable cursor; `CappedPositionLost` when the collection overtakes a
//! cursor; `collMod` of the bounds; `convertToCapped` and
//! `cloneCollectionAsCapped`; sharding refused;
//! and everything kept across a restart.
//!
//! Capped collections cannot be sharded (as in MongoDB), so there is no
//! sharded copy to compare with.

use std::time::{Duration, Instant};

use compat_tests::{
    assert_ok,
    bson::{doc, Document},
    cursor_id, expect_command_error, expect_failure, first_batch,
    mongodb::{
        options::{CursorType, FindOptions},
        Collection, Database,
    },
    next_batch, num, TestServer,
};
use futures::{StreamExt, TryStreamExt};

const DB: &str = "capped";

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

fn coll(db: &Database, name: &str) -> Collection<Document> {
    db.collection::<Document>(name)
}

/// The `n` field of every document, in the order a plain `find` returns.
async fn ns_in_order(c: &Collection<Document>) -> Vec<i64> {
    let docs: Vec<Document> = c.find(doc! {}).await.unwrap().try_collect().await.unwrap();
    docs.iter().map(|d| num(d, "n")).collect()
}

async fn options_of(db: &Database, name: &str) -> Document {
    let reply = run(db, doc! {"listCollections": 1, "filter": {"name": name}}).await;
    let infos = first_batch(&reply);
    assert_eq!(infos.len(), 1, "{reply}");
    infos[0].get_document("options").unwrap().clone()
}

#[tokio::test]
async fn malformed_options_fail_as_in_mongodb() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let cases = [
        (doc! {"create": "a", "capped": true}, 72, "InvalidOptions"),
        (
            doc! {"create": "a", "capped": true, "max": 5},
            72,
            "InvalidOptions",
        ),
        (doc! {"create": "a", "size": 4096}, 72, "InvalidOptions"),
        (
            doc! {"create": "a", "capped": true, "size": 0},
            51024,
            "Location51024",
        ),
        (
            doc! {"create": "a", "capped": true, "size": -500},
            51024,
            "Location51024",
        ),
        (
            doc! {"create": "a", "capped": true, "size": "foo"},
            14,
            "TypeMismatch",
        ),
        (
            doc! {"create": "a", "capped": "foo", "size": 10},
            14,
            "TypeMismatch",
        ),
        (
            doc! {"create": "a", "capped": true, "size": 10, "max": 1_i64 << 31},
            51024,
            "Location51024",
        ),
    ];
    for (cmd, code, name) in cases {
        expect_command_error(&db, cmd, code, name).await;
    }
    let f = expect_command_error(&db, doc! {"create": "a", "capped": true}, 72, "").await;
    assert_eq!(
        f.message,
        "the 'size' field is required when 'capped' is true"
    );
    // Nothing was created.
    let reply = run(&db, doc! {"listCollections": 1}).await;
    assert!(first_batch(&reply).is_empty(), "{reply}");
}

#[tokio::test]
async fn the_newest_documents_stay_in_insertion_order() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    assert_ok(
        &run(
            &db,
            doc! {"create": "log", "capped": true, "size": 4000, "max": 5},
        )
        .await,
    );
    // The size is kept rounded up to 256 bytes, as MongoDB 7.0 keeps it.
    assert_eq!(
        options_of(&db, "log").await,
        doc! {"capped": true, "size": 4096, "max": 5}
    );
    let log = coll(&db, "log");
    // `_id`s fall while `n` rises: insertion order is not `_id` order.
    for n in 0..8 {
        log.insert_one(doc! {"_id": 100 - n, "n": n}).await.unwrap();
    }
    assert_eq!(ns_in_order(&log).await, vec![3, 4, 5, 6, 7]);
    // One batch larger than `max`: only its newest five remain.
    let batch: Vec<Document> = (8..20).map(|n| doc! {"_id": 100 - n, "n": n}).collect();
    let inserted = log.insert_many(batch).await.unwrap();
    assert_eq!(inserted.inserted_ids.len(), 12);
    assert_eq!(ns_in_order(&log).await, vec![15, 16, 17, 18, 19]);
    assert_eq!(log.count_documents(doc! {}).await.unwrap(), 5);

    // Newest first.
    let newest_first: Vec<Document> = log
        .find(doc! {})
        .sort(doc! {"$natural": -1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let ns: Vec<i64> = newest_first.iter().map(|d| num(d, "n")).collect();
    assert_eq!(ns, vec![19, 18, 17, 16, 15]);
    // A filter, a limit and a sort by `_id` still work.
    let reply = run(
        &db,
        doc! {"find": "log", "filter": {"n": {"$gte": 16}}, "limit": 2},
    )
    .await;
    let ns: Vec<i64> = first_batch(&reply).iter().map(|d| num(d, "n")).collect();
    assert_eq!(ns, vec![16, 17]);
    let reply = run(&db, doc! {"find": "log", "sort": {"_id": 1}}).await;
    let ns: Vec<i64> = first_batch(&reply).iter().map(|d| num(d, "n")).collect();
    assert_eq!(ns, vec![19, 18, 17, 16, 15]);
    // Explain shows the collection scan.
    let plan = run(
        &db,
        doc! {"explain": {"find": "log", "filter": {}}, "verbosity": "queryPlanner"},
    )
    .await;
    assert!(format!("{plan}").contains("COLLSCAN"), "{plan}");

    let stats = run(&db, doc! {"collStats": "log"}).await;
    assert_eq!(stats.get_bool("capped"), Ok(true), "{stats}");
    assert_eq!(num(&stats, "maxSize"), 4096, "{stats}");
    assert_eq!(num(&stats, "max"), 5, "{stats}");
    assert_eq!(num(&stats, "count"), 5, "{stats}");
}

#[tokio::test]
async fn the_size_bound_removes_the_oldest_and_refuses_what_never_fits() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    assert_ok(&run(&db, doc! {"create": "log", "capped": true, "size": 1024}).await);
    let log = coll(&db, "log");
    let pad = "x".repeat(200);
    // Each document is 231 bytes: four fit in 1024, five do not.
    for n in 0..10 {
        log.insert_one(doc! {"_id": n, "n": n, "pad": &pad})
            .await
            .unwrap();
    }
    assert_eq!(ns_in_order(&log).await, vec![6, 7, 8, 9]);
    let stats = run(&db, doc! {"collStats": "log"}).await;
    assert!(num(&stats, "size") <= 1024, "{stats}");

    // A document larger than the whole collection is refused, and
    // nothing is removed to make room for it.
    let big = "y".repeat(2000);
    let f = expect_failure(
        log.insert_one(doc! {"_id": 100, "n": 100, "pad": big})
            .await,
        2,
        "BadValue",
    );
    assert_eq!(f.message, "object to insert exceeds cappedMaxSize");
    assert_eq!(ns_in_order(&log).await, vec![6, 7, 8, 9]);

    // Deletes and updates are allowed; the bounds count what is left.
    log.delete_one(doc! {"n": 7}).await.unwrap();
    log.update_one(doc! {"n": 8}, doc! {"$set": {"tag": "kept"}})
        .await
        .unwrap();
    assert_eq!(ns_in_order(&log).await, vec![6, 8, 9]);
    log.insert_one(doc! {"_id": 10, "n": 10, "pad": &pad})
        .await
        .unwrap();
    assert_eq!(ns_in_order(&log).await, vec![6, 8, 9, 10]);
    log.insert_one(doc! {"_id": 11, "n": 11, "pad": &pad})
        .await
        .unwrap();
    assert_eq!(ns_in_order(&log).await, vec![8, 9, 10, 11]);
    let kept = log.find_one(doc! {"n": 8}).await.unwrap().unwrap();
    assert_eq!(kept.get_str("tag"), Ok("kept"));
    // A duplicate `_id` is refused as anywhere else.
    expect_failure(
        log.insert_one(doc! {"_id": 11, "n": 12}).await,
        11000,
        "DuplicateKey",
    );
}

#[tokio::test]
async fn tailable_cursors_follow_new_documents() {
    let srv = TestServer::start().await;
    // A cursor lives on the gateway that opened it.
    let db = srv.pinned_db(DB);
    assert_ok(&run(&db, doc! {"create": "log", "capped": true, "size": 100_000}).await);
    // On an empty collection the cursor is not kept, as in MongoDB.
    let reply = run(&db, doc! {"find": "log", "tailable": true}).await;
    assert_eq!(cursor_id(&reply), 0, "{reply}");

    let log = coll(&db, "log");
    log.insert_many((0..3).map(|n| doc! {"n": n, "level": if n == 1 { "error" } else { "info" }}))
        .await
        .unwrap();
    let reply = run(
        &db,
        doc! {"find": "log", "tailable": true, "filter": {"level": "info"}, "projection": {"_id": 0}},
    )
    .await;
    let id = cursor_id(&reply);
    assert_ne!(id, 0, "{reply}");
    assert_eq!(
        first_batch(&reply),
        vec![
            doc! {"n": 0, "level": "info"},
            doc! {"n": 2, "level": "info"}
        ]
    );
    // Nothing new: an empty batch, and the cursor stays open.
    let more = run(&db, doc! {"getMore": id, "collection": "log"}).await;
    assert!(next_batch(&more).is_empty(), "{more}");
    assert_eq!(cursor_id(&more), id);
    log.insert_many((3..6).map(|n| doc! {"n": n, "level": "info"}))
        .await
        .unwrap();
    let more = run(
        &db,
        doc! {"getMore": id, "collection": "log", "batchSize": 2},
    )
    .await;
    assert_eq!(
        next_batch(&more),
        vec![
            doc! {"n": 3, "level": "info"},
            doc! {"n": 4, "level": "info"}
        ]
    );
    let more = run(&db, doc! {"getMore": id, "collection": "log"}).await;
    assert_eq!(next_batch(&more), vec![doc! {"n": 5, "level": "info"}]);
    assert_eq!(cursor_id(&more), id);
    // maxTimeMS on a getMore is for awaitData cursors only.
    expect_command_error(
        &db,
        doc! {"getMore": id, "collection": "log", "maxTimeMS": 100},
        2,
        "BadValue",
    )
    .await;

    // Refused combinations.
    assert_ok(&run(&db, doc! {"create": "plain"}).await);
    coll(&db, "plain").insert_one(doc! {"n": 1}).await.unwrap();
    let f =
        expect_command_error(&db, doc! {"find": "plain", "tailable": true}, 2, "BadValue").await;
    assert!(
        f.message
            .contains("tailable cursor requested on non capped collection"),
        "{f:?}"
    );
    expect_command_error(
        &db,
        doc! {"find": "log", "awaitData": true},
        9,
        "FailedToParse",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"find": "log", "tailable": true, "sort": {"n": 1}},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"find": "log", "tailable": true, "singleBatch": true},
        2,
        "BadValue",
    )
    .await;
    assert_ok(
        &run(
            &db,
            doc! {"find": "log", "tailable": true, "sort": {"$natural": 1}},
        )
        .await,
    );
}

#[tokio::test]
async fn await_data_waits_for_an_insert_or_the_time_limit() {
    let srv = TestServer::start().await;
    // A cursor lives on the gateway that opened it.
    let db = srv.pinned_db(DB);
    assert_ok(&run(&db, doc! {"create": "log", "capped": true, "size": 100_000}).await);
    let log = coll(&db, "log");
    log.insert_one(doc! {"n": 0}).await.unwrap();
    let reply = run(
        &db,
        doc! {"find": "log", "tailable": true, "awaitData": true, "projection": {"_id": 0}},
    )
    .await;
    let id = cursor_id(&reply);
    assert_eq!(first_batch(&reply), vec![doc! {"n": 0}]);

    // Nothing arrives: the getMore waits out its maxTimeMS, then answers
    // an empty batch with the cursor still open.
    let started = Instant::now();
    let more = run(
        &db,
        doc! {"getMore": id, "collection": "log", "maxTimeMS": 300},
    )
    .await;
    let waited = started.elapsed();
    assert!(next_batch(&more).is_empty(), "{more}");
    assert_eq!(cursor_id(&more), id);
    assert!(
        waited >= Duration::from_millis(250),
        "answered after {waited:?}"
    );

    // An insert while it waits ends the wait with the new document.
    let writer = {
        let log = log.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            log.insert_one(doc! {"n": 1}).await.unwrap();
        })
    };
    let started = Instant::now();
    let more = run(
        &db,
        doc! {"getMore": id, "collection": "log", "maxTimeMS": 5000},
    )
    .await;
    assert_eq!(next_batch(&more), vec![doc! {"n": 1}]);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    writer.await.unwrap();
}

#[tokio::test]
async fn the_drivers_tailable_cursor_reads_a_log_as_it_grows() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    assert_ok(&run(&db, doc! {"create": "log", "capped": true, "size": 100_000}).await);
    let log = coll(&db, "log");
    log.insert_one(doc! {"n": 0}).await.unwrap();
    let options = FindOptions::builder()
        .cursor_type(CursorType::TailableAwait)
        .max_await_time(Duration::from_millis(200))
        .build();
    let mut cursor = log.find(doc! {}).with_options(options).await.unwrap();
    let writer = {
        let log = log.clone();
        tokio::spawn(async move {
            for n in 1..5 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                log.insert_one(doc! {"n": n}).await.unwrap();
            }
        })
    };
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let next = tokio::time::timeout(Duration::from_secs(10), cursor.next())
            .await
            .expect("the tailable cursor stalled")
            .expect("the tailable cursor ended")
            .unwrap();
        seen.push(num(&next, "n"));
    }
    assert_eq!(seen, vec![0, 1, 2, 3, 4]);
    writer.await.unwrap();
}

#[tokio::test]
async fn a_cursor_overtaken_by_the_collection_fails_with_capped_position_lost() {
    let srv = TestServer::start().await;
    // A cursor lives on the gateway that opened it.
    let db = srv.pinned_db(DB);
    assert_ok(
        &run(
            &db,
            doc! {"create": "log", "capped": true, "size": 100_000, "max": 3},
        )
        .await,
    );
    let log = coll(&db, "log");
    log.insert_many((0..3).map(|n| doc! {"n": n}))
        .await
        .unwrap();
    let reply = run(&db, doc! {"find": "log", "tailable": true, "batchSize": 1}).await;
    let id = cursor_id(&reply);
    assert_eq!(num(&first_batch(&reply)[0], "n"), 0);
    // The document the cursor stands on is pushed out.
    log.insert_many((3..6).map(|n| doc! {"n": n}))
        .await
        .unwrap();
    expect_command_error(
        &db,
        doc! {"getMore": id, "collection": "log"},
        136,
        "CappedPositionLost",
    )
    .await;
    // The cursor is gone.
    expect_command_error(
        &db,
        doc! {"getMore": id, "collection": "log"},
        43,
        "CursorNotFound",
    )
    .await;
}

#[tokio::test]
async fn coll_mod_changes_the_bounds_for_the_next_insert() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    assert_ok(
        &run(
            &db,
            doc! {"create": "log", "capped": true, "size": 100_000, "max": 10},
        )
        .await,
    );
    let log = coll(&db, "log");
    log.insert_many((0..6).map(|n| doc! {"n": n}))
        .await
        .unwrap();
    assert_ok(
        &run(
            &db,
            doc! {"collMod": "log", "cappedMax": 3, "cappedSize": 50_000},
        )
        .await,
    );
    assert_eq!(
        options_of(&db, "log").await,
        doc! {"capped": true, "size": 50_176, "max": 3}
    );
    // Nothing goes until the next insert, as in MongoDB.
    assert_eq!(ns_in_order(&log).await, vec![0, 1, 2, 3, 4, 5]);
    log.insert_one(doc! {"n": 6}).await.unwrap();
    assert_eq!(ns_in_order(&log).await, vec![4, 5, 6]);

    assert_ok(&run(&db, doc! {"create": "plain"}).await);
    let f = expect_command_error(
        &db,
        doc! {"collMod": "plain", "cappedSize": 4096},
        72,
        "InvalidOptions",
    )
    .await;
    assert_eq!(f.message, "Collection must be capped.");
    expect_command_error(
        &db,
        doc! {"collMod": "log", "cappedSize": -1},
        2,
        "BadValue",
    )
    .await;
}

#[tokio::test]
async fn convert_to_capped_keeps_the_newest_documents() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let events = coll(&db, "events");
    let pad = "x".repeat(200);
    events
        .insert_many((0..10).map(|n| doc! {"_id": n, "n": n, "pad": &pad}))
        .await
        .unwrap();
    events
        .create_index(
            compat_tests::mongodb::IndexModel::builder()
                .keys(doc! {"n": 1})
                .build(),
        )
        .await
        .unwrap();
    assert_ok(&run(&db, doc! {"convertToCapped": "events", "size": 1000}).await);
    assert_eq!(
        options_of(&db, "events").await,
        doc! {"capped": true, "size": 1024}
    );
    // 231-byte documents: the newest four fit, oldest first.
    assert_eq!(ns_in_order(&events).await, vec![6, 7, 8, 9]);
    // Only the `_id` index is left.
    let reply = run(&db, doc! {"listIndexes": "events"}).await;
    let names: Vec<String> = first_batch(&reply)
        .iter()
        .map(|i| i.get_str("name").unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["_id_"]);
    // It is capped from now on.
    events
        .insert_one(doc! {"_id": 10, "n": 10, "pad": &pad})
        .await
        .unwrap();
    assert_eq!(ns_in_order(&events).await, vec![7, 8, 9, 10]);

    expect_command_error(
        &db,
        doc! {"convertToCapped": "missing", "size": 1000},
        26,
        "NamespaceNotFound",
    )
    .await;
    expect_command_error(&db, doc! {"convertToCapped": "events"}, 40414, "").await;
}

#[tokio::test]
async fn clone_collection_as_capped_copies_the_newest_documents_and_the_validator() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    assert_ok(
        &run(
            &db,
            doc! {"create": "events", "validator": {"n": {"$type": "int"}}},
        )
        .await,
    );
    let events = coll(&db, "events");
    let pad = "x".repeat(200);
    events
        .insert_many((0..10).map(|n| doc! {"_id": n, "n": n, "pad": &pad}))
        .await
        .unwrap();
    assert_ok(
        &run(
            &db,
            doc! {"cloneCollectionAsCapped": "events", "toCollection": "recent", "size": 1000},
        )
        .await,
    );
    let recent = coll(&db, "recent");
    // 231-byte documents: the newest four fit; the source is untouched.
    assert_eq!(ns_in_order(&recent).await, vec![6, 7, 8, 9]);
    assert_eq!(events.count_documents(doc! {}).await.unwrap(), 10);
    assert_eq!(
        options_of(&db, "recent").await,
        doc! {"capped": true, "size": 1024, "validator": {"n": {"$type": "int"}}}
    );
    // The copy is capped and checks the validator.
    recent
        .insert_one(doc! {"_id": 10, "n": 10, "pad": &pad})
        .await
        .unwrap();
    assert_eq!(ns_in_order(&recent).await, vec![7, 8, 9, 10]);
    let refused = recent.insert_one(doc! {"_id": 11, "n": "eleven"}).await;
    compat_tests::expect_failure(refused, 121, "DocumentValidationFailure");

    let f = expect_command_error(
        &db,
        doc! {"cloneCollectionAsCapped": "events", "toCollection": "recent", "size": 1000},
        48,
        "NamespaceExists",
    )
    .await;
    assert_eq!(
        f.message,
        format!(
            "cloneCollectionAsCapped failed - destination collection {DB}.recent already \
             exists. source collection: {DB}.events"
        )
    );
    expect_command_error(
        &db,
        doc! {"cloneCollectionAsCapped": "missing", "toCollection": "m2", "size": 1000},
        26,
        "NamespaceNotFound",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"cloneCollectionAsCapped": "events", "size": 1000},
        40414,
        "",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"cloneCollectionAsCapped": "events", "toCollection": "x"},
        40414,
        "",
    )
    .await;
    assert_ok(
        &run(
            &db,
            doc! {"create": "v", "viewOn": "events", "pipeline": []},
        )
        .await,
    );
    let f = expect_command_error(
        &db,
        doc! {"cloneCollectionAsCapped": "v", "toCollection": "x", "size": 1000},
        166,
        "CommandNotSupportedOnView",
    )
    .await;
    assert_eq!(
        f.message,
        format!("cloneCollectionAsCapped not supported for views: {DB}.v")
    );
}

#[tokio::test]
async fn a_capped_collection_cannot_be_sharded() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    assert_ok(&run(&db, doc! {"create": "log", "capped": true, "size": 4096}).await);
    let f = expect_command_error(
        &srv.db("admin"),
        doc! {"shardCollection": format!("{DB}.log"), "key": {"_id": "hashed"}},
        72,
        "InvalidOptions",
    )
    .await;
    assert!(f.message.contains("capped"), "{f:?}");
}

#[tokio::test]
async fn capped_collections_survive_a_restart() {
    let mut srv = TestServer::start().await;
    let db = srv.db(DB);
    assert_ok(
        &run(
            &db,
            doc! {"create": "log", "capped": true, "size": 100_000, "max": 4},
        )
        .await,
    );
    coll(&db, "log")
        .insert_many((0..6).map(|n| doc! {"_id": 10 - n, "n": n}))
        .await
        .unwrap();
    srv.restart().await;
    let db = srv.db(DB);
    let log = coll(&db, "log");
    assert_eq!(ns_in_order(&log).await, vec![2, 3, 4, 5]);
    log.insert_one(doc! {"_id": 0, "n": 6}).await.unwrap();
    assert_eq!(ns_in_order(&log).await, vec![3, 4, 5, 6]);
    assert_eq!(
        options_of(&db, "log").await,
        doc! {"capped": true, "size": 100_096, "max": 4}
    );
}
