//! The HTTP side port (`--http-bind`): `/livez`, `/readyz` and
//! `/metrics` in Prometheus's text format, scraped after a known
//! workload through the official driver: the command counters move by
//! exactly what ran, every physical partition of a collection sharded
//! into 8 reports its documents, and a targeted query charges one
//! partition while a fan-out charges all 8.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use compat_tests::{
    bson::{doc, Document},
    free_port,
    side_port::{get, per_partition, scrape},
    TestServer,
};

const DB: &str = "shop";

/// A server with its side port on a free port.
async fn start() -> (TestServer, SocketAddr) {
    let side: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let srv = TestServer::start_with_args(&["--http-bind", &side.to_string()]).await;
    (srv, side)
}

fn value(m: &BTreeMap<String, f64>, series: &str) -> f64 {
    m.get(series).copied().unwrap_or(0.0)
}

fn calls(command: &str, outcome: &str) -> String {
    format!("shardgate_commands_total{{command=\"{command}\",outcome=\"{outcome}\"}}")
}

#[tokio::test]
async fn health_endpoints_answer_once_the_server_is_up() {
    let (_srv, side) = start().await;
    assert_eq!(get(side, "/livez").await.0, 200);
    let (status, _, body) = get(side, "/readyz").await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    assert_eq!(get(side, "/nothing-here").await.0, 404);
}

#[tokio::test]
async fn the_side_port_says_starting_while_storage_opens() {
    let dir = tempfile::tempdir().unwrap();
    let wire: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let side: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    // Storage takes 3 s more to open, so the window can be seen.
    let _server = KillOnDrop(
        std::process::Command::new(compat_tests::server_binary())
            .args([
                "--bind",
                &wire.to_string(),
                "--http-bind",
                &side.to_string(),
            ])
            .args(["--test-storage-open-delay-ms", "3000"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let livez = loop {
        if let Ok(answer) = compat_tests::side_port::try_get(side, "/livez").await {
            break answer;
        }
        assert!(std::time::Instant::now() < deadline, "no side port");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!((livez.0, livez.2.as_str()), (200, "ok\n"));
    let (status, _, body) = get(side, "/readyz").await;
    assert_eq!((status, body.as_str()), (503, "starting\n"));
    assert_eq!(get(side, "/metrics").await.0, 503);
    assert!(
        tokio::net::TcpStream::connect(wire).await.is_err(),
        "the wire port accepts before storage is open"
    );
    // Then ready, on the same port, and the wire port accepts. A probe
    // caught at the hand-over may find its connection closed unanswered,
    // which a probe counts as not ready.
    loop {
        if let Ok((status, _, body)) = compat_tests::side_port::try_get(side, "/readyz").await {
            if status == 200 {
                assert_eq!(body, "ready\n");
                break;
            }
            assert_eq!(status, 503);
        }
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(tokio::net::TcpStream::connect(wire).await.is_ok());
    assert!(scrape(side).await.contains_key("shardgate_connections"));
}

/// A server process this file started itself, stopped however the test
/// ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn command_counters_move_by_what_ran() {
    let (srv, side) = start().await;
    let db = srv.db(DB);
    let items = db.collection::<Document>("items");
    let before = scrape(side).await;
    items
        .insert_many((0..50).map(|i| doc! {"_id": i}))
        .await
        .unwrap();
    items.insert_one(doc! {"_id": 50}).await.unwrap();
    assert!(items.insert_one(doc! {"_id": 1}).await.is_err());
    assert_eq!(items.count_documents(doc! {}).await.unwrap(), 51);
    assert!(db.run_command(doc! {"frobnicate": 1}).await.is_err());
    let after = scrape(side).await;
    let moved = |series: String| value(&after, &series) - value(&before, &series);
    // Three insert commands: one batch, one document, and a duplicate
    // (the command succeeds; its write error is in the reply).
    assert_eq!(moved(calls("insert", "ok")), 3.0);
    assert_eq!(moved(calls("aggregate", "ok")), 1.0);
    // A name that is no command is counted as `unknown`, not by name.
    assert_eq!(moved(calls("unknown", "error")), 1.0);
    assert!(!after.keys().any(|s| s.contains("frobnicate")));
    assert_eq!(
        moved("shardgate_command_duration_seconds_count{command=\"insert\"}".into()),
        3.0
    );
    assert_eq!(
        moved("shardgate_operations_total{kind=\"insert\"}".into()),
        52.0
    );
    assert!(value(&after, "shardgate_connections") >= 1.0);
    assert!(value(&after, "shardgate_connections_created_total") >= 1.0);
    // Seven requests at least (the inserts, the count, the unknown
    // command), and the bytes they carried both ways.
    assert!(moved("shardgate_network_requests_total".into()) >= 6.0);
    assert!(moved("shardgate_network_received_bytes_total".into()) > 0.0);
    assert!(moved("shardgate_network_sent_bytes_total".into()) > 0.0);
    // Every insert waited for the journal (the default write concern),
    // on the embedded store's group commit.
    if compat_tests::fleet().is_none() {
        assert!(moved("shardgate_journal_syncs_total".into()) >= 1.0);
        assert!(moved("shardgate_journal_synced_writes_total".into()) >= 2.0);
        assert!(value(&after, "shardgate_storage_disk_bytes") > 0.0);
    }
    // The unsharded collection is one partition, `primary`.
    let docs = per_partition(&after, "shardgate_partition_documents", DB, "items");
    assert_eq!(docs, BTreeMap::from([("primary".to_string(), 51.0)]));
}

#[tokio::test]
async fn every_partition_reports_and_a_targeted_query_charges_only_its_own() {
    let (srv, side) = start().await;
    let admin = srv.db("admin");
    admin
        .run_command(doc! {
            "shardCollection": format!("{DB}.orders"),
            "key": {"tenant": "hashed"},
            "numInitialChunks": 8,
        })
        .await
        .unwrap();
    let orders = srv.db(DB).collection::<Document>("orders");
    orders
        .insert_many((0..400).map(|i| doc! {"_id": i, "tenant": format!("t{}", i % 40)}))
        .await
        .unwrap();

    let m = scrape(side).await;
    let docs = per_partition(&m, "shardgate_partition_documents", DB, "orders");
    assert_eq!(docs.len(), 8, "{docs:?}");
    assert_eq!(docs.values().sum::<f64>(), 400.0);
    let bytes = per_partition(&m, "shardgate_partition_bytes", DB, "orders");
    assert_eq!(bytes.len(), 8);
    assert!(bytes.values().all(|b| *b > 0.0), "{bytes:?}");

    // One tenant: one partition is charged.
    let units = |m: &BTreeMap<String, f64>| {
        per_partition(
            m,
            "shardgate_partition_request_units_consumed_total",
            DB,
            "orders",
        )
    };
    let before = units(&scrape(side).await);
    let found = orders
        .find_one(doc! {"tenant": "t7", "_id": 7})
        .await
        .unwrap();
    assert!(found.is_some());
    let after = units(&scrape(side).await);
    let charged: Vec<&String> = after
        .iter()
        .filter(|(p, v)| **v > before.get(*p).copied().unwrap_or(0.0))
        .map(|(p, _)| p)
        .collect();
    assert_eq!(charged.len(), 1, "before {before:?}, after {after:?}");

    // No key: every partition is read, and charged.
    let before = after;
    assert_eq!(
        orders
            .count_documents(doc! {"n": {"$exists": false}})
            .await
            .unwrap(),
        400
    );
    let after = units(&scrape(side).await);
    assert_eq!(after.len(), 8);
    for (p, v) in &after {
        assert!(
            *v > before[p],
            "partition {p} was not charged: {before:?} → {after:?}"
        );
    }
}
