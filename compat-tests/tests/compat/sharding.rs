//! Sharded collections through the official driver, checked against what a
//! MongoDB 7.0 user sees behind a mongos.
//!
//! Covered: `shardCollection` and its errors, routing as `explain` reports
//! it, the hashed-index hash that decides which partition owns a key, reads
//! that fan out and merge (compared with an unsharded copy of the same
//! data), writes that target one partition, fan out or move a document, the
//! logical-partition cap, and the `config` database. Partitions that split
//! under load are in `sharding_split.rs`.
//!
//! Each test starts its own server with `--initial-partitions 8` unless it
//! needs other flags. Where Shardgate refuses something MongoDB 7.0 accepts
//! (shard keys other than one hashed field), the test says so.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    bson_len, config_chunks, expect_command_error, failure, first_batch,
    mongodb::{error::ErrorKind, options::ReturnDocument, Collection, Database},
    num, Chunk, Rng, TestServer,
};
use futures::TryStreamExt;

/// Partitions a collection gets when `shardCollection` names no count.
const PARTITIONS: usize = 8;

async fn start() -> TestServer {
    TestServer::start_with_args(&["--initial-partitions", "8"]).await
}

/// Runs `cmd` on database `db`; a command error fails the test.
async fn run(srv: &TestServer, db: &str, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    srv.db(db)
        .run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{db}: {shown}: {e}"))
}

/// Shards `ns` on `{field: "hashed"}` and returns the reply.
async fn shard_hashed(srv: &TestServer, ns: &str, field: &str) -> Document {
    let reply = run(
        srv,
        "admin",
        doc! {"shardCollection": ns, "key": {field: "hashed"}},
    )
    .await;
    assert_ok(&reply);
    reply
}

fn coll(srv: &TestServer, db: &str, name: &str) -> Collection<Document> {
    srv.db(db).collection::<Document>(name)
}

async fn coll_stats(srv: &TestServer, db: &str, name: &str) -> Document {
    run(srv, db, doc! {"collStats": name}).await
}

/// collStats' `shards`: partition name → document count.
#[track_caller]
/// The shards `partitions` partitions show as: each its own, or on a
/// PostgreSQL fleet the servers holding them.
fn shards_for(partitions: usize) -> usize {
    compat_tests::fleet().map_or(partitions, |servers| partitions.min(servers.len()))
}

fn shard_counts(stats: &Document) -> BTreeMap<String, i64> {
    let shards = stats
        .get_document("shards")
        .unwrap_or_else(|_| panic!("no shards in {stats}"));
    shards
        .iter()
        .map(|(name, s)| {
            let s = s
                .as_document()
                .unwrap_or_else(|| panic!("shards.{name} is not a document: {stats}"));
            (name.clone(), num(s, "count"))
        })
        .collect()
}

async fn find_all(c: &Collection<Document>, filter: Document, sort: Document) -> Vec<Document> {
    c.find(filter)
        .sort(sort)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// The distinct `_id`s of `docs`, as comparable text (`Bson` is not `Hash`).
fn id_set(docs: &[Document]) -> HashSet<String> {
    ids(docs).iter().map(|id| format!("{id:?}")).collect()
}

fn ids(docs: &[Document]) -> Vec<Bson> {
    docs.iter()
        .map(|d| d.get("_id").cloned().unwrap_or(Bson::Null))
        .collect()
}

/// The `uuid` listCollections reports for `db.name`.
async fn list_uuid(srv: &TestServer, db: &str, name: &str) -> Bson {
    let reply = run(
        srv,
        db,
        doc! {"listCollections": 1, "filter": {"name": name}},
    )
    .await;
    let listed = first_batch(&reply);
    assert_eq!(listed.len(), 1, "{reply}");
    listed[0]
        .get_document("info")
        .ok()
        .and_then(|i| i.get("uuid"))
        .unwrap_or_else(|| panic!("no info.uuid in {reply}"))
        .clone()
}

async fn config_entry(srv: &TestServer, ns: &str) -> Option<Document> {
    coll(srv, "config", "collections")
        .find_one(doc! {"_id": ns})
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------
// explain
// ---------------------------------------------------------------------------

/// Routing as a mongos-shaped find or count explain reports it:
/// `queryPlanner.winningPlan.stage` and the `shardName` of each entry of
/// `queryPlanner.winningPlan.shards`.
#[derive(Debug)]
struct Route {
    stage: String,
    shards: Vec<String>,
}

impl Route {
    fn set(&self) -> BTreeSet<String> {
        self.shards.iter().cloned().collect()
    }

    /// The one partition of a SINGLE_SHARD plan.
    #[track_caller]
    fn single(&self) -> String {
        assert_eq!(self.stage, "SINGLE_SHARD", "{self:?}");
        assert_eq!(self.shards.len(), 1, "{self:?}");
        self.shards[0].clone()
    }
}

#[track_caller]
fn route(explain: &Document) -> Route {
    assert_ok(explain);
    let planner = explain
        .get_document("queryPlanner")
        .unwrap_or_else(|_| panic!("no queryPlanner in {explain}"));
    assert_eq!(num(planner, "mongosPlannerVersion"), 1, "{explain}");
    let plan = planner
        .get_document("winningPlan")
        .unwrap_or_else(|_| panic!("no winningPlan in {explain}"));
    let stage = plan
        .get_str("stage")
        .unwrap_or_else(|_| panic!("no winningPlan.stage in {explain}"))
        .to_string();
    let shards: Vec<String> = plan
        .get_array("shards")
        .unwrap_or_else(|_| panic!("no winningPlan.shards in {explain}"))
        .iter()
        .map(|s| {
            let s = s.as_document().expect("winningPlan.shards holds documents");
            s.get_str("shardName")
                .unwrap_or_else(|_| panic!("shard entry without shardName: {s}"))
                .to_string()
        })
        .collect();
    assert_eq!(
        shards.iter().collect::<HashSet<_>>().len(),
        shards.len(),
        "a partition listed twice: {explain}"
    );
    Route { stage, shards }
}

async fn explain(srv: &TestServer, db: &str, cmd: Document) -> Document {
    run(srv, db, doc! {"explain": cmd, "verbosity": "queryPlanner"}).await
}

async fn find_route(srv: &TestServer, db: &str, name: &str, filter: Document) -> Route {
    route(&explain(srv, db, doc! {"find": name, "filter": filter}).await)
}

// ---------------------------------------------------------------------------
// MongoDB's hashed-index hash
// ---------------------------------------------------------------------------

/// The hashed-index hash of `value`, asked of the server the way mongosh's
/// `convertShardKeyToHashed()` does: `$toHashedIndexKey` over one
/// `$documents` row.
async fn hashed(db: &Database, value: Bson) -> i64 {
    let shown = format!("{value:?}");
    let reply = db
        .run_command(doc! {
            "aggregate": 1,
            "pipeline": [
                {"$documents": [{}]},
                {"$project": {"_id": 0, "h": {"$toHashedIndexKey": {"$literal": value}}}},
            ],
            "cursor": {},
        })
        .await
        .unwrap_or_else(|e| panic!("$toHashedIndexKey of {shown}: {e}"));
    let batch = first_batch(&reply);
    batch
        .first()
        .and_then(|d| d.get_i64("h").ok())
        .unwrap_or_else(|| panic!("no NumberLong h for {shown}: {reply}"))
}

/// The partition `chunks` give to shard-key hash `h`.
#[track_caller]
fn owner(chunks: &[Chunk], h: i64) -> String {
    chunks
        .iter()
        .find(|c| c.holds(h))
        .unwrap_or_else(|| panic!("no chunk holds hash {h}: {chunks:?}"))
        .shard
        .clone()
}

/// The split points MongoDB 7.0 gives a hashed key sharded into `n` initial
/// chunks (`InitialSplitPolicy::calculateHashedSplitPoints`): symmetric
/// around 0, `(i64::MAX / n) * 2` apart.
fn mongodb_hashed_split_points(n: i64) -> Vec<i64> {
    let interval = (i64::MAX / n) * 2;
    let mut points = Vec::new();
    let mut current = 0i64;
    if n % 2 == 0 {
        points.push(0);
        current += interval;
    } else {
        current += interval / 2;
    }
    for _ in 0..(n - 1) / 2 {
        points.push(current);
        points.push(-current);
        current += interval;
    }
    points.sort_unstable();
    points
}

#[tokio::test]
async fn the_server_hashes_like_mongodb() {
    let srv = start().await;
    let db = srv.db("h");
    // The MongoDB manual's $toHashedIndexKey example.
    assert_eq!(
        hashed(&db, Bson::from("string to hash")).await,
        763543691661428748
    );
    // From src/mongo/db/hasher_test.cpp: numbers hash as their int64
    // truncation, whatever their type.
    let vectors: [(Bson, i64); 14] = [
        (Bson::Int32(42), -944302157085130861),
        (Bson::Int64(42), -944302157085130861),
        (Bson::Double(42.0), -944302157085130861),
        (Bson::Double(42.7), -944302157085130861),
        (Bson::Int32(0), 4854801880128277513),
        (Bson::Int32(1), 5902408780260971510),
        (Bson::Int32(-1), 1140205862565771219),
        (Bson::Int32(i32::MIN), 6165898260261354870),
        (Bson::Int32(i32::MAX), 1143184177162245883),
        (Bson::Int64(i64::MAX), 921523596458303250),
        (Bson::Int64(i64::MIN), 4532067210535695462),
        (Bson::Null, 2338878944348059895),
        (Bson::from("abc"), 8478485326885698097),
        (Bson::from(""), 2049396243249673340),
    ];
    for (value, want) in vectors {
        assert_eq!(hashed(&db, value.clone()).await, want, "{value:?}");
    }
    // A missing field hashes like null.
    let reply = run(
        &srv,
        "h",
        doc! {
            "aggregate": 1,
            "pipeline": [
                {"$documents": [{}]},
                {"$project": {"_id": 0, "h": {"$toHashedIndexKey": "$nosuchfield"}}},
            ],
            "cursor": {},
        },
    )
    .await;
    assert_eq!(
        first_batch(&reply),
        vec![doc! {"h": 2338878944348059895i64}],
        "{reply}"
    );
}

#[test]
fn mongodb_split_points_match_a_real_cluster() {
    // sh.status() of a MongoDB cluster whose hashed collection has 12 chunks
    // shows these bounds.
    let twelve = mongodb_hashed_split_points(12);
    assert_eq!(twelve.len(), 11);
    assert_eq!(twelve[0], -7686143364045646500);
    assert_eq!(twelve[1], -6148914691236517200);
    assert_eq!(twelve[5], 0);
    assert_eq!(mongodb_hashed_split_points(1), Vec::<i64>::new());
    assert_eq!(mongodb_hashed_split_points(2), vec![0]);
    assert_eq!(mongodb_hashed_split_points(3).len(), 2);
}

// ---------------------------------------------------------------------------
// shardCollection
// ---------------------------------------------------------------------------

#[tokio::test]
async fn shard_collection_answers_like_mongos() {
    let srv = start().await;
    let reply = run(&srv, "admin", doc! {"enableSharding": "shop"}).await;
    assert_ok(&reply);

    let reply = shard_hashed(&srv, "shop.orders", "customer").await;
    assert_eq!(
        reply.get_str("collectionsharded").ok(),
        Some("shop.orders"),
        "{reply}"
    );
    // mongos 7.0 answers {collectionsharded, ok}; Cosmos DB adds `_t`, and
    // the spec a `collectionUUID`. Either extra must be right if present.
    if let Some(t) = reply.get("_t") {
        assert_eq!(
            t,
            &Bson::String("ShardCollectionResponse".into()),
            "{reply}"
        );
    }
    // The command created the collection.
    let uuid = list_uuid(&srv, "shop", "orders").await;
    if let Some(u) = reply.get("collectionUUID") {
        assert_eq!(u, &uuid, "{reply}");
    }

    let stats = coll_stats(&srv, "shop", "orders").await;
    assert_eq!(stats.get_bool("sharded"), Ok(true), "{stats}");
    assert_eq!(num(&stats, "nchunks"), PARTITIONS as i64, "{stats}");
    assert_eq!(
        shard_counts(&stats).len(),
        shards_for(PARTITIONS),
        "{stats}"
    );
    assert_eq!(num(&stats, "count"), 0, "{stats}");
}

#[tokio::test]
async fn sharding_an_existing_collection_keeps_every_document() {
    let srv = start().await;
    let customers = coll(&srv, "shop", "customers");
    let docs: Vec<Document> = (0..1000)
        .map(|i| doc! {"_id": i, "region": format!("r{}", i % 250), "n": i * 3})
        .collect();
    customers.insert_many(docs.clone()).await.unwrap();

    shard_hashed(&srv, "shop.customers", "region").await;

    assert_eq!(customers.count_documents(doc! {}).await.unwrap(), 1000);
    for r in 0..250 {
        let region = format!("r{r}");
        let want: Vec<Document> = docs
            .iter()
            .filter(|d| d.get_str("region") == Ok(region.as_str()))
            .cloned()
            .collect();
        let got = find_all(&customers, doc! {"region": &region}, doc! {"_id": 1}).await;
        assert_eq!(got, want, "find by shard key {region}");
    }
    for d in &docs {
        let got = customers
            .find_one(doc! {"_id": d.get("_id").unwrap()})
            .await
            .unwrap();
        assert_eq!(got.as_ref(), Some(d), "find by _id");
    }

    let stats = coll_stats(&srv, "shop", "customers").await;
    assert_eq!(stats.get_bool("sharded"), Ok(true), "{stats}");
    assert_eq!(num(&stats, "nchunks"), PARTITIONS as i64, "{stats}");
    assert_eq!(num(&stats, "count"), 1000, "{stats}");
    let counts = shard_counts(&stats);
    assert_eq!(counts.len(), shards_for(PARTITIONS), "{stats}");
    assert_eq!(counts.values().sum::<i64>(), 1000, "{stats}");
    // 250 keys over 8 equal hash ranges: every partition gets some.
    assert!(counts.values().all(|&n| n > 0), "{stats}");
}

#[tokio::test]
async fn a_dotted_shard_key_routes_on_the_nested_value() {
    let srv = start().await;
    shard_hashed(&srv, "shop.invoices", "customer.region").await;
    let invoices = coll(&srv, "shop", "invoices");
    let docs: Vec<Document> = (0..200)
        .map(|i| {
            doc! {"_id": i, "customer": {"region": format!("reg{}", i % 20), "name": format!("c{i}")}, "total": i}
        })
        .collect();
    invoices.insert_many(docs.clone()).await.unwrap();

    let entry = config_entry(&srv, "shop.invoices")
        .await
        .expect("config entry");
    assert_eq!(
        entry.get_document("key").ok(),
        Some(&doc! {"customer.region": "hashed"}),
        "{entry}"
    );
    let chunks = config_chunks(&srv.client, "shop.invoices").await;
    let db = srv.db("shop");
    for r in 0..20 {
        let region = format!("reg{r}");
        let want: Vec<Document> = docs
            .iter()
            .filter(|d| {
                d.get_document("customer").unwrap().get_str("region") == Ok(region.as_str())
            })
            .cloned()
            .collect();
        let got = find_all(
            &invoices,
            doc! {"customer.region": &region},
            doc! {"_id": 1},
        )
        .await;
        assert_eq!(got, want, "{region}");
        let r = find_route(&srv, "shop", "invoices", doc! {"customer.region": &region}).await;
        assert_eq!(
            r.single(),
            owner(&chunks, hashed(&db, Bson::from(&region)).await),
            "{region}"
        );
    }
}

#[tokio::test]
async fn equality_on_the_parent_of_a_dotted_key_targets_like_mongodb() {
    // {customer: {...}} fixes customer.region too; mongos finds the key
    // value inside it (pathsupport::findParentEqualityElement).
    let srv = start().await;
    shard_hashed(&srv, "shop.invoices", "customer.region").await;
    let invoices = coll(&srv, "shop", "invoices");
    invoices
        .insert_many((0..50).map(|i| {
            doc! {"_id": i, "customer": {"region": format!("reg{}", i % 5), "name": format!("c{i}")}}
        }))
        .await
        .unwrap();
    let filter = doc! {"customer": {"region": "reg1", "name": "c6"}};
    let got = find_all(&invoices, filter.clone(), doc! {}).await;
    assert_eq!(ids(&got), vec![Bson::Int32(6)]);
    let chunks = config_chunks(&srv.client, "shop.invoices").await;
    let r = find_route(&srv, "shop", "invoices", filter).await;
    assert_eq!(
        r.single(),
        owner(&chunks, hashed(&srv.db("shop"), Bson::from("reg1")).await)
    );
}

#[tokio::test]
async fn shard_collection_errors_carry_mongodb_codes() {
    let srv = start().await;
    let admin = srv.db("admin");
    // create_collection_coordinator.cpp: "Hashed shard keys cannot be
    // declared unique."
    expect_command_error(
        &admin,
        doc! {"shardCollection": "e.u", "key": {"k": "hashed"}, "unique": true},
        72,
        "InvalidOptions",
    )
    .await;
    // CommandHelpers::parseNsFullyQualified: not "<db>.<collection>".
    expect_command_error(
        &admin,
        doc! {"shardCollection": "nodot", "key": {"k": "hashed"}},
        73,
        "InvalidNamespace",
    )
    .await;
    // An admin-only command run elsewhere.
    expect_command_error(
        &srv.db("e"),
        doc! {"shardCollection": "e.c", "key": {"k": "hashed"}},
        13,
        "Unauthorized",
    )
    .await;
    // The ShardCollection IDL: `key` is a required object.
    expect_command_error(
        &admin,
        doc! {"shardCollection": "e.c", "key": "k"},
        14,
        "TypeMismatch",
    )
    .await;
    expect_command_error(
        &admin,
        doc! {"shardCollection": "e.c"},
        40414,
        "Location40414",
    )
    .await;
    // numInitialChunks must be >= 0 and at most 1,000,000 (and 8192 per shard).
    for n in [-1i64, 10_000_000] {
        expect_command_error(
            &admin,
            doc! {"shardCollection": "e.n", "key": {"k": "hashed"}, "numInitialChunks": n},
            72,
            "InvalidOptions",
        )
        .await;
    }
    for ns in ["e.u", "e.c", "e.n"] {
        assert_eq!(config_entry(&srv, ns).await, None, "{ns} was sharded");
    }

    // Again with the same key: done already, ok (idempotent). With another
    // key: AlreadyInitialized.
    shard_hashed(&srv, "e.c", "k").await;
    let again = shard_hashed(&srv, "e.c", "k").await;
    assert_eq!(
        again.get_str("collectionsharded").ok(),
        Some("e.c"),
        "{again}"
    );
    expect_command_error(
        &admin,
        doc! {"shardCollection": "e.c", "key": {"other": "hashed"}},
        23,
        "AlreadyInitialized",
    )
    .await;
    let entry = config_entry(&srv, "e.c").await.expect("e.c sharded");
    assert_eq!(entry.get_document("key").ok(), Some(&doc! {"k": "hashed"}));
}

#[tokio::test]
async fn only_one_hashed_field_can_be_the_shard_key() {
    // Shardgate partitions by hash only. MongoDB 7.0 would accept a range
    // key and a compound hashed key; Shardgate refuses them with
    // InvalidOptions and a message that says why.
    let srv = start().await;
    let admin = srv.db("admin");
    for key in [
        doc! {"a": 1},
        doc! {"a": "hashed", "b": 1},
        doc! {"b": 1, "a": "hashed"},
    ] {
        let f = expect_command_error(
            &admin,
            doc! {"shardCollection": "k.c", "key": key},
            72,
            "InvalidOptions",
        )
        .await;
        assert!(f.message.contains("hashed"), "{f:?}");
    }
    assert_eq!(config_entry(&srv, "k.c").await, None);
}

#[tokio::test]
async fn key_patterns_mongodb_cannot_parse_are_bad_value() {
    // shard_key_pattern.cpp rejects these before anything else.
    let srv = start().await;
    let admin = srv.db("admin");
    for key in [doc! {"a": -1}, doc! {"a": "hashed", "b": "hashed"}] {
        expect_command_error(
            &admin,
            doc! {"shardCollection": "k.c", "key": key},
            2,
            "BadValue",
        )
        .await;
    }
    assert_eq!(config_entry(&srv, "k.c").await, None);
}

#[tokio::test]
async fn num_initial_chunks_sets_the_partition_count() {
    let srv = start().await;
    for (name, n, want) in [
        ("three", Some(3), 3),
        ("sixteen", Some(16), 16),
        ("eight", Some(8), 8),
        ("zero", Some(0), PARTITIONS),
        ("default", None, PARTITIONS),
    ] {
        let mut cmd = doc! {"shardCollection": format!("n.{name}"), "key": {"k": "hashed"}};
        if let Some(n) = n {
            cmd.insert("numInitialChunks", n);
        }
        assert_ok(&run(&srv, "admin", cmd).await);
        let stats = coll_stats(&srv, "n", name).await;
        assert_eq!(num(&stats, "nchunks"), want as i64, "{name}: {stats}");
        assert_eq!(
            shard_counts(&stats).len(),
            shards_for(want),
            "{name}: {stats}"
        );
        let chunks = config_chunks(&srv.client, &format!("n.{name}")).await;
        assert_eq!(chunks.len(), want, "{name}: {chunks:?}");
    }
}

#[tokio::test]
async fn initial_partitions_split_the_hash_range_like_mongodb() {
    let srv = start().await;
    for n in [8i64, 3, 2, 16] {
        let ns = format!("b.c{n}");
        assert_ok(
            &run(
                &srv,
                "admin",
                doc! {"shardCollection": &ns, "key": {"k": "hashed"}, "numInitialChunks": n},
            )
            .await,
        );
        let chunks = config_chunks(&srv.client, &ns).await;
        let got: Vec<i64> = chunks
            .iter()
            .skip(1)
            .map(|c| match c.min {
                compat_tests::ChunkBound::Hash(h) => h,
                other => panic!("inner bound {other:?} in {chunks:?}"),
            })
            .collect();
        assert_eq!(got, mongodb_hashed_split_points(n), "{ns}");
    }
}

#[tokio::test]
async fn cosmos_create_collection_custom_action_shards_the_collection() {
    let srv = start().await;
    let reply = run(
        &srv,
        "cos",
        doc! {"customAction": "CreateCollection", "collection": "events", "shardKey": "tenant"},
    )
    .await;
    assert_ok(&reply);
    let stats = coll_stats(&srv, "cos", "events").await;
    assert_eq!(stats.get_bool("sharded"), Ok(true), "{stats}");
    assert_eq!(num(&stats, "nchunks"), PARTITIONS as i64, "{stats}");
    let entry = config_entry(&srv, "cos.events")
        .await
        .expect("config entry");
    assert_eq!(
        entry.get_document("key").ok(),
        Some(&doc! {"tenant": "hashed"}),
        "{entry}"
    );

    let events = coll(&srv, "cos", "events");
    events
        .insert_many((0..40).map(|i| doc! {"_id": i, "tenant": format!("t{}", i % 4)}))
        .await
        .unwrap();
    let got = find_all(&events, doc! {"tenant": "t1"}, doc! {"_id": 1}).await;
    assert_eq!(
        ids(&got),
        (0..10).map(|i| Bson::Int32(i * 4 + 1)).collect::<Vec<_>>()
    );
    find_route(&srv, "cos", "events", doc! {"tenant": "t1"})
        .await
        .single();
}

#[tokio::test]
async fn unsharded_collections_still_say_so() {
    let srv = start().await;
    let plain = coll(&srv, "plain", "c");
    plain
        .insert_many((0..50).map(|i| doc! {"_id": i, "k": i % 5}))
        .await
        .unwrap();
    let stats = coll_stats(&srv, "plain", "c").await;
    assert_eq!(stats.get_bool("sharded"), Ok(false), "{stats}");
    assert_eq!(num(&stats, "count"), 50, "{stats}");
    assert_eq!(plain.count_documents(doc! {"k": 3}).await.unwrap(), 10);
    let got = find_all(&plain, doc! {"k": 2}, doc! {"_id": -1}).await;
    assert_eq!(
        ids(&got),
        vec![47, 42, 37, 32, 27, 22, 17, 12, 7, 2]
            .into_iter()
            .map(Bson::Int32)
            .collect::<Vec<_>>()
    );
    // MongoDB 7.0 keeps untracked (unsharded) collections out of
    // config.collections.
    assert_eq!(config_entry(&srv, "plain.c").await, None);
}

// ---------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------

/// Shards `r.c` on `k` and inserts 400 documents, four per `k` in 0..100.
async fn routing_fixture(srv: &TestServer) -> Collection<Document> {
    shard_hashed(srv, "r.c", "k").await;
    let c = coll(srv, "r", "c");
    c.insert_many((0..400).map(|i| doc! {"_id": i, "k": i % 100, "v": i}))
        .await
        .unwrap();
    c
}

/// All partition names of `r.c`, from collStats.
async fn all_partitions(srv: &TestServer, db: &str, name: &str) -> BTreeSet<String> {
    let stats = coll_stats(srv, db, name).await;
    let names: BTreeSet<String> = shard_counts(&stats).into_keys().collect();
    assert_eq!(names.len(), PARTITIONS, "{stats}");
    names
}

#[tokio::test]
async fn equality_on_the_shard_key_targets_one_partition() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = start().await;
    let c = routing_fixture(&srv).await;
    let all = all_partitions(&srv, "r", "c").await;

    let implicit = find_route(&srv, "r", "c", doc! {"k": 7}).await.single();
    let explicit = find_route(&srv, "r", "c", doc! {"k": {"$eq": 7}})
        .await
        .single();
    assert_eq!(implicit, explicit);
    assert!(all.contains(&implicit), "{implicit} not in {all:?}");
    let got = find_all(&c, doc! {"k": 7}, doc! {"_id": 1}).await;
    assert_eq!(
        ids(&got),
        vec![
            Bson::Int32(7),
            Bson::Int32(107),
            Bson::Int32(207),
            Bson::Int32(307)
        ]
    );

    // Along with other conditions, still one partition.
    let r = find_route(&srv, "r", "c", doc! {"k": 7, "v": {"$gt": 100}}).await;
    assert_eq!(r.single(), implicit);

    // executionStats: the mongos stage over exactly that partition.
    let e = run(
        &srv,
        "r",
        doc! {"explain": {"find": "c", "filter": {"k": 7}}, "verbosity": "executionStats"},
    )
    .await;
    assert_eq!(route(&e).single(), implicit);
    let stats = e
        .get_document("executionStats")
        .unwrap_or_else(|_| panic!("no executionStats in {e}"));
    assert_eq!(num(stats, "nReturned"), 4, "{e}");
    let stages = stats.get_document("executionStages").unwrap();
    assert_eq!(stages.get_str("stage"), Ok("SINGLE_SHARD"), "{e}");
    let shards = stages.get_array("shards").unwrap();
    assert_eq!(shards.len(), 1, "{e}");
    let shard = shards[0].as_document().unwrap();
    assert_eq!(shard.get_str("shardName"), Ok(implicit.as_str()), "{e}");
    assert_eq!(num(shard, "nReturned"), 4, "{e}");
}

#[tokio::test]
async fn a_range_of_id_within_one_key_value_reads_only_what_it_returns() {
    let srv = start().await;
    shard_hashed(&srv, "r.t", "tenant").await;
    let sharded = coll(&srv, "r", "t");
    let plain = coll(&srv, "r", "plain");
    let docs: Vec<Document> = (0..2000)
        .map(|i| doc! {"_id": i, "tenant": format!("t{:02}", i % 16), "v": i})
        .collect();
    sharded.insert_many(docs.clone()).await.unwrap();
    plain.insert_many(docs).await.unwrap();

    // Same answers as an unsharded copy, in both directions, with and
    // without a limit, for one key value and for two.
    let filters = [
        doc! {"tenant": "t03", "_id": {"$gte": 500}},
        doc! {"tenant": "t03", "_id": {"$gt": 100, "$lte": 900}},
        doc! {"tenant": {"$in": ["t03", "t11"]}, "_id": {"$lt": 700}},
        doc! {"tenant": "t15"},
    ];
    for filter in &filters {
        for sort in [doc! {"_id": 1}, doc! {"_id": -1}] {
            for limit in [0, 1, 50] {
                let mut results = Vec::new();
                for c in [&sharded, &plain] {
                    let cursor = c.find(filter.clone()).sort(sort.clone()).limit(limit);
                    let docs: Vec<Document> = cursor.await.unwrap().try_collect().await.unwrap();
                    results.push(docs);
                }
                let (got, want) = (&results[0], &results[1]);
                assert_eq!(ids(got), ids(want), "{filter} sort {sort} limit {limit}");
            }
        }
    }

    // The 50 documents come straight from the partition, in `_id` order:
    // 50 examined, no sort stage.
    let e = run(
        &srv,
        "r",
        doc! {
            "explain": {"find": "t", "filter": {"tenant": "t03", "_id": {"$gte": 500}},
                        "sort": {"_id": 1}, "limit": 50},
            "verbosity": "executionStats",
        },
    )
    .await;
    assert_eq!(route(&e).shards.len(), 1, "{e}");
    let stats = e.get_document("executionStats").unwrap();
    assert_eq!(num(stats, "nReturned"), 50, "{e}");
    assert_eq!(num(stats, "totalDocsExamined"), 50, "{e}");
    assert!(!format!("{e}").contains("\"SORT\""), "a sort stage: {e}");

    // The same read as an aggregation: `$match`, `$sort`, `$limit` give
    // the unsharded answer, and the limit stops the read, as its request
    // charge shows (one connection to one gateway, so the statistics are
    // this one's).
    let one = srv
        .client_with(|o| {
            o.hosts.truncate(1);
            o.direct_connection = Some(true);
            o.max_pool_size = Some(1);
        })
        .await;
    let db = one.database("r");
    let mut charges = Vec::new();
    for limit in [None, Some(2)] {
        let mut pipeline = vec![
            doc! {"$match": {"tenant": "t03", "_id": {"$gte": 500}}},
            doc! {"$sort": {"_id": -1}},
        ];
        pipeline.extend(limit.map(|l| doc! {"$limit": l}));
        let mut results = Vec::new();
        // The sharded collection last: its charge is the one read below.
        for name in ["plain", "t"] {
            let c = db.collection::<Document>(name);
            let cursor = c.aggregate(pipeline.clone()).await.unwrap();
            let docs: Vec<Document> = cursor.try_collect().await.unwrap();
            results.push(docs);
        }
        assert_eq!(ids(&results[1]), ids(&results[0]), "limit {limit:?}");
        let stats = db
            .run_command(doc! {"getLastRequestStatistics": 1})
            .await
            .unwrap();
        charges.push(stats.get_f64("RequestCharge").unwrap());
    }
    assert!(
        charges[1] * 2.0 < charges[0],
        "2 documents should cost far less than all {}: {charges:?}",
        1500 / 16
    );
}

#[tokio::test]
async fn in_on_the_shard_key_targets_exactly_the_owning_partitions() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = start().await;
    let c = routing_fixture(&srv).await;
    let mut owner_of = BTreeMap::new();
    for k in 0..100 {
        owner_of.insert(k, find_route(&srv, "r", "c", doc! {"k": k}).await.single());
    }
    let first = owner_of[&0].clone();
    let elsewhere = *owner_of
        .iter()
        .find(|(_, p)| **p != first)
        .expect("100 keys all in one of 8 partitions")
        .0;
    let same = *owner_of
        .iter()
        .find(|(k, p)| **k != 0 && **p == first)
        .map(|(k, _)| k)
        .unwrap_or(&0);

    // Two values in two partitions: exactly those two.
    let r = find_route(&srv, "r", "c", doc! {"k": {"$in": [0, elsewhere]}}).await;
    assert_eq!(r.stage, "SHARD_MERGE", "{r:?}");
    assert_eq!(
        r.set(),
        BTreeSet::from([first.clone(), owner_of[&elsewhere].clone()])
    );
    let got = find_all(&c, doc! {"k": {"$in": [0, elsewhere]}}, doc! {"_id": 1}).await;
    let mut want: Vec<i32> = (0..400)
        .filter(|i| i % 100 == 0 || i % 100 == elsewhere)
        .collect();
    want.sort_unstable();
    assert_eq!(
        ids(&got),
        want.into_iter().map(Bson::Int32).collect::<Vec<_>>()
    );

    // With a sort, the mongos merges sorted streams.
    let r = route(
        &explain(
            &srv,
            "r",
            doc! {"find": "c", "filter": {"k": {"$in": [0, elsewhere]}}, "sort": {"v": -1}},
        )
        .await,
    );
    assert_eq!(r.stage, "SHARD_MERGE_SORT", "{r:?}");
    assert_eq!(r.shards.len(), 2, "{r:?}");

    // Two values in one partition: a single-partition plan.
    let r = find_route(&srv, "r", "c", doc! {"k": {"$in": [0, same]}}).await;
    assert_eq!(r.single(), first);

    // Many values: the union of their owners, nothing more.
    let values: Vec<i32> = (0..100).step_by(9).collect();
    let want: BTreeSet<String> = values.iter().map(|k| owner_of[k].clone()).collect();
    let r = find_route(&srv, "r", "c", doc! {"k": {"$in": values.clone()}}).await;
    assert!(
        !r.shards.is_empty() && r.shards.len() <= values.len(),
        "{r:?}"
    );
    assert_eq!(r.set(), want, "{r:?}");
    let n = c
        .count_documents(doc! {"k": {"$in": values.clone()}})
        .await
        .unwrap();
    assert_eq!(n, values.len() as u64 * 4);
}

#[tokio::test]
async fn filters_without_the_shard_key_fan_out_to_every_partition() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = start().await;
    routing_fixture(&srv).await;
    let all = all_partitions(&srv, "r", "c").await;
    for filter in [
        doc! {},
        doc! {"v": {"$gt": 10}},
        doc! {"_id": 5},
        doc! {"k": {"$gt": 50}},
        doc! {"$or": [{"k": 1}, {"v": 2}]},
    ] {
        let r = find_route(&srv, "r", "c", filter.clone()).await;
        assert_eq!(r.stage, "SHARD_MERGE", "{filter}: {r:?}");
        assert_eq!(r.set(), all, "{filter}: {r:?}");
    }
    let r = route(
        &explain(
            &srv,
            "r",
            doc! {"find": "c", "filter": {"v": {"$lt": 50}}, "sort": {"v": 1}},
        )
        .await,
    );
    assert_eq!(r.stage, "SHARD_MERGE_SORT", "{r:?}");
    assert_eq!(r.set(), all, "{r:?}");
}

#[tokio::test]
async fn count_and_aggregate_explain_show_targeting() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = start().await;
    routing_fixture(&srv).await;
    let all = all_partitions(&srv, "r", "c").await;
    let p = find_route(&srv, "r", "c", doc! {"k": 42}).await.single();

    // count: the same mongos shape as find (cluster_count_cmd.cpp).
    let r = route(&explain(&srv, "r", doc! {"count": "c", "query": {"k": 42}}).await);
    assert_eq!(r.single(), p);
    let r = route(&explain(&srv, "r", doc! {"count": "c", "query": {"v": {"$gt": 3}}}).await);
    assert_eq!(r.stage, "SHARD_MERGE", "{r:?}");
    assert_eq!(r.set(), all, "{r:?}");

    // aggregate: mongos 7.0 answers {splitPipeline, shards: {<name>: {...}}}
    // (sharded_agg_helpers.cpp); a pipeline sent to one shard is not split.
    let e = explain(
        &srv,
        "r",
        doc! {"aggregate": "c", "pipeline": [{"$match": {"k": 42}}], "cursor": {}},
    )
    .await;
    assert_ok(&e);
    let shards = e
        .get_document("shards")
        .unwrap_or_else(|_| panic!("no shards document in {e}"));
    assert_eq!(
        shards.keys().cloned().collect::<Vec<_>>(),
        vec![p.clone()],
        "{e}"
    );
    assert_eq!(e.get("splitPipeline"), Some(&Bson::Null), "{e}");

    let e = explain(
        &srv,
        "r",
        doc! {"aggregate": "c", "pipeline": [{"$match": {"v": {"$gt": 3}}}], "cursor": {}},
    )
    .await;
    assert_ok(&e);
    let shards = e
        .get_document("shards")
        .unwrap_or_else(|_| panic!("no shards document in {e}"));
    assert_eq!(shards.keys().cloned().collect::<BTreeSet<_>>(), all, "{e}");
    assert!(
        e.get_document("splitPipeline").is_ok(),
        "a pipeline over several shards is split: {e}"
    );
    assert_eq!(e.get_str("mergeType"), Ok("mongos"), "{e}");
}

#[tokio::test]
async fn unsharded_collection_explain_still_works() {
    let srv = start().await;
    let plain = coll(&srv, "plain", "c");
    plain
        .insert_many((0..20).map(|i| doc! {"_id": i, "a": i % 2}))
        .await
        .unwrap();
    let e = explain(&srv, "plain", doc! {"find": "c", "filter": {"a": 1}}).await;
    assert_ok(&e);
    assert!(e.get_document("queryPlanner").is_ok(), "{e}");
    let e = explain(&srv, "plain", doc! {"count": "c", "query": {"a": 1}}).await;
    assert_ok(&e);
    assert_eq!(plain.count_documents(doc! {"a": 1}).await.unwrap(), 10);
}

// ---------------------------------------------------------------------------
// The hash
// ---------------------------------------------------------------------------

#[tokio::test]
async fn numbers_of_every_type_hash_alike() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = start().await;
    shard_hashed(&srv, "h.n", "k").await;
    let c = coll(&srv, "h", "n");
    c.insert_many([
        doc! {"_id": 1, "k": 42i32},
        doc! {"_id": 2, "k": 42.0f64},
        doc! {"_id": 3, "k": 42i64},
        doc! {"_id": 4, "k": 42.5f64},
        doc! {"_id": 5, "k": 43i32},
    ])
    .await
    .unwrap();

    let forty_two = vec![Bson::Int32(1), Bson::Int32(2), Bson::Int32(3)];
    for k in [Bson::Int32(42), Bson::Double(42.0), Bson::Int64(42)] {
        let got = find_all(&c, doc! {"k": k.clone()}, doc! {"_id": 1}).await;
        assert_eq!(ids(&got), forty_two, "find k = {k:?}");
    }
    let p = find_route(&srv, "h", "n", doc! {"k": 42}).await.single();
    assert_eq!(
        find_route(&srv, "h", "n", doc! {"k": 42i64}).await.single(),
        p
    );
    assert_eq!(
        find_route(&srv, "h", "n", doc! {"k": 42.0}).await.single(),
        p
    );
    // 42.5 hashes as 42 (truncated to int64) but does not equal it.
    assert_eq!(
        find_route(&srv, "h", "n", doc! {"k": 42.5}).await.single(),
        p
    );
    assert_eq!(
        ids(&find_all(&c, doc! {"k": 42.5}, doc! {}).await),
        vec![Bson::Int32(4)]
    );

    // Physically, the four live in that one partition.
    let p43 = find_route(&srv, "h", "n", doc! {"k": 43}).await.single();
    let counts = shard_counts(&coll_stats(&srv, "h", "n").await);
    assert_eq!(counts[&p], if p43 == p { 5 } else { 4 }, "{counts:?}");
}

#[tokio::test]
async fn partitions_follow_mongodb_hash_and_chunk_bounds() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = start().await;
    shard_hashed(&srv, "h.c", "k").await;
    let c = coll(&srv, "h", "c");
    let mut docs: Vec<Document> = (0..60).map(|i| doc! {"_id": i, "k": i - 20}).collect();
    docs.extend((0..30).map(|i| doc! {"_id": 100 + i, "k": format!("s{i}")}));
    docs.push(doc! {"_id": 200, "k": Bson::Null});
    docs.push(doc! {"_id": 201});
    docs.push(doc! {"_id": 202, "k": i64::MAX});
    docs.push(doc! {"_id": 203, "k": -7.9});
    c.insert_many(docs.clone()).await.unwrap();

    let chunks = config_chunks(&srv.client, "h.c").await;
    assert_eq!(chunks.len(), PARTITIONS, "{chunks:?}");
    let db = srv.db("h");

    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    for d in &docs {
        // A document without the key hashes like null.
        let key = d.get("k").cloned().unwrap_or(Bson::Null);
        let p = owner(&chunks, hashed(&db, key).await);
        *want.entry(p.clone()).or_default() += 1;
        if let Some(k) = d.get("k") {
            let r = find_route(&srv, "h", "c", doc! {"k": k.clone()}).await;
            assert_eq!(r.single(), p, "k = {k:?}");
        }
    }
    let r = find_route(&srv, "h", "c", doc! {"k": Bson::Null}).await;
    assert_eq!(r.single(), owner(&chunks, hashed(&db, Bson::Null).await));

    let counts = shard_counts(&coll_stats(&srv, "h", "c").await);
    for chunk in &chunks {
        want.entry(chunk.shard.clone()).or_default();
    }
    assert_eq!(counts, want, "documents per partition");
}

// ---------------------------------------------------------------------------
// Fan-out reads against an unsharded copy
// ---------------------------------------------------------------------------

/// 3,000 documents: `k` (the shard key) repeats, `a` and `c` have many
/// duplicates, `b` mixes types (numbers of three types, strings, null,
/// missing, booleans, arrays, documents), `tie` is unique.
fn mixed_docs() -> Vec<Document> {
    let mut rng = Rng::new(20240607);
    (0..3000)
        .map(|i| {
            let a = rng.below(7) as i32;
            let c = ["x", "y", "z", "w"][rng.below(4) as usize];
            let v = rng.below(30) as i32;
            let mut d = doc! {
                "_id": i,
                "k": i % 101,
                "a": a,
                "c": c,
                "tie": (5000 - i) as i64,
                "nested": {"v": v},
            };
            let n = rng.below(50);
            match rng.below(9) {
                0 => {
                    d.insert("b", n as i32);
                }
                1 => {
                    d.insert("b", n as i64);
                }
                2 => {
                    d.insert("b", n as f64 + 0.5);
                }
                3 => {
                    d.insert("b", format!("s{}", n % 20));
                }
                4 => {
                    d.insert("b", Bson::Null);
                }
                5 => {}
                6 => {
                    d.insert("b", n.is_multiple_of(2));
                }
                7 => {
                    d.insert(
                        "b",
                        vec![Bson::Int32(n as i32), Bson::Int32(rng.below(50) as i32)],
                    );
                }
                _ => {
                    d.insert("b", doc! {"x": (n % 5) as i32});
                }
            }
            d
        })
        .collect()
}

/// `m.s` sharded on `k` and `m.u` unsharded, holding the same documents.
async fn merge_fixture(srv: &TestServer) -> (Collection<Document>, Collection<Document>) {
    shard_hashed(srv, "m.s", "k").await;
    let sharded = coll(srv, "m", "s");
    let plain = coll(srv, "m", "u");
    let docs = mixed_docs();
    sharded.insert_many(docs.clone()).await.unwrap();
    plain.insert_many(docs).await.unwrap();
    (sharded, plain)
}

#[derive(Debug, Default, Clone)]
struct Query {
    filter: Document,
    sort: Option<Document>,
    skip: Option<u64>,
    limit: Option<i64>,
    batch: Option<u32>,
    projection: Option<Document>,
}

async fn read(c: &Collection<Document>, q: &Query) -> Vec<Document> {
    let mut find = c.find(q.filter.clone());
    if let Some(s) = &q.sort {
        find = find.sort(s.clone());
    }
    if let Some(n) = q.skip {
        find = find.skip(n);
    }
    if let Some(n) = q.limit {
        find = find.limit(n);
    }
    if let Some(n) = q.batch {
        find = find.batch_size(n);
    }
    if let Some(p) = &q.projection {
        find = find.projection(p.clone());
    }
    find.await
        .unwrap_or_else(|e| panic!("{q:?}: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("{q:?}: {e}"))
}

fn by_id(mut docs: Vec<Document>) -> Vec<Document> {
    docs.sort_by_key(|d| d.get_i32("_id").unwrap_or(i32::MIN));
    docs
}

#[tokio::test]
async fn merged_reads_equal_the_unsharded_copy() {
    let srv = start().await;
    let (sharded, plain) = merge_fixture(&srv).await;
    let q = |filter: Document| Query {
        filter,
        ..Query::default()
    };
    // Every sort ends in a unique field, so the order is fully defined.
    let sorted = vec![
        Query {
            sort: Some(doc! {"_id": 1}),
            batch: Some(7),
            ..q(doc! {})
        },
        Query {
            sort: Some(doc! {"tie": -1}),
            batch: Some(3),
            ..q(doc! {"k": {"$in": [1, 5, 9, 77]}})
        },
        Query {
            sort: Some(doc! {"_id": -1}),
            ..q(doc! {"k": 13})
        },
        Query {
            sort: Some(doc! {"b": 1, "_id": 1}),
            batch: Some(10),
            ..q(doc! {"a": 3})
        },
        Query {
            sort: Some(doc! {"b": -1, "_id": -1}),
            batch: Some(64),
            ..q(doc! {"a": {"$gte": 2}})
        },
        Query {
            sort: Some(doc! {"c": 1, "a": -1, "tie": 1}),
            skip: Some(100),
            limit: Some(250),
            batch: Some(16),
            ..q(doc! {})
        },
        Query {
            sort: Some(doc! {"nested.v": 1, "_id": 1}),
            batch: Some(25),
            projection: Some(doc! {"a": 1, "nested.v": 1}),
            ..q(doc! {"nested.v": {"$lt": 10}})
        },
        // The sort fields are projected away: the merge must still order by them.
        Query {
            sort: Some(doc! {"a": 1, "c": -1, "_id": 1}),
            skip: Some(37),
            batch: Some(50),
            projection: Some(doc! {"_id": 1, "k": 1}),
            ..q(doc! {"$or": [{"a": 1}, {"c": "z"}]})
        },
        Query {
            sort: Some(doc! {"b": 1, "_id": -1}),
            limit: Some(40),
            ..q(doc! {"b": {"$type": "string"}})
        },
        Query {
            sort: Some(doc! {"a": -1, "_id": 1}),
            skip: Some(2990),
            ..q(doc! {})
        },
        Query {
            sort: Some(doc! {"_id": 1}),
            skip: Some(5000),
            ..q(doc! {})
        },
        Query {
            sort: Some(doc! {"tie": 1}),
            batch: Some(1000),
            projection: Some(doc! {"b": 0, "nested": 0}),
            ..q(doc! {"c": {"$ne": "w"}})
        },
        Query {
            sort: Some(doc! {"a": 1, "tie": -1}),
            limit: Some(1),
            ..q(doc! {"b": {"$exists": false}})
        },
    ];
    for query in &sorted {
        let want = read(&plain, query).await;
        let got = read(&sharded, query).await;
        assert_eq!(got.len(), want.len(), "{query:?}");
        assert_eq!(got, want, "{query:?}");
    }

    // Without a sort the order is unspecified: compare as sets.
    let unsorted = vec![
        Query {
            batch: Some(11),
            ..q(doc! {"c": "x"})
        },
        Query {
            batch: Some(2),
            ..q(doc! {"k": {"$in": [2, 3]}})
        },
        Query {
            projection: Some(doc! {"_id": 1, "b": 1}),
            ..q(doc! {"b": Bson::Null})
        },
    ];
    for query in &unsorted {
        let want = by_id(read(&plain, query).await);
        let got = by_id(read(&sharded, query).await);
        assert_eq!(got, want, "{query:?}");
    }

    // A limit without a sort: the right number of matching documents.
    let query = Query {
        limit: Some(100),
        batch: Some(30),
        ..q(doc! {"a": {"$lt": 4}})
    };
    let got = read(&sharded, &query).await;
    assert_eq!(got.len(), 100, "{query:?}");
    let matching = id_set(
        &read(
            &plain,
            &Query {
                limit: None,
                ..query.clone()
            },
        )
        .await,
    );
    let got = id_set(&got);
    assert_eq!(got.len(), 100, "{query:?}");
    assert!(got.is_subset(&matching), "{query:?}");
}

async fn count_documents(
    c: &Collection<Document>,
    filter: &Document,
    skip: Option<u64>,
    limit: Option<u64>,
) -> u64 {
    let mut action = c.count_documents(filter.clone());
    if let Some(s) = skip {
        action = action.skip(s);
    }
    if let Some(l) = limit {
        action = action.limit(l);
    }
    action
        .await
        .unwrap_or_else(|e| panic!("countDocuments {filter}: {e}"))
}

/// Numbers compare equal across types (distinct may keep either form).
fn comparable(v: &Bson) -> String {
    match v {
        Bson::Int32(n) => format!("num:{}", *n as f64),
        Bson::Int64(n) => format!("num:{}", *n as f64),
        Bson::Double(n) => format!("num:{n}"),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn counts_and_distinct_equal_the_unsharded_copy() {
    let srv = start().await;
    let (sharded, plain) = merge_fixture(&srv).await;
    let filters = [
        doc! {},
        doc! {"a": 3},
        doc! {"k": 5},
        doc! {"k": {"$in": [1, 2, 50]}},
        doc! {"b": Bson::Null},
        doc! {"b": {"$gt": 20}},
        doc! {"c": "nope"},
    ];
    let windows: [(Option<u64>, Option<u64>); 5] = [
        (None, None),
        (Some(10), Some(100)),
        (Some(2990), None),
        (None, Some(5)),
        (Some(4000), None),
    ];
    for filter in &filters {
        for (skip, limit) in windows {
            let want = count_documents(&plain, filter, skip, limit).await;
            let got = count_documents(&sharded, filter, skip, limit).await;
            assert_eq!(
                got, want,
                "countDocuments {filter} skip {skip:?} limit {limit:?}"
            );

            // The legacy count command applies skip and limit to the total.
            let mut cmd = doc! {"count": "s", "query": filter.clone()};
            if let Some(s) = skip {
                cmd.insert("skip", s as i64);
            }
            if let Some(l) = limit {
                cmd.insert("limit", l as i64);
            }
            let got = num(&run(&srv, "m", cmd.clone()).await, "n");
            cmd.insert("count", "u");
            let want = num(&run(&srv, "m", cmd).await, "n");
            assert_eq!(got, want, "count {filter} skip {skip:?} limit {limit:?}");
        }
    }
    assert_eq!(sharded.estimated_document_count().await.unwrap(), 3000);

    for (field, filter) in [
        ("a", doc! {}),
        ("b", doc! {}),
        ("c", doc! {"a": 2}),
        ("nested.v", doc! {"k": {"$in": [3, 4, 5, 6]}}),
        ("k", doc! {"a": 1}),
        ("tie", doc! {"k": 7}),
    ] {
        let canon = |vals: Vec<Bson>| {
            let mut v: Vec<String> = vals.iter().map(comparable).collect();
            v.sort();
            v
        };
        let want = canon(plain.distinct(field, filter.clone()).await.unwrap());
        let got = canon(sharded.distinct(field, filter.clone()).await.unwrap());
        assert_eq!(got, want, "distinct {field} {filter}");
        let unique: HashSet<&String> = got.iter().collect();
        assert_eq!(unique.len(), got.len(), "distinct {field} repeats a value");
    }
}

// ---------------------------------------------------------------------------
// Writes
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_document_without_the_key_lives_with_null() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = start().await;
    shard_hashed(&srv, "w.c", "k").await;
    let c = coll(&srv, "w", "c");
    c.insert_one(doc! {"_id": "nokey", "v": 1}).await.unwrap();
    c.insert_one(doc! {"_id": "nullkey", "k": Bson::Null, "v": 2})
        .await
        .unwrap();
    c.insert_one(doc! {"_id": "keyed", "k": 5, "v": 3})
        .await
        .unwrap();

    let got = find_all(&c, doc! {"k": Bson::Null}, doc! {"v": 1}).await;
    assert_eq!(ids(&got), vec![Bson::from("nokey"), Bson::from("nullkey")]);
    let p = find_route(&srv, "w", "c", doc! {"k": Bson::Null})
        .await
        .single();
    let chunks = config_chunks(&srv.client, "w.c").await;
    assert_eq!(p, owner(&chunks, hashed(&srv.db("w"), Bson::Null).await));
    let counts = shard_counts(&coll_stats(&srv, "w", "c").await);
    assert!(
        counts[&p] >= 2,
        "both null-keyed documents in {p}: {counts:?}"
    );
    // And by _id (all partitions) too.
    assert_eq!(
        c.find_one(doc! {"_id": "nokey"}).await.unwrap(),
        Some(doc! {"_id": "nokey", "v": 1})
    );
}

#[tokio::test]
async fn single_document_writes_without_the_key_touch_exactly_one() {
    let srv = start().await;
    shard_hashed(&srv, "w.c", "k").await;
    let c = coll(&srv, "w", "c");
    c.insert_many((0..200).map(|i| doc! {"_id": i, "k": i, "g": "all", "n": 0}))
        .await
        .unwrap();

    let r = c
        .update_one(doc! {"g": "all"}, doc! {"$inc": {"n": 1}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
    assert_eq!(c.count_documents(doc! {"n": 1}).await.unwrap(), 1);

    let after = c
        .find_one_and_update(doc! {"g": "all", "n": 0}, doc! {"$set": {"f": true}})
        .return_document(ReturnDocument::After)
        .await
        .unwrap()
        .expect("a document matched");
    assert_eq!(after.get_bool("f"), Ok(true), "{after}");
    assert_eq!(c.count_documents(doc! {"f": true}).await.unwrap(), 1);

    let r = c.delete_one(doc! {"g": "all"}).await.unwrap();
    assert_eq!(r.deleted_count, 1);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 199);

    let r = c
        .update_one(doc! {"_id": 150}, doc! {"$set": {"by_id": true}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
    let got = find_all(&c, doc! {"by_id": true}, doc! {}).await;
    assert_eq!(ids(&got), vec![Bson::Int32(150)]);

    let r = c.delete_one(doc! {"_id": 151}).await.unwrap();
    assert_eq!(r.deleted_count, 1);
    assert_eq!(c.find_one(doc! {"_id": 151}).await.unwrap(), None);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 198);

    // Nothing matches: nothing happens.
    let r = c
        .update_one(doc! {"g": "none"}, doc! {"$set": {"x": 1}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (0, 0));
}

#[tokio::test]
async fn multi_document_writes_fan_out_and_count_right() {
    let srv = start().await;
    shard_hashed(&srv, "w.c", "k").await;
    let c = coll(&srv, "w", "c");
    c.insert_many((0..300).map(|i| doc! {"_id": i, "k": i % 50, "v": i}))
        .await
        .unwrap();

    let r = c
        .update_many(doc! {"v": {"$lt": 100}}, doc! {"$set": {"low": true}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (100, 100));
    let r = c
        .update_many(doc! {"v": {"$lt": 100}}, doc! {"$set": {"low": true}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (100, 0));
    assert_eq!(c.count_documents(doc! {"low": true}).await.unwrap(), 100);

    let r = c
        .update_many(doc! {"k": {"$in": [1, 2]}}, doc! {"$inc": {"bumped": 1}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (12, 12));

    let r = c.delete_many(doc! {"v": {"$gte": 250}}).await.unwrap();
    assert_eq!(r.deleted_count, 50);
    let r = c.delete_many(doc! {"k": 3}).await.unwrap();
    assert_eq!(r.deleted_count, 5); // v = 3, 53, 103, 153, 203
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 245);
    let stats = coll_stats(&srv, "w", "c").await;
    assert_eq!(num(&stats, "count"), 245, "{stats}");
    assert_eq!(shard_counts(&stats).values().sum::<i64>(), 245, "{stats}");
}

#[tokio::test]
async fn upserts_with_the_shard_key_insert_into_its_partition() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = start().await;
    shard_hashed(&srv, "w.c", "k").await;
    let c = coll(&srv, "w", "c");

    let r = c
        .update_one(doc! {"k": "fresh", "_id": 1}, doc! {"$set": {"x": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(r.matched_count, 0);
    assert_eq!(r.upserted_id, Some(Bson::Int32(1)));
    let r = c
        .update_one(doc! {"k": "fresh", "_id": 1}, doc! {"$inc": {"x": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
    assert_eq!(r.upserted_id, None);
    assert_eq!(
        find_all(&c, doc! {"k": "fresh"}, doc! {}).await,
        vec![doc! {"_id": 1, "k": "fresh", "x": 2}]
    );

    let doc = c
        .find_one_and_update(doc! {"k": "other", "_id": 2}, doc! {"$set": {"y": 1}})
        .upsert(true)
        .return_document(ReturnDocument::After)
        .await
        .unwrap();
    assert_eq!(doc, Some(doc! {"_id": 2, "k": "other", "y": 1}));

    let r = c
        .update_one(doc! {"k": "third"}, doc! {"$setOnInsert": {"z": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert!(matches!(r.upserted_id, Some(Bson::ObjectId(_))), "{r:?}");

    let chunks = config_chunks(&srv.client, "w.c").await;
    let counts = shard_counts(&coll_stats(&srv, "w", "c").await);
    for key in ["fresh", "other", "third"] {
        let p = find_route(&srv, "w", "c", doc! {"k": key}).await.single();
        assert_eq!(
            p,
            owner(&chunks, hashed(&srv.db("w"), Bson::from(key)).await),
            "{key}"
        );
        assert!(counts[&p] >= 1, "{key} not stored in {p}: {counts:?}");
        assert_eq!(
            c.count_documents(doc! {"k": key}).await.unwrap(),
            1,
            "{key}"
        );
    }
    assert_eq!(counts.values().sum::<i64>(), 3);
}

/// A key value owned by a partition other than `not_in`.
async fn key_elsewhere(srv: &TestServer, prefix: &str, not_in: &str) -> (String, String) {
    for j in 0.. {
        let key = format!("{prefix}{j}");
        let p = find_route(srv, "w", "c", doc! {"k": &key}).await.single();
        if p != not_in {
            return (key, p);
        }
    }
    unreachable!()
}

#[tokio::test]
async fn changing_the_shard_key_moves_the_document() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = start().await;
    shard_hashed(&srv, "w.c", "k").await;
    let c = coll(&srv, "w", "c");
    c.insert_many((0..64).map(|i| doc! {"_id": i, "k": format!("key{i}"), "n": i}))
        .await
        .unwrap();

    // updateOne with the full shard key in the filter, as a retryable write
    // (the driver's default): what MongoDB 7.0 requires to change it.
    for (id, how) in [(0, "updateOne"), (1, "findOneAndUpdate"), (2, "replaceOne")] {
        let old = format!("key{id}");
        let p_old = find_route(&srv, "w", "c", doc! {"k": &old}).await.single();
        let (new, p_new) = key_elsewhere(&srv, &format!("moved{id}-"), &p_old).await;
        let before = shard_counts(&coll_stats(&srv, "w", "c").await);

        let filter = doc! {"_id": id, "k": &old};
        match how {
            "updateOne" => {
                let r = c
                    .update_one(filter, doc! {"$set": {"k": &new}})
                    .await
                    .unwrap();
                assert_eq!((r.matched_count, r.modified_count), (1, 1), "{how}");
            }
            "findOneAndUpdate" => {
                let after = c
                    .find_one_and_update(filter, doc! {"$set": {"k": &new}})
                    .return_document(ReturnDocument::After)
                    .await
                    .unwrap();
                assert_eq!(after, Some(doc! {"_id": id, "k": &new, "n": id}), "{how}");
            }
            _ => {
                let r = c
                    .replace_one(filter, doc! {"k": &new, "n": id, "replaced": true})
                    .await
                    .unwrap();
                assert_eq!((r.matched_count, r.modified_count), (1, 1), "{how}");
            }
        }

        assert_eq!(
            ids(&find_all(&c, doc! {"k": &new}, doc! {}).await),
            vec![Bson::Int32(id)],
            "{how}"
        );
        assert!(
            find_all(&c, doc! {"k": &old}, doc! {}).await.is_empty(),
            "{how}"
        );
        assert_eq!(c.count_documents(doc! {}).await.unwrap(), 64, "{how}");
        assert_eq!(
            find_route(&srv, "w", "c", doc! {"k": &new}).await.single(),
            p_new
        );
        let after = shard_counts(&coll_stats(&srv, "w", "c").await);
        assert_eq!(after[&p_old], before[&p_old] - 1, "{how}: left {p_old}");
        assert_eq!(
            after[&p_new],
            before[&p_new] + 1,
            "{how}: arrived in {p_new}"
        );
    }
    let all: Vec<Document> = c.find(doc! {}).await.unwrap().try_collect().await.unwrap();
    assert_eq!(id_set(&all).len(), 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scans_see_every_document_once_while_shard_keys_change() {
    if compat_tests::embedded_only("a fan-out reads each server at its own moment, so a document moving between servers may be seen twice or not at all, as with MongoDB's read concern local") {
        return;
    }
    const DOCS: i32 = 200;
    const WRITERS: i32 = 4;
    let srv = start().await;
    shard_hashed(&srv, "w.c", "k").await;
    let c = coll(&srv, "w", "c");
    c.insert_many((0..DOCS).map(|i| doc! {"_id": i, "k": format!("{i}-0")}))
        .await
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let c = c.clone();
        let stop = stop.clone();
        // Each writer owns the documents with _id % WRITERS == w and so
        // always knows their current key.
        writers.push(tokio::spawn(async move {
            let mut keys: HashMap<i32, String> = (0..DOCS)
                .filter(|i| i % WRITERS == w)
                .map(|i| (i, format!("{i}-0")))
                .collect();
            let mut moves = 0u64;
            let mut problems = Vec::new();
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                for (id, key) in keys.iter_mut() {
                    let new = format!("{id}-{round}");
                    match c
                        .update_one(
                            doc! {"_id": *id, "k": key.as_str()},
                            doc! {"$set": {"k": &new}},
                        )
                        .await
                    {
                        Ok(r) if r.matched_count == 1 && r.modified_count == 1 => {
                            *key = new;
                            moves += 1;
                        }
                        Ok(r) => problems.push(format!("move {id} {key}->{new}: {r:?}")),
                        Err(e) => problems.push(format!("move {id} {key}->{new}: {e}")),
                    }
                }
            }
            (keys, moves, problems)
        }));
    }
    let mut readers = Vec::new();
    for _ in 0..2 {
        let c = c.clone();
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let mut scans = 0u64;
            let mut problems = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let docs: Vec<Document> = match c.find(doc! {}).batch_size(50).await {
                    Ok(cursor) => match cursor.try_collect().await {
                        Ok(docs) => docs,
                        Err(e) => {
                            problems.push(format!("scan: {e}"));
                            continue;
                        }
                    },
                    Err(e) => {
                        problems.push(format!("scan: {e}"));
                        continue;
                    }
                };
                let seen = id_set(&docs);
                if docs.len() != DOCS as usize || seen.len() != DOCS as usize {
                    problems.push(format!(
                        "scan {scans} returned {} documents, {} distinct _ids",
                        docs.len(),
                        seen.len()
                    ));
                }
                match c.count_documents(doc! {}).await {
                    Ok(n) if n == DOCS as u64 => {}
                    other => problems.push(format!("countDocuments: {other:?}")),
                }
                scans += 1;
            }
            (scans, problems)
        }));
    }

    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);

    let mut final_keys = HashMap::new();
    let mut total_moves = 0;
    for w in writers {
        let (keys, moves, problems) = w.await.unwrap();
        assert!(
            problems.is_empty(),
            "writer: {:?}",
            &problems[..problems.len().min(5)]
        );
        total_moves += moves;
        final_keys.extend(keys);
    }
    for r in readers {
        let (scans, problems) = r.await.unwrap();
        assert!(
            problems.is_empty(),
            "reader: {:?}",
            &problems[..problems.len().min(5)]
        );
        assert!(scans >= 3, "only {scans} scans ran");
    }
    assert!(
        total_moves >= DOCS as u64,
        "only {total_moves} key changes ran"
    );
    for (id, key) in &final_keys {
        let got = find_all(&c, doc! {"k": key.as_str()}, doc! {}).await;
        assert_eq!(got, vec![doc! {"_id": *id, "k": key.as_str()}]);
    }
    let stats = coll_stats(&srv, "w", "c").await;
    assert_eq!(
        shard_counts(&stats).values().sum::<i64>(),
        DOCS as i64,
        "{stats}"
    );
}

// ---------------------------------------------------------------------------
// The logical-partition cap
// ---------------------------------------------------------------------------

const CAP: usize = 100_000;

async fn start_capped() -> TestServer {
    TestServer::start_with_args(&[
        "--initial-partitions",
        "8",
        "--logical-partition-max-bytes",
        "100000",
    ])
    .await
}

#[track_caller]
fn assert_cap_error(f: &compat_tests::Failure, key: &str) {
    assert_eq!(
        (f.code, f.code_name.as_str()),
        (14031, "OutOfDiskSpace"),
        "{f:?}"
    );
    assert!(
        f.message.contains(key),
        "message names the key value {key}: {f:?}"
    );
    assert!(
        f.message.contains(&CAP.to_string()),
        "message names the limit: {f:?}"
    );
}

#[tokio::test]
async fn the_write_that_would_pass_the_logical_partition_cap_is_refused() {
    let srv = start_capped().await;
    shard_hashed(&srv, "cap.c", "tenant").await;
    let c = coll(&srv, "cap", "c");

    let mut stored = 0usize;
    let mut accepted = 0u64;
    let mut refused = None;
    for i in 0..100 {
        let d = doc! {"_id": i, "tenant": "hot-tenant", "pad": "x".repeat(3000 + (i as usize % 7) * 100)};
        let size = bson_len(&d);
        match c.insert_one(d).await {
            Ok(_) => {
                stored += size;
                accepted += 1;
                assert!(
                    stored <= CAP,
                    "insert {i} accepted: the key now holds {stored} bytes"
                );
            }
            Err(e) => {
                let f = failure(&e).unwrap_or_else(|| panic!("insert {i}: {e}"));
                assert_cap_error(&f, "hot-tenant");
                assert!(stored + size > CAP, "refused though {stored} + {size} fits");
                refused = Some(i);
                break;
            }
        }
    }
    let refused = refused.expect("the cap was never reached");
    assert_eq!(c.find_one(doc! {"_id": refused}).await.unwrap(), None);
    assert_eq!(
        c.count_documents(doc! {"tenant": "hot-tenant"})
            .await
            .unwrap(),
        accepted
    );

    // Another key value, even in the same partition, is not affected.
    c.insert_one(doc! {"_id": "cold-1", "tenant": "cold", "pad": "y".repeat(5000)})
        .await
        .unwrap();
    // The cap is exact: a document that still fits is taken.
    let tiny = doc! {"_id": "tiny", "tenant": "hot-tenant"};
    if stored + bson_len(&tiny) <= CAP {
        c.insert_one(tiny).await.unwrap();
        accepted += 1;
    }

    // In a batch the error names the document's index; an ordered insert
    // stops there.
    let batch = vec![
        doc! {"_id": "cold-2", "tenant": "cold"},
        doc! {"_id": "hot-big", "tenant": "hot-tenant", "pad": "z".repeat(20_000)},
        doc! {"_id": "cold-3", "tenant": "cold"},
    ];
    let e = c
        .insert_many(batch)
        .await
        .expect_err("the batch passes the cap");
    match &*e.kind {
        ErrorKind::InsertMany(m) => {
            let errors = m.write_errors.as_ref().expect("write errors");
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert_eq!(errors[0].index, 1, "{errors:?}");
            assert_eq!(errors[0].code, 14031, "{errors:?}");
        }
        other => panic!("expected writeErrors, got {other:?}"),
    }
    let f = failure(&e).expect("server error");
    assert_cap_error(&f, "hot-tenant");
    assert!(c.find_one(doc! {"_id": "cold-2"}).await.unwrap().is_some());
    assert_eq!(c.find_one(doc! {"_id": "hot-big"}).await.unwrap(), None);
    assert_eq!(c.find_one(doc! {"_id": "cold-3"}).await.unwrap(), None);
    assert_eq!(
        c.count_documents(doc! {"tenant": "hot-tenant"})
            .await
            .unwrap(),
        accepted
    );
}

#[tokio::test]
async fn an_update_past_the_logical_partition_cap_changes_nothing() {
    let srv = start_capped().await;
    shard_hashed(&srv, "cap.c", "tenant").await;
    let c = coll(&srv, "cap", "c");
    let target = doc! {"_id": "a", "tenant": "grow-tenant", "pad": "a".repeat(1000)};
    let mut stored = bson_len(&target);
    c.insert_one(target.clone()).await.unwrap();
    for i in 0..8 {
        let d = doc! {"_id": i, "tenant": "grow-tenant", "pad": "f".repeat(10_000)};
        stored += bson_len(&d);
        c.insert_one(d).await.unwrap();
    }
    assert!(stored < CAP && stored + 20_000 > CAP, "fixture: {stored}");

    let filter = doc! {"_id": "a", "tenant": "grow-tenant"};
    let e = c
        .update_one(filter.clone(), doc! {"$set": {"pad": "b".repeat(20_000)}})
        .await
        .expect_err("the update passes the cap");
    assert_cap_error(&failure(&e).expect("server error"), "grow-tenant");
    assert_eq!(
        c.find_one(doc! {"_id": "a"}).await.unwrap(),
        Some(target.clone())
    );

    let e = c
        .find_one_and_update(filter.clone(), doc! {"$push": {"more": "c".repeat(30_000)}})
        .await
        .expect_err("findAndModify passes the cap");
    assert_cap_error(&failure(&e).expect("server error"), "grow-tenant");
    assert_eq!(c.find_one(doc! {"_id": "a"}).await.unwrap(), Some(target));

    // Growth that fits is fine.
    let r = c
        .update_one(filter, doc! {"$set": {"small": "s".repeat(100)}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
}

// ---------------------------------------------------------------------------
// The config database
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_config_database_describes_sharded_collections() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = start().await;
    shard_hashed(&srv, "cfg.c", "k").await;
    coll(&srv, "cfg", "c")
        .insert_many((0..100).map(|i| doc! {"_id": i, "k": i}))
        .await
        .unwrap();
    coll(&srv, "cfg", "plain")
        .insert_one(doc! {"x": 1})
        .await
        .unwrap();
    let uuid = list_uuid(&srv, "cfg", "c").await;
    assert!(
        matches!(&uuid, Bson::Binary(b) if b.bytes.len() == 16),
        "uuid {uuid:?}"
    );

    let entry = config_entry(&srv, "cfg.c")
        .await
        .expect("config.collections entry");
    assert_eq!(
        entry.get_document("key").ok(),
        Some(&doc! {"k": "hashed"}),
        "{entry}"
    );
    assert_eq!(entry.get("uuid"), Some(&uuid), "{entry}");
    assert_eq!(entry.get_bool("unique"), Ok(false), "{entry}");
    assert!(entry.get_object_id("lastmodEpoch").is_ok(), "{entry}");
    assert!(entry.get_datetime("lastmod").is_ok(), "{entry}");
    assert!(entry.get_timestamp("timestamp").is_ok(), "{entry}");
    assert_eq!(config_entry(&srv, "cfg.plain").await, None);

    let chunks = config_chunks(&srv.client, "cfg.c").await;
    assert_eq!(chunks.len(), PARTITIONS, "{chunks:?}");
    for chunk in &chunks {
        assert_eq!(chunk.doc.get("uuid"), Some(&uuid), "{:?}", chunk.doc);
        assert!(
            chunk.doc.get_timestamp("lastmod").is_ok(),
            "{:?}",
            chunk.doc
        );
    }
    let chunk_shards: BTreeSet<String> = chunks.iter().map(|c| c.shard.clone()).collect();
    assert_eq!(
        chunk_shards.len(),
        PARTITIONS,
        "one partition per chunk: {chunks:?}"
    );
    let stats = coll_stats(&srv, "cfg", "c").await;
    assert_eq!(
        shard_counts(&stats).into_keys().collect::<BTreeSet<_>>(),
        chunk_shards,
        "{stats}"
    );
    assert_eq!(num(&stats, "nchunks"), chunks.len() as i64);

    let shards: Vec<Document> = coll(&srv, "config", "shards")
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let shard_ids: BTreeSet<String> = shards
        .iter()
        .map(|s| {
            s.get_str("_id")
                .unwrap_or_else(|_| panic!("{s}"))
                .to_string()
        })
        .collect();
    assert!(chunk_shards.is_subset(&shard_ids), "{shards:?}");
    for s in &shards {
        assert!(s.get_str("host").is_ok_and(|h| h.contains(':')), "{s}");
        assert_eq!(num(s, "state"), 1, "{s}");
    }

    let db = coll(&srv, "config", "databases")
        .find_one(doc! {"_id": "cfg"})
        .await
        .unwrap()
        .expect("config.databases lists cfg");
    let primary = db.get_str("primary").unwrap_or_else(|_| panic!("{db}"));
    assert!(shard_ids.contains(primary), "{db}");
    assert_eq!(
        coll(&srv, "config", "chunks")
            .count_documents(doc! {"uuid": uuid})
            .await
            .unwrap(),
        PARTITIONS as u64
    );
}
