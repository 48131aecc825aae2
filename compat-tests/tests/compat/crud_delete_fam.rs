//! delete (limit 0/1) and findAndModify.

use compat_tests::{
    bson::{doc, Bson, Document},
    expect_command_error,
    mongodb::options::ReturnDocument,
    num, TestServer,
};
use futures::TryStreamExt;

const DB: &str = "d";

async fn setup(docs: Vec<Document>) -> TestServer {
    let srv = TestServer::start().await;
    srv.db(DB)
        .collection::<Document>("c")
        .insert_many(docs)
        .await
        .unwrap();
    srv
}

async fn remaining(srv: &TestServer) -> Vec<i32> {
    let docs: Vec<Document> = srv
        .db(DB)
        .collection::<Document>("c")
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
}

fn five() -> Vec<Document> {
    (1..=5)
        .map(|i| doc! {"_id": i, "g": i % 2, "v": i * 10})
        .collect()
}

#[tokio::test]
async fn delete_limit_zero_removes_all_matches() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(doc! {"delete": "c", "deletes": [{"q": {"g": 1}, "limit": 0}]})
        .await
        .unwrap();
    assert_eq!(num(&r, "n"), 3, "{r}");
    assert_eq!(remaining(&srv).await, vec![2, 4]);
}

#[tokio::test]
async fn delete_limit_one_removes_one() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(doc! {"delete": "c", "deletes": [{"q": {"g": 1}, "limit": 1}]})
        .await
        .unwrap();
    assert_eq!(num(&r, "n"), 1, "{r}");
    assert_eq!(remaining(&srv).await.len(), 4);
}

#[tokio::test]
async fn delete_several_statements_sum_n() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(doc! {"delete": "c", "deletes": [
            {"q": {"_id": 1}, "limit": 1},
            {"q": {"_id": 99}, "limit": 1},
            {"q": {"v": {"$gte": 40}}, "limit": 0},
        ]})
        .await
        .unwrap();
    assert_eq!(num(&r, "n"), 3, "{r}");
    assert!(!r.contains_key("writeErrors"), "{r}");
    assert_eq!(remaining(&srv).await, vec![2, 3]);
}

#[tokio::test]
async fn delete_nothing_and_missing_collection() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(doc! {"delete": "c", "deletes": [{"q": {"_id": 42}, "limit": 0}]})
        .await
        .unwrap();
    assert_eq!(num(&r, "n"), 0, "{r}");
    let r = srv
        .db(DB)
        .run_command(doc! {"delete": "no_such", "deletes": [{"q": {}, "limit": 0}]})
        .await
        .unwrap();
    assert_eq!(num(&r, "n"), 0, "{r}");
}

#[tokio::test]
async fn typed_delete_one_and_many() {
    let srv = setup(five()).await;
    let coll = srv.db(DB).collection::<Document>("c");
    assert_eq!(
        coll.delete_one(doc! {"g": 0}).await.unwrap().deleted_count,
        1
    );
    assert_eq!(coll.count_documents(doc! {"g": 0}).await.unwrap(), 1);
    assert_eq!(
        coll.delete_one(doc! {"_id": 99})
            .await
            .unwrap()
            .deleted_count,
        0
    );
    assert_eq!(
        coll.delete_many(doc! {"g": 1}).await.unwrap().deleted_count,
        3
    );
    assert_eq!(coll.delete_many(doc! {}).await.unwrap().deleted_count, 1);
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 0);
}

#[tokio::test]
async fn delete_with_invalid_limit_is_rejected() {
    let srv = setup(five()).await;
    expect_command_error(
        &srv.db(DB),
        doc! {"delete": "c", "deletes": [{"q": {}}]},
        40414,
        "Location40414",
    )
    .await;
    assert_eq!(remaining(&srv).await.len(), 5);
}

// ---------------------------------------------------------------------------
// findAndModify
// ---------------------------------------------------------------------------

#[tokio::test]
async fn find_and_modify_returns_pre_image_by_default() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(doc! {"findAndModify": "c", "query": {"g": 1}, "sort": {"v": -1}, "update": {"$inc": {"v": 1}}})
        .await
        .unwrap();
    assert_eq!(
        r.get_document("value").unwrap(),
        &doc! {"_id": 5, "g": 1, "v": 50},
        "{r}"
    );
    let leo = r.get_document("lastErrorObject").unwrap();
    assert_eq!(num(leo, "n"), 1, "{r}");
    assert_eq!(leo.get_bool("updatedExisting").ok(), Some(true), "{r}");
    let d = srv
        .db(DB)
        .collection::<Document>("c")
        .find_one(doc! {"_id": 5})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.get_i32("v").unwrap(), 51);
}

#[tokio::test]
async fn find_and_modify_new_and_fields() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(doc! {
            "findAndModify": "c", "query": {"_id": 2}, "update": {"$set": {"x": true}},
            "new": true, "fields": {"x": 1, "_id": 0},
        })
        .await
        .unwrap();
    assert_eq!(r.get_document("value").unwrap(), &doc! {"x": true}, "{r}");
}

#[tokio::test]
async fn find_and_modify_replacement() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(
            doc! {"findAndModify": "c", "query": {"_id": 3}, "update": {"r": 1}, "new": true},
        )
        .await
        .unwrap();
    assert_eq!(
        r.get_document("value").unwrap(),
        &doc! {"_id": 3, "r": 1},
        "{r}"
    );
}

#[tokio::test]
async fn find_and_modify_remove() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(
            doc! {"findAndModify": "c", "query": {"g": 0}, "sort": {"_id": 1}, "remove": true},
        )
        .await
        .unwrap();
    assert_eq!(
        r.get_document("value").unwrap(),
        &doc! {"_id": 2, "g": 0, "v": 20},
        "{r}"
    );
    assert_eq!(
        num(r.get_document("lastErrorObject").unwrap(), "n"),
        1,
        "{r}"
    );
    assert_eq!(remaining(&srv).await, vec![1, 3, 4, 5]);
}

#[tokio::test]
async fn find_and_modify_no_match() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(
            doc! {"findAndModify": "c", "query": {"_id": 77}, "update": {"$set": {"a": 1}}},
        )
        .await
        .unwrap();
    assert_eq!(r.get("value"), Some(&Bson::Null), "{r}");
    let leo = r.get_document("lastErrorObject").unwrap();
    assert_eq!(num(leo, "n"), 0, "{r}");
    assert_eq!(leo.get_bool("updatedExisting").ok(), Some(false), "{r}");
    let r = srv
        .db(DB)
        .run_command(doc! {"findAndModify": "c", "query": {"_id": 77}, "remove": true})
        .await
        .unwrap();
    assert_eq!(r.get("value"), Some(&Bson::Null), "{r}");
    assert_eq!(
        num(r.get_document("lastErrorObject").unwrap(), "n"),
        0,
        "{r}"
    );
}

#[tokio::test]
async fn find_and_modify_upsert() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(doc! {"findAndModify": "c", "query": {"_id": 10}, "update": {"$set": {"v": 100}}, "upsert": true})
        .await
        .unwrap();
    assert_eq!(
        r.get("value"),
        Some(&Bson::Null),
        "pre-image of an upsert is null: {r}"
    );
    let leo = r.get_document("lastErrorObject").unwrap();
    assert_eq!(num(leo, "n"), 1, "{r}");
    assert_eq!(leo.get_bool("updatedExisting").ok(), Some(false), "{r}");
    assert_eq!(leo.get("upserted"), Some(&Bson::Int32(10)), "{r}");

    let r = srv
        .db(DB)
        .run_command(doc! {"findAndModify": "c", "query": {"k": "new"}, "update": {"$set": {"v": 1}}, "upsert": true, "new": true})
        .await
        .unwrap();
    let v = r.get_document("value").unwrap();
    assert!(v.get_object_id("_id").is_ok(), "{r}");
    assert_eq!(v.get_str("k").ok(), Some("new"), "{r}");
    assert_eq!(v.get_i32("v").ok(), Some(1), "{r}");
}

#[tokio::test]
async fn typed_find_one_and_family() {
    let srv = setup(five()).await;
    let coll = srv.db(DB).collection::<Document>("c");
    let before = coll
        .find_one_and_update(doc! {"_id": 1}, doc! {"$set": {"v": 11}})
        .await
        .unwrap();
    assert_eq!(before, Some(doc! {"_id": 1, "g": 1, "v": 10}));
    let after = coll
        .find_one_and_update(doc! {"_id": 1}, doc! {"$inc": {"v": 1}})
        .return_document(ReturnDocument::After)
        .projection(doc! {"v": 1})
        .await
        .unwrap();
    assert_eq!(after, Some(doc! {"_id": 1, "v": 12}));
    let replaced = coll
        .find_one_and_replace(doc! {"_id": 2}, doc! {"w": 2})
        .return_document(ReturnDocument::After)
        .await
        .unwrap();
    assert_eq!(replaced, Some(doc! {"_id": 2, "w": 2}));
    let deleted = coll
        .find_one_and_delete(doc! {"g": 1})
        .sort(doc! {"v": -1})
        .await
        .unwrap();
    assert_eq!(deleted, Some(doc! {"_id": 5, "g": 1, "v": 50}));
    assert_eq!(
        coll.find_one_and_delete(doc! {"_id": 99}).await.unwrap(),
        None
    );
}

#[tokio::test]
async fn find_and_modify_argument_errors() {
    let srv = setup(five()).await;
    let db = srv.db(DB);
    expect_command_error(
        &db,
        doc! {"findAndModify": "c", "query": {}, "remove": true, "update": {"$set": {"a": 1}}},
        9,
        "FailedToParse",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"findAndModify": "c", "query": {}},
        9,
        "FailedToParse",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"findAndModify": "c", "query": {}, "remove": true, "new": true},
        9,
        "FailedToParse",
    )
    .await;
    assert_eq!(remaining(&srv).await.len(), 5);
}

#[tokio::test]
async fn delete_count_is_int32_as_mongodb_sends_it() {
    let srv = setup(five()).await;
    let r = srv
        .db(DB)
        .run_command(doc! {"delete": "c", "deletes": [{"q": {"g": 1}, "limit": 0}]})
        .await
        .unwrap();
    assert_eq!(r.get("n"), Some(&Bson::Int32(3)), "{r}");
}
