//! update: every operator, positional forms, replacement, upsert, multi, and
//! the exact n / nModified / upserted a MongoDB 7.0 reply carries.

use compat_tests::{
    bson::{doc, Bson, Document},
    expect_failure, num, TestServer,
};
use futures::TryStreamExt;

const DB: &str = "u";

struct Fx {
    srv: TestServer,
}

impl Fx {
    async fn new(coll: &str, docs: Vec<Document>) -> Fx {
        let srv = TestServer::start().await;
        if !docs.is_empty() {
            srv.db(DB)
                .collection::<Document>(coll)
                .insert_many(docs)
                .await
                .unwrap();
        }
        Fx { srv }
    }

    /// Raw `update` with one statement; panics on a command error.
    async fn update(&self, coll: &str, stmt: Document) -> Document {
        self.updates(coll, vec![stmt], true).await
    }

    async fn updates(&self, coll: &str, stmts: Vec<Document>, ordered: bool) -> Document {
        let cmd = doc! {"update": coll, "updates": stmts, "ordered": ordered};
        let shown = format!("{cmd}");
        self.srv
            .db(DB)
            .run_command(cmd)
            .await
            .unwrap_or_else(|e| panic!("{shown}: {e}"))
    }

    async fn get(&self, coll: &str, id: impl Into<Bson>) -> Document {
        self.srv
            .db(DB)
            .collection::<Document>(coll)
            .find_one(doc! {"_id": id.into()})
            .await
            .unwrap()
            .expect("document exists")
    }

    async fn all(&self, coll: &str) -> Vec<Document> {
        self.srv
            .db(DB)
            .collection::<Document>(coll)
            .find(doc! {})
            .sort(doc! {"_id": 1})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap()
    }
}

#[track_caller]
fn assert_counts(reply: &Document, n: i64, n_modified: i64) {
    assert_eq!(num(reply, "n"), n, "n in {reply}");
    assert_eq!(num(reply, "nModified"), n_modified, "nModified in {reply}");
    assert!(
        !reply.contains_key("writeErrors"),
        "unexpected writeErrors: {reply}"
    );
}

fn write_error(reply: &Document, i: usize) -> Document {
    reply
        .get_array("writeErrors")
        .unwrap_or_else(|_| panic!("no writeErrors in {reply}"))[i]
        .as_document()
        .unwrap()
        .clone()
}

// ---------------------------------------------------------------------------
// Counts, multi, upsert
// ---------------------------------------------------------------------------

#[tokio::test]
async fn set_counts_matched_and_modified() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": 1}, doc! {"_id": 2, "a": 1}]).await;
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$set": {"a": 2}}})
        .await;
    assert_counts(&r, 1, 1);
    assert!(!r.contains_key("upserted"), "{r}");
    // Same value again: matched, not modified.
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$set": {"a": 2}}})
        .await;
    assert_counts(&r, 1, 0);
    // Nothing matches.
    let r = fx
        .update("c", doc! {"q": {"_id": 9}, "u": {"$set": {"a": 2}}})
        .await;
    assert_counts(&r, 0, 0);
    // Without multi only one document changes.
    let r = fx
        .update("c", doc! {"q": {}, "u": {"$set": {"b": 1}}})
        .await;
    assert_counts(&r, 1, 1);
    let with_b = fx
        .srv
        .db(DB)
        .collection::<Document>("c")
        .count_documents(doc! {"b": 1})
        .await
        .unwrap();
    assert_eq!(with_b, 1);
}

#[tokio::test]
async fn multi_updates_every_match_and_counts_only_changes() {
    let fx = Fx::new(
        "c",
        vec![
            doc! {"_id": 1, "g": 1, "v": 0},
            doc! {"_id": 2, "g": 1, "v": 5},
            doc! {"_id": 3, "g": 1, "v": 0},
            doc! {"_id": 4, "g": 2, "v": 0},
        ],
    )
    .await;
    let r = fx
        .update(
            "c",
            doc! {"q": {"g": 1}, "u": {"$set": {"v": 5}}, "multi": true},
        )
        .await;
    assert_counts(&r, 3, 2);
    assert_eq!(fx.get("c", 4).await, doc! {"_id": 4, "g": 2, "v": 0});

    let coll = fx.srv.db(DB).collection::<Document>("c");
    let res = coll
        .update_many(doc! {"v": 5}, doc! {"$inc": {"v": 1}})
        .await
        .unwrap();
    assert_eq!(
        (res.matched_count, res.modified_count, res.upserted_id),
        (3, 3, None)
    );
}

#[tokio::test]
async fn upsert_inserts_with_query_equality_fields_and_generated_id() {
    let fx = Fx::new("c", vec![]).await;
    let r = fx
        .update("c", doc! {"q": {"k": 5, "a.b": 2, "r": {"$gt": 1}}, "u": {"$set": {"v": 1}}, "upsert": true})
        .await;
    assert_eq!(num(&r, "n"), 1, "{r}");
    assert_eq!(num(&r, "nModified"), 0, "{r}");
    let up = r
        .get_array("upserted")
        .unwrap_or_else(|_| panic!("no upserted: {r}"));
    assert_eq!(up.len(), 1);
    let up = up[0].as_document().unwrap();
    assert_eq!(num(up, "index"), 0, "{r}");
    let id = up
        .get_object_id("_id")
        .unwrap_or_else(|_| panic!("generated _id is an ObjectId: {r}"));
    let d = fx.get("c", id).await;
    assert_eq!(d, doc! {"_id": id, "k": 5, "a": {"b": 2}, "v": 1});

    // Second run matches the upserted document.
    let r = fx
        .update(
            "c",
            doc! {"q": {"k": 5, "a.b": 2}, "u": {"$set": {"v": 2}}, "upsert": true},
        )
        .await;
    assert_counts(&r, 1, 1);
    assert!(!r.contains_key("upserted"), "{r}");
}

#[tokio::test]
async fn upsert_uses_id_from_query() {
    let fx = Fx::new("c", vec![]).await;
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": "mine"}, "u": {"$inc": {"n": 1}}, "upsert": true},
        )
        .await;
    let up = r.get_array("upserted").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(up, doc! {"index": 0, "_id": "mine"});
    assert_eq!(fx.get("c", "mine").await, doc! {"_id": "mine", "n": 1});

    let coll = fx.srv.db(DB).collection::<Document>("c");
    let res = coll
        .update_one(doc! {"_id": 7}, doc! {"$set": {"x": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(res.matched_count, 0);
    assert_eq!(res.modified_count, 0);
    assert_eq!(res.upserted_id, Some(Bson::Int32(7)));
}

#[tokio::test]
async fn set_on_insert_applies_only_when_inserting() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": 1}]).await;
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$set": {"a": 2}, "$setOnInsert": {"created": true}}, "upsert": true})
        .await;
    assert_counts(&r, 1, 1);
    assert_eq!(fx.get("c", 1).await, doc! {"_id": 1, "a": 2});
    let r = fx
        .update("c", doc! {"q": {"_id": 2}, "u": {"$set": {"a": 2}, "$setOnInsert": {"created": true}}, "upsert": true})
        .await;
    assert_eq!(num(&r, "n"), 1);
    assert_eq!(
        fx.get("c", 2).await,
        doc! {"_id": 2, "a": 2, "created": true}
    );
}

#[tokio::test]
async fn several_statements_report_upserted_with_their_index() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "v": 0}, doc! {"_id": 2, "v": 0}]).await;
    let r = fx
        .updates(
            "c",
            vec![
                doc! {"q": {"_id": 1}, "u": {"$set": {"v": 1}}},
                doc! {"q": {"_id": 10}, "u": {"$set": {"v": 1}}, "upsert": true},
                doc! {"q": {"_id": 2}, "u": {"$set": {"v": 0}}},
                doc! {"q": {"_id": 11}, "u": {"$set": {"v": 1}}, "upsert": true},
            ],
            true,
        )
        .await;
    assert_eq!(num(&r, "n"), 4, "{r}");
    assert_eq!(num(&r, "nModified"), 1, "{r}");
    let up: Vec<Document> = r
        .get_array("upserted")
        .unwrap()
        .iter()
        .map(|b| b.as_document().unwrap().clone())
        .collect();
    assert_eq!(
        up,
        vec![doc! {"index": 1, "_id": 10}, doc! {"index": 3, "_id": 11}]
    );
}

#[tokio::test]
async fn ordered_update_batch_stops_at_first_error_unordered_continues() {
    let fx = Fx::new(
        "c",
        vec![
            doc! {"_id": 1, "s": "text", "n": 0},
            doc! {"_id": 2, "n": 0},
        ],
    )
    .await;
    let stmts = vec![
        doc! {"q": {"_id": 2}, "u": {"$inc": {"n": 1}}},
        doc! {"q": {"_id": 1}, "u": {"$inc": {"s": 1}}},
        doc! {"q": {"_id": 2}, "u": {"$inc": {"n": 1}}},
    ];
    let r = fx.updates("c", stmts.clone(), true).await;
    assert_eq!(num(&r, "n"), 1, "{r}");
    assert_eq!(num(&r, "nModified"), 1, "{r}");
    let we = write_error(&r, 0);
    assert_eq!(num(&we, "index"), 1, "{we}");
    assert_eq!(
        num(&we, "code"),
        14,
        "$inc on a string is TypeMismatch: {we}"
    );
    assert_eq!(fx.get("c", 2).await.get_i32("n").unwrap(), 1);

    let r = fx.updates("c", stmts, false).await;
    assert_eq!(num(&r, "n"), 2, "{r}");
    assert_eq!(num(&r, "nModified"), 2, "{r}");
    assert_eq!(r.get_array("writeErrors").unwrap().len(), 1, "{r}");
    assert_eq!(num(&write_error(&r, 0), "index"), 1);
    assert_eq!(fx.get("c", 2).await.get_i32("n").unwrap(), 3);
    assert_eq!(fx.get("c", 1).await, doc! {"_id": 1, "s": "text", "n": 0});
}

// ---------------------------------------------------------------------------
// Field operators
// ---------------------------------------------------------------------------

#[tokio::test]
async fn set_creates_nested_paths_and_appends_new_fields() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": 1, "z": 2}]).await;
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$set": {"n.m.o": 1, "b": 2, "a": 10}}},
    )
    .await;
    let d = fx.get("c", 1).await;
    assert_eq!(
        d,
        doc! {"_id": 1, "a": 10, "z": 2, "n": {"m": {"o": 1}}, "b": 2}
    );
    let keys: Vec<_> = d.keys().cloned().collect();
    // Existing fields keep their place; new fields are appended in lexicographic order.
    assert_eq!(keys, vec!["_id", "a", "z", "b", "n"]);
}

#[tokio::test]
async fn set_array_element_by_index_and_pad_with_nulls() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "arr": [1, 2, 3]}]).await;
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$set": {"arr.1": 20, "arr.5": 6}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await,
        doc! {"_id": 1, "arr": [1, 20, 3, null, null, 6]}
    );
}

#[tokio::test]
async fn set_through_a_scalar_is_an_error() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": 5}]).await;
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$set": {"a.b": 1}}})
        .await;
    let we = write_error(&r, 0);
    assert_eq!(num(&we, "code"), 28, "PathNotViable: {we}");
    assert_eq!(num(&r, "n"), 0, "{r}");
}

#[tokio::test]
async fn unset_removes_fields() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}}]).await;
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": 1}, "u": {"$unset": {"a": "", "b.c": 1}}},
        )
        .await;
    assert_counts(&r, 1, 1);
    assert_eq!(fx.get("c", 1).await, doc! {"_id": 1, "b": {"d": 2}});
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$unset": {"nope": ""}}})
        .await;
    assert_counts(&r, 1, 0);
}

#[tokio::test]
async fn inc_types_and_creation() {
    let fx = Fx::new(
        "c",
        vec![doc! {"_id": 1, "i": 1i32, "l": 1i64, "d": 1.5, "big": i32::MAX}],
    )
    .await;
    fx.update("c", doc! {"q": {"_id": 1}, "u": {"$inc": {"i": 2i32, "l": 2i32, "d": 1i32, "new": 5i32, "big": 1i32}}})
        .await;
    let d = fx.get("c", 1).await;
    assert_eq!(d.get("i"), Some(&Bson::Int32(3)), "{d}");
    assert_eq!(d.get("l"), Some(&Bson::Int64(3)), "{d}");
    assert_eq!(d.get("d"), Some(&Bson::Double(2.5)), "{d}");
    assert_eq!(d.get("new"), Some(&Bson::Int32(5)), "{d}");
    // int32 overflow widens to int64.
    assert_eq!(d.get("big"), Some(&Bson::Int64(i32::MAX as i64 + 1)), "{d}");
    fx.update("c", doc! {"q": {"_id": 1}, "u": {"$inc": {"i": 0.5}}})
        .await;
    assert_eq!(fx.get("c", 1).await.get("i"), Some(&Bson::Double(3.5)));
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$inc": {"i": 0}}})
        .await;
    assert_counts(&r, 1, 0);
}

#[tokio::test]
async fn mul_multiplies_and_creates_zero() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "p": 10i32, "q": 2.5}]).await;
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$mul": {"p": 3i32, "q": 2i32, "missing": 7i32}}},
    )
    .await;
    let d = fx.get("c", 1).await;
    assert_eq!(d.get("p"), Some(&Bson::Int32(30)), "{d}");
    assert_eq!(d.get("q"), Some(&Bson::Double(5.0)), "{d}");
    assert_eq!(d.get("missing"), Some(&Bson::Int32(0)), "{d}");
}

#[tokio::test]
async fn min_and_max() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "lo": 5, "hi": 5}]).await;
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": 1}, "u": {"$min": {"lo": 3}, "$max": {"hi": 9}}},
        )
        .await;
    assert_counts(&r, 1, 1);
    assert_eq!(fx.get("c", 1).await, doc! {"_id": 1, "lo": 3, "hi": 9});
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": 1}, "u": {"$min": {"lo": 4}, "$max": {"hi": 8}}},
        )
        .await;
    assert_counts(&r, 1, 0);
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$min": {"new_lo": 1}, "$max": {"new_hi": 2}}},
    )
    .await;
    let d = fx.get("c", 1).await;
    assert_eq!(
        (d.get_i32("new_lo").unwrap(), d.get_i32("new_hi").unwrap()),
        (1, 2)
    );
    // Cross-type: min by BSON order (numbers < strings).
    fx.update("c", doc! {"q": {"_id": 1}, "u": {"$min": {"hi": "text"}}})
        .await;
    assert_eq!(fx.get("c", 1).await.get_i32("hi").unwrap(), 9);
}

#[tokio::test]
async fn rename_moves_fields() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": 1, "n": {"x": 2}, "keep": 0}]).await;
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": 1}, "u": {"$rename": {"a": "b", "n.x": "y"}}},
        )
        .await;
    assert_counts(&r, 1, 1);
    let d = fx.get("c", 1).await;
    assert!(!d.contains_key("a"), "{d}");
    assert_eq!(d.get_i32("b").unwrap(), 1);
    assert_eq!(d.get_i32("y").unwrap(), 2);
    assert_eq!(d.get_document("n").unwrap(), &doc! {});
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": 1}, "u": {"$rename": {"nope": "other"}}},
        )
        .await;
    assert_counts(&r, 1, 0);
}

#[tokio::test]
async fn current_date_sets_date_or_timestamp() {
    let fx = Fx::new("c", vec![doc! {"_id": 1}]).await;
    let before = compat_tests::bson::DateTime::now().timestamp_millis();
    fx.update("c", doc! {"q": {"_id": 1}, "u": {"$currentDate": {"d": true, "d2": {"$type": "date"}, "t": {"$type": "timestamp"}}}})
        .await;
    let d = fx.get("c", 1).await;
    let date = d
        .get_datetime("d")
        .unwrap_or_else(|_| panic!("d is a date: {d}"));
    assert!((date.timestamp_millis() - before).abs() < 60_000, "{d}");
    assert!(d.get_datetime("d2").is_ok(), "{d}");
    assert!(d.get_timestamp("t").is_ok(), "t is a timestamp: {d}");
}

// ---------------------------------------------------------------------------
// Array operators
// ---------------------------------------------------------------------------

#[tokio::test]
async fn push_and_its_modifiers() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": [3, 1]}]).await;
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$push": {"a": 2, "fresh": "x"}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await,
        doc! {"_id": 1, "a": [3, 1, 2], "fresh": ["x"]}
    );
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$push": {"a": {"$each": [9, 0]}}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await.get_array("a").unwrap(),
        &vec![Bson::Int32(3), 1.into(), 2.into(), 9.into(), 0.into()]
    );
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$push": {"a": {"$each": [5], "$sort": 1}}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await.get_array("a").unwrap(),
        &vec![
            Bson::Int32(0),
            1.into(),
            2.into(),
            3.into(),
            5.into(),
            9.into()
        ]
    );
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$push": {"a": {"$each": [], "$slice": -3}}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await.get_array("a").unwrap(),
        &vec![Bson::Int32(3), 5.into(), 9.into()]
    );
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$push": {"a": {"$each": [7, 8], "$position": 1}}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await.get_array("a").unwrap(),
        &vec![Bson::Int32(3), 7.into(), 8.into(), 5.into(), 9.into()]
    );
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$push": {"a": {"$each": [1], "$sort": -1, "$slice": 2}}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await.get_array("a").unwrap(),
        &vec![Bson::Int32(9), 8.into()]
    );
}

#[tokio::test]
async fn push_sort_by_field_of_embedded_documents() {
    let fx = Fx::new(
        "c",
        vec![doc! {"_id": 1, "q": [{"s": 3, "n": "c"}, {"s": 1, "n": "a"}]}],
    )
    .await;
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$push": {"q": {"$each": [{"s": 2, "n": "b"}], "$sort": {"s": -1}, "$slice": 2}}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await,
        doc! {"_id": 1, "q": [{"s": 3, "n": "c"}, {"s": 2, "n": "b"}]}
    );
}

#[tokio::test]
async fn push_onto_a_non_array_is_an_error() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": 5}]).await;
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$push": {"a": 1}}})
        .await;
    let we = write_error(&r, 0);
    assert_eq!(num(&we, "code"), 2, "BadValue: {we}");
}

#[tokio::test]
async fn add_to_set_pull_pull_all_pop() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "s": [1, 2], "p": [1, 2, 3, 2, 4, 5], "o": [{"k": 1}, {"k": 2}, {"k": 3}]}]).await;
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$addToSet": {"s": 2}}})
        .await;
    assert_counts(&r, 1, 0);
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$addToSet": {"s": {"$each": [2, 3, 3, 4]}}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await.get_array("s").unwrap(),
        &vec![Bson::Int32(1), 2.into(), 3.into(), 4.into()]
    );
    fx.update("c", doc! {"q": {"_id": 1}, "u": {"$pull": {"p": 2}}})
        .await;
    assert_eq!(
        fx.get("c", 1).await.get_array("p").unwrap(),
        &vec![Bson::Int32(1), 3.into(), 4.into(), 5.into()]
    );
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$pull": {"p": {"$gte": 4}, "o": {"k": {"$in": [1, 3]}}}}},
    )
    .await;
    let d = fx.get("c", 1).await;
    assert_eq!(d.get_array("p").unwrap(), &vec![Bson::Int32(1), 3.into()]);
    assert_eq!(
        d.get_array("o").unwrap(),
        &vec![Bson::Document(doc! {"k": 2})]
    );
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$pullAll": {"s": [1, 4, 99]}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await.get_array("s").unwrap(),
        &vec![Bson::Int32(2), 3.into()]
    );
    fx.update("c", doc! {"q": {"_id": 1}, "u": {"$pop": {"s": 1}}})
        .await;
    assert_eq!(
        fx.get("c", 1).await.get_array("s").unwrap(),
        &vec![Bson::Int32(2)]
    );
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$push": {"s": {"$each": [7, 8]}}}},
    )
    .await;
    fx.update("c", doc! {"q": {"_id": 1}, "u": {"$pop": {"s": -1}}})
        .await;
    assert_eq!(
        fx.get("c", 1).await.get_array("s").unwrap(),
        &vec![Bson::Int32(7), 8.into()]
    );
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$pull": {"s": 1000}}})
        .await;
    assert_counts(&r, 1, 0);
}

#[tokio::test]
async fn add_to_set_compares_embedded_documents_exactly() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "s": [{"a": 1, "b": 2}]}]).await;
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": 1}, "u": {"$addToSet": {"s": {"a": 1, "b": 2}}}},
        )
        .await;
    assert_counts(&r, 1, 0);
    // Field order matters for document equality.
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": 1}, "u": {"$addToSet": {"s": {"b": 2, "a": 1}}}},
        )
        .await;
    assert_counts(&r, 1, 1);
    assert_eq!(fx.get("c", 1).await.get_array("s").unwrap().len(), 2);
}

#[tokio::test]
async fn positional_operator_updates_first_matched_element() {
    let fx = Fx::new(
        "c",
        vec![
            doc! {"_id": 1, "grades": [80, 85, 85, 90]},
            doc! {"_id": 2, "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 1}]},
        ],
    )
    .await;
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": 1, "grades": 85}, "u": {"$set": {"grades.$": 86}}},
        )
        .await;
    assert_counts(&r, 1, 1);
    assert_eq!(
        fx.get("c", 1).await.get_array("grades").unwrap(),
        &vec![Bson::Int32(80), 86.into(), 85.into(), 90.into()]
    );
    fx.update(
        "c",
        doc! {"q": {"_id": 2, "items.sku": "b"}, "u": {"$inc": {"items.$.qty": 5}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 2).await,
        doc! {"_id": 2, "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 6}]}
    );
    fx.update("c", doc! {"q": {"_id": 2, "items": {"$elemMatch": {"sku": "a", "qty": 1}}}, "u": {"$set": {"items.$.qty": 0}}})
        .await;
    assert_eq!(
        fx.get("c", 2).await.get_array("items").unwrap()[0],
        Bson::Document(doc! {"sku": "a", "qty": 0})
    );
}

#[tokio::test]
async fn positional_operator_without_array_match_is_an_error() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "grades": [1, 2]}]).await;
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$set": {"grades.$": 0}}})
        .await;
    let we = write_error(&r, 0);
    assert_eq!(num(&we, "code"), 2, "BadValue: {we}");
}

#[tokio::test]
async fn all_positional_updates_every_element() {
    let fx = Fx::new(
        "c",
        vec![doc! {"_id": 1, "g": [1, 2, 3], "o": [{"v": 1}, {"v": 2}]}],
    )
    .await;
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$inc": {"g.$[]": 10, "o.$[].v": 100}}},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await,
        doc! {"_id": 1, "g": [11, 12, 13], "o": [{"v": 101}, {"v": 102}]}
    );
}

#[tokio::test]
async fn filtered_positional_with_array_filters() {
    let fx = Fx::new(
        "c",
        vec![
            doc! {"_id": 1, "g": [95, 92, 90, 70]},
            doc! {"_id": 2, "g": [98, 100, 102]},
            doc! {"_id": 3, "g": [10]},
        ],
    )
    .await;
    let r = fx
        .update(
            "c",
            doc! {"q": {}, "u": {"$set": {"g.$[el]": 100}}, "multi": true, "arrayFilters": [{"el": {"$gte": 100}}]},
        )
        .await;
    assert_counts(&r, 3, 1);
    assert_eq!(
        fx.get("c", 2).await.get_array("g").unwrap(),
        &vec![Bson::Int32(98), 100.into(), 100.into()]
    );

    let coll = fx.srv.db(DB).collection::<Document>("c");
    let res = coll
        .update_one(doc! {"_id": 1}, doc! {"$inc": {"g.$[low]": 1}})
        .array_filters(vec![doc! {"low": {"$lt": 92}}])
        .await
        .unwrap();
    assert_eq!((res.matched_count, res.modified_count), (1, 1));
    assert_eq!(
        fx.get("c", 1).await.get_array("g").unwrap(),
        &vec![Bson::Int32(95), 92.into(), 91.into(), 71.into()]
    );
}

#[tokio::test]
async fn filtered_positional_on_embedded_documents() {
    let fx = Fx::new(
        "c",
        vec![doc! {"_id": 1, "d": [{"n": "a", "q": 1}, {"n": "b", "q": 5}, {"n": "a", "q": 9}]}],
    )
    .await;
    fx.update(
        "c",
        doc! {"q": {"_id": 1}, "u": {"$set": {"d.$[x].q": 0}}, "arrayFilters": [{"x.n": "a"}]},
    )
    .await;
    assert_eq!(
        fx.get("c", 1).await,
        doc! {"_id": 1, "d": [{"n": "a", "q": 0}, {"n": "b", "q": 5}, {"n": "a", "q": 0}]}
    );
}

#[tokio::test]
async fn array_filter_identifier_without_filter_is_an_error() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "g": [1]}]).await;
    let cmd = doc! {"update": "c", "updates": [{"q": {}, "u": {"$set": {"g.$[nope]": 1}}}]};
    let r = fx.srv.db(DB).run_command(cmd).await;
    // MongoDB reports this as a write error (or command error) with code 2 BadValue.
    match r {
        Ok(reply) => assert_eq!(num(&write_error(&reply, 0), "code"), 2, "{reply}"),
        Err(e) => assert_eq!(compat_tests::failure(&e).map(|f| f.code), Some(2), "{e}"),
    }
}

// ---------------------------------------------------------------------------
// Replacement
// ---------------------------------------------------------------------------

#[tokio::test]
async fn replacement_keeps_id_and_replaces_everything_else() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": 1, "b": 2}]).await;
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"z": 26, "y": 25}})
        .await;
    assert_counts(&r, 1, 1);
    let d = fx.get("c", 1).await;
    assert_eq!(d, doc! {"_id": 1, "z": 26, "y": 25});
    assert_eq!(d.keys().collect::<Vec<_>>(), vec!["_id", "z", "y"]);
    // Identical replacement: not modified.
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"z": 26, "y": 25}})
        .await;
    assert_counts(&r, 1, 0);
    // Replacement naming the same _id is fine.
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"_id": 1, "only": true}})
        .await;
    assert_counts(&r, 1, 1);

    let coll = fx.srv.db(DB).collection::<Document>("c");
    let res = coll
        .replace_one(doc! {"only": true}, doc! {"again": 1})
        .await
        .unwrap();
    assert_eq!((res.matched_count, res.modified_count), (1, 1));
    assert_eq!(fx.all("c").await, vec![doc! {"_id": 1, "again": 1}]);
}

#[tokio::test]
async fn replacement_upsert_takes_id_from_query() {
    let fx = Fx::new("c", vec![]).await;
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": 5, "ignored": 1}, "u": {"v": 1}, "upsert": true},
        )
        .await;
    assert_eq!(num(&r, "n"), 1);
    let up = r.get_array("upserted").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(up, doc! {"index": 0, "_id": 5});
    // A replacement upsert does not copy other query fields.
    assert_eq!(fx.all("c").await, vec![doc! {"_id": 5, "v": 1}]);
}

#[tokio::test]
async fn changing_id_is_immutable_field() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": 1}]).await;
    let coll = fx.srv.db(DB).collection::<Document>("c");
    let r = coll
        .replace_one(doc! {"_id": 1}, doc! {"_id": 2, "a": 1})
        .await;
    expect_failure(r, 66, "ImmutableField");
    let r = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"_id": 3}})
        .await;
    expect_failure(r, 66, "ImmutableField");
    // Setting _id to its current value is allowed.
    let res = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"_id": 1, "a": 2}})
        .await
        .unwrap();
    assert_eq!(res.modified_count, 1);
    assert_eq!(fx.all("c").await, vec![doc! {"_id": 1, "a": 2}]);
}

#[tokio::test]
async fn typed_update_one_results() {
    let fx = Fx::new("c", vec![doc! {"_id": 1, "x": 1}, doc! {"_id": 2, "x": 1}]).await;
    let coll = fx.srv.db(DB).collection::<Document>("c");
    let res = coll
        .update_one(doc! {"x": 1}, doc! {"$set": {"x": 2}})
        .await
        .unwrap();
    assert_eq!(
        (res.matched_count, res.modified_count, res.upserted_id),
        (1, 1, None)
    );
    let res = coll
        .update_one(doc! {"x": 99}, doc! {"$set": {"x": 2}})
        .await
        .unwrap();
    assert_eq!(
        (res.matched_count, res.modified_count, res.upserted_id),
        (0, 0, None)
    );
    let res = coll
        .update_one(doc! {"x": 99}, doc! {"$set": {"y": 2}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!((res.matched_count, res.modified_count), (0, 0));
    let id = res.upserted_id.expect("upserted id");
    assert!(matches!(id, Bson::ObjectId(_)), "{id:?}");
    assert_eq!(
        fx.get("c", id.clone()).await,
        doc! {"_id": id, "x": 99, "y": 2}
    );
}

#[tokio::test]
async fn empty_set_operand_is_a_no_op() {
    // Allowed since MongoDB 5.0.
    let fx = Fx::new("c", vec![doc! {"_id": 1}]).await;
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$set": {}}})
        .await;
    assert_counts(&r, 1, 0);
}

#[tokio::test]
async fn update_counts_are_int32_as_mongodb_sends_them() {
    // mongosh and the Node driver show int64 counts as Long('1'), and
    // `result.modifiedCount === 1` is then false.
    let fx = Fx::new("c", vec![doc! {"_id": 1, "a": 1}]).await;
    let r = fx
        .update("c", doc! {"q": {"_id": 1}, "u": {"$set": {"a": 2}}})
        .await;
    assert_eq!(r.get("n"), Some(&Bson::Int32(1)), "{r}");
    assert_eq!(r.get("nModified"), Some(&Bson::Int32(1)), "{r}");
    let r = fx
        .update(
            "c",
            doc! {"q": {"_id": 2}, "u": {"$set": {"a": 2}}, "upsert": true},
        )
        .await;
    assert_eq!(r.get("n"), Some(&Bson::Int32(1)), "{r}");
    assert_eq!(r.get("nModified"), Some(&Bson::Int32(0)), "{r}");
    let up = r.get_array("upserted").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(up.get("index"), Some(&Bson::Int32(0)), "{r}");
}

// ---------------------------------------------------------------------------
// Field order and indexes around in-place updates
// ---------------------------------------------------------------------------

/// The field names of `doc`, nested documents' as `parent.child`, in order.
fn field_order(doc: &Document) -> Vec<String> {
    let mut names = Vec::new();
    for (k, v) in doc {
        names.push(k.clone());
        if let Bson::Document(inner) = v {
            names.extend(field_order(inner).into_iter().map(|n| format!("{k}.{n}")));
        }
    }
    names
}

#[tokio::test]
async fn updated_documents_keep_their_field_order_and_indexes_follow() {
    let fx = Fx::new(
        "order",
        vec![doc! {"_id": 1, "a": 1, "s": {"n": 1, "t": "x"}, "score": 5, "z": "end"}],
    )
    .await;
    let c = fx.srv.db(DB).collection::<Document>("order");
    c.create_index(
        compat_tests::mongodb::IndexModel::builder()
            .keys(doc! {"score": 1})
            .build(),
    )
    .await
    .unwrap();

    // Changed fields stay where they were, new ones are appended (in
    // field-name order, nested ones inside their parent), unset ones go.
    let r = fx
        .update(
            "order",
            doc! {"q": {"_id": 1}, "u": {
                "$set": {"s.n": 2, "zeta": true, "s.new": "y", "beta": 0},
                "$inc": {"a": 1},
                "$unset": {"z": ""},
            }},
        )
        .await;
    assert_counts(&r, 1, 1);
    let got = fx.get("order", 1).await;
    assert_eq!(
        field_order(&got),
        ["_id", "a", "s", "s.n", "s.t", "s.new", "score", "beta", "zeta"]
    );
    assert_eq!(
        got,
        doc! {"_id": 1, "a": 2, "s": {"n": 2, "t": "x", "new": "y"}, "score": 5, "beta": 0, "zeta": true}
    );

    // An update that changes nothing is matched, not modified.
    let r = fx
        .update(
            "order",
            doc! {"q": {"_id": 1}, "u": {"$set": {"a": 2}, "$max": {"score": 1}}},
        )
        .await;
    assert_counts(&r, 1, 0);

    // The indexed field changes through the index too; fields beside it
    // leave its entries alone.
    let by_score = |score: i32| {
        let c = c.clone();
        async move {
            c.find(doc! {"score": score})
                .hint(compat_tests::mongodb::options::Hint::Keys(
                    doc! {"score": 1},
                ))
                .await
                .unwrap()
                .try_collect::<Vec<_>>()
                .await
                .unwrap()
                .len()
        }
    };
    fx.update("order", doc! {"q": {"_id": 1}, "u": {"$inc": {"a": 1}}})
        .await;
    assert_eq!(by_score(5).await, 1);
    fx.update("order", doc! {"q": {"_id": 1}, "u": {"$inc": {"score": 4}}})
        .await;
    assert_eq!((by_score(5).await, by_score(9).await), (0, 1));
    assert_eq!(num(&fx.get("order", 1).await, "a"), 3);
}
