//! Sharding commands: `enableSharding`, `shardCollection`, and the
//! cluster views mongosh's `sh.*` helpers read (`listShards`,
//! `balancerStatus`). Cosmos DB's `customAction` commands are in
//! [`super::custom_action`].

use bson::{doc, Bson, Document};

use super::args::{self, opt_document};
use super::request::Request;
use crate::bail;
use crate::error::{Error, ErrorCode, Result};
use crate::partition::{ShardKey, MAX_INITIAL_PARTITIONS};
use crate::router::sharding::Sharded;
use crate::router::Namespace;

/// `enableSharding`: every database can hold sharded collections, so
/// this only checks the name.
pub async fn enable_sharding(req: &Request<'_>) -> Result<Document> {
    let Some(Bson::String(db)) = req.body.get(&req.name) else {
        bail!(
            TypeMismatch,
            "BSON field 'enableSharding.enableSharding' is the wrong type, expected type 'string'"
        );
    };
    crate::router::catalog::validate_db_name(db)?;
    if matches!(db.as_str(), "admin" | "local" | "config") {
        bail!(
            InvalidOptions,
            "Cannot enable sharding on the {db} database"
        );
    }
    Ok(Document::new())
}

/// Databases whose collections cannot be sharded.
fn check_shardable(ns: &Namespace) -> Result<()> {
    if matches!(ns.db.as_str(), "admin" | "local" | "config") || ns.coll.starts_with("system.") {
        bail!(IllegalOperation, "can't shard {ns}");
    }
    Ok(())
}

/// `shardCollection`: `{shardCollection: "db.coll", key: {field:
/// "hashed"}, numInitialChunks, unique}`.
pub async fn shard_collection(req: &Request<'_>) -> Result<Document> {
    args::check_fields(
        req,
        &[
            "key",
            "unique",
            "numInitialChunks",
            "presplitHashedZones",
            "collation",
            "timeseries",
            "implicitlyCreateIndex",
            "enforceUniquenessCheck",
        ],
    )?;
    let b = &req.body;
    let ns = match b.get(&req.name) {
        Some(Bson::String(s)) => Namespace::parse(s)?,
        Some(other) => bail!(
            TypeMismatch,
            "BSON field 'shardCollection.shardCollection' is the wrong type '{}', expected type 'string'",
            args::type_name(other)
        ),
        None => bail!(FailedToParse, "shardCollection needs a namespace"),
    };
    check_shardable(&ns)?;
    let Some(pattern) = opt_document("shardCollection", b, "key")? else {
        return Err(Error::new(
            ErrorCode::MissingField,
            "BSON field 'shardCollection.key' is missing but a required field",
        ));
    };
    let key = ShardKey::parse(pattern)?;
    if args::bool_or("shardCollection", b, "unique", false)? {
        bail!(
            InvalidOptions,
            "Hashed shard keys cannot be declared unique. It's possible to ensure uniqueness on the hashed field by declaring an additional (non-hashed) unique index on the field."
        );
    }
    let partitions = match b.get("numInitialChunks") {
        None => None,
        Some(v) => match args::number_as_i64(v) {
            Some(0) => None,
            Some(n) if n > 0 && (n as u64) <= MAX_INITIAL_PARTITIONS => Some(n as u64),
            Some(n) => bail!(
                InvalidOptions,
                "numInitialChunks cannot be more than {MAX_INITIAL_PARTITIONS} or negative; got {n}"
            ),
            None => bail!(
                TypeMismatch,
                "BSON field 'shardCollection.numInitialChunks' is the wrong type '{}', expected type 'long'",
                args::type_name(v)
            ),
        },
    };
    let router = req.state.router.clone();
    let outcome = router.shard_collection(&ns, key, partitions).await?;
    let (coll, seq) = match outcome {
        Sharded::Done(coll, seq) => (coll, seq),
        Sharded::AlreadyOnKey(coll) => (coll, 0),
    };
    router.durable(seq).await?;
    Ok(doc! {
        "_t": "ShardCollectionResponse",
        "collectionsharded": ns.full(),
        "collectionUUID": coll.uuid.clone(),
    })
}

/// `listShards`: every partition, as a mongos lists its shards.
pub async fn list_shards(req: &Request<'_>) -> Result<Document> {
    let router = &req.state.router;
    let shards: Vec<Bson> = crate::router::config_db::shards(router, router.host())
        .into_iter()
        .map(Bson::Document)
        .collect();
    Ok(doc! {"shards": shards})
}

/// `balancerStatus`: partitions split by themselves; there is no
/// balancer round to report.
pub async fn balancer_status(_req: &Request<'_>) -> Result<Document> {
    Ok(doc! {"mode": "full", "inBalancerRound": false, "numBalancerRounds": 0_i64})
}
