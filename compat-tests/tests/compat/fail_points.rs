//! The `failCommand` fail point through the official driver, as drivers'
//! own test suites use it against MongoDB: `configureFailPoint` exists
//! only with `--enable-test-commands`; a retryable error or a closed
//! connection makes the driver retry a write or a read once, and the
//! write is applied once; `blockConnection` holds a command; a
//! `writeConcernError` is added to a command that ran; `appName`, `times`
//! and `skip` pick the commands it acts on.

use std::time::{Duration, Instant};

use compat_tests::{
    bson::{doc, Document},
    expect_command_error, expect_failure,
    mongodb::{error::ErrorKind, Database},
    TestServer,
};

async fn fail_command(
    admin: &Database,
    mode: compat_tests::bson::Bson,
    data: Document,
) -> Document {
    admin
        .run_command(doc! {"configureFailPoint": "failCommand", "mode": mode, "data": data})
        .await
        .unwrap()
}

#[tokio::test]
async fn configure_fail_point_exists_only_with_test_commands() {
    let srv = TestServer::start().await;
    expect_command_error(
        &srv.db("admin"),
        doc! {"configureFailPoint": "failCommand", "mode": "off"},
        59,
        "CommandNotFound",
    )
    .await;
    let srv = TestServer::start_with_args(&["--enable-test-commands"]).await;
    let admin = srv.db("admin");
    expect_command_error(
        &admin,
        doc! {"configureFailPoint": "noSuchPoint", "mode": "alwaysOn"},
        266,
        "FailPointSetFailed",
    )
    .await;
    expect_command_error(
        &admin,
        doc! {"configureFailPoint": "failCommand", "mode": "sometimes", "data": {"failCommands": ["ping"]}},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(
        &srv.db("db"),
        doc! {"configureFailPoint": "failCommand", "mode": "off"},
        13,
        "Unauthorized",
    )
    .await;
}

#[tokio::test]
async fn a_retryable_error_is_retried_once_and_the_write_applied_once() {
    let srv = TestServer::start_with_args(&["--enable-test-commands"]).await;
    let admin = srv.db("admin");
    let c = srv.db("db").collection::<Document>("c");
    fail_command(
        &admin,
        doc! {"times": 1}.into(),
        doc! {"failCommands": ["insert"], "errorCode": 91},
    )
    .await;
    c.insert_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);
    // The fail point acted once and is off again.
    let off = fail_command(&admin, "off".into(), doc! {}).await;
    assert_eq!(off.get_i64("count").unwrap(), 1, "{off}");

    // Twice in a row: the one retry fails too, and the driver reports it
    // with the label it retried on.
    fail_command(
        &admin,
        doc! {"times": 2}.into(),
        doc! {"failCommands": ["insert"], "errorCode": 189},
    )
    .await;
    let e = c.insert_one(doc! {"_id": 2}).await.unwrap_err();
    assert!(e.contains_label("RetryableWriteError"), "{e:?}");
    // The error carries the topology version the driver knows, as
    // MongoDB's do, so the driver keeps the server selectable and the
    // next operation runs at once.
    let started = std::time::Instant::now();
    expect_failure::<()>(Err(e), 189, "PrimarySteppedDown");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the next operation waited {:?} for the server",
        started.elapsed()
    );

    // A non-retryable code is not retried.
    fail_command(
        &admin,
        doc! {"times": 1}.into(),
        doc! {"failCommands": ["update"], "errorCode": 2},
    )
    .await;
    let r = c.update_one(doc! {"_id": 1}, doc! {"$set": {"a": 1}}).await;
    let e = expect_failure(r, 2, "BadValue");
    assert_eq!(e.message, "Failing command via 'failCommand' failpoint");
    c.update_one(doc! {"_id": 1}, doc! {"$set": {"a": 1}})
        .await
        .unwrap();
}

#[tokio::test]
async fn a_closed_connection_is_retried_by_reads_and_writes() {
    let srv = TestServer::start_with_args(&["--enable-test-commands"]).await;
    let admin = srv.db("admin");
    let c = srv.db("db").collection::<Document>("c");
    c.insert_one(doc! {"_id": 1}).await.unwrap();
    fail_command(
        &admin,
        doc! {"times": 1}.into(),
        doc! {"failCommands": ["find", "insert"], "closeConnection": true},
    )
    .await;
    let found = c.find_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(found, Some(doc! {"_id": 1}));
    fail_command(
        &admin,
        doc! {"times": 1}.into(),
        doc! {"failCommands": ["insert"], "closeConnection": true},
    )
    .await;
    c.insert_one(doc! {"_id": 2}).await.unwrap();
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 2);
    // Without retries, the client sees the network error.
    let client = srv
        .client_with(|o| {
            o.retry_reads = Some(false);
        })
        .await;
    fail_command(
        &admin,
        doc! {"times": 1}.into(),
        doc! {"failCommands": ["find"], "closeConnection": true},
    )
    .await;
    let e = client
        .database("db")
        .collection::<Document>("c")
        .find_one(doc! {})
        .await
        .unwrap_err();
    assert!(matches!(*e.kind, ErrorKind::Io(_)), "{e:?}");
}

#[tokio::test]
async fn block_write_concern_error_app_name_and_skip() {
    let srv = TestServer::start_with_args(&["--enable-test-commands"]).await;
    let admin = srv.db("admin");
    let db = srv.db("db");
    let c = db.collection::<Document>("c");

    fail_command(
        &admin,
        doc! {"times": 1}.into(),
        doc! {"failCommands": ["ping"], "blockConnection": true, "blockTimeMS": 300},
    )
    .await;
    let started = Instant::now();
    db.run_command(doc! {"ping": 1}).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));

    // A write concern error on a write that ran: the driver retries the
    // labelled error, the retry gets the first outcome, and the document
    // is there once.
    fail_command(
        &admin,
        doc! {"times": 1}.into(),
        doc! {"failCommands": ["insert"], "writeConcernError": {"code": 91, "errmsg": "Replication is being shut down"}},
    )
    .await;
    c.insert_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);
    fail_command(
        &admin,
        doc! {"times": 1}.into(),
        doc! {"failCommands": ["delete"], "writeConcernError": {"code": 100, "errmsg": "not enough data-bearing nodes"}},
    )
    .await;
    let reply = db
        .run_command(doc! {"delete": "c", "deletes": [{"q": {"_id": 1}, "limit": 1}]})
        .await
        .unwrap();
    assert_eq!(
        reply.get_document("writeConcernError").unwrap(),
        &doc! {"code": 100, "errmsg": "not enough data-bearing nodes"}
    );
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 0);

    // appName: only that client's commands fail.
    fail_command(
        &admin,
        "alwaysOn".into(),
        doc! {"failCommands": ["count"], "errorCode": 2, "appName": "victim"},
    )
    .await;
    c.count_documents(doc! {}).await.unwrap();
    let victim = srv
        .client_with(|o| o.app_name = Some("victim".to_string()))
        .await;
    let r = victim
        .database("db")
        .collection::<Document>("c")
        .estimated_document_count()
        .await;
    expect_failure(r, 2, "BadValue");
    fail_command(&admin, "off".into(), doc! {}).await;

    // skip: the first command passes, the next fails.
    fail_command(
        &admin,
        doc! {"skip": 1}.into(),
        doc! {"failCommands": ["distinct"], "errorCode": 2},
    )
    .await;
    c.distinct("a", doc! {}).await.unwrap();
    expect_failure(c.distinct("a", doc! {}).await, 2, "BadValue");
}
