//! `hello` / `isMaster` / `ismaster`: the handshake. Shardgate presents
//! itself as a mongos of MongoDB 7.0, which makes drivers use sessions
//! and retryable writes and makes mongosh's `sh.*` helpers meaningful.
//!
//! It also negotiates wire compression, as mongod's
//! `MessageCompressorManager::serverNegotiate` does on every `hello`: a
//! `compression` list starts over with the names the client offers that
//! `--compressors` allows, in the client's order, and the reply lists
//! them (nothing when none is left); without the field, the reply lists
//! what the connection agreed on before, if anything.
//!
//! Drivers' server monitors use the streaming `hello`: every reply
//! carries a `topologyVersion`, and a `hello` that sends it back with
//! `maxAwaitTimeMS` is answered when the topology changes or that time
//! has passed, as a mongos answers it ([`await_topology_change`]). With
//! OP_MSG's `exhaustAllowed` the connection keeps answering the same
//! request, one reply per wait, without the client asking again
//! ([`next_in_stream`]); the wire loop sends them.

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};

use super::args;
use super::auth;
use super::request::Request;
use super::state::{ConnectionInfo, Topology};
use crate::error::{Error, ErrorCode, Result};
use crate::wire::{MAX_BSON_OBJECT_SIZE, MAX_MESSAGE_SIZE_BYTES, MAX_WRITE_BATCH_SIZE};

/// Wire versions of MongoDB 7.0.
pub const MIN_WIRE_VERSION: i32 = 0;
pub const MAX_WIRE_VERSION: i32 = 21;

pub async fn hello(req: &Request<'_>) -> Result<Document> {
    let offered = offered_compressors(&req.body)?;
    let awaited = awaited_version(&req.body)?;
    if let Some(awaited) = &awaited {
        await_topology_change(&req.state.topology, req.conn, awaited).await?;
    } else if *req.state.topology.stopping().borrow() {
        return Err(quiescing());
    }
    if req.exhaust_allowed && awaited.is_none() {
        return Err(Error::new(
            ErrorCode::ExhaustHelloWithoutMaxAwait,
            "A hello/isMaster request with exhaust must specify 'maxAwaitTimeMS'",
        ));
    }
    if let Ok(name) = req
        .body
        .get_document("client")
        .and_then(|c| c.get_document("application"))
        .and_then(|a| a.get_str("name"))
    {
        req.conn.set_app_name(name);
    }
    let mut reply = Document::new();
    if req.name == "hello" {
        reply.insert("isWritablePrimary", true);
    } else {
        reply.insert("ismaster", true);
    }
    reply.extend(doc! {
        "msg": "isdbgrid",
        "topologyVersion": req.state.topology.version(),
        "maxBsonObjectSize": MAX_BSON_OBJECT_SIZE as i32,
        "maxMessageSizeBytes": MAX_MESSAGE_SIZE_BYTES as i32,
        "maxWriteBatchSize": MAX_WRITE_BATCH_SIZE as i32,
        "localTime": DateTime::now(),
        "logicalSessionTimeoutMinutes": 30,
        "connectionId": req.conn.id as i32,
        "minWireVersion": MIN_WIRE_VERSION,
        "maxWireVersion": MAX_WIRE_VERSION,
        "readOnly": false,
    });
    if matches!(req.body.get("helloOk"), Some(bson::Bson::Boolean(true))) {
        reply.insert("helloOk", true);
    }
    if let Some(asked) = req.body.get("saslSupportedMechs") {
        if let Some(mechs) = auth::supported_mechanisms(req.state, asked).await? {
            reply.insert("saslSupportedMechs", mechs);
        }
    }
    if let Some(spec) = req.body.get("speculativeAuthenticate") {
        if let Some(first) = auth::speculative(req.state, req.conn, spec).await {
            reply.insert("speculativeAuthenticate", first);
        }
    }
    let agreed = match offered {
        Some(names) => {
            let agreed = req.state.config.compressors.agree(names);
            req.conn.set_compressors(agreed);
            agreed
        }
        None => req.conn.compressors(),
    };
    if !agreed.is_empty() {
        reply.insert("compression", agreed.names());
    }
    Ok(reply)
}

/// The topology version a streaming `hello` sent back, and how long it
/// may wait for a newer one.
#[derive(Debug, PartialEq)]
struct AwaitedVersion {
    process_id: ObjectId,
    counter: i64,
    max_await: Duration,
}

/// `topologyVersion` and `maxAwaitTimeMS`: both or neither, checked as a
/// mongos's `hello` parser checks them.
fn awaited_version(body: &Document) -> Result<Option<AwaitedVersion>> {
    let version = match body.get("topologyVersion") {
        None => None,
        Some(Bson::Document(v)) => Some(v),
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'hello.topologyVersion' is the wrong type '{}', expected type 'object'",
                args::type_name(other)
            )))
        }
    };
    let max_await = match body.get("maxAwaitTimeMS") {
        None => None,
        Some(v) => Some(args::number_as_i64(v).ok_or_else(|| {
            Error::type_mismatch(format!(
                "BSON field 'hello.maxAwaitTimeMS' is the wrong type '{}', expected types '[long, int, decimal, double']",
                args::type_name(v)
            ))
        })?),
    };
    let (version, max_await) = match (version, max_await) {
        (Some(version), Some(max_await)) => (version, max_await),
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(Error::new(
                ErrorCode::AwaitableHelloIncomplete,
                "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'",
            ))
        }
        (None, Some(_)) => {
            return Err(Error::new(
                ErrorCode::AwaitableHelloIncomplete,
                "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'",
            ))
        }
    };
    let process_id = match version.get("processId") {
        Some(Bson::ObjectId(id)) => *id,
        None => return Err(missing_version_field("processId")),
        Some(other) => return Err(wrong_version_field("processId", other, "objectId")),
    };
    let counter = match version.get("counter") {
        Some(Bson::Int64(n)) => *n,
        None => return Err(missing_version_field("counter")),
        Some(other) => return Err(wrong_version_field("counter", other, "long")),
    };
    if counter < 0 {
        return Err(Error::new(
            ErrorCode::TopologyCounterNegative,
            "topologyVersion must have a non-negative counter",
        ));
    }
    let Ok(max_await) = u64::try_from(max_await) else {
        return Err(Error::new(
            ErrorCode::MaxAwaitTimeNegative,
            "maxAwaitTimeMS must be a non-negative integer",
        ));
    };
    Ok(Some(AwaitedVersion {
        process_id,
        counter,
        max_await: Duration::from_millis(max_await),
    }))
}

fn missing_version_field(field: &str) -> Error {
    Error::new(
        ErrorCode::MissingField,
        format!("BSON field 'hello.topologyVersion.{field}' is missing but a required field"),
    )
}

fn wrong_version_field(field: &str, value: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field 'hello.topologyVersion.{field}' is the wrong type '{}', expected type '{expected}'",
        args::type_name(value)
    ))
}

/// Waits, as a mongos does, until the topology has moved past `awaited`
/// or its `maxAwaitTimeMS` is over. A version from another process (the
/// server restarted) or an older counter is answered at once; a counter
/// ahead of this process's is an error. Shutdown ends the wait with
/// `ShutdownInProgress`, so monitors learn of it at once; a client that
/// hangs up ends it too (the reply then goes nowhere).
async fn await_topology_change(
    topology: &Topology,
    conn: &ConnectionInfo,
    awaited: &AwaitedVersion,
) -> Result<()> {
    let mut stopping = topology.stopping();
    if *stopping.borrow() {
        return Err(quiescing());
    }
    let counter = topology.counter();
    if awaited.process_id != topology.process_id || awaited.counter < counter {
        return Ok(());
    }
    if awaited.counter > counter {
        return Err(Error::new(
            ErrorCode::TopologyCounterAhead,
            format!(
                "Received a topology version with counter: {} which is greater than the mongos topology version counter: {}",
                awaited.counter, counter
            ),
        ));
    }
    let _awaiting = topology.start_awaiting();
    tokio::select! {
        _ = tokio::time::sleep(awaited.max_await) => Ok(()),
        _ = stopping.changed() => Err(quiescing()),
        _ = client_gone(conn) => Ok(()),
    }
}

/// How often a waiting `hello` asks whether its client is still there.
const CLIENT_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Resolves once the connection's client has hung up.
async fn client_gone(conn: &ConnectionInfo) {
    let Some(probe) = &conn.probe else {
        return std::future::pending().await;
    };
    let mut every = tokio::time::interval(CLIENT_CHECK_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if !probe() {
            return;
        }
    }
}

/// A mongos's answer to `hello` once it has begun to shut down.
fn quiescing() -> Error {
    Error::new(
        ErrorCode::ShutdownInProgress,
        "Mongos is in quiesce mode and will shut down",
    )
    .with_extra(doc! {"remainingQuiesceTimeMillis": 0i64})
}

/// The request the connection answers next, unasked, after replying
/// `reply` to the `hello` `body` that allowed exhaust: the same `hello`,
/// carrying the topology version just reported, while the replies
/// succeed. `None` ends the stream.
pub fn next_in_stream(body: &Document, reply: &Document) -> Option<Document> {
    let streams = matches!(
        body.keys().next().map(String::as_str),
        Some("hello" | "isMaster" | "ismaster")
    );
    if !streams || !body.contains_key("maxAwaitTimeMS") {
        return None;
    }
    let ok = reply.get("ok").and_then(args::number_as_i64) == Some(1);
    let version = reply.get_document("topologyVersion").ok()?;
    if !ok {
        return None;
    }
    let mut next = body.clone();
    next.insert("topologyVersion", version.clone());
    Some(next)
}

/// The names in `compression`, when the client sent it: an array of
/// strings, checked as mongod's `hello` parser checks it.
fn offered_compressors(body: &Document) -> Result<Option<Vec<&str>>> {
    let Some(value) = body.get("compression") else {
        return Ok(None);
    };
    let Bson::Array(items) = value else {
        return Err(Error::type_mismatch(format!(
            "BSON field 'hello.compression' is the wrong type '{}', expected type 'array'",
            args::type_name(value)
        )));
    };
    let names = items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Bson::String(name) => Ok(name.as_str()),
            other => Err(Error::type_mismatch(format!(
                "BSON field 'hello.compression.{i}' is the wrong type '{}', expected type 'string'",
                args::type_name(other)
            ))),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn an_awaitable_hello_sends_both_fields_or_neither() {
        let pid = ObjectId::new();
        assert_eq!(awaited_version(&doc! {"hello": 1}).unwrap(), None);
        assert_eq!(
            awaited_version(&doc! {
                "hello": 1,
                "topologyVersion": {"processId": pid, "counter": 3i64},
                "maxAwaitTimeMS": 10_000.0,
            })
            .unwrap(),
            Some(AwaitedVersion {
                process_id: pid,
                counter: 3,
                max_await: Duration::from_secs(10),
            })
        );
        let code = |body: Document| awaited_version(&body).unwrap_err().code;
        let version = doc! {"processId": pid, "counter": 0i64};
        assert_eq!(
            code(doc! {"topologyVersion": version.clone()}),
            ErrorCode::AwaitableHelloIncomplete
        );
        assert_eq!(
            code(doc! {"maxAwaitTimeMS": 1}),
            ErrorCode::AwaitableHelloIncomplete
        );
        assert_eq!(
            code(doc! {"topologyVersion": version.clone(), "maxAwaitTimeMS": -5}),
            ErrorCode::MaxAwaitTimeNegative
        );
        assert_eq!(
            code(doc! {"topologyVersion": version, "maxAwaitTimeMS": "soon"}),
            ErrorCode::TypeMismatch
        );
        assert_eq!(
            code(
                doc! {"topologyVersion": {"processId": pid, "counter": -1i64}, "maxAwaitTimeMS": 1}
            ),
            ErrorCode::TopologyCounterNegative
        );
        assert_eq!(
            code(
                doc! {"topologyVersion": {"processId": "x", "counter": 0i64}, "maxAwaitTimeMS": 1}
            ),
            ErrorCode::TypeMismatch
        );
        assert_eq!(
            code(doc! {"topologyVersion": {"processId": pid}, "maxAwaitTimeMS": 1}),
            ErrorCode::MissingField
        );
    }

    #[test]
    fn only_a_successful_awaitable_hello_streams_on() {
        let version = doc! {"processId": ObjectId::new(), "counter": 0i64};
        let asked = doc! {
            "hello": 1,
            "topologyVersion": {"processId": ObjectId::new(), "counter": 0i64},
            "maxAwaitTimeMS": 100,
        };
        let ok = doc! {"isWritablePrimary": true, "topologyVersion": version.clone(), "ok": 1.0};
        let next = next_in_stream(&asked, &ok).unwrap();
        assert_eq!(
            next.get("topologyVersion"),
            Some(&Bson::Document(version.clone()))
        );
        assert_eq!(next.get("maxAwaitTimeMS"), asked.get("maxAwaitTimeMS"));
        let failed = doc! {"ok": 0.0, "code": 91, "topologyVersion": version};
        assert_eq!(next_in_stream(&asked, &failed), None);
        assert_eq!(next_in_stream(&doc! {"hello": 1}, &ok), None);
        assert_eq!(
            next_in_stream(&doc! {"ping": 1, "maxAwaitTimeMS": 1}, &ok),
            None
        );
    }

    #[test]
    fn the_offer_must_be_an_array_of_strings() {
        assert_eq!(offered_compressors(&doc! {"hello": 1}).unwrap(), None);
        assert_eq!(
            offered_compressors(&doc! {"compression": ["zstd", "lz4"]}).unwrap(),
            Some(vec!["zstd", "lz4"])
        );
        assert_eq!(
            offered_compressors(&doc! {"compression": []}).unwrap(),
            Some(vec![])
        );
        let e = offered_compressors(&doc! {"compression": "zstd"}).unwrap_err();
        assert_eq!(e.code, ErrorCode::TypeMismatch);
        assert!(e.message.contains("'hello.compression'"), "{}", e.message);
        let e = offered_compressors(&doc! {"compression": ["zstd", 1]}).unwrap_err();
        assert!(e.message.contains("'hello.compression.1'"), "{}", e.message);
    }
}
