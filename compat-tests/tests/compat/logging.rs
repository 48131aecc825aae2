//! What a server's log shows at the default level, and in either format:
//! Shardgate's own lines, without the storage engine's internals and
//! without terminal colour codes when stderr is not a terminal; with
//! `--log-format json`, one JSON object per line; and slow operations
//! (`--slow-ms`) logged as mongod logs them.

use compat_tests::{bson::doc, TestServer};

/// Runs a little work so the log has more than the start-up lines.
async fn some_work(srv: &TestServer) {
    let coll = srv.db("logs").collection("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    coll.find_one(doc! {}).await.unwrap();
}

#[tokio::test]
async fn the_default_log_is_shardgates_own_and_plain() {
    let srv = TestServer::start().await;
    some_work(&srv).await;
    let log = srv.log();
    assert!(log.contains("shardgate listening"), "{log}");
    assert!(log.contains("connection opened"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file:\n{log}"
    );
    // The storage engine's own info lines stay out of it.
    assert!(!log.contains("lsm_tree"), "{log}");
    assert!(!log.contains("fjall::"), "{log}");
}

#[tokio::test]
async fn json_logs_are_one_object_per_line() {
    let srv = TestServer::start_with_args(&["--log-format", "json"]).await;
    some_work(&srv).await;
    let log = srv.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 3, "{log}");
    for line in &lines {
        assert!(
            line.starts_with('{') && line.ends_with('}'),
            "not a JSON object: {line}"
        );
        assert!(line.contains("\"level\":\""), "{line}");
        assert!(line.contains("\"timestamp\":\""), "{line}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"message\":\"shardgate listening\"")),
        "{log}"
    );
}

#[tokio::test]
async fn slow_operations_are_logged_with_their_namespace() {
    // At 0 ms every command is slow.
    let srv = TestServer::start_with_args(&["--slow-ms", "0"]).await;
    some_work(&srv).await;
    let log = srv.log();
    let slow: Vec<&str> = log.lines().filter(|l| l.contains("Slow query")).collect();
    assert!(
        slow.iter()
            .any(|l| l.contains("ns=logs.c") && l.contains("command=insert")),
        "{log}"
    );
    assert!(
        slow.iter()
            .any(|l| l.contains("command=find") && l.contains("duration_millis=")),
        "{log}"
    );
    // At the default (100 ms) quick commands are not logged.
    let quiet = TestServer::start().await;
    some_work(&quiet).await;
    assert!(!quiet.log().contains("Slow query"), "{}", quiet.log());
}
