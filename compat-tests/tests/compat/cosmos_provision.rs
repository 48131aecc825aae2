//! Cosmos DB's extension commands (`customAction`) through the official
//! driver: creating, reading and updating databases and collections with
//! manual or autoscale throughput, a shard key given as a path string and
//! a whole index set, as Azure Cosmos DB for MongoDB documents them; the
//! errors it answers with; partitions split when provisioned throughput
//! needs more of them (10,000 RU/s each); and settings that survive a
//! restart.

use compat_tests::{
    assert_ok,
    bson::{doc, Document},
    config_chunks, expect_command_error, num, wire, TestServer,
};
use futures::TryStreamExt;

/// Runs `cmd` on database `db`; a command error fails the test.
async fn run(srv: &TestServer, db: &str, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    let reply = srv
        .db(db)
        .run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{db}: {shown}: {e}"));
    assert_ok(&reply);
    reply
}

async fn get_collection(srv: &TestServer, db: &str, coll: &str) -> Document {
    run(
        srv,
        db,
        doc! {"customAction": "GetCollection", "collection": coll},
    )
    .await
}

async fn get_database(srv: &TestServer, db: &str) -> Document {
    run(srv, db, doc! {"customAction": "GetDatabase"}).await
}

/// The reply without `ok` (and the driver's `$clusterTime` and the like).
fn fields(reply: &Document) -> Document {
    reply
        .iter()
        .filter(|(k, _)| *k != "ok" && !k.starts_with('$') && *k != "operationTime")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

async fn index_names(srv: &TestServer, db: &str, coll: &str) -> Vec<String> {
    let mut names: Vec<String> = srv
        .db(db)
        .collection::<Document>(coll)
        .list_index_names()
        .await
        .unwrap();
    names.sort();
    names
}

#[tokio::test]
async fn create_collection_with_manual_throughput_and_get_it() {
    let srv = TestServer::start().await;
    run(
        &srv,
        "shop",
        doc! {"customAction": "CreateCollection", "collection": "orders", "offerThroughput": 1000},
    )
    .await;
    let got = get_collection(&srv, "shop", "orders").await;
    assert_eq!(
        fields(&got),
        doc! {"database": "shop", "collection": "orders", "provisionedThroughput": 1000, "partitions": 1_i64}
    );
    // The collection is an ordinary one.
    let orders = srv.db("shop").collection::<Document>("orders");
    orders.insert_one(doc! {"_id": 1, "x": 1}).await.unwrap();
    assert_eq!(orders.count_documents(doc! {}).await.unwrap(), 1);

    run(
        &srv,
        "shop",
        doc! {"customAction": "UpdateCollection", "collection": "orders", "offerThroughput": 1200},
    )
    .await;
    let got = get_collection(&srv, "shop", "orders").await;
    assert_eq!(num(&got, "provisionedThroughput"), 1200, "{got}");
}

#[tokio::test]
async fn create_sharded_autoscale_collection_shows_its_settings() {
    let srv = TestServer::start().await;
    run(
        &srv,
        "shop",
        doc! {
            "customAction": "CreateCollection", "collection": "events", "shardKey": "a.b",
            "autoScaleSettings": {"maxThroughput": 20000},
        },
    )
    .await;
    let got = get_collection(&srv, "shop", "events").await;
    // Autoscale reports its floor (10% of the maximum) and its maximum;
    // 20,000 RU/s need two partitions.
    assert_eq!(
        fields(&got),
        doc! {
            "database": "shop", "collection": "events",
            "shardKeyDefinition": {"a.b": "hashed"},
            "provisionedThroughput": 2000,
            "autoScaleSettings": {"maxThroughput": 20000},
            "partitions": 2_i64,
        }
    );
    let events = srv.db("shop").collection::<Document>("events");
    events
        .insert_many((0..20).map(|i| doc! {"_id": i, "a": {"b": i % 5}}))
        .await
        .unwrap();
    assert_eq!(
        events.count_documents(doc! {"a.b": 3}).await.unwrap(),
        4,
        "documents route by the nested shard key"
    );
}

#[tokio::test]
async fn throughput_needs_partitions_of_ten_thousand_rus() {
    let srv = TestServer::start().await;
    run(
        &srv,
        "big",
        doc! {"customAction": "CreateCollection", "collection": "c", "shardKey": "k", "offerThroughput": 40000},
    )
    .await;
    let got = get_collection(&srv, "big", "c").await;
    assert!(num(&got, "partitions") >= 4, "{got}");
    assert!(config_chunks(&srv.client, "big.c").await.len() >= 4);

    // Raising the throughput of a collection with data splits it at once,
    // and every document stays where a read finds it. (10,000 RU/s is
    // one partition's most, and enough to load 300 documents at once
    // without being throttled.)
    run(
        &srv,
        "big",
        doc! {"customAction": "CreateCollection", "collection": "grow", "shardKey": "k", "offerThroughput": 10000},
    )
    .await;
    assert_eq!(
        num(&get_collection(&srv, "big", "grow").await, "partitions"),
        1
    );
    let grow = srv.db("big").collection::<Document>("grow");
    grow.insert_many((0..300).map(|i| doc! {"_id": i, "k": i % 30, "v": i}))
        .await
        .unwrap();
    run(
        &srv,
        "big",
        doc! {"customAction": "UpdateCollection", "collection": "grow", "offerThroughput": 55000},
    )
    .await;
    let got = get_collection(&srv, "big", "grow").await;
    assert_eq!(num(&got, "partitions"), 6, "{got}");
    assert_eq!(config_chunks(&srv.client, "big.grow").await.len(), 6);
    assert_eq!(grow.count_documents(doc! {}).await.unwrap(), 300);
    for k in 0..30 {
        let found: Vec<Document> = grow
            .find(doc! {"k": k})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(found.len(), 10, "key {k}");
    }
    // Lowering it merges nothing: partitions stay.
    run(
        &srv,
        "big",
        doc! {"customAction": "UpdateCollection", "collection": "grow", "offerThroughput": 400},
    )
    .await;
    assert_eq!(
        num(&get_collection(&srv, "big", "grow").await, "partitions"),
        6
    );
}

#[tokio::test]
async fn indexes_are_created_and_replaced_whole() {
    let srv = TestServer::start().await;
    run(
        &srv,
        "ix",
        doc! {
            "customAction": "CreateCollection", "collection": "c", "shardKey": "t",
            "indexes": [
                {"key": {"_id": 1}, "name": "_id_1"},
                {"key": {"a": 1}, "name": "a_1"},
                {"key": {"t": 1, "b": 1}, "name": "t_1_b_1", "unique": true},
            ],
        },
    )
    .await;
    assert_eq!(
        index_names(&srv, "ix", "c").await,
        ["_id_", "a_1", "t_1_b_1"]
    );
    let c = srv.db("ix").collection::<Document>("c");
    c.insert_one(doc! {"_id": 1, "t": "x", "b": 1})
        .await
        .unwrap();
    let dup = c.insert_one(doc! {"_id": 2, "t": "x", "b": 1}).await;
    compat_tests::expect_failure(dup, 11000, "DuplicateKey");

    // The listed set replaces the old one: a_1 and t_1_b_1 go, c_1 comes,
    // _id_ stays.
    run(
        &srv,
        "ix",
        doc! {
            "customAction": "UpdateCollection", "collection": "c",
            "indexes": [{"key": {"_id": 1}, "name": "_id_"}, {"key": {"c": 1}, "name": "c_1"}],
        },
    )
    .await;
    assert_eq!(index_names(&srv, "ix", "c").await, ["_id_", "c_1"]);
    c.insert_one(doc! {"_id": 2, "t": "x", "b": 1})
        .await
        .unwrap();

    // An index set without _id is refused, and changes nothing.
    let db = srv.db("ix");
    expect_command_error(
        &db,
        doc! {"customAction": "UpdateCollection", "collection": "c", "indexes": [{"key": {"d": 1}, "name": "d_1"}]},
        2,
        "BadValue",
    )
    .await;
    assert_eq!(index_names(&srv, "ix", "c").await, ["_id_", "c_1"]);
}

#[tokio::test]
async fn bad_requests_fail_as_cosmos_db_answers_them() {
    let srv = TestServer::start().await;
    let db = srv.db("bad");
    let below = expect_command_error(
        &db,
        doc! {"customAction": "CreateCollection", "collection": "c", "offerThroughput": 300},
        2,
        "BadValue",
    )
    .await;
    assert!(
        below.message.contains("between 400 and 1000000"),
        "{below:?}"
    );
    expect_command_error(
        &db,
        doc! {"customAction": "CreateCollection", "collection": "c", "offerThroughput": 450},
        2,
        "BadValue",
    )
    .await;
    let both = expect_command_error(
        &db,
        doc! {
            "customAction": "CreateCollection", "collection": "c", "shardKey": "k",
            "offerThroughput": 1000, "autoScaleSettings": {"maxThroughput": 4000},
        },
        2,
        "BadValue",
    )
    .await;
    assert!(both.message.contains("cannot both"), "{both:?}");
    expect_command_error(
        &db,
        doc! {"customAction": "CreateCollection", "collection": "c", "autoScaleSettings": {"maxThroughput": 500}},
        2,
        "BadValue",
    )
    .await;
    // Without a shard key a collection is one partition: 10,000 RU/s at most.
    expect_command_error(
        &db,
        doc! {"customAction": "CreateCollection", "collection": "c", "offerThroughput": 11000},
        2,
        "BadValue",
    )
    .await;
    // Nothing failed above created anything.
    expect_command_error(
        &db,
        doc! {"customAction": "GetCollection", "collection": "c"},
        26,
        "NamespaceNotFound",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"customAction": "UpdateCollection", "collection": "c", "offerThroughput": 400},
        26,
        "NamespaceNotFound",
    )
    .await;
    run(
        &srv,
        "bad",
        doc! {"customAction": "CreateCollection", "collection": "c", "offerThroughput": 10000},
    )
    .await;
    expect_command_error(
        &db,
        doc! {"customAction": "CreateCollection", "collection": "c"},
        48,
        "NamespaceExists",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"customAction": "UpdateCollection", "collection": "c", "offerThroughput": 20000},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(&db, doc! {"customAction": "Rename"}, 59, "CommandNotFound").await;

    // The raw reply carries Cosmos DB's errMsg beside MongoDB's errmsg.
    let mut conn = wire::RawConn::connect(srv.addr).await;
    let reply = conn
        .command(
            "bad",
            doc! {"customAction": "CreateCollection", "collection": "d", "offerThroughput": 100},
        )
        .await;
    assert_eq!(num(&reply, "ok"), 0, "{reply}");
    assert_eq!(num(&reply, "code"), 2, "{reply}");
    assert_eq!(reply.get_str("errMsg"), reply.get_str("errmsg"), "{reply}");
    assert!(reply.get_str("errMsg").is_ok(), "{reply}");
}

#[tokio::test]
async fn databases_share_their_throughput() {
    let srv = TestServer::start().await;
    run(&srv, "plain", doc! {"customAction": "CreateDatabase"}).await;
    assert_eq!(
        fields(&get_database(&srv, "plain").await),
        doc! {"database": "plain"}
    );

    run(
        &srv,
        "pool",
        doc! {"customAction": "CreateDatabase", "offerThroughput": 1000},
    )
    .await;
    assert_eq!(
        fields(&get_database(&srv, "pool").await),
        doc! {"database": "pool", "provisionedThroughput": 1000}
    );
    run(
        &srv,
        "pool",
        doc! {"customAction": "UpdateDatabase", "autoScaleSettings": {"maxThroughput": 20000}},
    )
    .await;
    assert_eq!(
        fields(&get_database(&srv, "pool").await),
        doc! {"database": "pool", "provisionedThroughput": 2000, "autoScaleSettings": {"maxThroughput": 20000}}
    );

    // A collection without throughput of its own shares the database's:
    // GetCollection shows none, and it cannot take its own later.
    run(
        &srv,
        "pool",
        doc! {"customAction": "CreateCollection", "collection": "shared"},
    )
    .await;
    assert_eq!(
        fields(&get_collection(&srv, "pool", "shared").await),
        doc! {"database": "pool", "collection": "shared", "partitions": 1_i64}
    );
    let db = srv.db("pool");
    expect_command_error(
        &db,
        doc! {"customAction": "UpdateCollection", "collection": "shared", "offerThroughput": 400},
        2,
        "BadValue",
    )
    .await;
    // One created with its own throughput keeps it.
    run(
        &srv,
        "pool",
        doc! {"customAction": "CreateCollection", "collection": "own", "offerThroughput": 500},
    )
    .await;
    assert_eq!(
        num(
            &get_collection(&srv, "pool", "own").await,
            "provisionedThroughput"
        ),
        500
    );

    expect_command_error(
        &db,
        doc! {"customAction": "CreateDatabase"},
        48,
        "NamespaceExists",
    )
    .await;
    expect_command_error(
        &srv.db("nowhere"),
        doc! {"customAction": "GetDatabase"},
        26,
        "NamespaceNotFound",
    )
    .await;
    expect_command_error(
        &srv.db("plain"),
        doc! {"customAction": "UpdateDatabase", "offerThroughput": 1000},
        2,
        "BadValue",
    )
    .await;
    // A database that exists through its collections has no throughput.
    srv.db("implicit")
        .collection::<Document>("c")
        .insert_one(doc! {"x": 1})
        .await
        .unwrap();
    assert_eq!(
        fields(&get_database(&srv, "implicit").await),
        doc! {"database": "implicit"}
    );

    // Dropping a database forgets its settings.
    db.drop().await.unwrap();
    expect_command_error(
        &db,
        doc! {"customAction": "GetDatabase"},
        26,
        "NamespaceNotFound",
    )
    .await;
}

#[tokio::test]
async fn throughput_settings_survive_a_restart() {
    let mut srv = TestServer::start().await;
    run(
        &srv,
        "keep",
        doc! {"customAction": "CreateDatabase", "autoScaleSettings": {"maxThroughput": 5000}},
    )
    .await;
    run(
        &srv,
        "keep",
        doc! {"customAction": "CreateCollection", "collection": "c", "shardKey": "k", "offerThroughput": 25000},
    )
    .await;
    run(
        &srv,
        "keep",
        doc! {"customAction": "CreateCollection", "collection": "u", "autoScaleSettings": {"maxThroughput": 4000}},
    )
    .await;
    let before = (
        fields(&get_database(&srv, "keep").await),
        fields(&get_collection(&srv, "keep", "c").await),
        fields(&get_collection(&srv, "keep", "u").await),
    );
    assert_eq!(num(&before.1, "partitions"), 3, "{}", before.1);
    srv.restart().await;
    let after = (
        fields(&get_database(&srv, "keep").await),
        fields(&get_collection(&srv, "keep", "c").await),
        fields(&get_collection(&srv, "keep", "u").await),
    );
    assert_eq!(before, after);
    assert_eq!(
        after.2,
        doc! {
            "database": "keep", "collection": "u",
            "provisionedThroughput": 400, "autoScaleSettings": {"maxThroughput": 4000},
            "partitions": 1_i64,
        }
    );
}

// ---------------------------------------------------------------------------
// --cosmos-strict
// ---------------------------------------------------------------------------

async fn strict() -> TestServer {
    TestServer::start_with_args(&["--cosmos-strict", "--ttl-monitor-interval-secs", "1"]).await
}

async fn sorted_ids(c: &compat_tests::mongodb::Collection<Document>, sort: Document) -> Vec<i32> {
    c.find(doc! {})
        .sort(sort)
        .await
        .unwrap()
        .try_collect::<Vec<Document>>()
        .await
        .unwrap()
        .iter()
        .map(|d| d.get_i32("_id").unwrap())
        .collect()
}

#[tokio::test]
async fn strict_sorts_need_an_index() {
    let srv = strict().await;
    let c = srv.db("s").collection::<Document>("c");
    c.insert_many((0..6).map(|i| doc! {"_id": i, "a": i % 3, "b": -i}))
        .await
        .unwrap();
    let single =
        compat_tests::expect_failure(c.find(doc! {}).sort(doc! {"a": 1}).await, 2, "BadValue");
    assert_eq!(
        single.message,
        "The index path corresponding to the specified order-by item is excluded."
    );
    // `_id` is always indexed.
    assert_eq!(sorted_ids(&c, doc! {"_id": -1}).await, [5, 4, 3, 2, 1, 0]);
    c.create_index(
        compat_tests::mongodb::IndexModel::builder()
            .keys(doc! {"a": 1})
            .build(),
    )
    .await
    .unwrap();
    assert_eq!(sorted_ids(&c, doc! {"a": -1, }).await.len(), 6);
    let multi = compat_tests::expect_failure(
        c.find(doc! {}).sort(doc! {"a": 1, "b": 1}).await,
        2,
        "BadValue",
    );
    assert_eq!(
        multi.message,
        "The order by query does not have a corresponding composite index that it can be served from."
    );
    c.create_index(
        compat_tests::mongodb::IndexModel::builder()
            .keys(doc! {"a": 1, "b": 1})
            .build(),
    )
    .await
    .unwrap();
    assert_eq!(
        sorted_ids(&c, doc! {"a": 1, "b": 1}).await,
        [3, 0, 4, 1, 5, 2]
    );
    assert_eq!(
        sorted_ids(&c, doc! {"a": -1, "b": -1}).await,
        [2, 5, 1, 4, 0, 3]
    );
    // The paths must come in the index's order.
    compat_tests::expect_failure(
        c.find(doc! {}).sort(doc! {"b": 1, "a": 1}).await,
        2,
        "BadValue",
    );

    // Without --cosmos-strict the same sort just runs, as on MongoDB.
    let lax = TestServer::start().await;
    let c = lax.db("s").collection::<Document>("c");
    c.insert_many((0..3).map(|i| doc! {"_id": i, "a": -i}))
        .await
        .unwrap();
    assert_eq!(sorted_ids(&c, doc! {"a": 1}).await, [2, 1, 0]);
}

#[tokio::test]
async fn strict_index_rules() {
    let srv = strict().await;
    let db = srv.db("s");
    run(
        &srv,
        "admin",
        doc! {"shardCollection": "s.sh", "key": {"k": "hashed"}},
    )
    .await;
    let create = |key: Document, options: Document| {
        let mut spec = doc! {"key": key, "name": format!("i{}", options.len())};
        spec.extend(options);
        doc! {"createIndexes": "sh", "indexes": [spec]}
    };
    // A unique index must start with the shard key ...
    expect_command_error(
        &db,
        create(doc! {"u": 1}, doc! {"unique": true}),
        67,
        "CannotCreateIndex",
    )
    .await;
    // ... and be created while the collection is empty.
    run(
        &srv,
        "s",
        create(doc! {"k": 1, "u": 1}, doc! {"unique": true}),
    )
    .await;
    db.collection::<Document>("sh")
        .insert_one(doc! {"_id": 1, "k": 1, "u": 1})
        .await
        .unwrap();
    let late = expect_command_error(
        &db,
        doc! {"createIndexes": "sh", "indexes": [{"key": {"k": 1, "v": 1}, "name": "kv", "unique": true}]},
        67,
        "CannotCreateIndex",
    )
    .await;
    assert!(late.message.contains("empty"), "{late:?}");
    // TTL only on _ts.
    expect_command_error(
        &db,
        doc! {"createIndexes": "sh", "indexes": [{"key": {"at": 1}, "name": "at", "expireAfterSeconds": 5}]},
        67,
        "CannotCreateIndex",
    )
    .await;
    // text and 2d indexes do not exist; compound indexes hold 8 fields.
    for key in [doc! {"t": "text"}, doc! {"p": "2d"}] {
        expect_command_error(
            &db,
            doc! {"createIndexes": "sh", "indexes": [{"key": key, "name": "x"}]},
            67,
            "CannotCreateIndex",
        )
        .await;
    }
    let nine: Document = (0..9).map(|i| (format!("f{i}"), 1.into())).collect();
    expect_command_error(
        &db,
        doc! {"createIndexes": "sh", "indexes": [{"key": nine, "name": "nine"}]},
        67,
        "CannotCreateIndex",
    )
    .await;
    let eight: Document = (0..8).map(|i| (format!("f{i}"), 1.into())).collect();
    run(
        &srv,
        "s",
        doc! {"createIndexes": "sh", "indexes": [{"key": eight, "name": "eight"}]},
    )
    .await;
}

#[tokio::test]
async fn strict_documents_carry_ts_and_expire_by_it() {
    let srv = strict().await;
    let c = srv.db("s").collection::<Document>("ttl");
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    c.insert_one(doc! {"_id": 1, "_ts": "ignored"})
        .await
        .unwrap();
    let got = c.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    let ts = got
        .get_i64("_ts")
        .unwrap_or_else(|_| panic!("no int64 _ts: {got}"));
    assert!((before..before + 5).contains(&ts), "{got}");
    c.update_one(doc! {"_id": 1}, doc! {"$set": {"x": 1}})
        .await
        .unwrap();
    let got = c.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert!(got.get_i64("_ts").unwrap() >= ts, "{got}");
    assert_eq!(got.get_i32("x"), Ok(1));

    // A TTL index on _ts deletes documents not written for that long.
    run(
        &srv,
        "s",
        doc! {"createIndexes": "ttl", "indexes": [{"key": {"_ts": 1}, "name": "ts", "expireAfterSeconds": 1}]},
    )
    .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while c.count_documents(doc! {}).await.unwrap() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "document never expired"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn strict_documents_are_at_most_two_megabytes() {
    let srv = strict().await;
    let c = srv.db("s").collection::<Document>("big");
    let big = doc! {"_id": 1, "s": "x".repeat(3 << 20)};
    let e =
        compat_tests::expect_failure(c.insert_one(big.clone()).await, 10334, "BSONObjectTooLarge");
    assert!(e.message.contains("Request size is too large"), "{e:?}");
    c.insert_one(doc! {"_id": 2, "s": "x".repeat(1 << 20)})
        .await
        .unwrap();
    // Growing past the limit by an update is refused too.
    compat_tests::expect_failure(
        c.update_one(doc! {"_id": 2}, doc! {"$set": {"t": "y".repeat(2 << 20)}})
            .await,
        10334,
        "BSONObjectTooLarge",
    );

    let roomy = TestServer::start_with_args(&["--cosmos-strict", "--cosmos-16mb-documents"]).await;
    let c = roomy.db("s").collection::<Document>("big");
    c.insert_one(big).await.unwrap();
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);
}
