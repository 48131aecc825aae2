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

use bson::{doc, Bson, DateTime, Document};

use super::args;
use super::request::Request;
use crate::error::{Error, Result};
use crate::wire::{MAX_BSON_OBJECT_SIZE, MAX_MESSAGE_SIZE_BYTES, MAX_WRITE_BATCH_SIZE};

/// Wire versions of MongoDB 7.0.
pub const MIN_WIRE_VERSION: i32 = 0;
pub const MAX_WIRE_VERSION: i32 = 21;

pub async fn hello(req: &Request<'_>) -> Result<Document> {
    let offered = offered_compressors(&req.body)?;
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
