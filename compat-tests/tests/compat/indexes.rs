//! Secondary indexes through the official driver, checked against what a
//! MongoDB 7.0 user sees.
//!
//! Covered: `createIndexes` (replies, idempotence, conflicts, bad specs),
//! `listIndexes` (the exact specs), `dropIndexes`, each kind of index
//! (compound, multikey, dotted paths, unique, sparse, partial, hashed),
//! builds over existing data, unique indexes on sharded collections, the
//! planner as `explain` reports it (unsharded and sharded shapes), and the
//! `validate` command. TTL and `collMod` are in `indexes_ttl.rs`, indexes
//! after `kill -9` in `indexes_crash.rs`.
//!
//! Every test starts its own server. The database is called `db` so that
//! duplicate-key messages read `collection: db.c` as in MongoDB's examples.

use std::collections::BTreeSet;

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    cursor_id, expect_command_error, expect_failure, first_batch,
    mongodb::{Collection, Database},
    num, TestServer,
};
use futures::TryStreamExt;

const DB: &str = "db";

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

/// `createIndexes` with `indexes`; asserts `ok` and returns the reply.
async fn create_indexes(db: &Database, coll: &str, indexes: Vec<Document>) -> Document {
    let reply = run(db, doc! {"createIndexes": coll, "indexes": indexes}).await;
    assert_ok(&reply);
    reply
}

/// One index spec with options.
fn spec(key: Document, name: &str, options: Document) -> Document {
    let mut d = doc! {"key": key, "name": name};
    for (k, v) in options {
        d.insert(k, v);
    }
    d
}

/// Runs a cursor-returning command and follows `getMore` to the end.
async fn drain(db: &Database, cmd: Document) -> Vec<Document> {
    compat_tests::drain_cursor(db, cmd).await
}

async fn list_indexes(db: &Database, coll: &str) -> Vec<Document> {
    drain(db, doc! {"listIndexes": coll}).await
}

async fn index_names(db: &Database, coll: &str) -> Vec<String> {
    list_indexes(db, coll)
        .await
        .iter()
        .map(|s| {
            s.get_str("name")
                .unwrap_or_else(|_| panic!("index spec without name: {s}"))
                .to_string()
        })
        .collect()
}

/// `find` on `coll` with `filter` and extra fields (`sort`, `hint`, ...).
async fn find(db: &Database, coll: &str, filter: Document, extra: Document) -> Vec<Document> {
    let mut cmd = doc! {"find": coll, "filter": filter};
    for (k, v) in extra {
        cmd.insert(k, v);
    }
    drain(db, cmd).await
}

/// `find` sorted by `_id`.
async fn find_by_id(db: &Database, coll: &str, filter: Document, extra: Document) -> Vec<Document> {
    let mut extra = extra;
    extra.insert("sort", doc! {"_id": 1});
    find(db, coll, filter, extra).await
}

fn ids(docs: &[Document]) -> Vec<Bson> {
    docs.iter()
        .map(|d| d.get("_id").cloned().unwrap_or(Bson::Null))
        .collect()
}

fn int_ids(docs: &[Document]) -> Vec<i64> {
    docs.iter().map(|d| num(d, "_id")).collect()
}

/// Numbers compared by value whatever their BSON type; documents keep
/// their field order.
fn norm(v: &Bson) -> Bson {
    match v {
        Bson::Int32(n) => Bson::Double(*n as f64),
        Bson::Int64(n) => Bson::Double(*n as f64),
        Bson::Document(d) => Bson::Document(d.iter().map(|(k, v)| (k.clone(), norm(v))).collect()),
        Bson::Array(a) => Bson::Array(a.iter().map(norm).collect()),
        other => other.clone(),
    }
}

fn norm_doc(d: &Document) -> Document {
    d.iter().map(|(k, v)| (k.clone(), norm(v))).collect()
}

/// A document's fields sorted by name, numbers by value (for projections,
/// whose field order is not the point).
fn flat(d: &Document) -> Vec<(String, Bson)> {
    let mut v: Vec<(String, Bson)> = d.iter().map(|(k, v)| (k.clone(), norm(v))).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Asserts an index spec holds exactly the fields of `want` (top-level
/// order free, numbers by value; the key pattern's order matters).
#[track_caller]
fn assert_spec(got: &Document, want: &Document) {
    assert_eq!(
        flat(got),
        flat(want),
        "index spec\n got: {got}\nwant: {want}"
    );
}

// --- explain ---------------------------------------------------------------

/// `explain` of a find command with `executionStats`.
async fn explain(db: &Database, find: Document) -> Document {
    let reply = run(db, doc! {"explain": find, "verbosity": "executionStats"}).await;
    assert_ok(&reply);
    reply
}

async fn explain_find(db: &Database, coll: &str, filter: Document, extra: Document) -> Document {
    let mut cmd = doc! {"find": coll, "filter": filter};
    for (k, v) in extra {
        cmd.insert(k, v);
    }
    explain(db, cmd).await
}

/// `queryPlanner.winningPlan` of an unsharded collection's explain.
#[track_caller]
fn winning_plan(explain: &Document) -> &Document {
    explain
        .get_document("queryPlanner")
        .and_then(|p| p.get_document("winningPlan"))
        .unwrap_or_else(|_| panic!("no queryPlanner.winningPlan in {explain}"))
}

/// The stage names of a plan, outermost first (`inputStage` and
/// `inputStages` followed, and the per-partition plans of a mongos-shaped
/// plan's `shards`, so the planner tests hold for either shape; the shape
/// of an unsharded collection's explain is checked on its own).
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
    if let Ok(inputs) = plan.get_array("inputStages") {
        for i in inputs.iter().filter_map(Bson::as_document) {
            collect_stages(i, out);
        }
    }
    if let Ok(shards) = plan.get_array("shards") {
        for s in shards.iter().filter_map(Bson::as_document) {
            if let Ok(p) = s.get_document("winningPlan") {
                collect_stages(p, out);
            }
        }
    }
}

/// The first stage called `name` in a plan.
fn find_stage<'a>(plan: &'a Document, name: &str) -> Option<&'a Document> {
    if plan.get_str("stage") == Ok(name) {
        return Some(plan);
    }
    if let Ok(input) = plan.get_document("inputStage") {
        if let Some(s) = find_stage(input, name) {
            return Some(s);
        }
    }
    if let Ok(inputs) = plan.get_array("inputStages") {
        for i in inputs.iter().filter_map(Bson::as_document) {
            if let Some(s) = find_stage(i, name) {
                return Some(s);
            }
        }
    }
    if let Ok(shards) = plan.get_array("shards") {
        for s in shards.iter().filter_map(Bson::as_document) {
            if let Some(s) = s
                .get_document("winningPlan")
                .ok()
                .and_then(|p| find_stage(p, name))
            {
                return Some(s);
            }
        }
    }
    None
}

/// Asserts the plan reads index `name` (no collection scan) and returns
/// its IXSCAN stage.
#[track_caller]
fn assert_ixscan(explain: &Document, name: &str) -> Document {
    let plan = winning_plan(explain);
    let names = stages(plan);
    let ix = find_stage(plan, "IXSCAN")
        .unwrap_or_else(|| panic!("expected IXSCAN of {name}, plan is {names:?}: {explain}"));
    assert_eq!(
        ix.get_str("indexName").ok(),
        Some(name),
        "IXSCAN of the wrong index: {explain}"
    );
    assert!(
        !names.iter().any(|s| s == "COLLSCAN"),
        "IXSCAN and COLLSCAN in one plan {names:?}: {explain}"
    );
    ix.clone()
}

#[track_caller]
fn assert_collscan(explain: &Document) {
    let plan = winning_plan(explain);
    let names = stages(plan);
    assert!(
        names.iter().any(|s| s == "COLLSCAN") && !names.iter().any(|s| s == "IXSCAN"),
        "expected COLLSCAN, plan is {names:?}: {explain}"
    );
}

#[track_caller]
fn has_stage(explain: &Document, name: &str) -> bool {
    stages(winning_plan(explain)).iter().any(|s| s == name)
}

/// `executionStats`' totals: (keys examined, documents examined, returned).
#[track_caller]
fn exec_totals(explain: &Document) -> (i64, i64, i64) {
    let stats = explain
        .get_document("executionStats")
        .unwrap_or_else(|_| panic!("no executionStats in {explain}"));
    (
        num(stats, "totalKeysExamined"),
        num(stats, "totalDocsExamined"),
        num(stats, "nReturned"),
    )
}

// ---------------------------------------------------------------------------
// createIndexes
// ---------------------------------------------------------------------------

#[tokio::test]
async fn create_indexes_reports_counts_and_is_idempotent() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);

    // Several at once, on a collection that does not exist yet.
    let reply = create_indexes(
        &db,
        "c",
        vec![
            spec(doc! {"a": 1}, "a_1", doc! {}),
            spec(doc! {"b": -1, "c": 1}, "b_-1_c_1", doc! {}),
        ],
    )
    .await;
    assert_eq!(num(&reply, "numIndexesBefore"), 1, "{reply}");
    assert_eq!(num(&reply, "numIndexesAfter"), 3, "{reply}");
    assert_eq!(
        reply.get_bool("createdCollectionAutomatically").ok(),
        Some(true),
        "{reply}"
    );
    assert!(
        db.list_collection_names()
            .await
            .unwrap()
            .contains(&"c".to_string()),
        "createIndexes created the collection"
    );

    // The identical specs again: nothing to do.
    let reply = create_indexes(
        &db,
        "c",
        vec![
            spec(doc! {"a": 1}, "a_1", doc! {}),
            spec(doc! {"b": -1, "c": 1}, "b_-1_c_1", doc! {}),
        ],
    )
    .await;
    assert_eq!(num(&reply, "numIndexesBefore"), 3, "{reply}");
    assert_eq!(num(&reply, "numIndexesAfter"), 3, "{reply}");
    assert_eq!(
        reply.get_str("note").ok(),
        Some("all indexes already exist"),
        "{reply}"
    );
    assert_ne!(
        reply.get_bool("createdCollectionAutomatically").ok(),
        Some(true),
        "{reply}"
    );

    // One existing and one new: only the new one is built.
    let reply = create_indexes(
        &db,
        "c",
        vec![
            spec(doc! {"a": 1}, "a_1", doc! {}),
            spec(doc! {"d": 1}, "d_1", doc! {}),
        ],
    )
    .await;
    assert_eq!(num(&reply, "numIndexesBefore"), 3, "{reply}");
    assert_eq!(num(&reply, "numIndexesAfter"), 4, "{reply}");
    assert_eq!(
        reply.get_bool("createdCollectionAutomatically").ok(),
        Some(false),
        "{reply}"
    );
    assert!(reply.get("note").is_none(), "{reply}");

    // On an existing collection with data.
    coll(&db, "full")
        .insert_many((0..10).map(|i| doc! {"_id": i, "x": i}).collect::<Vec<_>>())
        .await
        .unwrap();
    let reply = create_indexes(&db, "full", vec![spec(doc! {"x": 1}, "x_1", doc! {})]).await;
    assert_eq!(num(&reply, "numIndexesBefore"), 1, "{reply}");
    assert_eq!(num(&reply, "numIndexesAfter"), 2, "{reply}");
    assert_eq!(
        reply.get_bool("createdCollectionAutomatically").ok(),
        Some(false),
        "{reply}"
    );

    assert_eq!(
        index_names(&db, "c").await,
        vec!["_id_", "a_1", "b_-1_c_1", "d_1"]
    );

    // The driver's own helpers see the same.
    let c = coll(&db, "c");
    let name = c
        .create_index(
            compat_tests::mongodb::IndexModel::builder()
                .keys(doc! {"e": 1})
                .build(),
        )
        .await
        .unwrap()
        .index_name;
    assert_eq!(name, "e_1");
    let mut names = c.list_index_names().await.unwrap();
    names.sort();
    assert_eq!(names, vec!["_id_", "a_1", "b_-1_c_1", "d_1", "e_1"]);
}

#[tokio::test]
async fn create_indexes_conflicts_answer_85_and_86() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    create_indexes(&db, "c", vec![spec(doc! {"a": 1}, "a_1", doc! {})]).await;

    // Same name, another key.
    let f = expect_command_error(
        &db,
        doc! {"createIndexes": "c", "indexes": [spec(doc! {"b": 1}, "a_1", doc! {})]},
        86,
        "IndexKeySpecsConflict",
    )
    .await;
    assert!(f.message.contains("a_1"), "{f:?}");

    // Same key, another name.
    let f = expect_command_error(
        &db,
        doc! {"createIndexes": "c", "indexes": [spec(doc! {"a": 1}, "other", doc! {})]},
        85,
        "IndexOptionsConflict",
    )
    .await;
    assert!(f.message.contains("a_1"), "{f:?}");

    // Same name and key, other options.
    expect_command_error(
        &db,
        doc! {"createIndexes": "c", "indexes": [spec(doc! {"a": 1}, "a_1", doc! {"unique": true})]},
        85,
        "IndexOptionsConflict",
    )
    .await;

    // Nothing changed.
    let listed = list_indexes(&db, "c").await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_spec(&listed[1], &doc! {"v": 2, "key": {"a": 1}, "name": "a_1"});
}

#[tokio::test]
async fn create_indexes_rejects_bad_specs() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    coll(&db, "c")
        .insert_one(doc! {"_id": 1, "a": 1})
        .await
        .unwrap();

    let cases: Vec<(Document, i32, &str)> = vec![
        (spec(doc! {"a": 0}, "a_0", doc! {}), 67, "CannotCreateIndex"),
        (
            spec(doc! {"a": "geoHaystack"}, "a_geoHaystack", doc! {}),
            67,
            "CannotCreateIndex",
        ),
        (
            spec(doc! {"a": "nosuchkind"}, "a_x", doc! {}),
            67,
            "CannotCreateIndex",
        ),
        (
            spec(doc! {"a": 1}, "a_1", doc! {"nosuchoption": true}),
            197,
            "InvalidIndexSpecificationOption",
        ),
        (
            spec(doc! {"a": "hashed"}, "a_hashed", doc! {"unique": true}),
            67,
            "CannotCreateIndex",
        ),
        (
            spec(
                doc! {"a": 1, "b": 1},
                "a_1_b_1",
                doc! {"expireAfterSeconds": 60},
            ),
            67,
            "CannotCreateIndex",
        ),
        (
            spec(
                doc! {"a": "hashed"},
                "a_hashed",
                doc! {"collation": {"locale": "fr", "strength": 2}},
            ),
            67,
            "CannotCreateIndex",
        ),
    ];
    for (bad, code, code_name) in cases {
        expect_command_error(
            &db,
            doc! {"createIndexes": "c", "indexes": [bad]},
            code,
            code_name,
        )
        .await;
    }

    // A good spec beside a bad one: neither is built.
    expect_command_error(
        &db,
        doc! {"createIndexes": "c", "indexes": [
            spec(doc! {"b": 1}, "b_1", doc! {}),
            spec(doc! {"a": 1}, "a_1", doc! {"nosuchoption": 1}),
        ]},
        197,
        "InvalidIndexSpecificationOption",
    )
    .await;

    assert_eq!(index_names(&db, "c").await, vec!["_id_"]);
    // The collection is untouched.
    assert_eq!(
        coll(&db, "c").find_one(doc! {}).await.unwrap(),
        Some(doc! {"_id": 1, "a": 1})
    );
}

// ---------------------------------------------------------------------------
// listIndexes
// ---------------------------------------------------------------------------

#[tokio::test]
async fn list_indexes_shows_the_exact_specs() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    create_indexes(
        &db,
        "c",
        vec![
            spec(doc! {"a": 1}, "a_1", doc! {}),
            spec(doc! {"b": -1, "c": 1}, "b_-1_c_1", doc! {}),
            spec(doc! {"u": 1}, "u_1", doc! {"unique": true}),
            spec(doc! {"s": 1}, "s_1", doc! {"sparse": true}),
            spec(
                doc! {"p": 1},
                "p_1",
                doc! {"partialFilterExpression": {"q": {"$gt": 5}}},
            ),
            spec(doc! {"t": 1}, "t_1", doc! {"expireAfterSeconds": 3600}),
            spec(doc! {"h": "hashed"}, "h_hashed", doc! {}),
            spec(doc! {"x.y": 1}, "x.y_1", doc! {}),
            spec(doc! {"z": 1}, "my_z", doc! {"hidden": true}),
        ],
    )
    .await;

    let want = vec![
        doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"},
        doc! {"v": 2, "key": {"a": 1}, "name": "a_1"},
        doc! {"v": 2, "key": {"b": -1, "c": 1}, "name": "b_-1_c_1"},
        doc! {"v": 2, "key": {"u": 1}, "name": "u_1", "unique": true},
        doc! {"v": 2, "key": {"s": 1}, "name": "s_1", "sparse": true},
        doc! {"v": 2, "key": {"p": 1}, "name": "p_1", "partialFilterExpression": {"q": {"$gt": 5}}},
        doc! {"v": 2, "key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 3600},
        doc! {"v": 2, "key": {"h": "hashed"}, "name": "h_hashed"},
        doc! {"v": 2, "key": {"x.y": 1}, "name": "x.y_1"},
        doc! {"v": 2, "key": {"z": 1}, "name": "my_z", "hidden": true},
    ];
    let got = list_indexes(&db, "c").await;
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(&want) {
        assert_spec(g, w);
    }
    // `_id_` exactly as MongoDB lists it, `v` an int.
    assert_eq!(got[0], doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"});

    // A small batch size: the rest comes through getMore.
    let reply = run(&db, doc! {"listIndexes": "c", "cursor": {"batchSize": 2}}).await;
    assert_eq!(first_batch(&reply).len(), 2, "{reply}");
    assert_ne!(cursor_id(&reply), 0, "{reply}");
    let paged = drain(&db, doc! {"listIndexes": "c", "cursor": {"batchSize": 2}}).await;
    assert_eq!(paged, got);

    // The driver parses every spec.
    let models: Vec<_> = coll(&db, "c")
        .list_indexes()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(models.len(), want.len());
    let u = models
        .iter()
        .find(|m| m.keys == doc! {"u": 1})
        .expect("u_1 listed");
    assert_eq!(u.options.as_ref().and_then(|o| o.unique), Some(true));
    let t = models
        .iter()
        .find(|m| m.keys == doc! {"t": 1})
        .expect("t_1 listed");
    assert_eq!(
        t.options.as_ref().and_then(|o| o.expire_after),
        Some(std::time::Duration::from_secs(3600))
    );

    // The collection exists only once it does.
    expect_command_error(
        &db,
        doc! {"listIndexes": "missing"},
        26,
        "NamespaceNotFound",
    )
    .await;
    // An empty collection has its `_id` index.
    db.create_collection("empty").await.unwrap();
    let listed = list_indexes(&db, "empty").await;
    assert_eq!(
        listed,
        vec![doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"}]
    );
}

#[tokio::test]
async fn indexes_survive_a_restart() {
    let mut srv = TestServer::start().await;
    let db = srv.db(DB);
    coll(&db, "c")
        .insert_many(
            (0..200)
                .map(|i| doc! {"_id": i, "a": i % 20, "u": i})
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    create_indexes(
        &db,
        "c",
        vec![
            spec(doc! {"a": 1}, "a_1", doc! {}),
            spec(doc! {"u": 1}, "u_1", doc! {"unique": true}),
        ],
    )
    .await;
    let before = list_indexes(&db, "c").await;

    srv.restart().await;
    let db = srv.db(DB);
    assert_eq!(list_indexes(&db, "c").await, before);
    let e = explain_find(&db, "c", doc! {"a": 3}, doc! {}).await;
    assert_ixscan(&e, "a_1");
    let got = find_by_id(&db, "c", doc! {"a": 3}, doc! {}).await;
    assert_eq!(
        int_ids(&got),
        (0..200).filter(|i| i % 20 == 3).collect::<Vec<i64>>()
    );
    expect_failure(
        coll(&db, "c").insert_one(doc! {"_id": 1000, "u": 5}).await,
        11000,
        "",
    );
}

// ---------------------------------------------------------------------------
// dropIndexes
// ---------------------------------------------------------------------------

#[tokio::test]
async fn drop_indexes_by_name_pattern_list_and_star() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    coll(&db, "c")
        .insert_many(
            (0..50)
                .map(|i| doc! {"_id": i, "a": i % 5, "b": i, "c": i, "d": i, "u": i})
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    create_indexes(
        &db,
        "c",
        vec![
            spec(doc! {"a": 1}, "a_1", doc! {}),
            spec(doc! {"b": 1}, "b_1", doc! {}),
            spec(doc! {"c": -1}, "c_-1", doc! {}),
            spec(doc! {"d": 1}, "d_1", doc! {}),
            spec(doc! {"u": 1}, "u_1", doc! {"unique": true}),
        ],
    )
    .await;

    // By name.
    let reply = run(&db, doc! {"dropIndexes": "c", "index": "a_1"}).await;
    assert_ok(&reply);
    assert_eq!(num(&reply, "nIndexesWas"), 6, "{reply}");
    assert_eq!(
        index_names(&db, "c").await,
        vec!["_id_", "b_1", "c_-1", "d_1", "u_1"]
    );
    // Queries on the field still answer, by scanning.
    let e = explain_find(&db, "c", doc! {"a": 2}, doc! {}).await;
    assert_collscan(&e);
    assert_eq!(find_by_id(&db, "c", doc! {"a": 2}, doc! {}).await.len(), 10);

    // By key pattern.
    let reply = run(&db, doc! {"dropIndexes": "c", "index": {"c": -1}}).await;
    assert_eq!(num(&reply, "nIndexesWas"), 5, "{reply}");
    assert_eq!(
        index_names(&db, "c").await,
        vec!["_id_", "b_1", "d_1", "u_1"]
    );

    // A list with an unknown name drops nothing.
    expect_command_error(
        &db,
        doc! {"dropIndexes": "c", "index": ["b_1", "nope"]},
        27,
        "IndexNotFound",
    )
    .await;
    assert_eq!(
        index_names(&db, "c").await,
        vec!["_id_", "b_1", "d_1", "u_1"]
    );

    // A list of names.
    let reply = run(&db, doc! {"dropIndexes": "c", "index": ["b_1", "d_1"]}).await;
    assert_eq!(num(&reply, "nIndexesWas"), 4, "{reply}");
    assert_eq!(index_names(&db, "c").await, vec!["_id_", "u_1"]);

    // The `_id` index stays, by name or pattern.
    let f = expect_command_error(
        &db,
        doc! {"dropIndexes": "c", "index": "_id_"},
        72,
        "InvalidOptions",
    )
    .await;
    assert!(f.message.contains("_id"), "{f:?}");
    expect_command_error(
        &db,
        doc! {"dropIndexes": "c", "index": {"_id": 1}},
        72,
        "InvalidOptions",
    )
    .await;

    // Unknown names and patterns.
    let f = expect_command_error(
        &db,
        doc! {"dropIndexes": "c", "index": "nope"},
        27,
        "IndexNotFound",
    )
    .await;
    assert!(f.message.contains("nope"), "{f:?}");
    expect_command_error(
        &db,
        doc! {"dropIndexes": "c", "index": {"zz": 1}},
        27,
        "IndexNotFound",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"dropIndexes": "missing", "index": "a_1"},
        26,
        "NamespaceNotFound",
    )
    .await;

    // Once the unique index is gone, duplicates are accepted.
    create_indexes(&db, "c", vec![spec(doc! {"e": 1}, "e_1", doc! {})]).await;
    let reply = run(&db, doc! {"dropIndexes": "c", "index": "*"}).await;
    assert_ok(&reply);
    assert_eq!(num(&reply, "nIndexesWas"), 3, "{reply}");
    assert_eq!(index_names(&db, "c").await, vec!["_id_"]);
    coll(&db, "c")
        .insert_one(doc! {"_id": 100, "u": 1})
        .await
        .expect("no unique index any more");

    // Through the driver.
    create_indexes(&db, "c", vec![spec(doc! {"f": 1}, "f_1", doc! {})]).await;
    coll(&db, "c").drop_index("f_1").await.unwrap();
    assert_eq!(index_names(&db, "c").await, vec!["_id_"]);

    // Dropping the collection drops its indexes.
    create_indexes(&db, "c", vec![spec(doc! {"g": 1}, "g_1", doc! {})]).await;
    coll(&db, "c").drop().await.unwrap();
    coll(&db, "c").insert_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(index_names(&db, "c").await, vec!["_id_"]);
}

// ---------------------------------------------------------------------------
// kinds
// ---------------------------------------------------------------------------

#[tokio::test]
async fn multikey_indexes_find_array_elements() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    create_indexes(&db, "c", vec![spec(doc! {"a": 1}, "a_1", doc! {})]).await;
    c.insert_many(vec![
        doc! {"_id": 1, "a": [1, 2]},
        doc! {"_id": 2, "a": 2},
        doc! {"_id": 3, "a": [3, 3, 4]},
        doc! {"_id": 4, "a": []},
        doc! {"_id": 5, "a": [[1]]},
        doc! {"_id": 6},
        doc! {"_id": 7, "a": null},
    ])
    .await
    .unwrap();

    let e = explain_find(&db, "c", doc! {"a": 1}, doc! {}).await;
    let ix = assert_ixscan(&e, "a_1");
    assert_eq!(ix.get_bool("isMultiKey").ok(), Some(true), "{e}");

    let expected: Vec<(Document, Vec<i64>)> = vec![
        (doc! {"a": 1}, vec![1]),
        (doc! {"a": 2}, vec![1, 2]),
        (doc! {"a": 3}, vec![3]),
        // Each document once, whatever the number of its matching keys.
        (doc! {"a": {"$gt": 1}}, vec![1, 2, 3]),
        (doc! {"a": {"$gte": 3}}, vec![3]),
        // Different elements may satisfy each bound.
        (doc! {"a": {"$gt": 1, "$lt": 2}}, vec![1]),
        (doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 2}}}, vec![]),
        (doc! {"a": {"$in": [1, 4]}}, vec![1, 3]),
        (doc! {"a": [1, 2]}, vec![1]),
        (doc! {"a": [1]}, vec![5]),
        (doc! {"a": []}, vec![4]),
        (doc! {"a": null}, vec![6, 7]),
    ];
    for (filter, want) in expected {
        let natural = find_by_id(&db, "c", filter.clone(), doc! {"hint": {"$natural": 1}}).await;
        assert_eq!(int_ids(&natural), want, "collection scan of {filter}");
        let hinted = find_by_id(&db, "c", filter.clone(), doc! {"hint": "a_1"}).await;
        assert_eq!(
            hinted, natural,
            "a_1 answers {filter} like a collection scan"
        );
        let planned = find_by_id(&db, "c", filter.clone(), doc! {}).await;
        assert_eq!(planned, natural, "{filter} without hint");
    }

    // A multikey index keeps a sort correct (by the smallest element).
    let sorted = find(
        &db,
        "c",
        doc! {"a": {"$gte": 1}},
        doc! {"sort": {"a": 1, "_id": 1}},
    )
    .await;
    let natural = find(
        &db,
        "c",
        doc! {"a": {"$gte": 1}},
        doc! {"sort": {"a": 1, "_id": 1}, "hint": {"$natural": 1}},
    )
    .await;
    assert_eq!(sorted, natural);

    // Updates move keys: the old elements no longer find the document.
    c.update_one(doc! {"_id": 1}, doc! {"$set": {"a": [8, 9]}})
        .await
        .unwrap();
    assert!(int_ids(&find_by_id(&db, "c", doc! {"a": 1}, doc! {}).await).is_empty());
    assert_eq!(
        int_ids(&find_by_id(&db, "c", doc! {"a": 9}, doc! {}).await),
        vec![1]
    );
    c.update_one(doc! {"_id": 3}, doc! {"$pull": {"a": 4}})
        .await
        .unwrap();
    assert!(int_ids(&find_by_id(&db, "c", doc! {"a": 4}, doc! {"hint": "a_1"}).await).is_empty());
}

#[tokio::test]
async fn compound_index_refuses_parallel_arrays() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    create_indexes(
        &db,
        "c",
        vec![spec(doc! {"a": 1, "b": 1}, "a_1_b_1", doc! {})],
    )
    .await;

    // One array per document is fine, in either field.
    c.insert_one(doc! {"_id": 1, "a": [1, 2], "b": 3})
        .await
        .unwrap();
    c.insert_one(doc! {"_id": 2, "a": 1, "b": [3, 4]})
        .await
        .unwrap();

    let f = expect_failure(
        c.insert_one(doc! {"_id": 3, "a": [1, 2], "b": [3, 4]})
            .await,
        171,
        "CannotIndexParallelArrays",
    );
    assert!(f.message.contains("cannot index parallel arrays"), "{f:?}");
    assert_eq!(c.find_one(doc! {"_id": 3}).await.unwrap(), None);

    // An update that would make two arrays is refused; the document stays.
    expect_failure(
        c.update_one(doc! {"_id": 1}, doc! {"$set": {"b": [5, 6]}})
            .await,
        171,
        "CannotIndexParallelArrays",
    );
    assert_eq!(
        c.find_one(doc! {"_id": 1}).await.unwrap(),
        Some(doc! {"_id": 1, "a": [1, 2], "b": 3})
    );

    // Both kinds of document are found through the index.
    let got = find_by_id(&db, "c", doc! {"a": 1, "b": 3}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![1, 2]);
    let e = explain_find(&db, "c", doc! {"a": 1, "b": 3}, doc! {}).await;
    let ix = assert_ixscan(&e, "a_1_b_1");
    assert_eq!(ix.get_bool("isMultiKey").ok(), Some(true), "{e}");

    // Building the index over such a document fails, and builds nothing.
    let c2 = coll(&db, "c2");
    c2.insert_many(vec![
        doc! {"_id": 1, "a": [1], "b": 1},
        doc! {"_id": 2, "a": [1, 2], "b": [1, 2]},
    ])
    .await
    .unwrap();
    expect_command_error(
        &db,
        doc! {"createIndexes": "c2", "indexes": [spec(doc! {"a": 1, "b": 1}, "a_1_b_1", doc! {})]},
        171,
        "CannotIndexParallelArrays",
    )
    .await;
    assert_eq!(index_names(&db, "c2").await, vec!["_id_"]);
}

#[tokio::test]
async fn dotted_paths_index_sub_documents_and_arrays_of_them() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    create_indexes(&db, "c", vec![spec(doc! {"a.b": 1}, "a.b_1", doc! {})]).await;
    coll(&db, "c")
        .insert_many(vec![
            doc! {"_id": 1, "a": {"b": 1}},
            doc! {"_id": 2, "a": [{"b": 2}, {"b": 3}]},
            doc! {"_id": 3, "a": {"c": 1}},
            doc! {"_id": 4, "a": 5},
            doc! {"_id": 5},
            doc! {"_id": 6, "a": [{"b": 1}, {"c": 2}]},
            doc! {"_id": 7, "a": {"b": [4, 5]}},
            doc! {"_id": 8, "a": {"b": {"c": 1}}},
        ])
        .await
        .unwrap();

    let e = explain_find(&db, "c", doc! {"a.b": 3}, doc! {}).await;
    let ix = assert_ixscan(&e, "a.b_1");
    assert_eq!(ix.get_bool("isMultiKey").ok(), Some(true), "{e}");
    assert_eq!(
        norm_doc(ix.get_document("keyPattern").unwrap()),
        norm_doc(&doc! {"a.b": 1}),
        "{e}"
    );

    let expected: Vec<(Document, Vec<i64>)> = vec![
        (doc! {"a.b": 1}, vec![1, 6]),
        (doc! {"a.b": 3}, vec![2]),
        (doc! {"a.b": 5}, vec![7]),
        (doc! {"a.b": {"$gte": 2, "$lte": 4}}, vec![2, 7]),
        (doc! {"a.b": {"c": 1}}, vec![8]),
        (doc! {"a.b": {"$in": [1, 4]}}, vec![1, 6, 7]),
        (doc! {"a.b": null}, vec![3, 4, 5, 6]),
        (doc! {"a.b": {"$exists": true}}, vec![1, 2, 6, 7, 8]),
    ];
    for (filter, want) in expected {
        let natural = find_by_id(&db, "c", filter.clone(), doc! {"hint": {"$natural": 1}}).await;
        assert_eq!(int_ids(&natural), want, "collection scan of {filter}");
        let hinted = find_by_id(&db, "c", filter.clone(), doc! {"hint": "a.b_1"}).await;
        assert_eq!(
            hinted, natural,
            "a.b_1 answers {filter} like a collection scan"
        );
        let planned = find_by_id(&db, "c", filter.clone(), doc! {}).await;
        assert_eq!(planned, natural, "{filter} without hint");
    }
}

/// The raw `insert` reply for `docs`.
async fn raw_insert(db: &Database, coll: &str, docs: Vec<Document>, ordered: bool) -> Document {
    let reply = run(
        db,
        doc! {"insert": coll, "documents": docs, "ordered": ordered},
    )
    .await;
    assert_ok(&reply);
    reply
}

#[track_caller]
fn write_errors(reply: &Document) -> Vec<Document> {
    reply
        .get_array("writeErrors")
        .map(|a| a.iter().filter_map(Bson::as_document).cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn unique_index_reports_duplicates_like_mongodb() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    create_indexes(
        &db,
        "c",
        vec![spec(doc! {"a": 1}, "a_1", doc! {"unique": true})],
    )
    .await;
    c.insert_one(doc! {"_id": 1, "a": 1}).await.unwrap();

    let reply = raw_insert(&db, "c", vec![doc! {"_id": 2, "a": 1}], true).await;
    assert_eq!(num(&reply, "n"), 0, "{reply}");
    let errors = write_errors(&reply);
    assert_eq!(errors.len(), 1, "{reply}");
    let w = &errors[0];
    assert_eq!(num(w, "index"), 0, "{reply}");
    assert_eq!(num(w, "code"), 11000, "{reply}");
    assert_eq!(
        w.get_str("errmsg").ok(),
        Some("E11000 duplicate key error collection: db.c index: a_1 dup key: { a: 1 }"),
        "{reply}"
    );
    assert_eq!(
        norm_doc(
            w.get_document("keyPattern")
                .unwrap_or_else(|_| panic!("no keyPattern: {reply}"))
        ),
        norm_doc(&doc! {"a": 1}),
        "{reply}"
    );
    assert_eq!(
        norm_doc(
            w.get_document("keyValue")
                .unwrap_or_else(|_| panic!("no keyValue: {reply}"))
        ),
        norm_doc(&doc! {"a": 1}),
        "{reply}"
    );
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);

    // Through the driver: a write error with code 11000.
    let f = expect_failure(c.insert_one(doc! {"_id": 3, "a": 1}).await, 11000, "");
    assert!(f.message.starts_with("E11000 duplicate key error"), "{f:?}");

    // Equal numbers of other types are duplicates too.
    expect_failure(c.insert_one(doc! {"_id": 4, "a": 1.0}).await, 11000, "");
    expect_failure(c.insert_one(doc! {"_id": 5, "a": 1i64}).await, 11000, "");
    // Other values are not.
    c.insert_one(doc! {"_id": 6, "a": "1"}).await.unwrap();
    c.insert_one(doc! {"_id": 7, "a": [2, 3]}).await.unwrap();
    // An array element is a key: 3 is taken now.
    expect_failure(c.insert_one(doc! {"_id": 8, "a": 3}).await, 11000, "");

    // A missing field is a null key: only one document may lack it.
    c.insert_one(doc! {"_id": 9}).await.unwrap();
    let reply = raw_insert(&db, "c", vec![doc! {"_id": 10}], true).await;
    let errors = write_errors(&reply);
    assert_eq!(errors.len(), 1, "{reply}");
    assert_eq!(
        errors[0].get_str("errmsg").ok(),
        Some("E11000 duplicate key error collection: db.c index: a_1 dup key: { a: null }"),
        "{reply}"
    );
    assert_eq!(
        errors[0].get_document("keyValue").ok(),
        Some(&doc! {"a": Bson::Null}),
        "{reply}"
    );

    // A compound unique index names every field.
    create_indexes(
        &db,
        "d",
        vec![spec(
            doc! {"x": 1, "y": -1},
            "x_1_y_-1",
            doc! {"unique": true},
        )],
    )
    .await;
    let d = coll(&db, "d");
    d.insert_one(doc! {"_id": 1, "x": 1, "y": "a"})
        .await
        .unwrap();
    d.insert_one(doc! {"_id": 2, "x": 1, "y": "b"})
        .await
        .unwrap();
    let reply = raw_insert(&db, "d", vec![doc! {"_id": 3, "x": 1, "y": "a"}], true).await;
    let errors = write_errors(&reply);
    assert_eq!(errors.len(), 1, "{reply}");
    assert_eq!(num(&errors[0], "code"), 11000, "{reply}");
    assert_eq!(
        errors[0].get_str("errmsg").ok(),
        Some("E11000 duplicate key error collection: db.d index: x_1_y_-1 dup key: { x: 1, y: \"a\" }"),
        "{reply}"
    );
    assert_eq!(
        norm_doc(errors[0].get_document("keyPattern").unwrap()),
        norm_doc(&doc! {"x": 1, "y": -1}),
        "{reply}"
    );
    assert_eq!(
        norm_doc(errors[0].get_document("keyValue").unwrap()),
        norm_doc(&doc! {"x": 1, "y": "a"}),
        "{reply}"
    );
}

#[tokio::test]
async fn unique_violations_in_ordered_and_unordered_batches() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    create_indexes(
        &db,
        "c",
        vec![spec(doc! {"a": 1}, "a_1", doc! {"unique": true})],
    )
    .await;
    c.insert_one(doc! {"_id": 1, "a": 1}).await.unwrap();

    // Ordered: stops at the first duplicate; n counts the ones before.
    let reply = raw_insert(
        &db,
        "c",
        vec![
            doc! {"_id": 2, "a": 2},
            doc! {"_id": 3, "a": 3},
            doc! {"_id": 4, "a": 1},
            doc! {"_id": 5, "a": 5},
        ],
        true,
    )
    .await;
    assert_eq!(num(&reply, "n"), 2, "{reply}");
    let errors = write_errors(&reply);
    assert_eq!(errors.len(), 1, "{reply}");
    assert_eq!(num(&errors[0], "index"), 2, "{reply}");
    assert_eq!(num(&errors[0], "code"), 11000, "{reply}");
    let all = find_by_id(&db, "c", doc! {}, doc! {}).await;
    assert_eq!(int_ids(&all), vec![1, 2, 3]);

    // A duplicate within the batch itself.
    let reply = raw_insert(
        &db,
        "c",
        vec![
            doc! {"_id": 6, "a": 6},
            doc! {"_id": 7, "a": 6},
            doc! {"_id": 8, "a": 8},
        ],
        true,
    )
    .await;
    assert_eq!(num(&reply, "n"), 1, "{reply}");
    let errors = write_errors(&reply);
    assert_eq!(errors.len(), 1, "{reply}");
    assert_eq!(num(&errors[0], "index"), 1, "{reply}");

    // Unordered: everything else goes in, one write error per duplicate.
    let reply = raw_insert(
        &db,
        "c",
        vec![
            doc! {"_id": 10, "a": 10},
            doc! {"_id": 11, "a": 1},
            doc! {"_id": 12, "a": 12},
            doc! {"_id": 13, "a": 10},
            doc! {"_id": 14, "a": 14},
            doc! {"_id": 15, "a": 2},
        ],
        false,
    )
    .await;
    assert_eq!(num(&reply, "n"), 3, "{reply}");
    let errors = write_errors(&reply);
    let indexes: Vec<i64> = errors.iter().map(|w| num(w, "index")).collect();
    assert_eq!(indexes, vec![1, 3, 5], "{reply}");
    for w in &errors {
        assert_eq!(num(w, "code"), 11000, "{reply}");
        assert!(w.get_document("keyValue").is_ok(), "{reply}");
    }
    let all = find_by_id(&db, "c", doc! {}, doc! {}).await;
    assert_eq!(int_ids(&all), vec![1, 2, 3, 6, 10, 12, 14]);

    // The index agrees with the collection.
    for a in [1, 2, 3, 6, 10, 12, 14] {
        let got = find(&db, "c", doc! {"a": a}, doc! {"hint": "a_1"}).await;
        assert_eq!(got.len(), 1, "a = {a}: {got:?}");
        assert_eq!(num(&got[0], "_id"), a as i64, "a = {a}");
    }
    assert!(find(&db, "c", doc! {"a": 5}, doc! {"hint": "a_1"})
        .await
        .is_empty());
}

#[tokio::test]
async fn unique_index_checks_updates() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    create_indexes(
        &db,
        "c",
        vec![spec(doc! {"a": 1}, "a_1", doc! {"unique": true})],
    )
    .await;
    c.insert_many(vec![doc! {"_id": 1, "a": 1}, doc! {"_id": 2, "a": 2}])
        .await
        .unwrap();

    let f = expect_failure(
        c.update_one(doc! {"_id": 2}, doc! {"$set": {"a": 1}}).await,
        11000,
        "",
    );
    assert!(f.message.contains("dup key: { a: 1 }"), "{f:?}");
    assert_eq!(
        c.find_one(doc! {"_id": 2}).await.unwrap(),
        Some(doc! {"_id": 2, "a": 2})
    );
    expect_failure(
        c.replace_one(doc! {"_id": 2}, doc! {"a": 1, "r": true})
            .await,
        11000,
        "",
    );
    assert_eq!(
        c.find_one(doc! {"_id": 2}).await.unwrap(),
        Some(doc! {"_id": 2, "a": 2})
    );
    expect_failure(
        c.find_one_and_update(doc! {"_id": 2}, doc! {"$set": {"a": 1}})
            .await,
        11000,
        "",
    );

    // Another field of the same document: no conflict with itself.
    c.update_one(doc! {"_id": 1}, doc! {"$set": {"b": 1}})
        .await
        .unwrap();
    // Moving to a free value frees the old one.
    c.update_one(doc! {"_id": 2}, doc! {"$set": {"a": 3}})
        .await
        .unwrap();
    c.insert_one(doc! {"_id": 4, "a": 2}).await.unwrap();
    // Deleting frees the value.
    c.delete_one(doc! {"_id": 1}).await.unwrap();
    c.insert_one(doc! {"_id": 5, "a": 1}).await.unwrap();
    // An upsert that would duplicate fails.
    expect_failure(
        c.update_one(doc! {"_id": 6}, doc! {"$set": {"a": 3}})
            .upsert(true)
            .await,
        11000,
        "",
    );
    assert_eq!(c.find_one(doc! {"_id": 6}).await.unwrap(), None);

    let all = find_by_id(&db, "c", doc! {}, doc! {}).await;
    assert_eq!(
        all,
        vec![
            doc! {"_id": 2, "a": 3},
            doc! {"_id": 4, "a": 2},
            doc! {"_id": 5, "a": 1},
        ]
    );
}

#[tokio::test]
async fn unique_index_build_over_duplicates_fails() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    c.insert_many(
        (0..100)
            .map(|i| doc! {"_id": i, "a": if i == 77 { 3 } else { i }})
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    let f = expect_command_error(
        &db,
        doc! {"createIndexes": "c", "indexes": [spec(doc! {"a": 1}, "a_1", doc! {"unique": true})]},
        11000,
        "DuplicateKey",
    )
    .await;
    assert!(f.message.contains("E11000"), "{f:?}");
    assert_eq!(index_names(&db, "c").await, vec!["_id_"]);
    // Writes go on as before, duplicates included.
    c.insert_one(doc! {"_id": 1000, "a": 3}).await.unwrap();
    // A non-unique index over the same data builds.
    create_indexes(&db, "c", vec![spec(doc! {"a": 1}, "a_1", doc! {})]).await;
    let got = find_by_id(&db, "c", doc! {"a": 3}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![3, 77, 1000]);
}

#[tokio::test]
async fn sparse_index_leaves_out_documents_without_the_field() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    create_indexes(
        &db,
        "c",
        vec![spec(doc! {"a": 1}, "a_1", doc! {"sparse": true})],
    )
    .await;
    coll(&db, "c")
        .insert_many(vec![
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 2},
            doc! {"_id": 3, "a": null},
            doc! {"_id": 4, "a": 3},
            doc! {"_id": 5, "b": 1},
        ])
        .await
        .unwrap();

    // Hinted, the sparse index only knows documents that have the field.
    let got = find_by_id(&db, "c", doc! {}, doc! {"hint": "a_1"}).await;
    assert_eq!(int_ids(&got), vec![1, 3, 4]);
    let got = find_by_id(&db, "c", doc! {}, doc! {"hint": {"a": 1}}).await;
    assert_eq!(int_ids(&got), vec![1, 3, 4]);

    let e = explain_find(&db, "c", doc! {"a": {"$gt": 0}}, doc! {}).await;
    assert_ixscan(&e, "a_1");
    let got = find_by_id(&db, "c", doc! {"a": {"$gt": 0}}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![1, 4]);

    // `{a: null}` must see documents without `a`: not from this index.
    let e = explain_find(&db, "c", doc! {"a": null}, doc! {}).await;
    assert_collscan(&e);
    let got = find_by_id(&db, "c", doc! {"a": null}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![2, 3, 5]);

    // Sparse and unique: any number of documents may lack the field.
    create_indexes(
        &db,
        "d",
        vec![spec(
            doc! {"b": 1},
            "b_1",
            doc! {"sparse": true, "unique": true},
        )],
    )
    .await;
    let d = coll(&db, "d");
    d.insert_many(vec![
        doc! {"_id": 1},
        doc! {"_id": 2},
        doc! {"_id": 3, "b": 1},
    ])
    .await
    .unwrap();
    expect_failure(d.insert_one(doc! {"_id": 4, "b": 1}).await, 11000, "");

    let v = run(&db, doc! {"validate": "c"}).await;
    let keys = v
        .get_document("keysPerIndex")
        .unwrap_or_else(|_| panic!("{v}"));
    assert_eq!(num(keys, "_id_"), 5, "{v}");
    assert_eq!(num(keys, "a_1"), 3, "{v}");
}

#[tokio::test]
async fn partial_index_holds_only_matching_documents() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    create_indexes(
        &db,
        "c",
        vec![spec(
            doc! {"a": 1},
            "a_1",
            doc! {"partialFilterExpression": {"b": {"$gt": 5}}},
        )],
    )
    .await;
    coll(&db, "c")
        .insert_many(
            (0..20)
                .map(|i| doc! {"_id": i, "a": i % 5, "b": i})
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();

    // A filter that implies the partial filter can use the index.
    let e = explain_find(&db, "c", doc! {"a": 2, "b": {"$gt": 10}}, doc! {}).await;
    assert_ixscan(&e, "a_1");
    let got = find_by_id(&db, "c", doc! {"a": 2, "b": {"$gt": 10}}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![12, 17]);
    // One that does not, cannot.
    let e = explain_find(&db, "c", doc! {"a": 2}, doc! {}).await;
    assert_collscan(&e);
    let got = find_by_id(&db, "c", doc! {"a": 2}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![2, 7, 12, 17]);

    // Documents enter and leave the index as they are updated.
    coll(&db, "c")
        .update_one(doc! {"_id": 2}, doc! {"$set": {"b": 100}})
        .await
        .unwrap();
    coll(&db, "c")
        .update_one(doc! {"_id": 17}, doc! {"$set": {"b": 0}})
        .await
        .unwrap();
    let got = find_by_id(&db, "c", doc! {"a": 2, "b": {"$gt": 10}}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![2, 12]);

    let v = run(&db, doc! {"validate": "c"}).await;
    assert_eq!(v.get_bool("valid").ok(), Some(true), "{v}");
    let keys = v.get_document("keysPerIndex").unwrap();
    // b > 5: 6..=19 is 14 documents, +2 (moved in) -1 (moved out).
    assert_eq!(num(keys, "a_1"), 14 + 1 - 1, "{v}");

    // Partial and unique: duplicates outside the filter are allowed.
    create_indexes(
        &db,
        "d",
        vec![spec(
            doc! {"u": 1},
            "u_1",
            doc! {"unique": true, "partialFilterExpression": {"active": true}},
        )],
    )
    .await;
    let d = coll(&db, "d");
    d.insert_many(vec![
        doc! {"_id": 1, "u": 1, "active": false},
        doc! {"_id": 2, "u": 1, "active": false},
        doc! {"_id": 3, "u": 1, "active": true},
    ])
    .await
    .unwrap();
    expect_failure(
        d.insert_one(doc! {"_id": 4, "u": 1, "active": true}).await,
        11000,
        "",
    );
    expect_failure(
        d.update_one(doc! {"_id": 1}, doc! {"$set": {"active": true}})
            .await,
        11000,
        "",
    );
}

#[tokio::test]
async fn hashed_index_answers_equality() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    create_indexes(
        &db,
        "c",
        vec![spec(doc! {"h": "hashed"}, "h_hashed", doc! {})],
    )
    .await;
    let c = coll(&db, "c");
    c.insert_many(
        (0..200)
            .map(|i| doc! {"_id": i, "h": i % 10})
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    c.insert_many(vec![
        doc! {"_id": 1000, "h": 5.0},
        doc! {"_id": 1001, "h": "5"},
        doc! {"_id": 1002},
    ])
    .await
    .unwrap();

    let e = explain_find(&db, "c", doc! {"h": 5}, doc! {}).await;
    let ix = assert_ixscan(&e, "h_hashed");
    assert_eq!(
        ix.get_document("keyPattern").ok(),
        Some(&doc! {"h": "hashed"}),
        "{e}"
    );
    let (keys, docs, returned) = exec_totals(&e);
    assert_eq!(returned, 21, "{e}");
    assert!(docs <= 22 && keys <= 22, "{e}");

    let mut want: Vec<i64> = (0..200).filter(|i| i % 10 == 5).collect();
    want.push(1000);
    let got = find_by_id(&db, "c", doc! {"h": 5}, doc! {}).await;
    assert_eq!(int_ids(&got), want);
    let got = find_by_id(&db, "c", doc! {"h": {"$in": ["5", 7]}}, doc! {}).await;
    let mut want: Vec<i64> = (0..200).filter(|i| i % 10 == 7).collect();
    want.push(1001);
    assert_eq!(int_ids(&got), want);
    let got = find_by_id(&db, "c", doc! {"h": null}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![1002]);

    // A range cannot use a hashed index.
    let e = explain_find(&db, "c", doc! {"h": {"$gt": 7}}, doc! {}).await;
    assert_collscan(&e);
    let got = find_by_id(&db, "c", doc! {"h": {"$gt": 7}}, doc! {}).await;
    assert_eq!(got.len(), 40);

    // Arrays cannot be hashed.
    expect_failure(
        c.insert_one(doc! {"_id": 2000, "h": [1, 2]}).await,
        16766,
        "",
    );
    assert_eq!(c.find_one(doc! {"_id": 2000}).await.unwrap(), None);
}

#[tokio::test]
async fn index_built_over_existing_data_answers_queries() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    c.insert_many(
        (0..2000)
            .map(|i| doc! {"_id": i, "a": i % 100, "b": i, "s": format!("k{:04}", i)})
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    let reply = create_indexes(
        &db,
        "c",
        vec![
            spec(doc! {"a": 1}, "a_1", doc! {}),
            spec(doc! {"b": -1}, "b_-1", doc! {}),
            spec(doc! {"s": 1}, "s_1", doc! {"unique": true}),
        ],
    )
    .await;
    assert_eq!(num(&reply, "numIndexesAfter"), 4, "{reply}");

    let e = explain_find(&db, "c", doc! {"a": 42}, doc! {}).await;
    assert_ixscan(&e, "a_1");
    let (keys, docs, returned) = exec_totals(&e);
    assert_eq!(returned, 20, "{e}");
    assert_eq!(docs, 20, "{e}");
    assert!((20..=21).contains(&keys), "{e}");
    let got = find_by_id(&db, "c", doc! {"a": 42}, doc! {}).await;
    assert_eq!(
        int_ids(&got),
        (0..2000).filter(|i| i % 100 == 42).collect::<Vec<i64>>()
    );

    let got = find_by_id(&db, "c", doc! {"b": {"$gte": 100, "$lt": 150}}, doc! {}).await;
    assert_eq!(int_ids(&got), (100..150).collect::<Vec<i64>>());
    let got = find(&db, "c", doc! {}, doc! {"sort": {"b": -1}, "limit": 3}).await;
    assert_eq!(int_ids(&got), vec![1999, 1998, 1997]);
    let got = find(&db, "c", doc! {"s": "k0777"}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![777]);

    // Updates through the index touch each document once.
    let r = c
        .update_many(doc! {"b": {"$gte": 0}}, doc! {"$inc": {"b": 5000}})
        .await
        .unwrap();
    assert_eq!(r.matched_count, 2000);
    assert_eq!(r.modified_count, 2000);
    let got = find_by_id(&db, "c", doc! {"b": {"$lt": 5000}}, doc! {}).await;
    assert!(got.is_empty(), "{got:?}");
    let got = find_by_id(&db, "c", doc! {"b": 5010}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![10]);

    // Deletes through the index remove the keys too.
    let r = c.delete_many(doc! {"a": 42}).await.unwrap();
    assert_eq!(r.deleted_count, 20);
    assert!(find(&db, "c", doc! {"a": 42}, doc! {}).await.is_empty());
    assert!(find(&db, "c", doc! {"b": 5042}, doc! {}).await.is_empty());
    c.insert_one(doc! {"_id": 42, "a": 42, "b": 1, "s": "k0042"})
        .await
        .expect("the unique key of a deleted document is free again");

    let v = run(&db, doc! {"validate": "c"}).await;
    assert_eq!(v.get_bool("valid").ok(), Some(true), "{v}");
    let keys = v.get_document("keysPerIndex").unwrap();
    for name in ["_id_", "a_1", "b_-1", "s_1"] {
        assert_eq!(num(keys, name), 1981, "{name}: {v}");
    }
}

// ---------------------------------------------------------------------------
// sharded collections
// ---------------------------------------------------------------------------

async fn start_sharded(ns_coll: &str) -> TestServer {
    let srv = TestServer::start_with_args(&["--initial-partitions", "4"]).await;
    let reply = run(
        &srv.db("admin"),
        doc! {"shardCollection": format!("{DB}.{ns_coll}"), "key": {"k": "hashed"}},
    )
    .await;
    assert_ok(&reply);
    srv
}

#[tokio::test]
async fn unique_index_on_sharded_collection_needs_the_shard_key_prefix() {
    let srv = start_sharded("s").await;
    let db = srv.db(DB);

    create_indexes(
        &db,
        "s",
        vec![spec(
            doc! {"k": 1, "x": 1},
            "k_1_x_1",
            doc! {"unique": true},
        )],
    )
    .await;
    let f = expect_command_error(
        &db,
        doc! {"createIndexes": "s", "indexes": [spec(doc! {"x": 1}, "x_1", doc! {"unique": true})]},
        67,
        "CannotCreateIndex",
    )
    .await;
    assert!(
        f.message.contains(
            "cannot create unique index over { x: 1 } with shard key pattern { k: \"hashed\" }"
        ),
        "{f:?}"
    );
    // Without `unique`, any key is fine.
    create_indexes(&db, "s", vec![spec(doc! {"x": 1}, "x_1", doc! {})]).await;
    let names: BTreeSet<String> = index_names(&db, "s").await.into_iter().collect();
    assert!(
        names.contains("k_1_x_1") && names.contains("x_1"),
        "{names:?}"
    );
    assert!(names.contains("_id_"), "{names:?}");

    let s = coll(&db, "s");
    s.insert_many(
        (0..100)
            .map(|i| doc! {"_id": i, "k": i % 10, "x": i})
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    expect_failure(
        s.insert_one(doc! {"_id": 500, "k": 3, "x": 3}).await,
        11000,
        "",
    );
    s.insert_one(doc! {"_id": 501, "k": 4, "x": 3})
        .await
        .expect("same x, another shard key");
    let got = find_by_id(&db, "s", doc! {"x": 3}, doc! {}).await;
    assert_eq!(int_ids(&got), vec![3, 501]);
}

#[tokio::test]
async fn sharded_explain_shows_each_partitions_plan() {
    let srv = start_sharded("s").await;
    let db = srv.db(DB);
    coll(&db, "s")
        .insert_many(
            (0..400)
                .map(|i| doc! {"_id": i, "k": i, "a": i % 40})
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    create_indexes(&db, "s", vec![spec(doc! {"a": 1}, "a_1", doc! {})]).await;

    let e = explain_find(&db, "s", doc! {"a": 7}, doc! {}).await;
    let planner = e.get_document("queryPlanner").unwrap();
    let shards = planner
        .get_document("winningPlan")
        .and_then(|p| p.get_array("shards"))
        .unwrap_or_else(|_| panic!("no queryPlanner.winningPlan.shards in {e}"));
    assert_eq!(shards.len(), 4, "{e}");
    for s in shards.iter().filter_map(Bson::as_document) {
        let plan = s
            .get_document("winningPlan")
            .unwrap_or_else(|_| panic!("shard entry without winningPlan: {e}"));
        let ix = find_stage(plan, "IXSCAN")
            .unwrap_or_else(|| panic!("partition plan {:?} without IXSCAN: {e}", stages(plan)));
        assert_eq!(ix.get_str("indexName").ok(), Some("a_1"), "{e}");
        assert!(!stages(plan).iter().any(|s| s == "COLLSCAN"), "{e}");
    }

    let stats = e.get_document("executionStats").unwrap();
    assert_eq!(num(stats, "nReturned"), 10, "{e}");
    let per = stats
        .get_document("executionStages")
        .and_then(|s| s.get_array("shards"))
        .unwrap_or_else(|_| panic!("no executionStats.executionStages.shards in {e}"));
    assert_eq!(per.len(), 4, "{e}");
    let (mut keys, mut docs, mut returned) = (0, 0, 0);
    for s in per.iter().filter_map(Bson::as_document) {
        let (k, d) = (num(s, "totalKeysExamined"), num(s, "totalDocsExamined"));
        assert!(d <= k, "a partition fetched more documents than keys: {e}");
        keys += k;
        docs += d;
        returned += num(s, "nReturned");
    }
    assert_eq!(docs, 10, "{e}");
    assert_eq!(returned, 10, "{e}");
    // MongoDB's shards each index only their own documents (10 keys in
    // all); Shardgate's partitions share one index space and each steps
    // over the others' entries, so allow up to 11 keys per partition.
    assert!((10..=44).contains(&keys), "{e}");
    assert!(
        num(stats, "totalKeysExamined") == keys && num(stats, "totalDocsExamined") == docs,
        "totals add up: {e}"
    );

    // An unindexed field: every partition scans.
    let e = explain_find(&db, "s", doc! {"zz": 7}, doc! {}).await;
    let shards = e
        .get_document("queryPlanner")
        .and_then(|p| p.get_document("winningPlan"))
        .and_then(|p| p.get_array("shards"))
        .unwrap();
    for s in shards.iter().filter_map(Bson::as_document) {
        let names = stages(s.get_document("winningPlan").unwrap());
        assert!(names.iter().any(|n| n == "COLLSCAN"), "{e}");
    }
    let per = e
        .get_document("executionStats")
        .and_then(|s| s.get_document("executionStages"))
        .and_then(|s| s.get_array("shards"))
        .unwrap();
    let docs: i64 = per
        .iter()
        .filter_map(Bson::as_document)
        .map(|s| num(s, "totalDocsExamined"))
        .sum();
    assert_eq!(docs, 400, "{e}");

    // Same answers as an unindexed scan.
    let got = find_by_id(&db, "s", doc! {"a": 7}, doc! {}).await;
    let natural = find_by_id(&db, "s", doc! {"a": 7}, doc! {"hint": {"$natural": 1}}).await;
    assert_eq!(got, natural);
    assert_eq!(
        int_ids(&got),
        (0..400).filter(|i| i % 40 == 7).collect::<Vec<i64>>()
    );
    let got = find(
        &db,
        "s",
        doc! {"a": {"$gte": 38}},
        doc! {"sort": {"a": -1, "_id": 1}, "limit": 5},
    )
    .await;
    assert_eq!(int_ids(&got), vec![39, 79, 119, 159, 199]);
}

// ---------------------------------------------------------------------------
// the planner
// ---------------------------------------------------------------------------

/// 1000 documents with `a` (100 values), `b` (7), `c` (unique), `s`
/// (string) and `d` (no index); indexes `a_1`, `b_1_c_-1`, `s_1`.
async fn planner_fixture(srv: &TestServer) -> Database {
    let db = srv.db(DB);
    coll(&db, "p")
        .insert_many(
            (0..1000)
                .map(|i| {
                    doc! {"_id": i, "a": i % 100, "b": i % 7, "c": i, "s": format!("s{:03}", i % 50), "d": i % 3}
                })
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    create_indexes(
        &db,
        "p",
        vec![
            spec(doc! {"a": 1}, "a_1", doc! {}),
            spec(doc! {"b": 1, "c": -1}, "b_1_c_-1", doc! {}),
            spec(doc! {"s": 1}, "s_1", doc! {}),
        ],
    )
    .await;
    db
}

#[tokio::test]
async fn explain_shows_an_index_scan_for_equality_in_and_range() {
    let srv = TestServer::start().await;
    let db = planner_fixture(&srv).await;

    // Equality: FETCH over IXSCAN, with MongoDB's fields. Shardgate
    // answers as a mongos does: an unsharded collection is the single
    // partition `primary`, whose plan sits in `shards`.
    let e = explain_find(&db, "p", doc! {"a": 5}, doc! {}).await;
    let routed = winning_plan(&e);
    assert_eq!(routed.get_str("stage").ok(), Some("SINGLE_SHARD"), "{e}");
    let shard = routed
        .get_array("shards")
        .ok()
        .and_then(|s| s.first())
        .and_then(Bson::as_document)
        .unwrap_or_else(|| panic!("no shards[0] in {e}"));
    // The collection's one partition; on a fleet, the server holding it.
    let name = shard.get_str("shardName").unwrap_or_default();
    if compat_tests::fleet().is_some() {
        assert!(name.starts_with("shard"), "{e}");
    } else {
        assert_eq!(name, "primary", "{e}");
    }
    let plan = shard
        .get_document("winningPlan")
        .unwrap_or_else(|_| panic!("no shards[0].winningPlan in {e}"));
    assert_eq!(plan.get_str("stage").ok(), Some("FETCH"), "{e}");
    let ix = plan
        .get_document("inputStage")
        .unwrap_or_else(|_| panic!("FETCH without inputStage: {e}"));
    assert_eq!(ix.get_str("stage").ok(), Some("IXSCAN"), "{e}");
    assert_eq!(ix.get_str("indexName").ok(), Some("a_1"), "{e}");
    assert_eq!(
        norm_doc(ix.get_document("keyPattern").unwrap()),
        norm_doc(&doc! {"a": 1}),
        "{e}"
    );
    assert_eq!(ix.get_bool("isMultiKey").ok(), Some(false), "{e}");
    assert_eq!(ix.get_str("direction").ok(), Some("forward"), "{e}");
    assert_eq!(
        ix.get_document("indexBounds").ok(),
        Some(&doc! {"a": ["[5, 5]"]}),
        "{e}"
    );
    let (keys, docs, returned) = exec_totals(&e);
    assert_eq!(returned, 10, "{e}");
    assert_eq!(docs, 10, "{e}");
    assert!((10..=11).contains(&keys), "{e}");

    // $in: one point interval per value.
    let e = explain_find(&db, "p", doc! {"a": {"$in": [9, 1, 5]}}, doc! {}).await;
    let ix = assert_ixscan(&e, "a_1");
    assert_eq!(
        ix.get_document("indexBounds").ok(),
        Some(&doc! {"a": ["[1, 1]", "[5, 5]", "[9, 9]"]}),
        "{e}"
    );
    let (keys, docs, returned) = exec_totals(&e);
    assert_eq!((docs, returned), (30, 30), "{e}");
    assert!(keys <= 33, "{e}");

    // A range.
    let e = explain_find(&db, "p", doc! {"a": {"$gte": 10, "$lt": 20}}, doc! {}).await;
    let ix = assert_ixscan(&e, "a_1");
    assert_eq!(
        ix.get_document("indexBounds").ok(),
        Some(&doc! {"a": ["[10, 20)"]}),
        "{e}"
    );
    let (keys, docs, returned) = exec_totals(&e);
    assert_eq!((docs, returned), (100, 100), "{e}");
    assert!(keys <= 101, "{e}");

    // Strings.
    let e = explain_find(&db, "p", doc! {"s": "s007"}, doc! {}).await;
    let ix = assert_ixscan(&e, "s_1");
    assert_eq!(
        ix.get_document("indexBounds").ok(),
        Some(&doc! {"s": ["[\"s007\", \"s007\"]"]}),
        "{e}"
    );
    assert_eq!(exec_totals(&e).2, 20, "{e}");

    // A compound index answers a condition on its prefix.
    let e = explain_find(&db, "p", doc! {"b": 3}, doc! {}).await;
    let ix = assert_ixscan(&e, "b_1_c_-1");
    assert_eq!(
        ix.get_document("indexBounds").ok(),
        Some(&doc! {"b": ["[3, 3]"], "c": ["[MaxKey, MinKey]"]}),
        "{e}"
    );
    let want = (0..1000).filter(|i| i % 7 == 3).count() as i64;
    let (keys, _, returned) = exec_totals(&e);
    assert_eq!(returned, want, "{e}");
    assert!(keys <= want + 1, "{e}");
    // ... and on the whole key.
    let e = explain_find(&db, "p", doc! {"b": 3, "c": {"$gt": 900}}, doc! {}).await;
    assert_ixscan(&e, "b_1_c_-1");
    let want = (901..1000).filter(|i| i % 7 == 3).count() as i64;
    let (keys, docs, returned) = exec_totals(&e);
    assert_eq!((docs, returned), (want, want), "{e}");
    assert!(keys <= want + 1, "{e}");

    // Not a prefix, or no index at all: a collection scan.
    for filter in [doc! {"c": 5}, doc! {"d": 1}] {
        let e = explain_find(&db, "p", filter.clone(), doc! {}).await;
        assert_collscan(&e);
        let (keys, docs, _) = exec_totals(&e);
        assert_eq!((keys, docs), (0, 1000), "{filter}: {e}");
    }
}

#[tokio::test]
async fn sort_by_an_index_prefix_stops_early_in_both_directions() {
    let srv = TestServer::start().await;
    let db = planner_fixture(&srv).await;

    struct Case {
        filter: Document,
        sort: Document,
        limit: i64,
        index: &'static str,
        direction: &'static str,
    }
    let cases = [
        Case {
            filter: doc! {},
            sort: doc! {"a": 1},
            limit: 5,
            index: "a_1",
            direction: "forward",
        },
        Case {
            filter: doc! {},
            sort: doc! {"a": -1},
            limit: 5,
            index: "a_1",
            direction: "backward",
        },
        Case {
            filter: doc! {"a": {"$gte": 50}},
            sort: doc! {"a": -1},
            limit: 3,
            index: "a_1",
            direction: "backward",
        },
        Case {
            filter: doc! {},
            sort: doc! {"b": 1, "c": -1},
            limit: 4,
            index: "b_1_c_-1",
            direction: "forward",
        },
        Case {
            filter: doc! {},
            sort: doc! {"b": -1, "c": 1},
            limit: 4,
            index: "b_1_c_-1",
            direction: "backward",
        },
        Case {
            filter: doc! {},
            sort: doc! {"b": -1},
            limit: 4,
            index: "b_1_c_-1",
            direction: "backward",
        },
        Case {
            filter: doc! {"b": 2},
            sort: doc! {"c": -1},
            limit: 6,
            index: "b_1_c_-1",
            direction: "forward",
        },
    ];
    for case in cases {
        let extra = doc! {"sort": case.sort.clone(), "limit": case.limit};
        let e = explain_find(&db, "p", case.filter.clone(), extra.clone()).await;
        let what = format!(
            "find({}).sort({}).limit({})",
            case.filter, case.sort, case.limit
        );
        let ix = assert_ixscan(&e, case.index);
        assert_eq!(
            ix.get_str("direction").ok(),
            Some(case.direction),
            "{what}: {e}"
        );
        assert!(!has_stage(&e, "SORT"), "{what}: a SORT stage: {e}");
        let (keys, docs, returned) = exec_totals(&e);
        assert_eq!(returned, case.limit, "{what}: {e}");
        assert!(keys <= case.limit + 2, "{what}: {keys} keys examined: {e}");
        assert!(
            docs <= case.limit + 2,
            "{what}: {docs} documents examined: {e}"
        );

        // The documents are the ones a scan and an in-memory sort give
        // (ties broken by `_id` both ways round, so compare sort keys).
        let got = find(&db, "p", case.filter.clone(), extra).await;
        let want = find(
            &db,
            "p",
            case.filter.clone(),
            doc! {"sort": case.sort.clone(), "limit": case.limit, "hint": {"$natural": 1}},
        )
        .await;
        let keys_of = |docs: &[Document]| -> Vec<Vec<Bson>> {
            docs.iter()
                .map(|d| {
                    case.sort
                        .keys()
                        .map(|k| d.get(k).cloned().unwrap())
                        .collect()
                })
                .collect()
        };
        assert_eq!(keys_of(&got), keys_of(&want), "{what}");
    }

    // Exact results where the sort has no ties.
    let got = find(
        &db,
        "p",
        doc! {},
        doc! {"sort": {"b": -1, "c": 1}, "limit": 4},
    )
    .await;
    assert_eq!(int_ids(&got), vec![6, 13, 20, 27]);
    let got = find(
        &db,
        "p",
        doc! {"b": 2},
        doc! {"sort": {"c": -1}, "limit": 3},
    )
    .await;
    assert_eq!(int_ids(&got), vec![996, 989, 982]);

    // A sort the index cannot give needs a SORT stage.
    let e = explain_find(
        &db,
        "p",
        doc! {},
        doc! {"sort": {"b": 1, "c": 1}, "limit": 4},
    )
    .await;
    assert!(has_stage(&e, "SORT"), "{e}");
    let got = find(
        &db,
        "p",
        doc! {},
        doc! {"sort": {"b": 1, "c": 1}, "limit": 4},
    )
    .await;
    assert_eq!(int_ids(&got), vec![0, 7, 14, 21]);
    let e = explain_find(&db, "p", doc! {}, doc! {"sort": {"d": 1}, "limit": 4}).await;
    assert!(has_stage(&e, "SORT"), "{e}");
}

#[tokio::test]
async fn hint_forces_a_plan() {
    let srv = TestServer::start().await;
    let db = planner_fixture(&srv).await;
    let natural_b3 = find_by_id(&db, "p", doc! {"b": 3}, doc! {"hint": {"$natural": 1}}).await;
    assert_eq!(natural_b3.len(), 143);

    // By name: an index the filter does not use, read whole.
    let e = explain_find(&db, "p", doc! {"b": 3}, doc! {"hint": "a_1"}).await;
    let ix = assert_ixscan(&e, "a_1");
    assert_eq!(
        ix.get_document("indexBounds").ok(),
        Some(&doc! {"a": ["[MinKey, MaxKey]"]}),
        "{e}"
    );
    let (keys, _, returned) = exec_totals(&e);
    assert_eq!((keys, returned), (1000, 143), "{e}");
    let got = find_by_id(&db, "p", doc! {"b": 3}, doc! {"hint": "a_1"}).await;
    assert_eq!(got, natural_b3);

    // By key pattern.
    let e = explain_find(&db, "p", doc! {"b": 3}, doc! {"hint": {"s": 1}}).await;
    assert_ixscan(&e, "s_1");
    let got = find_by_id(&db, "p", doc! {"b": 3}, doc! {"hint": {"s": 1}}).await;
    assert_eq!(got, natural_b3);
    let e = explain_find(&db, "p", doc! {"a": 3}, doc! {"hint": {"b": 1, "c": -1}}).await;
    assert_ixscan(&e, "b_1_c_-1");

    // $natural: a collection scan even where an index would serve.
    let e = explain_find(&db, "p", doc! {"a": 5}, doc! {"hint": {"$natural": 1}}).await;
    assert_collscan(&e);
    let scan = find_stage(winning_plan(&e), "COLLSCAN").unwrap();
    assert_eq!(scan.get_str("direction").ok(), Some("forward"), "{e}");
    let e = explain_find(&db, "p", doc! {"a": 5}, doc! {"hint": {"$natural": -1}}).await;
    assert_collscan(&e);
    let scan = find_stage(winning_plan(&e), "COLLSCAN").unwrap();
    assert_eq!(scan.get_str("direction").ok(), Some("backward"), "{e}");
    let natural = find_by_id(&db, "p", doc! {"a": 5}, doc! {"hint": {"$natural": 1}}).await;
    assert_eq!(natural, find_by_id(&db, "p", doc! {"a": 5}, doc! {}).await);

    // No such index.
    for hint in [Bson::from("nope"), Bson::Document(doc! {"zz": 1})] {
        let f = expect_command_error(
            &db,
            doc! {"find": "p", "filter": {"a": 5}, "hint": hint.clone()},
            2,
            "BadValue",
        )
        .await;
        assert!(f.message.contains("hint"), "{f:?}");
        expect_command_error(
            &db,
            doc! {"explain": {"find": "p", "filter": {"a": 5}, "hint": hint}},
            2,
            "BadValue",
        )
        .await;
    }

    // Through the driver.
    let got: Vec<Document> = coll(&db, "p")
        .find(doc! {"b": 3})
        .hint(compat_tests::mongodb::options::Hint::Name("s_1".into()))
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(got, natural_b3);
}

#[tokio::test]
async fn covered_query_reads_no_documents() {
    let srv = TestServer::start().await;
    let db = planner_fixture(&srv).await;

    let filter = doc! {"a": {"$gte": 10, "$lt": 12}};
    let e = explain_find(
        &db,
        "p",
        filter.clone(),
        doc! {"projection": {"a": 1, "_id": 0}},
    )
    .await;
    let plan = find_stage(winning_plan(&e), "PROJECTION_COVERED")
        .unwrap_or_else(|| panic!("no PROJECTION_COVERED stage: {e}"));
    assert_eq!(
        plan.get_document("inputStage")
            .and_then(|s| s.get_str("stage"))
            .ok(),
        Some("IXSCAN"),
        "{e}"
    );
    assert!(!has_stage(&e, "FETCH"), "{e}");
    let (keys, docs, returned) = exec_totals(&e);
    assert_eq!(docs, 0, "{e}");
    assert_eq!(returned, 20, "{e}");
    assert!(keys <= 21, "{e}");

    let got = find(
        &db,
        "p",
        filter.clone(),
        doc! {"projection": {"a": 1, "_id": 0}, "sort": {"a": 1}},
    )
    .await;
    let mut want = vec![doc! {"a": 10}; 10];
    want.extend(vec![doc! {"a": 11}; 10]);
    assert_eq!(
        got.iter().map(norm_doc).collect::<Vec<_>>(),
        want.iter().map(norm_doc).collect::<Vec<_>>()
    );

    // With `_id` the documents must be read.
    let e = explain_find(&db, "p", filter.clone(), doc! {"projection": {"a": 1}}).await;
    assert!(has_stage(&e, "FETCH"), "{e}");
    assert_eq!(exec_totals(&e).1, 20, "{e}");
    // Compound: both fields come from the index.
    let e = explain_find(
        &db,
        "p",
        doc! {"b": 3, "c": {"$lt": 30}},
        doc! {"projection": {"_id": 0, "c": 1, "b": 1}},
    )
    .await;
    assert!(has_stage(&e, "PROJECTION_COVERED"), "{e}");
    assert!(!has_stage(&e, "FETCH"), "{e}");
    assert_eq!(exec_totals(&e).1, 0, "{e}");
    let got = find(
        &db,
        "p",
        doc! {"b": 3, "c": {"$lt": 30}},
        doc! {"projection": {"_id": 0, "c": 1, "b": 1}, "sort": {"c": 1}},
    )
    .await;
    assert_eq!(
        got.iter().map(flat).collect::<Vec<_>>(),
        [3, 10, 17, 24]
            .iter()
            .map(|c| flat(&doc! {"b": 3, "c": *c}))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn results_are_the_same_with_and_without_indexes() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    // Mixed types: numbers of three types, strings, null, missing, arrays,
    // sub-documents.
    let mut docs = Vec::new();
    for i in 0..300i32 {
        let a: Bson = match i % 9 {
            0 => Bson::Int32(i % 20),
            1 => Bson::Int64((i % 20) as i64),
            2 => Bson::Double((i % 20) as f64),
            3 => Bson::Double((i % 20) as f64 + 0.5),
            4 => Bson::String(format!("s{}", i % 20)),
            5 => Bson::Null,
            6 => Bson::Array(vec![Bson::Int32(i % 20), Bson::Int32(i % 20 + 1)]),
            7 => Bson::Document(doc! {"x": i % 20}),
            _ => Bson::Boolean(i % 2 == 0),
        };
        let mut d = doc! {"_id": i, "b": i % 5, "n": {"x": i % 13, "y": format!("y{}", i % 4)}};
        if i % 17 != 0 {
            d.insert("a", a);
        }
        docs.push(d);
    }
    coll(&db, "plain").insert_many(docs.clone()).await.unwrap();
    coll(&db, "indexed").insert_many(docs).await.unwrap();
    create_indexes(
        &db,
        "indexed",
        vec![
            spec(doc! {"a": 1}, "a_1", doc! {}),
            spec(doc! {"b": 1, "a": -1}, "b_1_a_-1", doc! {}),
            spec(doc! {"n.x": 1}, "n.x_1", doc! {}),
            spec(doc! {"n.y": -1, "b": 1}, "n.y_-1_b_1", doc! {}),
        ],
    )
    .await;

    let filters = vec![
        doc! {"a": 5},
        doc! {"a": 5.0},
        doc! {"a": 5i64},
        doc! {"a": 5.5},
        doc! {"a": "s5"},
        doc! {"a": {"$in": [1, 2.0, "s3", null]}},
        doc! {"a": {"$gt": 3, "$lte": 10}},
        doc! {"a": {"$gte": "s1", "$lt": "s3"}},
        doc! {"a": {"$lt": 2}},
        doc! {"a": {"$gt": 18}},
        doc! {"a": null},
        doc! {"a": {"$exists": false}},
        doc! {"a": {"$ne": 5}},
        doc! {"a": {"$nin": [1, 2, 3]}},
        doc! {"a": {"x": 4}},
        doc! {"a": true},
        doc! {"a": {"$type": "string"}},
        doc! {"a": {"$elemMatch": {"$gt": 5, "$lt": 7}}},
        doc! {"a": [3, 4]},
        doc! {"b": 2},
        doc! {"b": 2, "a": {"$gte": 5}},
        doc! {"b": {"$in": [1, 3]}, "a": {"$lt": 10}},
        doc! {"n.x": {"$lt": 3}},
        doc! {"n.x": 12, "b": 4},
        doc! {"n.y": "y2", "b": {"$gt": 2}},
        doc! {"n.y": {"$gte": "y1"}},
        doc! {"$or": [{"a": 1}, {"b": 4}]},
        doc! {"$and": [{"a": {"$gte": 2}}, {"a": {"$lte": 4}}]},
        doc! {"a": {"$not": {"$gt": 5}}},
    ];
    for filter in filters {
        let want = find_by_id(&db, "plain", filter.clone(), doc! {}).await;
        let got = find_by_id(&db, "indexed", filter.clone(), doc! {}).await;
        assert_eq!(
            ids(&got),
            ids(&want),
            "indexed vs unindexed collection for {filter}"
        );
        assert_eq!(got, want, "{filter}");
        let n = coll(&db, "indexed")
            .count_documents(filter.clone())
            .await
            .unwrap();
        assert_eq!(n as usize, want.len(), "count of {filter}");
        // Sorted by an indexed field, too.
        let want = find(
            &db,
            "plain",
            filter.clone(),
            doc! {"sort": {"a": 1, "_id": 1}},
        )
        .await;
        let got = find(
            &db,
            "indexed",
            filter.clone(),
            doc! {"sort": {"a": 1, "_id": 1}},
        )
        .await;
        assert_eq!(ids(&got), ids(&want), "sorted by a: {filter}");
    }
}

// ---------------------------------------------------------------------------
// validate
// ---------------------------------------------------------------------------

#[tokio::test]
async fn validate_reports_keys_per_index() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    create_indexes(
        &db,
        "c",
        vec![
            spec(doc! {"a": 1}, "a_1", doc! {}),
            spec(doc! {"tags": 1}, "tags_1", doc! {}),
            spec(doc! {"s": 1}, "s_1", doc! {"sparse": true}),
        ],
    )
    .await;
    let mut docs = Vec::new();
    for i in 0..50 {
        let mut d = doc! {"_id": i, "a": i, "tags": [i % 3, "x"]};
        if i % 2 == 0 {
            d.insert("s", i);
        }
        docs.push(d);
    }
    coll(&db, "c").insert_many(docs).await.unwrap();

    let v = run(&db, doc! {"validate": "c"}).await;
    assert_ok(&v);
    assert_eq!(v.get_bool("valid").ok(), Some(true), "{v}");
    assert_eq!(v.get_str("ns").ok(), Some("db.c"), "{v}");
    assert_eq!(num(&v, "nrecords"), 50, "{v}");
    assert_eq!(num(&v, "nIndexes"), 4, "{v}");
    let keys = v
        .get_document("keysPerIndex")
        .unwrap_or_else(|_| panic!("no keysPerIndex in {v}"));
    let mut per: Vec<(String, i64)> = keys.keys().map(|k| (k.clone(), num(keys, k))).collect();
    per.sort();
    assert_eq!(
        per,
        vec![
            ("_id_".to_string(), 50),
            ("a_1".to_string(), 50),
            ("s_1".to_string(), 25),
            ("tags_1".to_string(), 100),
        ],
        "{v}"
    );
    assert_eq!(v.get_array("errors").map(|a| a.len()).ok(), Some(0), "{v}");

    // After deletes and updates, still consistent.
    coll(&db, "c")
        .delete_many(doc! {"a": {"$lt": 10}})
        .await
        .unwrap();
    coll(&db, "c")
        .update_many(doc! {}, doc! {"$set": {"tags": ["only"]}})
        .await
        .unwrap();
    let v = run(&db, doc! {"validate": "c", "full": true}).await;
    assert_eq!(v.get_bool("valid").ok(), Some(true), "{v}");
    assert_eq!(num(&v, "nrecords"), 40, "{v}");
    let keys = v.get_document("keysPerIndex").unwrap();
    assert_eq!(num(keys, "_id_"), 40, "{v}");
    assert_eq!(num(keys, "a_1"), 40, "{v}");
    assert_eq!(num(keys, "tags_1"), 40, "{v}");
    assert_eq!(num(keys, "s_1"), 20, "{v}");

    expect_command_error(&db, doc! {"validate": "missing"}, 26, "NamespaceNotFound").await;
}
