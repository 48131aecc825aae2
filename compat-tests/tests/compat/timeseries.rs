//! Time-series and clustered collections through the official driver, as
//! a MongoDB 7.0 user sees them: `create` with `timeseries` (and
//! MongoDB's errors for malformed options), `listCollections` and
//! `listIndexes`; measurements checked for their time field; queries and
//! a daily rollup over an unsharded and an 8-partition sharded copy
//! (sharded on the meta field, created by `shardCollection` with its
//! `timeseries` option) giving identical, exact answers; MongoDB 7.0's
//! update rules; deletes; `expireAfterSeconds` and its `collMod`; and
//! clustered collections (`clusteredIndex`) with their TTL.
//!
//! The servers run with `--ttl-monitor-interval-secs 1`, so an expired
//! measurement goes within a second or two.

use std::time::Duration;

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, DateTime, Document},
    expect_command_error, first_batch,
    mongodb::{Collection, Database},
    num, TestServer,
};
use futures::TryStreamExt;

const DB: &str = "tsdb";

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

fn coll(db: &Database, name: &str) -> Collection<Document> {
    db.collection::<Document>(name)
}

async fn start() -> TestServer {
    TestServer::start_with_args(&["--ttl-monitor-interval-secs", "1"]).await
}

fn date(s: &str) -> Bson {
    Bson::DateTime(DateTime::parse_rfc3339_str(s).expect("test date"))
}

/// MongoDB's documentation data set for time-series collections.
fn weather() -> Vec<Document> {
    let readings = [
        (5578, "2021-05-18T00:00:00Z", 12),
        (5578, "2021-05-18T04:00:00Z", 11),
        (5578, "2021-05-18T08:00:00Z", 11),
        (5578, "2021-05-18T12:00:00Z", 12),
        (5578, "2021-05-18T16:00:00Z", 16),
        (5578, "2021-05-18T20:00:00Z", 15),
        (5578, "2021-05-19T00:00:00Z", 13),
        (5578, "2021-05-19T04:00:00Z", 12),
        (5578, "2021-05-19T08:00:00Z", 11),
        (5578, "2021-05-19T12:00:00Z", 12),
        (5578, "2021-05-19T16:00:00Z", 17),
        (5578, "2021-05-19T20:00:00Z", 12),
        (7001, "2021-05-18T06:00:00Z", 20),
        (7001, "2021-05-19T06:00:00Z", 22),
    ];
    readings
        .iter()
        .enumerate()
        .map(|(i, (sensor, at, temp))| {
            doc! {
                "_id": i as i32,
                "metadata": {"sensorId": *sensor, "type": "temperature"},
                "timestamp": date(at),
                "temp": *temp,
            }
        })
        .collect()
}

const SERIES: [&str; 2] = ["weather", "weather_sharded"];

/// `weather` unsharded and `weather_sharded` created by `shardCollection`
/// with its `timeseries` option, on `metadata.sensorId`, 8 partitions.
async fn setup(srv: &TestServer) -> Database {
    let db = srv.db(DB);
    let spec = doc! {"timeField": "timestamp", "metaField": "metadata", "granularity": "hours"};
    assert_ok(&run(&db, doc! {"create": "weather", "timeseries": spec.clone()}).await);
    let reply = run(
        &srv.db("admin"),
        doc! {
            "shardCollection": format!("{DB}.weather_sharded"),
            "key": {"metadata.sensorId": "hashed"},
            "timeseries": spec,
            "numInitialChunks": 8,
        },
    )
    .await;
    assert_ok(&reply);
    for name in SERIES {
        coll(&db, name).insert_many(weather()).await.unwrap();
    }
    db
}

#[tokio::test]
async fn malformed_time_series_options_fail_as_in_mongodb() {
    let srv = start().await;
    let db = srv.db(DB);
    let cases = [
        (doc! {"metaField": "m"}, 40414),
        (doc! {"timeField": 5}, 14),
        (doc! {"timeField": "t", "other": 1}, 40415),
        (doc! {"timeField": "t", "metaField": "t"}, 72),
        (doc! {"timeField": "t", "metaField": "_id"}, 72),
        (doc! {"timeField": "t", "granularity": "days"}, 2),
        (doc! {"timeField": "t", "bucketMaxSpanSeconds": 100}, 72),
    ];
    for (spec, code) in cases {
        expect_command_error(&db, doc! {"create": "bad", "timeseries": spec}, code, "").await;
    }
    expect_command_error(
        &db,
        doc! {"create": "bad", "expireAfterSeconds": 10},
        72,
        "InvalidOptions",
    )
    .await;
    let reply = run(&db, doc! {"listCollections": 1}).await;
    assert!(first_batch(&reply).is_empty(), "{reply}");
}

#[tokio::test]
async fn time_series_collections_list_as_mongodb_lists_them() {
    let srv = start().await;
    let db = setup(&srv).await;
    let reply = run(
        &db,
        doc! {"listCollections": 1, "filter": {"name": "weather"}},
    )
    .await;
    let info = &first_batch(&reply)[0];
    assert_eq!(info.get_str("type"), Ok("timeseries"), "{info}");
    assert_eq!(
        info.get_document("options").unwrap(),
        &doc! {"timeseries": {
            "timeField": "timestamp",
            "metaField": "metadata",
            "granularity": "hours",
            "bucketMaxSpanSeconds": 2_592_000,
        }}
    );
    // The index MongoDB creates on the meta and time fields, and no `_id` index.
    let reply = run(&db, doc! {"listIndexes": "weather"}).await;
    let indexes = first_batch(&reply);
    assert_eq!(indexes.len(), 1, "{reply}");
    assert_eq!(indexes[0].get_str("name"), Ok("metadata_1_timestamp_1"));
    assert_eq!(
        indexes[0].get_document("key").unwrap(),
        &doc! {"metadata": 1, "timestamp": 1}
    );
}

#[tokio::test]
async fn measurements_need_a_date_in_the_time_field() {
    let srv = start().await;
    let db = setup(&srv).await;
    for name in SERIES {
        let c = coll(&db, name);
        let bad = vec![
            doc! {"_id": 100, "metadata": {"sensorId": 1}, "temp": 1},
            doc! {"_id": 101, "metadata": {"sensorId": 1}, "timestamp": "2021-05-18", "temp": 1},
            doc! {"_id": 102, "metadata": {"sensorId": 1}, "timestamp": date("2021-05-20T00:00:00Z"), "temp": 1},
        ];
        let reply = run(
            &db,
            doc! {"insert": name, "documents": bad, "ordered": false},
        )
        .await;
        assert_eq!(num(&reply, "n"), 1, "{reply}");
        let errors = reply.get_array("writeErrors").unwrap();
        assert_eq!(errors.len(), 2, "{reply}");
        for e in errors {
            let e = e.as_document().unwrap();
            assert_eq!(num(e, "code"), 2, "{e}");
            assert_eq!(
                e.get_str("errmsg"),
                Ok("'timestamp' must be present and contain a valid BSON UTC datetime value")
            );
        }
        assert_eq!(c.count_documents(doc! {}).await.unwrap(), 15);
    }
}

#[tokio::test]
async fn queries_and_a_rollup_give_the_same_exact_answers_sharded_or_not() {
    let srv = start().await;
    let db = setup(&srv).await;
    for name in SERIES {
        let c = coll(&db, name);
        // A time range for one sensor, newest first.
        let found: Vec<Document> = c
            .find(doc! {
                "metadata.sensorId": 5578,
                "timestamp": {"$gte": date("2021-05-19T08:00:00Z")},
            })
            .sort(doc! {"timestamp": -1})
            .projection(doc! {"_id": 0, "temp": 1})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(
            found,
            vec![
                doc! {"temp": 12},
                doc! {"temp": 17},
                doc! {"temp": 12},
                doc! {"temp": 11}
            ],
            "{name}"
        );
        // The daily rollup per sensor of MongoDB's documentation.
        let rollup: Vec<Document> = c
            .aggregate(vec![
                doc! {"$project": {
                    "date": {"$dateToParts": {"date": "$timestamp"}},
                    "sensor": "$metadata.sensorId",
                    "temp": 1,
                }},
                doc! {"$group": {
                    "_id": {"sensor": "$sensor", "date": {"year": "$date.year", "month": "$date.month", "day": "$date.day"}},
                    "avgTmp": {"$avg": "$temp"},
                    "maxTmp": {"$max": "$temp"},
                    "n": {"$sum": 1},
                }},
                doc! {"$sort": {"_id.sensor": 1, "_id.date.day": 1}},
            ])
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let day = |sensor: i32, d: i32, avg: f64, max: i32, n: i32| {
            doc! {
                "_id": {"sensor": sensor, "date": {"year": 2021, "month": 5, "day": d}},
                "avgTmp": avg, "maxTmp": max, "n": n,
            }
        };
        assert_eq!(
            rollup,
            vec![
                day(5578, 18, 12.833333333333334, 16, 6),
                day(5578, 19, 12.833333333333334, 17, 6),
                day(7001, 18, 20.0, 20, 1),
                day(7001, 19, 22.0, 22, 1),
            ],
            "{name}"
        );
    }
    // The sharded copy is spread over its partitions by sensor.
    let stats = run(&db, doc! {"collStats": "weather_sharded"}).await;
    assert_eq!(stats.get_bool("sharded"), Ok(true), "{stats}");
}

#[tokio::test]
async fn updates_follow_mongodb_7_rules_and_deletes_are_free() {
    let srv = start().await;
    let db = setup(&srv).await;
    for name in SERIES {
        let c = coll(&db, name);
        // Only a multi update of the meta field, filtering on it.
        let moved = c
            .update_many(
                doc! {"metadata.sensorId": 7001},
                doc! {"$set": {"metadata.type": "humidity"}},
            )
            .await
            .unwrap();
        assert_eq!(moved.modified_count, 2, "{name}");
        assert_eq!(
            c.count_documents(doc! {"metadata.type": "humidity"})
                .await
                .unwrap(),
            2
        );
        let refused = [
            doc! {"q": {"metadata.sensorId": 7001}, "u": {"$set": {"metadata.type": "x"}}},
            doc! {"q": {"temp": 12}, "u": {"$set": {"metadata.type": "x"}}, "multi": true},
            doc! {"q": {}, "u": {"$set": {"temp": 0}}, "multi": true},
            doc! {"q": {}, "u": {"$set": {"metadata.type": "x"}}, "multi": true, "upsert": true},
        ];
        for statement in refused {
            let shown = format!("{statement}");
            let reply = run(&db, doc! {"update": name, "updates": [statement]}).await;
            let errors = reply
                .get_array("writeErrors")
                .unwrap_or_else(|_| panic!("{shown}: {reply}"));
            let e = errors[0].as_document().unwrap();
            assert_eq!(num(e, "code"), 72, "{shown}: {e}");
        }
        expect_command_error(
            &db,
            doc! {"findAndModify": name, "query": {}, "update": {"$set": {"metadata.type": "x"}}},
            166,
            "CommandNotSupportedOnView",
        )
        .await;
        // Deletes take any filter, as in MongoDB 7.0.
        let gone = c.delete_many(doc! {"temp": {"$lt": 12}}).await.unwrap();
        assert_eq!(gone.deleted_count, 3, "{name}");
        c.delete_one(doc! {"temp": 17}).await.unwrap();
        assert_eq!(c.count_documents(doc! {}).await.unwrap(), 10, "{name}");
    }
}

#[tokio::test]
async fn expired_measurements_go_and_coll_mod_changes_the_expiry() {
    let srv = start().await;
    let db = srv.db(DB);
    let spec = doc! {"timeField": "t", "metaField": "m"};
    assert_ok(
        &run(
            &db,
            doc! {"create": "events", "timeseries": spec, "expireAfterSeconds": 3600},
        )
        .await,
    );
    let events = coll(&db, "events");
    let now = DateTime::now().timestamp_millis();
    let at = |secs_ago: i64| Bson::DateTime(DateTime::from_millis(now - secs_ago * 1000));
    events
        .insert_many(vec![
            doc! {"m": "a", "t": at(7200), "v": 1},
            doc! {"m": "a", "t": at(1800), "v": 2},
            doc! {"m": "b", "t": at(10), "v": 3},
        ])
        .await
        .unwrap();
    let remaining = |events: Collection<Document>| async move {
        let docs: Vec<Document> = events
            .find(doc! {})
            .sort(doc! {"v": 1})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        docs.iter().map(|d| num(d, "v")).collect::<Vec<_>>()
    };
    let mut left = Vec::new();
    for _ in 0..50 {
        left = remaining(events.clone()).await;
        if left == vec![2, 3] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, vec![2, 3]);

    assert_ok(&run(&db, doc! {"collMod": "events", "expireAfterSeconds": 600}).await);
    let reply = run(
        &db,
        doc! {"listCollections": 1, "filter": {"name": "events"}},
    )
    .await;
    let options = first_batch(&reply)[0]
        .get_document("options")
        .unwrap()
        .clone();
    assert_eq!(options.get_i64("expireAfterSeconds"), Ok(600), "{options}");
    for _ in 0..50 {
        left = remaining(events.clone()).await;
        if left == vec![3] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, vec![3]);
    assert_ok(&run(&db, doc! {"collMod": "events", "expireAfterSeconds": "off"}).await);
    assert_ok(
        &run(
            &db,
            doc! {"collMod": "events", "timeseries": {"granularity": "minutes"}},
        )
        .await,
    );
    let reply = run(
        &db,
        doc! {"listCollections": 1, "filter": {"name": "events"}},
    )
    .await;
    let options = first_batch(&reply)[0]
        .get_document("options")
        .unwrap()
        .clone();
    assert!(!options.contains_key("expireAfterSeconds"), "{options}");
    assert_eq!(
        options.get_document("timeseries").unwrap(),
        &doc! {"timeField": "t", "metaField": "m", "granularity": "minutes", "bucketMaxSpanSeconds": 86_400}
    );
    expect_command_error(
        &db,
        doc! {"collMod": "events", "timeseries": {"granularity": "seconds"}},
        72,
        "InvalidOptions",
    )
    .await;
    assert_ok(&run(&db, doc! {"create": "plain"}).await);
    expect_command_error(
        &db,
        doc! {"collMod": "plain", "expireAfterSeconds": 10},
        72,
        "InvalidOptions",
    )
    .await;
}

#[tokio::test]
async fn a_time_series_collection_is_sharded_on_its_meta_field() {
    let srv = start().await;
    let db = srv.db(DB);
    assert_ok(
        &run(
            &db,
            doc! {"create": "ts", "timeseries": {"timeField": "t", "metaField": "m"}},
        )
        .await,
    );
    expect_command_error(
        &srv.db("admin"),
        doc! {"shardCollection": format!("{DB}.ts"), "key": {"v": "hashed"}},
        2,
        "BadValue",
    )
    .await;
    assert_ok(
        &run(
            &srv.db("admin"),
            doc! {"shardCollection": format!("{DB}.ts"), "key": {"m.host": "hashed"}},
        )
        .await,
    );
}

#[tokio::test]
async fn clustered_collections_keep_id_order_and_expire_by_id() {
    let srv = start().await;
    let db = srv.db(DB);
    assert_ok(
        &run(
            &db,
            doc! {
                "create": "sessions",
                "clusteredIndex": {"key": {"_id": 1}, "unique": true, "name": "by_start"},
                "expireAfterSeconds": 3600,
            },
        )
        .await,
    );
    let reply = run(
        &db,
        doc! {"listCollections": 1, "filter": {"name": "sessions"}},
    )
    .await;
    let info = &first_batch(&reply)[0];
    assert_eq!(info.get_str("type"), Ok("collection"));
    assert_eq!(
        info.get_document("options").unwrap(),
        &doc! {
            "clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "by_start", "unique": true},
            "expireAfterSeconds": 3600_i64,
        }
    );
    let reply = run(&db, doc! {"listIndexes": "sessions"}).await;
    assert_eq!(
        first_batch(&reply),
        vec![
            doc! {"v": 2, "key": {"_id": 1}, "name": "by_start", "unique": true, "clustered": true}
        ]
    );
    let sessions = coll(&db, "sessions");
    let now = DateTime::now().timestamp_millis();
    let at = |secs_ago: i64| Bson::DateTime(DateTime::from_millis(now - secs_ago * 1000));
    sessions
        .insert_many(vec![
            doc! {"_id": at(100), "user": "new"},
            doc! {"_id": at(7200), "user": "old"},
        ])
        .await
        .unwrap();
    let mut users = Vec::new();
    for _ in 0..50 {
        let docs: Vec<Document> = sessions
            .find(doc! {})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        users = docs
            .iter()
            .map(|d| d.get_str("user").unwrap().to_string())
            .collect();
        if users == ["new"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(users, ["new"]);

    let bad = [
        (doc! {"key": {"_id": 1}, "unique": false}, 5979700),
        (doc! {"key": {"a": 1}, "unique": true}, 197),
        (doc! {"unique": true}, 40414),
    ];
    for (spec, code) in bad {
        expect_command_error(&db, doc! {"create": "c2", "clusteredIndex": spec}, code, "").await;
    }
    expect_command_error(
        &db,
        doc! {"create": "c3", "clusteredIndex": {"key": {"_id": 1}, "unique": true}, "capped": true, "size": 4096},
        72,
        "InvalidOptions",
    )
    .await;
}

#[tokio::test]
async fn time_series_collections_survive_a_restart() {
    let mut srv = start().await;
    setup(&srv).await;
    srv.restart().await;
    let db = srv.db(DB);
    for name in SERIES {
        let c = coll(&db, name);
        assert_eq!(c.count_documents(doc! {}).await.unwrap(), 14, "{name}");
        let reply = run(
            &db,
            doc! {"insert": name, "documents": [{"metadata": {"sensorId": 1}, "temp": 1}]},
        )
        .await;
        assert!(reply.get_array("writeErrors").is_ok(), "{name}: {reply}");
    }
}
