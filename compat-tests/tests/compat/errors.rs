//! Client-caused failures: `{ok: 0, errmsg, code, codeName}` with MongoDB's
//! codes, or write errors with their batch index.

use std::time::Duration;

use compat_tests::{
    bson::{doc, Document},
    expect_command_error, expect_command_error_in, expect_failure, num, numf,
    wire::{self, RawConn},
    TestServer,
};
use tokio::net::TcpStream;

const DB: &str = "e";

async fn with_doc() -> TestServer {
    let srv = TestServer::start().await;
    srv.db(DB)
        .collection::<Document>("c")
        .insert_one(doc! {"_id": 1, "s": "text", "n": 1, "a": {"b": 1}})
        .await
        .unwrap();
    srv
}

async fn unchanged(srv: &TestServer) {
    let d = srv
        .db(DB)
        .collection::<Document>("c")
        .find_one(doc! {"_id": 1})
        .await
        .unwrap();
    assert_eq!(
        d,
        Some(doc! {"_id": 1, "s": "text", "n": 1, "a": {"b": 1}}),
        "a failed write changed the document"
    );
}

#[tokio::test]
async fn error_reply_has_the_full_shape() {
    let srv = TestServer::start().await;
    let mut c = RawConn::connect(srv.addr).await;
    let reply = c.command("admin", doc! {"noSuchThing": 1}).await;
    assert_eq!(numf(&reply, "ok"), 0.0, "{reply}");
    assert_eq!(num(&reply, "code"), 59, "{reply}");
    assert_eq!(
        reply.get_str("codeName").ok(),
        Some("CommandNotFound"),
        "{reply}"
    );
    assert!(
        reply.get_str("errmsg").unwrap().contains("noSuchThing"),
        "{reply}"
    );
    // The connection stays usable after an error.
    let reply = c.command("admin", doc! {"ping": 1}).await;
    assert_eq!(numf(&reply, "ok"), 1.0, "{reply}");
}

#[tokio::test]
async fn malformed_bson_gets_invalid_bson_error() {
    let srv = TestServer::start().await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let mut bytes = Vec::new();
    doc! {"ping": 1, "$db": "admin"}
        .to_writer(&mut bytes)
        .unwrap();
    // Element type of the first element → 0x7a, which is no BSON type.
    bytes[4] = 0x7a;
    assert!(wire::send(&mut s, &wire::op_msg_raw(3, &bytes)).await);
    match wire::read_reply(&mut s, Duration::from_secs(10)).await {
        wire::Outcome::Reply { doc: Some(d), .. } => {
            assert_eq!(numf(&d, "ok"), 0.0, "{d}");
            assert_eq!(num(&d, "code"), 22, "{d}");
            assert_eq!(d.get_str("codeName").ok(), Some("InvalidBSON"), "{d}");
            assert!(!d.get_str("errmsg").unwrap_or("").is_empty(), "{d}");
        }
        other => panic!("expected an InvalidBSON error reply, got {other:?}"),
    }
    srv.db("admin").run_command(doc! {"ping": 1}).await.unwrap();
}

#[tokio::test]
async fn bson_with_a_lying_string_length_is_rejected() {
    let srv = TestServer::start().await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let mut bytes = Vec::new();
    doc! {"find": "c", "$db": "admin"}
        .to_writer(&mut bytes)
        .unwrap();
    // {find: "c"}: 4 (len) + 1 (type) + "find\0" (5) → string length at offset 10.
    bytes[10..14].copy_from_slice(&0x7fff_fff0i32.to_le_bytes());
    assert!(wire::send(&mut s, &wire::op_msg_raw(3, &bytes)).await);
    match wire::read_reply(&mut s, Duration::from_secs(10)).await {
        wire::Outcome::Reply { doc: Some(d), .. } => {
            assert_eq!(numf(&d, "ok"), 0.0, "{d}");
            assert_eq!(num(&d, "code"), 22, "{d}");
        }
        other => panic!("expected an InvalidBSON error reply, got {other:?}"),
    }
    srv.db("admin").run_command(doc! {"ping": 1}).await.unwrap();
}

#[tokio::test]
async fn wrong_field_types() {
    let srv = with_doc().await;
    let db = srv.db(DB);
    expect_command_error(&db, doc! {"find": 1}, 73, "InvalidNamespace").await;
    expect_command_error(&db, doc! {"find": "c", "filter": "x"}, 14, "TypeMismatch").await;
    expect_command_error(&db, doc! {"find": "c", "sort": 5}, 14, "TypeMismatch").await;
    expect_command_error(&db, doc! {"find": "c", "limit": "3"}, 14, "TypeMismatch").await;
    expect_command_error(
        &db,
        doc! {"insert": "c", "documents": "x"},
        14,
        "TypeMismatch",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"insert": "c", "documents": [{"_id": 2}], "ordered": "yes"},
        14,
        "TypeMismatch",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"update": "c", "updates": {"q": {}}},
        14,
        "TypeMismatch",
    )
    .await;
    expect_command_error(&db, doc! {"count": "c", "query": 1}, 14, "TypeMismatch").await;
    expect_command_error(&db, doc! {"distinct": "c", "key": 1}, 14, "TypeMismatch").await;
    expect_command_error(
        &db,
        doc! {"getMore": "abc", "collection": "c"},
        14,
        "TypeMismatch",
    )
    .await;
    unchanged(&srv).await;
}

#[tokio::test]
async fn missing_and_unknown_fields() {
    let srv = with_doc().await;
    let db = srv.db(DB);
    expect_command_error(&db, doc! {"insert": "c"}, 40414, "Location40414").await;
    expect_command_error(&db, doc! {"update": "c"}, 40414, "Location40414").await;
    expect_command_error(&db, doc! {"delete": "c"}, 40414, "Location40414").await;
    expect_command_error(&db, doc! {"getMore": 5i64}, 40414, "Location40414").await;
    expect_command_error(
        &db,
        doc! {"find": "c", "frobnicate": 1},
        40415,
        "Location40415",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"insert": "c", "documents": [], "bogus": true},
        40415,
        "Location40415",
    )
    .await;
}

#[tokio::test]
async fn negative_skip_limit_batch_size() {
    let srv = with_doc().await;
    let db = srv.db(DB);
    expect_command_error(&db, doc! {"find": "c", "skip": -1}, 51024, "Location51024").await;
    expect_command_error(&db, doc! {"find": "c", "limit": -1}, 51024, "Location51024").await;
    expect_command_error(
        &db,
        doc! {"find": "c", "batchSize": -1},
        51024,
        "Location51024",
    )
    .await;
}

#[tokio::test]
async fn bad_filters() {
    let srv = with_doc().await;
    let db = srv.db(DB);
    let f = expect_command_error(
        &db,
        doc! {"find": "c", "filter": {"a": {"$foo": 1}}},
        2,
        "BadValue",
    )
    .await;
    assert!(f.message.contains("$foo"), "{f:?}");
    let f = expect_command_error(
        &db,
        doc! {"find": "c", "filter": {"$bar": 1}},
        2,
        "BadValue",
    )
    .await;
    assert!(f.message.contains("$bar"), "{f:?}");
    expect_command_error(
        &db,
        doc! {"find": "c", "filter": {"$and": []}},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"find": "c", "filter": {"$or": {}}},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"find": "c", "filter": {"a": {"$in": 5}}},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"find": "c", "filter": {"a": {"$mod": [0, 1]}}},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"find": "c", "filter": {"a": {"$size": -1}}},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"find": "c", "filter": {"s": {"$regex": "("}}},
        51091,
        "Location51091",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"find": "c", "filter": {"a": {"$type": "nosuchtype"}}},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"count": "c", "query": {"a": {"$foo": 1}}},
        2,
        "BadValue",
    )
    .await;
    let coll = db.collection::<Document>("c");
    expect_failure(coll.delete_many(doc! {"$bad": 1}).await, 2, "BadValue");
    expect_failure(
        coll.update_one(doc! {"a": {"$foo": 1}}, doc! {"$set": {"x": 1}})
            .await,
        2,
        "BadValue",
    );
    unchanged(&srv).await;
}

#[tokio::test]
async fn mixing_operators_and_fields_in_an_update() {
    let srv = with_doc().await;
    let coll = srv.db(DB).collection::<Document>("c");
    // Starts with an operator: the plain field is an unknown modifier.
    let r = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"n": 2}, "plain": 1})
        .await;
    let f = expect_failure(r, 9, "FailedToParse");
    assert!(f.message.contains("plain"), "{f:?}");
    let r = coll
        .update_one(doc! {"_id": 1}, doc! {"$frob": {"n": 2}})
        .await;
    let f = expect_failure(r, 9, "FailedToParse");
    assert!(f.message.contains("$frob"), "{f:?}");
    // Starts with a plain field: a replacement may not hold operators.
    let reply = srv
        .db(DB)
        .run_command(doc! {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"plain": 1, "$set": {"n": 2}}}]})
        .await;
    match reply {
        Ok(r) => {
            let we = r
                .get_array("writeErrors")
                .unwrap_or_else(|_| panic!("no writeErrors: {r}"))[0]
                .as_document()
                .unwrap()
                .clone();
            assert_eq!(num(&we, "code"), 52, "DollarPrefixedFieldName: {we}");
            assert_eq!(num(&we, "index"), 0);
        }
        Err(e) => assert_eq!(compat_tests::failure(&e).map(|f| f.code), Some(52), "{e}"),
    }
    unchanged(&srv).await;
}

#[tokio::test]
async fn type_errors_in_updates() {
    let srv = with_doc().await;
    let coll = srv.db(DB).collection::<Document>("c");
    let f = expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"s": 1}})
            .await,
        14,
        "TypeMismatch",
    );
    assert!(f.message.contains("s"), "{f:?}");
    expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": "one"}})
            .await,
        14,
        "TypeMismatch",
    );
    expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$mul": {"s": 2}})
            .await,
        14,
        "TypeMismatch",
    );
    expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$push": {"s": 1}})
            .await,
        2,
        "BadValue",
    );
    expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$pop": {"n": 1}})
            .await,
        14,
        "TypeMismatch",
    );
    expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$set": {"s.x": 1}})
            .await,
        28,
        "PathNotViable",
    );
    expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$rename": {"n": 5}})
            .await,
        2,
        "BadValue",
    );
    unchanged(&srv).await;
}

#[tokio::test]
async fn conflicting_update_paths() {
    let srv = with_doc().await;
    let coll = srv.db(DB).collection::<Document>("c");
    expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$set": {"n": 1}, "$inc": {"n": 1}})
            .await,
        40,
        "ConflictingUpdateOperators",
    );
    expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$set": {"a.b": 1, "a": 2}})
            .await,
        40,
        "ConflictingUpdateOperators",
    );
    expect_failure(
        coll.update_one(
            doc! {"_id": 1},
            doc! {"$set": {"a": 1}, "$unset": {"a.b": 1}},
        )
        .await,
        40,
        "ConflictingUpdateOperators",
    );
    expect_failure(
        coll.update_one(
            doc! {"_id": 1},
            doc! {"$rename": {"n": "s"}, "$set": {"s": 2}},
        )
        .await,
        40,
        "ConflictingUpdateOperators",
    );
    unchanged(&srv).await;
}

#[tokio::test]
async fn empty_field_names_and_dollar_fields_in_updates() {
    let srv = with_doc().await;
    let coll = srv.db(DB).collection::<Document>("c");
    expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$set": {"": 1}})
            .await,
        56,
        "EmptyFieldName",
    );
    expect_failure(
        coll.update_one(doc! {"_id": 1}, doc! {"$set": {"a..b": 1}})
            .await,
        56,
        "EmptyFieldName",
    );
    unchanged(&srv).await;
}

#[tokio::test]
async fn oversize_insert_is_rejected_and_nothing_written() {
    let srv = TestServer::start().await;
    // The driver refuses to send an oversize document, so build the frame by
    // hand: command in section 0, the document in a kind-1 sequence.
    let big = doc! {"_id": 1, "s": "x".repeat(16 * 1024 * 1024 + 100)};
    let mut big_bytes = Vec::new();
    big.to_writer(&mut big_bytes).unwrap();
    let mut body = Vec::new();
    body.extend_from_slice(&0u32.to_le_bytes());
    body.push(0);
    doc! {"insert": "big", "$db": DB}
        .to_writer(&mut body)
        .unwrap();
    body.push(1);
    let ident = b"documents\0";
    let seq_len = 4 + ident.len() + big_bytes.len();
    body.extend_from_slice(&(seq_len as i32).to_le_bytes());
    body.extend_from_slice(ident);
    body.extend_from_slice(&big_bytes);
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    assert!(wire::send(&mut s, &wire::frame(9, wire::OP_MSG, &body)).await);
    match wire::read_reply(&mut s, Duration::from_secs(30)).await {
        wire::Outcome::Reply { doc: Some(d), .. } => {
            let code = if numf(&d, "ok") == 1.0 {
                assert_eq!(num(&d, "n"), 0, "{d}");
                let we = d.get_array("writeErrors").unwrap_or_else(|_| panic!("{d}"));
                num(we[0].as_document().unwrap(), "code")
            } else {
                num(&d, "code")
            };
            // mongod: BadValue "object to insert too large"; BSONObjectTooLarge also seen.
            assert!(code == 2 || code == 10334, "unexpected code {code}: {d}");
        }
        other => panic!("expected an error reply for a 16 MiB+ document, got {other:?}"),
    }
    let n = srv
        .db(DB)
        .collection::<Document>("big")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn update_that_grows_a_document_past_16_mib_fails() {
    let srv = TestServer::start().await;
    let coll = srv.db(DB).collection::<Document>("grow");
    coll.insert_one(doc! {"_id": 1, "s": "x".repeat(15 * 1024 * 1024)})
        .await
        .unwrap();
    let r = coll
        .update_one(
            doc! {"_id": 1},
            doc! {"$set": {"t": "y".repeat(2 * 1024 * 1024)}},
        )
        .await;
    let f =
        compat_tests::failure(&r.expect_err("update past 16 MiB succeeded")).expect("server error");
    // 17419 in 7.0 ("Resulting document after update is larger than 16777216"),
    // BSONObjectTooLarge (10334) in later releases.
    assert!(f.code == 17419 || f.code == 10334, "{f:?}");
    let d = coll
        .find_one(doc! {"_id": 1})
        .projection(doc! {"t": 1})
        .await
        .unwrap()
        .unwrap();
    assert!(!d.contains_key("t"), "failed update was applied");
}

#[tokio::test]
async fn invalid_namespaces() {
    let srv = TestServer::start().await;
    expect_command_error_in(
        &srv.db(DB),
        doc! {"insert": "", "documents": [{"a": 1}]},
        &[(73, "InvalidNamespace")],
    )
    .await;
    let r = srv
        .db(DB)
        .run_command(doc! {"insert": "bad$name", "documents": [{"a": 1}]})
        .await;
    match r {
        Ok(reply) => {
            let we = reply
                .get_array("writeErrors")
                .unwrap_or_else(|_| panic!("insert into 'bad$name' succeeded: {reply}"));
            assert_eq!(num(we[0].as_document().unwrap(), "code"), 73, "{reply}");
        }
        Err(e) => {
            let f = compat_tests::failure(&e).unwrap_or_else(|| panic!("{e:?}"));
            assert_eq!(f.code, 73, "{f:?}");
        }
    }
}

#[tokio::test]
async fn documents_with_invalid_field_names_are_rejected_on_insert() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    // _id may not be an array or a regex.
    let r = db
        .run_command(doc! {"insert": "ids", "documents": [{"_id": [1, 2]}]})
        .await
        .unwrap();
    let we = r
        .get_array("writeErrors")
        .unwrap_or_else(|_| panic!("array _id accepted: {r}"));
    // Older servers: BadValue "can't use an array for _id"; newer: InvalidIdField.
    let code = num(we[0].as_document().unwrap(), "code");
    assert!(code == 2 || code == 53, "{r}");
    assert_eq!(num(&r, "n"), 0);
    assert_eq!(
        db.collection::<Document>("ids")
            .count_documents(doc! {})
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn get_more_on_unknown_cursor_is_cursor_not_found() {
    let srv = with_doc().await;
    expect_command_error(
        &srv.db(DB),
        doc! {"getMore": 987654321i64, "collection": "c"},
        43,
        "CursorNotFound",
    )
    .await;
}

#[tokio::test]
async fn server_answers_after_many_errors() {
    let srv = with_doc().await;
    let db = srv.db(DB);
    for _ in 0..50 {
        let _ = db.run_command(doc! {"find": 1}).await;
        let _ = db
            .run_command(doc! {"find": "c", "filter": {"$nope": 1}})
            .await;
    }
    db.run_command(doc! {"ping": 1}).await.unwrap();
    unchanged(&srv).await;
}
