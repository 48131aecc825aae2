//! Geospatial queries through the driver: `2dsphere` and `2d` indexes,
//! `$geoWithin`, `$geoIntersects`, `$near`, `$nearSphere` and the
//! `$geoNear` stage, each run on an unsharded collection and on a copy
//! sharded over 8 partitions (on another field), whose results must be
//! the same documents in the same order; invalid geometry and missing
//! indexes fail with MongoDB's codes; explain shows the geo index.

use compat_tests::{
    bson::{doc, Bson, Document},
    expect_command_error, expect_failure, num, TestServer,
};
use futures::TryStreamExt;

/// The two copies every query runs on.
const COPIES: [&str; 2] = ["plain", "sharded"];

/// Stores along the equator, 0.01° (about 1113 m) apart: `_id` i at
/// longitude i/100; `pos` is a legacy pair for the `2d` index.
fn stores(n: i32) -> Vec<Document> {
    (0..n)
        .map(|i| {
            doc! {
                "_id": i,
                "k": i % 7,
                "kind": if i % 2 == 0 { "cafe" } else { "shop" },
                "location": {"type": "Point", "coordinates": [f64::from(i) / 100.0, 0.0]},
                "pos": [f64::from(i), f64::from(i % 5)],
            }
        })
        .collect()
}

/// Areas and roads for `$geoWithin`/`$geoIntersects` on other shapes.
fn shapes() -> Vec<Document> {
    vec![
        doc! {"_id": 100, "k": 1, "location": {"type": "Polygon", "coordinates":
        [[[10.0, 10.0], [11.0, 10.0], [11.0, 11.0], [10.0, 11.0], [10.0, 10.0]]]}},
        doc! {"_id": 101, "k": 2, "location": {"type": "LineString", "coordinates":
        [[10.2, 9.0], [10.2, 12.0]]}},
        doc! {"_id": 102, "k": 3, "location": {"type": "MultiPoint", "coordinates":
        [[10.5, 10.5], [20.0, 20.0]]}},
        doc! {"_id": 103, "k": 4, "location": {"type": "GeometryCollection", "geometries": [
        {"type": "Point", "coordinates": [10.6, 10.6]},
        {"type": "LineString", "coordinates": [[10.6, 10.6], [10.7, 10.7]]}]}},
        doc! {"_id": 104, "k": 5, "location": [10.4, 10.4]},
        doc! {"_id": 105, "k": 6, "location": {"type": "Point", "coordinates": [9.95, 9.95]}},
    ]
}

/// A server with both copies of `docs`, each with `indexes`.
async fn setup(docs: Vec<Document>, indexes: &[Document]) -> TestServer {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    let db = srv.db("g");
    let reply = srv
        .db("admin")
        .run_command(doc! {"shardCollection": "g.sharded", "key": {"k": "hashed"}})
        .await
        .unwrap();
    assert_eq!(num(&reply, "ok"), 1);
    for name in COPIES {
        if !indexes.is_empty() {
            let specs: Vec<Document> = indexes.iter().map(|k| doc! {"key": k.clone(), "name": k.keys().next().cloned().unwrap_or_default()}).collect();
            db.run_command(doc! {"createIndexes": name, "indexes": specs})
                .await
                .unwrap();
        }
        db.collection::<Document>(name)
            .insert_many(docs.clone())
            .await
            .unwrap();
    }
    srv
}

/// The `_id`s a find returns on each copy; both must agree.
/// Near queries come in distance order, the others in no set order:
/// those are compared sorted.
async fn ids(
    srv: &TestServer,
    filter: Document,
    limit: Option<i64>,
    skip: Option<u64>,
) -> Vec<i32> {
    let ordered = filter.to_string().contains("$near");
    let mut seen: Option<Vec<i32>> = None;
    for name in COPIES {
        let coll = srv.db("g").collection::<Document>(name);
        let mut find = coll.find(filter.clone());
        if let Some(l) = limit {
            find = find.limit(l);
        }
        if let Some(s) = skip {
            find = find.skip(s);
        }
        let docs: Vec<Document> = find.await.unwrap().try_collect().await.unwrap();
        let mut got: Vec<i32> = docs.iter().map(|d| d.get_i32("_id").unwrap()).collect();
        if !ordered {
            got.sort_unstable();
        }
        if let Some(prev) = &seen {
            assert_eq!(&got, prev, "{name} differs for {filter}");
        }
        seen = Some(got);
    }
    seen.unwrap_or_default()
}

/// An aggregation's results on each copy; both must agree.
async fn aggregate(srv: &TestServer, pipeline: Vec<Document>) -> Vec<Document> {
    let mut seen: Option<Vec<Document>> = None;
    for name in COPIES {
        let coll = srv.db("g").collection::<Document>(name);
        let got: Vec<Document> = coll
            .aggregate(pipeline.clone())
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        if let Some(prev) = &seen {
            assert_eq!(&got, prev, "{name} differs");
        }
        seen = Some(got);
    }
    seen.unwrap_or_default()
}

fn point(x: f64, y: f64) -> Document {
    doc! {"type": "Point", "coordinates": [x, y]}
}

#[tokio::test]
async fn near_returns_nearest_first_within_bounds() {
    let srv = setup(stores(40), &[doc! {"location": "2dsphere"}]).await;
    let near = |max: Option<f64>, min: Option<f64>, at: f64| {
        let mut n = doc! {"$geometry": point(at, 0.0)};
        if let Some(m) = max {
            n.insert("$maxDistance", m);
        }
        if let Some(m) = min {
            n.insert("$minDistance", m);
        }
        doc! {"location": {"$near": n}}
    };
    assert_eq!(
        ids(&srv, near(Some(5000.0), None, 0.0), None, None).await,
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        ids(&srv, near(Some(5000.0), Some(2000.0), 0.0), None, None).await,
        vec![2, 3, 4]
    );
    assert_eq!(
        ids(&srv, near(None, None, 0.104), Some(3), None).await,
        vec![10, 11, 9]
    );
    assert_eq!(
        ids(&srv, near(None, None, 0.104), Some(2), Some(2)).await,
        vec![9, 12]
    );
    // `$nearSphere` with GeoJSON measures in metres too; other conditions
    // apply as well.
    let filter = doc! {"location": {"$nearSphere": {"$geometry": point(0.3, 0.0), "$maxDistance": 2500.0}}, "kind": "cafe"};
    assert_eq!(ids(&srv, filter, None, None).await, vec![30, 28, 32]);
    // Whole collection, nearest first.
    let all = ids(&srv, near(None, None, 0.395), None, None).await;
    assert_eq!(all.len(), 40);
    assert_eq!(&all[..4], &[39, 38, 37, 36][..]);
}

#[tokio::test]
async fn legacy_pairs_near_on_a_2d_index() {
    let srv = setup(stores(20), &[doc! {"pos": "2d"}]).await;
    // In the plane: [i, i % 5] from [3, 0].
    let got = ids(
        &srv,
        doc! {"pos": {"$near": [3.0, 0.0], "$maxDistance": 2.5}},
        None,
        None,
    )
    .await;
    assert_eq!(got, vec![5, 1, 2]);
    // `$nearSphere` on legacy pairs measures in radians.
    let got = ids(
        &srv,
        doc! {"pos": {"$nearSphere": [10.0, 0.0], "$maxDistance": 0.03}},
        None,
        None,
    )
    .await;
    assert_eq!(got, vec![10, 11]);
    let got = ids(
        &srv,
        doc! {"pos": {"$geoWithin": {"$box": [[0.0, 0.0], [4.0, 2.0]]}}},
        None,
        None,
    )
    .await;
    assert_eq!(got, vec![0, 1, 2]);
    let got = ids(
        &srv,
        doc! {"pos": {"$geoWithin": {"$center": [[10.0, 0.0], 1.5]}}},
        None,
        None,
    )
    .await;
    assert_eq!(got, vec![10, 11]);
    let got = ids(&srv, doc! {"pos": {"$geoWithin": {"$polygon": [[4.5, 3.5], [9.5, 3.5], [9.5, 4.5], [4.5, 4.5]]}}}, None, None).await;
    assert_eq!(got, vec![9]);
    let got = ids(
        &srv,
        doc! {"pos": {"$geoWithin": {"$centerSphere": [[15.0, 0.0], 0.02]}}},
        None,
        None,
    )
    .await;
    assert_eq!(got, vec![15]);
}

/// `$geoWithin` and `$geoIntersects` give the same answer through the
/// index as without one.
#[tokio::test]
async fn within_and_intersects_with_and_without_index() {
    for indexes in [vec![doc! {"location": "2dsphere"}], vec![]] {
        let srv = setup(shapes(), &indexes).await;
        let square = doc! {"$geometry": {"type": "Polygon", "coordinates":
        [[[9.9, 9.9], [11.1, 9.9], [11.1, 11.1], [9.9, 11.1], [9.9, 9.9]],
         [[9.92, 9.92], [9.98, 9.92], [9.98, 9.98], [9.92, 9.98], [9.92, 9.92]]]}};
        // The hole holds 105; 101 and 102 reach outside.
        let got = ids(&srv, doc! {"location": {"$geoWithin": square}}, None, None).await;
        assert_eq!(got, vec![100, 103, 104], "indexes {indexes:?}");
        let multi = doc! {"$geometry": {"type": "MultiPolygon", "coordinates": [
        [[[10.35, 10.35], [10.45, 10.35], [10.45, 10.45], [10.35, 10.45], [10.35, 10.35]]],
        [[[9.9, 9.9], [10.0, 9.9], [10.0, 10.0], [9.9, 10.0], [9.9, 9.9]]]]}};
        let got = ids(&srv, doc! {"location": {"$geoWithin": multi}}, None, None).await;
        assert_eq!(got, vec![104, 105]);
        let road =
            doc! {"$geometry": {"type": "LineString", "coordinates": [[9.0, 10.5], [10.55, 10.5]]}};
        let got = ids(
            &srv,
            doc! {"location": {"$geoIntersects": road}},
            None,
            None,
        )
        .await;
        // The road is a great circle, north of the parallel it starts
        // on: 102's point (10.5, 10.5) lies about 13 m south of it.
        assert_eq!(got, vec![100, 101]);
        let avenue =
            doc! {"$geometry": {"type": "LineString", "coordinates": [[10.5, 9.0], [10.5, 10.55]]}};
        let got = ids(
            &srv,
            doc! {"location": {"$geoIntersects": avenue}},
            None,
            None,
        )
        .await;
        // A meridian is one: it passes through 102's point.
        assert_eq!(got, vec![100, 102]);
        let spot = doc! {"$geometry": point(10.6, 10.6)};
        let got = ids(
            &srv,
            doc! {"location": {"$geoIntersects": spot}},
            None,
            None,
        )
        .await;
        assert_eq!(got, vec![100, 103]);
        let cap = doc! {"$centerSphere": [[9.95, 9.95], 0.0005]};
        let got = ids(&srv, doc! {"location": {"$geoWithin": cap}}, None, None).await;
        assert_eq!(got, vec![105]);
    }
}

/// A long polygon edge is a great circle, as in MongoDB: the edge from
/// (90, 60) to (0, 60) bulges towards the pole (to about 67.8° at
/// longitude 45), so a point at latitude 63 is inside and one at 70 is
/// not, with or without the index.
#[tokio::test]
async fn long_polygon_edges_follow_great_circles() {
    let places = vec![
        doc! {"_id": 1, "k": 1, "location": point(45.0, 63.0)},
        doc! {"_id": 2, "k": 2, "location": point(45.0, 70.0)},
        doc! {"_id": 3, "k": 3, "location": point(45.0, 30.0)},
        doc! {"_id": 4, "k": 4, "location": point(95.0, 30.0)},
    ];
    for indexes in [vec![doc! {"location": "2dsphere"}], vec![]] {
        let srv = setup(places.clone(), &indexes).await;
        let area = doc! {"$geometry": {"type": "Polygon", "coordinates":
        [[[0.0, 0.0], [90.0, 0.0], [90.0, 60.0], [0.0, 60.0], [0.0, 0.0]]]}};
        let got = ids(&srv, doc! {"location": {"$geoWithin": area}}, None, None).await;
        assert_eq!(got, vec![1, 3], "indexes {indexes:?}");
    }
}

#[tokio::test]
async fn geo_near_stage_annotates_and_orders() {
    let srv = setup(stores(40), &[doc! {"location": "2dsphere", "kind": 1}]).await;
    let out = aggregate(
        &srv,
        vec![
            doc! {"$geoNear": {
                "near": point(0.0, 0.0),
                "distanceField": "dist.m",
                "includeLocs": "at",
                "distanceMultiplier": 0.001,
                "maxDistance": 4000.0,
                "query": {"kind": "cafe"},
                "spherical": true,
            }},
            doc! {"$project": {"dist": 1, "at": 1}},
        ],
    )
    .await;
    let ids: Vec<i32> = out.iter().map(|d| d.get_i32("_id").unwrap()).collect();
    assert_eq!(ids, vec![0, 2]);
    let km = out[1].get_document("dist").unwrap().get_f64("m").unwrap();
    assert!((km - 2.2264).abs() < 0.001, "{km}");
    assert_eq!(out[1].get_document("at").unwrap(), &point(0.02, 0.0));
    // With `key` and `minDistance`, then `$limit` after it.
    let out = aggregate(
        &srv,
        vec![
            doc! {"$geoNear": {"near": point(0.1001, 0.0), "distanceField": "d", "key": "location", "minDistance": 1500.0}},
            doc! {"$limit": 3},
            doc! {"$project": {"_id": 1}},
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![doc! {"_id": 12}, doc! {"_id": 8}, doc! {"_id": 13}]
    );
}

#[tokio::test]
async fn geo_near_stage_errors() {
    let srv = setup(stores(5), &[]).await;
    let db = srv.db("g");
    let stage = doc! {"$geoNear": {"near": point(0.0, 0.0), "distanceField": "d"}};
    let agg =
        |pipeline: Vec<Document>| doc! {"aggregate": "plain", "pipeline": pipeline, "cursor": {}};
    expect_command_error(&db, agg(vec![stage.clone()]), 27, "IndexNotFound").await;
    expect_command_error(
        &db,
        agg(vec![doc! {"$match": {}}, stage.clone()]),
        40602,
        "",
    )
    .await;
    expect_command_error(
        &db,
        agg(vec![doc! {"$geoNear": {"near": point(0.0, 0.0)}}]),
        16606,
        "",
    )
    .await;
    expect_command_error(
        &db,
        agg(vec![
            doc! {"$match": {"location": {"$near": {"$geometry": point(0.0, 0.0)}}}},
        ]),
        5626500,
        "",
    )
    .await;
    // countDocuments is an aggregation: refused the same way.
    let r = db
        .collection::<Document>("plain")
        .count_documents(doc! {"location": {"$near": {"$geometry": point(0.0, 0.0)}}})
        .await;
    expect_failure(r, 5626500, "");
}

#[tokio::test]
async fn near_needs_a_geo_index_and_geometry_is_checked() {
    let srv = setup(stores(3), &[]).await;
    let db = srv.db("g");
    for name in COPIES {
        expect_command_error(
            &db,
            doc! {"find": name, "filter": {"location": {"$near": {"$geometry": point(0.0, 0.0)}}}},
            291,
            "NoQueryExecutionPlans",
        )
        .await;
    }
    let coll = db.collection::<Document>("plain");
    db.run_command(doc! {"createIndexes": "plain", "indexes": [{"key": {"location": "2dsphere"}, "name": "location_2dsphere"}]})
        .await
        .unwrap();
    for bad in [
        doc! {"location": point(200.0, 0.0)},
        doc! {"location": {"type": "Polygon", "coordinates": [[[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]]}},
        doc! {"location": {"type": "Point", "coordinates": ["a", 1]}},
        doc! {"location": "nowhere"},
    ] {
        let f = expect_failure(coll.insert_one(bad.clone()).await, 16755, "Location16755");
        assert!(f.message.starts_with("Can't extract geo keys"), "{f:?}");
    }
    // Documents without the field are fine (and not in the index).
    coll.insert_one(doc! {"_id": "no location"}).await.unwrap();
    // An index over invalid data cannot be built.
    db.collection::<Document>("other")
        .insert_one(doc! {"location": [500.0, 1.0]})
        .await
        .unwrap();
    expect_command_error(
        &db,
        doc! {"createIndexes": "other", "indexes": [{"key": {"location": "2dsphere"}, "name": "l"}]},
        16755,
        "",
    )
    .await;
    // Bad index specifications.
    for (spec, code) in [
        (doc! {"key": {"a": 1, "p": "2d"}, "name": "x"}, 16801),
        (doc! {"key": {"p": "2d"}, "name": "x", "bits": 40}, 72),
        (
            doc! {"key": {"p": "2d"}, "name": "x", "min": 5, "max": 5},
            72,
        ),
        (doc! {"key": {"p": "2d", "q": "2dsphere"}, "name": "x"}, 67),
    ] {
        expect_command_error(
            &db,
            doc! {"createIndexes": "plain", "indexes": [spec]},
            code,
            "",
        )
        .await;
    }
    // `listIndexes` shows the geo options.
    let reply = db.run_command(doc! {"listIndexes": "plain"}).await.unwrap();
    let specs = compat_tests::first_batch(&reply);
    assert!(
        specs
            .iter()
            .any(|s| s.get("2dsphereIndexVersion") == Some(&Bson::Int32(3))),
        "{specs:?}"
    );
}

#[tokio::test]
async fn explain_shows_the_geo_index_and_few_keys_for_a_limited_near() {
    let n = 3000;
    let srv = setup(stores(n), &[doc! {"location": "2dsphere"}]).await;
    let db = srv.db("g");
    for name in COPIES {
        let reply = db
            .run_command(doc! {"explain": {"find": name, "filter": {"location": {"$near": {"$geometry": point(10.0, 0.0)}}}, "limit": 10}, "verbosity": "executionStats"})
            .await
            .unwrap();
        let text = reply.to_string();
        assert!(text.contains("GEO_NEAR_2DSPHERE"), "{text}");
        assert!(
            text.contains("location_2dsphere") || text.contains("location"),
            "{text}"
        );
        let stats = reply.get_document("executionStats").unwrap();
        let keys = num(stats, "totalKeysExamined");
        let docs = num(stats, "totalDocsExamined");
        assert_eq!(num(stats, "nReturned"), 10, "{name}");
        // Rings around the point: a few dozen entries, where a scan of
        // the index would read all 3000 (each of the sharded copy's
        // partitions reads its own rings).
        let most = if name == "plain" { n / 20 } else { n / 4 };
        assert!(
            keys > 0 && keys < i64::from(most),
            "{name}: {keys} keys examined"
        );
        assert!(docs <= keys, "{name}: {docs} docs for {keys} keys");
    }
    // The results are the ten nearest, on both copies.
    let got = ids(
        &srv,
        doc! {"location": {"$near": {"$geometry": point(10.0, 0.0)}}},
        Some(10),
        None,
    )
    .await;
    assert_eq!(
        got,
        vec![1000, 999, 1001, 998, 1002, 997, 1003, 996, 1004, 995]
    );
}
