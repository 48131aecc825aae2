//! Command options real test suites trip over, through the official
//! driver: command-level `let` (and an update statement's `c`) on
//! `find`, `update`, `delete` and `findAndModify`, seen by `$expr` and by
//! pipeline updates, on an unsharded and an 8-partition sharded copy of
//! the same data; options MongoDB 7.0 does not know (the `sort` of an
//! update statement, added in 8.0) refused as 7.0 refuses them; `$out`
//! and `$merge` into a view refused; `aggregate` spilling by default, as
//! 7.0's `allowDiskUseByDefault`; `setParameter` and `getParameter`; and
//! `fsync`.

use compat_tests::{
    assert_ok,
    bson::{doc, Document},
    expect_command_error, first_batch,
    mongodb::Database,
    num, TestServer,
};

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
