//! Indexes after `kill -9`: a server killed during a concurrent load into a
//! collection with several indexes (one unique, one multikey, one sparse)
//! comes back with every index agreeing with its collection: `validate`
//! says so, and every index-backed (hinted) query returns exactly what a
//! collection scan (`hint: {$natural: 1}`) returns.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    cursor_id, expect_failure, first_batch,
    mongodb::{error::ErrorKind, Database},
    next_batch, num, TestServer,
};

const WRITERS: usize = 6;
const DB: &str = "crash";
const COLL: &str = "c";

/// What one writer saw acknowledged.
#[derive(Default)]
struct Acked {
    inserted: Vec<String>,
    deleted: Vec<String>,
    /// Deletes sent but not acknowledged: the document may or may not be there.
    maybe_deleted: Vec<String>,
}

fn index_specs(sharded: bool) -> Vec<Document> {
    let unique = if sharded {
        // A unique index of a sharded collection starts with the shard key.
        doc! {"key": {"k": 1, "u": 1}, "name": "k_1_u_1", "unique": true}
    } else {
        doc! {"key": {"u": 1}, "name": "u_1", "unique": true}
    };
    vec![
        unique,
        doc! {"key": {"w": 1, "i": -1}, "name": "w_1_i_-1"},
        doc! {"key": {"tags": 1}, "name": "tags_1"},
        doc! {"key": {"n.v": 1}, "name": "n.v_1", "sparse": true},
        doc! {"key": {"g": 1}, "name": "g_1"},
    ]
}

fn index_names(sharded: bool) -> Vec<&'static str> {
    let unique = if sharded { "k_1_u_1" } else { "u_1" };
    vec![unique, "w_1_i_-1", "tags_1", "n.v_1", "g_1"]
}

fn is_dup(e: &compat_tests::mongodb::error::Error) -> bool {
    compat_tests::failure(e).is_some_and(|f| f.code == 11000)
}

fn gone(e: &compat_tests::mongodb::error::Error) -> bool {
    !matches!(*e.kind, ErrorKind::Command(_) | ErrorKind::Write(_))
}

/// `WRITERS` clients inserting, updating indexed fields, deleting and
/// trying duplicates until `stop` is set or the server goes away.
async fn load(
    srv: &TestServer,
    round: usize,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Acked>> {
    let mut handles = Vec::new();
    for w in 0..WRITERS {
        let client = srv
            .client_with(|o| {
                o.server_selection_timeout = Some(Duration::from_secs(2));
                o.retry_writes = Some(false);
            })
            .await;
        let stop = stop.clone();
        handles.push(tokio::spawn(async move {
            let coll = client.database(DB).collection::<Document>(COLL);
            let mut acked = Acked::default();
            let mut i: i64 = 0;
            // Single inserts are `…-s{i}`, batches `…-b{i}`.
            let new_doc = |tag: &str, i: i64| {
                let id = format!("r{round}-w{w}-{tag}{i}");
                let mut d = doc! {
                    "_id": &id,
                    "k": (i % 50) as i32,
                    "u": format!("u-{id}"),
                    "w": w as i32,
                    "i": i,
                    "g": (i % 97) as i32,
                    "tags": [(i % 7) as i32, (i % 11) as i32, format!("t{}", i % 3)],
                    "pad": "p".repeat(40),
                };
                if i % 4 != 0 {
                    d.insert("n", doc! {"v": (i % 13) as i32});
                }
                (id, d)
            };
            while !stop.load(Ordering::Relaxed) {
                let step = i % 10;
                let result = if step == 3 && i > 10 {
                    // Move the keys of an earlier single insert (step 5).
                    let target = format!("r{round}-w{w}-s{}", i - 8);
                    coll.update_one(
                        doc! {"_id": &target},
                        doc! {
                            "$set": {"g": (i % 89) as i32, "tags": [(i % 5) as i32], "u": format!("moved-{target}-{i}")},
                            "$unset": {"n": ""},
                            "$inc": {"i": 1000000},
                        },
                    )
                    .await
                    .map(|_| ())
                } else if step == 6 && i > 10 {
                    // Delete an earlier single insert (step 1).
                    let target = format!("r{round}-w{w}-s{}", i - 5);
                    match coll.delete_one(doc! {"_id": &target}).await {
                        Ok(r) => {
                            if r.deleted_count == 1 {
                                acked.deleted.push(target);
                            }
                            Ok(())
                        }
                        Err(e) => {
                            acked.maybe_deleted.push(target);
                            Err(e)
                        }
                    }
                } else if step == 8 && i > 10 {
                    // A duplicate of the unique key of the single insert
                    // of step 7 (never moved nor deleted) must be refused.
                    let (_, mut d) = new_doc("s", i - 1);
                    d.insert("_id", format!("dup-r{round}-w{w}-{i}"));
                    match coll.insert_one(d).await {
                        Ok(_) => panic!("a duplicate unique key was accepted"),
                        Err(e) if is_dup(&e) => Ok(()),
                        Err(e) => Err(e),
                    }
                } else if step % 2 == 0 {
                    let docs: Vec<(String, Document)> = (0..4).map(|k| new_doc("b", i * 10 + k)).collect();
                    let ids: Vec<String> = docs.iter().map(|(id, _)| id.clone()).collect();
                    match coll
                        .insert_many(docs.into_iter().map(|(_, d)| d).collect::<Vec<_>>())
                        .await
                    {
                        Ok(_) => {
                            acked.inserted.extend(ids);
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    let (id, d) = new_doc("s", i);
                    match coll.insert_one(d).await {
                        Ok(_) => {
                            acked.inserted.push(id);
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                };
                if let Err(e) = result {
                    if gone(&e) {
                        break;
                    }
                    panic!("writer {w}: unexpected server error {e}");
                }
                i += 1;
            }
            acked
        }));
    }
    handles
}

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

/// A find, every batch, sorted by `_id`.
async fn find_all(db: &Database, filter: Document, hint: Bson) -> Vec<Document> {
    find_cmd(
        db,
        doc! {"find": COLL, "filter": filter, "hint": hint, "sort": {"_id": 1}, "batchSize": 5000},
    )
    .await
}

/// Like [`find_all`], `_id`s only (for whole-collection scans).
async fn find_ids(db: &Database, filter: Document, hint: Bson) -> Vec<Document> {
    find_cmd(
        db,
        doc! {"find": COLL, "filter": filter, "hint": hint, "sort": {"_id": 1},
        "projection": {"_id": 1}, "batchSize": 5000},
    )
    .await
}

async fn find_cmd(db: &Database, cmd: Document) -> Vec<Document> {
    let reply = run(db, cmd).await;
    let mut docs = first_batch(&reply);
    let mut id = cursor_id(&reply);
    while id != 0 {
        let more = run(db, doc! {"getMore": id, "collection": COLL}).await;
        docs.extend(next_batch(&more));
        id = cursor_id(&more);
    }
    docs
}

fn id_set(docs: &[Document]) -> HashSet<String> {
    docs.iter()
        .map(|d| d.get_str("_id").unwrap().to_string())
        .collect()
}

async fn check_consistent(srv: &TestServer, sharded: bool, acked: &[Acked], round: usize) {
    let db = srv.db(DB);

    // validate: the indexes agree with the records.
    let v = run(&db, doc! {"validate": COLL}).await;
    assert_ok(&v);
    assert_eq!(
        v.get_bool("valid").ok(),
        Some(true),
        "round {round}: validate: {v}"
    );
    if let Ok(errors) = v.get_array("errors") {
        assert!(errors.is_empty(), "round {round}: {v}");
    }
    let natural = find_all(&db, doc! {}, Bson::Document(doc! {"$natural": 1})).await;
    if !sharded {
        let n = natural.len() as i64;
        assert_eq!(num(&v, "nrecords"), n, "round {round}: {v}");
        assert_eq!(num(&v, "nIndexes"), 6, "round {round}: {v}");
        let keys = v
            .get_document("keysPerIndex")
            .unwrap_or_else(|_| panic!("no keysPerIndex: {v}"));
        for name in ["_id_", "u_1", "w_1_i_-1", "g_1"] {
            assert_eq!(num(keys, name), n, "round {round}: {name}: {v}");
        }
        let with_n = natural.iter().filter(|d| d.contains_key("n")).count() as i64;
        assert_eq!(num(keys, "n.v_1"), with_n, "round {round}: {v}");
    }

    // Acknowledged writes are there; acknowledged deletes are not.
    let present = id_set(&natural);
    let mut maybe: HashSet<&String> = HashSet::new();
    for a in acked {
        maybe.extend(a.maybe_deleted.iter());
        maybe.extend(a.deleted.iter());
    }
    for a in acked {
        for id in &a.inserted {
            assert!(
                present.contains(id) || maybe.contains(id),
                "round {round}: acknowledged insert {id} lost"
            );
        }
        for id in &a.deleted {
            assert!(
                !present.contains(id),
                "round {round}: acknowledged delete of {id} undone"
            );
        }
    }
    assert!(
        !present.iter().any(|id| id.starts_with("dup-")),
        "round {round}: a duplicate got in"
    );

    // Every index answers like a collection scan.
    // Whole indexes, read through: each document once.
    let all_ids = &natural;
    for index in [index_names(sharded)[0], "w_1_i_-1", "tags_1", "g_1"] {
        let got = find_ids(&db, doc! {}, Bson::String(index.to_string())).await;
        let (w, g) = (id_set(all_ids), id_set(&got));
        assert!(
            got.len() == all_ids.len() && w == g,
            "round {round}: whole index {index}: {} entries, collection: {}; only in index: {:?}, only in scan: {:?}",
            got.len(),
            all_ids.len(),
            g.difference(&w).take(5).collect::<Vec<_>>(),
            w.difference(&g).take(5).collect::<Vec<_>>()
        );
    }
    let queries: Vec<(Document, &str)> = vec![
        (doc! {"u": {"$gte": "u-r0-w3"}}, index_names(sharded)[0]),
        (doc! {"u": {"$regex": "^moved-"}}, index_names(sharded)[0]),
        (doc! {"w": 2}, "w_1_i_-1"),
        (doc! {"w": {"$in": [1, 4]}, "i": {"$gte": 40}}, "w_1_i_-1"),
        (doc! {"i": {"$gte": 1000000}}, "w_1_i_-1"),
        (doc! {"tags": 3}, "tags_1"),
        (doc! {"tags": {"$in": ["t1", 9]}}, "tags_1"),
        (doc! {"tags": {"$gt": 8}}, "tags_1"),
        (doc! {"n.v": 5}, "n.v_1"),
        (doc! {"n.v": {"$lt": 3}}, "n.v_1"),
        (doc! {"g": {"$gte": 10, "$lt": 40}}, "g_1"),
        (doc! {"g": 0}, "g_1"),
    ];
    for (filter, index) in queries {
        let want = find_all(&db, filter.clone(), Bson::Document(doc! {"$natural": 1})).await;
        let got = find_all(&db, filter.clone(), Bson::String(index.to_string())).await;
        let (w, g) = (id_set(&want), id_set(&got));
        assert!(
            got.len() == want.len() && w == g,
            "round {round}: {filter} hinted {index}: {} documents, scan: {}; only in index: {:?}, only in scan: {:?}",
            got.len(),
            want.len(),
            g.difference(&w).take(5).collect::<Vec<_>>(),
            w.difference(&g).take(5).collect::<Vec<_>>()
        );
        assert_eq!(got, want, "round {round}: {filter} hinted {index}");
    }
    // The sparse index holds exactly the documents with `n.v`.
    let with_n = find_ids(&db, doc! {}, Bson::String("n.v_1".into())).await;
    let want = find_ids(
        &db,
        doc! {"n.v": {"$exists": true}},
        Bson::Document(doc! {"$natural": 1}),
    )
    .await;
    assert_eq!(
        id_set(&with_n),
        id_set(&want),
        "round {round}: sparse index n.v_1"
    );

    // The unique index still refuses duplicates.
    let sample = natural
        .iter()
        .find(|d| d.get_str("u").is_ok())
        .expect("some documents");
    let mut dup = sample.clone();
    dup.insert("_id", format!("dup-after-{round}"));
    let r = db.collection::<Document>(COLL).insert_one(dup).await;
    expect_failure(r, 11000, "");
}

async fn kill_during_load(sharded: bool) {
    let args: &[&str] = if sharded {
        &["--initial-partitions", "4"]
    } else {
        &[]
    };
    let mut srv = TestServer::start_with_args(args).await;
    let db = srv.db(DB);
    if sharded {
        let reply = run(
            &srv.db("admin"),
            doc! {"shardCollection": format!("{DB}.{COLL}"), "key": {"k": "hashed"}},
        )
        .await;
        assert_ok(&reply);
    }
    assert_ok(
        &run(
            &db,
            doc! {"createIndexes": COLL, "indexes": index_specs(sharded)},
        )
        .await,
    );

    let mut acked_all: Vec<Acked> = Vec::new();
    for round in 0..2 {
        let stop = Arc::new(AtomicBool::new(false));
        let handles = load(&srv, round, stop.clone()).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        srv.kill9();
        stop.store(true, Ordering::Relaxed);
        let mut n = 0;
        for h in handles {
            let a = h.await.expect("writer task");
            n += a.inserted.len();
            acked_all.push(a);
        }
        assert!(
            n > 0,
            "round {round}: no write was acknowledged before the kill"
        );

        srv.restart().await;
        check_consistent(&srv, sharded, &acked_all, round).await;
        // The indexes are all still there.
        let listed = first_batch(&run(&srv.db(DB), doc! {"listIndexes": COLL}).await);
        let names: Vec<&str> = listed
            .iter()
            .map(|s| s.get_str("name").unwrap_or(""))
            .collect();
        for want in index_names(sharded) {
            assert!(
                names.contains(&want),
                "round {round}: {want} lost: {names:?}"
            );
        }
    }
}

#[tokio::test]
async fn indexes_agree_with_the_collection_after_kill_9() {
    kill_during_load(false).await;
}

#[tokio::test]
async fn indexes_of_a_sharded_collection_agree_after_kill_9() {
    kill_during_load(true).await;
}
