//! find / getMore / killCursors, projection, sort, skip, limit, batching;
//! count and distinct.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use compat_tests::{
    bson::{doc, Bson, Document},
    cursor_id, expect_command_error, first_batch,
    mongodb::event::{command::CommandEvent, EventHandler},
    next_batch, num, TestServer,
};
use futures::TryStreamExt;

async fn seed(srv: &TestServer, coll: &str, docs: Vec<Document>) {
    srv.db("f")
        .collection::<Document>(coll)
        .insert_many(docs)
        .await
        .unwrap();
}

/// Runs `cmd` on the first gateway: a raw `getMore` must reach the one
/// that opened its cursor.
async fn find_raw(srv: &TestServer, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    srv.pinned_db("f")
        .run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

async fn find_all(srv: &TestServer, cmd: Document) -> Vec<Document> {
    let reply = find_raw(srv, cmd).await;
    assert_eq!(
        cursor_id(&reply),
        0,
        "expected everything in one batch: {reply}"
    );
    first_batch(&reply)
}

fn ids(docs: &[Document]) -> Vec<Bson> {
    docs.iter()
        .map(|d| d.get("_id").cloned().unwrap_or(Bson::Null))
        .collect()
}

fn int_ids(docs: &[Document]) -> Vec<i32> {
    docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
}

fn people() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "name": "ann", "age": 31, "city": {"name": "Oslo", "zip": "0150"}, "tags": ["a", "b"]},
        doc! {"_id": 2, "name": "bob", "age": 25, "city": {"name": "Rome", "zip": "00100"}, "tags": ["b"]},
        doc! {"_id": 3, "name": "cid", "age": 47, "city": {"name": "Oslo", "zip": "0151"}, "tags": []},
        doc! {"_id": 4, "name": "dee", "age": 25, "city": {"name": "Lima", "zip": "15001"}},
        doc! {"_id": 5, "name": "eve", "age": 38, "tags": ["c", "a"]},
    ]
}

#[tokio::test]
async fn find_with_filter_returns_matching_documents_whole() {
    let srv = TestServer::start().await;
    seed(&srv, "p", people()).await;
    let got = find_all(
        &srv,
        doc! {"find": "p", "filter": {"city.name": "Oslo"}, "sort": {"_id": 1}},
    )
    .await;
    assert_eq!(got, vec![people()[0].clone(), people()[2].clone()]);
    let reply = find_raw(&srv, doc! {"find": "p", "filter": {"age": 25}}).await;
    let cursor = reply.get_document("cursor").unwrap();
    assert_eq!(cursor.get_str("ns").ok(), Some("f.p"), "{reply}");
    let mut got = int_ids(&first_batch(&reply));
    got.sort();
    assert_eq!(got, vec![2, 4]);
}

#[tokio::test]
async fn find_on_missing_collection_is_empty() {
    let srv = TestServer::start().await;
    let reply = find_raw(&srv, doc! {"find": "nothing_here", "filter": {}}).await;
    assert!(first_batch(&reply).is_empty());
    assert_eq!(cursor_id(&reply), 0);
}

#[tokio::test]
async fn projection_inclusion_exclusion_and_id() {
    let srv = TestServer::start().await;
    seed(&srv, "p", people()).await;
    let one = |proj: Document| {
        let srv = &srv;
        async move {
            let got = find_all(
                srv,
                doc! {"find": "p", "filter": {"_id": 1}, "projection": proj},
            )
            .await;
            assert_eq!(got.len(), 1);
            got.into_iter().next().unwrap()
        }
    };
    assert_eq!(one(doc! {"name": 1}).await, doc! {"_id": 1, "name": "ann"});
    assert_eq!(one(doc! {"name": 1, "_id": 0}).await, doc! {"name": "ann"});
    assert_eq!(
        one(doc! {"name": true, "age": 1}).await,
        doc! {"_id": 1, "name": "ann", "age": 31}
    );
    assert_eq!(
        one(doc! {"city.zip": 1}).await,
        doc! {"_id": 1, "city": {"zip": "0150"}}
    );
    assert_eq!(
        one(doc! {"city": 0, "tags": 0}).await,
        doc! {"_id": 1, "name": "ann", "age": 31}
    );
    assert_eq!(
        one(doc! {"city.zip": 0, "tags": 0, "age": 0}).await,
        doc! {"_id": 1, "name": "ann", "city": {"name": "Oslo"}}
    );
    assert_eq!(one(doc! {"_id": 0, "nosuch": 1}).await, doc! {});
    // Field order follows the document, not the projection.
    assert_eq!(
        one(doc! {"age": 1, "name": 1})
            .await
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        vec!["_id", "name", "age"]
    );
}

#[tokio::test]
async fn projection_mixing_inclusion_and_exclusion_is_an_error() {
    let srv = TestServer::start().await;
    seed(&srv, "p", people()).await;
    expect_command_error(
        &srv.db("f"),
        doc! {"find": "p", "projection": {"name": 1, "age": 0}},
        31254,
        "Location31254",
    )
    .await;
    expect_command_error(
        &srv.db("f"),
        doc! {"find": "p", "projection": {"age": 0, "name": 1}},
        31253,
        "Location31253",
    )
    .await;
}

#[tokio::test]
async fn projection_slice() {
    let srv = TestServer::start().await;
    seed(
        &srv,
        "s",
        vec![doc! {"_id": 1, "a": [1, 2, 3, 4, 5], "b": "keep"}],
    )
    .await;
    let proj = |p: Document| {
        let srv = &srv;
        async move {
            find_all(srv, doc! {"find": "s", "projection": p})
                .await
                .remove(0)
        }
    };
    assert_eq!(
        proj(doc! {"a": {"$slice": 2}}).await,
        doc! {"_id": 1, "a": [1, 2], "b": "keep"}
    );
    assert_eq!(
        proj(doc! {"a": {"$slice": -2}}).await,
        doc! {"_id": 1, "a": [4, 5], "b": "keep"}
    );
    assert_eq!(
        proj(doc! {"a": {"$slice": [1, 2]}}).await,
        doc! {"_id": 1, "a": [2, 3], "b": "keep"}
    );
    assert_eq!(
        proj(doc! {"a": {"$slice": [-2, 1]}}).await,
        doc! {"_id": 1, "a": [4], "b": "keep"}
    );
    assert_eq!(
        proj(doc! {"a": {"$slice": 10}}).await,
        doc! {"_id": 1, "a": [1, 2, 3, 4, 5], "b": "keep"}
    );
    // With an inclusion projection, only the included fields come back.
    assert_eq!(
        proj(doc! {"a": {"$slice": 1}, "b": 1}).await,
        doc! {"_id": 1, "a": [1], "b": "keep"}
    );
}

#[tokio::test]
async fn projection_elem_match() {
    let srv = TestServer::start().await;
    seed(
        &srv,
        "em",
        vec![
            doc! {"_id": 1, "z": "x", "students": [{"n": "a", "school": 102}, {"n": "b", "school": 101}, {"n": "c", "school": 102}]},
            doc! {"_id": 2, "z": "x", "students": [{"n": "d", "school": 100}]},
        ],
    )
    .await;
    let got = find_all(
        &srv,
        doc! {"find": "em", "projection": {"students": {"$elemMatch": {"school": 102}}}, "sort": {"_id": 1}},
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": 1, "students": [{"n": "a", "school": 102}]},
            doc! {"_id": 2}
        ]
    );
}

#[tokio::test]
async fn projection_positional() {
    let srv = TestServer::start().await;
    seed(
        &srv,
        "pos",
        vec![
            doc! {"_id": 1, "grades": [80, 85, 90], "other": 1},
            doc! {"_id": 2, "grades": [88, 90, 92], "other": 2},
        ],
    )
    .await;
    let got = find_all(
        &srv,
        doc! {"find": "pos", "filter": {"grades": {"$gte": 85}}, "projection": {"grades.$": 1}, "sort": {"_id": 1}},
    )
    .await;
    assert_eq!(
        got,
        vec![
            doc! {"_id": 1, "grades": [85]},
            doc! {"_id": 2, "grades": [88]}
        ]
    );
}

#[tokio::test]
async fn sort_ascending_descending_compound() {
    let srv = TestServer::start().await;
    seed(&srv, "p", people()).await;
    let got = find_all(&srv, doc! {"find": "p", "sort": {"age": 1, "_id": -1}}).await;
    assert_eq!(int_ids(&got), vec![4, 2, 1, 5, 3]);
    let got = find_all(&srv, doc! {"find": "p", "sort": {"age": -1, "_id": 1}}).await;
    assert_eq!(int_ids(&got), vec![3, 5, 1, 2, 4]);
    let got = find_all(&srv, doc! {"find": "p", "sort": {"name": -1}}).await;
    assert_eq!(int_ids(&got), vec![5, 4, 3, 2, 1]);
    // Missing sorts as null, before everything else, ascending.
    let got = find_all(&srv, doc! {"find": "p", "sort": {"city.name": 1, "_id": 1}}).await;
    assert_eq!(int_ids(&got), vec![5, 4, 1, 3, 2]);
}

#[tokio::test]
async fn sort_on_arrays_uses_min_ascending_and_max_descending() {
    let srv = TestServer::start().await;
    seed(
        &srv,
        "arrsort",
        vec![
            doc! {"_id": 1, "a": [5, 1]},
            doc! {"_id": 2, "a": [3]},
            doc! {"_id": 3, "a": 2},
            doc! {"_id": 4, "a": [0, 10]},
        ],
    )
    .await;
    let got = find_all(&srv, doc! {"find": "arrsort", "sort": {"a": 1}}).await;
    assert_eq!(int_ids(&got), vec![4, 1, 3, 2]);
    let got = find_all(&srv, doc! {"find": "arrsort", "sort": {"a": -1}}).await;
    assert_eq!(int_ids(&got), vec![4, 1, 2, 3]);
}

#[tokio::test]
async fn sort_across_bson_types() {
    let srv = TestServer::start().await;
    let oid = compat_tests::bson::oid::ObjectId::parse_str("650000000000000000000000").unwrap();
    let docs = vec![
        doc! {"_id": 1, "v": Bson::MaxKey},
        doc! {"_id": 2, "v": compat_tests::regex("a", "")},
        doc! {"_id": 3, "v": compat_tests::bson::Timestamp {time: 1, increment: 1}},
        doc! {"_id": 4, "v": compat_tests::bson::DateTime::from_millis(0)},
        doc! {"_id": 5, "v": true},
        doc! {"_id": 6, "v": false},
        doc! {"_id": 7, "v": oid},
        doc! {"_id": 8, "v": compat_tests::bson::Binary {subtype: compat_tests::bson::spec::BinarySubtype::Generic, bytes: vec![1]}},
        doc! {"_id": 9, "v": {"x": 1}},
        doc! {"_id": 10, "v": "abc"},
        doc! {"_id": 11, "v": 2.5},
        doc! {"_id": 12, "v": 2i64},
        doc! {"_id": 13, "v": 3i32},
        doc! {"_id": 14, "v": Bson::Null},
        doc! {"_id": 15},
        doc! {"_id": 16, "v": Bson::MinKey},
        doc! {"_id": 17, "v": "ab"},
    ];
    seed(&srv, "types", docs).await;
    let got = find_all(&srv, doc! {"find": "types", "sort": {"v": 1, "_id": 1}}).await;
    // MinKey < null = missing < numbers < strings < objects < binData < ObjectId
    // < bool (false < true) < date < timestamp < regex < MaxKey
    assert_eq!(
        int_ids(&got),
        vec![16, 14, 15, 12, 11, 13, 17, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1]
    );
}

#[tokio::test]
async fn skip_and_limit() {
    let srv = TestServer::start().await;
    seed(&srv, "sl", (0..20).map(|i| doc! {"_id": i}).collect()).await;
    let got = find_all(
        &srv,
        doc! {"find": "sl", "sort": {"_id": 1}, "skip": 5, "limit": 3},
    )
    .await;
    assert_eq!(int_ids(&got), vec![5, 6, 7]);
    let got = find_all(&srv, doc! {"find": "sl", "sort": {"_id": -1}, "limit": 2}).await;
    assert_eq!(int_ids(&got), vec![19, 18]);
    let got = find_all(&srv, doc! {"find": "sl", "skip": 50}).await;
    assert!(got.is_empty());
    let got = find_all(
        &srv,
        doc! {"find": "sl", "sort": {"_id": 1}, "skip": 18, "limit": 10},
    )
    .await;
    assert_eq!(int_ids(&got), vec![18, 19]);
    // limit 0 means no limit.
    let got = find_all(&srv, doc! {"find": "sl", "limit": 0}).await;
    assert_eq!(got.len(), 20);

    // Typed API.
    let coll = srv.db("f").collection::<Document>("sl");
    let got: Vec<Document> = coll
        .find(doc! {"_id": {"$gte": 10}})
        .sort(doc! {"_id": 1})
        .skip(2)
        .limit(4)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(int_ids(&got), vec![12, 13, 14, 15]);
}

#[tokio::test]
async fn batch_size_zero_opens_a_cursor_without_documents() {
    let srv = TestServer::start().await;
    seed(&srv, "b0", (0..5).map(|i| doc! {"_id": i}).collect()).await;
    let reply = find_raw(&srv, doc! {"find": "b0", "batchSize": 0}).await;
    assert!(first_batch(&reply).is_empty());
    let id = cursor_id(&reply);
    assert_ne!(id, 0);
    let more = find_raw(&srv, doc! {"getMore": id, "collection": "b0"}).await;
    assert_eq!(next_batch(&more).len(), 5);
    assert_eq!(cursor_id(&more), 0);
    assert_eq!(
        more.get_document("cursor").unwrap().get_str("ns").ok(),
        Some("f.b0")
    );
}

#[tokio::test]
async fn getmore_pages_through_more_than_a_thousand_documents_raw() {
    let srv = TestServer::start().await;
    seed(
        &srv,
        "many",
        (0..1005).map(|i| doc! {"_id": i, "pad": "p"}).collect(),
    )
    .await;
    let reply = find_raw(
        &srv,
        doc! {"find": "many", "sort": {"_id": 1}, "batchSize": 10},
    )
    .await;
    let mut all = first_batch(&reply);
    assert_eq!(all.len(), 10);
    let mut id = cursor_id(&reply);
    let mut getmores = 0;
    while id != 0 {
        getmores += 1;
        assert!(getmores <= 200, "cursor never ended");
        let more = find_raw(
            &srv,
            doc! {"getMore": id, "collection": "many", "batchSize": 10},
        )
        .await;
        let batch = next_batch(&more);
        assert!(batch.len() <= 10, "batch over batchSize: {}", batch.len());
        all.extend(batch);
        let next = cursor_id(&more);
        assert!(next == 0 || next == id, "cursor id changed mid-iteration");
        id = next;
    }
    assert_eq!(getmores, 100);
    assert_eq!(int_ids(&all), (0..1005).collect::<Vec<_>>());
}

#[tokio::test]
async fn driver_cursor_batches_are_counted_by_command_monitoring() {
    let srv = TestServer::start().await;
    seed(&srv, "many", (0..1005).map(|i| doc! {"_id": i}).collect()).await;
    let getmores = Arc::new(AtomicUsize::new(0));
    let finds = Arc::new(AtomicUsize::new(0));
    let (g, f) = (getmores.clone(), finds.clone());
    let client = srv
        .client_with(move |o| {
            o.command_event_handler = Some(EventHandler::callback(move |ev: CommandEvent| {
                if let CommandEvent::Started(s) = ev {
                    match s.command_name.as_str() {
                        "getMore" => g.fetch_add(1, Ordering::SeqCst),
                        "find" => f.fetch_add(1, Ordering::SeqCst),
                        _ => 0,
                    };
                }
            }))
        })
        .await;
    let docs: Vec<Document> = client
        .database("f")
        .collection::<Document>("many")
        .find(doc! {})
        .batch_size(10)
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(docs.len(), 1005);
    assert_eq!(finds.load(Ordering::SeqCst), 1);
    assert_eq!(getmores.load(Ordering::SeqCst), 100);
}

#[tokio::test]
async fn default_first_batch_is_101_documents() {
    let srv = TestServer::start().await;
    seed(&srv, "d101", (0..150).map(|i| doc! {"_id": i}).collect()).await;
    let reply = find_raw(&srv, doc! {"find": "d101"}).await;
    assert_eq!(first_batch(&reply).len(), 101);
    let id = cursor_id(&reply);
    assert_ne!(id, 0);
    let more = find_raw(&srv, doc! {"getMore": id, "collection": "d101"}).await;
    assert_eq!(next_batch(&more).len(), 49);
    assert_eq!(cursor_id(&more), 0);
}

#[tokio::test]
async fn limit_with_batch_size_closes_the_cursor_at_the_limit() {
    let srv = TestServer::start().await;
    seed(&srv, "lb", (0..100).map(|i| doc! {"_id": i}).collect()).await;
    let reply = find_raw(
        &srv,
        doc! {"find": "lb", "sort": {"_id": 1}, "limit": 25, "batchSize": 10},
    )
    .await;
    let mut all = first_batch(&reply);
    let mut id = cursor_id(&reply);
    while id != 0 {
        let more = find_raw(&srv, doc! {"getMore": id, "collection": "lb"}).await;
        all.extend(next_batch(&more));
        id = cursor_id(&more);
    }
    assert_eq!(int_ids(&all), (0..25).collect::<Vec<_>>());
}

#[tokio::test]
async fn single_batch_closes_the_cursor() {
    let srv = TestServer::start().await;
    seed(&srv, "sb", (0..50).map(|i| doc! {"_id": i}).collect()).await;
    let reply = find_raw(
        &srv,
        doc! {"find": "sb", "batchSize": 5, "singleBatch": true},
    )
    .await;
    assert_eq!(first_batch(&reply).len(), 5);
    assert_eq!(cursor_id(&reply), 0);
    let reply = find_raw(&srv, doc! {"find": "sb", "limit": 7, "singleBatch": true}).await;
    assert_eq!(first_batch(&reply).len(), 7);
    assert_eq!(cursor_id(&reply), 0);
}

#[tokio::test]
async fn kill_cursors_and_cursor_not_found() {
    let srv = TestServer::start().await;
    seed(&srv, "kc", (0..30).map(|i| doc! {"_id": i}).collect()).await;
    let reply = find_raw(&srv, doc! {"find": "kc", "batchSize": 2}).await;
    let id = cursor_id(&reply);
    assert_ne!(id, 0);
    let killed = find_raw(&srv, doc! {"killCursors": "kc", "cursors": [id, 12345i64]}).await;
    assert_eq!(
        killed.get_array("cursorsKilled").unwrap(),
        &vec![Bson::Int64(id)],
        "{killed}"
    );
    assert_eq!(
        killed.get_array("cursorsNotFound").unwrap(),
        &vec![Bson::Int64(12345)],
        "{killed}"
    );
    assert!(
        killed.get_array("cursorsAlive").unwrap().is_empty(),
        "{killed}"
    );
    assert!(
        killed.get_array("cursorsUnknown").unwrap().is_empty(),
        "{killed}"
    );
    expect_command_error(
        &srv.pinned_db("f"),
        doc! {"getMore": id, "collection": "kc"},
        43,
        "CursorNotFound",
    )
    .await;
}

#[tokio::test]
async fn exhausted_cursor_is_gone() {
    let srv = TestServer::start().await;
    seed(&srv, "ex", (0..3).map(|i| doc! {"_id": i}).collect()).await;
    let reply = find_raw(&srv, doc! {"find": "ex", "batchSize": 2}).await;
    let id = cursor_id(&reply);
    let more = find_raw(&srv, doc! {"getMore": id, "collection": "ex"}).await;
    assert_eq!(cursor_id(&more), 0);
    expect_command_error(
        &srv.pinned_db("f"),
        doc! {"getMore": id, "collection": "ex"},
        43,
        "CursorNotFound",
    )
    .await;
}

#[tokio::test]
async fn hint_comment_and_max_time_ms_are_accepted() {
    let srv = TestServer::start().await;
    seed(
        &srv,
        "opts",
        (0..5).map(|i| doc! {"_id": i, "a": i}).collect(),
    )
    .await;
    let got = find_all(
        &srv,
        doc! {
            "find": "opts", "filter": {"a": {"$gt": 2}}, "sort": {"_id": 1},
            "hint": {"_id": 1}, "comment": "hello", "maxTimeMS": 10000,
        },
    )
    .await;
    assert_eq!(int_ids(&got), vec![3, 4]);
    let got = find_all(
        &srv,
        doc! {"find": "opts", "hint": "_id_", "sort": {"_id": 1}},
    )
    .await;
    assert_eq!(got.len(), 5);
    let coll = srv.db("f").collection::<Document>("opts");
    let d = coll
        .find_one(doc! {"a": 4})
        .comment(Bson::String("typed".into()))
        .max_time(std::time::Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(d, Some(doc! {"_id": 4, "a": 4}));
}

#[tokio::test]
async fn typed_find_one_and_projection() {
    let srv = TestServer::start().await;
    seed(&srv, "p", people()).await;
    let coll = srv.db("f").collection::<Document>("p");
    let d = coll
        .find_one(doc! {"name": "eve"})
        .projection(doc! {"tags": 1, "_id": 0})
        .await
        .unwrap();
    assert_eq!(d, Some(doc! {"tags": ["c", "a"]}));
    assert_eq!(coll.find_one(doc! {"name": "zed"}).await.unwrap(), None);
}

#[tokio::test]
async fn count_command() {
    let srv = TestServer::start().await;
    seed(&srv, "p", people()).await;
    let db = srv.db("f");
    let r = db.run_command(doc! {"count": "p"}).await.unwrap();
    assert_eq!(num(&r, "n"), 5, "{r}");
    let r = db
        .run_command(doc! {"count": "p", "query": {"age": {"$lt": 35}}})
        .await
        .unwrap();
    assert_eq!(num(&r, "n"), 3, "{r}");
    let r = db
        .run_command(doc! {"count": "p", "query": {}, "skip": 1, "limit": 2})
        .await
        .unwrap();
    assert_eq!(num(&r, "n"), 2, "{r}");
    let r = db
        .run_command(doc! {"count": "p", "skip": 4})
        .await
        .unwrap();
    assert_eq!(num(&r, "n"), 1, "{r}");
    let r = db.run_command(doc! {"count": "none"}).await.unwrap();
    assert_eq!(num(&r, "n"), 0, "{r}");

    let coll = db.collection::<Document>("p");
    assert_eq!(coll.count_documents(doc! {"tags": "a"}).await.unwrap(), 2);
    assert_eq!(coll.estimated_document_count().await.unwrap(), 5);
}

#[tokio::test]
async fn distinct_command() {
    let srv = TestServer::start().await;
    seed(&srv, "p", people()).await;
    let db = srv.db("f");
    let r = db
        .run_command(doc! {"distinct": "p", "key": "age"})
        .await
        .unwrap();
    let mut ages: Vec<i32> = r
        .get_array("values")
        .unwrap()
        .iter()
        .map(|b| b.as_i32().unwrap())
        .collect();
    ages.sort();
    assert_eq!(ages, vec![25, 31, 38, 47]);
    // Arrays are unwound.
    let r = db
        .run_command(doc! {"distinct": "p", "key": "tags"})
        .await
        .unwrap();
    let mut tags: Vec<String> = r
        .get_array("values")
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap().to_string())
        .collect();
    tags.sort();
    assert_eq!(tags, vec!["a", "b", "c"]);
    // Dotted key and query.
    let coll = db.collection::<Document>("p");
    let mut cities = coll
        .distinct("city.name", doc! {"age": {"$lt": 40}})
        .await
        .unwrap();
    cities.sort_by_key(|b| b.as_str().unwrap().to_string());
    assert_eq!(
        cities,
        vec![Bson::from("Lima"), Bson::from("Oslo"), Bson::from("Rome")]
    );
    let none = coll.distinct("nosuchfield", doc! {}).await.unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn distinct_treats_numerically_equal_values_as_one() {
    let srv = TestServer::start().await;
    seed(
        &srv,
        "dn",
        vec![
            doc! {"v": 1i32},
            doc! {"v": 1.0f64},
            doc! {"v": 1i64},
            doc! {"v": 2},
        ],
    )
    .await;
    let vals = srv
        .db("f")
        .collection::<Document>("dn")
        .distinct("v", doc! {})
        .await
        .unwrap();
    assert_eq!(vals.len(), 2, "{vals:?}");
}

#[tokio::test]
async fn find_without_sort_returns_every_document() {
    // MongoDB guarantees no order without a sort; only the set is asserted.
    let srv = TestServer::start().await;
    seed(&srv, "noorder", (0..10).map(|i| doc! {"_id": i}).collect()).await;
    let got = find_all(&srv, doc! {"find": "noorder"}).await;
    let mut v = ids(&got);
    v.sort_by_key(|b| b.as_i32().unwrap());
    assert_eq!(v, (0..10).map(Bson::Int32).collect::<Vec<_>>());
}

/// A find of one `_id` is answered from the stored bytes: the client gets
/// the document exactly as stored, as the general path returns it.
#[tokio::test]
async fn a_find_by_id_returns_the_stored_document_byte_for_byte() {
    use compat_tests::bson::{oid::ObjectId, Binary, Decimal128, RawDocumentBuf, Regex, Timestamp};
    let srv = TestServer::start().await;
    let odd = doc! {
        "_id": ObjectId::parse_str("65f0a1b2c3d4e5f601234567").unwrap(),
        "d": "2.50".parse::<Decimal128>().unwrap(),
        "bin": Binary { subtype: compat_tests::bson::spec::BinarySubtype::Generic, bytes: vec![0, 1, 255] },
        "re": Regex { pattern: "^a".into(), options: "i".into() },
        "ts": Timestamp { time: 7, increment: 1 },
        "nested": {"a": [1, {"b": null}], "s": "ünïcode"},
        "n": 6,
    };
    let id = odd.get("_id").cloned().unwrap();
    seed(&srv, "stored", vec![odd.clone(), doc! {"_id": 2, "n": 1}]).await;
    let raw = srv.db("f").collection::<RawDocumentBuf>("stored");

    let by_id = raw.find_one(doc! {"_id": id.clone()}).await.unwrap();
    // A sort takes the general path.
    let sorted = raw
        .find(doc! {"_id": id.clone()})
        .sort(doc! {"n": 1})
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert_eq!(
        by_id.as_ref().map(|d| d.as_bytes()),
        Some(sorted[0].as_bytes())
    );
    assert_eq!(
        by_id.map(|d| d.as_bytes().to_vec()),
        Some(compat_tests::bson::to_vec(&odd).unwrap())
    );

    // The rest of the filter still applies, and a missing `_id` is no error.
    let c = srv.db("f").collection::<Document>("stored");
    for (filter, found) in [
        (doc! {"_id": id.clone(), "n": {"$gt": 5}}, 1),
        (doc! {"_id": id.clone(), "n": {"$gt": 6}}, 0),
        (doc! {"_id": id.clone(), "nested.a.b": null}, 1),
        (doc! {"_id": {"$in": [2]}}, 1),
        (doc! {"_id": 3}, 0),
    ] {
        let got: Vec<Document> = c
            .find(filter.clone())
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(got.len(), found, "{filter}");
    }

    // batchSize 0 still opens a cursor whose first batch is empty.
    let reply = find_raw(
        &srv,
        doc! {"find": "stored", "filter": {"_id": 2}, "batchSize": 0},
    )
    .await;
    assert!(first_batch(&reply).is_empty(), "{reply}");
    assert_ne!(cursor_id(&reply), 0, "{reply}");
}

/// Whole documents read in order from one partition are answered with
/// their stored bytes, batch after batch: what the driver gets is what
/// was inserted, byte for byte, whichever way the filter was decided.
#[tokio::test]
async fn ranges_return_the_stored_documents_byte_for_byte_in_every_batch() {
    use compat_tests::bson::{oid::ObjectId, Decimal128, RawDocumentBuf, Timestamp};
    let srv = TestServer::start().await;
    let docs: Vec<Document> = (0..30)
        .map(|i| {
            let mut d = doc! {
                "_id": i,
                "tenant": if i % 2 == 0 { "a" } else { "b" },
                "d": format!("{i}.50").parse::<Decimal128>().unwrap(),
                "ts": Timestamp { time: i as u32, increment: 1 },
                "o": ObjectId::parse_str("65f0a1b2c3d4e5f601234567").unwrap(),
                "nested": {"s": "ünïcode", "n": i},
            };
            // An array on the path: the filter below decides these on
            // the decoded document.
            if i % 3 == 0 {
                d.insert("tags", vec!["x", "y"]);
            } else {
                d.insert("tags", "x");
            }
            d
        })
        .collect();
    let bytes = |ids: &mut dyn Iterator<Item = usize>| -> Vec<Vec<u8>> {
        ids.map(|i| compat_tests::bson::to_vec(&docs[i]).unwrap())
            .collect()
    };
    seed(&srv, "ranged", docs.clone()).await;
    let raw = srv.db("f").collection::<RawDocumentBuf>("ranged");

    // A first batch and several getMores.
    let got = raw
        .find(doc! {"_id": {"$gte": 5}, "tags": "x"})
        .sort(doc! {"_id": 1})
        .batch_size(4)
        .await;
    assert_eq!(stored_bytes(got).await, bytes(&mut (5..30)));

    // Backwards, with skip and limit.
    let got = raw
        .find(doc! {"_id": {"$lt": 20}})
        .sort(doc! {"_id": -1})
        .skip(3)
        .limit(5)
        .await;
    assert_eq!(stored_bytes(got).await, bytes(&mut (12..17).rev()));

    // The same documents from a collection sharded on `tenant`: a range
    // under one key value, from one partition.
    let reply = srv
        .db("admin")
        .run_command(doc! {"shardCollection": "f.ranged_sharded", "key": {"tenant": "hashed"}})
        .await
        .unwrap();
    assert_eq!(reply.get_f64("ok").ok(), Some(1.0), "{reply}");
    seed(&srv, "ranged_sharded", docs.clone()).await;
    let sharded = srv.db("f").collection::<RawDocumentBuf>("ranged_sharded");
    let got = sharded
        .find(doc! {"tenant": "a", "_id": {"$gte": 10}})
        .sort(doc! {"_id": 1})
        .limit(6)
        .batch_size(4)
        .await;
    assert_eq!(stored_bytes(got).await, bytes(&mut (10..22).step_by(2)));
}

/// The bytes of every document a raw cursor returns, read to its end.
async fn stored_bytes(
    cursor: compat_tests::mongodb::error::Result<
        compat_tests::mongodb::Cursor<compat_tests::bson::RawDocumentBuf>,
    >,
) -> Vec<Vec<u8>> {
    let docs: Vec<_> = cursor.unwrap().try_collect().await.unwrap();
    docs.iter().map(|d| d.as_bytes().to_vec()).collect()
}
