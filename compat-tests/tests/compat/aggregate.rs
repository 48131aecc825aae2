//! The `aggregate` command through the official driver, checked against
//! what a MongoDB 7.0 user sees behind a mongos.
//!
//! Covered: every stage of the pipeline (issue 5's list), every `$group`
//! accumulator, `$lookup` / `$merge` / `$out` against sharded and unsharded
//! collections, the same pipelines over a sharded (8 partitions) and an
//! unsharded copy of one data set compared for equality, `explain` of the
//! split pipeline, the memory limit of blocking stages and its spill path,
//! and the command's options (cursor batches, `maxTimeMS`, `let`,
//! collection-less `aggregate: 1`). The expression language is in
//! `aggregate_exprs.rs`.
//!
//! Every test starts its own server; the data is small (the server under
//! test may be a debug build).

use std::collections::BTreeSet;

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    cursor_id, expect_command_error, first_batch,
    mongodb::{Collection, Database},
    next_batch, num, numf, TestServer,
};
use futures::TryStreamExt;

const DB: &str = "agg";

// ---------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------

/// Runs `cmd`; a command error fails the test.
async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

fn coll(db: &Database, name: &str) -> Collection<Document> {
    db.collection::<Document>(name)
}

/// Runs `pipeline` on `name` through the driver's `aggregate` (which follows
/// the cursor with `getMore`) and returns every document.
async fn agg(db: &Database, name: &str, pipeline: Vec<Document>) -> Vec<Document> {
    let shown = format!("{pipeline:?}");
    coll(db, name)
        .aggregate(pipeline)
        .await
        .unwrap_or_else(|e| panic!("aggregate {name} {shown}: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("aggregate {name} {shown}: getMore: {e}"))
}

/// Runs a raw `aggregate` command (with `cursor: {}` unless given) and
/// follows the cursor to its end.
async fn agg_cmd(db: &Database, mut cmd: Document) -> Vec<Document> {
    if !cmd.contains_key("cursor") {
        cmd.insert("cursor", doc! {});
    }
    compat_tests::drain_cursor(db, cmd).await
}

async fn insert(db: &Database, name: &str, docs: Vec<Document>) {
    if docs.is_empty() {
        return;
    }
    coll(db, name)
        .insert_many(docs)
        .await
        .unwrap_or_else(|e| panic!("insert into {name}: {e}"));
}

/// Shards `db.name` on `{field: "hashed"}` with 8 initial chunks.
async fn shard(srv: &TestServer, name: &str, field: &str) {
    let reply = run(
        &srv.db("admin"),
        doc! {
            "shardCollection": format!("{DB}.{name}"),
            "key": {field: "hashed"},
            "numInitialChunks": 8,
        },
    )
    .await;
    assert_ok(&reply);
}

/// All documents of `name`, by `_id`.
async fn all(db: &Database, name: &str) -> Vec<Document> {
    coll(db, name)
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

fn ids(docs: &[Document]) -> Vec<Bson> {
    docs.iter()
        .map(|d| d.get("_id").cloned().unwrap_or(Bson::Null))
        .collect()
}

/// Documents as sorted text, for comparing results whose order MongoDB
/// leaves unspecified.
fn as_set(docs: &[Document]) -> Vec<String> {
    let mut v: Vec<String> = docs.iter().map(|d| format!("{d:?}")).collect();
    v.sort();
    v
}

/// A small inventory: 8 items in 3 categories.
fn items() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "name": "pen", "cat": "office", "price": 2, "qty": 100, "tags": ["blue", "ink"], "dim": {"w": 1, "h": 14}},
        doc! {"_id": 2, "name": "pencil", "cat": "office", "price": 1, "qty": 250, "tags": ["wood"], "dim": {"w": 1, "h": 18}},
        doc! {"_id": 3, "name": "desk", "cat": "furniture", "price": 150, "qty": 4, "tags": ["wood", "big"], "dim": {"w": 120, "h": 75}},
        doc! {"_id": 4, "name": "chair", "cat": "furniture", "price": 60, "qty": 12, "tags": [], "dim": {"w": 50, "h": 90}},
        doc! {"_id": 5, "name": "lamp", "cat": "furniture", "price": 35, "qty": 20, "tags": ["light"], "dim": {"w": 20, "h": 45}},
        doc! {"_id": 6, "name": "apple", "cat": "food", "price": 1, "qty": 500, "tags": ["fruit", "red"], "dim": {"w": 8, "h": 8}},
        doc! {"_id": 7, "name": "bread", "cat": "food", "price": 3, "qty": 40, "tags": null, "dim": {"w": 30, "h": 10}},
        doc! {"_id": 8, "name": "cheese", "cat": "food", "price": 12, "qty": 30, "dim": {"w": 10, "h": 5}},
    ]
}

async fn with_items(srv: &TestServer) -> Database {
    let db = srv.db(DB);
    insert(&db, "items", items()).await;
    db
}

// ---------------------------------------------------------------------------
// stages
// ---------------------------------------------------------------------------

#[tokio::test]
async fn match_project_addfields_set_unset() {
    let srv = TestServer::start().await;
    let db = with_items(&srv).await;

    // $match with query operators and with $expr.
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$match": {"cat": {"$in": ["office", "food"]}, "price": {"$gte": 2}}},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    assert_eq!(
        ids(&got),
        vec![Bson::Int32(1), Bson::Int32(7), Bson::Int32(8)]
    );
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$match": {"$expr": {"$gte": [{"$multiply": ["$price", "$qty"]}, 600]}}},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    assert_eq!(
        ids(&got),
        vec![Bson::Int32(3), Bson::Int32(4), Bson::Int32(5)]
    );

    // Inclusion keeps _id; dotted paths and computed fields.
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$match": {"_id": 3}},
            doc! {"$project": {"name": 1, "dim.w": 1, "value": {"$multiply": ["$price", "$qty"]}}},
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![doc! {"_id": 3, "name": "desk", "dim": {"w": 120}, "value": 600}]
    );
    // Exclusion.
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$match": {"_id": 2}},
            doc! {"$project": {"_id": 0, "tags": 0, "dim": 0, "qty": 0}},
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![doc! {"name": "pencil", "cat": "office", "price": 1}]
    );
    // Mixing inclusion and exclusion is refused.
    expect_command_error(
        &db,
        doc! {"aggregate": "items", "pipeline": [{"$project": {"name": 1, "tags": 0}}], "cursor": {}},
        31254,
        "",
    )
    .await;

    // $addFields and its alias $set: new fields go last, existing ones are
    // replaced in place, dotted paths add into subdocuments.
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$match": {"_id": 1}},
            doc! {"$addFields": {"total": {"$multiply": ["$price", "$qty"]}, "price": 3, "dim.d": 2}},
            doc! {"$set": {"ntags": {"$size": "$tags"}}},
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![doc! {
            "_id": 1, "name": "pen", "cat": "office", "price": 3, "qty": 100,
            "tags": ["blue", "ink"], "dim": {"w": 1, "h": 14, "d": 2}, "total": 200, "ntags": 2,
        }]
    );

    // $unset: one field, several fields, a dotted path.
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$match": {"_id": 1}},
            doc! {"$unset": "tags"},
            doc! {"$unset": ["qty", "dim.h", "cat"]},
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![doc! {"_id": 1, "name": "pen", "price": 2, "dim": {"w": 1}}]
    );
}

#[tokio::test]
async fn sort_skip_limit_count() {
    let srv = TestServer::start().await;
    let db = with_items(&srv).await;

    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$sort": {"price": -1, "_id": 1}},
            doc! {"$skip": 1},
            doc! {"$limit": 3},
            doc! {"$project": {"name": 1, "_id": 0}},
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"name": "chair"},
            doc! {"name": "lamp"},
            doc! {"name": "cheese"}
        ]
    );
    // Ties broken by the second key.
    let got = agg(
        &db,
        "items",
        vec![doc! {"$sort": {"price": 1, "name": 1}}, doc! {"$limit": 3}],
    )
    .await;
    assert_eq!(
        ids(&got),
        vec![Bson::Int32(6), Bson::Int32(2), Bson::Int32(1)]
    );

    let got = agg(
        &db,
        "items",
        vec![doc! {"$match": {"cat": "furniture"}}, doc! {"$count": "n"}],
    )
    .await;
    assert_eq!(got, vec![doc! {"n": 3}]);
    // $count of nothing returns no document.
    let got = agg(
        &db,
        "items",
        vec![doc! {"$match": {"cat": "none"}}, doc! {"$count": "n"}],
    )
    .await;
    assert!(got.is_empty(), "{got:?}");

    // $limit 0 and a negative $skip are refused.
    expect_command_error(
        &db,
        doc! {"aggregate": "items", "pipeline": [{"$limit": 0}], "cursor": {}},
        15958,
        "",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"aggregate": "items", "pipeline": [{"$skip": -1}], "cursor": {}},
        5107200,
        "",
    )
    .await;
}

#[tokio::test]
async fn group_with_every_accumulator() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    insert(
        &db,
        "g",
        vec![
            doc! {"_id": 1, "g": "a", "v": 1, "s": "x", "o": {"p": 1}},
            doc! {"_id": 2, "g": "a", "v": 3, "s": "y", "o": {"q": 2}},
            doc! {"_id": 3, "g": "a", "v": 5, "s": "x", "o": {"p": 3}},
            doc! {"_id": 4, "g": "b", "v": 2, "s": "z", "o": {}},
        ],
    )
    .await;
    let got = agg(
        &db,
        "g",
        vec![
            doc! {"$sort": {"_id": 1}},
            doc! {"$group": {
                "_id": "$g",
                "sum": {"$sum": "$v"},
                "n": {"$sum": 1},
                "avg": {"$avg": "$v"},
                "min": {"$min": "$v"},
                "max": {"$max": "$v"},
                "first": {"$first": "$v"},
                "last": {"$last": "$v"},
                "push": {"$push": "$v"},
                "set": {"$addToSet": "$s"},
                "cnt": {"$count": {}},
                "mo": {"$mergeObjects": "$o"},
                "sdp": {"$stdDevPop": "$v"},
                "sds": {"$stdDevSamp": "$v"},
                "top": {"$top": {"sortBy": {"v": -1}, "output": "$_id"}},
                "bottom": {"$bottom": {"sortBy": {"v": -1}, "output": "$_id"}},
                "topN": {"$topN": {"n": 2, "sortBy": {"v": -1}, "output": "$v"}},
                "bottomN": {"$bottomN": {"n": 2, "sortBy": {"v": -1}, "output": "$v"}},
                "firstN": {"$firstN": {"n": 2, "input": "$v"}},
                "lastN": {"$lastN": {"n": 2, "input": "$v"}},
            }},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    assert_eq!(got.len(), 2, "{got:?}");
    let mut a = got[0].clone();
    let mut b = got[1].clone();

    // Floating-point and unordered results checked on their own.
    let set_of = |d: &Document| -> BTreeSet<String> {
        d.get_array("set")
            .unwrap_or_else(|_| panic!("no set array in {d}"))
            .iter()
            .map(|s| s.as_str().expect("strings").to_string())
            .collect()
    };
    assert_eq!(
        set_of(&a),
        ["x", "y"].iter().map(|s| s.to_string()).collect()
    );
    assert_eq!(set_of(&b), ["z"].iter().map(|s| s.to_string()).collect());
    assert!(
        (numf(&a, "sdp") - (8.0f64 / 3.0).sqrt()).abs() < 1e-9,
        "{a}"
    );
    assert!((numf(&a, "sds") - 2.0).abs() < 1e-9, "{a}");
    assert_eq!(b.get("sdp"), Some(&Bson::Double(0.0)), "{b}");
    // The sample deviation of one value is null.
    assert_eq!(b.get("sds"), Some(&Bson::Null), "{b}");
    for d in [&mut a, &mut b] {
        d.remove("set");
        d.remove("sdp");
        d.remove("sds");
    }
    assert_eq!(
        a,
        doc! {
            "_id": "a", "sum": 9, "n": 3, "avg": 3.0, "min": 1, "max": 5, "first": 1, "last": 5,
            "push": [1, 3, 5], "cnt": 3, "mo": {"p": 3, "q": 2},
            "top": 3, "bottom": 1, "topN": [5, 3], "bottomN": [3, 1],
            "firstN": [1, 3], "lastN": [3, 5],
        }
    );
    assert_eq!(
        b,
        doc! {
            "_id": "b", "sum": 2, "n": 1, "avg": 2.0, "min": 2, "max": 2, "first": 2, "last": 2,
            "push": [2], "cnt": 1, "mo": {},
            "top": 4, "bottom": 4, "topN": [2], "bottomN": [2],
            "firstN": [2], "lastN": [2],
        }
    );

    // _id null groups everything; compound _id; $sum ignores non-numbers
    // and $avg / $min of nothing numeric is null.
    let got = agg(
        &db,
        "g",
        vec![doc! {"$group": {
            "_id": null,
            "total": {"$sum": "$v"},
            "strs": {"$sum": "$s"},
            "avgs": {"$avg": "$s"},
            "minMissing": {"$min": "$nope"},
        }}],
    )
    .await;
    assert_eq!(
        got,
        vec![doc! {"_id": null, "total": 11, "strs": 0, "avgs": null, "minMissing": null}]
    );
    let got = agg(
        &db,
        "g",
        vec![
            doc! {"$group": {"_id": {"g": "$g", "s": "$s"}, "n": {"$sum": 1}}},
            doc! {"$sort": {"_id.g": 1, "_id.s": 1}},
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": {"g": "a", "s": "x"}, "n": 2},
            doc! {"_id": {"g": "a", "s": "y"}, "n": 1},
            doc! {"_id": {"g": "b", "s": "z"}, "n": 1},
        ]
    );

    // A $group without _id, and an unknown accumulator, are refused.
    expect_command_error(
        &db,
        doc! {"aggregate": "g", "pipeline": [{"$group": {"n": {"$sum": 1}}}], "cursor": {}},
        15955,
        "",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"aggregate": "g", "pipeline": [{"$group": {"_id": null, "n": {"$median2": "$v"}}}], "cursor": {}},
        15952,
        "",
    )
    .await;
}

#[tokio::test]
async fn unwind_with_index_and_preserve() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    insert(
        &db,
        "u",
        vec![
            doc! {"_id": 1, "arr": [10, 20]},
            doc! {"_id": 2, "arr": []},
            doc! {"_id": 3, "arr": null},
            doc! {"_id": 4},
            doc! {"_id": 5, "arr": 30},
        ],
    )
    .await;
    let got = agg(
        &db,
        "u",
        vec![doc! {"$sort": {"_id": 1}}, doc! {"$unwind": "$arr"}],
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": 1, "arr": 10},
            doc! {"_id": 1, "arr": 20},
            doc! {"_id": 5, "arr": 30},
        ]
    );
    let got = agg(
        &db,
        "u",
        vec![
            doc! {"$sort": {"_id": 1}},
            doc! {"$unwind": {"path": "$arr", "includeArrayIndex": "idx", "preserveNullAndEmptyArrays": true}},
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": 1, "arr": 10, "idx": 0i64},
            doc! {"_id": 1, "arr": 20, "idx": 1i64},
            doc! {"_id": 2, "idx": null},
            doc! {"_id": 3, "arr": null, "idx": null},
            doc! {"_id": 4, "idx": null},
            doc! {"_id": 5, "arr": 30, "idx": null},
        ]
    );
    // The path must start with '$'.
    expect_command_error(
        &db,
        doc! {"aggregate": "u", "pipeline": [{"$unwind": "arr"}], "cursor": {}},
        28818,
        "",
    )
    .await;
}

async fn lookup_checks(db: &Database) {
    // localField / foreignField; an array local field matches any element;
    // no match gives an empty array.
    let got = agg(
        db,
        "orders",
        vec![
            doc! {"$sort": {"_id": 1}},
            doc! {"$lookup": {"from": "items", "localField": "item", "foreignField": "_id", "as": "it"}},
            doc! {"$project": {"names": {"$sortArray": {"input": "$it.name", "sortBy": 1}}}},
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": 100, "names": ["pen"]},
            doc! {"_id": 101, "names": ["desk"]},
            doc! {"_id": 102, "names": []},
            doc! {"_id": 103, "names": ["pen", "pencil"]},
        ]
    );
    // let / pipeline form with $expr and an extra stage; a foreign field
    // that is not _id.
    let got = agg(
        db,
        "orders",
        vec![
            doc! {"$match": {"_id": {"$in": [100, 101]}}},
            doc! {"$sort": {"_id": 1}},
            doc! {"$lookup": {
                "from": "items",
                "let": {"max": "$budget"},
                "pipeline": [
                    {"$match": {"$expr": {"$lte": ["$price", "$$max"]}}},
                    {"$sort": {"price": -1, "_id": 1}},
                    {"$limit": 2},
                    {"$project": {"_id": 0, "name": 1}},
                ],
                "as": "affordable",
            }},
            doc! {"$project": {"affordable": 1}},
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": 100, "affordable": [{"name": "cheese"}, {"name": "bread"}]},
            doc! {"_id": 101, "affordable": [{"name": "chair"}, {"name": "lamp"}]},
        ]
    );
    let got = agg(
        db,
        "orders",
        vec![
            doc! {"$match": {"_id": 100}},
            doc! {"$lookup": {"from": "items", "localField": "wantCat", "foreignField": "cat", "as": "same"}},
            doc! {"$project": {"n": {"$size": "$same"}}},
        ],
    )
    .await;
    assert_eq!(got, vec![doc! {"_id": 100, "n": 3}]);
}

fn orders() -> Vec<Document> {
    vec![
        doc! {"_id": 100, "item": 1, "budget": 15, "wantCat": "food"},
        doc! {"_id": 101, "item": 3, "budget": 60, "wantCat": "office"},
        doc! {"_id": 102, "item": 99, "budget": 0, "wantCat": "none"},
        doc! {"_id": 103, "item": [1, 2], "budget": 1, "wantCat": "food"},
    ]
}

#[tokio::test]
async fn lookup_unsharded_foreign() {
    let srv = TestServer::start().await;
    let db = with_items(&srv).await;
    insert(&db, "orders", orders()).await;
    lookup_checks(&db).await;
}

#[tokio::test]
async fn lookup_sharded_foreign_and_local() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    shard(&srv, "items", "_id").await;
    shard(&srv, "orders", "_id").await;
    insert(&db, "items", items()).await;
    insert(&db, "orders", orders()).await;
    lookup_checks(&db).await;
}

#[tokio::test]
async fn replace_root_and_replace_with() {
    let srv = TestServer::start().await;
    let db = with_items(&srv).await;
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$match": {"_id": {"$lte": 2}}},
            doc! {"$sort": {"_id": 1}},
            doc! {"$replaceRoot": {"newRoot": "$dim"}},
        ],
    )
    .await;
    assert_eq!(got, vec![doc! {"w": 1, "h": 14}, doc! {"w": 1, "h": 18}]);
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$match": {"_id": 3}},
            doc! {"$replaceWith": {"$mergeObjects": [{"id": "$_id"}, "$dim", {"n": "$name"}]}},
        ],
    )
    .await;
    assert_eq!(got, vec![doc! {"id": 3, "w": 120, "h": 75, "n": "desk"}]);
    // newRoot must be a document.
    expect_command_error(
        &db,
        doc! {"aggregate": "items", "pipeline": [{"$replaceRoot": {"newRoot": "$name"}}], "cursor": {}},
        40228,
        "",
    )
    .await;
}

#[tokio::test]
async fn sort_by_count_and_facet() {
    let srv = TestServer::start().await;
    let db = with_items(&srv).await;
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$unwind": "$tags"},
            doc! {"$sortByCount": "$tags"},
            doc! {"$limit": 1},
        ],
    )
    .await;
    assert_eq!(got, vec![doc! {"_id": "wood", "count": 2}]);

    let got = agg(
        &db,
        "items",
        vec![doc! {"$facet": {
            "byCat": [{"$sortByCount": "$cat"}, {"$sort": {"count": -1, "_id": 1}}],
            "cheap": [{"$match": {"price": {"$lt": 3}}}, {"$count": "n"}],
            "priciest": [{"$sort": {"price": -1}}, {"$limit": 1}, {"$project": {"_id": 0, "name": 1}}],
            "none": [{"$match": {"cat": "x"}}],
        }}],
    )
    .await;
    assert_eq!(
        got,
        vec![doc! {
            "byCat": [
                {"_id": "food", "count": 3},
                {"_id": "furniture", "count": 3},
                {"_id": "office", "count": 2},
            ],
            "cheap": [{"n": 3}],
            "priciest": [{"name": "desk"}],
            "none": [],
        }]
    );
}

#[tokio::test]
async fn bucket_and_bucket_auto() {
    let srv = TestServer::start().await;
    let db = with_items(&srv).await;
    let got = agg(
        &db,
        "items",
        vec![doc! {"$bucket": {
            "groupBy": "$price",
            "boundaries": [0, 10, 50, 100],
            "default": "other",
            "output": {"count": {"$sum": 1}, "names": {"$push": "$name"}},
        }}],
    )
    .await;
    let sorted_names = |docs: Vec<Document>| -> Vec<Document> {
        docs.into_iter()
            .map(|mut d| {
                if let Ok(a) = d.get_array_mut("names") {
                    a.sort_by_key(|b| b.as_str().unwrap_or_default().to_string());
                }
                d
            })
            .collect()
    };
    assert_eq!(
        sorted_names(got),
        vec![
            doc! {"_id": 0, "count": 4, "names": ["apple", "bread", "pen", "pencil"]},
            doc! {"_id": 10, "count": 2, "names": ["cheese", "lamp"]},
            doc! {"_id": 50, "count": 1, "names": ["chair"]},
            doc! {"_id": "other", "count": 1, "names": ["desk"]},
        ]
    );
    // Without default, a value outside the boundaries is an error.
    expect_command_error(
        &db,
        doc! {"aggregate": "items", "pipeline": [{"$bucket": {"groupBy": "$price", "boundaries": [0, 10]}}], "cursor": {}},
        40066,
        "",
    )
    .await;

    insert(
        &db,
        "ten",
        (1..=10).map(|i| doc! {"_id": i, "v": i}).collect(),
    )
    .await;
    let got = agg(
        &db,
        "ten",
        vec![doc! {"$bucketAuto": {"groupBy": "$v", "buckets": 2}}],
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": {"min": 1, "max": 6}, "count": 5},
            doc! {"_id": {"min": 6, "max": 10}, "count": 5},
        ]
    );
    let got = agg(
        &db,
        "ten",
        vec![
            doc! {"$bucketAuto": {"groupBy": "$v", "buckets": 3, "output": {"s": {"$sum": "$v"}}}},
        ],
    )
    .await;
    let total: i64 = got.iter().map(|d| num(d, "s")).sum();
    assert_eq!(total, 55, "{got:?}");
    assert_eq!(got.len(), 3, "{got:?}");
}

#[tokio::test]
async fn sample_returns_distinct_documents() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    insert(&db, "s", (0..50).map(|i| doc! {"_id": i, "v": i}).collect()).await;
    let got = agg(&db, "s", vec![doc! {"$sample": {"size": 5}}]).await;
    assert_eq!(got.len(), 5, "{got:?}");
    let distinct: BTreeSet<i64> = got.iter().map(|d| num(d, "_id")).collect();
    assert_eq!(distinct.len(), 5, "{got:?}");
    for d in &got {
        assert_eq!(num(d, "_id"), num(d, "v"), "{d}");
    }
    let got = agg(&db, "s", vec![doc! {"$sample": {"size": 100}}]).await;
    let distinct: BTreeSet<i64> = got.iter().map(|d| num(d, "_id")).collect();
    assert_eq!(distinct, (0..50).collect(), "{got:?}");
    expect_command_error(
        &db,
        doc! {"aggregate": "s", "pipeline": [{"$sample": {"size": -1}}], "cursor": {}},
        28747,
        "",
    )
    .await;
}

#[tokio::test]
async fn union_with() {
    let srv = TestServer::start().await;
    let db = with_items(&srv).await;
    insert(&db, "orders", orders()).await;
    shard(&srv, "more", "_id").await;
    insert(
        &db,
        "more",
        vec![
            doc! {"_id": 9, "name": "sofa"},
            doc! {"_id": 10, "name": "rug"},
        ],
    )
    .await;
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$match": {"cat": "office"}},
            doc! {"$project": {"name": 1}},
            doc! {"$unionWith": "more"},
            doc! {"$unionWith": {"coll": "orders", "pipeline": [
                {"$match": {"_id": 100}},
                {"$project": {"name": {"$concat": ["order ", {"$toString": "$_id"}]}}},
            ]}},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": 1, "name": "pen"},
            doc! {"_id": 2, "name": "pencil"},
            doc! {"_id": 9, "name": "sofa"},
            doc! {"_id": 10, "name": "rug"},
            doc! {"_id": 100, "name": "order 100"},
        ]
    );
}

#[tokio::test]
async fn out_replaces_target() {
    let srv = TestServer::start().await;
    let db = with_items(&srv).await;
    insert(&db, "report", vec![doc! {"_id": "stale"}]).await;
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$group": {"_id": "$cat", "n": {"$sum": 1}}},
            doc! {"$out": "report"},
        ],
    )
    .await;
    assert!(got.is_empty(), "$out returns no documents: {got:?}");
    assert_eq!(
        all(&db, "report").await,
        vec![
            doc! {"_id": "food", "n": 3},
            doc! {"_id": "furniture", "n": 3},
            doc! {"_id": "office", "n": 2},
        ]
    );
    // From a sharded source, and into another database.
    shard(&srv, "sitems", "_id").await;
    insert(&db, "sitems", items()).await;
    agg(
        &db,
        "sitems",
        vec![
            doc! {"$match": {"price": {"$gt": 50}}},
            doc! {"$project": {"name": 1}},
            doc! {"$out": {"db": "other", "coll": "big"}},
        ],
    )
    .await;
    assert_eq!(
        all(&srv.db("other"), "big").await,
        vec![
            doc! {"_id": 3, "name": "desk"},
            doc! {"_id": 4, "name": "chair"}
        ]
    );
    // $out must be last; it cannot write into a sharded collection.
    expect_command_error(
        &db,
        doc! {"aggregate": "items", "pipeline": [{"$out": "x"}, {"$match": {}}], "cursor": {}},
        40601,
        "",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"aggregate": "items", "pipeline": [{"$out": "sitems"}], "cursor": {}},
        28769,
        "",
    )
    .await;
}

async fn merge_checks(srv: &TestServer, target: &str) {
    let db = srv.db(DB);
    insert(
        &db,
        target,
        vec![
            doc! {"_id": "food", "n": 0, "note": "keep"},
            doc! {"_id": "garden", "n": 7},
        ],
    )
    .await;
    let got = agg(
        &db,
        "items",
        vec![
            doc! {"$group": {"_id": "$cat", "n": {"$sum": 1}}},
            doc! {"$merge": {"into": target, "whenMatched": "merge", "whenNotMatched": "insert"}},
        ],
    )
    .await;
    assert!(got.is_empty(), "$merge returns no documents: {got:?}");
    assert_eq!(
        all(&db, target).await,
        vec![
            doc! {"_id": "food", "n": 3, "note": "keep"},
            doc! {"_id": "furniture", "n": 3},
            doc! {"_id": "garden", "n": 7},
            doc! {"_id": "office", "n": 2},
        ]
    );
    // whenMatched replace / whenNotMatched discard.
    agg(
        &db,
        "items",
        vec![
            doc! {"$match": {"cat": {"$in": ["food", "toys"]}}},
            doc! {"$group": {"_id": "$cat", "total": {"$sum": "$qty"}}},
            doc! {"$merge": {"into": target, "whenMatched": "replace", "whenNotMatched": "discard"}},
        ],
    )
    .await;
    assert_eq!(
        all(&db, target).await,
        vec![
            doc! {"_id": "food", "total": 570},
            doc! {"_id": "furniture", "n": 3},
            doc! {"_id": "garden", "n": 7},
            doc! {"_id": "office", "n": 2},
        ]
    );
    // whenMatched keepExisting. (A pipeline `whenMatched` needs update
    // pipelines, which are not in scope yet.)
    agg(
        &db,
        "items",
        vec![
            doc! {"$group": {"_id": "$cat", "n": {"$sum": 100}, "seen": {"$max": true}}},
            doc! {"$merge": {"into": target, "whenMatched": "keepExisting", "whenNotMatched": "insert"}},
        ],
    )
    .await;
    assert_eq!(
        all(&db, target).await,
        vec![
            doc! {"_id": "food", "total": 570},
            doc! {"_id": "furniture", "n": 3},
            doc! {"_id": "garden", "n": 7},
            doc! {"_id": "office", "n": 2},
        ]
    );
    // whenMatched fail: a duplicate fails the aggregate.
    let r = coll(&db, "items")
        .aggregate(vec![
            doc! {"$group": {"_id": "$cat"}},
            doc! {"$merge": {"into": target, "whenMatched": "fail"}},
        ])
        .await;
    let failed = match r {
        Err(_) => true,
        Ok(c) => c.try_collect::<Vec<Document>>().await.is_err(),
    };
    assert!(failed, "whenMatched fail with existing _ids must fail");
}

#[tokio::test]
async fn merge_into_unsharded_target() {
    let srv = TestServer::start().await;
    with_items(&srv).await;
    merge_checks(&srv, "summary").await;
}

#[tokio::test]
async fn merge_into_sharded_target_from_sharded_source() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    shard(&srv, "items", "_id").await;
    insert(&db, "items", items()).await;
    shard(&srv, "summary", "_id").await;
    merge_checks(&srv, "summary").await;
}

#[tokio::test]
async fn coll_stats_stage() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = TestServer::start().await;
    let db = with_items(&srv).await;
    let got = agg(
        &db,
        "items",
        vec![doc! {"$collStats": {"count": {}, "storageStats": {}}}],
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].get_str("ns").ok(), Some("agg.items"), "{got:?}");
    assert_eq!(num(&got[0], "count"), 8, "{got:?}");
    let storage = got[0].get_document("storageStats").expect("storageStats");
    assert_eq!(num(storage, "count"), 8, "{storage}");
    assert!(storage.contains_key("size"), "{storage}");

    // Sharded: one document per partition, naming it; counts add up.
    shard(&srv, "s", "_id").await;
    insert(&db, "s", (0..200).map(|i| doc! {"_id": i}).collect()).await;
    let got = agg(
        &db,
        "s",
        vec![doc! {"$collStats": {"count": {}, "storageStats": {}}}],
    )
    .await;
    assert_eq!(got.len(), 8, "{got:?}");
    let shards: BTreeSet<String> = got
        .iter()
        .map(|d| d.get_str("shard").expect("shard name").to_string())
        .collect();
    assert_eq!(shards.len(), 8, "{got:?}");
    assert_eq!(got.iter().map(|d| num(d, "count")).sum::<i64>(), 200);
    // $collStats must be first.
    expect_command_error(
        &db,
        doc! {"aggregate": "items", "pipeline": [{"$match": {}}, {"$collStats": {"count": {}}}], "cursor": {}},
        40602,
        "",
    )
    .await;
}

#[tokio::test]
async fn documents_stage_and_collectionless_aggregate() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let got = agg_cmd(
        &db,
        doc! {"aggregate": 1, "pipeline": [
            {"$documents": [{"x": 1}, {"x": 2}, {"x": 3}]},
            {"$match": {"x": {"$gte": 2}}},
            {"$set": {"y": {"$multiply": ["$x", 10]}}},
        ]},
    )
    .await;
    assert_eq!(got, vec![doc! {"x": 2, "y": 20}, doc! {"x": 3, "y": 30}]);
    // Expressions in $documents, then a $lookup into a real collection.
    insert(&db, "c", vec![doc! {"_id": 1, "v": "one"}]).await;
    let got = agg_cmd(
        &db,
        doc! {"aggregate": 1, "pipeline": [
            {"$documents": {"$map": {"input": {"$range": [0, 3]}, "in": {"k": "$$this"}}}},
            {"$lookup": {"from": "c", "localField": "k", "foreignField": "_id", "as": "m"}},
            {"$project": {"k": 1, "n": {"$size": "$m"}}},
        ]},
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"k": 0, "n": 0},
            doc! {"k": 1, "n": 1},
            doc! {"k": 2, "n": 0}
        ]
    );
    // aggregate: 1 needs a collection-less first stage.
    expect_command_error(
        &db,
        doc! {"aggregate": 1, "pipeline": [{"$match": {}}], "cursor": {}},
        73,
        "InvalidNamespace",
    )
    .await;
}

// ---------------------------------------------------------------------------
// command options
// ---------------------------------------------------------------------------

#[tokio::test]
async fn cursor_batch_size_and_get_more() {
    let srv = TestServer::start().await;
    let db = srv.pinned_db(DB);
    insert(&db, "b", (0..25).map(|i| doc! {"_id": i}).collect()).await;
    let reply = run(
        &db,
        doc! {"aggregate": "b", "pipeline": [{"$sort": {"_id": 1}}], "cursor": {"batchSize": 10}},
    )
    .await;
    assert_eq!(
        reply.get_document("cursor").unwrap().get_str("ns").ok(),
        Some("agg.b"),
        "{reply}"
    );
    let mut seen = first_batch(&reply);
    assert_eq!(seen.len(), 10);
    let id = cursor_id(&reply);
    assert_ne!(id, 0, "{reply}");
    let more = run(
        &db,
        doc! {"getMore": id, "collection": "b", "batchSize": 10},
    )
    .await;
    assert_eq!(next_batch(&more).len(), 10);
    seen.extend(next_batch(&more));
    assert_eq!(cursor_id(&more), id);
    let more = run(&db, doc! {"getMore": id, "collection": "b"}).await;
    seen.extend(next_batch(&more));
    assert_eq!(cursor_id(&more), 0, "{more}");
    assert_eq!(ids(&seen), (0..25).map(Bson::Int32).collect::<Vec<_>>());
    // batchSize 0: an empty first batch and an open cursor.
    let reply = run(
        &db,
        doc! {"aggregate": "b", "pipeline": [], "cursor": {"batchSize": 0}},
    )
    .await;
    assert!(first_batch(&reply).is_empty());
    assert_ne!(cursor_id(&reply), 0);
    // The cursor option is required (except with explain).
    expect_command_error(
        &db,
        doc! {"aggregate": "b", "pipeline": []},
        9,
        "FailedToParse",
    )
    .await;
}

#[tokio::test]
async fn max_time_ms() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    insert(
        &db,
        "t",
        (0..300).map(|i| doc! {"_id": i, "v": i % 7}).collect(),
    )
    .await;
    // Generous: succeeds.
    let got = agg_cmd(
        &db,
        doc! {"aggregate": "t", "pipeline": [{"$count": "n"}], "maxTimeMS": 60000},
    )
    .await;
    assert_eq!(got, vec![doc! {"n": 300}]);
    // 1 ms for a 300 x 300 self-join: MaxTimeMSExpired.
    expect_command_error(
        &db,
        doc! {
            "aggregate": "t",
            "pipeline": [
                {"$lookup": {"from": "t", "pipeline": [{"$match": {"$expr": {"$eq": ["$v", 3]}}}], "as": "j"}},
                {"$unwind": "$j"},
                {"$group": {"_id": null, "n": {"$sum": 1}}},
            ],
            "cursor": {},
            "maxTimeMS": 1,
        },
        50,
        "MaxTimeMSExpired",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"aggregate": "t", "pipeline": [], "cursor": {}, "maxTimeMS": -1},
        // The IDL validator's error (`gte: 0`), as `find` answers too.
        51024,
        "Location51024",
    )
    .await;
}

#[tokio::test]
async fn let_variables() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    insert(
        &db,
        "l",
        (0..10).map(|i| doc! {"_id": i, "v": i * 10}).collect(),
    )
    .await;
    let got = agg_cmd(
        &db,
        doc! {
            "aggregate": "l",
            "pipeline": [
                {"$match": {"$expr": {"$and": [{"$gte": ["$v", "$$lo"]}, {"$lt": ["$v", "$$hi"]}]}}},
                {"$project": {"v": 1, "label": "$$tag"}},
                {"$sort": {"_id": 1}},
            ],
            "let": {"lo": 30, "hi": {"$add": [40, 20]}, "tag": "x"},
        },
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": 3, "v": 30, "label": "x"},
            doc! {"_id": 4, "v": 40, "label": "x"},
            doc! {"_id": 5, "v": 50, "label": "x"},
        ]
    );
    // An undefined variable is an error.
    expect_command_error(
        &db,
        doc! {"aggregate": "l", "pipeline": [{"$project": {"x": "$$nope"}}], "cursor": {}},
        17276,
        "",
    )
    .await;
}

// ---------------------------------------------------------------------------
// sharded vs unsharded
// ---------------------------------------------------------------------------

fn dataset() -> Vec<Document> {
    let cats = ["alpha", "beta", "gamma", "delta", "epsilon"];
    let tag_pool = ["red", "green", "blue", "cyan"];
    (0..400i32)
        .map(|i| {
            let tags: Vec<&str> = (0..(i % 4) as usize)
                .map(|j| tag_pool[(i as usize + j) % 4])
                .collect();
            let mut d = doc! {
                "_id": i,
                "k": i * 7 % 400,
                "cat": cats[(i % 5) as usize],
                "n": i % 17,
                "price": ((i * 37) % 100) as f64 + 0.5,
                "qty": i % 9,
                "tags": tags,
                "sub": {"x": i % 3, "y": format!("y{}", i % 4)},
                "ref": i % 13,
            };
            if i % 11 == 0 {
                d.remove("qty");
            }
            d
        })
        .collect()
}

/// The pipelines run over both copies. Results are sorted by the pipeline
/// itself or compared as sets.
fn comparison_pipelines() -> Vec<(&'static str, Vec<Document>)> {
    vec![
        (
            "match",
            vec![doc! {"$match": {"cat": "beta", "n": {"$gt": 5}}}],
        ),
        (
            "match on shard key",
            vec![doc! {"$match": {"k": {"$in": [7, 14, 21, 399]}}}],
        ),
        (
            "group sum avg min max",
            vec![
                doc! {"$group": {
                    "_id": "$cat",
                    "n": {"$sum": 1},
                    "total": {"$sum": "$price"},
                    "avg": {"$avg": "$price"},
                    "min": {"$min": "$n"},
                    "max": {"$max": "$qty"},
                    "qty": {"$sum": "$qty"},
                }},
                doc! {"$sort": {"_id": 1}},
            ],
        ),
        (
            "group push addToSet count",
            vec![
                doc! {"$match": {"n": {"$lt": 3}}},
                doc! {"$group": {
                    "_id": {"c": "$cat", "x": "$sub.x"},
                    "ids": {"$push": "$_id"},
                    "ys": {"$addToSet": "$sub.y"},
                    "c": {"$count": {}},
                }},
                doc! {"$set": {
                    "ids": {"$sortArray": {"input": "$ids", "sortBy": 1}},
                    "ys": {"$sortArray": {"input": "$ys", "sortBy": 1}},
                }},
                doc! {"$sort": {"_id.c": 1, "_id.x": 1}},
            ],
        ),
        (
            "group stdDev mergeObjects",
            vec![
                doc! {"$group": {
                    "_id": "$qty",
                    "sdp": {"$stdDevPop": "$n"},
                    "sds": {"$stdDevSamp": "$n"},
                    "mo": {"$mergeObjects": {"$arrayToObject": [[["c", "$cat"]]]}},
                }},
                doc! {"$set": {"sdp": {"$round": ["$sdp", 6]}, "sds": {"$round": ["$sds", 6]}, "mo": {"$type": "$mo"}}},
                doc! {"$sort": {"_id": 1}},
            ],
        ),
        (
            "group top bottom topN bottomN",
            vec![
                doc! {"$group": {
                    "_id": "$cat",
                    "top": {"$top": {"sortBy": {"price": -1, "_id": 1}, "output": "$_id"}},
                    "bottom": {"$bottom": {"sortBy": {"price": -1, "_id": 1}, "output": "$_id"}},
                    "top3": {"$topN": {"n": 3, "sortBy": {"price": -1, "_id": 1}, "output": ["$_id", "$price"]}},
                    "bottom2": {"$bottomN": {"n": 2, "sortBy": {"n": 1, "_id": 1}, "output": "$_id"}},
                }},
                doc! {"$sort": {"_id": 1}},
            ],
        ),
        (
            "sort first last firstN lastN",
            vec![
                doc! {"$sort": {"_id": 1}},
                doc! {"$group": {
                    "_id": "$sub.x",
                    "first": {"$first": "$_id"},
                    "last": {"$last": "$_id"},
                    "firstN": {"$firstN": {"n": 3, "input": "$_id"}},
                    "lastN": {"$lastN": {"n": 3, "input": "$_id"}},
                }},
                doc! {"$sort": {"_id": 1}},
            ],
        ),
        (
            "sort limit",
            vec![doc! {"$sort": {"price": -1, "_id": 1}}, doc! {"$limit": 7}],
        ),
        (
            "sort skip limit",
            vec![
                doc! {"$sort": {"n": 1, "k": -1}},
                doc! {"$skip": 20},
                doc! {"$limit": 15},
                doc! {"$project": {"n": 1, "k": 1}},
            ],
        ),
        (
            "count",
            vec![
                doc! {"$match": {"price": {"$gt": 50}}},
                doc! {"$count": "n"},
            ],
        ),
        (
            "unwind group",
            vec![
                doc! {"$unwind": {"path": "$tags", "includeArrayIndex": "i"}},
                doc! {"$group": {"_id": {"t": "$tags", "i": "$i"}, "n": {"$sum": 1}, "q": {"$sum": "$qty"}}},
                doc! {"$sort": {"_id.t": 1, "_id.i": 1}},
            ],
        ),
        (
            "unwind preserve count",
            vec![
                doc! {"$unwind": {"path": "$tags", "preserveNullAndEmptyArrays": true}},
                doc! {"$count": "rows"},
            ],
        ),
        (
            "lookup",
            vec![
                doc! {"$match": {"n": 4}},
                doc! {"$lookup": {"from": "refs", "localField": "ref", "foreignField": "_id", "as": "r"}},
                doc! {"$project": {"label": {"$first": "$r.label"}}},
                doc! {"$sort": {"_id": 1}},
            ],
        ),
        (
            "lookup pipeline",
            vec![
                doc! {"$match": {"cat": "gamma", "n": {"$lt": 4}}},
                doc! {"$lookup": {
                    "from": "refs",
                    "let": {"r": "$ref"},
                    "pipeline": [{"$match": {"$expr": {"$lt": ["$_id", "$$r"]}}}, {"$count": "c"}],
                    "as": "below",
                }},
                doc! {"$project": {"below": 1}},
                doc! {"$sort": {"_id": 1}},
            ],
        ),
        (
            "facet",
            vec![doc! {"$facet": {
                "cats": [{"$sortByCount": "$cat"}, {"$sort": {"_id": 1}}],
                "top": [{"$sort": {"price": -1, "_id": 1}}, {"$limit": 3}, {"$project": {"price": 1}}],
                "count": [{"$count": "n"}],
            }}],
        ),
        (
            "bucket",
            vec![doc! {"$bucket": {
                "groupBy": "$price",
                "boundaries": [0, 25, 50, 75],
                "default": "high",
                "output": {"n": {"$sum": 1}, "maxN": {"$max": "$n"}, "q": {"$sum": "$qty"}},
            }}],
        ),
        (
            "bucketAuto",
            vec![
                doc! {"$bucketAuto": {"groupBy": "$k", "buckets": 4, "output": {"n": {"$sum": 1}}}},
            ],
        ),
        (
            "sortByCount",
            vec![
                doc! {"$unwind": "$tags"},
                doc! {"$sortByCount": "$tags"},
                doc! {"$sort": {"count": -1, "_id": 1}},
            ],
        ),
        (
            "project replaceRoot",
            vec![
                doc! {"$match": {"n": {"$in": [1, 2]}}},
                doc! {"$replaceRoot": {"newRoot": {"$mergeObjects": ["$sub", {"id": "$_id"}]}}},
                doc! {"$sort": {"id": 1}},
            ],
        ),
        (
            "addFields group on computed key",
            vec![
                doc! {"$set": {"band": {"$floor": {"$divide": ["$price", 20]}}}},
                doc! {"$group": {"_id": "$band", "n": {"$sum": 1}, "ids": {"$sum": "$_id"}}},
                doc! {"$sort": {"_id": 1}},
            ],
        ),
        (
            "unionWith",
            vec![
                doc! {"$match": {"n": 16}},
                doc! {"$project": {"_id": 1}},
                doc! {"$unionWith": {"coll": "refs", "pipeline": [{"$project": {"_id": 1}}]}},
                doc! {"$group": {"_id": null, "n": {"$sum": 1}, "s": {"$sum": "$_id"}}},
            ],
        ),
    ]
}

#[tokio::test]
async fn sharded_and_unsharded_copies_agree() {
    if compat_tests::embedded_only("a fleet shows one shard per server, not one per partition") {
        return;
    }
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    shard(&srv, "sharded", "k").await;
    let data = dataset();
    insert(&db, "sharded", data.clone()).await;
    insert(&db, "plain", data).await;
    insert(
        &db,
        "refs",
        (0..13)
            .map(|i| doc! {"_id": i, "label": format!("ref{i}")})
            .collect(),
    )
    .await;
    // The sharded copy really is spread over 8 partitions.
    let stats = agg(&db, "sharded", vec![doc! {"$collStats": {"count": {}}}]).await;
    assert_eq!(stats.len(), 8, "{stats:?}");
    assert!(
        stats.iter().filter(|d| num(d, "count") > 0).count() >= 6,
        "{stats:?}"
    );

    let pipelines = comparison_pipelines();
    assert!(pipelines.len() >= 15);
    let mut mismatches = Vec::new();
    for (name, pipeline) in pipelines {
        let sorted_by_pipeline = pipeline
            .iter()
            .rev()
            .find_map(|s| s.keys().next().cloned())
            .map(|k| k == "$sort" || k == "$limit" || k == "$project")
            .unwrap_or(false);
        let plain = coll(&db, "plain").aggregate(pipeline.clone()).await;
        let sharded = coll(&db, "sharded").aggregate(pipeline.clone()).await;
        let (plain, sharded) = match (plain, sharded) {
            (Ok(p), Ok(s)) => (
                p.try_collect::<Vec<Document>>().await,
                s.try_collect::<Vec<Document>>().await,
            ),
            (p, s) => {
                mismatches.push(format!(
                    "{name}: plain {:?} / sharded {:?}",
                    p.err(),
                    s.err()
                ));
                continue;
            }
        };
        let (plain, sharded) = match (plain, sharded) {
            (Ok(p), Ok(s)) => (p, s),
            (p, s) => {
                mismatches.push(format!(
                    "{name}: plain {:?} / sharded {:?}",
                    p.err(),
                    s.err()
                ));
                continue;
            }
        };
        if plain.is_empty() {
            mismatches.push(format!("{name}: no results on the unsharded copy"));
            continue;
        }
        let same = if sorted_by_pipeline {
            plain == sharded
        } else {
            as_set(&plain) == as_set(&sharded)
        };
        if !same {
            mismatches.push(format!(
                "{name}:\n  unsharded {plain:?}\n  sharded   {sharded:?}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} pipeline(s) differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

// ---------------------------------------------------------------------------
// explain
// ---------------------------------------------------------------------------

fn stage_names(part: &[Bson]) -> Vec<String> {
    part.iter()
        .map(|s| {
            s.as_document()
                .and_then(|d| d.keys().next().cloned())
                .unwrap_or_default()
        })
        .collect()
}

#[tokio::test]
async fn explain_shows_the_split_pipeline() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    shard(&srv, "s", "k").await;
    insert(
        &db,
        "s",
        (0..50)
            .map(|i| doc! {"_id": i, "k": i, "g": i % 4})
            .collect(),
    )
    .await;

    let reply = run(
        &db,
        doc! {
            "aggregate": "s",
            "pipeline": [
                {"$match": {"g": {"$gte": 1}}},
                {"$group": {"_id": "$g", "n": {"$sum": 1}}},
                {"$sort": {"_id": 1}},
            ],
            "explain": true,
        },
    )
    .await;
    assert_ok(&reply);
    let split = reply
        .get_document("splitPipeline")
        .unwrap_or_else(|_| panic!("no splitPipeline in {reply}"));
    let shards = split.get_array("shardsPart").expect("shardsPart");
    let merger = split.get_array("mergerPart").expect("mergerPart");
    let shard_stages = stage_names(shards);
    let merger_stages = stage_names(merger);
    assert!(shard_stages.contains(&"$match".to_string()), "{reply}");
    assert!(shard_stages.contains(&"$group".to_string()), "{reply}");
    assert!(merger_stages.contains(&"$group".to_string()), "{reply}");
    assert!(!merger_stages.contains(&"$match".to_string()), "{reply}");
    // The final sort runs at the router, after the merge.
    let g = merger_stages.iter().position(|s| s == "$group").unwrap();
    let s = merger_stages
        .iter()
        .position(|s| s == "$sort")
        .unwrap_or_else(|| panic!("no $sort in mergerPart: {reply}"));
    assert!(g < s, "{reply}");

    // $sort + $limit: each partition sorts with the limit.
    let reply = run(
        &db,
        doc! {
            "aggregate": "s",
            "pipeline": [{"$sort": {"k": -1}}, {"$limit": 5}],
            "explain": true,
        },
    )
    .await;
    let split = reply
        .get_document("splitPipeline")
        .unwrap_or_else(|_| panic!("no splitPipeline in {reply}"));
    let shards = split.get_array("shardsPart").expect("shardsPart");
    let sort = shards
        .iter()
        .filter_map(|s| s.as_document())
        .find_map(|d| d.get_document("$sort").ok())
        .unwrap_or_else(|| panic!("no $sort in shardsPart: {reply}"));
    assert_eq!(num(sort, "limit"), 5, "{reply}");
    split.get_array("mergerPart").expect("mergerPart");

    // The results of the explained pipeline itself.
    let got = agg(
        &db,
        "s",
        vec![doc! {"$sort": {"k": -1}}, doc! {"$limit": 5}],
    )
    .await;
    assert_eq!(
        ids(&got),
        (45..50).rev().map(Bson::Int32).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------
// memory limit and spilling
// ---------------------------------------------------------------------------

#[tokio::test]
async fn blocking_stages_spill_with_allow_disk_use() {
    let srv = TestServer::start_with_args(&["--max-blocking-stage-bytes", "100000"]).await;
    let db = srv.pinned_db(DB);
    // About 2 MB: 2000 documents with a 1 KB payload.
    let pad = "p".repeat(1000);
    let docs: Vec<Document> = (0..2000)
        .map(|i| doc! {"_id": i, "g": i % 50, "r": (i * 7919) % 2000, "pad": &pad})
        .collect();
    insert(&db, "big", docs).await;

    let group = vec![
        doc! {"$group": {"_id": "$g", "n": {"$sum": 1}, "pads": {"$push": "$pad"}, "s": {"$sum": "$_id"}}},
        doc! {"$project": {"n": 1, "s": 1, "np": {"$size": "$pads"}}},
        doc! {"$sort": {"_id": 1}},
    ];
    // No projection after the sort: MongoDB would otherwise sort only the
    // fields it needs, which fit in the limit.
    let sort = vec![doc! {"$sort": {"r": 1}}];
    for (name, pipeline) in [("group", &group), ("sort", &sort)] {
        let f = expect_command_error(
            &db,
            doc! {"aggregate": "big", "pipeline": pipeline.clone(), "allowDiskUse": false, "cursor": {}},
            292,
            "QueryExceededMemoryLimitNoDiskUseAllowed",
        )
        .await;
        assert!(!f.message.is_empty(), "{name}: {f:?}");
    }

    let got = agg_cmd(
        &db,
        doc! {"aggregate": "big", "pipeline": group, "allowDiskUse": true},
    )
    .await;
    assert_eq!(got.len(), 50);
    for (g, d) in got.iter().enumerate() {
        let g = g as i64;
        assert_eq!(num(d, "_id"), g, "{d}");
        assert_eq!(num(d, "n"), 40, "{d}");
        assert_eq!(num(d, "np"), 40, "{d}");
        // Sum of g, g+50, ..., g+1950.
        assert_eq!(num(d, "s"), 40 * g + 50 * (39 * 40 / 2), "{d}");
    }
    let got = agg_cmd(
        &db,
        doc! {"aggregate": "big", "pipeline": sort, "allowDiskUse": true},
    )
    .await;
    assert_eq!(got.len(), 2000);
    let rs: Vec<i64> = got.iter().map(|d| num(d, "r")).collect();
    assert_eq!(rs, (0..2000).collect::<Vec<i64>>());
    assert!(got
        .iter()
        .all(|d| d.get_str("pad").map(str::len) == Ok(1000)));
    // A streaming pipeline needs no memory: no error without allowDiskUse.
    let got = agg_cmd(
        &db,
        doc! {"aggregate": "big", "pipeline": [{"$match": {"g": 3}}, {"$project": {"pad": 0}}, {"$count": "n"}], "allowDiskUse": false},
    )
    .await;
    assert_eq!(got, vec![doc! {"n": 40}]);
    // $sort + small $limit keeps only the top k: within the limit.
    let got = agg_cmd(
        &db,
        doc! {"aggregate": "big", "pipeline": [{"$sort": {"r": -1}}, {"$limit": 3}, {"$project": {"r": 1, "_id": 0}}], "allowDiskUse": false},
    )
    .await;
    assert_eq!(
        got,
        vec![doc! {"r": 1999}, doc! {"r": 1998}, doc! {"r": 1997}]
    );
}

/// The spill files under the server's data directory.
fn spill_files(srv: &TestServer) -> usize {
    std::fs::read_dir(srv.data_dir().join("spill"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test]
async fn bucket_auto_spills_with_allow_disk_use() {
    let srv = TestServer::start_with_args(&["--max-blocking-stage-bytes", "100000"]).await;
    let db = srv.db(DB);
    // About 2 MB: 2000 documents with a 1 KB payload, 200 distinct values.
    let pad = "p".repeat(1000);
    let docs: Vec<Document> = (0..2000)
        .map(|i| doc! {"_id": i, "v": (i * 7919) % 200, "pad": &pad})
        .collect();
    insert(&db, "big", docs).await;
    let pipeline = vec![
        doc! {"$bucketAuto": {"groupBy": "$v", "buckets": 8, "output": {
            "n": {"$sum": 1}, "s": {"$sum": "$_id"}, "pads": {"$sum": {"$strLenCP": "$pad"}},
        }}},
    ];
    expect_command_error(
        &db,
        doc! {"aggregate": "big", "pipeline": pipeline.clone(), "allowDiskUse": false, "cursor": {}},
        292,
        "QueryExceededMemoryLimitNoDiskUseAllowed",
    )
    .await;

    let got = agg_cmd(
        &db,
        doc! {"aggregate": "big", "pipeline": pipeline, "allowDiskUse": true},
    )
    .await;
    // 200 values, 10 documents each, 25 values per bucket.
    assert_eq!(got.len(), 8, "{got:?}");
    for (b, d) in got.iter().enumerate() {
        let b = b as i64;
        let id = d.get_document("_id").unwrap();
        assert_eq!(num(id, "min"), 25 * b, "{d}");
        assert_eq!(
            num(id, "max"),
            if b == 7 { 199 } else { 25 * (b + 1) },
            "{d}"
        );
        assert_eq!(num(d, "n"), 250, "{d}");
        assert_eq!(num(d, "pads"), 250 * 1000, "{d}");
    }
    assert_eq!(
        got.iter().map(|d| num(d, "s")).sum::<i64>(),
        1999 * 2000 / 2
    );
    assert_eq!(spill_files(&srv), 0);
}

#[tokio::test]
async fn facet_spills_with_allow_disk_use() {
    let srv = TestServer::start_with_args(&["--max-blocking-stage-bytes", "100000"]).await;
    let db = srv.db(DB);
    let pad = "p".repeat(1000);
    let docs: Vec<Document> = (0..2000)
        .map(|i| doc! {"_id": i, "g": i % 4, "pad": &pad})
        .collect();
    insert(&db, "big", docs).await;
    // Every sub-pipeline's own state is small: only the shared input is big.
    let pipeline = vec![doc! {"$facet": {
        "count": [{"$count": "n"}],
        "byG": [
            {"$group": {"_id": "$g", "n": {"$sum": 1}, "len": {"$sum": {"$strLenCP": "$pad"}}}},
            {"$sort": {"_id": 1}},
        ],
        "last": [{"$match": {"_id": {"$gte": 1998}}}, {"$project": {"pad": 0}}],
    }}];
    expect_command_error(
        &db,
        doc! {"aggregate": "big", "pipeline": pipeline.clone(), "allowDiskUse": false, "cursor": {}},
        292,
        "QueryExceededMemoryLimitNoDiskUseAllowed",
    )
    .await;

    let got = agg_cmd(
        &db,
        doc! {"aggregate": "big", "pipeline": pipeline, "allowDiskUse": true},
    )
    .await;
    assert_eq!(got.len(), 1);
    let facets = &got[0];
    assert_eq!(
        facets.get_array("count").unwrap(),
        &vec![Bson::Document(doc! {"n": 2000})]
    );
    let by_g = facets.get_array("byG").unwrap();
    assert_eq!(by_g.len(), 4);
    for (g, d) in by_g.iter().enumerate() {
        let d = d.as_document().unwrap();
        assert_eq!(num(d, "_id"), g as i64, "{d}");
        assert_eq!(num(d, "n"), 500, "{d}");
        assert_eq!(num(d, "len"), 500 * 1000, "{d}");
    }
    let last: Vec<i64> = facets
        .get_array("last")
        .unwrap()
        .iter()
        .map(|d| num(d.as_document().unwrap(), "_id"))
        .collect();
    assert_eq!(last, vec![1998, 1999]);
    assert_eq!(spill_files(&srv), 0);
}

#[tokio::test]
async fn unknown_stage_is_named() {
    let srv = TestServer::start().await;
    let db = with_items(&srv).await;
    let f = expect_command_error(
        &db,
        doc! {"aggregate": "items", "pipeline": [{"$frobnicate": {}}], "cursor": {}},
        40324,
        "",
    )
    .await;
    assert!(f.message.contains("$frobnicate"), "{f:?}");
    // A stage document with two fields.
    expect_command_error(
        &db,
        doc! {"aggregate": "items", "pipeline": [{"$match": {}, "$limit": 1}], "cursor": {}},
        40323,
        "",
    )
    .await;
}
