//! insert: acknowledgement shapes, generated _id, duplicate keys in ordered
//! and unordered batches, large documents and large batches.

use compat_tests::{
    bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary, Bson, Document},
    mongodb::error::ErrorKind,
    num, numf, TestServer,
};
use futures::TryStreamExt;

fn write_errors(reply: &Document) -> Vec<Document> {
    reply
        .get_array("writeErrors")
        .map(|a| a.iter().map(|b| b.as_document().unwrap().clone()).collect())
        .unwrap_or_default()
}

#[track_caller]
fn assert_dup_key(we: &Document, index: i64) {
    assert_eq!(num(we, "index"), index, "{we}");
    assert_eq!(num(we, "code"), 11000, "{we}");
    let msg = we
        .get_str("errmsg")
        .unwrap_or_else(|_| panic!("no errmsg: {we}"));
    assert!(msg.contains("E11000 duplicate key error"), "{msg}");
}

#[tokio::test]
async fn insert_reply_counts_documents() {
    let srv = TestServer::start().await;
    let reply = srv
        .db("ins")
        .run_command(doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}, {"_id": 3}]})
        .await
        .unwrap();
    assert_eq!(num(&reply, "n"), 3, "{reply}");
    assert_eq!(numf(&reply, "ok"), 1.0);
    assert!(!reply.contains_key("writeErrors"), "{reply}");
}

#[tokio::test]
async fn server_generates_object_id_first() {
    let srv = TestServer::start().await;
    let db = srv.db("ins");
    // A raw insert without _id: the server must add one (the driver is not involved).
    let reply = db
        .run_command(doc! {"insert": "gen", "documents": [{"a": 1, "b": "x"}, {"a": 2}]})
        .await
        .unwrap();
    assert_eq!(num(&reply, "n"), 2);
    let docs: Vec<Document> = db
        .collection::<Document>("gen")
        .find(doc! {})
        .sort(doc! {"a": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(docs.len(), 2);
    let mut ids = Vec::new();
    for d in &docs {
        assert_eq!(
            d.keys().next().map(String::as_str),
            Some("_id"),
            "_id comes first: {d}"
        );
        ids.push(
            d.get_object_id("_id")
                .unwrap_or_else(|_| panic!("_id not an ObjectId: {d}")),
        );
    }
    assert_ne!(ids[0], ids[1]);
    assert_eq!(docs[0].get_str("b").ok(), Some("x"));
}

#[tokio::test]
async fn id_is_moved_to_the_front() {
    let srv = TestServer::start().await;
    let db = srv.db("ins");
    db.run_command(doc! {"insert": "front", "documents": [{"a": 1, "_id": 5, "z": 2}]})
        .await
        .unwrap();
    let d = db
        .collection::<Document>("front")
        .find_one(doc! {})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d, doc! {"_id": 5, "a": 1, "z": 2});
    assert_eq!(d.keys().collect::<Vec<_>>(), vec!["_id", "a", "z"]);
}

#[tokio::test]
async fn typed_insert_one_and_many() {
    let srv = TestServer::start().await;
    let coll = srv.db("ins").collection::<Document>("typed");
    let r = coll.insert_one(doc! {"name": "one"}).await.unwrap();
    assert!(matches!(r.inserted_id, Bson::ObjectId(_)));
    let r = coll
        .insert_many(vec![
            doc! {"_id": "a"},
            doc! {"_id": "b"},
            doc! {"name": "c"},
        ])
        .await
        .unwrap();
    assert_eq!(r.inserted_ids.len(), 3);
    assert_eq!(r.inserted_ids[&0], Bson::String("a".into()));
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 4);
    let found = coll.find_one(doc! {"_id": "b"}).await.unwrap();
    assert_eq!(found, Some(doc! {"_id": "b"}));
}

#[tokio::test]
async fn values_of_every_common_type_round_trip() {
    let srv = TestServer::start().await;
    let coll = srv.db("ins").collection::<Document>("types");
    let oid = ObjectId::new();
    let original = doc! {
        "_id": oid,
        "double": 1.5,
        "string": "héllo ✓",
        "doc": {"nested": {"deep": [1, 2, {"x": null}]}},
        "array": [1, "two", 3.0, false],
        "bin": Binary {subtype: BinarySubtype::Generic, bytes: vec![0, 1, 2, 255]},
        "uuid": Binary {subtype: BinarySubtype::Uuid, bytes: vec![7; 16]},
        "oid": ObjectId::new(),
        "bool": true,
        "date": compat_tests::bson::DateTime::from_millis(1_700_000_000_123),
        "null": null,
        "regex": compat_tests::regex("^a.c$", "i"),
        "int32": 42i32,
        "int64": 1i64 << 40,
        "ts": compat_tests::bson::Timestamp {time: 12, increment: 34},
        "dec": "1.25".parse::<compat_tests::bson::Decimal128>().unwrap(),
        "minkey": Bson::MinKey,
        "maxkey": Bson::MaxKey,
        "empty_doc": {},
        "empty_arr": [],
    };
    coll.insert_one(original.clone()).await.unwrap();
    let back = coll.find_one(doc! {"_id": oid}).await.unwrap().unwrap();
    assert_eq!(
        back, original,
        "round trip changed the document (types or field order)"
    );
}

#[tokio::test]
async fn ordered_insert_stops_at_first_duplicate() {
    let srv = TestServer::start().await;
    let db = srv.db("ins");
    let reply = db
        .run_command(doc! {
            "insert": "dup",
            "documents": [{"_id": 1}, {"_id": 2}, {"_id": 1}, {"_id": 3}],
        })
        .await
        .unwrap();
    assert_eq!(
        numf(&reply, "ok"),
        1.0,
        "write errors are not command errors: {reply}"
    );
    assert_eq!(num(&reply, "n"), 2, "{reply}");
    let we = write_errors(&reply);
    assert_eq!(we.len(), 1, "{reply}");
    assert_dup_key(&we[0], 2);
    let ids: Vec<Bson> = db
        .collection::<Document>("dup")
        .distinct("_id", doc! {})
        .await
        .unwrap();
    assert_eq!(
        ids.len(),
        2,
        "document after the error must not be inserted: {ids:?}"
    );
}

#[tokio::test]
async fn unordered_insert_continues_past_duplicates() {
    let srv = TestServer::start().await;
    let db = srv.db("ins");
    db.collection::<Document>("udup")
        .insert_one(doc! {"_id": 0})
        .await
        .unwrap();
    let reply = db
        .run_command(doc! {
            "insert": "udup",
            "documents": [{"_id": 0}, {"_id": 1}, {"_id": 1}, {"_id": 2}, {"_id": 0}, {"_id": 3}],
            "ordered": false,
        })
        .await
        .unwrap();
    assert_eq!(num(&reply, "n"), 3, "{reply}");
    let we = write_errors(&reply);
    let idx: Vec<i64> = we.iter().map(|w| num(w, "index")).collect();
    assert_eq!(idx, vec![0, 2, 4], "{reply}");
    for w in &we {
        assert_eq!(num(w, "code"), 11000);
    }
    let coll = db.collection::<Document>("udup");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 4);
}

#[tokio::test]
async fn typed_insert_many_reports_indexed_write_errors() {
    let srv = TestServer::start().await;
    let coll = srv.db("ins").collection::<Document>("tdup");
    let err = coll
        .insert_many(vec![doc! {"_id": 1}, doc! {"_id": 1}, doc! {"_id": 2}])
        .await
        .unwrap_err();
    match *err.kind {
        ErrorKind::InsertMany(ref m) => {
            let we = m.write_errors.as_ref().expect("write errors");
            assert_eq!(we.len(), 1);
            assert_eq!(we[0].index, 1);
            assert_eq!(we[0].code, 11000);
        }
        ref other => panic!("expected InsertMany error, got {other:?}"),
    }
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);

    let err = coll
        .insert_many(vec![
            doc! {"_id": 1},
            doc! {"_id": 3},
            doc! {"_id": 3},
            doc! {"_id": 4},
        ])
        .ordered(false)
        .await
        .unwrap_err();
    match *err.kind {
        ErrorKind::InsertMany(ref m) => {
            let idx: Vec<usize> = m
                .write_errors
                .as_ref()
                .unwrap()
                .iter()
                .map(|w| w.index)
                .collect();
            assert_eq!(idx, vec![0, 2]);
        }
        ref other => panic!("expected InsertMany error, got {other:?}"),
    }
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 3);
}

#[tokio::test]
async fn typed_insert_one_duplicate_is_write_error_11000() {
    let srv = TestServer::start().await;
    let coll = srv.db("ins").collection::<Document>("one_dup");
    coll.insert_one(doc! {"_id": "k"}).await.unwrap();
    let r = coll.insert_one(doc! {"_id": "k", "x": 1}).await;
    let f = compat_tests::expect_failure(r, 11000, "");
    assert!(f.message.contains("duplicate key"), "{f:?}");
    // The original is untouched.
    assert_eq!(
        coll.find_one(doc! {}).await.unwrap(),
        Some(doc! {"_id": "k"})
    );
}

#[tokio::test]
async fn duplicate_ids_compare_numerically_across_types() {
    // 1, 1.0 and 1L are the same _id value in MongoDB.
    let srv = TestServer::start().await;
    let db = srv.db("ins");
    let reply = db
        .run_command(doc! {
            "insert": "numdup",
            "documents": [{"_id": 1i32}, {"_id": 1.0f64}, {"_id": 1i64}],
            "ordered": false,
        })
        .await
        .unwrap();
    assert_eq!(num(&reply, "n"), 1, "{reply}");
    assert_eq!(write_errors(&reply).len(), 2, "{reply}");
}

#[tokio::test]
async fn large_batch_is_fully_inserted() {
    let srv = TestServer::start().await;
    let coll = srv.db("ins").collection::<Document>("big_batch");
    let docs: Vec<Document> = (0..5000)
        .map(|i| doc! {"_id": i, "pad": "x".repeat(100)})
        .collect();
    let r = coll.insert_many(docs).await.unwrap();
    assert_eq!(r.inserted_ids.len(), 5000);
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 5000);
}

#[tokio::test]
async fn fifteen_megabyte_document_round_trips() {
    let srv = TestServer::start().await;
    let coll = srv.db("ins").collection::<Document>("huge");
    let mut bytes = vec![0u8; 15 * 1024 * 1024];
    let mut rng = compat_tests::Rng::new(42);
    for chunk in bytes.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    let original = doc! {
        "_id": "huge",
        "blob": Binary {subtype: BinarySubtype::Generic, bytes},
        "tail": "end",
    };
    coll.insert_one(original.clone()).await.unwrap();
    let back = coll
        .find_one(doc! {"_id": "huge"})
        .await
        .unwrap()
        .expect("found");
    assert!(back == original, "15 MB document changed in the round trip");

    // And a 15 MB string, read back through a filter on another field.
    let s = "abcdefghijklmnop".repeat(15 * 1024 * 1024 / 16);
    coll.insert_one(doc! {"_id": "str", "s": &s, "k": 1})
        .await
        .unwrap();
    let back = coll.find_one(doc! {"k": 1}).await.unwrap().unwrap();
    assert_eq!(back.get_str("s").unwrap().len(), s.len());
    assert!(back.get_str("s").unwrap() == s);
}

#[tokio::test]
async fn insert_with_write_concern_and_bypass_validation_is_accepted() {
    let srv = TestServer::start().await;
    let reply = srv
        .db("ins")
        .run_command(doc! {
            "insert": "wc",
            "documents": [{"_id": 1}],
            "writeConcern": {"w": "majority", "j": true},
            "bypassDocumentValidation": true,
            "comment": "from the test",
        })
        .await
        .unwrap();
    assert_eq!(num(&reply, "n"), 1, "{reply}");
}

#[tokio::test]
async fn unacknowledged_insert_is_applied() {
    // w:0 uses OP_MSG moreToCome (flag bit 1): no reply, but the write must
    // happen. The Rust driver refuses w:0, so send the frame by hand.
    use compat_tests::wire;
    let srv = TestServer::start().await;
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let mut body = 2u32.to_le_bytes().to_vec();
    body.push(0);
    doc! {"insert": "w0", "documents": [{"_id": 1}, {"_id": 2}], "writeConcern": {"w": 0}, "$db": "ins"}
        .to_writer(&mut body)
        .unwrap();
    assert!(wire::send(&mut s, &wire::frame(11, wire::OP_MSG, &body)).await);
    // The next request on the same connection is answered (and the first was not).
    assert!(wire::send(&mut s, &wire::op_msg(12, &doc! {"ping": 1, "$db": "admin"})).await);
    match wire::read_reply(&mut s, std::time::Duration::from_secs(10)).await {
        wire::Outcome::Reply { doc: Some(d), .. } => {
            assert_eq!(numf(&d, "ok"), 1.0, "{d}");
            assert!(!d.contains_key("n"), "the w:0 insert was answered: {d}");
        }
        other => panic!("no answer to the ping after a moreToCome insert: {other:?}"),
    }
    let coll = srv.db("ins").collection::<Document>("w0");
    let mut n = 0;
    for _ in 0..100 {
        n = coll.count_documents(doc! {}).await.unwrap();
        if n == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(n, 2);
}

#[tokio::test]
async fn insert_count_and_write_error_index_are_int32() {
    let srv = TestServer::start().await;
    let reply = srv
        .db("ins")
        .run_command(
            doc! {"insert": "i32", "documents": [{"_id": 1}, {"_id": 1}], "ordered": false},
        )
        .await
        .unwrap();
    assert_eq!(reply.get("n"), Some(&Bson::Int32(1)), "{reply}");
    let we = write_errors(&reply);
    assert_eq!(we[0].get("index"), Some(&Bson::Int32(1)), "{reply}");
    assert_eq!(we[0].get("code"), Some(&Bson::Int32(11000)), "{reply}");
}
