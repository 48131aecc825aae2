//! Command options real test suites trip over, through the official
//! driver: command-level `let` (and an update statement's `c`) on
//! `find`, `update`, `delete` and `findAndModify`, seen by `$expr` and by
//! pipeline updates, on an unsharded and an 8-partition sharded copy of
//! the same data; options MongoDB 7.0 does not know (the `sort` of an
//! update statement, added in 8.0) refused as 7.0 refuses them; `$out`
//! and `$merge` into a view refused; `aggregate` spilling by default, as
//! 7.0's `allowDiskUseByDefault`; `setParameter` and `getParameter`;
//! `fsync`; `listIndexes` keeping the options a client gave; `$`-prefixed
//! and dotted field names; the Stable API (a strict client refused
//! commands and aggregation stages outside version 1); and `$readPreference` checked as a mongos
//! checks it.

use compat_tests::{
    assert_ok,
    bson::{doc, Document},
    expect_command_error, expect_failure, first_batch,
    mongodb::{
        options::{ServerApi, ServerApiVersion},
        Database,
    },
    num,
    wire::RawConn,
    TestServer,
};
use futures::TryStreamExt;

const DB: &str = "opts";
const COLLECTIONS: [&str; 2] = ["plain", "sharded"];

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

/// Ten items, `qty` 0 to 9, in `plain` and in `sharded` (8 partitions on
/// a hashed `_id`).
async fn setup() -> (TestServer, Database) {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    assert_ok(
        &run(
            &srv.db("admin"),
            doc! {"shardCollection": format!("{DB}.sharded"), "key": {"_id": "hashed"}, "numInitialChunks": 8},
        )
        .await,
    );
    for name in COLLECTIONS {
        let items: Vec<Document> = (0..10).map(|i| doc! {"_id": i, "qty": i}).collect();
        db.collection::<Document>(name)
            .insert_many(items)
            .await
            .unwrap();
    }
    (srv, db)
}

fn ids(docs: &[Document]) -> Vec<i64> {
    let mut ids: Vec<i64> = docs.iter().map(|d| num(d, "_id")).collect();
    ids.sort_unstable();
    ids
}

#[tokio::test]
async fn let_variables_reach_expr_and_pipeline_updates() {
    let (_srv, db) = setup().await;
    for name in COLLECTIONS {
        // find: `$$least` inside `$expr`; outside `$expr` "$$least" is a string.
        let reply = run(
            &db,
            doc! {"find": name, "filter": {"$expr": {"$gte": ["$qty", "$$least"]}}, "let": {"least": 7}},
        )
        .await;
        assert_eq!(ids(&first_batch(&reply)), vec![7, 8, 9], "{name}");
        let reply = run(
            &db,
            doc! {"find": name, "filter": {"qty": "$$least"}, "let": {"least": 7}},
        )
        .await;
        assert!(first_batch(&reply).is_empty(), "{name}: {reply}");

        // update: the filter and a pipeline update both see `let`; `c`
        // adds the statement's own constants.
        let reply = run(
            &db,
            doc! {
                "update": name,
                "updates": [
                    {"q": {"$expr": {"$lt": ["$qty", "$$cut"]}}, "u": [{"$set": {"tag": "$$label"}}], "multi": true},
                    {"q": {"_id": 9}, "u": [{"$set": {"tag": "$$own"}}], "c": {"own": "top"}},
                ],
                "let": {"cut": 3, "label": "low"},
            },
        )
        .await;
        assert_eq!(num(&reply, "nModified"), 4, "{name}: {reply}");
        let reply = run(
            &db,
            doc! {"find": name, "filter": {"tag": {"$exists": true}}, "sort": {"_id": 1}},
        )
        .await;
        assert_eq!(
            first_batch(&reply),
            vec![
                doc! {"_id": 0, "qty": 0, "tag": "low"},
                doc! {"_id": 1, "qty": 1, "tag": "low"},
                doc! {"_id": 2, "qty": 2, "tag": "low"},
                doc! {"_id": 9, "qty": 9, "tag": "top"},
            ],
            "{name}"
        );

        // findAndModify and delete.
        let reply = run(
            &db,
            doc! {
                "findAndModify": name,
                "query": {"$expr": {"$eq": ["$qty", "$$which"]}},
                "update": [{"$set": {"qty": {"$add": ["$qty", "$$step"]}}}],
                "new": true,
                "let": {"which": 5, "step": 100},
            },
        )
        .await;
        assert_eq!(
            reply.get_document("value").unwrap(),
            &doc! {"_id": 5, "qty": 105},
            "{name}"
        );
        let reply = run(
            &db,
            doc! {
                "delete": name,
                "deletes": [{"q": {"$or": [{"$expr": {"$gt": ["$qty", "$$over"]}}]}, "limit": 0}],
                "let": {"over": 8},
            },
        )
        .await;
        assert_eq!(num(&reply, "n"), 2, "{name}: {reply}");
    }
}

#[tokio::test]
async fn options_mongodb_7_does_not_know_are_refused() {
    let (_srv, db) = setup().await;
    let f = expect_command_error(
        &db,
        doc! {"update": "plain", "updates": [{"q": {}, "u": {"$set": {"x": 1}}, "sort": {"qty": 1}}]},
        40415,
        "Location40415",
    )
    .await;
    assert_eq!(
        f.message,
        "BSON field 'update.updates.sort' is an unknown field."
    );
    expect_command_error(
        &db,
        doc! {"delete": "plain", "deletes": [{"q": {}, "limit": 1, "sort": {"qty": 1}}]},
        40415,
        "Location40415",
    )
    .await;
    // Nothing changed.
    let reply = run(&db, doc! {"count": "plain", "query": {"x": 1}}).await;
    assert_eq!(num(&reply, "n"), 0);
}

#[tokio::test]
async fn out_and_merge_into_a_view_are_refused() {
    let (_srv, db) = setup().await;
    assert_ok(&run(&db, doc! {"create": "v", "viewOn": "plain", "pipeline": []}).await);
    for last in [
        doc! {"$out": "v"},
        doc! {"$merge": {"into": "v"}},
        doc! {"$merge": "v"},
    ] {
        expect_command_error(
            &db,
            doc! {"aggregate": "plain", "pipeline": [last], "cursor": {}},
            166,
            "CommandNotSupportedOnView",
        )
        .await;
    }
}

#[tokio::test]
async fn parameters_change_at_runtime_and_blocking_stages_spill_by_default() {
    let (srv, db) = setup().await;
    let admin = srv.db("admin");
    let name = "internalQueryMaxBlockingSortMemoryUsageBytes";
    let before = run(&admin, doc! {"getParameter": 1, name: 1}).await;
    assert_eq!(num(&before, name), 100 * 1024 * 1024);
    // A sort larger than the new limit.
    let reply = run(&admin, doc! {"setParameter": 1, name: 1}).await;
    assert_eq!(num(&reply, "was"), 100 * 1024 * 1024);
    let after = run(&admin, doc! {"getParameter": 1, name: 1}).await;
    assert_eq!(num(&after, name), 1);
    for coll in COLLECTIONS {
        // Without `allowDiskUse` it spills, as MongoDB 7.0 does by default.
        let reply = run(
            &db,
            doc! {"aggregate": coll, "pipeline": [{"$sort": {"qty": -1}}, {"$project": {"_id": 1}}], "cursor": {}},
        )
        .await;
        let sorted: Vec<i64> = first_batch(&reply).iter().map(|d| num(d, "_id")).collect();
        assert_eq!(sorted, vec![9, 8, 7, 6, 5, 4, 3, 2, 1, 0], "{coll}");
        expect_command_error(
            &db,
            doc! {"aggregate": coll, "pipeline": [{"$sort": {"qty": -1}}], "cursor": {}, "allowDiskUse": false},
            292,
            "QueryExceededMemoryLimitNoDiskUseAllowed",
        )
        .await;
    }
    expect_command_error(&admin, doc! {"setParameter": 1, name: 0}, 2, "BadValue").await;
    expect_command_error(
        &admin,
        doc! {"setParameter": 1, "maxBSONDepth": 10},
        20,
        "IllegalOperation",
    )
    .await;
    let f = expect_command_error(
        &admin,
        doc! {"setParameter": 1, "noSuchParameter": 1},
        72,
        "InvalidOptions",
    )
    .await;
    assert!(
        f.message
            .starts_with("attempted to set unrecognized parameter [noSuchParameter]"),
        "{f:?}"
    );
    expect_command_error(&admin, doc! {"setParameter": 1}, 72, "InvalidOptions").await;
    expect_command_error(
        &db,
        doc! {"setParameter": 1, name: 1000},
        13,
        "Unauthorized",
    )
    .await;
}

#[tokio::test]
async fn fsync_makes_writes_durable() {
    let (mut srv, db) = setup().await;
    db.collection::<Document>("plain")
        .insert_one(doc! {"_id": 100, "qty": 100})
        .await
        .unwrap();
    let reply = run(&srv.db("admin"), doc! {"fsync": 1}).await;
    assert_eq!(num(&reply, "numFiles"), 1, "{reply}");
    expect_command_error(
        &srv.db("admin"),
        doc! {"fsync": 1, "lock": true},
        115,
        "CommandNotSupported",
    )
    .await;
    srv.kill9();
    srv.restart().await;
    let db = srv.db(DB);
    let reply = run(&db, doc! {"count": "plain"}).await;
    assert_eq!(num(&reply, "n"), 11);
}

#[tokio::test]
async fn a_strict_stable_api_client_runs_only_version_1_commands() {
    let (srv, _) = setup().await;
    let client = srv
        .client_with(|o| {
            o.server_api = Some(
                ServerApi::builder()
                    .version(ServerApiVersion::V1)
                    .strict(true)
                    .build(),
            )
        })
        .await;
    let items = client.database(DB).collection::<Document>("plain");
    // The handshake and version-1 commands work.
    assert_eq!(
        items
            .count_documents(doc! {"qty": {"$gte": 5}})
            .await
            .unwrap(),
        5
    );
    let found = items.find_one(doc! {"_id": 3}).await.unwrap();
    assert_eq!(found, Some(doc! {"_id": 3, "qty": 3}));
    // `distinct` is not in version 1.
    let f = expect_failure(items.distinct("qty", doc! {}).await, 323, "APIStrictError");
    assert!(
        f.message.starts_with(
            "Provided apiStrict:true, but the command distinct is not in API Version 1."
        ),
        "{f:?}"
    );
    // Nor are some stages, wherever they sit in the pipeline; the rest run.
    let window =
        doc! {"$setWindowFields": {"sortBy": {"_id": 1}, "output": {"q": {"$linearFill": "$qty"}}}};
    for pipeline in [
        vec![doc! {"$currentOp": {}}],
        vec![doc! {"$unionWith": {"coll": "sharded", "pipeline": [window]}}],
    ] {
        let f = expect_failure(items.aggregate(pipeline).await, 323, "APIStrictError");
        assert!(
            f.message
                .ends_with("is not allowed with 'apiStrict: true' in API Version 1"),
            "{f:?}"
        );
    }
    let f = expect_failure(
        items
            .aggregate(vec![doc! {"$collStats": {"storageStats": {}}}])
            .await,
        323,
        "APIStrictError",
    );
    assert_eq!(
        f.message,
        "only the 'count' option to $collStats is supported in API Version 1"
    );
    let grouped: Vec<Document> = items
        .aggregate(vec![
            doc! {"$match": {"qty": {"$lt": 2}}},
            doc! {"$group": {"_id": null, "n": {"$sum": 1}}},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(grouped, vec![doc! {"_id": null, "n": 2}]);

    let mut conn = RawConn::connect(srv.addr).await;
    let reply = conn
        .command(
            DB,
            doc! {"find": "plain", "filter": {"_id": 1}, "apiVersion": "2"},
        )
        .await;
    assert_eq!(num(&reply, "code"), 322, "{reply}");
    let reply = conn
        .command(
            DB,
            doc! {"find": "plain", "filter": {"_id": 1}, "apiStrict": true},
        )
        .await;
    assert_eq!(num(&reply, "code"), 4886600, "{reply}");
}

#[tokio::test]
async fn read_preferences_are_checked_as_a_mongos_checks_them() {
    let (srv, _) = setup().await;
    let mut conn = RawConn::connect(srv.addr).await;
    let find =
        |pref: Document| doc! {"find": "plain", "filter": {"_id": 1}, "$readPreference": pref};
    for good in [
        doc! {"mode": "secondaryPreferred"},
        doc! {"mode": "nearest", "maxStalenessSeconds": 120, "tags": [{"dc": "east"}, {}]},
    ] {
        let reply = conn.command(DB, find(good.clone())).await;
        assert_eq!(num(&reply, "ok"), 1, "{good}: {reply}");
        assert_eq!(first_batch(&reply), vec![doc! {"_id": 1, "qty": 1}]);
    }
    for (bad, code) in [
        (doc! {"mode": "sometimes"}, 2),
        (doc! {"tags": [{"dc": "east"}]}, 40414),
        (doc! {"mode": "secondary", "maxStalenessSeconds": 10}, 2),
        (doc! {"mode": "primary", "maxStalenessSeconds": 100}, 2),
        (doc! {"mode": "primary", "tags": [{"dc": "east"}]}, 2),
    ] {
        let reply = conn.command(DB, find(bad.clone())).await;
        assert_eq!(num(&reply, "code"), code, "{bad}: {reply}");
    }
}

#[tokio::test]
async fn list_indexes_keeps_the_options_a_client_gave() {
    let (_srv, db) = setup().await;
    for name in COLLECTIONS {
        assert_ok(
            &run(
                &db,
                doc! {"createIndexes": name, "indexes": [
                    {"key": {"qty": 1}, "name": "qty_1", "background": true},
                    {"key": {"tag": 1}, "name": "tag_1", "sparse": true},
                ]},
            )
            .await,
        );
        let reply = run(&db, doc! {"listIndexes": name}).await;
        let specs: Vec<Document> = first_batch(&reply)
            .into_iter()
            .filter(|s| matches!(s.get_str("name"), Ok("qty_1" | "tag_1")))
            .collect();
        assert_eq!(
            specs,
            vec![
                doc! {"v": 2, "key": {"qty": 1}, "name": "qty_1", "background": true},
                doc! {"v": 2, "key": {"tag": 1}, "name": "tag_1", "sparse": true},
            ],
            "{name}"
        );
    }
}

#[tokio::test]
async fn dollar_prefixed_and_dotted_field_names_are_stored_and_reached() {
    let (_srv, db) = setup().await;
    for name in COLLECTIONS {
        let c = db.collection::<Document>(name);
        c.insert_one(doc! {"_id": 100, "$price": 50, "a.b": 5, "pricing": {"$discount": 60}})
            .await
            .unwrap();
        let stored = c.find_one(doc! {"_id": 100}).await.unwrap().unwrap();
        assert_eq!(
            stored,
            doc! {"_id": 100, "$price": 50, "a.b": 5, "pricing": {"$discount": 60}},
            "{name}"
        );
        // `$getField` reaches them, at the top or inside a sub-document.
        let reply = run(
            &db,
            doc! {"aggregate": name, "pipeline": [
                {"$match": {"$expr": {"$gt": [{"$getField": {"$literal": "$price"}}, 40]}}},
                {"$project": {
                    "_id": 0,
                    "price": {"$getField": {"$literal": "$price"}},
                    "ab": {"$getField": "a.b"},
                    "discount": {"$getField": {"field": {"$literal": "$discount"}, "input": "$pricing"}},
                }},
            ], "cursor": {}},
        )
        .await;
        assert_eq!(
            first_batch(&reply),
            vec![doc! {"price": 50, "ab": 5, "discount": 60}],
            "{name}"
        );
        // `$setField` changes one in a pipeline update.
        run(
            &db,
            doc! {"update": name, "updates": [{"q": {"_id": 100}, "u": [
                {"$replaceWith": {"$setField": {"field": {"$literal": "$price"}, "input": "$$ROOT", "value": 55}}},
            ]}]},
        )
        .await;
        let stored = c.find_one(doc! {"_id": 100}).await.unwrap().unwrap();
        assert_eq!(stored.get_i32("$price").ok(), Some(55), "{name}: {stored}");
    }
}

#[tokio::test]
async fn min_and_max_bound_a_hinted_index() {
    let (_srv, db) = setup().await;
    for name in COLLECTIONS {
        assert_ok(
            &run(
                &db,
                doc! {"createIndexes": name, "indexes": [{"key": {"qty": 1}, "name": "qty_1"}]},
            )
            .await,
        );
        let reply = run(
            &db,
            doc! {"find": name, "min": {"qty": 3}, "max": {"qty": 6}, "hint": {"qty": 1}, "sort": {"qty": 1}},
        )
        .await;
        let qty: Vec<i64> = first_batch(&reply).iter().map(|d| num(d, "qty")).collect();
        assert_eq!(qty, vec![3, 4, 5], "{name}");
        let reply = run(
            &db,
            doc! {"find": name, "min": {"qty": 8}, "hint": "qty_1", "filter": {"qty": {"$ne": 9}}},
        )
        .await;
        assert_eq!(ids(&first_batch(&reply)), vec![8], "{name}");
        expect_command_error(
            &db,
            doc! {"find": name, "min": {"qty": 3}},
            51173,
            "Location51173",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"find": name, "min": {"qty": 3}, "max": {"other": 6}, "hint": {"qty": 1}},
            51176,
            "Location51176",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"find": name, "min": {"other": 3}, "hint": {"qty": 1}},
            51174,
            "Location51174",
        )
        .await;

        // The `_id` index: [min, max) in `_id` order, on every partition.
        let reply = run(
            &db,
            doc! {"find": name, "min": {"_id": 2}, "max": {"_id": 5}, "hint": {"_id": 1}},
        )
        .await;
        let in_order: Vec<i64> = first_batch(&reply).iter().map(|d| num(d, "_id")).collect();
        assert_eq!(in_order, vec![2, 3, 4], "{name}");
        // With a filter, a sort and the index's name; a bound outside the
        // numbers (a string sorts after every number) keeps them all.
        let reply = run(
            &db,
            doc! {"find": name, "min": {"_id": 6}, "max": {"_id": "z"}, "hint": "_id_",
            "filter": {"qty": {"$ne": 8}}, "sort": {"_id": -1}},
        )
        .await;
        let in_order: Vec<i64> = first_batch(&reply).iter().map(|d| num(d, "_id")).collect();
        assert_eq!(in_order, vec![9, 7, 6], "{name}");
        // Pinned `_id`s outside the bounds are not found.
        let reply = run(
            &db,
            doc! {"find": name, "min": {"_id": 5}, "hint": {"_id": 1},
            "filter": {"_id": {"$in": [1, 5, 7]}}},
        )
        .await;
        assert_eq!(ids(&first_batch(&reply)), vec![5, 7], "{name}");
        expect_command_error(
            &db,
            doc! {"find": name, "min": {"qty": 3}, "hint": {"_id": 1}},
            51174,
            "Location51174",
        )
        .await;
    }
}
