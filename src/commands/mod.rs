//! The commands layer: one file per command (or tight family), one
//! registry table, and the handling every command shares.
//!
//! [`handle`] takes a command document from the wire layer, checks the
//! arguments common to all commands (`$db`, sessions, transactions),
//! dispatches through [`registry::COMMANDS`], and turns the result into a
//! reply: `{ok: 1, ...}` or `{ok: 0, errmsg, code, codeName}`, both with
//! `$clusterTime` and `operationTime` as a mongos sends them.
//!
//! The files import each other in one direction, top to bottom: this
//! file's dispatch, then the registry, then the handlers (`explain` may
//! ask `find`, `count` and `aggregate` how they parse a query; `handshake`
//! asks `auth`, which asks `users`, which asks `roles`), then the
//! pieces below them: `explain_render` (shared by `explain` and
//! `aggregate`), `args`, `write_concern`, `request`, `state`, `activity`, `retry` and
//! `version`. Nothing imports a file above it; `tests/layering.rs` checks
//! that no two files import each other in a cycle.

pub mod activity;
pub mod admin;
pub mod aggregate;
pub mod args;
pub mod auth;
pub mod capped;
pub mod catalog;
pub mod coll_mod;
pub mod collation;
pub mod count;
pub mod current_op;
pub mod custom_action;
pub mod delete;
pub mod distinct;
pub mod explain;
pub mod explain_render;
pub mod fail_point;
pub mod find;
pub mod find_and_modify;
pub mod generic_args;
pub mod handshake;
pub mod indexes;
pub mod insert;
pub mod map_reduce;
pub mod metrics;
pub mod parameters;
pub mod profile;
pub mod registry;
pub mod request;
pub mod request_statistics;
pub mod retry;
pub mod roles;
pub mod sessions;
pub mod sharding;
pub mod state;
pub mod timeseries;
pub mod transactions;
pub mod update;
pub mod users;
pub mod version;
pub mod views;
pub mod write_concern;

use std::sync::atomic::Ordering;
use std::time::Instant;

use bson::{doc, Bson, Document};

use crate::error::{Error, ErrorCode, Result};
use crate::query::interrupt::{self, Operation};
use crate::router::charge::{self, Meter};
use crate::router::sessions::{retryable_write, Outcome};
use crate::wire::Command;
pub use request::CommandReply;
use request::Request;
pub use state::{ConnectionInfo, ServerState};

/// MongoDB's "not primary" and shutdown errors (the `NotPrimaryError` and
/// `ShutdownError` categories), which drivers' SDAM acts on.
const STATE_CHANGE_CODES: [i32; 8] = [91, 189, 10058, 10107, 11600, 11602, 13435, 13436];

/// Adds the topology version to a state-change error, as mongod and
/// mongos add it: a driver that sees the version it already knows takes
/// the error as stale and keeps the server (a `failCommand` fail point's
/// error, say), and one that sees a newer version (shutdown) marks it
/// unknown.
fn add_topology_version(state: &ServerState, reply: &mut Document) {
    let failed = reply.get("ok").and_then(args::number_as_i64) == Some(0);
    let code = reply.get_i32("code").unwrap_or_default();
    if failed && STATE_CHANGE_CODES.contains(&code) && !reply.contains_key("topologyVersion") {
        reply.insert("topologyVersion", state.topology.version());
    }
}

/// The namespace a command is listed, logged and profiled under:
/// `db.collection`, or `db.$cmd` when it names no collection.
struct Target {
    db: String,
    coll: Option<String>,
}

impl Target {
    fn of(body: &Document) -> Target {
        Target {
            db: body.get_str("$db").unwrap_or_default().to_string(),
            coll: match body.iter().next() {
                Some((_, Bson::String(coll))) => Some(coll.clone()),
                Some((name, _)) if name == "getMore" => {
                    body.get_str("collection").ok().map(str::to_string)
                }
                _ => None,
            },
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.db, self.coll.as_deref().unwrap_or("$cmd"))
    }
}

/// Whether a request waits by design (a streaming `hello`, an
/// `awaitData` `getMore`): it is never slow, as mongod pauses its timer
/// while they wait.
fn waits_by_design(body: &Document) -> bool {
    body.contains_key("maxAwaitTimeMS")
}

/// The request a streaming `hello` (sent with OP_MSG's `exhaustAllowed`)
/// goes on to after `reply`, answered unasked; `None` ends the stream.
/// See [`handshake::next_in_stream`].
pub fn next_in_stream(body: &Document, reply: &CommandReply) -> Option<Document> {
    match reply {
        CommandReply::Document(reply) => handshake::next_in_stream(body, reply),
        CommandReply::Encoded(_) => None,
    }
}

/// Runs one command document and returns its reply.
pub async fn handle(state: &ServerState, conn: &ConnectionInfo, cmd: Command) -> CommandReply {
    let name = cmd.body.keys().next().cloned().unwrap_or_default();
    let target = Target::of(&cmd.body);
    let waits = waits_by_design(&cmd.body);
    let op = Operation::new(max_time_deadline(&cmd.body), conn.probe.clone());
    let listed = state.router.operations().register(
        current_op::listing(conn, &name, target.to_string(), &cmd.body),
        op.clone(),
    );
    let meter = Meter::new();
    let watched = state
        .profiler
        .watches(&target.db)
        .then(|| {
            profile::Watched::start(
                &target.db,
                target.to_string(),
                &name,
                &cmd.body,
                &cmd.sequences,
                &meter,
            )
        })
        .flatten();
    let started = Instant::now();
    let result = charge::scoped(
        &meter,
        interrupt::scoped(&op, run(state, conn, name.clone(), cmd)),
    )
    .await;
    drop(listed);
    let charges = meter.charges();
    if !charges.is_empty() {
        state
            .router
            .settle(&charges, retry::is_retryable_write(&name));
    }
    let elapsed = started.elapsed();
    if !waits && elapsed.as_millis() >= u128::from(state.profiler.slow_ms()) {
        tracing::info!(
            conn = conn.id,
            ns = %target,
            command = %name,
            duration_millis = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            ok = result.is_ok(),
            "Slow query"
        );
    }
    if let Some(coll) = &target.coll {
        if !waits {
            state
                .top
                .record(&format!("{}.{coll}", target.db), &name, elapsed);
        }
    }
    count_documents(state, &name, &result, &meter);
    if let Some(watched) = watched {
        watched.finish(state, conn, &result, elapsed, &meter).await;
    }
    if let Some(metrics) = &state.metrics {
        let command = registry::position(&name).map(|(index, entry)| (index, entry.name));
        metrics.record(command, result.is_ok(), elapsed);
    }
    if request_statistics::replaces_last_request(&name) {
        conn.set_last_request(request_statistics::LastRequest {
            command: name.clone(),
            charge: charges.iter().map(|c| c.micro).sum(),
            millis: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
            activity: state::ActivityId::next(),
        });
    }
    match result {
        Ok(CommandReply::Document(mut reply)) => {
            if !reply.contains_key("ok") {
                reply.insert("ok", 1.0);
            }
            // A fail point's error document.
            add_topology_version(state, &mut reply);
            CommandReply::Document(reply)
        }
        Ok(encoded) => encoded,
        Err(e) => {
            tracing::info!(
                conn = conn.id,
                command = %name,
                code = e.code.number(),
                "command failed: {}",
                e.message
            );
            let mut reply = error_document(&e);
            add_topology_version(state, &mut reply);
            CommandReply::Document(reply)
        }
    }
}

/// Counts the documents a command wrote and returned
/// (`serverStatus`'s `metrics.document`).
fn count_documents(state: &ServerState, name: &str, result: &Result<CommandReply>, meter: &Meter) {
    let counts = &state.counters.documents;
    let returned = meter.work().returned;
    if returned > 0 {
        counts.returned.fetch_add(returned, Ordering::Relaxed);
    }
    let Ok(CommandReply::Document(reply)) = result else {
        return;
    };
    let field = |f: &str| {
        reply
            .get(f)
            .and_then(args::number_as_i64)
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0)
    };
    let (counter, n) = match name {
        "insert" => (&counts.inserted, field("n")),
        "update" => (&counts.updated, field("nModified")),
        "delete" => (&counts.deleted, field("n")),
        _ => return,
    };
    counter.fetch_add(n, Ordering::Relaxed);
}

/// `{ok: 0, errmsg, code, codeName, ...}`.
pub fn error_document(e: &Error) -> Document {
    let mut reply = doc! {"ok": 0.0};
    reply.extend(e.to_reply_fields());
    reply
}

/// The bytes of a reply document with `$clusterTime` and `operationTime`
/// added, as a mongos sends them. They are written after the encoded reply
/// rather than inserted in the document: every reply carries them, and
/// building their nested documents cost more than most replies. A reply
/// past what one may carry is replaced by MongoDB's `BSONObjectTooLarge`
/// error, measured on its bytes rather than walked beforehand.
pub fn encode_reply(state: &ServerState, reply: CommandReply) -> bson::error::Result<Vec<u8>> {
    let time = state.tick_cluster_time();
    let mut bytes = match reply {
        CommandReply::Document(doc) => doc.to_vec()?,
        CommandReply::Encoded(raw) => raw.into_bytes(),
    };
    if bytes.len() > crate::wire::MAX_INTERNAL_OBJECT_SIZE {
        // A reply is one document: past what a reply may carry, the
        // client gets MongoDB's error instead of a message it drops.
        let e = Error::bson_object_too_large(bytes.len(), &first_field(&bytes)?);
        tracing::info!("reply too large: {}", e.message);
        bytes = error_document(&e).to_vec()?;
    }
    bytes.pop(); // the document's terminating 0
    append_cluster_time(&mut bytes, time);
    bytes.push(0);
    let len = i32::try_from(bytes.len())
        .map_err(|_| std::io::Error::other("the reply is larger than BSON allows"))?;
    bytes[..4].copy_from_slice(&len.to_le_bytes());
    Ok(bytes)
}

/// The first field of an encoded document, alone in a document.
fn first_field(bytes: &[u8]) -> bson::error::Result<Document> {
    let mut first = Document::new();
    if let Some(element) = bson::RawDocument::from_bytes(bytes)?.iter().next() {
        let (key, value) = element?;
        first.insert(key.as_str(), Bson::try_from(value)?);
    }
    Ok(first)
}

/// Appends the elements `$clusterTime: {clusterTime: time, signature:
/// {hash: <20 zero bytes>, keyId: 0}}` and `operationTime: time`, encoded
/// by hand: they are the same bytes on every reply but for the time.
fn append_cluster_time(out: &mut Vec<u8>, time: bson::Timestamp) {
    // `hash`: binary, 20 bytes of subtype 0, all zero.
    const HASH_NAME: &[u8] = b"\x05hash\0\x14\0\0\0\0";
    const HASH_LEN: usize = HASH_NAME.len() + 20;
    // `keyId`: the int64 0.
    const KEY_ID: &[u8] = b"\x12keyId\0\0\0\0\0\0\0\0\0";
    const SIGNATURE_LEN: usize = 4 + HASH_LEN + KEY_ID.len() + 1;
    const CLUSTER_TIME_LEN: usize =
        4 + 1 + b"clusterTime\0".len() + 8 + 1 + b"signature\0".len() + SIGNATURE_LEN + 1;
    let stamp = ((u64::from(time.time) << 32) | u64::from(time.increment)).to_le_bytes();
    out.extend_from_slice(b"\x03$clusterTime\0");
    out.extend_from_slice(&(CLUSTER_TIME_LEN as i32).to_le_bytes());
    out.extend_from_slice(b"\x11clusterTime\0");
    out.extend_from_slice(&stamp);
    out.extend_from_slice(b"\x03signature\0");
    out.extend_from_slice(&(SIGNATURE_LEN as i32).to_le_bytes());
    out.extend_from_slice(HASH_NAME);
    out.extend_from_slice(&[0; 20]);
    out.extend_from_slice(KEY_ID);
    out.push(0);
    out.push(0);
    out.extend_from_slice(b"\x11operationTime\0");
    out.extend_from_slice(&stamp);
}

/// Commands that answer without the catalog: they do not ask first
/// whether another gateway changed it.
const READS_NO_CATALOG: &[&str] = &[
    "hello",
    "isMaster",
    "ismaster",
    "ping",
    "buildInfo",
    "buildinfo",
    "getMore",
    "killCursors",
    "endSessions",
    "getParameter",
    "whatsmyuri",
    "hostInfo",
    "getLog",
    "getCmdLineOpts",
    "connectionStatus",
    "serverStatus",
];

/// How often a command is run again after another gateway changed the
/// catalog under it.
const STALE_RETRIES: u32 = 3;

/// When the command's `maxTimeMS` runs out. Each command checks the
/// field's type itself; a value that is not a positive number sets no
/// limit here.
fn max_time_deadline(body: &Document) -> Option<Instant> {
    let ms = body.get("maxTimeMS").and_then(args::number_as_i64)?;
    let ms = u64::try_from(ms).ok().filter(|&ms| ms > 0)?;
    Some(Instant::now() + std::time::Duration::from_millis(ms))
}

async fn run(
    state: &ServerState,
    conn: &ConnectionInfo,
    name: String,
    cmd: Command,
) -> Result<CommandReply> {
    let Command {
        body,
        sequences,
        exhaust_allowed,
    } = cmd;
    if name.is_empty() {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            "empty command document: the first field must name the command",
        ));
    }
    let db = match body.get("$db") {
        Some(Bson::String(db)) => db.clone(),
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field '$db' is the wrong type '{}', expected type 'string'",
                args::type_name(other)
            )))
        }
        None => {
            return Err(Error::new(
                ErrorCode::OpMsgMissingDb,
                "OP_MSG requests require a $db argument",
            ))
        }
    };
    if db != crate::base::EXTERNAL_DB {
        crate::router::catalog::validate_db_name(&db)?;
    }
    let Some(entry) = registry::lookup(&name) else {
        return Err(Error::new(
            ErrorCode::CommandNotFound,
            format!("no such command: '{name}'"),
        ));
    };
    if TEST_COMMANDS.contains(&name.as_str()) && !state.config.enable_test_commands {
        return Err(Error::new(
            ErrorCode::CommandNotFound,
            format!("no such command: '{name}'"),
        ));
    }
    if state.security.enabled {
        auth::authorize(state, conn, &name, &db, &body).await?;
    }
    generic_args::check(&name, &body)?;
    if entry.admin_only && db != "admin" {
        return Err(Error::new(
            ErrorCode::Unauthorized,
            format!("{name} may only be run against the admin database."),
        ));
    }
    let failing = match state.fail_points.check(&name, &body, &db, conn.app_name()) {
        None => None,
        Some(action) => {
            if let Some(block) = action.block {
                tokio::time::sleep(block).await;
            }
            if action.close_connection {
                conn.close();
                return Err(Error::new(
                    ErrorCode::HostUnreachable,
                    "connection closed by the failCommand fail point",
                ));
            }
            if let Some(error) = action.error {
                return Ok(error.into());
            }
            Some(action)
        }
    };
    let transaction = state.sessions.enter(&state.router, &name, &body).await?;
    let write_concern = write_concern::check(&name, &body)?;
    state.counters.op_command.fetch_add(1, Ordering::Relaxed);
    let alone = matches!(transaction, transactions::Entered::Alone);
    let retry = (alone && retry::is_retryable_write(&name))
        .then(|| retry::retry_key(&body))
        .flatten();
    if let Some((session, txn)) = &retry {
        if let Some(reply) = replayed(state, session, *txn).await? {
            return Ok(reply.into());
        }
    }
    let req = Request {
        state,
        conn,
        name,
        db,
        body,
        sequences,
        exhaust_allowed,
        transaction,
    };
    if !READS_NO_CATALOG.contains(&req.name.as_str()) {
        state.router.sync_catalog().await?;
    }
    let mut stale = 0;
    // The newest commit of a retryable write, still to be made durable.
    let mut pending = 0;
    let reply = loop {
        let handled = (entry.handler)(&req);
        let handled = async {
            match &retry {
                Some((session, txn)) => {
                    let (handled, newest) = retryable_write(session, *txn, handled).await;
                    pending = pending.max(newest);
                    handled
                }
                None => handled.await,
            }
        };
        let handled = if write_concern.journal {
            handled.await
        } else {
            crate::router::without_journal_wait(handled).await
        };
        match handled {
            // Another gateway changed the catalog while the command ran,
            // and the store refused what it wrote whole: reload, retry.
            Err(e) if e.code == ErrorCode::StaleConfig && stale < STALE_RETRIES => {
                stale += 1;
                state.router.refresh_catalog()?;
            }
            done => break done,
        }
    };
    // A failed retryable write records no reply, but what it committed
    // is still made durable before the error goes back.
    if let (Some((session, txn)), Err(_)) = (&retry, &reply) {
        let journal = write_concern.journal;
        let router = &state.router;
        router
            .finish_retryable_write(session, *txn, None, pending, journal)
            .await?;
    }
    // A statement that fails aborts its transaction.
    let reply = match &req.transaction {
        transactions::Entered::Statement(running)
            if !matches!(req.name.as_str(), "commitTransaction" | "abortTransaction") =>
        {
            let reply = reply.and_then(CommandReply::into_document);
            state.sessions.after_statement(running, reply)?.into()
        }
        _ => reply?,
    };
    if write_concern.error.is_none() && retry.is_none() && failing.is_none() {
        return Ok(reply);
    }
    let mut reply = reply.into_document()?;
    if let Some(e) = write_concern.error {
        reply.insert("writeConcernError", e);
    }
    if let Some((session, txn)) = retry {
        let (router, journal) = (&state.router, write_concern.journal);
        router
            .finish_retryable_write(&session, txn, Some(&reply), pending, journal)
            .await?;
        state.retries.record(session, txn, &reply);
    }
    // The fail point's error is not part of the write's outcome: a retry
    // is answered with the recorded reply, without it.
    if let Some(wce) = failing.and_then(|a| a.write_concern_error.map(|e| (e, a.labels))) {
        reply.insert("writeConcernError", wce.0);
        if !wce.1.is_empty() {
            reply.insert("errorLabels", wce.1);
        }
    }
    Ok(reply.into())
}

/// The first reply of retryable write `txn` of `session` when it is sent
/// again: from memory or, for a session memory does not hold, from its
/// record in storage. A write whose reply was lost with the server is not
/// run again either.
async fn replayed(state: &ServerState, session: &[u8], txn: i64) -> Result<Option<Document>> {
    match state.retries.lookup(session, txn)? {
        retry::Lookup::Replay(reply) => return Ok(Some(reply)),
        retry::Lookup::Run => return Ok(None),
        retry::Lookup::Unknown => {}
    }
    let Some(record) = state.router.session_record(session).await? else {
        return Ok(None);
    };
    retry::check_newest(txn, record.txn_number)?;
    if txn > record.txn_number {
        return Ok(None);
    }
    match record.outcome {
        Outcome::Replied(reply) => Ok(Some(reply)),
        Outcome::Applied | Outcome::Committed => Err(Error::new(
            ErrorCode::IncompleteTransactionHistory,
            format!(
                "Retryable write with txnNumber {txn} was applied, but the server stopped \
                 before its reply was recorded; it is not applied again"
            ),
        )),
    }
}

/// Commands only `--enable-test-commands` offers.
const TEST_COMMANDS: &[&str] = &["configureFailPoint"];

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{rawdoc, Binary, RawDocumentBuf, Timestamp};

    #[test]
    fn commands_are_named_by_namespace_and_waits_are_never_slow() {
        let ns = |body: Document| (!waits_by_design(&body)).then(|| Target::of(&body).to_string());
        assert_eq!(ns(doc! {"find": "c", "$db": "shop"}), Some("shop.c".into()));
        assert_eq!(
            ns(doc! {"ping": 1, "$db": "admin"}),
            Some("admin.$cmd".into())
        );
        assert_eq!(
            ns(doc! {"getMore": 7_i64, "collection": "c", "$db": "shop"}),
            Some("shop.c".into())
        );
        assert_eq!(
            ns(doc! {"hello": 1, "maxAwaitTimeMS": 10_000, "$db": "admin"}),
            None
        );
        assert_eq!(
            ns(doc! {"getMore": 7_i64, "collection": "c", "maxAwaitTimeMS": 500, "$db": "shop"}),
            None
        );
    }

    #[test]
    fn the_cluster_time_is_written_as_the_bson_encoder_writes_it() {
        let time = Timestamp {
            time: 1_790_000_000,
            increment: 7,
        };
        let reply = doc! {"ok": 1.0, "n": 2};
        let mut bytes = reply.to_vec().unwrap();
        bytes.pop();
        append_cluster_time(&mut bytes, time);
        bytes.push(0);
        let len = bytes.len() as i32;
        bytes[..4].copy_from_slice(&len.to_le_bytes());

        let mut expected = RawDocumentBuf::try_from(&reply).unwrap();
        expected.append(
            bson::raw::cstr!("$clusterTime"),
            rawdoc! {
                "clusterTime": time,
                "signature": {
                    "hash": Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0; 20] },
                    "keyId": 0i64,
                },
            },
        );
        expected.append(bson::raw::cstr!("operationTime"), time);
        assert_eq!(bytes, expected.into_bytes());
    }
}
