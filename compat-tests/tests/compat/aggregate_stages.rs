//! `$graphLookup`, `$densify`, `$fill`, `$rand` and `$sampleRate` through
//! the official driver.
//!
//! Every pipeline runs over an unsharded and an 8-partition sharded copy
//! of the same documents (MongoDB's documentation examples where it has
//! them, with integer `_id`s so results are exact); both must give the
//! same documents and the same error codes. `$graphLookup` also reads its
//! `from` collection unsharded and sharded on `connectToField`, so the
//! reads of each level are targeted by the values looked for. `$rand` and
//! `$sampleRate` are checked against bounds far outside chance (about 15
//! standard deviations).

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, DateTime, Document},
    expect_command_error, first_batch,
    mongodb::Database,
    TestServer,
};
use futures::TryStreamExt;

const DB: &str = "stages";

fn date(s: &str) -> Bson {
    Bson::DateTime(DateTime::parse_rfc3339_str(s).expect("test date"))
}

async fn shard(srv: &TestServer, coll: &str, key: &str) {
    let reply = srv
        .db("admin")
        .run_command(doc! {
            "shardCollection": format!("{DB}.{coll}"),
            "key": {key: "hashed"},
            "numInitialChunks": 8,
        })
        .await
        .expect("shardCollection");
    assert_ok(&reply);
}

/// `docs` into `<name>` (unsharded) and `<name>_sharded` (8 partitions on
/// a hashed `key`).
async fn both_copies(srv: &TestServer, name: &str, key: &str, docs: Vec<Document>) {
    shard(srv, &format!("{name}_sharded"), key).await;
    let db = srv.db(DB);
    for coll in [name.to_string(), format!("{name}_sharded")] {
        if !docs.is_empty() {
            db.collection::<Document>(&coll)
                .insert_many(docs.clone())
                .await
                .expect("insert");
        }
    }
}

async fn aggregate(db: &Database, coll: &str, pipeline: &[Document]) -> Vec<Document> {
    db.collection::<Document>(coll)
        .aggregate(pipeline.to_vec())
        .await
        .unwrap_or_else(|e| panic!("{coll} {pipeline:?}: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("{coll} {pipeline:?}: {e}"))
}

/// Runs `pipeline` over `<name>` and `<name>_sharded`; they must agree.
async fn both(db: &Database, name: &str, pipeline: Vec<Document>) -> Vec<Document> {
    let plain = aggregate(db, name, &pipeline).await;
    let sharded = aggregate(db, &format!("{name}_sharded"), &pipeline).await;
    assert_eq!(
        plain, sharded,
        "unsharded and sharded differ for {pipeline:?}"
    );
    plain
}

/// Asserts `pipeline` fails with `code` over both copies of `name`.
async fn fails(db: &Database, name: &str, pipeline: Vec<Document>, code: i32) {
    for coll in [name.to_string(), format!("{name}_sharded")] {
        expect_command_error(
            db,
            doc! {"aggregate": coll, "pipeline": pipeline.clone(), "cursor": {}},
            code,
            "",
        )
        .await;
    }
}

// ---------------------------------------------------------------------------
// $graphLookup

fn employees() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "name": "Dev"},
        doc! {"_id": 2, "name": "Eliot", "reportsTo": "Dev"},
        doc! {"_id": 3, "name": "Ron", "reportsTo": "Eliot"},
        doc! {"_id": 4, "name": "Andrew", "reportsTo": "Eliot"},
        doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"},
        doc! {"_id": 6, "name": "Dan", "reportsTo": "Andrew"},
    ]
}

fn airports() -> Vec<Document> {
    vec![
        doc! {"_id": 0, "airport": "JFK", "connects": ["BOS", "ORD"]},
        doc! {"_id": 1, "airport": "BOS", "connects": ["JFK", "PWM"]},
        doc! {"_id": 2, "airport": "ORD", "connects": ["JFK"]},
        doc! {"_id": 3, "airport": "PWM", "connects": ["BOS", "LHR"]},
        doc! {"_id": 4, "airport": "LHR", "connects": ["PWM"]},
    ]
}

fn travelers() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "name": "Dev", "nearestAirport": "JFK"},
        doc! {"_id": 2, "name": "Eliot", "nearestAirport": "JFK"},
        doc! {"_id": 3, "name": "Jeff", "nearestAirport": "BOS"},
    ]
}

fn people() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "name": "Tanya Jordan", "friends": ["Shirley Soto", "Terry Hawkins", "Carole Hale"], "hobbies": ["tennis", "unicycling", "golf"]},
        doc! {"_id": 2, "name": "Carole Hale", "friends": ["Joseph Dennis", "Tanya Jordan", "Terry Hawkins"], "hobbies": ["archery", "golf", "woodworking"]},
        doc! {"_id": 3, "name": "Terry Hawkins", "friends": ["Tanya Jordan", "Carole Hale", "Angelo Ward"], "hobbies": ["knitting", "frisbee"]},
        doc! {"_id": 4, "name": "Joseph Dennis", "friends": ["Angelo Ward", "Carole Hale"], "hobbies": ["tennis", "golf", "topiary"]},
        doc! {"_id": 5, "name": "Angelo Ward", "friends": ["Terry Hawkins", "Shirley Soto", "Joseph Dennis"], "hobbies": ["travel", "ceramics", "golf"]},
        doc! {"_id": 6, "name": "Shirley Soto", "friends": ["Angelo Ward", "Tanya Jordan", "Carole Hale"], "hobbies": ["frisbee", "set theory"]},
    ]
}

/// A server with the graph collections: each source unsharded and sharded
/// on `_id`, each foreign collection unsharded and sharded on its
/// `connectToField`.
async fn graph_setup(extra: &[&str]) -> (TestServer, Database) {
    let srv = TestServer::start_with_args(extra).await;
    both_copies(&srv, "employees", "_id", employees()).await;
    both_copies(&srv, "employees_by_name", "name", employees()).await;
    both_copies(&srv, "airports", "airport", airports()).await;
    both_copies(&srv, "travelers", "_id", travelers()).await;
    both_copies(&srv, "people", "name", people()).await;
    let db = srv.db(DB);
    (srv, db)
}

/// Runs `make(from)` over both copies of `source` for both copies of the
/// foreign collection `from`: all four must agree.
async fn graph_both(
    db: &Database,
    source: &str,
    from: &str,
    make: impl Fn(&str) -> Vec<Document>,
) -> Vec<Document> {
    let plain = both(db, source, make(from)).await;
    let sharded = both(db, source, make(&format!("{from}_sharded"))).await;
    assert_eq!(
        plain, sharded,
        "unsharded and sharded foreign collections differ"
    );
    plain
}

#[tokio::test]
async fn graph_lookup_within_one_collection() {
    let (_srv, db) = graph_setup(&[]).await;
    let out = graph_both(&db, "employees", "employees_by_name", |from| {
        vec![
            doc! {"$graphLookup": {"from": from, "startWith": "$reportsTo",
            "connectFromField": "reportsTo", "connectToField": "name",
            "as": "reportingHierarchy"}},
            doc! {"$sort": {"_id": 1}},
        ]
    })
    .await;
    let e = employees();
    let with = |i: usize, chain: &[usize]| {
        let mut d = e[i].clone();
        d.insert(
            "reportingHierarchy",
            chain
                .iter()
                .map(|&j| Bson::Document(e[j].clone()))
                .collect::<Vec<_>>(),
        );
        d
    };
    // The documents found, by the level found at: the manager first.
    assert_eq!(
        out,
        vec![
            with(0, &[]),
            with(1, &[0]),
            with(2, &[1, 0]),
            with(3, &[1, 0]),
            with(4, &[2, 1, 0]),
            with(5, &[3, 1, 0]),
        ]
    );
}

#[tokio::test]
async fn graph_lookup_across_collections_with_depth() {
    let (_srv, db) = graph_setup(&[]).await;
    let out = graph_both(&db, "travelers", "airports", |from| {
        vec![
            doc! {"$graphLookup": {"from": from, "startWith": "$nearestAirport",
            "connectFromField": "connects", "connectToField": "airport", "maxDepth": 2,
            "depthField": "numConnections", "as": "destinations"}},
            doc! {"$sort": {"_id": 1}},
        ]
    })
    .await;
    let a = airports();
    let at = |i: usize, depth: i64| {
        let mut d = a[i].clone();
        d.insert("numConnections", depth);
        Bson::Document(d)
    };
    let from_jfk = vec![at(0, 0), at(1, 1), at(2, 1), at(3, 2)];
    let t = travelers();
    let mut want = Vec::new();
    for (i, destinations) in [
        from_jfk.clone(),
        from_jfk,
        vec![at(1, 0), at(0, 1), at(3, 1), at(2, 2), at(4, 2)],
    ]
    .into_iter()
    .enumerate()
    {
        let mut d = t[i].clone();
        d.insert("destinations", destinations);
        want.push(d);
    }
    assert_eq!(out, want);
}

#[tokio::test]
async fn graph_lookup_restricted_by_a_filter() {
    let (_srv, db) = graph_setup(&[]).await;
    let out = graph_both(&db, "people", "people", |from| {
        vec![
            doc! {"$match": {"name": "Tanya Jordan"}},
            doc! {"$graphLookup": {"from": from, "startWith": "$friends",
            "connectFromField": "friends", "connectToField": "name", "as": "golfers",
            "restrictSearchWithMatch": {"hobbies": "golf"}}},
            doc! {"$project": {"name": 1, "friends": 1,
            "connections who play golf": "$golfers.name"}},
        ]
    })
    .await;
    assert_eq!(
        out,
        vec![doc! {"_id": 1, "name": "Tanya Jordan",
        "friends": ["Shirley Soto", "Terry Hawkins", "Carole Hale"],
        "connections who play golf": ["Carole Hale", "Tanya Jordan", "Joseph Dennis", "Angelo Ward"]}]
    );
}

#[tokio::test]
async fn graph_lookup_in_facet_and_lookup_and_explain() {
    let (_srv, db) = graph_setup(&[]).await;
    let hierarchy = |from: &str| {
        doc! {"$graphLookup": {"from": from, "startWith": "$reportsTo",
        "connectFromField": "reportsTo", "connectToField": "name", "as": "up"}}
    };
    let names = |d: &Document| -> Vec<String> {
        d.get_array("up")
            .expect("up")
            .iter()
            .map(|x| {
                x.as_document()
                    .unwrap()
                    .get_str("name")
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let out = graph_both(&db, "employees", "employees_by_name", |from| {
        vec![doc! {"$facet": {"asya": [{"$match": {"_id": 5}}, hierarchy(from)]}}]
    })
    .await;
    let asya = out[0].get_array("asya").unwrap()[0].as_document().unwrap();
    assert_eq!(names(asya), ["Ron", "Eliot", "Dev"]);
    let out = graph_both(&db, "travelers", "employees_by_name", |from| {
        vec![
            doc! {"$match": {"_id": 1}},
            doc! {"$lookup": {"from": "employees", "pipeline": [
            {"$match": {"_id": 6}}, hierarchy(from)], "as": "dan"}},
        ]
    })
    .await;
    let dan = out[0].get_array("dan").unwrap()[0].as_document().unwrap();
    assert_eq!(names(dan), ["Andrew", "Eliot", "Dev"]);

    // On a sharded source the search runs at the router, after the merge.
    let reply = db
        .run_command(doc! {"aggregate": "employees_sharded", "pipeline": [
        {"$match": {"_id": {"$gte": 2}}}, hierarchy("employees_by_name_sharded")],
        "explain": true})
        .await
        .expect("explain");
    let split = reply.get_document("splitPipeline").expect("splitPipeline");
    let merger = split.get_array("mergerPart").expect("mergerPart");
    let graph = merger
        .iter()
        .filter_map(Bson::as_document)
        .find_map(|d| d.get_document("$graphLookup").ok())
        .unwrap_or_else(|| panic!("no $graphLookup in the merger part: {reply}"));
    assert_eq!(graph.get_str("connectToField").unwrap(), "name");
    assert_eq!(graph.get_str("startWith").unwrap(), "$reportsTo");
}

#[tokio::test]
async fn graph_lookup_errors_are_mongodbs() {
    let (_srv, db) = graph_setup(&["--max-blocking-stage-bytes", "20000"]).await;
    let base = doc! {"from": "employees", "startWith": "$reportsTo",
    "connectFromField": "reportsTo", "connectToField": "name", "as": "h"};
    let with = |k: &str, v: Bson| {
        let mut d = base.clone();
        d.insert(k, v);
        vec![doc! {"$graphLookup": d}]
    };
    let without = |k: &str| {
        let mut d = base.clone();
        d.remove(k);
        vec![doc! {"$graphLookup": d}]
    };
    let cases: Vec<(Vec<Document>, i32)> = vec![
        (vec![doc! {"$graphLookup": 1}], 9),
        (without("from"), 9),
        (with("from", Bson::Int32(1)), 9),
        (without("as"), 40105),
        (without("startWith"), 40105),
        (without("connectToField"), 40105),
        (with("connectFromField", Bson::Int32(1)), 40103),
        (with("bogus", Bson::Int32(1)), 40104),
        (with("maxDepth", Bson::String("x".into())), 40100),
        (with("maxDepth", Bson::Int32(-1)), 40101),
        (with("maxDepth", Bson::Double(0.5)), 40102),
        (with("restrictSearchWithMatch", Bson::Int32(1)), 40185),
        (with("as", Bson::String("$h".into())), 16410),
    ];
    for (pipeline, code) in cases {
        fails(&db, "employees", pipeline, code).await;
    }
    // A search holding more than the memory limit: 40099.
    let chain: Vec<Document> = (0..200)
        .map(|i| doc! {"_id": i, "next": i + 1, "pad": "x".repeat(200)})
        .collect();
    let srv_db = db.clone();
    srv_db
        .collection::<Document>("chain")
        .insert_many(chain)
        .await
        .expect("insert");
    fails(
        &db,
        "employees",
        vec![
            doc! {"$limit": 1},
            doc! {"$graphLookup": {"from": "chain", "startWith": 0,
            "connectFromField": "next", "connectToField": "_id", "as": "all"}},
        ],
        40099,
    )
    .await;
}

// ---------------------------------------------------------------------------
// $densify

fn weather() -> Vec<Document> {
    ["00", "04", "08", "12"]
        .iter()
        .zip([12, 11, 11, 12])
        .enumerate()
        .map(|(i, (h, t))| {
            doc! {"_id": i as i32 + 1, "metadata": {"sensorId": 5578, "type": "temperature"},
            "timestamp": date(&format!("2021-05-18T{h}:00:00Z")), "temp": t}
        })
        .collect()
}

fn coffee() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "altitude": 600, "variety": "Arabica Typica", "score": 68.3},
        doc! {"_id": 2, "altitude": 750, "variety": "Arabica Typica", "score": 69.5},
        doc! {"_id": 3, "altitude": 950, "variety": "Arabica Typica", "score": 70.5},
        doc! {"_id": 4, "altitude": 1250, "variety": "Gesha", "score": 88.15},
        doc! {"_id": 5, "altitude": 1700, "variety": "Gesha", "score": 95.5, "price": 1029},
    ]
}

async fn densify_setup() -> (TestServer, Database) {
    let srv = TestServer::start().await;
    both_copies(&srv, "weather", "_id", weather()).await;
    both_copies(&srv, "coffee", "_id", coffee()).await;
    both_copies(&srv, "empty", "_id", Vec::new()).await;
    let db = srv.db(DB);
    (srv, db)
}

#[tokio::test]
async fn densify_time_series() {
    let (_srv, db) = densify_setup().await;
    let out = both(
        &db,
        "weather",
        vec![
            doc! {"$densify": {"field": "timestamp", "range": {"step": 1, "unit": "hour",
            "bounds": [date("2021-05-18T00:00:00Z"), date("2021-05-18T08:00:00Z")]}}},
        ],
    )
    .await;
    let w = weather();
    let gap = |h: &str| doc! {"timestamp": date(&format!("2021-05-18T{h}:00:00Z"))};
    assert_eq!(
        out,
        vec![
            w[0].clone(),
            gap("01"),
            gap("02"),
            gap("03"),
            w[1].clone(),
            gap("05"),
            gap("06"),
            gap("07"),
            w[2].clone(),
            w[3].clone(),
        ]
    );
}

#[tokio::test]
async fn densify_partitions_full_and_partition_ranges() {
    let (_srv, db) = densify_setup().await;
    let c = coffee();
    let gen = |variety: &str, altitude: i32| doc! {"variety": variety, "altitude": altitude};
    let at = "Arabica Typica";
    let out = both(
        &db,
        "coffee",
        vec![
            doc! {"$densify": {"field": "altitude", "partitionByFields": ["variety"],
            "range": {"bounds": "full", "step": 200}}},
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            c[0].clone(),
            c[1].clone(),
            gen(at, 800),
            c[2].clone(),
            gen("Gesha", 600),
            gen("Gesha", 800),
            gen("Gesha", 1000),
            gen("Gesha", 1200),
            c[3].clone(),
            gen("Gesha", 1400),
            gen("Gesha", 1600),
            c[4].clone(),
            gen(at, 1000),
            gen(at, 1200),
            gen(at, 1400),
            gen(at, 1600),
        ]
    );
    let out = both(
        &db,
        "coffee",
        vec![
            doc! {"$densify": {"field": "altitude", "partitionByFields": ["variety"],
            "range": {"bounds": "partition", "step": 200}}},
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            c[0].clone(),
            c[1].clone(),
            gen(at, 800),
            c[2].clone(),
            c[3].clone(),
            gen("Gesha", 1450),
            gen("Gesha", 1650),
            c[4].clone(),
        ]
    );
    // Explicit numeric bounds; an empty collection still gets the range.
    let out = both(
        &db,
        "empty",
        vec![doc! {"$densify": {"field": "x", "range": {"step": 5, "bounds": [0, 15]}}}],
    )
    .await;
    assert_eq!(out, vec![doc! {"x": 0}, doc! {"x": 5}, doc! {"x": 10}]);
}

#[tokio::test]
async fn densify_errors_and_explain() {
    let (_srv, db) = densify_setup().await;
    let range = |r: Document| vec![doc! {"$densify": {"field": "altitude", "range": r}}];
    let cases: Vec<(Vec<Document>, i32)> = vec![
        (vec![doc! {"$densify": 1}], 9),
        (
            vec![doc! {"$densify": {"range": {"step": 1, "bounds": "full"}}}],
            40414,
        ),
        (range(doc! {"step": 1}), 40414),
        (range(doc! {"step": "1", "bounds": "full"}), 14),
        (range(doc! {"step": 1, "bounds": "full", "x": 1}), 40415),
        (range(doc! {"step": -1, "bounds": "full"}), 5733401),
        (range(doc! {"step": 1, "bounds": [2, 1]}), 5733402),
        (range(doc! {"step": 1, "bounds": [1]}), 5733403),
        (range(doc! {"step": 1, "bounds": 1}), 5733404),
        (
            range(doc! {"step": 1, "bounds": [1, date("2021-01-01T00:00:00Z")]}),
            5733406,
        ),
        (range(doc! {"step": 1, "bounds": "partition"}), 5733408),
        (
            range(doc! {"step": 1, "bounds": [0, 9], "unit": "hour"}),
            5733409,
        ),
        (
            range(doc! {"step": 1,
            "bounds": [date("2021-01-01T00:00:00Z"), date("2021-01-02T00:00:00Z")]}),
            5733410,
        ),
        (range(doc! {"step": 1.0, "bounds": [0, 9]}), 5876900),
        (range(doc! {"step": 1, "bounds": ["a", "b"]}), 5946800),
        (range(doc! {"step": 1, "bounds": "everything"}), 5946802),
        (
            range(doc! {"step": 1.5, "bounds": "full", "unit": "hour"}),
            6586400,
        ),
        // Found while running: numbers with a date unit, and the reverse.
        (
            range(doc! {"step": 1, "bounds": "full", "unit": "hour"}),
            6053600,
        ),
        (
            vec![doc! {"$densify": {"field": "variety",
            "range": {"step": 1, "bounds": "full"}}}],
            5733201,
        ),
        (
            vec![
                doc! {"$densify": {"field": "altitude",
                "range": {"step": 1, "bounds": [0, 1_000_000]}}},
                doc! {"$count": "n"},
            ],
            5897900,
        ),
    ];
    for (pipeline, code) in cases {
        fails(&db, "coffee", pipeline, code).await;
    }
    // As a mongos splits it: the sort on the partitions, the
    // densification after the merge.
    let reply = db
        .run_command(doc! {"aggregate": "coffee_sharded", "pipeline": [
        {"$densify": {"field": "altitude", "partitionByFields": ["variety"],
        "range": {"bounds": "partition", "step": 200}}}], "explain": true})
        .await
        .expect("explain");
    let split = reply.get_document("splitPipeline").expect("splitPipeline");
    let shards = split.get_array("shardsPart").expect("shardsPart");
    assert!(
        shards.iter().any(|s| s
            .as_document()
            .is_some_and(|d| d
                .get_document("$sort")
                .is_ok_and(
                    |s| s.get_document("sortKey").ok() == Some(&doc! {"variety": 1, "altitude": 1})
                ))),
        "{reply}"
    );
    let merger = split.get_array("mergerPart").expect("mergerPart");
    assert!(
        merger.iter().any(|s| s
            .as_document()
            .is_some_and(|d| d.contains_key("$_internalDensify"))),
        "{reply}"
    );
    // Unsharded, explain shows the stage as written.
    let reply = db
        .run_command(doc! {"aggregate": "coffee", "pipeline": [
        {"$densify": {"field": "altitude", "range": {"bounds": "full", "step": 200}}}],
        "explain": true})
        .await
        .expect("explain");
    assert!(format!("{reply}").contains("$densify"), "{reply}");
}

// ---------------------------------------------------------------------------
// $fill

async fn fill_setup() -> (TestServer, Database) {
    let srv = TestServer::start().await;
    both_copies(
        &srv,
        "dailySales",
        "_id",
        vec![
            doc! {"_id": 1, "date": date("2022-02-02T00:00:00Z"), "bootsSold": 10,
            "sandalsSold": 20, "sneakersSold": 12},
            doc! {"_id": 2, "date": date("2022-02-03T00:00:00Z"), "bootsSold": 7,
            "sneakersSold": 18},
            doc! {"_id": 3, "date": date("2022-02-04T00:00:00Z"), "sneakersSold": 5},
        ],
    )
    .await;
    let prices = [Some(500), None, Some(515), None, None, Some(485)];
    let stock = prices
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut d = doc! {"_id": i as i32 + 1,
            "time": date(&format!("2021-03-08T{:02}:00:00Z", 9 + i))};
            if let Some(p) = p {
                d.insert("price", *p);
            }
            d
        })
        .collect();
    both_copies(&srv, "stock", "_id", stock).await;
    let scores = [Some(90), Some(92), None, None, Some(85), None];
    let reviews = scores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut d = doc! {"_id": i as i32 + 1,
            "date": date(&format!("2021-03-{:02}T00:00:00Z", 8 + i))};
            if let Some(s) = s {
                d.insert("score", *s);
            }
            d
        })
        .collect();
    both_copies(&srv, "restaurantReviews", "_id", reviews).await;
    let multiple = [
        ("Joe's Pizza", Some(90)),
        ("Sally's Deli", Some(75)),
        ("Joe's Pizza", Some(92)),
        ("Sally's Deli", None),
        ("Joe's Pizza", None),
        ("Sally's Deli", Some(68)),
        ("Joe's Pizza", Some(93)),
        ("Sally's Deli", None),
    ];
    let multiple = multiple
        .iter()
        .enumerate()
        .map(|(i, (r, s))| {
            let mut d = doc! {"_id": i as i32 + 1,
            "date": date(&format!("2021-03-{:02}T00:00:00Z", 8 + i / 2)), "restaurant": *r};
            if let Some(s) = s {
                d.insert("score", *s);
            }
            d
        })
        .collect();
    both_copies(&srv, "restaurantReviewsMultiple", "_id", multiple).await;
    let db = srv.db(DB);
    (srv, db)
}

#[tokio::test]
async fn fill_with_values_linear_and_locf() {
    let (_srv, db) = fill_setup().await;
    let out = both(
        &db,
        "dailySales",
        vec![
            doc! {"$fill": {"output": {"bootsSold": {"value": 0}, "sandalsSold": {"value": 0},
            "sneakersSold": {"value": 0}}}},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            doc! {"_id": 1, "date": date("2022-02-02T00:00:00Z"), "bootsSold": 10,
            "sandalsSold": 20, "sneakersSold": 12},
            doc! {"_id": 2, "date": date("2022-02-03T00:00:00Z"), "bootsSold": 7,
            "sneakersSold": 18, "sandalsSold": 0},
            doc! {"_id": 3, "date": date("2022-02-04T00:00:00Z"), "sneakersSold": 5,
            "bootsSold": 0, "sandalsSold": 0},
        ]
    );
    let out = both(
        &db,
        "stock",
        vec![doc! {"$fill": {"sortBy": {"time": 1}, "output": {"price": {"method": "linear"}}}}],
    )
    .await;
    let prices: Vec<Bson> = out
        .iter()
        .map(|d| d.get("price").unwrap().clone())
        .collect();
    assert_eq!(
        prices,
        vec![
            Bson::Int32(500),
            Bson::Double(507.5),
            Bson::Int32(515),
            Bson::Double(505.0),
            Bson::Double(495.0),
            Bson::Int32(485),
        ]
    );
    assert_eq!(
        out[1],
        doc! {"_id": 2, "time": date("2021-03-08T10:00:00Z"), "price": 507.5}
    );
    let out = both(
        &db,
        "restaurantReviews",
        vec![doc! {"$fill": {"sortBy": {"date": 1}, "output": {"score": {"method": "locf"}}}}],
    )
    .await;
    let scores: Vec<(i32, i32)> = out
        .iter()
        .map(|d| (d.get_i32("_id").unwrap(), d.get_i32("score").unwrap()))
        .collect();
    assert_eq!(
        scores,
        [(1, 90), (2, 92), (3, 92), (4, 92), (5, 85), (6, 85)]
    );
}

#[tokio::test]
async fn fill_per_partition() {
    let (_srv, db) = fill_setup().await;
    for partition in [
        doc! {"partitionBy": {"restaurant": "$restaurant"}},
        doc! {"partitionByFields": ["restaurant"]},
    ] {
        let mut spec = doc! {"sortBy": {"date": 1}, "output": {"score": {"method": "locf"}}};
        spec.extend(partition);
        let out = both(&db, "restaurantReviewsMultiple", vec![doc! {"$fill": spec}]).await;
        let got: Vec<(i32, &str, i32)> = out
            .iter()
            .map(|d| {
                (
                    d.get_i32("_id").unwrap(),
                    d.get_str("restaurant").unwrap(),
                    d.get_i32("score").unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (1, "Joe's Pizza", 90),
                (3, "Joe's Pizza", 92),
                (5, "Joe's Pizza", 92),
                (7, "Joe's Pizza", 93),
                (2, "Sally's Deli", 75),
                (4, "Sally's Deli", 75),
                (6, "Sally's Deli", 68),
                (8, "Sally's Deli", 68),
            ]
        );
        // A filled field comes last, as $setWindowFields adds it.
        assert_eq!(
            out[2],
            doc! {"_id": 5, "date": date("2021-03-10T00:00:00Z"), "restaurant": "Joe's Pizza",
            "score": 92}
        );
    }
    // Linear fill with repeated sort values within a partition: 6050106.
    fails(
        &db,
        "restaurantReviewsMultiple",
        vec![doc! {"$fill": {"sortBy": {"date": 1}, "output": {"score": {"method": "linear"}}}}],
        6050106,
    )
    .await;
}

#[tokio::test]
async fn fill_errors_are_mongodbs() {
    let (_srv, db) = fill_setup().await;
    let cases: Vec<(Bson, i32)> = vec![
        (Bson::String("test".into()), 9),
        (doc! {}.into(), 40414),
        (doc! {"output": {}}.into(), 6050203),
        (
            doc! {"output": {"price": {"method": "random"}}}.into(),
            6050202,
        ),
        (doc! {"output": {"price": "random"}}.into(), 6050200),
        (
            doc! {"output": {"price": {"method": "locf", "second": "locf"}}}.into(),
            40415,
        ),
        (
            doc! {"output": {"price": {"method": "locf", "value": 1}}}.into(),
            6050201,
        ),
        (
            doc! {"output": {"price": {"method": "locf"}}, "partitionBy": {"t": "$t"},
            "partitionByFields": ["t"]}
            .into(),
            6050204,
        ),
        (
            doc! {"output": {"price": {"method": "linear"}}, "partitionBy": {"t": "$t"}}.into(),
            605001,
        ),
        (
            doc! {"output": {"price": {"method": "locf"}}, "sortBy": 1}.into(),
            14,
        ),
    ];
    for (spec, code) in cases {
        fails(&db, "stock", vec![doc! {"$fill": spec}], code).await;
    }
}

// ---------------------------------------------------------------------------
// $rand and $sampleRate

const RANDOM_DOCS: i32 = 10_000;

async fn random_setup() -> (TestServer, Database) {
    let srv = TestServer::start().await;
    let docs: Vec<Document> = (0..RANDOM_DOCS).map(|i| doc! {"_id": i}).collect();
    both_copies(&srv, "many", "_id", docs).await;
    let db = srv.db(DB);
    (srv, db)
}

#[tokio::test]
async fn rand_is_uniform_on_both_copies() {
    let (_srv, db) = random_setup().await;
    for coll in ["many", "many_sharded"] {
        let out = aggregate(
            &db,
            coll,
            &[doc! {"$project": {"r": {"$rand": {}}, "s": {"$multiply": [{"$rand": []}, 10]}}}],
        )
        .await;
        assert_eq!(out.len(), RANDOM_DOCS as usize);
        let mut distinct = std::collections::HashSet::new();
        let mut sum = 0.0;
        for d in &out {
            let r = d.get_f64("r").expect("a double");
            assert!((0.0..1.0).contains(&r), "{r}");
            assert!((0.0..10.0).contains(&d.get_f64("s").unwrap()));
            sum += r;
            distinct.insert(r.to_bits());
        }
        let mean = sum / f64::from(RANDOM_DOCS);
        // The mean of 10,000 uniform draws: 0.5 with a deviation of 0.003.
        assert!((0.45..0.55).contains(&mean), "{coll}: mean {mean}");
        assert!(
            distinct.len() > 9_990,
            "{coll}: {} distinct",
            distinct.len()
        );
        // In $expr: about half the documents.
        let n = aggregate(
            &db,
            coll,
            &[
                doc! {"$match": {"$expr": {"$lt": [{"$rand": {}}, 0.5]}}},
                doc! {"$count": "n"},
            ],
        )
        .await;
        let n = n[0].get_i32("n").unwrap();
        assert!((4_000..6_000).contains(&n), "{coll}: {n}");
    }
    fails(
        &db,
        "many",
        vec![doc! {"$project": {"r": {"$rand": {"x": 1}}}}],
        3040501,
    )
    .await;
    fails(
        &db,
        "many",
        vec![doc! {"$project": {"r": {"$rand": [1]}}}],
        3040501,
    )
    .await;
    fails(
        &db,
        "many",
        vec![doc! {"$project": {"r": {"$rand": 1}}}],
        10065,
    )
    .await;
    // Collection validators refuse $rand (and $sampleRate, which is one).
    for validator in [
        doc! {"$expr": {"$lt": [{"$rand": {}}, 0.5]}},
        doc! {"$sampleRate": 0.5},
    ] {
        expect_command_error(
            &db,
            doc! {"create": "validated", "validator": validator},
            3040500,
            "Location3040500",
        )
        .await;
    }
}

#[tokio::test]
async fn sample_rate_keeps_its_share() {
    let (_srv, db) = random_setup().await;
    let count = |rate: Bson| vec![doc! {"$match": {"$sampleRate": rate}}, doc! {"$count": "n"}];
    for coll in ["many", "many_sharded"] {
        let out = aggregate(&db, coll, &count(Bson::Double(0.5))).await;
        let n = out[0].get_i32("n").unwrap();
        // Binomial(10,000, 0.5): 5,000 with a deviation of 50.
        assert!((4_000..6_000).contains(&n), "{coll}: {n}");
        let out = aggregate(&db, coll, &count(Bson::Double(0.1))).await;
        let n = out[0].get_i32("n").unwrap();
        assert!((600..1_400).contains(&n), "{coll}: {n}");
        assert!(aggregate(&db, coll, &count(Bson::Int32(0)))
            .await
            .is_empty());
        let out = aggregate(&db, coll, &count(Bson::Int32(1))).await;
        assert_eq!(out[0].get_i32("n").unwrap(), RANDOM_DOCS);
        // find takes it too.
        let reply = db
            .run_command(doc! {"find": coll, "filter": {"$sampleRate": 0.5},
            "batchSize": RANDOM_DOCS})
            .await
            .expect("find");
        let n = first_batch(&reply).len();
        assert!((4_000..6_000).contains(&n), "{coll}: find {n}");
    }
    for bad in [
        Bson::Double(1.5),
        Bson::Double(-0.5),
        Bson::Double(f64::NAN),
        Bson::String("0.5".into()),
    ] {
        fails(&db, "many", vec![doc! {"$match": {"$sampleRate": bad}}], 2).await;
    }
    fails(
        &db,
        "many",
        vec![doc! {"$match": {"a": {"$elemMatch": {"$sampleRate": 0.5}}}}],
        2,
    )
    .await;
}

// ---------------------------------------------------------------------------
// explain

#[tokio::test]
async fn explain_shows_every_new_stage() {
    let (srv, db) = graph_setup(&[]).await;
    both_copies(&srv, "coffee", "_id", coffee()).await;
    let pipelines: Vec<(&str, Vec<Document>, &str)> = vec![
        (
            "employees",
            vec![doc! {"$graphLookup": {"from": "employees_by_name_sharded",
            "startWith": "$reportsTo", "connectFromField": "reportsTo",
            "connectToField": "name", "as": "h"}}],
            "$graphLookup",
        ),
        (
            "coffee",
            vec![
                doc! {"$densify": {"field": "altitude", "partitionByFields": ["variety"],
                "range": {"bounds": "full", "step": 200}}},
            ],
            "$densify",
        ),
        (
            "coffee",
            vec![doc! {"$fill": {"sortBy": {"altitude": 1},
            "output": {"price": {"method": "locf"}, "score": {"value": 0}}}}],
            "$fill",
        ),
        (
            "coffee",
            vec![
                doc! {"$match": {"$sampleRate": 0.5}},
                doc! {"$project": {"r": {"$rand": {}}}},
            ],
            "$sampleRate",
        ),
    ];
    for (source, pipeline, shown) in pipelines {
        for coll in [source.to_string(), format!("{source}_sharded")] {
            // As an aggregate option and as the explain command.
            for cmd in [
                doc! {"aggregate": coll.clone(), "pipeline": pipeline.clone(), "explain": true},
                doc! {"explain": {"aggregate": coll.clone(), "pipeline": pipeline.clone(),
                "cursor": {}}},
            ] {
                let reply = db
                    .run_command(cmd.clone())
                    .await
                    .unwrap_or_else(|e| panic!("{cmd}: {e}"));
                assert_ok(&reply);
                let text = format!("{reply}");
                let expected = if coll.ends_with("_sharded") && shown == "$densify" {
                    "$_internalDensify"
                } else {
                    shown
                };
                assert!(text.contains(expected), "{cmd}: {reply}");
            }
        }
    }
}
