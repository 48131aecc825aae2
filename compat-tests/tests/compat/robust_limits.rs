//! No single request may run past its time limit, keep running after its
//! client left, hold a connection open by trickling bytes, or store what
//! MongoDB refuses. Each test ends by checking the server still answers
//! `ping` and that its memory did not grow by 100 MB or more.

use std::time::{Duration, Instant};

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    expect_command_error, expect_failure,
    wire::{self, Outcome, RawConn},
    TestServer,
};
use tokio::net::TcpStream;

/// The server's resident memory, in bytes (Linux).
fn rss(srv: &TestServer) -> u64 {
    let pid = srv.pid().expect("server running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmRSS in /proc/<pid>/status")
}

/// CPU time the server has used so far (user + system), in clock ticks
/// (1/100 s on Linux).
fn cpu_ticks(srv: &TestServer) -> u64 {
    let pid = srv.pid().expect("server running");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A fresh client (new connection) gets an answer to `ping`, and memory
/// grew by less than 100 MB since `rss_before`.
async fn assert_healthy(srv: &TestServer, rss_before: u64, after: &str) {
    let client = srv.new_client().await;
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(15),
        client.database("admin").run_command(doc! {"ping": 1}),
    )
    .await;
    match r {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("no ping after {after}: {e}"),
        Err(_) => panic!("ping timed out after {after}"),
    }
    let grew = rss(srv).saturating_sub(rss_before);
    assert!(
        grew < 100 << 20,
        "RSS grew by {} MB after {after}",
        grew >> 20
    );
    eprintln!(
        "{after}: ping in {:?}, RSS grew {} MB",
        started.elapsed(),
        grew >> 20
    );
}

/// `$reduce` over `inner` numbers for each of `outer` numbers: many
/// seconds of work on one document.
fn busy_expression(outer: i32, inner: i32) -> Document {
    doc! {"$map": {
        "input": {"$range": [0, outer]},
        "as": "i",
        "in": {"$reduce": {
            "input": {"$range": [0, inner]},
            "initialValue": 0,
            "in": {"$add": ["$$value", "$$this"]},
        }},
    }}
}

/// A sharded collection of `n` small documents over 4 partitions.
async fn sharded_collection(srv: &TestServer, ns: &str, n: i32) {
    let reply = srv
        .db("admin")
        .run_command(doc! {"shardCollection": ns, "key": {"k": "hashed"}, "numInitialChunks": 4})
        .await
        .expect("shardCollection");
    assert_ok(&reply);
    let (db, coll) = ns.split_once('.').unwrap();
    let docs: Vec<Document> = (0..n).map(|i| doc! {"_id": i, "k": i}).collect();
    srv.db(db)
        .collection::<Document>(coll)
        .insert_many(docs)
        .await
        .expect("insert");
}

#[tokio::test]
async fn max_time_ms_stops_a_long_pipeline_with_50() {
    let srv = TestServer::start().await;
    let before = rss(&srv);
    // One document, one expression: nothing between stream items to
    // check the clock at.
    let started = Instant::now();
    expect_command_error(
        &srv.db("admin"),
        doc! {
            "aggregate": 1,
            "pipeline": [
                {"$documents": [{"a": 1}]},
                {"$project": {"x": busy_expression(30_000, 10_000)}},
            ],
            "cursor": {},
            "maxTimeMS": 500,
        },
        50,
        "MaxTimeMSExpired",
    )
    .await;
    let took = started.elapsed();
    eprintln!("collection-less pipeline stopped after {took:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");

    // The same over a sharded collection: the partitions' pool threads
    // stop too.
    sharded_collection(&srv, "mt.c", 2000).await;
    let started = Instant::now();
    expect_command_error(
        &srv.db("mt"),
        doc! {
            "aggregate": "c",
            "pipeline": [{"$project": {"x": busy_expression(100, 10_000)}}],
            "cursor": {},
            "maxTimeMS": 500,
        },
        50,
        "MaxTimeMSExpired",
    )
    .await;
    let took = started.elapsed();
    eprintln!("sharded pipeline stopped after {took:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");

    // A sort over a heavy computed key, then a group.
    let started = Instant::now();
    expect_command_error(
        &srv.db("mt"),
        doc! {
            "aggregate": "c",
            "pipeline": [
                {"$group": {"_id": "$k", "s": {"$sum": {"$size": busy_expression(50, 10_000)}}}},
                {"$sort": {"s": 1}},
            ],
            "cursor": {},
            "maxTimeMS": 500,
        },
        50,
        "MaxTimeMSExpired",
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_healthy(&srv, before, "maxTimeMS").await;
}

#[tokio::test]
async fn a_client_that_disconnects_mid_query_leaves_the_server_idle() {
    let srv = TestServer::start().await;
    sharded_collection(&srv, "dc.c", 2000).await;
    let before = rss(&srv);
    for (db, cmd) in [
        (
            "admin",
            doc! {
                "aggregate": 1,
                "pipeline": [
                    {"$documents": [{"a": 1}]},
                    {"$project": {"x": busy_expression(30_000, 10_000)}},
                ],
                "cursor": {},
            },
        ),
        (
            "dc",
            doc! {
                "aggregate": "c",
                "pipeline": [{"$project": {"x": busy_expression(200, 10_000)}}],
                "cursor": {},
            },
        ),
    ] {
        let mut conn = RawConn::connect(srv.addr).await;
        let mut cmd = cmd.clone();
        cmd.insert("$db", db);
        assert!(wire::send(&mut conn.stream, &wire::op_msg(7, &cmd)).await);
        // Let it get going, then hang up.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let busy_from = cpu_ticks(&srv);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let busy = cpu_ticks(&srv) - busy_from;
        drop(conn);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let idle_from = cpu_ticks(&srv);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let idle = cpu_ticks(&srv) - idle_from;
        eprintln!("{db}: CPU ticks in 0.5 s while running {busy}, in 1 s after hanging up {idle}");
        assert!(
            busy >= 10,
            "the query did not keep the server busy: {busy} ticks"
        );
        assert!(
            idle <= 20,
            "work went on after the client left: {idle} ticks in 1 s"
        );
    }
    assert_healthy(&srv, before, "disconnect").await;
}

#[tokio::test]
async fn connections_over_the_limit_get_an_error_and_are_closed() {
    // Room for the test's own clients: each keeps two monitoring
    // connections (the streaming hello and the round-trip timer) beside
    // its pool, as drivers do against MongoDB 4.4 and later.
    let srv = TestServer::start_with_args(&["--max-connections", "10"]).await;
    let before = rss(&srv);
    let mut held = Vec::new();
    let mut refused = None;
    for i in 0..20 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let ping = wire::op_msg(i, &doc! {"ping": 1, "$db": "admin"});
        assert!(wire::send(&mut s, &ping).await);
        match wire::read_reply(&mut s, Duration::from_secs(5)).await {
            Outcome::Reply { doc: Some(d), .. } if d.get_f64("ok") == Ok(1.0) => held.push(s),
            Outcome::Reply { doc: Some(d), .. } => {
                refused = Some(d);
                break;
            }
            Outcome::Silent => panic!("connection {i} over the limit was never answered"),
            other => panic!("connection {i}: unexpected {other:?}"),
        }
    }
    let refused = refused.expect("no connection was refused");
    assert_eq!(refused.get_i32("code"), Ok(6), "{refused}");
    assert!(refused
        .get_str("errmsg")
        .unwrap()
        .contains("too many open connections"));
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(srv
        .log()
        .contains("connection refused because too many open connections"));
    assert_healthy(&srv, before, "connections over the limit").await;
}

#[tokio::test]
async fn a_partial_message_is_cut_off_but_an_idle_client_is_not() {
    let srv = TestServer::start_with_args(&["--partial-message-timeout-secs", "1"]).await;
    let before = rss(&srv);
    let ping = wire::op_msg(1, &doc! {"ping": 1, "$db": "admin"});

    let mut idle = TcpStream::connect(srv.addr).await.unwrap();
    let mut partial = TcpStream::connect(srv.addr).await.unwrap();
    let started = Instant::now();
    assert!(wire::send(&mut partial, &ping[..10]).await);
    let outcome = wire::read_reply(&mut partial, Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert!(matches!(outcome, Outcome::Closed), "{outcome:?}");
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
    eprintln!("partial message cut off after {took:?}");

    // Silent for longer than the limit, then a whole message: answered.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(wire::send(&mut idle, &ping).await);
    match wire::read_reply(&mut idle, Duration::from_secs(5)).await {
        Outcome::Reply { doc: Some(d), .. } => assert_eq!(d.get_f64("ok"), Ok(1.0), "{d}"),
        other => panic!("idle client not answered: {other:?}"),
    }
    // A message split in two parts arriving within the limit is fine.
    assert!(wire::send(&mut idle, &ping[..10]).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(wire::send(&mut idle, &ping[10..]).await);
    match wire::read_reply(&mut idle, Duration::from_secs(5)).await {
        Outcome::Reply { doc: Some(d), .. } => assert_eq!(d.get_f64("ok"), Ok(1.0), "{d}"),
        other => panic!("split message not answered: {other:?}"),
    }
    assert_healthy(&srv, before, "partial message").await;
}

#[tokio::test]
async fn invalid_write_concerns_are_refused_with_mongodb_codes() {
    let srv = TestServer::start().await;
    let before = rss(&srv);
    let db = srv.db("wc");
    let cases: Vec<(Bson, i32, &str)> = vec![
        (doc! {"w": -1}.into(), 9, "FailedToParse"),
        (doc! {"w": 1000}.into(), 9, "FailedToParse"),
        (doc! {"w": f64::NAN}.into(), 9, "FailedToParse"),
        (doc! {"w": {}}.into(), 9, "FailedToParse"),
        (doc! {"w": true}.into(), 9, "FailedToParse"),
        (doc! {"j": "x"}.into(), 14, "TypeMismatch"),
        (doc! {"j": true, "fsync": true}.into(), 9, "FailedToParse"),
        (doc! {"frobnicate": 1}.into(), 40415, "Location40415"),
        (Bson::String("majority".into()), 14, "TypeMismatch"),
    ];
    for (wc, code, name) in &cases {
        expect_command_error(
            &db,
            doc! {"insert": "c", "documents": [{"_id": 1}], "writeConcern": wc.clone()},
            *code,
            name,
        )
        .await;
        expect_command_error(
            &db,
            doc! {"update": "c", "updates": [{"q": {}, "u": {"$set": {"a": 1}}, "upsert": true}],
            "writeConcern": wc.clone()},
            *code,
            name,
        )
        .await;
        expect_command_error(
            &db,
            doc! {"create": "other", "writeConcern": wc.clone()},
            *code,
            name,
        )
        .await;
    }
    // Nothing was written.
    let names = db.list_collection_names().await.unwrap();
    assert!(names.is_empty(), "{names:?}");

    // Well-formed but unsatisfiable on one node: written, and said so.
    let mut raw = RawConn::connect(srv.addr).await;
    let reply = raw
        .command(
            "wc",
            doc! {"insert": "c", "documents": [{"_id": 2}], "writeConcern": {"w": 2}},
        )
        .await;
    assert_eq!(reply.get_i32("n"), Ok(1), "{reply}");
    let wce = reply
        .get_document("writeConcernError")
        .expect("writeConcernError");
    assert_eq!(wce.get_i32("code"), Ok(100), "{reply}");
    let reply = raw
        .command(
            "wc",
            doc! {"insert": "c", "documents": [{"_id": 3}], "writeConcern": {"w": "dc-east"}},
        )
        .await;
    let wce = reply
        .get_document("writeConcernError")
        .expect("writeConcernError");
    assert_eq!(wce.get_i32("code"), Ok(79), "{reply}");
    let reply = raw
        .command(
            "wc",
            doc! {"insert": "c", "documents": [{"_id": 4}],
            "writeConcern": {"w": "majority", "j": true, "wtimeout": 1000}},
        )
        .await;
    assert!(!reply.contains_key("writeConcernError"), "{reply}");
    assert_eq!(
        db.collection::<Document>("c")
            .count_documents(doc! {})
            .await
            .unwrap(),
        3
    );
    assert_healthy(&srv, before, "write concerns").await;
}

/// `{a: {a: … {a: 1}}}`, `depth` documents deep counting itself.
fn nested(depth: usize) -> Document {
    let mut d = doc! {"a": 1};
    for _ in 1..depth {
        d = doc! {"a": d};
    }
    d
}

#[tokio::test]
async fn stored_documents_nest_at_most_a_hundred_levels() {
    let srv = TestServer::start().await;
    let before = rss(&srv);
    let c = srv.db("nest").collection::<Document>("c");
    let mut ok = nested(100);
    ok.insert("_id", 1);
    c.insert_one(ok).await.expect("100 levels are stored");
    let mut deep = nested(101);
    deep.insert("_id", 2);
    expect_failure(c.insert_one(deep).await, 15, "Overflow");
    // An update whose result would be 101 levels deep.
    expect_failure(
        c.update_one(doc! {"_id": 1}, doc! {"$set": {"b": nested(100)}})
            .await,
        15,
        "Overflow",
    );
    expect_failure(
        c.replace_one(doc! {"_id": 1}, doc! {"b": nested(100)})
            .await,
        15,
        "Overflow",
    );
    expect_failure(
        c.find_one_and_update(doc! {"_id": 1}, doc! {"$set": {"b": nested(100)}})
            .await,
        15,
        "Overflow",
    );
    // A pipeline update builds it from an expression.
    expect_failure(
        c.update_one(
            doc! {"_id": 1},
            vec![doc! {"$set": {"b": {"$literal": nested(100)}}}],
        )
        .await,
        15,
        "Overflow",
    );
    // 99 levels under the top: still fine.
    c.update_one(doc! {"_id": 1}, doc! {"$set": {"b": nested(99)}})
        .await
        .expect("100 levels after the update");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);
    assert_healthy(&srv, before, "nesting").await;
}

#[cfg(unix)]
#[tokio::test]
async fn data_files_are_private_to_the_server_user() {
    use std::os::unix::fs::PermissionsExt;
    let srv = TestServer::start().await;
    let before = rss(&srv);
    let c = srv.db("perm").collection::<Document>("c");
    c.insert_many((0..100).map(|i| doc! {"_id": i, "secret": "value"}))
        .await
        .unwrap();
    let mut pending = vec![srv.data_dir()];
    let mut files = 0;
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            assert_eq!(mode, 0o700, "{} is {mode:o}", path.display());
            pending.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if meta.is_file() {
            files += 1;
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
        }
    }
    assert!(files > 0, "no data files");
    assert_healthy(&srv, before, "file modes").await;
}

#[tokio::test]
async fn connections_over_the_per_address_limit_get_an_error_and_others_are_served() {
    let srv = TestServer::start_with_args(&["--max-connections-per-address", "10"]).await;
    let before = rss(&srv);
    let mut held = Vec::new();
    let mut refused = None;
    for i in 0..20 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let ping = wire::op_msg(i, &doc! {"ping": 1, "$db": "admin"});
        assert!(wire::send(&mut s, &ping).await);
        match wire::read_reply(&mut s, Duration::from_secs(5)).await {
            Outcome::Reply { doc: Some(d), .. } if d.get_f64("ok") == Ok(1.0) => held.push(s),
            Outcome::Reply { doc: Some(d), .. } => {
                refused = Some(d);
                break;
            }
            other => panic!("connection {i}: unexpected {other:?}"),
        }
    }
    let refused = refused.expect("no connection was refused");
    assert_eq!(refused.get_i32("code"), Ok(6), "{refused}");
    assert!(
        refused
            .get_str("errmsg")
            .unwrap()
            .contains("too many open connections from 127.0.0.1: 10"),
        "{refused}"
    );
    // Another address is served while this one is full.
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = other.connect(srv.addr).await.unwrap();
    assert!(
        wire::send(
            &mut other,
            &wire::op_msg(99, &doc! {"ping": 1, "$db": "admin"})
        )
        .await
    );
    match wire::read_reply(&mut other, Duration::from_secs(5)).await {
        Outcome::Reply { doc: Some(d), .. } => assert_eq!(d.get_f64("ok"), Ok(1.0), "{d}"),
        other => panic!("another address was not served: {other:?}"),
    }
    // Closed connections make room again.
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(srv
        .log()
        .contains("too many open connections from 127.0.0.1"));
    assert_healthy(&srv, before, "connections over the per-address limit").await;
}

#[tokio::test]
async fn a_client_that_never_reads_holds_one_reply_and_is_cut_off() {
    let srv = TestServer::start_with_args(&["--reply-timeout-secs", "3"]).await;
    let coll = srv.db("limits").collection::<Document>("big");
    let big = "x".repeat(1 << 20);
    let docs: Vec<Document> = (0..12)
        .map(|i| doc! {"_id": i, "s": big.as_str()})
        .collect();
    coll.insert_many(docs).await.unwrap();
    let before = rss(&srv);

    // 400 finds of 12 MB each, sent at once and never read: 4.8 GB of
    // replies if the server queued them.
    let mut greedy = TcpStream::connect(srv.addr).await.unwrap();
    let mut requests = Vec::new();
    for i in 0..400 {
        let find = doc! {"find": "big", "batchSize": 100, "$db": "limits"};
        requests.extend(wire::op_msg(i, &find));
    }
    assert!(wire::send(&mut greedy, &requests).await);
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < Duration::from_secs(2) {
        peak = peak.max(rss(&srv).saturating_sub(before));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Others are served meanwhile.
    assert_ok(&srv.db("admin").run_command(doc! {"ping": 1}).await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !srv.log().contains("reply unread after") {
        assert!(Instant::now() < deadline, "never cut off:\n{}", srv.log());
        peak = peak.max(rss(&srv).saturating_sub(before));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("RSS peak growth while stalled: {} MB", peak >> 20);
    assert!(peak < 100 << 20, "RSS grew by {} MB", peak >> 20);
    // What was sent is still there to read, then the end.
    let mut sink = vec![0u8; 1 << 20];
    let mut total = 0usize;
    loop {
        use tokio::io::AsyncReadExt;
        match tokio::time::timeout(Duration::from_secs(5), greedy.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => total += n,
            Err(_) => panic!("the connection was not closed"),
        }
    }
    assert!(total < 100 << 20, "{} MB were sent", total >> 20);
    assert_healthy(&srv, before, "a client that never reads").await;
}

#[tokio::test]
async fn regular_expressions_are_bounded_in_length_and_compiled_size() {
    let srv = TestServer::start().await;
    let before = rss(&srv);
    let db = srv.db("limits");
    let coll = db.collection::<Document>("text");
    coll.insert_one(doc! {"_id": 1, "s": "a".repeat(40000)})
        .await
        .unwrap();
    let longest = "a".repeat(32764);
    let found = coll
        .count_documents(doc! {"s": compat_tests::regex(&longest, "")})
        .await
        .unwrap();
    assert_eq!(found, 1);
    let too_long = "a".repeat(32765);
    let f = expect_command_error(
        &db,
        doc! {"find": "text", "filter": {"s": compat_tests::regex(&too_long, "")}},
        2,
        "BadValue",
    )
    .await;
    assert_eq!(f.message, "Regular expression is too long");
    let f = expect_command_error(
        &db,
        doc! {"find": "text", "filter": {"s": {"$regex": too_long.as_str()}}},
        2,
        "BadValue",
    )
    .await;
    assert_eq!(f.message, "Regular expression is too long");
    // A short pattern that would compile into gigabytes.
    let huge = r"(\w{500}){500}";
    expect_command_error(
        &db,
        doc! {"find": "text", "filter": {"s": {"$regex": huge}}},
        51091,
        "Location51091",
    )
    .await;
    for op in ["$regexMatch", "$regexFind", "$regexFindAll"] {
        for pattern in [too_long.as_str(), huge] {
            let f = expect_command_error(
                &db,
                doc! {"aggregate": "text", "cursor": {}, "pipeline": [
                    {"$project": {"m": {op: {"input": "$s", "regex": pattern}}}}
                ]},
                51111,
                "Location51111",
            )
            .await;
            assert!(
                f.message.starts_with(&format!("Invalid Regex in {op}")),
                "{f:?}"
            );
        }
    }
    assert_healthy(&srv, before, "oversized regular expressions").await;
}
