//! `hello` / `isMaster` / `ismaster`: the handshake. Shardgate presents
//! itself as a mongos of MongoDB 7.0, which makes drivers use sessions
//! and retryable writes and makes mongosh's `sh.*` helpers meaningful.

use bson::{doc, DateTime, Document};

use super::request::Request;
use crate::error::Result;
use crate::wire::{MAX_BSON_OBJECT_SIZE, MAX_MESSAGE_SIZE_BYTES, MAX_WRITE_BATCH_SIZE};

/// Wire versions of MongoDB 7.0.
pub const MIN_WIRE_VERSION: i32 = 0;
pub const MAX_WIRE_VERSION: i32 = 21;

pub async fn hello(req: &Request<'_>) -> Result<Document> {
    let mut reply = Document::new();
    if req.name == "hello" {
        reply.insert("isWritablePrimary", true);
    } else {
        reply.insert("ismaster", true);
    }
    reply.extend(doc! {
        "msg": "isdbgrid",
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
    if req.body.contains_key("saslSupportedMechs") {
        reply.insert("saslSupportedMechs", Vec::<bson::Bson>::new());
    }
    Ok(reply)
}
