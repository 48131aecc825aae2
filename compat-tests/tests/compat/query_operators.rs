//! The query language: comparison, logical, element, evaluation and array
//! operators, dotted paths, array semantics and cross-type comparison.

use compat_tests::{
    bson::{doc, Bson, Decimal128, Document},
    TestServer,
};
use futures::TryStreamExt;

fn dataset() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "a": 1, "b": "x", "arr": [1, 2, 3], "n": {"x": 1}, "t": true},
        doc! {"_id": 2, "a": 2.5, "b": "y", "arr": [2, 5], "n": {"x": 2}},
        doc! {"_id": 3, "a": 3i64, "b": "X", "arr": [], "s": null},
        doc! {"_id": 4, "a": "str", "arr": [[1, 2], 3], "n": [{"x": 1}, {"x": 3}]},
        doc! {"_id": 5, "a": null},
        doc! {"_id": 6},
        doc! {"_id": 7, "a": [1, 5], "arr": [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]},
        doc! {"_id": 8, "a": "2".parse::<Decimal128>().unwrap()},
    ]
}

struct Q {
    srv: TestServer,
}

impl Q {
    async fn new() -> Q {
        let srv = TestServer::start().await;
        srv.db("q")
            .collection::<Document>("c")
            .insert_many(dataset())
            .await
            .unwrap();
        Q { srv }
    }

    async fn ids(&self, filter: Document) -> Vec<i32> {
        let shown = format!("{filter}");
        let docs: Vec<Document> = self
            .srv
            .db("q")
            .collection::<Document>("c")
            .find(filter)
            .sort(doc! {"_id": 1})
            .await
            .unwrap_or_else(|e| panic!("{shown}: {e}"))
            .try_collect()
            .await
            .unwrap_or_else(|e| panic!("{shown}: {e}"));
        docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
    }

    async fn check(&self, filter: Document, expected: &[i32]) {
        let shown = format!("{filter}");
        let got = self.ids(filter.clone()).await;
        assert_eq!(got, expected, "filter {shown}");
        // count must agree with find.
        let n = self
            .srv
            .db("q")
            .collection::<Document>("c")
            .count_documents(filter)
            .await
            .unwrap();
        assert_eq!(n as usize, expected.len(), "count_documents for {shown}");
    }
}

fn re(p: &str, o: &str) -> Bson {
    compat_tests::regex(p, o)
}

#[tokio::test]
async fn equality_and_cross_type_numbers() {
    let q = Q::new().await;
    q.check(doc! {}, &[1, 2, 3, 4, 5, 6, 7, 8]).await;
    q.check(doc! {"a": 1}, &[1, 7]).await;
    q.check(doc! {"a": 1.0}, &[1, 7]).await;
    q.check(doc! {"a": 1i64}, &[1, 7]).await;
    q.check(doc! {"a": 3}, &[3]).await;
    q.check(doc! {"a": 2}, &[8]).await;
    q.check(doc! {"a": "2".parse::<Decimal128>().unwrap()}, &[8])
        .await;
    q.check(doc! {"a": {"$eq": 2.5}}, &[2]).await;
    q.check(doc! {"a": "str"}, &[4]).await;
    q.check(doc! {"a": "STR"}, &[]).await;
}

#[tokio::test]
async fn null_and_missing() {
    let q = Q::new().await;
    q.check(doc! {"a": null}, &[5, 6]).await;
    q.check(doc! {"a": {"$ne": null}}, &[1, 2, 3, 4, 7, 8])
        .await;
    q.check(doc! {"s": null}, &[1, 2, 3, 4, 5, 6, 7, 8]).await;
}

#[tokio::test]
async fn ne_gt_gte_lt_lte() {
    let q = Q::new().await;
    q.check(doc! {"a": {"$ne": 1}}, &[2, 3, 4, 5, 6, 8]).await;
    q.check(doc! {"a": {"$gt": 2}}, &[2, 3, 7]).await;
    q.check(doc! {"a": {"$gte": 2}}, &[2, 3, 7, 8]).await;
    q.check(doc! {"a": {"$lt": 2}}, &[1, 7]).await;
    q.check(doc! {"a": {"$lte": 1}}, &[1, 7]).await;
    // Comparisons stay within a type bracket: strings only compare with strings.
    q.check(doc! {"a": {"$gt": "a"}}, &[4]).await;
    q.check(doc! {"a": {"$lt": "a"}}, &[]).await;
    q.check(doc! {"a": {"$gte": 1, "$lt": 3}}, &[1, 2, 7, 8])
        .await;
}

#[tokio::test]
async fn in_and_nin() {
    let q = Q::new().await;
    q.check(doc! {"a": {"$in": [2.5, "str", null]}}, &[2, 4, 5, 6])
        .await;
    q.check(doc! {"a": {"$in": []}}, &[]).await;
    q.check(doc! {"a": {"$nin": [1, null]}}, &[2, 3, 4, 8])
        .await;
    q.check(doc! {"b": {"$in": [re("^y", "")]}}, &[2]).await;
    q.check(doc! {"arr": {"$in": [5, 99]}}, &[2]).await;
}

#[tokio::test]
async fn and_or_nor_not() {
    let q = Q::new().await;
    q.check(
        doc! {"$and": [{"a": {"$gte": 1}}, {"a": {"$lt": 3}}]},
        &[1, 2, 7, 8],
    )
    .await;
    q.check(doc! {"$or": [{"a": 1}, {"b": "y"}]}, &[1, 2, 7])
        .await;
    q.check(doc! {"$nor": [{"a": {"$exists": true}}, {"b": "X"}]}, &[6])
        .await;
    q.check(doc! {"a": {"$not": {"$gt": 2}}}, &[1, 4, 5, 6, 8])
        .await;
    q.check(doc! {"b": {"$not": re("^x", "i")}}, &[2, 4, 5, 6, 7, 8])
        .await;
    q.check(
        doc! {"$and": [{"$or": [{"b": "x"}, {"b": "y"}]}, {"$or": [{"a": 2.5}, {"t": true}]}]},
        &[1, 2],
    )
    .await;
}

#[tokio::test]
async fn exists_and_type() {
    let q = Q::new().await;
    q.check(doc! {"a": {"$exists": true}}, &[1, 2, 3, 4, 5, 7, 8])
        .await;
    q.check(doc! {"a": {"$exists": false}}, &[6]).await;
    q.check(doc! {"s": {"$exists": true}}, &[3]).await;
    q.check(doc! {"a": {"$type": "string"}}, &[4]).await;
    q.check(doc! {"a": {"$type": 2}}, &[4]).await;
    q.check(doc! {"a": {"$type": "number"}}, &[1, 2, 3, 7, 8])
        .await;
    q.check(doc! {"a": {"$type": "int"}}, &[1, 7]).await;
    q.check(doc! {"a": {"$type": "long"}}, &[3]).await;
    q.check(doc! {"a": {"$type": "double"}}, &[2]).await;
    q.check(doc! {"a": {"$type": "decimal"}}, &[8]).await;
    q.check(doc! {"a": {"$type": "array"}}, &[7]).await;
    q.check(doc! {"a": {"$type": "null"}}, &[5]).await;
    q.check(doc! {"a": {"$type": 10}}, &[5]).await;
    q.check(doc! {"a": {"$type": ["string", "null"]}}, &[4, 5])
        .await;
    q.check(doc! {"n": {"$type": "object"}}, &[1, 2, 4]).await;
}

#[tokio::test]
async fn regex_and_options() {
    let q = Q::new().await;
    q.check(doc! {"b": {"$regex": "^x", "$options": "i"}}, &[1, 3])
        .await;
    q.check(doc! {"b": {"$regex": "^x"}}, &[1]).await;
    q.check(doc! {"b": re("^x", "")}, &[1]).await;
    q.check(doc! {"b": re("X", "i")}, &[1, 3]).await;
    q.check(doc! {"b": {"$regex": re("^Y", "i")}}, &[2]).await;
    q.check(doc! {"a": {"$regex": "t"}}, &[4]).await;
}

#[tokio::test]
async fn regex_multiline_and_dotall_options() {
    let srv = TestServer::start().await;
    let coll = srv.db("q").collection::<Document>("re");
    coll.insert_many(vec![
        doc! {"_id": 1, "s": "first\nsecond"},
        doc! {"_id": 2, "s": "second"},
        doc! {"_id": 3, "s": "a\nb"},
    ])
    .await
    .unwrap();
    let ids = |f: Document| {
        let coll = coll.clone();
        async move {
            let docs: Vec<Document> = coll
                .find(f)
                .sort(doc! {"_id": 1})
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            docs.iter()
                .map(|d| d.get_i32("_id").unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(ids(doc! {"s": {"$regex": "^second"}}).await, vec![2]);
    assert_eq!(
        ids(doc! {"s": {"$regex": "^second", "$options": "m"}}).await,
        vec![1, 2]
    );
    assert_eq!(ids(doc! {"s": {"$regex": "a.b"}}).await, Vec::<i32>::new());
    assert_eq!(
        ids(doc! {"s": {"$regex": "a.b", "$options": "s"}}).await,
        vec![3]
    );
    assert_eq!(
        ids(doc! {"s": {"$regex": "s e c", "$options": "x"}}).await,
        vec![1, 2]
    );
}

#[tokio::test]
async fn modulo() {
    let q = Q::new().await;
    q.check(doc! {"a": {"$mod": [2, 1]}}, &[1, 3, 7]).await;
    q.check(doc! {"a": {"$mod": [2, 0]}}, &[2, 8]).await;
}

#[tokio::test]
async fn all_elem_match_size() {
    let q = Q::new().await;
    q.check(doc! {"arr": {"$all": [2, 3]}}, &[1]).await;
    q.check(doc! {"arr": {"$all": [3]}}, &[1, 4]).await;
    q.check(doc! {"arr": {"$elemMatch": {"$gt": 1, "$lt": 3}}}, &[1, 2])
        .await;
    q.check(doc! {"arr": {"$elemMatch": {"k": 2, "v": "b"}}}, &[7])
        .await;
    q.check(doc! {"arr": {"$elemMatch": {"k": 1, "v": "b"}}}, &[])
        .await;
    q.check(doc! {"arr.k": 1, "arr.v": "b"}, &[7]).await;
    q.check(doc! {"arr": {"$size": 2}}, &[2, 4, 7]).await;
    q.check(doc! {"arr": {"$size": 0}}, &[3]).await;
    q.check(
        doc! {"arr": {"$all": [{"$elemMatch": {"k": 1}}, {"$elemMatch": {"v": "b"}}]}},
        &[7],
    )
    .await;
}

#[tokio::test]
async fn dotted_paths_and_array_semantics() {
    let q = Q::new().await;
    q.check(doc! {"n.x": 1}, &[1, 4]).await;
    q.check(doc! {"n.x": 3}, &[4]).await;
    q.check(doc! {"n.x": {"$gt": 1}}, &[2, 4]).await;
    // A leaf reached through a numeric component is compared whole: {"arr.0": 2}
    // does not look inside arr[0] = [1, 2].
    q.check(doc! {"arr.0": 2}, &[2]).await;
    q.check(doc! {"arr.1": 5}, &[2]).await;
    q.check(doc! {"arr.k": 2}, &[7]).await;
    q.check(doc! {"arr": 2}, &[1, 2]).await;
    q.check(doc! {"arr": [2, 5]}, &[2]).await;
    q.check(doc! {"arr": [5, 2]}, &[]).await;
    q.check(doc! {"arr": [1, 2]}, &[4]).await;
    q.check(doc! {"n": {"x": 1}}, &[1, 4]).await;
    q.check(doc! {"n": {"x": 1, "y": 1}}, &[]).await;
    q.check(doc! {"n.x.y": {"$exists": true}}, &[]).await;
    q.check(doc! {"arr": []}, &[3]).await;
}

#[tokio::test]
async fn expr_compares_fields() {
    let srv = TestServer::start().await;
    let coll = srv.db("q").collection::<Document>("e");
    coll.insert_many(vec![
        doc! {"_id": 1, "x": 1, "y": 2},
        doc! {"_id": 2, "x": 5, "y": 3},
        doc! {"_id": 3, "x": 2, "y": 3},
    ])
    .await
    .unwrap();
    let ids = |f: Document| {
        let coll = coll.clone();
        async move {
            let docs: Vec<Document> = coll
                .find(f)
                .sort(doc! {"_id": 1})
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            docs.iter()
                .map(|d| d.get_i32("_id").unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(ids(doc! {"$expr": {"$gt": ["$x", "$y"]}}).await, vec![2]);
    assert_eq!(
        ids(doc! {"$expr": {"$eq": [{"$add": ["$x", 1]}, "$y"]}}).await,
        vec![1, 3]
    );
    assert_eq!(
        ids(doc! {"y": 3, "$expr": {"$lt": ["$x", 3]}}).await,
        vec![3]
    );
    assert_eq!(
        ids(doc! {"$expr": {"$and": [{"$gte": ["$x", 2]}, {"$lte": ["$y", 3]}]}}).await,
        vec![2, 3]
    );
}

#[tokio::test]
async fn operators_apply_in_update_and_delete_filters_too() {
    let q = Q::new().await;
    let coll = q.srv.db("q").collection::<Document>("c");
    let r = coll
        .update_many(
            doc! {"a": {"$type": "number", "$gte": 2}},
            doc! {"$set": {"hit": true}},
        )
        .await
        .unwrap();
    assert_eq!(r.matched_count, 4);
    q.check(doc! {"hit": true}, &[2, 3, 7, 8]).await;
    let r = coll
        .delete_many(doc! {"$or": [{"a": null}, {"arr": {"$size": 0}}]})
        .await
        .unwrap();
    assert_eq!(r.deleted_count, 3);
    q.check(doc! {}, &[1, 2, 4, 7, 8]).await;
}

#[tokio::test]
async fn dates_object_ids_and_booleans_compare_within_type() {
    let srv = TestServer::start().await;
    let coll = srv.db("q").collection::<Document>("dt");
    let d = |ms| compat_tests::bson::DateTime::from_millis(ms);
    coll.insert_many(vec![
        doc! {"_id": 1, "when": d(1_000), "flag": false},
        doc! {"_id": 2, "when": d(2_000), "flag": true},
        doc! {"_id": 3, "when": 1500, "flag": 1},
    ])
    .await
    .unwrap();
    let ids = |f: Document| {
        let coll = coll.clone();
        async move {
            let docs: Vec<Document> = coll
                .find(f)
                .sort(doc! {"_id": 1})
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            docs.iter()
                .map(|d| d.get_i32("_id").unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(ids(doc! {"when": {"$gt": d(1_500)}}).await, vec![2]);
    assert_eq!(ids(doc! {"when": {"$lt": d(5_000)}}).await, vec![1, 2]);
    assert_eq!(ids(doc! {"flag": true}).await, vec![2]);
    assert_eq!(ids(doc! {"flag": 1}).await, vec![3]);
    assert_eq!(ids(doc! {"flag": {"$gte": false}}).await, vec![1, 2]);
}
