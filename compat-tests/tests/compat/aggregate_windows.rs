//! `$setWindowFields` and named time zones through the official driver.
//!
//! Every pipeline runs over an unsharded and an 8-partition sharded copy
//! of MongoDB's `cakeSales` documentation collection; both must give the
//! same, exact documents (the values MongoDB's documentation shows) and
//! the same error codes. On the sharded copy the sort by partition key and
//! `sortBy` runs on the partitions and the window computation after the
//! merge, so equal results show the split is sound.

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, DateTime, Document},
    expect_command_error,
    mongodb::Database,
    TestServer,
};
use futures::TryStreamExt;

const DB: &str = "windows";
const COLLECTIONS: [&str; 2] = ["plain", "sharded"];

fn date(s: &str) -> Bson {
    Bson::DateTime(DateTime::parse_rfc3339_str(s).expect("test date"))
}

fn cake_sales() -> Vec<Document> {
    vec![
        doc! {"_id": 0, "type": "chocolate", "orderDate": date("2020-05-18T14:10:30Z"),
        "state": "CA", "price": 13, "quantity": 120},
        doc! {"_id": 1, "type": "chocolate", "orderDate": date("2021-03-20T11:30:05Z"),
        "state": "WA", "price": 14, "quantity": 140},
        doc! {"_id": 2, "type": "vanilla", "orderDate": date("2021-01-11T06:31:15Z"),
        "state": "CA", "price": 12, "quantity": 145},
        doc! {"_id": 3, "type": "vanilla", "orderDate": date("2020-02-08T13:13:23Z"),
        "state": "WA", "price": 13, "quantity": 104},
        doc! {"_id": 4, "type": "strawberry", "orderDate": date("2019-05-18T16:09:01Z"),
        "state": "CA", "price": 41, "quantity": 162},
        doc! {"_id": 5, "type": "strawberry", "orderDate": date("2019-01-08T06:12:03Z"),
        "state": "WA", "price": 43, "quantity": 134},
    ]
}

/// A server with the cake sales in `plain` and in `sharded` (8 partitions
/// on a hashed `_id`).
async fn setup(extra: &[&str]) -> (TestServer, Database) {
    let srv = TestServer::start_with_args(extra).await;
    let db = srv.db(DB);
    let reply = srv
        .db("admin")
        .run_command(doc! {
            "shardCollection": format!("{DB}.sharded"),
            "key": {"_id": "hashed"},
            "numInitialChunks": 8,
        })
        .await
        .expect("shardCollection");
    assert_ok(&reply);
    for name in COLLECTIONS {
        db.collection::<Document>(name)
            .insert_many(cake_sales())
            .await
            .expect("insert");
    }
    (srv, db)
}

/// Runs `pipeline` on both copies; they must agree, and the result is
/// returned.
async fn both(db: &Database, pipeline: Vec<Document>) -> Vec<Document> {
    let mut results = Vec::new();
    for name in COLLECTIONS {
        let docs: Vec<Document> = db
            .collection::<Document>(name)
            .aggregate(pipeline.clone())
            .await
            .unwrap_or_else(|e| panic!("{name} {pipeline:?}: {e}"))
            .try_collect()
            .await
            .unwrap_or_else(|e| panic!("{name} {pipeline:?}: {e}"));
        results.push(docs);
    }
    assert_eq!(results[0], results[1], "unsharded and sharded differ");
    results.swap_remove(0)
}

/// `(_id, field)` of each document, in order.
fn column(docs: &[Document], field: &str) -> Vec<(i32, Bson)> {
    docs.iter()
        .map(|d| {
            (
                d.get_i32("_id").unwrap_or(-1),
                d.get(field).cloned().unwrap_or(Bson::Undefined),
            )
        })
        .collect()
}

fn swf(spec: Document) -> Vec<Document> {
    vec![doc! {"$setWindowFields": spec}]
}

#[tokio::test]
async fn cumulative_moving_and_range_windows() {
    let (_srv, db) = setup(&[]).await;
    let out = both(
        &db,
        swf(doc! {"partitionBy": "$state", "sortBy": {"orderDate": 1},
        "output": {"cumulativeQuantityForState": {"$sum": "$quantity",
            "window": {"documents": ["unbounded", "current"]}}}}),
    )
    .await;
    assert_eq!(
        column(&out, "cumulativeQuantityForState"),
        vec![
            (4, Bson::Int32(162)),
            (0, Bson::Int32(282)),
            (2, Bson::Int32(427)),
            (5, Bson::Int32(134)),
            (3, Bson::Int32(238)),
            (1, Bson::Int32(378)),
        ]
    );

    let out = both(
        &db,
        swf(
            doc! {"partitionBy": {"$year": "$orderDate"}, "sortBy": {"orderDate": 1},
            "output": {"averageQuantity": {"$avg": "$quantity",
                "window": {"documents": [-1, 0]}}}},
        ),
    )
    .await;
    assert_eq!(
        column(&out, "averageQuantity"),
        vec![
            (5, Bson::Double(134.0)),
            (4, Bson::Double(148.0)),
            (3, Bson::Double(104.0)),
            (0, Bson::Double(112.0)),
            (2, Bson::Double(145.0)),
            (1, Bson::Double(142.5)),
        ]
    );

    let out = both(
        &db,
        swf(doc! {"partitionBy": "$state", "sortBy": {"price": 1},
        "output": {"quantityFromSimilarOrders": {"$sum": "$quantity",
            "window": {"range": [-10, 10]}}}}),
    )
    .await;
    assert_eq!(
        column(&out, "quantityFromSimilarOrders"),
        vec![
            (2, Bson::Int32(265)),
            (0, Bson::Int32(265)),
            (4, Bson::Int32(162)),
            (3, Bson::Int32(244)),
            (1, Bson::Int32(244)),
            (5, Bson::Int32(134)),
        ]
    );
}

#[tokio::test]
async fn rank_shift_and_unbounded_accumulators() {
    let (_srv, db) = setup(&[]).await;
    let out = both(
        &db,
        swf(doc! {"partitionBy": "$state", "sortBy": {"quantity": -1},
        "output": {
            "rank": {"$rank": {}},
            "dense": {"$denseRank": {}},
            "number": {"$documentNumber": {}},
            "next": {"$shift": {"output": "$quantity", "by": 1, "default": "Not available"}},
            "maxInState": {"$max": "$quantity"},
            "types": {"$push": "$type", "window": {"documents": ["current", 1]}},
        }}),
    )
    .await;
    assert_eq!(
        column(&out, "rank"),
        vec![
            (4, Bson::Int32(1)),
            (2, Bson::Int32(2)),
            (0, Bson::Int32(3)),
            (1, Bson::Int32(1)),
            (5, Bson::Int32(2)),
            (3, Bson::Int32(3)),
        ]
    );
    assert_eq!(column(&out, "dense"), column(&out, "rank"));
    assert_eq!(column(&out, "number"), column(&out, "rank"));
    assert_eq!(
        column(&out, "next"),
        vec![
            (4, Bson::Int32(145)),
            (2, Bson::Int32(120)),
            (0, Bson::String("Not available".into())),
            (1, Bson::Int32(134)),
            (5, Bson::Int32(104)),
            (3, Bson::String("Not available".into())),
        ]
    );
    assert_eq!(
        column(&out, "maxInState")
            .into_iter()
            .map(|p| p.1)
            .collect::<Vec<_>>(),
        vec![
            Bson::Int32(162),
            Bson::Int32(162),
            Bson::Int32(162),
            Bson::Int32(140),
            Bson::Int32(140),
            Bson::Int32(140),
        ]
    );
    assert_eq!(
        out[0].get("types"),
        Some(&Bson::Array(vec!["strawberry".into(), "vanilla".into()]))
    );
    assert_eq!(
        out[2].get("types"),
        Some(&Bson::Array(vec!["chocolate".into()]))
    );
}

#[tokio::test]
async fn time_series_functions() {
    let (_srv, db) = setup(&[]).await;
    let out = both(
        &db,
        swf(doc! {"partitionBy": "$state", "sortBy": {"orderDate": 1},
        "output": {
            "ema": {"$expMovingAvg": {"input": "$price", "alpha": 0.5}},
            "perDay": {"$derivative": {"input": "$quantity", "unit": "day"},
                       "window": {"documents": [-1, 0]}},
            "locf": {"$locf": "$price"},
            "recent": {"$count": {}, "window": {"range": [-1, 0], "unit": "year"}},
        }}),
    )
    .await;
    // CA: 2019-05-18 (41, 162), 2020-05-18 (13, 120), 2021-01-11 (12, 145).
    assert_eq!(
        column(&out, "ema")[..3],
        [
            (4, Bson::Double(41.0)),
            (0, Bson::Double(27.0)),
            (2, Bson::Double(19.5)),
        ]
    );
    assert_eq!(out[0].get("perDay"), Some(&Bson::Null));
    assert_eq!(
        out[1].get("perDay"),
        Some(&Bson::Double(
            -42.0 / (366.0 * 86_400_000.0 - 7_111_000.0) * 86_400_000.0
        ))
    );
    assert_eq!(
        column(&out, "recent")[..3],
        [
            (4, Bson::Int32(1)),
            (0, Bson::Int32(2)),
            (2, Bson::Int32(2))
        ]
    );
    assert_eq!(out[1].get("locf"), Some(&Bson::Int32(13)));
}

#[tokio::test]
async fn errors_are_mongodbs_on_both_copies() {
    let (_srv, db) = setup(&[]).await;
    let cases: Vec<(Document, i32, &str)> = vec![
        (
            doc! {"sortBy": {"price": 1}, "output": {"x": {"$sum": 1, "window": {"documents": [1, 0]}}}},
            5339900,
            "Location5339900",
        ),
        (
            doc! {"output": {"x": {"$sum": 1, "window": {"documents": [-1, 0]}}}},
            5339901,
            "Location5339901",
        ),
        (
            doc! {"sortBy": {"price": 1, "_id": 1}, "output": {"x": {"$sum": 1, "window": {"range": [-1, 0]}}}},
            5339902,
            "Location5339902",
        ),
        (
            doc! {"output": {"x": {"$rank": {}}}},
            5371602,
            "Location5371602",
        ),
        (
            doc! {"output": {"x": {"$summ": "$price"}}},
            9,
            "FailedToParse",
        ),
        (
            doc! {"output": {"a": {"$sum": 1}, "a.b": {"$sum": 1}}},
            6307900,
            "Location6307900",
        ),
        (
            doc! {"sortBy": {"type": 1}, "output": {"x": {"$sum": 1, "window": {"range": [-1, 0]}}}},
            5429414,
            "Location5429414",
        ),
        (
            doc! {"sortBy": {"orderDate": 1}, "output": {"x": {"$sum": 1, "window": {"range": [-1, 0]}}}},
            5429413,
            "Location5429413",
        ),
        (doc! {"sortBy": {"price": 1}}, 40414, "Location40414"),
    ];
    for name in COLLECTIONS {
        for (spec, code, code_name) in &cases {
            expect_command_error(
                &db,
                doc! {"aggregate": name, "pipeline": swf(spec.clone()), "cursor": {}},
                *code,
                code_name,
            )
            .await;
        }
    }
}

#[tokio::test]
async fn window_cache_memory_limit() {
    let (_srv, db) = setup(&["--max-blocking-stage-bytes", "100000"]).await;
    let pad = "x".repeat(2000);
    let big: Vec<Document> = (100..200)
        .map(|i| doc! {"_id": i, "pad": pad.clone()})
        .collect();
    for name in COLLECTIONS {
        db.collection::<Document>(name)
            .insert_many(big.clone())
            .await
            .expect("insert");
    }
    // Without sortBy or partitionBy nothing sorts first: the window holds
    // the whole collection, and may not spill.
    let pipeline = swf(doc! {"output": {"n": {"$count": {}}}});
    for name in COLLECTIONS {
        expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": pipeline.clone(), "cursor": {}, "allowDiskUse": false},
            5643011,
            "Location5643011",
        )
        .await;
    }
    let mut counts = Vec::new();
    for name in COLLECTIONS {
        let docs: Vec<Document> = db
            .collection::<Document>(name)
            .aggregate(pipeline.clone())
            .allow_disk_use(true)
            .await
            .expect("aggregate")
            .try_collect()
            .await
            .expect("getMore");
        counts.push(
            docs.iter()
                .filter(|d| d.get("n") == Some(&Bson::Int32(106)))
                .count(),
        );
    }
    assert_eq!(counts, vec![106, 106]);
}

#[tokio::test]
async fn named_time_zones() {
    let (_srv, db) = setup(&[]).await;
    let out = both(
        &db,
        vec![
            doc! {"$match": {"_id": {"$in": [0, 1]}}},
            doc! {"$sort": {"_id": 1}},
            doc! {"$project": {
                "ny": {"$dateToString": {"date": "$orderDate", "format": "%Y-%m-%d %H:%M %z",
                                         "timezone": "America/New_York"}},
                "berlinHour": {"$hour": {"date": "$orderDate", "timezone": "Europe/Berlin"}},
                "day": {"$dateTrunc": {"date": "$orderDate", "unit": "day",
                                       "timezone": "America/New_York"}},
            }},
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            doc! {"_id": 0, "ny": "2020-05-18 10:10 -0400", "berlinHour": 16,
            "day": date("2020-05-18T04:00:00Z")},
            doc! {"_id": 1, "ny": "2021-03-20 07:30 -0400", "berlinHour": 12,
            "day": date("2021-03-20T04:00:00Z")},
        ]
    );
    for name in COLLECTIONS {
        expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": [
                {"$project": {"h": {"$hour": {"date": "$orderDate", "timezone": "Mars/Olympus"}}}}
            ], "cursor": {}},
            40485,
            "Location40485",
        )
        .await;
    }
}
