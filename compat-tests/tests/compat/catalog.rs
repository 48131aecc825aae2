//! Catalog commands: databases and collections, and that the catalog is
//! durable across a restart.

use compat_tests::{
    bson::{doc, Document},
    expect_command_error, first_batch, num, numf, TestServer,
};
use futures::TryStreamExt;

async fn run(srv: &TestServer, db: &str, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    srv.db(db)
        .run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown} on {db} failed: {e}"))
}

async fn seed(srv: &TestServer, db: &str, coll: &str, n: i32) {
    let docs: Vec<Document> = (0..n).map(|i| doc! {"_id": i, "v": i}).collect();
    srv.db(db)
        .collection::<Document>(coll)
        .insert_many(docs)
        .await
        .unwrap();
}

fn names(databases: &[compat_tests::bson::Bson]) -> Vec<String> {
    databases
        .iter()
        .map(|d| {
            d.as_document()
                .unwrap()
                .get_str("name")
                .unwrap()
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn list_databases_shows_databases_with_data() {
    let srv = TestServer::start().await;
    seed(&srv, "cat_a", "c", 2).await;
    seed(&srv, "cat_b", "c", 1).await;
    let reply = run(&srv, "admin", doc! {"listDatabases": 1}).await;
    let dbs = reply
        .get_array("databases")
        .unwrap_or_else(|_| panic!("{reply}"));
    let got = names(dbs);
    assert!(got.contains(&"cat_a".to_string()), "{reply}");
    assert!(got.contains(&"cat_b".to_string()), "{reply}");
    for d in dbs {
        let d = d.as_document().unwrap();
        assert!(d.contains_key("sizeOnDisk"), "{d}");
        assert!(d.get_bool("empty").is_ok(), "{d}");
    }
    assert!(reply.contains_key("totalSize"), "{reply}");

    let typed = srv.client.list_database_names().await.unwrap();
    assert!(typed.contains(&"cat_a".to_string()) && typed.contains(&"cat_b".to_string()));
}

#[tokio::test]
async fn list_databases_always_shows_admin_and_config_as_a_mongos_does() {
    let srv = TestServer::start().await;
    let typed = srv.client.list_database_names().await.unwrap();
    assert_eq!(typed, vec!["admin", "config"]);
    seed(&srv, "app", "c", 1).await;
    let reply = run(&srv, "admin", doc! {"listDatabases": 1}).await;
    let dbs = reply.get_array("databases").unwrap();
    assert_eq!(names(dbs), vec!["admin", "app", "config"]);
    for d in dbs {
        let d = d.as_document().unwrap();
        assert_eq!(d.get_bool("empty"), Ok(false), "{d}");
    }
}

#[tokio::test]
async fn list_databases_does_not_show_databases_without_collections() {
    let srv = TestServer::start().await;
    // Touching a database handle or reading from it creates nothing.
    srv.db("ghost")
        .collection::<Document>("c")
        .find_one(doc! {})
        .await
        .unwrap();
    let typed = srv.client.list_database_names().await.unwrap();
    assert!(!typed.contains(&"ghost".to_string()), "{typed:?}");
}

#[tokio::test]
async fn list_databases_name_only() {
    let srv = TestServer::start().await;
    seed(&srv, "cat_n", "c", 1).await;
    let reply = run(&srv, "admin", doc! {"listDatabases": 1, "nameOnly": true}).await;
    let dbs = reply.get_array("databases").unwrap();
    assert!(names(dbs).contains(&"cat_n".to_string()));
    for d in dbs {
        let d = d.as_document().unwrap();
        assert_eq!(
            d.keys().collect::<Vec<_>>(),
            vec!["name"],
            "nameOnly entries: {d}"
        );
    }
    assert!(
        !reply.contains_key("totalSize"),
        "nameOnly reply has no totalSize: {reply}"
    );
}

#[tokio::test]
async fn list_databases_filter() {
    let srv = TestServer::start().await;
    seed(&srv, "flt_one", "c", 1).await;
    seed(&srv, "flt_two", "c", 1).await;
    seed(&srv, "other", "c", 1).await;
    let reply = run(
        &srv,
        "admin",
        doc! {"listDatabases": 1, "filter": {"name": "flt_two"}},
    )
    .await;
    assert_eq!(
        names(reply.get_array("databases").unwrap()),
        vec!["flt_two"]
    );

    let reply = run(
        &srv,
        "admin",
        doc! {"listDatabases": 1, "nameOnly": true, "filter": {"name": {"$regex": "^flt_"}}},
    )
    .await;
    let mut got = names(reply.get_array("databases").unwrap());
    got.sort();
    assert_eq!(got, vec!["flt_one", "flt_two"]);

    let typed = srv
        .client
        .list_database_names()
        .filter(doc! {"name": {"$in": ["other", "nope"]}})
        .await
        .unwrap();
    assert_eq!(typed, vec!["other"]);
}

#[tokio::test]
async fn list_databases_is_admin_only() {
    let srv = TestServer::start().await;
    expect_command_error(
        &srv.db("test"),
        doc! {"listDatabases": 1},
        13,
        "Unauthorized",
    )
    .await;
}

#[tokio::test]
async fn implicit_collection_creation_on_first_write() {
    let srv = TestServer::start().await;
    let db = srv.db("implicit");
    assert!(db.list_collection_names().await.unwrap().is_empty());
    db.collection::<Document>("made_by_insert")
        .insert_one(doc! {"a": 1})
        .await
        .unwrap();
    db.collection::<Document>("made_by_upsert")
        .update_one(doc! {"k": 1}, doc! {"$set": {"v": 1}})
        .upsert(true)
        .await
        .unwrap();
    // An update that matches nothing and does not upsert creates nothing.
    db.collection::<Document>("not_made")
        .update_one(doc! {"k": 1}, doc! {"$set": {"v": 1}})
        .await
        .unwrap();
    let mut got = db.list_collection_names().await.unwrap();
    got.sort();
    assert_eq!(got, vec!["made_by_insert", "made_by_upsert"]);
}

#[tokio::test]
async fn list_collections_shape() {
    let srv = TestServer::start().await;
    seed(&srv, "lc", "alpha", 1).await;
    let reply = run(&srv, "lc", doc! {"listCollections": 1}).await;
    let cursor = reply.get_document("cursor").unwrap();
    assert_eq!(num(cursor, "id"), 0, "{reply}");
    assert_eq!(
        cursor.get_str("ns").ok(),
        Some("lc.$cmd.listCollections"),
        "{reply}"
    );
    let batch = first_batch(&reply);
    assert_eq!(batch.len(), 1, "{reply}");
    let c = &batch[0];
    assert_eq!(c.get_str("name").ok(), Some("alpha"));
    assert_eq!(c.get_str("type").ok(), Some("collection"));
    assert!(c.get_document("options").is_ok(), "{c}");
    let info = c
        .get_document("info")
        .unwrap_or_else(|_| panic!("no info: {c}"));
    assert_eq!(info.get_bool("readOnly").ok(), Some(false), "{c}");
    let id_index = c
        .get_document("idIndex")
        .unwrap_or_else(|_| panic!("no idIndex: {c}"));
    assert_eq!(
        id_index.get_document("key").ok(),
        Some(&doc! {"_id": 1}),
        "{c}"
    );
    assert_eq!(id_index.get_str("name").ok(), Some("_id_"), "{c}");
}

#[tokio::test]
async fn list_collections_name_only_and_filter() {
    let srv = TestServer::start().await;
    for c in ["x1", "x2", "y1"] {
        seed(&srv, "lcf", c, 1).await;
    }
    let reply = run(&srv, "lcf", doc! {"listCollections": 1, "nameOnly": true}).await;
    for c in first_batch(&reply) {
        let mut keys: Vec<_> = c.keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            vec!["name", "type"],
            "nameOnly entries hold name and type: {c}"
        );
    }
    let reply = run(
        &srv,
        "lcf",
        doc! {"listCollections": 1, "filter": {"name": "x2"}},
    )
    .await;
    let got: Vec<_> = first_batch(&reply)
        .iter()
        .map(|d| d.get_str("name").unwrap().to_string())
        .collect();
    assert_eq!(got, vec!["x2"]);

    let mut typed = srv
        .db("lcf")
        .list_collection_names()
        .filter(doc! {"name": {"$regex": "^x"}})
        .await
        .unwrap();
    typed.sort();
    assert_eq!(typed, vec!["x1", "x2"]);

    let reply = run(
        &srv,
        "lcf",
        doc! {"listCollections": 1, "filter": {"type": "collection"}},
    )
    .await;
    assert_eq!(first_batch(&reply).len(), 3);
}

#[tokio::test]
async fn list_collections_cursor_batches() {
    let srv = TestServer::start().await;
    for i in 0..5 {
        seed(&srv, "lcb", &format!("c{i}"), 1).await;
    }
    let reply = run(
        &srv,
        "lcb",
        doc! {"listCollections": 1, "cursor": {"batchSize": 2}},
    )
    .await;
    assert_eq!(first_batch(&reply).len(), 2, "{reply}");
    assert_ne!(compat_tests::cursor_id(&reply), 0, "more to come: {reply}");

    // The driver follows the cursor with getMore.
    let specs: Vec<_> = srv
        .db("lcb")
        .list_collections()
        .batch_size(2)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut got: Vec<_> = specs.into_iter().map(|s| s.name).collect();
    got.sort();
    assert_eq!(got, vec!["c0", "c1", "c2", "c3", "c4"]);
}

#[tokio::test]
async fn create_makes_an_empty_collection() {
    let srv = TestServer::start().await;
    let db = srv.db("cr");
    db.create_collection("empty").await.unwrap();
    assert_eq!(db.list_collection_names().await.unwrap(), vec!["empty"]);
    assert_eq!(
        db.collection::<Document>("empty")
            .count_documents(doc! {})
            .await
            .unwrap(),
        0
    );
    assert!(srv
        .client
        .list_database_names()
        .await
        .unwrap()
        .contains(&"cr".to_string()));
}

#[tokio::test]
async fn create_existing_collection_with_same_options_is_ok() {
    // MongoDB 7.0: identical options → success, no action.
    let srv = TestServer::start().await;
    run(&srv, "cr2", doc! {"create": "c"}).await;
    let reply = run(&srv, "cr2", doc! {"create": "c"}).await;
    assert_eq!(numf(&reply, "ok"), 1.0);
    seed(&srv, "cr2", "d", 1).await;
    let reply = run(&srv, "cr2", doc! {"create": "d"}).await;
    assert_eq!(numf(&reply, "ok"), 1.0);
    assert_eq!(
        srv.db("cr2").list_collection_names().await.unwrap().len(),
        2
    );
}

#[tokio::test]
async fn create_invalid_names_are_rejected() {
    let srv = TestServer::start().await;
    let db = srv.db("crbad");
    expect_command_error(&db, doc! {"create": ""}, 73, "InvalidNamespace").await;
    expect_command_error(&db, doc! {"create": "a$b"}, 73, "InvalidNamespace").await;
    compat_tests::expect_command_error_in(
        &db,
        doc! {"create": 1},
        &[(2, "BadValue"), (73, "InvalidNamespace")],
    )
    .await;
}

#[tokio::test]
async fn create_capped_works_or_fails_clearly() {
    let srv = TestServer::start().await;
    let db = srv.db("capped");
    match db
        .run_command(doc! {"create": "cap", "capped": true, "size": 4096})
        .await
    {
        Ok(reply) => {
            assert_eq!(numf(&reply, "ok"), 1.0);
            let reply = run(
                &srv,
                "capped",
                doc! {"listCollections": 1, "filter": {"name": "cap"}},
            )
            .await;
            let opts = first_batch(&reply)[0]
                .get_document("options")
                .unwrap()
                .clone();
            assert_eq!(opts.get_bool("capped").ok(), Some(true), "{opts}");
        }
        Err(e) => {
            let f = compat_tests::failure(&e).unwrap_or_else(|| panic!("not a server error: {e}"));
            assert_ne!(f.code, 0, "{f:?}");
            assert!(!f.code_name.is_empty(), "{f:?}");
            assert!(
                f.message.to_lowercase().contains("capped"),
                "message should say capped: {f:?}"
            );
            // Nothing was created.
            assert!(db.list_collection_names().await.unwrap().is_empty());
        }
    }
}

#[tokio::test]
async fn drop_removes_collection_and_documents() {
    let srv = TestServer::start().await;
    seed(&srv, "dr", "gone", 3).await;
    seed(&srv, "dr", "kept", 1).await;
    let reply = run(&srv, "dr", doc! {"drop": "gone"}).await;
    assert_eq!(numf(&reply, "ok"), 1.0);
    assert_eq!(
        srv.db("dr").list_collection_names().await.unwrap(),
        vec!["kept"]
    );
    let coll = srv.db("dr").collection::<Document>("gone");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 0);
    // Re-creating starts empty.
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test]
async fn drop_missing_collection_is_ok_on_mongos() {
    let srv = TestServer::start().await;
    let reply = run(&srv, "dr2", doc! {"drop": "never_was"}).await;
    assert_eq!(numf(&reply, "ok"), 1.0);
    srv.db("dr2")
        .collection::<Document>("never_was")
        .drop()
        .await
        .unwrap();
}

#[tokio::test]
async fn drop_database_removes_everything() {
    let srv = TestServer::start().await;
    seed(&srv, "ddb", "a", 2).await;
    seed(&srv, "ddb", "b", 2).await;
    seed(&srv, "ddb_other", "a", 1).await;
    let reply = run(&srv, "ddb", doc! {"dropDatabase": 1}).await;
    assert_eq!(numf(&reply, "ok"), 1.0);
    let dbs = srv.client.list_database_names().await.unwrap();
    assert!(!dbs.contains(&"ddb".to_string()), "{dbs:?}");
    assert!(dbs.contains(&"ddb_other".to_string()), "{dbs:?}");
    assert!(srv
        .db("ddb")
        .list_collection_names()
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        srv.db("ddb")
            .collection::<Document>("a")
            .count_documents(doc! {})
            .await
            .unwrap(),
        0
    );
    // Dropping a database that does not exist is fine.
    srv.db("never_db").drop().await.unwrap();
}

#[tokio::test]
async fn rename_collection_moves_documents() {
    let srv = TestServer::start().await;
    seed(&srv, "rn", "src", 3).await;
    run(
        &srv,
        "admin",
        doc! {"renameCollection": "rn.src", "to": "rn.dst"},
    )
    .await;
    let db = srv.db("rn");
    assert_eq!(db.list_collection_names().await.unwrap(), vec!["dst"]);
    let dst = db.collection::<Document>("dst");
    assert_eq!(dst.count_documents(doc! {}).await.unwrap(), 3);
    assert_eq!(
        dst.find_one(doc! {"_id": 2}).await.unwrap(),
        Some(doc! {"_id": 2, "v": 2})
    );
}

#[tokio::test]
async fn rename_collection_errors_and_drop_target() {
    let srv = TestServer::start().await;
    seed(&srv, "rn2", "a", 2).await;
    seed(&srv, "rn2", "b", 5).await;
    let admin = srv.db("admin");
    expect_command_error(
        &admin,
        doc! {"renameCollection": "rn2.a", "to": "rn2.b"},
        48,
        "NamespaceExists",
    )
    .await;
    expect_command_error(
        &admin,
        doc! {"renameCollection": "rn2.zzz", "to": "rn2.c"},
        26,
        "NamespaceNotFound",
    )
    .await;
    expect_command_error(
        &srv.db("rn2"),
        doc! {"renameCollection": "rn2.a", "to": "rn2.c"},
        13,
        "Unauthorized",
    )
    .await;
    run(
        &srv,
        "admin",
        doc! {"renameCollection": "rn2.a", "to": "rn2.b", "dropTarget": true},
    )
    .await;
    let db = srv.db("rn2");
    assert_eq!(db.list_collection_names().await.unwrap(), vec!["b"]);
    assert_eq!(
        db.collection::<Document>("b")
            .count_documents(doc! {})
            .await
            .unwrap(),
        2
    );
}

#[tokio::test]
async fn coll_stats_counts_documents() {
    let srv = TestServer::start().await;
    seed(&srv, "cs", "c", 7).await;
    let reply = run(&srv, "cs", doc! {"collStats": "c"}).await;
    assert_eq!(reply.get_str("ns").ok(), Some("cs.c"), "{reply}");
    assert_eq!(num(&reply, "count"), 7, "{reply}");
    assert!(num(&reply, "size") > 0, "{reply}");
    assert!(reply.contains_key("storageSize"), "{reply}");
    assert!(num(&reply, "nindexes") >= 1, "{reply}");
}

#[tokio::test]
async fn db_stats_counts_collections_and_objects() {
    let srv = TestServer::start().await;
    seed(&srv, "dbs", "a", 2).await;
    seed(&srv, "dbs", "b", 3).await;
    let reply = run(&srv, "dbs", doc! {"dbStats": 1}).await;
    assert_eq!(reply.get_str("db").ok(), Some("dbs"), "{reply}");
    assert_eq!(num(&reply, "collections"), 2, "{reply}");
    assert_eq!(num(&reply, "objects"), 5, "{reply}");
    assert!(numf(&reply, "dataSize") > 0.0, "{reply}");
    assert!(
        reply.contains_key("storageSize") && reply.contains_key("indexes"),
        "{reply}"
    );
}

#[tokio::test]
async fn catalog_survives_restart() {
    let mut srv = TestServer::start().await;
    srv.db("dur").create_collection("empty_one").await.unwrap();
    seed(&srv, "dur", "with_data", 4).await;
    seed(&srv, "dur", "to_drop", 1).await;
    seed(&srv, "dur", "to_rename", 2).await;
    seed(&srv, "dur_gone", "c", 1).await;
    srv.db("dur")
        .collection::<Document>("to_drop")
        .drop()
        .await
        .unwrap();
    run(
        &srv,
        "admin",
        doc! {"renameCollection": "dur.to_rename", "to": "dur.renamed"},
    )
    .await;
    srv.db("dur_gone").drop().await.unwrap();

    srv.restart().await;

    let mut got = srv.db("dur").list_collection_names().await.unwrap();
    got.sort();
    assert_eq!(got, vec!["empty_one", "renamed", "with_data"]);
    let dbs = srv.client.list_database_names().await.unwrap();
    assert!(
        dbs.contains(&"dur".to_string()) && !dbs.contains(&"dur_gone".to_string()),
        "{dbs:?}"
    );
    let c = srv.db("dur").collection::<Document>("with_data");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 4);
    assert_eq!(
        c.find_one(doc! {"_id": 3}).await.unwrap(),
        Some(doc! {"_id": 3, "v": 3})
    );
    assert_eq!(
        srv.db("dur")
            .collection::<Document>("renamed")
            .count_documents(doc! {})
            .await
            .unwrap(),
        2
    );
}
