//! The streaming `hello` that drivers' server monitors use: every reply
//! carries a `topologyVersion`; a `hello` that sends it back with
//! `maxAwaitTimeMS` waits that long for a topology change, and with
//! OP_MSG's `exhaustAllowed` the server keeps replying unasked, each
//! reply flagged `moreToCome` and answering the one before it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use compat_tests::bson::{doc, oid::ObjectId, Bson, Document};
use compat_tests::mongodb::event::sdam::SdamEvent;
use compat_tests::mongodb::event::EventHandler;
use compat_tests::{num, wire, TestServer};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const MORE_TO_COME: u32 = 1 << 1;
const EXHAUST_ALLOWED: u32 = 1 << 16;

/// One OP_MSG reply with its header fields and flags.
#[derive(Debug)]
struct Frame {
    request_id: i32,
    response_to: i32,
    flags: u32,
    doc: Document,
}

impl Frame {
    fn more_to_come(&self) -> bool {
        self.flags & MORE_TO_COME != 0
    }
}

/// An OP_MSG carrying `cmd` with the given flag bits.
fn op_msg_with_flags(request_id: i32, flags: u32, cmd: &Document) -> Vec<u8> {
    let mut body = flags.to_le_bytes().to_vec();
    body.push(0);
    cmd.to_writer(&mut body).unwrap();
    wire::frame(request_id, wire::OP_MSG, &body)
}

/// Reads one OP_MSG reply; `None` if the connection closed or nothing
/// came within `wait`.
async fn read_frame(stream: &mut TcpStream, wait: Duration) -> Option<Frame> {
    let read = async {
        let mut header = [0u8; 16];
        stream.read_exact(&mut header).await.ok()?;
        let field = |i: usize| i32::from_le_bytes(header[i..i + 4].try_into().unwrap());
        let (len, request_id, response_to, op_code) = (field(0), field(4), field(8), field(12));
        assert_eq!(op_code, wire::OP_MSG, "reply opcode");
        let mut body = vec![0u8; len as usize - 16];
        stream.read_exact(&mut body).await.ok()?;
        let flags = u32::from_le_bytes(body[0..4].try_into().unwrap());
        assert_eq!(body[4], 0, "one body section");
        let doc = Document::from_reader(&body[5..]).unwrap();
        Some(Frame {
            request_id,
            response_to,
            flags,
            doc,
        })
    };
    tokio::time::timeout(wait, read).await.ok().flatten()
}

/// Sends `cmd` (with `$db: admin`) and reads the one reply to it.
async fn ask(stream: &mut TcpStream, id: i32, flags: u32, mut cmd: Document) -> Frame {
    cmd.insert("$db", "admin");
    assert!(wire::send(stream, &op_msg_with_flags(id, flags, &cmd)).await);
    read_frame(stream, Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("no reply to {cmd}"))
}

async fn connect(srv: &TestServer) -> TcpStream {
    TcpStream::connect(srv.addrs()[0]).await.unwrap()
}

/// The server's current topology version, from a plain `hello`.
async fn topology_version(stream: &mut TcpStream) -> Document {
    let reply = ask(stream, 1, 0, doc! {"hello": 1}).await;
    reply
        .doc
        .get_document("topologyVersion")
        .unwrap_or_else(|_| panic!("no topologyVersion in {}", reply.doc))
        .clone()
}

#[track_caller]
fn assert_error(reply: &Document, code: i32, message: &str) {
    assert_eq!(num(reply, "ok"), 0, "{reply}");
    assert_eq!(num(reply, "code"), code as i64, "{reply}");
    assert_eq!(reply.get_str("errmsg").unwrap(), message, "{reply}");
}

async fn awaiting_topology_changes(srv: &TestServer) -> i64 {
    let status = srv
        .pinned_db("admin")
        .run_command(doc! {"serverStatus": 1})
        .await
        .unwrap();
    num(
        status.get_document("connections").unwrap(),
        "awaitingTopologyChanges",
    )
}

#[tokio::test]
async fn every_hello_reports_the_same_topology_version_until_a_restart() {
    let mut srv = TestServer::start().await;
    let mut first = connect(&srv).await;
    let version = topology_version(&mut first).await;
    assert!(
        matches!(version.get("processId"), Some(Bson::ObjectId(_))),
        "{version}"
    );
    assert_eq!(version.get("counter"), Some(&Bson::Int64(0)), "{version}");
    assert_eq!(version.len(), 2, "{version}");
    // The legacy spelling and another connection report it too.
    let legacy = ask(&mut connect(&srv).await, 2, 0, doc! {"isMaster": 1}).await;
    assert_eq!(legacy.doc.get_document("topologyVersion"), Ok(&version));
    srv.restart().await;
    let after = topology_version(&mut connect(&srv).await).await;
    assert_ne!(
        after.get("processId"),
        version.get("processId"),
        "a restarted server is a new process"
    );
    assert_eq!(after.get("counter"), Some(&Bson::Int64(0)));
}

#[tokio::test]
async fn an_awaitable_hello_waits_max_await_time_ms_for_a_change() {
    let srv = TestServer::start().await;
    let mut conn = connect(&srv).await;
    let version = topology_version(&mut conn).await;

    // The current version: nothing changes, so the reply comes when the
    // wait is over, a plain hello reply.
    let started = Instant::now();
    let reply = ask(
        &mut conn,
        2,
        0,
        doc! {"hello": 1, "topologyVersion": version.clone(), "maxAwaitTimeMS": 600},
    )
    .await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(600),
        "answered after {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
    assert_eq!(num(&reply.doc, "ok"), 1, "{}", reply.doc);
    assert_eq!(reply.doc.get_bool("isWritablePrimary"), Ok(true));
    assert_eq!(reply.doc.get_document("topologyVersion"), Ok(&version));
    assert!(!reply.more_to_come(), "no exhaust was allowed");

    // Another process's version (the server restarted since the client
    // last asked) and an older counter are answered at once.
    let other_process = doc! {"processId": ObjectId::new(), "counter": 0i64};
    let started = Instant::now();
    let reply = ask(
        &mut conn,
        3,
        0,
        doc! {"hello": 1, "topologyVersion": other_process, "maxAwaitTimeMS": 10_000},
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(reply.doc.get_document("topologyVersion"), Ok(&version));

    // maxAwaitTimeMS 0 waits not at all.
    let started = Instant::now();
    let reply = ask(
        &mut conn,
        4,
        0,
        doc! {"isMaster": 1, "topologyVersion": version.clone(), "maxAwaitTimeMS": 0i64},
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(reply.doc.get_bool("ismaster"), Ok(true), "{}", reply.doc);
}

#[tokio::test]
async fn awaitable_hello_arguments_are_checked_as_a_mongos_checks_them() {
    let srv = TestServer::start().await;
    let mut conn = connect(&srv).await;
    let version = topology_version(&mut conn).await;
    let pid = version.get_object_id("processId").unwrap();
    let cases: Vec<(Document, i32, &str)> = vec![
        (
            doc! {"hello": 1, "topologyVersion": version.clone()},
            51760,
            "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'",
        ),
        (
            doc! {"hello": 1, "maxAwaitTimeMS": 100},
            51760,
            "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'",
        ),
        (
            doc! {"hello": 1, "topologyVersion": {"processId": pid, "counter": -1i64}, "maxAwaitTimeMS": 100},
            51758,
            "topologyVersion must have a non-negative counter",
        ),
        (
            doc! {"hello": 1, "topologyVersion": version.clone(), "maxAwaitTimeMS": -1},
            51759,
            "maxAwaitTimeMS must be a non-negative integer",
        ),
        (
            doc! {"hello": 1, "topologyVersion": {"processId": pid, "counter": 1i64}, "maxAwaitTimeMS": 100},
            51761,
            "Received a topology version with counter: 1 which is greater than the mongos topology version counter: 0",
        ),
        (
            doc! {"hello": 1, "topologyVersion": {"counter": 0i64}, "maxAwaitTimeMS": 100},
            40414,
            "BSON field 'hello.topologyVersion.processId' is missing but a required field",
        ),
        (
            doc! {"hello": 1, "topologyVersion": {"processId": pid, "counter": 0}, "maxAwaitTimeMS": 100},
            14,
            "BSON field 'hello.topologyVersion.counter' is the wrong type 'int', expected type 'long'",
        ),
        (
            doc! {"hello": 1, "topologyVersion": 1, "maxAwaitTimeMS": 100},
            14,
            "BSON field 'hello.topologyVersion' is the wrong type 'int', expected type 'object'",
        ),
    ];
    for (i, (cmd, code, message)) in cases.into_iter().enumerate() {
        let reply = ask(&mut conn, 10 + i as i32, 0, cmd).await;
        assert_error(&reply.doc, code, message);
    }
    // Exhaust needs a wait to stream on.
    let reply = ask(&mut conn, 30, EXHAUST_ALLOWED, doc! {"hello": 1}).await;
    assert_error(
        &reply.doc,
        51763,
        "A hello/isMaster request with exhaust must specify 'maxAwaitTimeMS'",
    );
    assert!(!reply.more_to_come());
    // The connection is still a plain one afterwards.
    let reply = ask(&mut conn, 31, 0, doc! {"ping": 1}).await;
    assert_eq!(num(&reply.doc, "ok"), 1);
}

#[tokio::test]
async fn exhaust_hello_streams_a_reply_per_wait_until_the_client_hangs_up() {
    let srv = TestServer::start().await;
    let mut conn = connect(&srv).await;
    let version = topology_version(&mut conn).await;
    let started = Instant::now();
    let cmd = doc! {
        "hello": 1, "topologyVersion": version.clone(), "maxAwaitTimeMS": 300, "$db": "admin",
    };
    assert!(wire::send(&mut conn, &op_msg_with_flags(77, EXHAUST_ALLOWED, &cmd)).await);
    let mut answers = 77;
    for n in 1..=4 {
        let reply = read_frame(&mut conn, Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("reply {n} of the stream never came"));
        assert_eq!(num(&reply.doc, "ok"), 1, "{}", reply.doc);
        assert_eq!(reply.doc.get_document("topologyVersion"), Ok(&version));
        assert!(reply.more_to_come(), "reply {n} says more to come");
        assert_eq!(
            reply.response_to, answers,
            "reply {n} answers the message before it"
        );
        answers = reply.request_id;
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(300 * n),
            "reply {n} after {elapsed:?}"
        );
    }
    drop(conn);
    // A client that hangs up in the middle of a long wait: the server
    // notices while it waits, not only when a reply fails to go out.
    let mut conn = connect(&srv).await;
    let conn_id = num(
        &ask(&mut conn, 1, 0, doc! {"hello": 1}).await.doc,
        "connectionId",
    );
    let mut long = cmd.clone();
    long.insert("maxAwaitTimeMS", 60_000);
    assert!(wire::send(&mut conn, &op_msg_with_flags(2, EXHAUST_ALLOWED, &long)).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(conn);
    let closed = format!("connection closed conn={conn_id} ");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !srv.log().contains(&closed) {
        assert!(Instant::now() < deadline, "the stream outlived its client");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_exhaust_hello_from_another_process_is_answered_at_once_then_streams() {
    let srv = TestServer::start().await;
    let mut conn = connect(&srv).await;
    let version = topology_version(&mut conn).await;
    let cmd = doc! {
        "hello": 1,
        "topologyVersion": {"processId": ObjectId::new(), "counter": 5i64},
        "maxAwaitTimeMS": 400,
        "$db": "admin",
    };
    let started = Instant::now();
    assert!(wire::send(&mut conn, &op_msg_with_flags(5, EXHAUST_ALLOWED, &cmd)).await);
    let first = read_frame(&mut conn, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_millis(400));
    assert_eq!(first.doc.get_document("topologyVersion"), Ok(&version));
    assert!(first.more_to_come());
    // The stream goes on with the version just reported, so it waits.
    let second = read_frame(&mut conn, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(second.response_to, first.request_id);
    assert!(second.more_to_come());
}

#[tokio::test]
async fn shutdown_answers_a_waiting_hello_with_shutdown_in_progress() {
    let mut srv = TestServer::start().await;
    let mut conn = connect(&srv).await;
    let version = topology_version(&mut conn).await;
    let version_seen = version.clone();
    let cmd = doc! {
        "hello": 1, "topologyVersion": version, "maxAwaitTimeMS": 60_000, "$db": "admin",
    };
    assert!(wire::send(&mut conn, &op_msg_with_flags(9, EXHAUST_ALLOWED, &cmd)).await);
    // Let it begin to wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let status = srv.stop(Duration::from_secs(20));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a waiting hello held shutdown for {:?}",
        started.elapsed()
    );
    assert!(status.is_some_and(|s| s.success()), "exit: {status:?}");
    let reply = read_frame(&mut conn, Duration::from_secs(5))
        .await
        .expect("the waiting hello is answered before the server exits");
    assert_error(
        &reply.doc,
        91,
        "Mongos is in quiesce mode and will shut down",
    );
    assert_eq!(reply.doc.get_str("codeName"), Ok("ShutdownInProgress"));
    assert!(!reply.more_to_come(), "an error ends the stream");
    // The topology moved on, so drivers take the error as news and mark
    // the server unknown.
    let moved = reply.doc.get_document("topologyVersion").unwrap();
    assert_eq!(moved.get("processId"), version_seen.get("processId"));
    assert_eq!(moved.get("counter"), Some(&Bson::Int64(1)));
}

#[tokio::test]
async fn the_driver_monitors_with_the_streaming_protocol() {
    let srv = TestServer::start().await;
    let heartbeats: Arc<Mutex<Vec<(bool, bool)>>> = Arc::default();
    let seen = heartbeats.clone();
    let client = srv
        .client_with(move |o| {
            o.heartbeat_freq = Some(Duration::from_millis(500));
            o.sdam_event_handler = Some(EventHandler::callback(move |event| match event {
                SdamEvent::ServerHeartbeatSucceeded(e) => {
                    seen.lock().unwrap().push((e.awaited, true));
                }
                SdamEvent::ServerHeartbeatFailed(e) => {
                    seen.lock().unwrap().push((e.awaited, false));
                }
                _ => {}
            }));
        })
        .await;
    let coll = client.database("stream").collection::<Document>("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    // An awaited heartbeat is one the server answered after waiting:
    // the monitor streams, and each reply is a successful heartbeat.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let awaited_ok = heartbeats
            .lock()
            .unwrap()
            .iter()
            .filter(|(awaited, ok)| *awaited && *ok)
            .count();
        if awaited_ok >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "heartbeats so far: {:?}",
            heartbeats.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        heartbeats.lock().unwrap().iter().all(|(_, ok)| *ok),
        "a heartbeat failed: {:?}",
        heartbeats.lock().unwrap()
    );
    // Operations go on beside the monitor's stream.
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
    assert!(awaiting_topology_changes(&srv).await >= 1);
}
