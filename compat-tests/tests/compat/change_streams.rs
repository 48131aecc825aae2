//! Change streams through the driver's `watch()`, as a MongoDB 7.0 user
//! sees them: the events of every kind of write (`insert`, `update` with
//! its `updateDescription`, `replace`, `delete`) with their `documentKey`
//! (the shard key and `_id` on a sharded collection) and `fullDocument`
//! (`updateLookup`, and pre- and post-images with
//! `changeStreamPreAndPostImages`); streams on a collection, a database and
//! the whole deployment; a pipeline after `$changeStream`; `drop`,
//! `rename` and `dropDatabase` and the `invalidate` they cause, and
//! `startAfter` past it; the DDL events of `showExpandedEvents`; resuming
//! from a saved token and from an operation time after a restart;
//! `awaitData` `getMore`s that wait for a write; `ChangeStreamHistoryLost`
//! past the retention; and a concurrent workload whose every acknowledged
//! write appears exactly once, in order, while partitions split.
//!
//! The change log is the embedded engine's: on a PostgreSQL fleet
//! `$changeStream` is refused, and these tests do not run there.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document, Timestamp},
    cursor_id, expect_command_error, failure, first_batch,
    mongodb::{
        change_stream::{
            event::{ChangeStreamEvent, OperationType, ResumeToken},
            ChangeStream,
        },
        options::{FullDocumentBeforeChangeType, FullDocumentType},
        Collection, Database,
    },
    next_batch, num, TestServer,
};
use futures::StreamExt;

const DB: &str = "streams";

type Events = ChangeStream<ChangeStreamEvent<Document>>;

fn skip() -> bool {
    compat_tests::embedded_only("the change log is the embedded engine's")
}

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

/// The next event, failing the test after `wait`.
async fn next(stream: &mut Events) -> ChangeStreamEvent<Document> {
    match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(e))) => panic!("the stream failed: {e}"),
        Ok(None) => panic!("the stream ended"),
        Err(_) => panic!("no event within 10 s"),
    }
}

/// The next `n` events.
async fn take(stream: &mut Events, n: usize) -> Vec<ChangeStreamEvent<Document>> {
    let mut events = Vec::with_capacity(n);
    for _ in 0..n {
        events.push(next(stream).await);
    }
    events
}

fn id_of(event: &ChangeStreamEvent<Document>) -> Bson {
    event
        .document_key
        .as_ref()
        .and_then(|k| k.get("_id").cloned())
        .unwrap_or(Bson::Null)
}

#[tokio::test]
async fn every_kind_of_write_shows_as_its_event() {
    if skip() {
        return;
    }
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c: Collection<Document> = db.collection("kinds");
    c.insert_one(doc! {"_id": 0}).await.unwrap();
    let mut stream = c.watch().await.unwrap();
    c.insert_one(doc! {"_id": 1, "a": 1, "b": {"c": 1}, "tags": ["x"], "gone": true})
        .await
        .unwrap();
    c.update_one(
        doc! {"_id": 1},
        doc! {"$set": {"a": 2, "b.c": 5}, "$unset": {"gone": ""}, "$push": {"tags": "y"}},
    )
    .await
    .unwrap();
    c.replace_one(doc! {"_id": 1}, doc! {"whole": "new"})
        .await
        .unwrap();
    c.delete_one(doc! {"_id": 1}).await.unwrap();
    // A no-op update changes nothing and logs nothing.
    c.update_one(doc! {"_id": 0}, doc! {"$set": {"_id": 0}})
        .await
        .unwrap();
    c.insert_one(doc! {"_id": 2}).await.unwrap();

    let events = take(&mut stream, 5).await;
    let kinds: Vec<OperationType> = events.iter().map(|e| e.operation_type.clone()).collect();
    assert_eq!(
        kinds,
        [
            OperationType::Insert,
            OperationType::Update,
            OperationType::Replace,
            OperationType::Delete,
            OperationType::Insert,
        ]
    );
    for e in &events {
        let ns = e.ns.as_ref().expect("every write names its namespace");
        assert_eq!(ns.db, DB);
        assert_eq!(ns.coll.as_deref(), Some("kinds"));
        assert!(e.cluster_time.is_some() && e.wall_time.is_some());
    }
    let times: Vec<Timestamp> = events.iter().filter_map(|e| e.cluster_time).collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");

    let insert = &events[0];
    assert_eq!(insert.document_key, Some(doc! {"_id": 1}));
    assert_eq!(
        insert.full_document,
        Some(doc! {"_id": 1, "a": 1, "b": {"c": 1}, "tags": ["x"], "gone": true})
    );
    let update = &events[1];
    let description = update.update_description.as_ref().expect("a description");
    assert_eq!(
        description.updated_fields,
        doc! {"a": 2, "b.c": 5, "tags.1": "y"}
    );
    assert_eq!(description.removed_fields, vec!["gone".to_string()]);
    assert_eq!(update.full_document, None);
    assert_eq!(
        events[2].full_document,
        Some(doc! {"_id": 1, "whole": "new"})
    );
    assert_eq!(events[3].document_key, Some(doc! {"_id": 1}));
    assert_eq!(events[3].full_document, None);
    assert_eq!(id_of(&events[4]), Bson::Int32(2));
}

#[tokio::test]
async fn update_lookup_reads_the_document_as_it_is_now() {
    if skip() {
        return;
    }
    let srv = TestServer::start().await;
    let c: Collection<Document> = srv.db(DB).collection("lookup");
    let mut stream = c
        .watch()
        .full_document(FullDocumentType::UpdateLookup)
        .await
        .unwrap();
    c.insert_one(doc! {"_id": 1, "n": 0}).await.unwrap();
    c.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .await
        .unwrap();
    c.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .await
        .unwrap();
    c.delete_one(doc! {"_id": 1}).await.unwrap();
    let events = take(&mut stream, 4).await;
    // Read after the delete: the updated document is gone by then.
    assert_eq!(events[1].operation_type, OperationType::Update);
    assert_eq!(events[1].full_document, None);
    assert_eq!(
        events[1]
            .update_description
            .as_ref()
            .unwrap()
            .updated_fields,
        doc! {"n": 1}
    );

    let mut stream = c
        .watch()
        .full_document(FullDocumentType::UpdateLookup)
        .await
        .unwrap();
    c.insert_one(doc! {"_id": 2, "n": 0}).await.unwrap();
    let _insert = next(&mut stream).await;
    c.update_one(doc! {"_id": 2}, doc! {"$set": {"n": 7}})
        .await
        .unwrap();
    let update = next(&mut stream).await;
    assert_eq!(update.full_document, Some(doc! {"_id": 2, "n": 7}));
}

#[tokio::test]
async fn pre_and_post_images_need_the_collection_option() {
    if skip() {
        return;
    }
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    assert_ok(
        &run(
            &db,
            doc! {"create": "images", "changeStreamPreAndPostImages": {"enabled": true}},
        )
        .await,
    );
    let listed = run(
        &db,
        doc! {"listCollections": 1, "filter": {"name": "images"}},
    )
    .await;
    assert_eq!(
        first_batch(&listed)[0]
            .get_document("options")
            .unwrap()
            .get_document("changeStreamPreAndPostImages")
            .unwrap(),
        &doc! {"enabled": true}
    );
    let c: Collection<Document> = db.collection("images");
    c.insert_one(doc! {"_id": 1, "v": "first"}).await.unwrap();
    let mut stream = c
        .watch()
        .full_document(FullDocumentType::Required)
        .full_document_before_change(FullDocumentBeforeChangeType::Required)
        .await
        .unwrap();
    c.update_one(doc! {"_id": 1}, doc! {"$set": {"v": "second"}})
        .await
        .unwrap();
    c.delete_one(doc! {"_id": 1}).await.unwrap();
    let events = take(&mut stream, 2).await;
    assert_eq!(
        events[0].full_document,
        Some(doc! {"_id": 1, "v": "second"})
    );
    assert_eq!(
        events[0].full_document_before_change,
        Some(doc! {"_id": 1, "v": "first"})
    );
    assert_eq!(
        events[1].full_document_before_change,
        Some(doc! {"_id": 1, "v": "second"})
    );

    // Without the option, `required` fails and `whenAvailable` gives null.
    let plain: Collection<Document> = db.collection("plain");
    plain.insert_one(doc! {"_id": 1}).await.unwrap();
    let mut lenient = plain
        .watch()
        .full_document_before_change(FullDocumentBeforeChangeType::WhenAvailable)
        .await
        .unwrap();
    let mut strict = plain
        .watch()
        .full_document_before_change(FullDocumentBeforeChangeType::Required)
        .await
        .unwrap();
    plain.delete_one(doc! {"_id": 1}).await.unwrap();
    let deleted = next(&mut lenient).await;
    assert_eq!(deleted.operation_type, OperationType::Delete);
    assert_eq!(deleted.full_document_before_change, None);
    let e = match tokio::time::timeout(Duration::from_secs(10), strict.next()).await {
        Ok(Some(Err(e))) => e,
        other => panic!("expected a failure, got {other:?}"),
    };
    assert_eq!(failure(&e).map(|f| f.code), Some(47), "{e}");

    // `collMod` turns the option off, and refuses a malformed one.
    assert_ok(
        &run(
            &db,
            doc! {"collMod": "images", "changeStreamPreAndPostImages": {"enabled": false}},
        )
        .await,
    );
    expect_command_error(
        &db,
        doc! {"collMod": "images", "changeStreamPreAndPostImages": true},
        14,
        "TypeMismatch",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"collMod": "images", "changeStreamPreAndPostImages": {}},
        40414,
        "",
    )
    .await;
}

#[tokio::test]
async fn the_shard_key_is_part_of_the_document_key() {
    if skip() {
        return;
    }
    let srv = TestServer::start().await;
    let admin = srv.db("admin");
    assert_ok(
        &run(
            &admin,
            doc! {"shardCollection": "streams.sharded", "key": {"tenant": "hashed"}, "numInitialChunks": 8},
        )
        .await,
    );
    let c: Collection<Document> = srv.db(DB).collection("sharded");
    let mut stream = c.watch().await.unwrap();
    for i in 0..20 {
        c.insert_one(doc! {"_id": i, "tenant": format!("t{}", i % 5)})
            .await
            .unwrap();
    }
    // A change of the shard-key value moves the document and is one event.
    c.update_one(
        doc! {"_id": 3, "tenant": "t3"},
        doc! {"$set": {"tenant": "t9"}},
    )
    .await
    .unwrap();
    let events = take(&mut stream, 21).await;
    for (i, e) in events.iter().take(20).enumerate() {
        assert_eq!(
            e.document_key,
            Some(doc! {"tenant": format!("t{}", i % 5), "_id": i as i32})
        );
    }
    assert_eq!(events[20].operation_type, OperationType::Update);
    assert_eq!(
        events[20].document_key,
        Some(doc! {"tenant": "t9", "_id": 3})
    );
    assert_eq!(
        events[20]
            .update_description
            .as_ref()
            .unwrap()
            .updated_fields,
        doc! {"tenant": "t9"}
    );
}

#[tokio::test]
async fn database_and_deployment_streams_see_their_scope() {
    if skip() {
        return;
    }
    let srv = TestServer::start().await;
    let client = srv.new_client().await;
    let one = client.database("one");
    let two = client.database("two");
    let mut db_stream = one.watch().await.unwrap();
    let mut all = client.watch().await.unwrap();
    one.collection::<Document>("a")
        .insert_one(doc! {"_id": "one.a"})
        .await
        .unwrap();
    two.collection::<Document>("b")
        .insert_one(doc! {"_id": "two.b"})
        .await
        .unwrap();
    one.collection::<Document>("c")
        .insert_one(doc! {"_id": "one.c"})
        .await
        .unwrap();
    let seen: Vec<Bson> = take(&mut db_stream, 2).await.iter().map(id_of).collect();
    assert_eq!(seen, [Bson::from("one.a"), Bson::from("one.c")]);
    let seen: Vec<Bson> = take(&mut all, 3).await.iter().map(id_of).collect();
    assert_eq!(
        seen,
        [
            Bson::from("one.a"),
            Bson::from("two.b"),
            Bson::from("one.c")
        ]
    );

    // Streams on internal namespaces and misplaced options are refused.
    let admin = client.database("admin");
    expect_command_error(
        &one,
        doc! {"aggregate": 1, "pipeline": [{"$changeStream": {"allChangesForCluster": true}}], "cursor": {}},
        72,
        "InvalidOptions",
    )
    .await;
    expect_command_error(
        &admin,
        doc! {"aggregate": "system.users", "pipeline": [{"$changeStream": {}}], "cursor": {}},
        73,
        "InvalidNamespace",
    )
    .await;
    expect_command_error(
        &one,
        doc! {"aggregate": "a", "pipeline": [{"$changeStream": {"bogus": 1}}], "cursor": {}},
        40415,
        "",
    )
    .await;
    expect_command_error(
        &one,
        doc! {"aggregate": "a", "pipeline": [{"$match": {}}, {"$changeStream": {}}], "cursor": {}},
        40602,
        "",
    )
    .await;
}

#[tokio::test]
async fn a_pipeline_after_change_stream_filters_and_reshapes() {
    if skip() {
        return;
    }
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c: Collection<Document> = db.collection("piped");
    let mut stream = c
        .watch()
        .pipeline([
            doc! {"$match": {"operationType": "insert", "fullDocument.keep": true}},
            doc! {"$project": {"fullDocument.secret": 0}},
            doc! {"$addFields": {"seen": true}},
        ])
        .await
        .unwrap();
    c.insert_one(doc! {"_id": 1, "keep": false}).await.unwrap();
    c.insert_one(doc! {"_id": 2, "keep": true, "secret": "s"})
        .await
        .unwrap();
    c.delete_one(doc! {"_id": 2}).await.unwrap();
    c.insert_one(doc! {"_id": 3, "keep": true}).await.unwrap();
    let events = take(&mut stream, 2).await;
    assert_eq!(events[0].full_document, Some(doc! {"_id": 2, "keep": true}));
    assert_eq!(id_of(&events[1]), Bson::Int32(3));

    expect_command_error(
        &db,
        doc! {"aggregate": "piped", "pipeline": [{"$changeStream": {}}, {"$group": {"_id": null}}], "cursor": {}},
        20,
        "IllegalOperation",
    )
    .await;
    // A stage that changes `_id` breaks resuming: the first event fails.
    let opened = run(
        &db,
        doc! {"aggregate": "piped", "pipeline": [{"$changeStream": {}}, {"$set": {"_id": 1}}], "cursor": {}},
    )
    .await;
    c.insert_one(doc! {"_id": 4}).await.unwrap();
    let id = cursor_id(&opened);
    expect_command_error(
        &db,
        doc! {"getMore": id, "collection": "piped", "maxTimeMS": 2000},
        280,
        "ChangeStreamFatalError",
    )
    .await;
}

#[tokio::test]
async fn drop_rename_and_drop_database_invalidate() {
    if skip() {
        return;
    }
    let srv = TestServer::start().await;
    let client = srv.new_client().await;
    let db = client.database(DB);
    let c: Collection<Document> = db.collection("doomed");
    c.insert_one(doc! {"_id": 0}).await.unwrap();
    let mut stream = c.watch().await.unwrap();
    c.insert_one(doc! {"_id": 1}).await.unwrap();
    c.drop().await.unwrap();
    let events = take(&mut stream, 3).await;
    assert_eq!(events[1].operation_type, OperationType::Drop);
    assert_eq!(events[2].operation_type, OperationType::Invalidate);
    assert!(
        matches!(
            tokio::time::timeout(Duration::from_secs(5), stream.next()).await,
            Ok(None)
        ),
        "the stream ends after invalidate"
    );
    // `startAfter` the invalidate opens a new stream past it;
    // `resumeAfter` may not.
    let invalidate = events[2].id.clone();
    let mut after = c.watch().start_after(invalidate.clone()).await.unwrap();
    c.insert_one(doc! {"_id": "recreated"}).await.unwrap();
    assert_eq!(id_of(&next(&mut after).await), Bson::from("recreated"));
    let refused = c.watch().resume_after(invalidate).await.unwrap_err();
    assert_eq!(failure(&refused).map(|f| f.code), Some(260), "{refused}");

    // A rename is the last event of the source's stream.
    let mut renamed = c.watch().await.unwrap();
    run(
        &client.database("admin"),
        doc! {"renameCollection": "streams.doomed", "to": "streams.moved"},
    )
    .await;
    let events = take(&mut renamed, 2).await;
    assert_eq!(events[0].operation_type, OperationType::Rename);
    let to = events[0].to.as_ref().expect("the new name");
    assert_eq!(to.coll.as_deref(), Some("moved"));
    assert_eq!(events[1].operation_type, OperationType::Invalidate);

    // Dropping a database: each collection's drop, then the database's,
    // then the database stream's invalidate.
    let mut db_stream = db.watch().await.unwrap();
    db.drop().await.unwrap();
    let events = take(&mut db_stream, 3).await;
    assert_eq!(events[0].operation_type, OperationType::Drop);
    assert_eq!(events[1].operation_type, OperationType::DropDatabase);
    assert_eq!(events[2].operation_type, OperationType::Invalidate);
}

#[tokio::test]
async fn expanded_events_show_ddl() {
    if skip() {
        return;
    }
    let srv = TestServer::start().await;
    let client = srv.new_client().await;
    let db = client.database(DB);
    let mut stream = db.watch().show_expanded_events(true).await.unwrap();
    let mut plain = db.watch().await.unwrap();
    run(&db, doc! {"create": "ddl"}).await;
    run(
        &db,
        doc! {"createIndexes": "ddl", "indexes": [{"key": {"a": 1}, "name": "a_1"}]},
    )
    .await;
    run(&db, doc! {"dropIndexes": "ddl", "index": "a_1"}).await;
    run(
        &db,
        doc! {"collMod": "ddl", "validator": {"a": {"$exists": true}}},
    )
    .await;
    run(
        &client.database("admin"),
        doc! {"shardCollection": "streams.ddl", "key": {"k": "hashed"}},
    )
    .await;
    db.collection::<Document>("ddl")
        .insert_one(doc! {"_id": 1, "a": 1})
        .await
        .unwrap();
    let kinds: Vec<String> = take(&mut stream, 6)
        .await
        .iter()
        .map(|e| match &e.operation_type {
            OperationType::Other(name) => name.clone(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "create",
            "createIndexes",
            "dropIndexes",
            "modify",
            "shardCollection",
            "Insert"
        ]
    );
    // Without `showExpandedEvents` only the insert shows.
    assert_eq!(next(&mut plain).await.operation_type, OperationType::Insert);
}

#[tokio::test]
async fn get_more_waits_for_a_write_and_moves_the_resume_token() {
    if skip() {
        return;
    }
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let opened = run(
        &db,
        doc! {"aggregate": "waits", "pipeline": [{"$changeStream": {}}], "cursor": {}},
    )
    .await;
    let id = cursor_id(&opened);
    assert_ne!(id, 0);
    let first_token = opened
        .get_document("cursor")
        .unwrap()
        .get_document("postBatchResumeToken")
        .unwrap()
        .clone();
    // Nothing happens: the getMore waits its maxTimeMS and comes back
    // empty, with a token further on.
    let started = Instant::now();
    let idle = run(
        &db,
        doc! {"getMore": id, "collection": "waits", "maxTimeMS": 500},
    )
    .await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(450) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert!(next_batch(&idle).is_empty());
    let idle_token = idle
        .get_document("cursor")
        .unwrap()
        .get_document("postBatchResumeToken")
        .unwrap()
        .clone();
    assert!(
        idle_token.get_str("_data").unwrap() > first_token.get_str("_data").unwrap(),
        "{first_token} then {idle_token}"
    );
    // A write while it waits ends the wait at once.
    let writer = srv.db(DB).collection::<Document>("waits");
    let write = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        writer.insert_one(doc! {"_id": "woke"}).await.unwrap();
    });
    let started = Instant::now();
    let woke = run(
        &db,
        doc! {"getMore": id, "collection": "waits", "maxTimeMS": 10_000},
    )
    .await;
    write.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    let batch = next_batch(&woke);
    assert_eq!(batch.len(), 1, "{woke}");
    assert_eq!(
        batch[0].get_document("documentKey").unwrap(),
        &doc! {"_id": "woke"}
    );
    // The batch read to the end of the log: its token is at or past its
    // last event's (tokens of one length order as their places do).
    let after_batch = woke
        .get_document("cursor")
        .unwrap()
        .get_document("postBatchResumeToken")
        .unwrap()
        .get_str("_data")
        .unwrap()
        .to_string();
    let last_event = batch[0]
        .get_document("_id")
        .unwrap()
        .get_str("_data")
        .unwrap();
    assert!(
        after_batch.as_str() >= last_event,
        "{after_batch} < {last_event}"
    );
}

#[tokio::test]
async fn streams_resume_after_a_restart() {
    if skip() {
        return;
    }
    let mut srv = TestServer::start().await;
    let c: Collection<Document> = srv.db(DB).collection("durable");
    let mut stream = c.watch().await.unwrap();
    for i in 0..5 {
        c.insert_one(doc! {"_id": i}).await.unwrap();
    }
    let events = take(&mut stream, 5).await;
    let token: ResumeToken = events[1].id.clone();
    let time = events[3].cluster_time.expect("a cluster time");
    drop(stream);
    srv.kill9();
    srv.restart().await;
    let c: Collection<Document> = srv.db(DB).collection("durable");
    c.insert_one(doc! {"_id": 5}).await.unwrap();
    let mut resumed = c.watch().resume_after(token).await.unwrap();
    let ids: Vec<Bson> = take(&mut resumed, 4).await.iter().map(id_of).collect();
    assert_eq!(ids, [2, 3, 4, 5].map(Bson::Int32).to_vec());
    let mut at = c.watch().start_at_operation_time(time).await.unwrap();
    let ids: Vec<Bson> = take(&mut at, 3).await.iter().map(id_of).collect();
    assert_eq!(ids, [3, 4, 5].map(Bson::Int32).to_vec());
    // Changes after the restart come after those before it.
    c.insert_one(doc! {"_id": 6}).await.unwrap();
    let later = next(&mut at).await;
    assert_eq!(id_of(&later), Bson::Int32(6));
    assert!(later.cluster_time > Some(time));
}

#[tokio::test]
async fn resuming_past_the_retention_is_history_lost() {
    if skip() {
        return;
    }
    // About one second of history, trimmed every second.
    let srv = TestServer::start_with_args(&["--change-log-retention-hours", "0.0003"]).await;
    let c: Collection<Document> = srv.db(DB).collection("short");
    let mut stream = c.watch().await.unwrap();
    c.insert_one(doc! {"_id": 1}).await.unwrap();
    let old = next(&mut stream).await.id;
    tokio::time::sleep(Duration::from_secs(4)).await;
    c.insert_one(doc! {"_id": 2}).await.unwrap();
    let e = c.watch().resume_after(old).await.unwrap_err();
    let f = failure(&e).expect("a server error");
    assert_eq!(
        (f.code, f.code_name.as_str()),
        (286, "ChangeStreamHistoryLost"),
        "{e}"
    );
    // A stream opened now works.
    let mut fresh = c.watch().await.unwrap();
    c.insert_one(doc! {"_id": 3}).await.unwrap();
    assert_eq!(id_of(&next(&mut fresh).await), Bson::Int32(3));
}

/// What one writer did to one document, in order.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Insert,
    Update(i64),
    Delete,
}

#[tokio::test]
async fn every_acknowledged_write_appears_once_and_in_order_through_splits() {
    if skip() {
        return;
    }
    const WRITERS: usize = 8;
    const WRITES_PER_WRITER: usize = 1_250;
    let srv = TestServer::start_with_args(&[
        "--partition-split-bytes",
        "60000",
        "--initial-partitions",
        "2",
    ])
    .await;
    let admin = srv.db("admin");
    assert_ok(
        &run(
            &admin,
            doc! {"shardCollection": "streams.busy", "key": {"_id": "hashed"}},
        )
        .await,
    );
    let c: Collection<Document> = srv.db(DB).collection("busy");
    let mut stream = c.watch().batch_size(1000).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            // Each writer owns its documents, so what it did to each is
            // the order the stream must show.
            let mut done: Vec<(String, Step)> = Vec::new();
            let mut live: Vec<String> = Vec::new();
            let pad = "x".repeat(200);
            for i in 0..WRITES_PER_WRITER {
                let choice = i % 5;
                if choice < 3 || live.is_empty() {
                    let id = format!("w{w}-{i}");
                    c.insert_one(doc! {"_id": &id, "n": 0, "pad": &pad})
                        .await
                        .unwrap();
                    done.push((id.clone(), Step::Insert));
                    live.push(id);
                } else if choice == 3 {
                    let id = live[i % live.len()].clone();
                    c.update_one(doc! {"_id": &id}, doc! {"$inc": {"n": 1}})
                        .await
                        .unwrap();
                    done.push((id, Step::Update(i as i64)));
                } else {
                    let id = live.swap_remove(i % live.len());
                    c.delete_one(doc! {"_id": &id}).await.unwrap();
                    done.push((id, Step::Delete));
                }
            }
            done
        }));
    }
    let mut expected: HashMap<String, Vec<Step>> = HashMap::new();
    let mut total = 0;
    for t in tasks {
        for (id, step) in t.await.unwrap() {
            total += 1;
            let steps = expected.entry(id).or_default();
            // Updates are told apart by order alone.
            steps.push(match step {
                Step::Update(_) => Step::Update(0),
                s => s,
            });
        }
    }
    let mut seen: HashMap<String, Vec<Step>> = HashMap::new();
    for _ in 0..total {
        let e = next(&mut stream).await;
        let Bson::String(id) = id_of(&e) else {
            panic!("an event without a string _id: {e:?}");
        };
        seen.entry(id).or_default().push(match e.operation_type {
            OperationType::Insert => Step::Insert,
            OperationType::Update => Step::Update(0),
            OperationType::Delete => Step::Delete,
            other => panic!("unexpected {other:?}"),
        });
    }
    assert_eq!(seen.len(), expected.len());
    for (id, steps) in &expected {
        assert_eq!(seen.get(id), Some(steps), "the events of {id}");
    }
    // Nothing more: every write appeared once.
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), stream.next())
            .await
            .is_err(),
        "an event beyond the acknowledged writes"
    );
    let stats = run(&srv.db(DB), doc! {"collStats": "busy"}).await;
    assert!(num(&stats, "nchunks") > 2, "the partitions split: {stats}");
}

#[tokio::test]
async fn partition_tokens_share_a_collections_changes() {
    if skip() {
        return;
    }
    let srv = TestServer::start_with_args(&["--partition-split-bytes", "8000"]).await;
    let db = srv.db(DB);
    assert_ok(
        &run(
            &srv.db("admin"),
            doc! {"shardCollection": "streams.shared", "key": {"tenant": "hashed"}, "numInitialChunks": 4},
        )
        .await,
    );
    let reply = run(
        &db,
        doc! {"customAction": "GetChangeStreamTokens", "collection": "shared"},
    )
    .await;
    let tokens = reply.get_array("resumeAfterTokens").unwrap().clone();
    assert_eq!(tokens.len(), 4, "one token per partition: {reply}");
    let c: Collection<Document> = db.collection("shared");
    let mut streams = Vec::new();
    for token in &tokens {
        let Bson::Document(token) = token else {
            panic!("a token is a document: {reply}");
        };
        let token: ResumeToken =
            compat_tests::bson::from_document(token.clone()).expect("a resume token");
        streams.push(c.watch().resume_after(token).await.unwrap());
    }
    // Enough documents that partitions split while the streams follow
    // them; each partition's stream keeps its hash range.
    let pad = "p".repeat(300);
    for i in 0..200 {
        c.insert_one(doc! {"_id": i, "tenant": format!("t{i}"), "pad": &pad})
            .await
            .unwrap();
    }
    let mut seen: HashMap<i32, usize> = HashMap::new();
    let mut per_stream = Vec::new();
    for stream in &mut streams {
        let mut n = 0;
        while let Ok(Some(Ok(e))) =
            tokio::time::timeout(Duration::from_millis(1500), stream.next()).await
        {
            let Bson::Int32(id) = id_of(&e) else {
                panic!("unexpected event {e:?}");
            };
            *seen.entry(id).or_default() += 1;
            n += 1;
        }
        per_stream.push(n);
    }
    assert_eq!(seen.len(), 200, "every insert in some partition's stream");
    assert!(seen.values().all(|&n| n == 1), "and in one only");
    assert!(
        per_stream.iter().all(|&n| n > 0),
        "every partition has some: {per_stream:?}"
    );
    let stats = run(&db, doc! {"collStats": "shared"}).await;
    assert!(num(&stats, "nchunks") > 4, "the partitions split: {stats}");
    expect_command_error(
        &db,
        doc! {"customAction": "GetChangeStreamTokens", "collection": "absent"},
        26,
        "NamespaceNotFound",
    )
    .await;
}

/// A transaction's changes appear at its commit, together and in order,
/// each with the transaction's `lsid` and `txnNumber`; an aborted one's
/// never do.
#[tokio::test]
async fn a_transaction_shows_its_changes_at_commit_with_its_session() {
    if skip() {
        return;
    }
    let srv = TestServer::start().await;
    let c: Collection<Document> = srv.db(DB).collection("txn");
    c.insert_one(doc! {"_id": 0}).await.unwrap();
    let mut stream = c.watch().await.unwrap();
    let mut session = srv.client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    c.insert_one(doc! {"_id": 99})
        .session(&mut session)
        .await
        .unwrap();
    session.abort_transaction().await.unwrap();
    session.start_transaction().await.unwrap();
    c.insert_one(doc! {"_id": 1})
        .session(&mut session)
        .await
        .unwrap();
    c.update_one(doc! {"_id": 0}, doc! {"$set": {"x": 1}})
        .session(&mut session)
        .await
        .unwrap();
    c.insert_one(doc! {"_id": 2}).await.unwrap();
    session.commit_transaction().await.unwrap();
    let events = take(&mut stream, 3).await;
    assert_eq!(id_of(&events[0]), Bson::Int32(2), "{events:?}");
    assert!(events[0].lsid.is_none() && events[0].txn_number.is_none());
    let lsid = session.id().clone();
    for (event, (kind, id)) in events[1..]
        .iter()
        .zip([(OperationType::Insert, 1), (OperationType::Update, 0)])
    {
        assert_eq!(
            (&event.operation_type, id_of(event)),
            (&kind, Bson::Int32(id))
        );
        assert_eq!(event.lsid.as_ref(), Some(&lsid), "{event:?}");
        assert!(event.txn_number.is_some(), "{event:?}");
    }
    assert_eq!(events[1].txn_number, events[2].txn_number);
    assert_eq!(events[1].cluster_time, events[2].cluster_time);
}
