//! Sharding commands: `enableSharding`, `shardCollection`, moving a
//! partition to another server (`moveChunk`, `moveRange`), adding and
//! draining servers of a fleet (`addShard`, `removeShard`), and the
//! cluster views mongosh's `sh.*` helpers read (`listShards`,
//! `balancerStatus`). Cosmos DB's `customAction` commands are in
//! [`super::custom_action`].

use bson::{doc, Bson, Document};

use super::args::{self, opt_document};
use super::request::Request;
use crate::bail;
use crate::error::{Error, ErrorCode, Result};
use crate::partition::{ShardKey, MAX_INITIAL_PARTITIONS};
use crate::router::sharding::Drain;
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
    super::views::refuse(&req.state.router, &ns).await?;
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
    shard_key_collation(&router, &ns, b)?;
    time_series_key(req, &ns, &key.path).await?;
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

/// The shard key index compares by bytes: MongoDB requires
/// `collation: {locale: "simple"}` when the collection's default is
/// another, and refuses any other `collation`.
fn shard_key_collation(
    router: &crate::router::SharedRouter,
    ns: &Namespace,
    b: &Document,
) -> Result<()> {
    let given = match b.get("collation") {
        None => None,
        Some(value) => Some(crate::query::collation::Collation::parse(value)?),
    };
    if let Some(Some(c)) = &given {
        bail!(
            BadValue,
            "The collation for shardCollection must be {{locale: 'simple'}}, but found: {}",
            c.spec()
        );
    }
    if given.is_none() {
        if let Some(default) = super::collation::collection_default(router, ns)? {
            bail!(
                BadValue,
                "Collection has default collation: {}. Must specify collation {{locale: 'simple'}}.",
                default.spec()
            );
        }
    }
    Ok(())
}

/// For a time-series collection (or one `shardCollection` creates with
/// its `timeseries` option), checks that the key is the meta field or a
/// field under it: measurements are partitioned by their source, as
/// MongoDB requires (its other choice, a range key on the time field, is
/// not a hashed key).
async fn time_series_key(req: &Request<'_>, ns: &Namespace, path: &str) -> Result<()> {
    let router = &req.state.router;
    let timeseries = match router.collection(ns) {
        Some(coll) => coll.options().timeseries.clone(),
        None => match req.body.get("timeseries") {
            None | Some(Bson::Null) => None,
            Some(spec) => {
                let options =
                    super::timeseries::create_options(&doc! {"timeseries": spec.clone()})?;
                let ts = crate::router::timeseries::TimeSeries::of_options(&options);
                check_time_series_key(ts.as_ref(), path)?;
                let default_index = super::timeseries::default_index(&options);
                router.create_collection(ns, options).await?;
                if let Some(spec) = default_index {
                    let created = router.create_indexes(ns, &[spec]).await?;
                    router.durable(created.seq).await?;
                }
                return Ok(());
            }
        },
    };
    check_time_series_key(timeseries.as_ref(), path)
}

fn check_time_series_key(
    ts: Option<&crate::router::timeseries::TimeSeries>,
    path: &str,
) -> Result<()> {
    let Some(ts) = ts else {
        return Ok(());
    };
    let on_meta = ts.meta_field.as_deref().is_some_and(|meta| {
        path == meta || path.strip_prefix(meta).is_some_and(|r| r.starts_with('.'))
    });
    if !on_meta {
        bail!(
            BadValue,
            "the shard key of a time-series collection must be its metaField ({}) or a field \
             under it; '{path}' is not",
            ts.meta_field.as_deref().unwrap_or("none")
        );
    }
    Ok(())
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

/// `addShard`: `{addShard: "postgresql://…"}` adds a PostgreSQL server to
/// the fleet (where mongos takes a replica set's `host:port`, a fleet takes
/// the server's connection string, as `--postgres` does).
pub async fn add_shard(req: &Request<'_>) -> Result<Document> {
    let Some(Bson::String(url)) = req.body.get("addShard") else {
        bail!(
            TypeMismatch,
            "BSON field 'addShard.addShard' is the wrong type, expected type 'string'"
        );
    };
    let name = req.state.router.add_shard(url).await?;
    Ok(doc! {"shardAdded": name})
}

/// `removeShard`: `{removeShard: "shard<N>"}`, run until it says
/// `completed`: the first call starts draining the server, later ones
/// report the partitions left, the last removes it.
pub async fn remove_shard(req: &Request<'_>) -> Result<Document> {
    let Some(Bson::String(name)) = req.body.get("removeShard") else {
        bail!(
            TypeMismatch,
            "BSON field 'removeShard.removeShard' is the wrong type, expected type 'string'"
        );
    };
    Ok(match req.state.router.remove_shard(name).await? {
        Drain::Started => doc! {
            "msg": "draining started successfully",
            "state": "started",
            "shard": name,
            "note": "the shard's partitions move to the other shards",
            "dbsToMove": [],
        },
        Drain::Ongoing { partitions } => doc! {
            "msg": "draining ongoing",
            "state": "ongoing",
            "remaining": {
                "chunks": partitions as i64,
                "dbs": 0_i64,
                "jumboChunks": 0_i64,
            },
            "note": "the shard's partitions move to the other shards",
            "dbsToMove": [],
        },
        Drain::Completed => doc! {
            "msg": "removeshard completed successfully",
            "state": "completed",
            "shard": name,
        },
    })
}

/// `balancerStatus`: partitions split by themselves; there is no
/// balancer round to report.
pub async fn balancer_status(_req: &Request<'_>) -> Result<Document> {
    Ok(doc! {"mode": "full", "inBalancerRound": false, "numBalancerRounds": 0_i64})
}

/// The namespace a sharding command names in its first field.
fn named_namespace(req: &Request<'_>) -> Result<Namespace> {
    match req.body.get(&req.name) {
        Some(Bson::String(s)) => Namespace::parse(s),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{0}.{0}' is the wrong type '{1}', expected type 'string'",
            req.name,
            args::type_name(other)
        ),
        None => bail!(FailedToParse, "{} needs a namespace", req.name),
    }
}

/// The hash a chunk bound `{key: NumberLong(h)}` starts at.
fn bound_hash(cmd: &str, bound: &Document) -> Result<i64> {
    match bound.iter().next().map(|(_, v)| v) {
        Some(Bson::MinKey) => Ok(i64::MIN),
        Some(v) => match args::number_as_i64(v) {
            Some(h) => Ok(h),
            None => bail!(
                InvalidOptions,
                "{cmd}: a bound of a hashed shard key is a NumberLong hash, got {bound}"
            ),
        },
        None => bail!(InvalidOptions, "{cmd}: an empty bound"),
    }
}

/// The shard a move goes to, from `field`.
fn destination<'a>(req: &'a Request<'_>, field: &str) -> Result<&'a str> {
    match args::opt_str(&req.name, &req.body, field)? {
        Some(to) => Ok(to),
        None => Err(Error::new(
            ErrorCode::MissingField,
            format!(
                "BSON field '{}.{field}' is missing but a required field",
                req.name
            ),
        )),
    }
}

/// `moveChunk`: `{moveChunk: "db.coll", find: {key: value} | bounds:
/// [{key: min}, {key: max}], to: "shard<N>"}`: moves the partition
/// holding that key value (or starting at that bound) to server N.
pub async fn move_chunk(req: &Request<'_>) -> Result<Document> {
    args::check_fields(
        req,
        &[
            "find",
            "bounds",
            "to",
            "_secondaryThrottle",
            "writeConcern",
            "_waitForDelete",
            "forceJumbo",
        ],
    )?;
    let ns = named_namespace(req)?;
    let to = destination(req, "to")?.to_string();
    let router = req.state.router.clone();
    let hash = match (req.body.get("find"), req.body.get("bounds")) {
        (Some(Bson::Document(find)), None) => {
            let Some(coll) = router.collection(&ns) else {
                bail!(NamespaceNotFound, "Collection {ns} not found");
            };
            let Some(sharding) = &coll.sharding else {
                bail!(NamespaceNotSharded, "Collection {ns} is not sharded");
            };
            match sharding.key.value(find)? {
                Some(v) => crate::partition::hash::hash_value(v),
                None => crate::partition::hash::hash_missing(),
            }
        }
        (None, Some(Bson::Array(bounds))) => match bounds.first() {
            Some(Bson::Document(min)) => bound_hash("moveChunk", min)?,
            _ => bail!(
                InvalidOptions,
                "moveChunk: bounds is [{{key: min}}, {{key: max}}]"
            ),
        },
        _ => bail!(
            InvalidOptions,
            "moveChunk needs exactly one of find and bounds"
        ),
    };
    let started = std::time::Instant::now();
    router.move_range(&ns, hash, &to).await?;
    Ok(doc! {"millis": started.elapsed().as_millis() as i64})
}

/// `moveRange`: `{moveRange: "db.coll", min: {key: NumberLong(h)},
/// toShard: "shard<N>"}`: moves the partition starting at `min`.
pub async fn move_range(req: &Request<'_>) -> Result<Document> {
    args::check_fields(
        req,
        &[
            "min",
            "max",
            "toShard",
            "secondaryThrottle",
            "waitForDelete",
            "forceJumbo",
            "writeConcern",
        ],
    )?;
    let ns = named_namespace(req)?;
    let to = destination(req, "toShard")?.to_string();
    let hash = match opt_document("moveRange", &req.body, "min")? {
        Some(min) => bound_hash("moveRange", min)?,
        None => match opt_document("moveRange", &req.body, "max")? {
            Some(max) => bound_hash("moveRange", max)?.saturating_sub(1),
            None => bail!(InvalidOptions, "moveRange needs min or max"),
        },
    };
    req.state.router.move_range(&ns, hash, &to).await?;
    Ok(Document::new())
}
