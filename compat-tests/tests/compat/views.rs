//! Views through the official driver, as a MongoDB 7.0 user sees them:
//! `create` with `viewOn` and `pipeline`; `find`, `count`, `distinct`,
//! `aggregate` and the driver's `count_documents` over a view (with
//! `getMore`); views on views; `listCollections` with `type: "view"`;
//! `collMod` and `drop` of a view; writes refused with 166; malformed and
//! cyclic definitions refused; definitions kept across a restart; and
//! the same answers over an unsharded and an 8-partition sharded
//! collection.

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    expect_command_error, expect_failure,
    mongodb::{Collection, Database},
    TestServer,
};
use futures::TryStreamExt;

const DB: &str = "db";

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

fn coll(db: &Database, name: &str) -> Collection<Document> {
    db.collection::<Document>(name)
}

async fn docs(cursor: compat_tests::mongodb::Cursor<Document>) -> Vec<Document> {
    cursor.try_collect().await.unwrap()
}

/// 30 orders over 3 regions, in `name`, sharded over 8 partitions on
/// `region` when `sharded`.
async fn orders(srv: &TestServer, name: &str, sharded: bool) {
    let db = srv.db(DB);
    let regions = ["east", "north", "west"];
    let orders: Vec<Document> = (0..30)
        .map(|i| {
            doc! {
                "_id": i,
                "region": regions[i as usize % 3],
                "qty": i * 2,
                "tags": if i % 2 == 0 { vec!["even"] } else { vec!["odd", "x"] },
            }
        })
        .collect();
    coll(&db, name).insert_many(orders).await.unwrap();
    if sharded {
        let reply = run(
            &srv.db("admin"),
            doc! {
                "shardCollection": format!("{DB}.{name}"),
                "key": {"region": "hashed"},
                "numInitialChunks": 8,
            },
        )
        .await;
        assert_ok(&reply);
    }
}

/// Everything a reader does with a view over `base`, as plain values to
/// compare between layouts.
async fn reads_through_views(srv: &TestServer, base: &str) -> Vec<Bson> {
    let db = srv.db(DB);
    let big = format!("{base}_big");
    let small = format!("{base}_small_east");
    run(
        &db,
        doc! {"create": &big, "viewOn": base, "pipeline": [
            {"$match": {"qty": {"$gte": 20}}},
            {"$project": {"region": 1, "qty": 1, "tags": 1}},
        ]},
    )
    .await;
    // A view on a view: both pipelines apply, the inner one first.
    run(
        &db,
        doc! {"create": &small, "viewOn": &big, "pipeline": [
            {"$match": {"region": "east"}},
        ]},
    )
    .await;
    let v = coll(&db, &big);
    let mut out = Vec::new();

    // find: filter, sort, skip, limit and projection after the view's own.
    let found = docs(
        v.find(doc! {"region": "west"})
            .sort(doc! {"qty": -1})
            .skip(1)
            .limit(3)
            .projection(doc! {"qty": 1, "_id": 0})
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        found,
        vec![doc! {"qty": 52}, doc! {"qty": 46}, doc! {"qty": 40}]
    );
    out.push(Bson::from(found));

    // A small batch size leaves the rest to getMore on the view's cursor.
    let reply = run(&db, doc! {"find": &big, "sort": {"_id": 1}, "batchSize": 2}).await;
    let cursor = reply.get_document("cursor").unwrap();
    assert_eq!(cursor.get_str("ns").unwrap(), format!("{DB}.{big}"));
    assert_eq!(cursor.get_array("firstBatch").unwrap().len(), 2);
    let all = docs(
        v.find(doc! {})
            .sort(doc! {"_id": 1})
            .batch_size(3)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(all.len(), 20);
    assert_eq!(
        all[0],
        doc! {"_id": 10, "region": "north", "qty": 20, "tags": ["even"]}
    );
    out.push(Bson::from(all));

    // count, count_documents, estimated_document_count and distinct.
    let reply = run(&db, doc! {"count": &big, "query": {"region": "east"}}).await;
    assert_eq!(reply.get("n"), Some(&Bson::Int32(6)), "{reply}");
    out.push(reply.get("n").cloned().unwrap());
    assert_eq!(v.count_documents(doc! {"tags": "odd"}).await.unwrap(), 10);
    assert_eq!(v.estimated_document_count().await.unwrap(), 20);
    let reply = run(&db, doc! {"count": &big, "skip": 15, "limit": 10}).await;
    assert_eq!(reply.get("n"), Some(&Bson::Int32(5)), "{reply}");
    let regions = v
        .distinct("region", doc! {"qty": {"$lt": 30}})
        .await
        .unwrap();
    assert_eq!(
        regions,
        vec![Bson::from("east"), Bson::from("north"), Bson::from("west")]
    );
    let tags = v.distinct("tags", doc! {}).await.unwrap();
    assert_eq!(
        tags,
        vec![Bson::from("even"), Bson::from("odd"), Bson::from("x")]
    );
    out.push(Bson::from(tags));

    // aggregate over the view on a view.
    let grouped = docs(
        coll(&db, &small)
            .aggregate(vec![
                doc! {"$group": {"_id": "$region", "total": {"$sum": "$qty"}, "n": {"$sum": 1}}},
            ])
            .await
            .unwrap(),
    )
    .await;
    // east orders are 0, 3, …, 27; those with qty >= 20 are 12, …, 27.
    assert_eq!(grouped, vec![doc! {"_id": "east", "total": 234, "n": 6}]);
    out.push(Bson::from(grouped));
    let count = run(&db, doc! {"count": &small}).await;
    assert_eq!(count.get("n"), Some(&Bson::Int32(6)));
    out
}

#[tokio::test]
async fn views_read_alike_over_unsharded_and_sharded_collections() {
    let srv = TestServer::start().await;
    orders(&srv, "orders", false).await;
    orders(&srv, "orders_sharded", true).await;
    let unsharded = reads_through_views(&srv, "orders").await;
    let sharded = reads_through_views(&srv, "orders_sharded").await;
    assert_eq!(unsharded, sharded);
}

#[tokio::test]
async fn list_collections_shows_views_and_drop_and_coll_mod_change_them() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    orders(&srv, "orders", false).await;
    let pipeline = vec![doc! {"$match": {"region": "east"}}];
    run(
        &db,
        doc! {"create": "east", "viewOn": "orders", "pipeline": pipeline.clone()},
    )
    .await;
    // Creating the same view again is a no-op; another definition is 48.
    run(
        &db,
        doc! {"create": "east", "viewOn": "orders", "pipeline": pipeline.clone()},
    )
    .await;
    expect_command_error(
        &db,
        doc! {"create": "east", "viewOn": "orders", "pipeline": []},
        48,
        "NamespaceExists",
    )
    .await;
    expect_command_error(&db, doc! {"create": "east"}, 48, "NamespaceExists").await;
    expect_command_error(
        &db,
        doc! {"create": "orders", "viewOn": "east", "pipeline": []},
        48,
        "NamespaceExists",
    )
    .await;

    let infos: Vec<Document> =
        docs_of(&db, doc! {"listCollections": 1, "filter": {"type": "view"}}).await;
    assert_eq!(
        infos,
        vec![doc! {
            "name": "east",
            "type": "view",
            "options": {"viewOn": "orders", "pipeline": pipeline},
            "info": {"readOnly": true},
        }]
    );
    let mut names = db.list_collection_names().await.unwrap();
    names.sort();
    assert_eq!(names, vec!["east", "orders", "system.views"]);

    // collMod redefines it; both fields are required.
    run(
        &db,
        doc! {"collMod": "east", "viewOn": "orders", "pipeline": [{"$match": {"qty": 0}}]},
    )
    .await;
    let found = docs(coll(&db, "east").find(doc! {}).await.unwrap()).await;
    assert_eq!(
        found,
        vec![doc! {"_id": 0, "region": "east", "qty": 0, "tags": ["even"]}]
    );
    expect_command_error(
        &db,
        doc! {"collMod": "east", "pipeline": []},
        72,
        "InvalidOptions",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"collMod": "east", "viewOn": "orders", "pipeline": [], "validator": {"a": 1}},
        72,
        "InvalidOptions",
    )
    .await;

    // Dropping the view leaves the collection.
    coll(&db, "east").drop().await.unwrap();
    let names = db.list_collection_names().await.unwrap();
    assert!(!names.contains(&"east".to_string()), "{names:?}");
    assert_eq!(
        coll(&db, "orders").count_documents(doc! {}).await.unwrap(),
        30
    );
    // A dropped view's name is free for a collection.
    coll(&db, "east").insert_one(doc! {"_id": 1}).await.unwrap();
}

async fn docs_of(db: &Database, cmd: Document) -> Vec<Document> {
    db.run_cursor_command(cmd)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test]
async fn writes_and_index_changes_on_a_view_are_refused() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    orders(&srv, "orders", false).await;
    run(
        &db,
        doc! {"create": "v", "viewOn": "orders", "pipeline": []},
    )
    .await;
    let v = coll(&db, "v");
    let code = (166, "CommandNotSupportedOnView");
    expect_failure(v.insert_one(doc! {"_id": 100}).await, code.0, code.1);
    expect_failure(
        v.update_one(doc! {"_id": 1}, doc! {"$set": {"a": 1}}).await,
        code.0,
        code.1,
    );
    expect_failure(v.delete_many(doc! {}).await, code.0, code.1);
    expect_failure(v.find_one_and_delete(doc! {"_id": 1}).await, code.0, code.1);
    for cmd in [
        doc! {"createIndexes": "v", "indexes": [{"key": {"a": 1}, "name": "a_1"}]},
        doc! {"dropIndexes": "v", "index": "*"},
        doc! {"listIndexes": "v"},
        doc! {"collStats": "v"},
        doc! {"renameCollection": "db.v", "to": "db.w"},
    ] {
        let on_admin = cmd.contains_key("renameCollection");
        let target = if on_admin {
            srv.db("admin")
        } else {
            db.clone()
        };
        expect_command_error(&target, cmd, code.0, code.1).await;
    }
    expect_command_error(
        &srv.db("admin"),
        doc! {"shardCollection": "db.v", "key": {"a": "hashed"}},
        code.0,
        code.1,
    )
    .await;
    // Nothing was written through it.
    assert_eq!(
        coll(&db, "orders").count_documents(doc! {}).await.unwrap(),
        30
    );
}

#[tokio::test]
async fn malformed_and_cyclic_views_are_refused() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    expect_command_error(
        &db,
        doc! {"create": "v", "viewOn": 1, "pipeline": []},
        14,
        "TypeMismatch",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"create": "v", "viewOn": "c", "pipeline": {"$match": {}}},
        14,
        "TypeMismatch",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"create": "v", "viewOn": "c", "pipeline": [{"$out": "x"}]},
        167,
        "OptionNotSupportedOnView",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"create": "v", "viewOn": "c", "pipeline": [{"$bogus": 1}]},
        40324,
        "",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"create": "v", "pipeline": []},
        72,
        "InvalidOptions",
    )
    .await;
    // A cycle through collMod.
    run(&db, doc! {"create": "a", "viewOn": "c", "pipeline": []}).await;
    run(&db, doc! {"create": "b", "viewOn": "a", "pipeline": []}).await;
    expect_command_error(
        &db,
        doc! {"collMod": "a", "viewOn": "b", "pipeline": []},
        93,
        "GraphContainsCycle",
    )
    .await;
    // Twenty levels of views on views, and no more.
    let mut on = "b".to_string();
    for level in 3..=20 {
        let name = format!("v{level}");
        run(&db, doc! {"create": &name, "viewOn": &on, "pipeline": []}).await;
        on = name;
    }
    coll(&db, "c").insert_one(doc! {"_id": 1}).await.unwrap();
    let found = docs(coll(&db, &on).find(doc! {}).await.unwrap()).await;
    assert_eq!(found, vec![doc! {"_id": 1}]);
    expect_command_error(
        &db,
        doc! {"create": "v21", "viewOn": &on, "pipeline": []},
        165,
        "ViewDepthLimitExceeded",
    )
    .await;
}

#[tokio::test]
async fn views_survive_a_restart() {
    let mut srv = TestServer::start().await;
    orders(&srv, "orders", true).await;
    run(
        &srv.db(DB),
        doc! {"create": "north", "viewOn": "orders", "pipeline": [{"$match": {"region": "north"}}]},
    )
    .await;
    srv.restart().await;
    let db = srv.db(DB);
    assert_eq!(
        coll(&db, "north").count_documents(doc! {}).await.unwrap(),
        10
    );
    expect_failure(
        coll(&db, "north").insert_one(doc! {"_id": 99}).await,
        166,
        "CommandNotSupportedOnView",
    );
}
