//! Server-side JavaScript through the official driver: `$where`,
//! `$function`, `$accumulator` and `mapReduce`, with MongoDB 7.0's results
//! and error codes; the time and memory limits failing one operation and
//! leaving the server answering; and `--javascript off` refusing each.
//!
//! Everything that reads a collection runs over an unsharded and an
//! 8-partition sharded copy of the same documents, which must agree: on
//! the sharded copy `$accumulator` and `mapReduce`'s reduce run per
//! partition and merge at the router.

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    expect_command_error, expect_failure,
    mongodb::Database,
    TestServer,
};
use futures::TryStreamExt;

const DB: &str = "js";
const COLLECTIONS: [&str; 2] = ["plain", "sharded"];

/// `{_id: i, k: "a"|"b"|"c", v: i}` for i in 0..12.
fn docs() -> Vec<Document> {
    (0..12)
        .map(|i| {
            let k = ["a", "b", "c"][(i % 3) as usize];
            doc! {"_id": i, "k": k, "v": i}
        })
        .collect()
}

/// A reply without the fields a mongos adds to every reply.
fn body(mut reply: Document) -> Document {
    reply.remove("$clusterTime");
    reply.remove("operationTime");
    reply
}

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
            .insert_many(docs())
            .await
            .expect("insert");
    }
    (srv, db)
}

async fn find_ids(db: &Database, coll: &str, filter: Document) -> Vec<i32> {
    db.collection::<Document>(coll)
        .find(filter)
        .sort(doc! {"_id": 1})
        .await
        .expect("find")
        .try_collect::<Vec<Document>>()
        .await
        .expect("find")
        .iter()
        .map(|d| d.get_i32("_id").unwrap_or(-1))
        .collect()
}

async fn aggregate_both(db: &Database, pipeline: Vec<Document>) -> Vec<Document> {
    let mut results = Vec::new();
    for name in COLLECTIONS {
        let docs: Vec<Document> = db
            .collection::<Document>(name)
            .aggregate(pipeline.clone())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .try_collect()
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        results.push(docs);
    }
    assert_eq!(results[0], results[1], "unsharded and sharded differ");
    results.swap_remove(0)
}

#[tokio::test]
async fn where_filters_find_count_update_and_delete() {
    let (_srv, db) = setup(&[]).await;
    for name in COLLECTIONS {
        let coll = db.collection::<Document>(name);
        assert_eq!(
            find_ids(&db, name, doc! {"$where": "this.v >= 9"}).await,
            vec![9, 10, 11],
            "{name}"
        );
        assert_eq!(
            find_ids(
                &db,
                name,
                doc! {"$where": Bson::JavaScriptCode("function() { return obj.k == 'b' && this.v < 6; }".into())}
            )
            .await,
            vec![1, 4],
            "{name}"
        );
        assert_eq!(
            find_ids(&db, name, doc! {"k": "a", "$where": "this._id % 2 == 0"}).await,
            vec![0, 6],
            "{name}"
        );
        // The `count` command takes `$where`; countDocuments, an
        // aggregation, would not (as in MongoDB).
        let counted = db
            .run_command(doc! {"count": name, "query": {"$where": "this.k == 'c'"}})
            .await
            .expect("count");
        assert_eq!(compat_tests::num(&counted, "n"), 4, "{name}");
        let distinct = coll
            .distinct("k", doc! {"$where": "this.v < 2"})
            .await
            .expect("distinct");
        assert_eq!(distinct, vec![Bson::from("a"), Bson::from("b")], "{name}");
        let found = coll
            .find_one_and_update(
                doc! {"$where": "this.v == 4"},
                doc! {"$set": {"seen": true}},
            )
            .await
            .expect("findAndModify");
        assert_eq!(found, Some(doc! {"_id": 4, "k": "b", "v": 4}), "{name}");
        let r = coll
            .update_many(doc! {"$where": "this.v > 8"}, doc! {"$set": {"big": true}})
            .await
            .expect("update");
        assert_eq!(r.modified_count, 3, "{name}");
        assert_eq!(
            find_ids(&db, name, doc! {"big": true}).await,
            vec![9, 10, 11]
        );
        let r = coll
            .delete_many(doc! {"$where": "this.big === true"})
            .await
            .expect("delete");
        assert_eq!(r.deleted_count, 3, "{name}");
        assert_eq!(coll.count_documents(doc! {}).await.expect("count"), 9);
        expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": [{"$match": {"$or": [{"$where": "true"}]}}], "cursor": {}},
            2,
            "BadValue",
        )
        .await;
    }
}

#[tokio::test]
async fn where_errors_have_mongodbs_codes() {
    let (_srv, db) = setup(&[]).await;
    for name in COLLECTIONS {
        // An exception in the script: 139 JSInterpreterFailure.
        let f = expect_command_error(
            &db,
            doc! {"find": name, "filter": {"$where": "this.v.nope.deeper"}},
            139,
            "JSInterpreterFailure",
        )
        .await;
        assert!(f.message.contains("TypeError"), "{f:?}");
        expect_command_error(
            &db,
            doc! {"find": name, "filter": {"$where": 5}},
            2,
            "BadValue",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"find": name, "filter": {"a": {"$elemMatch": {"$where": "true"}}}},
            2,
            "BadValue",
        )
        .await;
        // Aggregation refuses it, as MongoDB does.
        let f = expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": [{"$match": {"$and": [{"$where": "true"}]}}], "cursor": {}},
            2,
            "BadValue",
        )
        .await;
        assert_eq!(f.message, "$where is not allowed in this context");
        expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": [{"$match": {"$where": "true"}}], "cursor": {}},
            5626500,
            "Location5626500",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": [{"$lookup": {
                "from": "plain", "as": "j",
                "pipeline": [{"$match": {"$or": [{"$where": "true"}]}}],
            }}], "cursor": {}},
            2,
            "BadValue",
        )
        .await;
    }
}

#[tokio::test]
async fn function_computes_values_in_pipelines() {
    let (_srv, db) = setup(&[]).await;
    let out = aggregate_both(
        &db,
        vec![
            doc! {"$addFields": {"w": {"$function": {
            "body": "function(v, k) { return k + ':' + (v * 2); }",
            "args": ["$v", "$k"], "lang": "js"}}}},
            doc! {"$match": {"v": {"$lt": 3}}},
            doc! {"$sort": {"_id": 1}},
            doc! {"$project": {"w": 1}},
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            doc! {"_id": 0, "w": "a:0"},
            doc! {"_id": 1, "w": "b:2"},
            doc! {"_id": 2, "w": "c:4"},
        ]
    );
    // JavaScript numbers come back as doubles, as in MongoDB.
    let out = aggregate_both(
        &db,
        vec![
            doc! {"$addFields": {"w": {"$function": {
            "body": Bson::JavaScriptCode("function(v) { return v * 2; }".into()),
            "args": ["$v"], "lang": "js"}}}},
            doc! {"$group": {"_id": "$k", "total": {"$sum": "$w"}}},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            doc! {"_id": "a", "total": 36.0},
            doc! {"_id": "b", "total": 44.0},
            doc! {"_id": "c", "total": 52.0},
        ]
    );
    for (spec, code) in [
        (Bson::Int32(1), 31260),
        (Bson::Document(doc! {"args": [], "lang": "js"}), 31261),
        (
            Bson::Document(doc! {"body": 1, "args": [], "lang": "js"}),
            31262,
        ),
        (
            Bson::Document(doc! {"body": "function() {}", "lang": "js"}),
            31263,
        ),
        (
            Bson::Document(doc! {"body": "function() {}", "args": []}),
            31418,
        ),
        (
            Bson::Document(doc! {"body": "function() {}", "args": [], "lang": "py"}),
            31419,
        ),
        (
            Bson::Document(doc! {"body": "function() {}", "args": 5, "lang": "js"}),
            31266,
        ),
        (
            Bson::Document(
                doc! {"body": "function() { throw new Error('no'); }", "args": [], "lang": "js"},
            ),
            139,
        ),
    ] {
        for name in COLLECTIONS {
            expect_command_error(
                &db,
                doc! {"aggregate": name, "pipeline": [{"$project": {"x": {"$function": spec.clone()}}}], "cursor": {}},
                code,
                "",
            )
            .await;
        }
    }
}

#[tokio::test]
async fn accumulator_groups_per_partition_and_merges() {
    let (_srv, db) = setup(&[]).await;
    let avg = doc! {"$accumulator": {
        "init": "function() { return {count: 0, sum: 0}; }",
        "accumulate": "function(state, v) { return {count: state.count + 1, sum: state.sum + v}; }",
        "accumulateArgs": ["$v"],
        "merge": "function(a, b) { return {count: a.count + b.count, sum: a.sum + b.sum}; }",
        "finalize": "function(state) { return state.sum / state.count; }",
        "lang": "js",
    }};
    let out = aggregate_both(
        &db,
        vec![
            doc! {"$group": {"_id": "$k", "avg": avg.clone(), "n": {"$sum": 1}}},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            doc! {"_id": "a", "avg": 4.5, "n": 4},
            doc! {"_id": "b", "avg": 5.5, "n": 4},
            doc! {"_id": "c", "avg": 6.5, "n": 4},
        ]
    );
    // initArgs per group, no finalize: the state is the result.
    let out = aggregate_both(
        &db,
        vec![
            doc! {"$group": {"_id": "$k", "s": {"$accumulator": {
                "init": "function(k) { return {key: k, total: 0}; }",
                "initArgs": ["$k"],
                "accumulate": "function(s, v) { s.total += v; return s; }",
                "accumulateArgs": ["$v"],
                "merge": "function(a, b) { return {key: a.key, total: a.total + b.total}; }",
                "lang": "js",
            }}}},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            doc! {"_id": "a", "s": {"key": "a", "total": 18.0}},
            doc! {"_id": "b", "s": {"key": "b", "total": 22.0}},
            doc! {"_id": "c", "s": {"key": "c", "total": 26.0}},
        ]
    );
    for name in COLLECTIONS {
        expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": [{"$group": {"_id": null, "a": {"$accumulator": {
                "init": "function() { return 0; }", "accumulate": "function(s) { return s; }",
                "merge": "function(a, b) { return a; }", "lang": "js",
            }}}}], "cursor": {}},
            4544710,
            "Location4544710",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": [{"$group": {"_id": null, "a": {"$accumulator": {
                "init": "function() { return 0; }", "accumulate": "function(s) { return s.x.y; }",
                "accumulateArgs": [], "merge": "function(a, b) { return a; }", "lang": "js",
            }}}}], "cursor": {}},
            139,
            "JSInterpreterFailure",
        )
        .await;
    }
}

const MAP: &str = "function() { emit(this.k, this.v); }";
const REDUCE: &str = "function(key, values) { return Array.sum(values); }";

#[tokio::test]
async fn map_reduce_inline_and_to_collections() {
    let (_srv, db) = setup(&[]).await;
    for name in COLLECTIONS {
        let reply = db
            .run_command(
                doc! {"mapReduce": name, "map": MAP, "reduce": REDUCE, "out": {"inline": 1}},
            )
            .await
            .expect("mapReduce");
        assert_eq!(
            body(reply),
            doc! {"results": [
                {"_id": "a", "value": 18.0},
                {"_id": "b", "value": 22.0},
                {"_id": "c", "value": 26.0},
            ], "ok": 1.0},
            "{name}"
        );
        // query, sort, limit, scope and finalize.
        let reply = db
            .run_command(doc! {
                "mapReduce": name,
                "map": Bson::JavaScriptCode("function() { emit(this.k, {n: 1, v: this.v * factor}); }".into()),
                "reduce": "function(k, vs) { var r = {n: 0, v: 0}; vs.forEach(function(x) { r.n += x.n; r.v += x.v; }); return r; }",
                "finalize": "function(k, r) { return r.v / r.n; }",
                "query": {"v": {"$gte": 3}},
                "sort": {"v": 1},
                "limit": 6,
                "scope": {"factor": 10},
                "out": {"inline": 1},
            })
            .await
            .expect("mapReduce");
        assert_eq!(
            reply.get_array("results").expect("results"),
            &vec![
                Bson::Document(doc! {"_id": "a", "value": 45.0}),
                Bson::Document(doc! {"_id": "b", "value": 55.0}),
                Bson::Document(doc! {"_id": "c", "value": 65.0}),
            ],
            "{name}"
        );
        // To a collection: replace, then merge and reduce into it.
        let target = format!("{name}_out");
        let reply = db
            .run_command(
                doc! {"mapReduce": name, "map": MAP, "reduce": REDUCE, "out": target.clone()},
            )
            .await
            .expect("mapReduce out");
        assert_eq!(body(reply), doc! {"result": target.clone(), "ok": 1.0});
        let stored = |db: Database, coll: String| async move {
            db.collection::<Document>(&coll)
                .find(doc! {})
                .sort(doc! {"_id": 1})
                .await
                .expect("find")
                .try_collect::<Vec<Document>>()
                .await
                .expect("find")
        };
        assert_eq!(
            stored(db.clone(), target.clone()).await,
            vec![
                doc! {"_id": "a", "value": 18.0},
                doc! {"_id": "b", "value": 22.0},
                doc! {"_id": "c", "value": 26.0},
            ]
        );
        db.run_command(doc! {"mapReduce": name, "map": MAP, "reduce": REDUCE,
        "query": {"k": "a"}, "out": {"reduce": target.clone()}})
            .await
            .expect("reduce out");
        db.run_command(
            doc! {"mapReduce": name, "map": "function() { emit('z', 1); }",
            "reduce": REDUCE, "out": {"merge": target.clone()}},
        )
        .await
        .expect("merge out");
        assert_eq!(
            stored(db.clone(), target.clone()).await,
            vec![
                doc! {"_id": "a", "value": 36.0},
                doc! {"_id": "b", "value": 22.0},
                doc! {"_id": "c", "value": 26.0},
                doc! {"_id": "z", "value": 12.0},
            ]
        );
        // Another database.
        let reply = db
            .run_command(doc! {"mapReduce": name, "map": MAP, "reduce": REDUCE,
            "out": {"replace": "mr", "db": "js_other"}})
            .await
            .expect("mapReduce db");
        assert_eq!(
            body(reply),
            doc! {"result": {"db": "js_other", "collection": "mr"}, "ok": 1.0}
        );
        let other = _srv.db("js_other");
        assert_eq!(stored(other, "mr".into()).await.len(), 3);
    }
    expect_command_error(
        &db,
        doc! {"mapReduce": "plain", "map": MAP, "reduce": REDUCE},
        40414,
        "Location40414",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"mapReduce": "plain", "map": "function() { emit(this.nope.x, 1); }", "reduce": REDUCE, "out": {"inline": 1}},
        139,
        "JSInterpreterFailure",
    )
    .await;
}

#[tokio::test]
async fn runaway_scripts_fail_their_operation_and_the_server_answers() {
    let (_srv, db) = setup(&[
        "--javascript-time-limit-ms",
        "300",
        "--javascript-memory-mb",
        "64",
    ])
    .await;
    let f = expect_command_error(
        &db,
        doc! {"find": "plain", "filter": {"$where": "while (true) {}"}},
        139,
        "JSInterpreterFailure",
    )
    .await;
    assert!(f.message.contains("time limit"), "{f:?}");
    // maxTimeMS stops a script too, with its own code.
    expect_command_error(
        &db,
        doc! {"find": "sharded", "filter": {"$where": "while (true) {}"}, "maxTimeMS": 100},
        50,
        "MaxTimeMSExpired",
    )
    .await;
    let f = expect_command_error(
        &db,
        doc! {"aggregate": "plain", "pipeline": [{"$project": {"x": {"$function": {
        "body": "function() { var a = []; while (true) a.push('x'.repeat(1 << 20) + a.length); }",
        "args": [], "lang": "js"}}}}], "cursor": {}},
        146,
        "ExceededMemoryLimit",
    )
    .await;
    assert!(f.message.contains("Out of memory"), "{f:?}");
    expect_command_error(
        &db,
        doc! {"aggregate": "plain", "pipeline": [{"$project": {"x": {"$function": {
        "body": "function f() { return f() + 1; }", "args": [], "lang": "js"}}}}], "cursor": {}},
        139,
        "JSInterpreterFailure",
    )
    .await;
    // The server and its scripts go on.
    assert_ok(&db.run_command(doc! {"ping": 1}).await.expect("ping"));
    for name in COLLECTIONS {
        assert_eq!(
            find_ids(&db, name, doc! {"$where": "this.v < 2"}).await,
            vec![0, 1]
        );
    }
}

#[tokio::test]
async fn javascript_off_refuses_every_script() {
    let (_srv, db) = setup(&["--javascript", "off"]).await;
    for name in COLLECTIONS {
        let f = expect_failure(
            db.collection::<Document>(name)
                .find(doc! {"$where": "true"})
                .await
                .map(|_| ()),
            6108304,
            "Location6108304",
        );
        assert_eq!(f.message, "no globalScriptEngine in $where parsing");
        expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": [{"$project": {"x": {"$function": {
            "body": "function() { return 1; }", "args": [], "lang": "js"}}}}], "cursor": {}},
            31264,
            "Location31264",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": [{"$group": {"_id": null, "a": {"$accumulator": {
                "init": "function() { return 0; }", "accumulate": "function(s) { return s; }",
                "accumulateArgs": [], "merge": "function(a, b) { return a; }", "lang": "js",
            }}}}], "cursor": {}},
            31264,
            "Location31264",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"mapReduce": name, "map": MAP, "reduce": REDUCE, "out": {"inline": 1}},
            31246,
            "Location31246",
        )
        .await;
        // Everything else works.
        assert_eq!(
            find_ids(&db, name, doc! {"v": {"$lt": 2}}).await,
            vec![0, 1]
        );
    }
    // In aggregation $where is refused for what it is, not for the engine.
    expect_command_error(
        &db,
        doc! {"aggregate": "plain", "pipeline": [{"$match": {"$and": [{"$where": "true"}]}}], "cursor": {}},
        2,
        "BadValue",
    )
    .await;
}
