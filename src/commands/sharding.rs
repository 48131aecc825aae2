//! Sharding commands: `enableSharding`, `shardCollection`, the Cosmos DB
//! `customAction` commands, and the cluster views mongosh's `sh.*`
//! helpers read (`listShards`, `balancerStatus`).

use bson::{doc, Bson, Document};

use super::args::{self, opt_document, opt_str};
use super::request::Request;
use crate::error::{Error, ErrorCode, Result};
use crate::partition::{ShardKey, MAX_INITIAL_PARTITIONS};
use crate::router::sharding::Sharded;
use crate::router::Namespace;
use crate::{bail, err};

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

/// Cosmos DB's `customAction` commands: `CreateCollection`,
/// `GetCollection`, `CreateDatabase` and `GetDatabase`. Throughput
/// settings are accepted and shown back.
pub async fn custom_action(req: &Request<'_>) -> Result<Document> {
    let b = &req.body;
    let action = opt_str("customAction", b, "customAction")?.unwrap_or_default();
    match action {
        "CreateCollection" => create_collection(req).await,
        "GetCollection" => get_collection(req),
        "CreateDatabase" => Ok(Document::new()),
        "GetDatabase" => Ok(doc! {"database": &req.db, "provisionedThroughput": 0}),
        other => Err(err!(
            CommandNotFound,
            "customAction '{other}' is not supported; use CreateCollection, GetCollection, CreateDatabase or GetDatabase"
        )),
    }
}

fn collection_arg(req: &Request<'_>) -> Result<Namespace> {
    match opt_str("customAction", &req.body, "collection")? {
        Some(c) => Namespace::new(&req.db, c),
        None => Err(Error::new(
            ErrorCode::MissingField,
            "BSON field 'customAction.collection' is missing but a required field",
        )),
    }
}

async fn create_collection(req: &Request<'_>) -> Result<Document> {
    let ns = collection_arg(req)?;
    let router = req.state.router.clone();
    if router.collection(&ns).is_some() {
        bail!(NamespaceExists, "Collection {ns} already exists.");
    }
    let seq = match opt_str("customAction", &req.body, "shardKey")? {
        Some(path) => {
            check_shardable(&ns)?;
            let key = ShardKey::new(path)?;
            match router.shard_collection(&ns, key, None).await? {
                Sharded::Done(_, seq) => seq,
                Sharded::AlreadyOnKey(_) => 0,
            }
        }
        None => {
            router.create_collection(&ns, Document::new()).await?;
            0
        }
    };
    router.durable(seq).await?;
    Ok(Document::new())
}

fn get_collection(req: &Request<'_>) -> Result<Document> {
    let ns = collection_arg(req)?;
    let Some(coll) = req.state.router.collection(&ns) else {
        bail!(NamespaceNotFound, "Collection {ns} not found.");
    };
    let mut reply = doc! {"database": &ns.db, "collection": &ns.coll, "provisionedThroughput": 0};
    if let Some(s) = &coll.sharding {
        reply.insert("shardKeyDefinition", s.key.pattern());
        reply.insert("partitions", s.map().partitions.len() as i64);
    }
    Ok(reply)
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
