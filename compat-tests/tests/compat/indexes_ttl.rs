//! TTL indexes and `collMod` of indexes, as a MongoDB 7.0 user sees them.
//!
//! The servers run with `--ttl-monitor-interval-secs 1`, so an expired
//! document goes within a couple of seconds (MongoDB's monitor runs every
//! 60 s; the flag only shortens the wait).

use std::time::{Duration, Instant};

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, DateTime, Document},
    expect_command_error, expect_failure, first_batch,
    mongodb::{Collection, Database},
    num, TestServer,
};
use futures::TryStreamExt;

const DB: &str = "db";

/// How long an expired document may take to go (one monitor pass is 1 s).
const EXPIRY_DEADLINE: Duration = Duration::from_secs(8);

async fn start() -> TestServer {
    TestServer::start_with_args(&["--ttl-monitor-interval-secs", "1"]).await
}

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

fn coll(db: &Database, name: &str) -> Collection<Document> {
    db.collection::<Document>(name)
}

fn ago(secs: i64) -> DateTime {
    DateTime::from_millis(DateTime::now().timestamp_millis() - secs * 1000)
}

fn from_now(secs: i64) -> DateTime {
    DateTime::from_millis(DateTime::now().timestamp_millis() + secs * 1000)
}

async fn present_ids(c: &Collection<Document>) -> Vec<String> {
    let docs: Vec<Document> = c
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    docs.iter()
        .map(|d| match d.get("_id") {
            Some(Bson::String(s)) => s.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Waits until none of `gone` is left; fails after [`EXPIRY_DEADLINE`].
async fn wait_until_gone(c: &Collection<Document>, gone: &[&str]) -> Duration {
    let started = Instant::now();
    loop {
        let present = present_ids(c).await;
        let left: Vec<&&str> = gone
            .iter()
            .filter(|id| present.iter().any(|p| p == **id))
            .collect();
        if left.is_empty() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < EXPIRY_DEADLINE,
            "{left:?} not expired after {:?}; present: {present:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn index_spec(db: &Database, coll: &str, name: &str) -> Document {
    let reply = run(db, doc! {"listIndexes": coll}).await;
    first_batch(&reply)
        .into_iter()
        .find(|s| s.get_str("name") == Ok(name))
        .unwrap_or_else(|| panic!("no index {name} in {reply}"))
}

/// The winning plan's stage names, outermost first (a mongos-shaped
/// plan's per-partition plans included).
fn stages(plan: &Document) -> Vec<String> {
    let mut out = Vec::new();
    collect_stages(plan, &mut out);
    out
}

fn collect_stages(plan: &Document, out: &mut Vec<String>) {
    if let Ok(s) = plan.get_str("stage") {
        out.push(s.to_string());
    }
    if let Ok(input) = plan.get_document("inputStage") {
        collect_stages(input, out);
    }
    if let Ok(shards) = plan.get_array("shards") {
        for p in shards
            .iter()
            .filter_map(Bson::as_document)
            .filter_map(|s| s.get_document("winningPlan").ok())
        {
            collect_stages(p, out);
        }
    }
}

async fn plan_stages(db: &Database, coll: &str, filter: Document) -> Vec<String> {
    let e = run(
        db,
        doc! {"explain": {"find": coll, "filter": filter}, "verbosity": "queryPlanner"},
    )
    .await;
    let plan = e
        .get_document("queryPlanner")
        .and_then(|p| p.get_document("winningPlan"))
        .unwrap_or_else(|_| panic!("no queryPlanner.winningPlan in {e}"));
    stages(plan)
}

#[tokio::test]
async fn expired_documents_are_deleted_and_others_stay() {
    let srv = start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    let reply = run(
        &db,
        doc! {"createIndexes": "c", "indexes": [
            {"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 1},
        ]},
    )
    .await;
    assert_ok(&reply);

    c.insert_many(vec![
        doc! {"_id": "old", "t": ago(60)},
        doc! {"_id": "old-array", "t": [ago(60), from_now(3600)]},
        doc! {"_id": "just-old", "t": ago(3)},
        doc! {"_id": "future", "t": from_now(3600)},
        doc! {"_id": "future-array", "t": [from_now(3600), "x"]},
        doc! {"_id": "string", "t": "2000-01-01T00:00:00Z"},
        doc! {"_id": "number", "t": 12345},
        doc! {"_id": "null", "t": Bson::Null},
        doc! {"_id": "missing"},
    ])
    .await
    .unwrap();

    wait_until_gone(&c, &["old", "old-array", "just-old"]).await;

    // A document that expires while the server runs goes too.
    c.insert_one(doc! {"_id": "soon", "t": DateTime::now()})
        .await
        .unwrap();
    wait_until_gone(&c, &["soon"]).await;

    // Two more monitor passes: the rest stays.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        present_ids(&c).await,
        vec![
            "future",
            "future-array",
            "missing",
            "null",
            "number",
            "string"
        ]
    );
    let spec = index_spec(&db, "c", "t_1").await;
    assert_eq!(num(&spec, "expireAfterSeconds"), 1, "{spec}");
}

#[tokio::test]
async fn ttl_deletes_in_every_partition_of_a_sharded_collection() {
    let srv = TestServer::start_with_args(&[
        "--ttl-monitor-interval-secs",
        "1",
        "--initial-partitions",
        "4",
    ])
    .await;
    let admin = srv.db("admin");
    assert_ok(
        &run(
            &admin,
            doc! {"shardCollection": format!("{DB}.s"), "key": {"k": "hashed"}},
        )
        .await,
    );
    let db = srv.db(DB);
    assert_ok(
        &run(
            &db,
            doc! {"createIndexes": "s", "indexes": [
                {"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 1},
            ]},
        )
        .await,
    );
    let s = coll(&db, "s");
    let mut docs = Vec::new();
    for i in 0..100 {
        docs.push(doc! {"_id": format!("old{i:03}"), "k": i, "t": ago(60)});
        docs.push(doc! {"_id": format!("new{i:03}"), "k": i, "t": from_now(3600)});
    }
    s.insert_many(docs).await.unwrap();

    let started = Instant::now();
    loop {
        let old = s
            .count_documents(doc! {"_id": {"$lt": "old999", "$gte": "old"}})
            .await
            .unwrap();
        if old == 0 {
            break;
        }
        assert!(
            started.elapsed() < EXPIRY_DEADLINE,
            "{old} expired documents left after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(s.count_documents(doc! {}).await.unwrap(), 100);
}

#[tokio::test]
async fn coll_mod_changes_expire_after_seconds() {
    let srv = start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    assert_ok(
        &run(
            &db,
            doc! {"createIndexes": "c", "indexes": [
                {"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 1},
                {"key": {"a": 1}, "name": "a_1"},
            ]},
        )
        .await,
    );

    // By key pattern.
    let reply = run(
        &db,
        doc! {"collMod": "c", "index": {"keyPattern": {"t": 1}, "expireAfterSeconds": 3600}},
    )
    .await;
    assert_ok(&reply);
    assert_eq!(num(&reply, "expireAfterSeconds_old"), 1, "{reply}");
    assert_eq!(num(&reply, "expireAfterSeconds_new"), 3600, "{reply}");
    let spec = index_spec(&db, "c", "t_1").await;
    assert_eq!(num(&spec, "expireAfterSeconds"), 3600, "{spec}");

    // By name.
    let reply = run(
        &db,
        doc! {"collMod": "c", "index": {"name": "t_1", "expireAfterSeconds": 7200}},
    )
    .await;
    assert_eq!(num(&reply, "expireAfterSeconds_old"), 3600, "{reply}");
    assert_eq!(num(&reply, "expireAfterSeconds_new"), 7200, "{reply}");
    let spec = index_spec(&db, "c", "t_1").await;
    assert_eq!(num(&spec, "expireAfterSeconds"), 7200, "{spec}");

    // A minute-old document is not expired under 7200 s...
    c.insert_one(doc! {"_id": "minute-old", "t": ago(60)})
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(present_ids(&c).await, vec!["minute-old"]);

    // ...and is once the TTL is back to 1 s.
    let reply = run(
        &db,
        doc! {"collMod": "c", "index": {"name": "t_1", "expireAfterSeconds": 1}},
    )
    .await;
    assert_eq!(num(&reply, "expireAfterSeconds_old"), 7200, "{reply}");
    wait_until_gone(&c, &["minute-old"]).await;

    // The change survives a restart.
    let mut srv = srv;
    run(
        &db,
        doc! {"collMod": "c", "index": {"name": "t_1", "expireAfterSeconds": 99}},
    )
    .await;
    srv.restart().await;
    let db = srv.db(DB);
    let spec = index_spec(&db, "c", "t_1").await;
    assert_eq!(num(&spec, "expireAfterSeconds"), 99, "{spec}");

    // Unknown index, unknown collection.
    expect_command_error(
        &db,
        doc! {"collMod": "c", "index": {"name": "nope", "expireAfterSeconds": 5}},
        27,
        "IndexNotFound",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"collMod": "c", "index": {"keyPattern": {"zz": 1}, "expireAfterSeconds": 5}},
        27,
        "IndexNotFound",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"collMod": "missing", "index": {"name": "t_1", "expireAfterSeconds": 5}},
        26,
        "NamespaceNotFound",
    )
    .await;
}

#[tokio::test]
async fn coll_mod_hidden_hides_an_index_from_the_planner() {
    let srv = start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    c.insert_many(
        (0..100)
            .map(|i| doc! {"_id": i, "a": i % 10, "u": i})
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    assert_ok(
        &run(
            &db,
            doc! {"createIndexes": "c", "indexes": [
                {"key": {"a": 1}, "name": "a_1"},
                {"key": {"u": 1}, "name": "u_1", "unique": true},
            ]},
        )
        .await,
    );
    let with_index = plan_stages(&db, "c", doc! {"a": 5}).await;
    assert!(with_index.contains(&"IXSCAN".to_string()), "{with_index:?}");

    let reply = run(
        &db,
        doc! {"collMod": "c", "index": {"name": "a_1", "hidden": true}},
    )
    .await;
    assert_ok(&reply);
    assert_eq!(reply.get_bool("hidden_old").ok(), Some(false), "{reply}");
    assert_eq!(reply.get_bool("hidden_new").ok(), Some(true), "{reply}");

    let hidden = plan_stages(&db, "c", doc! {"a": 5}).await;
    assert!(
        hidden.contains(&"COLLSCAN".to_string()) && !hidden.contains(&"IXSCAN".to_string()),
        "a hidden index was planned: {hidden:?}"
    );
    let spec = index_spec(&db, "c", "a_1").await;
    assert_eq!(spec.get_bool("hidden").ok(), Some(true), "{spec}");
    // Queries still answer; a hint cannot name a hidden index.
    assert_eq!(c.count_documents(doc! {"a": 5}).await.unwrap(), 10);
    expect_command_error(
        &db,
        doc! {"find": "c", "filter": {"a": 5}, "hint": "a_1"},
        2,
        "BadValue",
    )
    .await;

    // The hidden index is still maintained: unhidden, it answers right.
    c.insert_one(doc! {"_id": 100, "a": 5, "u": 100})
        .await
        .unwrap();
    c.delete_one(doc! {"_id": 5}).await.unwrap();
    let reply = run(
        &db,
        doc! {"collMod": "c", "index": {"keyPattern": {"a": 1}, "hidden": false}},
    )
    .await;
    assert_eq!(reply.get_bool("hidden_old").ok(), Some(true), "{reply}");
    assert_eq!(reply.get_bool("hidden_new").ok(), Some(false), "{reply}");
    let shown = plan_stages(&db, "c", doc! {"a": 5}).await;
    assert!(shown.contains(&"IXSCAN".to_string()), "{shown:?}");
    let spec = index_spec(&db, "c", "a_1").await;
    assert_ne!(spec.get_bool("hidden").ok(), Some(true), "{spec}");
    let docs: Vec<Document> = c
        .find(doc! {"a": 5})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let ids: Vec<i64> = docs.iter().map(|d| num(d, "_id")).collect();
    assert_eq!(ids, vec![15, 25, 35, 45, 55, 65, 75, 85, 95, 100]);

    // A hidden unique index still enforces uniqueness.
    run(
        &db,
        doc! {"collMod": "c", "index": {"name": "u_1", "hidden": true}},
    )
    .await;
    expect_failure(c.insert_one(doc! {"_id": 200, "u": 7}).await, 11000, "");

    // Created hidden.
    assert_ok(
        &run(
            &db,
            doc! {"createIndexes": "c", "indexes": [{"key": {"b": 1}, "name": "b_1", "hidden": true}]},
        )
        .await,
    );
    let spec = index_spec(&db, "c", "b_1").await;
    assert_eq!(spec.get_bool("hidden").ok(), Some(true), "{spec}");
    let stages = plan_stages(&db, "c", doc! {"b": 1}).await;
    assert!(!stages.contains(&"IXSCAN".to_string()), "{stages:?}");
}
