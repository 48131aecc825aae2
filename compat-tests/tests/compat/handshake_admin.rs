//! Handshake and admin commands, as a MongoDB 7.0 mongos answers them.

use compat_tests::{
    bson::{doc, Bson, Document},
    expect_command_error, num, numf, wire, TestServer,
};
use std::time::Duration;
use tokio::net::TcpStream;

async fn admin(srv: &TestServer, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    srv.db("admin")
        .run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown} failed: {e}"))
}

#[track_caller]
fn assert_mongos_hello(reply: &Document) {
    assert_eq!(numf(reply, "ok"), 1.0, "{reply}");
    assert_eq!(reply.get_str("msg").ok(), Some("isdbgrid"), "{reply}");
    assert_eq!(num(reply, "maxWireVersion"), 21, "{reply}");
    assert_eq!(num(reply, "minWireVersion"), 0, "{reply}");
    assert_eq!(num(reply, "maxBsonObjectSize"), 16 * 1024 * 1024, "{reply}");
    assert_eq!(num(reply, "maxMessageSizeBytes"), 48_000_000, "{reply}");
    assert_eq!(num(reply, "maxWriteBatchSize"), 100_000, "{reply}");
    assert!(num(reply, "logicalSessionTimeoutMinutes") > 0, "{reply}");
    assert!(
        reply.get_datetime("localTime").is_ok(),
        "localTime missing: {reply}"
    );
    assert!(
        reply.contains_key("connectionId"),
        "connectionId missing: {reply}"
    );
}

#[tokio::test]
async fn hello_presents_a_mongos_7_0() {
    let srv = TestServer::start().await;
    let reply = admin(&srv, doc! {"hello": 1}).await;
    assert_mongos_hello(&reply);
    assert_eq!(
        reply.get_bool("isWritablePrimary").ok(),
        Some(true),
        "{reply}"
    );
    // A mongos does not describe itself as a replica-set member.
    assert!(!reply.contains_key("setName"), "{reply}");
}

#[tokio::test]
async fn hello_works_on_any_database() {
    let srv = TestServer::start().await;
    let reply = srv
        .db("some_app")
        .run_command(doc! {"hello": 1})
        .await
        .unwrap();
    assert_mongos_hello(&reply);
}

#[tokio::test]
async fn is_master_spellings_answer_with_ismaster() {
    let srv = TestServer::start().await;
    for name in ["isMaster", "ismaster"] {
        let reply = admin(&srv, doc! {name: 1}).await;
        assert_mongos_hello(&reply);
        assert_eq!(
            reply.get_bool("ismaster").ok(),
            Some(true),
            "{name}: {reply}"
        );
    }
}

#[tokio::test]
async fn is_master_with_hello_ok_says_hello_ok() {
    let srv = TestServer::start().await;
    let reply = admin(&srv, doc! {"isMaster": 1, "helloOk": true}).await;
    assert_eq!(reply.get_bool("helloOk").ok(), Some(true), "{reply}");
}

#[tokio::test]
async fn legacy_op_query_handshake_gets_op_reply() {
    let srv = TestServer::start().await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    // OP_QUERY: flags, "admin.$cmd", skip 0, return -1, query document.
    let mut body = Vec::new();
    body.extend_from_slice(&0i32.to_le_bytes());
    body.extend_from_slice(b"admin.$cmd\0");
    body.extend_from_slice(&0i32.to_le_bytes());
    body.extend_from_slice(&(-1i32).to_le_bytes());
    doc! {"isMaster": 1, "client": {"application": {"name": "legacy"}}}
        .to_writer(&mut body)
        .unwrap();
    assert!(wire::send(&mut s, &wire::frame(7, wire::OP_QUERY, &body)).await);
    match wire::read_reply(&mut s, Duration::from_secs(10)).await {
        wire::Outcome::Reply {
            op_code,
            doc: Some(d),
        } => {
            assert_eq!(
                op_code,
                wire::OP_REPLY,
                "legacy query must be answered with OP_REPLY"
            );
            assert_eq!(d.get_bool("ismaster").ok(), Some(true), "{d}");
            assert_eq!(num(&d, "maxWireVersion"), 21, "{d}");
            assert_eq!(d.get_str("msg").ok(), Some("isdbgrid"), "{d}");
        }
        other => panic!("no OP_REPLY to legacy isMaster: {other:?}"),
    }
}

#[tokio::test]
async fn ping_answers_ok() {
    let srv = TestServer::start().await;
    let reply = admin(&srv, doc! {"ping": 1}).await;
    assert_eq!(numf(&reply, "ok"), 1.0);
    let reply = srv.db("anydb").run_command(doc! {"ping": 1}).await.unwrap();
    assert_eq!(numf(&reply, "ok"), 1.0);
}

#[tokio::test]
async fn build_info_reports_7_0() {
    let srv = TestServer::start().await;
    for name in ["buildInfo", "buildinfo"] {
        let reply = admin(&srv, doc! {name: 1}).await;
        let version = reply
            .get_str("version")
            .unwrap_or_else(|_| panic!("{reply}"));
        assert!(version.starts_with("7.0."), "{name}: version {version}");
        let va: Vec<i64> = reply
            .get_array("versionArray")
            .unwrap_or_else(|_| panic!("no versionArray: {reply}"))
            .iter()
            .map(|b| match b {
                Bson::Int32(v) => *v as i64,
                Bson::Int64(v) => *v,
                other => panic!("versionArray element {other:?}"),
            })
            .collect();
        assert_eq!(va.len(), 4, "{reply}");
        assert_eq!(&va[..2], &[7, 0], "{reply}");
        assert_eq!(
            version,
            format!("{}.{}.{}", va[0], va[1], va[2]),
            "version and versionArray disagree"
        );
        assert_eq!(
            num(&reply, "maxBsonObjectSize"),
            16 * 1024 * 1024,
            "{reply}"
        );
        assert_eq!(num(&reply, "bits"), 64, "{reply}");
    }
    // buildInfo is allowed on any database.
    let reply = srv
        .db("x")
        .run_command(doc! {"buildInfo": 1})
        .await
        .unwrap();
    assert!(reply.get_str("version").unwrap().starts_with("7.0."));
}

#[tokio::test]
async fn get_parameter_feature_compatibility_version() {
    let srv = TestServer::start().await;
    let reply = admin(
        &srv,
        doc! {"getParameter": 1, "featureCompatibilityVersion": 1},
    )
    .await;
    let fcv = reply
        .get_document("featureCompatibilityVersion")
        .unwrap_or_else(|_| panic!("{reply}"));
    assert_eq!(fcv.get_str("version").ok(), Some("7.0"), "{reply}");
}

#[tokio::test]
async fn whatsmyuri_reports_the_client_address() {
    let srv = TestServer::start().await;
    let reply = admin(&srv, doc! {"whatsmyuri": 1}).await;
    let you = reply.get_str("you").unwrap_or_else(|_| panic!("{reply}"));
    assert!(you.starts_with("127.0.0.1:"), "you = {you}");
    let port: u16 = you.rsplit(':').next().unwrap().parse().expect("port");
    assert_ne!(
        port,
        srv.addr.port(),
        "`you` is the client's address, not the server's"
    );
}

#[tokio::test]
async fn host_info_has_system_and_os() {
    let srv = TestServer::start().await;
    let reply = admin(&srv, doc! {"hostInfo": 1}).await;
    let system = reply
        .get_document("system")
        .unwrap_or_else(|_| panic!("{reply}"));
    assert!(system.get_str("hostname").is_ok(), "{reply}");
    assert!(num(system, "numCores") >= 1, "{reply}");
    assert!(num(system, "memSizeMB") > 0, "{reply}");
    assert!(reply.get_document("os").is_ok(), "{reply}");
}

#[tokio::test]
async fn server_status_has_uptime_connections_opcounters_mem() {
    let srv = TestServer::start().await;
    let before = admin(&srv, doc! {"serverStatus": 1}).await;
    assert_eq!(before.get_str("process").ok(), Some("mongos"), "{before}");
    assert!(
        before.get_str("version").unwrap().starts_with("7.0."),
        "{before}"
    );
    assert!(before.get_str("host").is_ok(), "{before}");
    assert!(numf(&before, "uptime") >= 0.0, "{before}");
    let conns = before
        .get_document("connections")
        .unwrap_or_else(|_| panic!("{before}"));
    assert!(num(conns, "current") >= 1, "{before}");
    assert!(num(conns, "available") >= 1, "{before}");
    assert!(num(conns, "totalCreated") >= 1, "{before}");
    let mem = before
        .get_document("mem")
        .unwrap_or_else(|_| panic!("{before}"));
    assert_eq!(num(mem, "bits"), 64, "{before}");
    assert!(
        mem.contains_key("resident") && mem.contains_key("virtual"),
        "{before}"
    );
    let ops = before
        .get_document("opcounters")
        .unwrap_or_else(|_| panic!("{before}"));
    for k in ["insert", "query", "update", "delete", "getmore", "command"] {
        assert!(ops.contains_key(k), "opcounters.{k} missing: {ops}");
    }

    let coll = srv.db("ss").collection::<Document>("c");
    coll.insert_many(vec![doc! {"a": 1}, doc! {"a": 2}, doc! {"a": 3}])
        .await
        .unwrap();
    coll.find_one(doc! {}).await.unwrap();
    coll.update_one(doc! {"a": 1}, doc! {"$set": {"b": 1}})
        .await
        .unwrap();
    coll.delete_one(doc! {"a": 2}).await.unwrap();

    let after = admin(&srv, doc! {"serverStatus": 1}).await;
    let ops2 = after.get_document("opcounters").unwrap();
    assert!(
        num(ops2, "insert") >= num(ops, "insert") + 3,
        "{ops} -> {ops2}"
    );
    assert!(num(ops2, "query") > num(ops, "query"), "{ops} -> {ops2}");
    assert!(num(ops2, "update") > num(ops, "update"), "{ops} -> {ops2}");
    assert!(num(ops2, "delete") > num(ops, "delete"), "{ops} -> {ops2}");
    assert!(
        num(ops2, "command") > num(ops, "command"),
        "{ops} -> {ops2}"
    );
    assert!(numf(&after, "uptime") >= numf(&before, "uptime"));
}

#[tokio::test]
async fn connection_status_reports_no_users() {
    let srv = TestServer::start().await;
    let reply = admin(&srv, doc! {"connectionStatus": 1}).await;
    let auth = reply
        .get_document("authInfo")
        .unwrap_or_else(|_| panic!("{reply}"));
    assert_eq!(
        auth.get_array("authenticatedUsers").map(|a| a.len()).ok(),
        Some(0),
        "{reply}"
    );
    assert!(auth.get_array("authenticatedUserRoles").is_ok(), "{reply}");
}

#[tokio::test]
async fn get_cmd_line_opts_has_argv_and_parsed() {
    let srv = TestServer::start().await;
    let reply = admin(&srv, doc! {"getCmdLineOpts": 1}).await;
    let argv = reply
        .get_array("argv")
        .unwrap_or_else(|_| panic!("{reply}"));
    assert!(!argv.is_empty(), "{reply}");
    assert!(
        argv.iter().all(|a| a.as_str().is_some()),
        "argv holds strings: {reply}"
    );
    assert!(reply.get_document("parsed").is_ok(), "{reply}");
}

#[tokio::test]
async fn get_log_lists_and_returns_logs() {
    let srv = TestServer::start().await;
    let reply = admin(&srv, doc! {"getLog": "*"}).await;
    let names: Vec<&str> = reply
        .get_array("names")
        .unwrap_or_else(|_| panic!("{reply}"))
        .iter()
        .filter_map(|b| b.as_str())
        .collect();
    assert!(names.contains(&"global"), "{reply}");
    assert!(names.contains(&"startupWarnings"), "{reply}");
    for log in ["global", "startupWarnings"] {
        let reply = admin(&srv, doc! {"getLog": log}).await;
        assert!(reply.get_array("log").is_ok(), "{log}: {reply}");
        assert!(reply.contains_key("totalLinesWritten"), "{log}: {reply}");
    }
    // `global` holds the server's recent lines, each one JSON object in
    // mongod's shape: the start-up and this client's connection.
    let reply = admin(&srv, doc! {"getLog": "global"}).await;
    let lines: Vec<&str> = reply
        .get_array("log")
        .unwrap()
        .iter()
        .filter_map(|b| b.as_str())
        .collect();
    assert!(
        num(&reply, "totalLinesWritten") >= lines.len() as i64,
        "{reply}"
    );
    for line in &lines {
        assert!(line.starts_with("{\"t\":{\"$date\":\""), "{line}");
        assert!(
            line.contains("\"s\":\"") && line.contains("\"msg\":\""),
            "{line}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"msg\":\"shardgate listening\"")),
        "{reply}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"msg\":\"connection opened\"")),
        "{reply}"
    );
}

#[tokio::test]
async fn list_commands_lists_the_basics() {
    let srv = TestServer::start().await;
    let reply = admin(&srv, doc! {"listCommands": 1}).await;
    let cmds = reply
        .get_document("commands")
        .unwrap_or_else(|_| panic!("{reply}"));
    for name in [
        "hello",
        "isMaster",
        "ping",
        "buildInfo",
        "find",
        "getMore",
        "killCursors",
        "insert",
        "update",
        "delete",
        "findAndModify",
        "count",
        "distinct",
        "listDatabases",
        "listCollections",
        "create",
        "drop",
        "dropDatabase",
        "listCommands",
        "endSessions",
    ] {
        let c = cmds
            .get_document(name)
            .unwrap_or_else(|_| panic!("listCommands lacks {name}"));
        assert!(c.contains_key("help") || !c.is_empty(), "{name}: {c}");
    }
}

#[tokio::test]
async fn sessions_commands_answer_ok() {
    let srv = TestServer::start().await;
    let reply = admin(&srv, doc! {"startSession": 1}).await;
    let id = reply
        .get_document("id")
        .unwrap_or_else(|_| panic!("{reply}"));
    match id.get("id") {
        Some(Bson::Binary(b)) => {
            assert_eq!(
                b.subtype,
                compat_tests::bson::spec::BinarySubtype::Uuid,
                "{reply}"
            );
            assert_eq!(b.bytes.len(), 16);
        }
        other => panic!("startSession id.id is not a UUID: {other:?}"),
    }
    assert_eq!(num(&reply, "timeoutMinutes"), 30, "{reply}");

    let lsid = id.clone();
    admin(&srv, doc! {"endSessions": [lsid.clone()]}).await;
    admin(&srv, doc! {"endSessions": []}).await;
    admin(&srv, doc! {"killSessions": []}).await;
    admin(&srv, doc! {"killSessions": [lsid]}).await;
}

#[tokio::test]
async fn typed_sessions_work() {
    let srv = TestServer::start().await;
    let mut session = srv.client.start_session().await.unwrap();
    let coll = srv.db("sess").collection::<Document>("c");
    coll.insert_one(doc! {"x": 1})
        .session(&mut session)
        .await
        .unwrap();
    let n = coll
        .count_documents(doc! {})
        .session(&mut session)
        .await
        .unwrap();
    assert_eq!(n, 1);
    drop(session);
}

#[tokio::test]
async fn logout_answers_ok() {
    let srv = TestServer::start().await;
    let reply = srv
        .db("test")
        .run_command(doc! {"logout": 1})
        .await
        .unwrap();
    assert_eq!(numf(&reply, "ok"), 1.0);
}

#[tokio::test]
async fn atlas_version_is_command_not_found() {
    let srv = TestServer::start().await;
    expect_command_error(
        &srv.db("admin"),
        doc! {"atlasVersion": 1},
        59,
        "CommandNotFound",
    )
    .await;
}

#[tokio::test]
async fn unknown_command_is_command_not_found_naming_it() {
    let srv = TestServer::start().await;
    let f = expect_command_error(
        &srv.db("test"),
        doc! {"frobnicateTheWidgets": 1},
        59,
        "CommandNotFound",
    )
    .await;
    assert!(
        f.message.contains("frobnicateTheWidgets"),
        "message should name the command: {f:?}"
    );
}

#[tokio::test]
async fn command_names_are_case_sensitive() {
    let srv = TestServer::start().await;
    let f = expect_command_error(&srv.db("admin"), doc! {"PING": 1}, 59, "CommandNotFound").await;
    assert!(f.message.contains("PING"), "{f:?}");
}

#[tokio::test]
async fn unknown_command_leaves_connection_usable() {
    let srv = TestServer::start().await;
    for i in 0..20 {
        let name = format!("noSuchCommand{i}");
        expect_command_error(&srv.db("admin"), doc! {name: 1}, 59, "CommandNotFound").await;
    }
    admin(&srv, doc! {"ping": 1}).await;
}
