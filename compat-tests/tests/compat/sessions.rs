//! Sessions: lsid / txnNumber / $clusterTime are accepted, replies carry
//! operationTime and $clusterTime, and a transaction is never silently run
//! as separate non-transactional writes.

use compat_tests::{
    assert_ok,
    bson::{doc, spec::BinarySubtype, Binary, Bson, Document},
    num, numf,
    wire::RawConn,
    TestServer,
};

fn lsid() -> Document {
    let bytes: Vec<u8> = (0..16u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(11))
        .collect();
    doc! {"id": Binary {subtype: BinarySubtype::Uuid, bytes}}
}

#[track_caller]
fn assert_cluster_time(reply: &Document) {
    assert!(
        reply.get_timestamp("operationTime").is_ok(),
        "operationTime missing: {reply}"
    );
    let ct = reply
        .get_document("$clusterTime")
        .unwrap_or_else(|_| panic!("$clusterTime missing: {reply}"));
    assert!(ct.get_timestamp("clusterTime").is_ok(), "{reply}");
    let sig = ct
        .get_document("signature")
        .unwrap_or_else(|_| panic!("signature missing: {reply}"));
    assert!(matches!(sig.get("hash"), Some(Bson::Binary(_))), "{reply}");
    assert!(sig.contains_key("keyId"), "{reply}");
}

#[tokio::test]
async fn replies_carry_operation_time_and_cluster_time() {
    let srv = TestServer::start().await;
    let db = srv.db("s");
    let reply = db
        .run_command(doc! {"insert": "c", "documents": [{"_id": 1}]})
        .await
        .unwrap();
    assert_cluster_time(&reply);
    let reply = db
        .run_command(doc! {"find": "c", "filter": {}})
        .await
        .unwrap();
    assert_cluster_time(&reply);
    let reply = db.run_command(doc! {"ping": 1}).await.unwrap();
    assert!(reply.contains_key("$clusterTime"), "{reply}");
}

#[tokio::test]
async fn cluster_time_does_not_go_backwards() {
    let srv = TestServer::start().await;
    let db = srv.db("s");
    let mut last = None;
    for i in 0..20 {
        let reply = db
            .run_command(doc! {"insert": "c", "documents": [{"_id": i}]})
            .await
            .unwrap();
        let t = reply
            .get_document("$clusterTime")
            .unwrap()
            .get_timestamp("clusterTime")
            .unwrap();
        let t = (t.time, t.increment);
        if let Some(prev) = last {
            assert!(t >= prev, "clusterTime went backwards: {prev:?} -> {t:?}");
        }
        last = Some(t);
    }
}

#[tokio::test]
async fn explicit_lsid_txn_number_and_cluster_time_are_accepted() {
    // Raw connection: the driver would add its own lsid and $clusterTime.
    let srv = TestServer::start().await;
    let mut c = RawConn::connect(srv.addr).await;
    let first = c.command("s", doc! {"ping": 1}).await;
    let cluster_time = first
        .get_document("$clusterTime")
        .unwrap_or_else(|_| panic!("{first}"))
        .clone();
    let reply = c
        .command(
            "s",
            doc! {
                "insert": "c",
                "documents": [{"_id": "a"}],
                "lsid": lsid(),
                "txnNumber": 1i64,
                "$clusterTime": cluster_time.clone(),
            },
        )
        .await;
    assert_ok(&reply);
    assert_eq!(num(&reply, "n"), 1, "{reply}");
    assert_cluster_time(&reply);
    let reply = c
        .command(
            "s",
            doc! {
                "find": "c", "filter": {"_id": "a"}, "lsid": lsid(), "$clusterTime": cluster_time,
                "readConcern": {"level": "local"},
            },
        )
        .await;
    assert_ok(&reply);
    assert_eq!(compat_tests::first_batch(&reply).len(), 1, "{reply}");
}

#[tokio::test]
async fn retried_write_with_same_txn_number_is_not_applied_twice() {
    // Retryable writes: the same (lsid, txnNumber) statement sent again
    // returns the first result instead of executing again.
    let srv = TestServer::start().await;
    let mut c = RawConn::connect(srv.addr).await;
    let cmd =
        doc! {"insert": "retry", "documents": [{"_id": 1}], "lsid": lsid(), "txnNumber": 7i64};
    let first = c.command("s", cmd.clone()).await;
    assert_eq!(num(&first, "n"), 1, "{first}");
    let again = c.command("s", cmd).await;
    assert_ok(&again);
    assert_eq!(
        num(&again, "n"),
        1,
        "retry should report the original result: {again}"
    );
    assert!(
        !again.contains_key("writeErrors"),
        "retry re-executed the insert: {again}"
    );

    let inc = doc! {"update": "retry", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}], "lsid": lsid(), "txnNumber": 8i64};
    assert_ok(&c.command("s", inc.clone()).await);
    assert_ok(&c.command("s", inc).await);
    let d = srv
        .db("s")
        .collection::<Document>("retry")
        .find_one(doc! {"_id": 1})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        d.get_i32("n").ok(),
        Some(1),
        "retried $inc applied twice: {d}"
    );
}

#[tokio::test]
async fn driver_sessions_and_causal_consistency_work() {
    let srv = TestServer::start().await;
    let coll = srv.db("s").collection::<Document>("causal");
    let mut session = srv
        .client
        .start_session()
        .causal_consistency(true)
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": 1})
        .session(&mut session)
        .await
        .unwrap();
    let got = coll
        .find_one(doc! {"_id": 1})
        .session(&mut session)
        .await
        .unwrap();
    assert_eq!(got, Some(doc! {"_id": 1}));
    assert!(
        session.operation_time().is_some(),
        "driver saw no operationTime"
    );
    assert!(
        session.cluster_time().is_some(),
        "driver saw no $clusterTime"
    );
}

#[tokio::test]
async fn transaction_is_either_real_or_refused_never_silent() {
    let srv = TestServer::start().await;
    let coll = srv.db("s").collection::<Document>("txn");
    coll.insert_one(doc! {"_id": "seed"}).await.unwrap();

    let mut session = srv.client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    let r = coll
        .insert_one(doc! {"_id": "in-txn"})
        .session(&mut session)
        .await;
    match r {
        Ok(_) => {
            // Transactions are supported: an abort must discard the write.
            session.abort_transaction().await.unwrap();
            let found = coll.find_one(doc! {"_id": "in-txn"}).await.unwrap();
            assert_eq!(
                found, None,
                "aborted transaction's write is visible: it was not transactional"
            );
        }
        Err(e) => {
            let f = compat_tests::failure(&e).unwrap_or_else(|| {
                panic!("expected a server error refusing the transaction, got {e:?}")
            });
            assert_ne!(f.code, 0, "{f:?}");
            assert!(!f.message.is_empty(), "{f:?}");
            assert!(
                f.message.to_lowercase().contains("transaction"),
                "the error should say transactions are the problem: {f:?}"
            );
            let _ = session.abort_transaction().await;
            let found = coll.find_one(doc! {"_id": "in-txn"}).await.unwrap();
            assert_eq!(found, None, "refused transaction still wrote the document");
        }
    }
    // The server is still fine, and so is the collection.
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test]
async fn raw_autocommit_false_is_never_a_silent_write() {
    let srv = TestServer::start().await;
    let mut c = RawConn::connect(srv.addr).await;
    let reply = c
        .command(
            "s",
            doc! {
                "insert": "rawtxn", "documents": [{"_id": 1}],
                "lsid": lsid(), "txnNumber": 1i64, "autocommit": false, "startTransaction": true,
            },
        )
        .await;
    let coll = srv.db("s").collection::<Document>("rawtxn");
    if numf(&reply, "ok") == 1.0 {
        assert_eq!(num(&reply, "n"), 1, "{reply}");
        // A real transaction: the write is invisible outside until commit,
        // and abort discards it.
        let outside = coll.find_one(doc! {"_id": 1}).await.unwrap();
        assert_eq!(
            outside, None,
            "uncommitted transactional write visible outside the transaction"
        );
        let abort = c
            .command("admin", doc! {"abortTransaction": 1, "lsid": lsid(), "txnNumber": 1i64, "autocommit": false})
            .await;
        assert_ok(&abort);
    } else {
        assert_ne!(num(&reply, "code"), 0, "{reply}");
        assert!(
            reply
                .get_str("errmsg")
                .map(|m| !m.is_empty())
                .unwrap_or(false),
            "{reply}"
        );
        assert!(reply.get_str("codeName").is_ok(), "{reply}");
    }
    let after = coll.find_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(
        after, None,
        "transactional write became visible without a commit"
    );
}

#[tokio::test]
async fn end_sessions_after_use() {
    let srv = TestServer::start().await;
    let mut c = RawConn::connect(srv.addr).await;
    assert_ok(
        &c.command(
            "s",
            doc! {"insert": "c", "documents": [{"_id": 1}], "lsid": lsid()},
        )
        .await,
    );
    assert_ok(&c.command("admin", doc! {"endSessions": [lsid()]}).await);
    // The session id can be used again afterwards (a new server-side session).
    assert_ok(&c.command("s", doc! {"find": "c", "lsid": lsid()}).await);
}
