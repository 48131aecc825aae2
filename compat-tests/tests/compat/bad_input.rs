//! Hostile and broken input on raw TCP connections (loopback only, bounded).
//! After each kind of abuse a fresh driver client must still `ping`.

use std::time::Duration;

use compat_tests::{
    bson::{doc, Document},
    wire::{self, Outcome},
    Rng, TestServer,
};
use tokio::{io::AsyncWriteExt, net::TcpStream};

/// A fresh client (new connection) must get an answer to ping.
async fn assert_alive(srv: &TestServer, after: &str) {
    let client = srv.new_client().await;
    let r = tokio::time::timeout(
        Duration::from_secs(15),
        client.database("admin").run_command(doc! {"ping": 1}),
    )
    .await;
    match r {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("server did not answer ping after {after}: {e}"),
        Err(_) => panic!("ping timed out after {after}"),
    }
}

fn ping_frame(id: i32) -> Vec<u8> {
    wire::op_msg(id, &doc! {"ping": 1, "$db": "admin"})
}

/// Either an error reply or a closed connection; never silence forever.
#[track_caller]
fn assert_rejected(outcome: &Outcome, what: &str) {
    match outcome {
        Outcome::Closed => {}
        Outcome::Reply { doc: Some(d), .. } => {
            let ok = d
                .get("ok")
                .and_then(|b| b.as_f64().or_else(|| b.as_i32().map(f64::from)));
            assert_eq!(ok, Some(0.0), "{what}: expected an error reply, got {d}");
        }
        Outcome::Reply { doc: None, .. } => {}
        Outcome::Silent => panic!("{what}: the server neither answered nor closed the connection"),
    }
}

#[tokio::test]
async fn random_bytes() {
    let srv = TestServer::start().await;
    let mut rng = Rng::new(0x5eed);
    for round in 0..40 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let n = 1 + rng.below(4096) as usize;
        let bytes = rng.bytes(n);
        let _ = s.write_all(&bytes).await;
        // Give the server a moment to chew, then hang up.
        let _ = wire::read_reply(&mut s, Duration::from_millis(50)).await;
        drop(s);
        if round % 10 == 9 {
            assert_alive(&srv, &format!("random bytes round {round}")).await;
        }
    }
    assert_alive(&srv, "random bytes").await;
}

#[tokio::test]
async fn random_bytes_behind_a_plausible_header() {
    let srv = TestServer::start().await;
    let mut rng = Rng::new(77);
    for _ in 0..40 {
        let body_len = 1 + rng.below(2000) as usize;
        let body = rng.bytes(body_len);
        let op = [wire::OP_MSG, wire::OP_QUERY, 2012, 1, 9999][rng.below(5) as usize];
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        assert!(wire::send(&mut s, &wire::frame(1, op, &body)).await);
        let outcome = wire::read_reply(&mut s, Duration::from_secs(10)).await;
        assert_rejected(&outcome, &format!("random body for op {op}"));
    }
    assert_alive(&srv, "random bodies").await;
}

#[tokio::test]
async fn truncated_frames() {
    let srv = TestServer::start().await;
    let frame = ping_frame(5);
    for cut in [1, 3, 4, 8, 15, 16, 17, 20, 21, frame.len() - 1] {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        assert!(wire::send(&mut s, &frame[..cut]).await);
        // Half-close: the server sees EOF in the middle of a frame.
        let _ = s.shutdown().await;
        let outcome = wire::read_reply(&mut s, Duration::from_secs(10)).await;
        assert!(
            !matches!(outcome, Outcome::Reply { doc: Some(ref d), .. } if d.get_f64("ok").ok() == Some(1.0)),
            "a truncated frame (cut at {cut}) was executed: {outcome:?}"
        );
        assert!(
            !matches!(outcome, Outcome::Silent),
            "cut at {cut}: connection left hanging after EOF"
        );
    }
    // Truncated and then simply abandoned.
    for cut in [2, 10, 19] {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        assert!(wire::send(&mut s, &frame[..cut]).await);
        drop(s);
    }
    assert_alive(&srv, "truncated frames").await;
}

#[tokio::test]
async fn header_claiming_one_gigabyte() {
    let srv = TestServer::start().await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let mut header = Vec::new();
    header.extend_from_slice(&(1i32 << 30).to_le_bytes());
    header.extend_from_slice(&1i32.to_le_bytes());
    header.extend_from_slice(&0i32.to_le_bytes());
    header.extend_from_slice(&wire::OP_MSG.to_le_bytes());
    header.extend_from_slice(&[0u8; 64]);
    assert!(wire::send(&mut s, &header).await);
    let outcome = wire::read_reply(&mut s, Duration::from_secs(10)).await;
    // Over maxMessageSizeBytes: rejected at once, before reading (or allocating) 1 GB.
    assert_rejected(&outcome, "1 GB header");
    assert_alive(&srv, "1 GB header").await;
}

#[tokio::test]
async fn header_lengths_that_cannot_be_right() {
    let srv = TestServer::start().await;
    for len in [-1i32, 0, 5, 15, i32::MIN, 48_000_001, i32::MAX] {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let mut header = Vec::new();
        header.extend_from_slice(&len.to_le_bytes());
        header.extend_from_slice(&1i32.to_le_bytes());
        header.extend_from_slice(&0i32.to_le_bytes());
        header.extend_from_slice(&wire::OP_MSG.to_le_bytes());
        assert!(wire::send(&mut s, &header).await);
        let outcome = wire::read_reply(&mut s, Duration::from_secs(10)).await;
        assert_rejected(&outcome, &format!("messageLength {len}"));
    }
    assert_alive(&srv, "impossible lengths").await;
}

#[tokio::test]
async fn op_msg_with_invalid_bson() {
    let srv = TestServer::start().await;
    let mut good = Vec::new();
    doc! {"insert": "c", "documents": [{"_id": 1}], "$db": "bad"}
        .to_writer(&mut good)
        .unwrap();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    // Declared document length larger than the section.
    let mut b = good.clone();
    b[0..4].copy_from_slice(&((good.len() as i32) + 100).to_le_bytes());
    cases.push(("doc length too large".into(), b));
    // Declared document length smaller than its content.
    let mut b = good.clone();
    b[0..4].copy_from_slice(&7i32.to_le_bytes());
    cases.push(("doc length too small".into(), b));
    // Missing terminating NUL.
    let mut b = good.clone();
    let last = b.len() - 1;
    b[last] = 0x42;
    cases.push(("no trailing NUL".into(), b));
    // Unknown element type.
    let mut b = good.clone();
    b[4] = 0x99;
    cases.push(("unknown element type".into(), b));
    // Field name without terminator running to the end.
    let mut b = good.clone();
    for x in b.iter_mut().skip(5) {
        *x = b'a';
    }
    cases.push(("unterminated key".into(), b));
    // Random garbage of a plausible length.
    let mut rng = Rng::new(9);
    for i in 0..10 {
        let mut b = rng.bytes(good.len());
        b[0..4].copy_from_slice(&(good.len() as i32).to_le_bytes());
        cases.push((format!("garbage {i}"), b));
    }
    for (what, bytes) in cases {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        assert!(wire::send(&mut s, &wire::op_msg_raw(2, &bytes)).await);
        let outcome = wire::read_reply(&mut s, Duration::from_secs(10)).await;
        assert_rejected(&outcome, &what);
    }
    let n = srv
        .db("bad")
        .collection::<Document>("c")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(n, 0, "a malformed insert wrote something");
    assert_alive(&srv, "invalid BSON").await;
}

#[tokio::test]
async fn op_msg_flag_and_section_abuse() {
    let srv = TestServer::start().await;
    let mut cmd = Vec::new();
    doc! {"ping": 1, "$db": "admin"}
        .to_writer(&mut cmd)
        .unwrap();
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // Unknown required flag bit (bits 0-15 must be understood).
    let mut body = 0x0000_0004u32.to_le_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&cmd);
    cases.push(("unknown required flag", body));
    // checksumPresent with a wrong checksum.
    let mut body = 0x0000_0001u32.to_le_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&cmd);
    body.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    cases.push(("bad checksum", body));
    // Unknown section kind.
    let mut body = 0u32.to_le_bytes().to_vec();
    body.push(7);
    body.extend_from_slice(&cmd);
    cases.push(("section kind 7", body));
    // No body section at all.
    cases.push(("flags only", 0u32.to_le_bytes().to_vec()));
    // Two body sections.
    let mut body = 0u32.to_le_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&cmd);
    body.push(0);
    body.extend_from_slice(&cmd);
    cases.push(("two kind-0 sections", body));
    // Kind-1 sequence whose size overruns the message.
    let mut body = 0u32.to_le_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&cmd);
    body.push(1);
    body.extend_from_slice(&100_000i32.to_le_bytes());
    body.extend_from_slice(b"documents\0");
    cases.push(("overrunning sequence", body));
    for (what, body) in cases {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        assert!(wire::send(&mut s, &wire::frame(4, wire::OP_MSG, &body)).await);
        let outcome = wire::read_reply(&mut s, Duration::from_secs(10)).await;
        assert_rejected(&outcome, what);
    }
    assert_alive(&srv, "OP_MSG abuse").await;
}

#[tokio::test]
async fn deeply_nested_documents_do_not_crash_the_server() {
    let srv = TestServer::start().await;
    // Hand-build {a: {a: {a: ... }}} 20,000 levels deep (valid BSON).
    let depth = 20_000usize;
    let mut inner: Vec<u8> = vec![5, 0, 0, 0, 0];
    for _ in 0..depth {
        let mut d = Vec::with_capacity(inner.len() + 8);
        let len = 4 + 1 + 2 + inner.len() + 1;
        d.extend_from_slice(&(len as i32).to_le_bytes());
        d.push(0x03);
        d.extend_from_slice(b"a\0");
        d.extend_from_slice(&inner);
        d.push(0);
        inner = d;
    }
    // As a filter in a find command: {find: "c", filter: <deep>, $db: "deep"}.
    let mut cmd = Vec::new();
    let mut elems = Vec::new();
    elems.push(0x02);
    elems.extend_from_slice(b"find\0");
    elems.extend_from_slice(&2i32.to_le_bytes());
    elems.extend_from_slice(b"c\0");
    elems.push(0x03);
    elems.extend_from_slice(b"filter\0");
    elems.extend_from_slice(&inner);
    elems.push(0x02);
    elems.extend_from_slice(b"$db\0");
    elems.extend_from_slice(&5i32.to_le_bytes());
    elems.extend_from_slice(b"deep\0");
    cmd.extend_from_slice(&((4 + elems.len() + 1) as i32).to_le_bytes());
    cmd.extend_from_slice(&elems);
    cmd.push(0);
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    assert!(wire::send(&mut s, &wire::op_msg_raw(6, &cmd)).await);
    let outcome = wire::read_reply(&mut s, Duration::from_secs(20)).await;
    assert!(
        !matches!(outcome, Outcome::Silent),
        "no answer to a deeply nested filter"
    );
    assert_alive(&srv, "deep filter").await;

    // And as a document to insert.
    let mut cmd = Vec::new();
    let mut elems = Vec::new();
    elems.push(0x02);
    elems.extend_from_slice(b"insert\0");
    elems.extend_from_slice(&2i32.to_le_bytes());
    elems.extend_from_slice(b"c\0");
    elems.push(0x04);
    elems.extend_from_slice(b"documents\0");
    let mut arr = Vec::new();
    arr.push(0x03);
    arr.extend_from_slice(b"0\0");
    arr.extend_from_slice(&inner);
    let mut arr_doc = Vec::new();
    arr_doc.extend_from_slice(&((4 + arr.len() + 1) as i32).to_le_bytes());
    arr_doc.extend_from_slice(&arr);
    arr_doc.push(0);
    elems.extend_from_slice(&arr_doc);
    elems.push(0x02);
    elems.extend_from_slice(b"$db\0");
    elems.extend_from_slice(&5i32.to_le_bytes());
    elems.extend_from_slice(b"deep\0");
    cmd.extend_from_slice(&((4 + elems.len() + 1) as i32).to_le_bytes());
    cmd.extend_from_slice(&elems);
    cmd.push(0);
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    assert!(wire::send(&mut s, &wire::op_msg_raw(7, &cmd)).await);
    let outcome = wire::read_reply(&mut s, Duration::from_secs(20)).await;
    assert!(
        !matches!(outcome, Outcome::Silent),
        "no answer to a deeply nested insert"
    );
    assert_alive(&srv, "deep insert").await;
}

#[tokio::test]
async fn a_thousand_connections_opened_and_dropped() {
    let srv = TestServer::start().await;
    let addr = srv.addr;
    let mut total = 0;
    for wave in 0..10 {
        let mut tasks = Vec::new();
        for i in 0..100 {
            tasks.push(tokio::spawn(async move {
                let Ok(mut s) = TcpStream::connect(addr).await else {
                    return false;
                };
                match i % 4 {
                    // Just connect and go.
                    0 => {}
                    // Half a header.
                    1 => {
                        let _ = s.write_all(&[0x20, 0, 0]).await;
                    }
                    // A full ping, not waiting for the answer.
                    2 => {
                        let _ = s.write_all(&ping_frame(i)).await;
                    }
                    // A ping and its answer.
                    _ => {
                        let _ = s.write_all(&ping_frame(i)).await;
                        let _ = wire::read_reply(&mut s, Duration::from_secs(10)).await;
                    }
                }
                true
            }));
        }
        for t in tasks {
            if t.await.unwrap() {
                total += 1;
            }
        }
        if wave % 5 == 4 {
            assert_alive(&srv, &format!("connection wave {wave}")).await;
        }
    }
    assert!(
        total >= 990,
        "only {total} of 1000 connections were accepted"
    );
    assert_alive(&srv, "1000 dropped connections").await;

    // Dropped connections are cleaned up: the count of open connections falls back.
    let mut current = i64::MAX;
    for _ in 0..100 {
        let status = srv
            .db("admin")
            .run_command(doc! {"serverStatus": 1})
            .await
            .unwrap();
        current = compat_tests::num(status.get_document("connections").unwrap(), "current");
        if current < 50 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        current < 50,
        "{current} connections still open long after the clients left"
    );
}

#[tokio::test]
async fn pipelined_requests_on_one_connection_are_all_answered() {
    let srv = TestServer::start().await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let mut bytes = Vec::new();
    for i in 0..50 {
        bytes.extend_from_slice(&ping_frame(100 + i));
    }
    assert!(wire::send(&mut s, &bytes).await);
    for i in 0..50 {
        match wire::read_reply(&mut s, Duration::from_secs(10)).await {
            Outcome::Reply { doc: Some(d), .. } => {
                assert_eq!(
                    d.get("ok")
                        .and_then(|b| b.as_f64().or_else(|| b.as_i32().map(f64::from))),
                    Some(1.0),
                    "{d}"
                )
            }
            other => panic!("reply {i} of 50 missing: {other:?}"),
        }
    }
}
