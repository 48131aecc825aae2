//! Cosmos DB's extension commands, `{customAction: ...}`:
//! `CreateDatabase`, `UpdateDatabase`, `GetDatabase`, `CreateCollection`,
//! `UpdateCollection` and `GetCollection`, as Azure Cosmos DB for MongoDB
//! documents them. They set the throughput the router provisions
//! ([`crate::router::provision`]), a collection's shard key (a path
//! string) and its whole index set.
//!
//! Each action parses its arguments fully, then calls the router. A
//! failure is MongoDB-shaped (`errmsg`, `code`, `codeName`) and also
//! carries `errMsg`, the field Cosmos DB's replies use.

use bson::{doc, Bson, Document};

use super::args::{self, opt_str};
use super::request::Request;
use crate::error::{Error, ErrorCode, Result};
use crate::index::{Index, ID_INDEX_NAME};
use crate::partition::ShardKey;
use crate::router::provision::{check_unsharded, Throughput};
use crate::router::sharding::Sharded;
use crate::router::Namespace;
use crate::{bail, err};

const CMD: &str = "customAction";

/// `customAction`: runs the named action.
pub async fn custom_action(req: &Request<'_>) -> Result<Document> {
    run(req).await.map_err(with_err_msg)
}

async fn run(req: &Request<'_>) -> Result<Document> {
    let action = opt_str(CMD, &req.body, CMD)?.unwrap_or_default();
    match action {
        "CreateDatabase" => create_database(req).await,
        "UpdateDatabase" => update_database(req).await,
        "GetDatabase" => get_database(req),
        "CreateCollection" => create_collection(req).await,
        "UpdateCollection" => update_collection(req).await,
        "GetCollection" => get_collection(req),
        "GetChangeStreamTokens" => get_change_stream_tokens(req),
        other => Err(err!(
            CommandNotFound,
            "customAction '{other}' is not supported; use CreateDatabase, UpdateDatabase, GetDatabase, CreateCollection, UpdateCollection, GetCollection or GetChangeStreamTokens"
        )),
    }
}

/// `GetChangeStreamTokens`: one resume token per physical partition of
/// `collection`, from now or `startAtOperationTime`; a stream resumed
/// from one follows that partition's changes (`resumeAfterTokens`).
fn get_change_stream_tokens(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["collection", "startAtOperationTime"])?;
    let ns = collection_arg(req)?;
    let start_at = match req.body.get("startAtOperationTime") {
        None => None,
        Some(Bson::Timestamp(ts)) => Some(*ts),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field 'customAction.startAtOperationTime' is the wrong type '{}', expected type 'timestamp'",
            crate::query::compare::type_name(other)
        ),
    };
    let tokens = crate::router::change_stream::partition_tokens(&req.state.router, &ns, start_at)?;
    Ok(doc! {"resumeAfterTokens": tokens})
}

/// Adds Cosmos DB's `errMsg` beside MongoDB's `errmsg`.
fn with_err_msg(mut e: Error) -> Error {
    let mut extra = e.extra.take().unwrap_or_default();
    extra.insert("errMsg", e.message.clone());
    e.with_extra(extra)
}

/// The throughput fields of an action: `offerThroughput` (manual) or
/// `autoScaleSettings: {maxThroughput}`, never both.
fn throughput_arg(body: &Document) -> Result<Option<Throughput>> {
    let manual = args::opt_i64(CMD, body, "offerThroughput")?;
    let autoscale = match args::opt_document(CMD, body, "autoScaleSettings")? {
        None => None,
        Some(settings) => match args::opt_i64(CMD, settings, "maxThroughput")? {
            Some(max) => Some(max),
            None => bail!(
                BadValue,
                "autoScaleSettings needs maxThroughput, the most RU/s the throughput scales up to"
            ),
        },
    };
    match (manual, autoscale) {
        (Some(_), Some(_)) => bail!(
            BadValue,
            "offerThroughput and autoScaleSettings cannot both be given: provision either manual or autoscale throughput"
        ),
        (Some(n), None) => Ok(Some(Throughput::manual(n)?)),
        (None, Some(max)) => Ok(Some(Throughput::autoscale(max)?)),
        (None, None) => Ok(None),
    }
}

fn collection_arg(req: &Request<'_>) -> Result<Namespace> {
    match opt_str(CMD, &req.body, "collection")? {
        Some(c) => Namespace::new(&req.db, c),
        None => Err(Error::new(
            ErrorCode::MissingField,
            "BSON field 'customAction.collection' is missing but a required field",
        )),
    }
}

/// The `indexes` argument: index specifications as `createIndexes`
/// takes them, which must include one on `_id`. Returns them without it.
fn indexes_arg(body: &Document) -> Result<Option<Vec<Document>>> {
    let Some(list) = args::opt_array(CMD, body, "indexes")? else {
        return Ok(None);
    };
    let mut specs = Vec::with_capacity(list.len());
    let mut has_id = false;
    for item in list {
        let Bson::Document(spec) = item else {
            bail!(
                TypeMismatch,
                "BSON field 'customAction.indexes' must hold index specifications (objects), found {}",
                args::type_name(item)
            );
        };
        // Parse now: nothing changes unless every specification is good.
        let index = Index::parse(spec, 0)?;
        if index.is_id() {
            has_id = true;
        } else {
            specs.push(spec.clone());
        }
    }
    if !has_id {
        bail!(
            BadValue,
            "indexes must include an index on _id, such as {{key: {{_id: 1}}, name: \"_id_\"}}"
        );
    }
    Ok(Some(specs))
}

fn check_db(db: &str) -> Result<()> {
    crate::router::catalog::validate_db_name(db)?;
    if matches!(db, "admin" | "local" | "config") {
        bail!(
            InvalidOptions,
            "customAction cannot change the {db} database"
        );
    }
    Ok(())
}

async fn create_database(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["offerThroughput", "autoScaleSettings"])?;
    check_db(&req.db)?;
    let throughput = throughput_arg(&req.body)?;
    req.state
        .router
        .create_database(&req.db, throughput)
        .await?;
    Ok(Document::new())
}

async fn update_database(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["offerThroughput", "autoScaleSettings"])?;
    check_db(&req.db)?;
    let Some(throughput) = throughput_arg(&req.body)? else {
        bail!(
            BadValue,
            "UpdateDatabase needs offerThroughput or autoScaleSettings"
        );
    };
    req.state
        .router
        .update_database(&req.db, throughput)
        .await?;
    Ok(Document::new())
}

fn get_database(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &[])?;
    let router = &req.state.router;
    if !router.database_exists(&req.db) {
        bail!(NamespaceNotFound, "Database {} not found.", req.db);
    }
    let mut reply = doc! {"database": &req.db};
    if let Some(t) = router.database_settings(&req.db).and_then(|s| s.throughput) {
        reply.extend(t.reply_fields());
    }
    Ok(reply)
}

async fn create_collection(req: &Request<'_>) -> Result<Document> {
    args::check_fields(
        req,
        &[
            "collection",
            "shardKey",
            "offerThroughput",
            "autoScaleSettings",
            "indexes",
        ],
    )?;
    let ns = collection_arg(req)?;
    check_db(&ns.db)?;
    let key = match opt_str(CMD, &req.body, "shardKey")? {
        Some(path) => {
            if ns.coll.starts_with("system.") {
                bail!(IllegalOperation, "can't shard {ns}");
            }
            Some(ShardKey::new(path)?)
        }
        None => None,
    };
    let throughput = throughput_arg(&req.body)?;
    if let (None, Some(t)) = (&key, throughput) {
        check_unsharded(&ns, t)?;
    }
    let indexes = indexes_arg(&req.body)?;
    let router = req.state.router.clone();
    if router.collection(&ns).is_some() {
        bail!(NamespaceExists, "Collection {ns} already exists.");
    }
    match key {
        Some(key) => {
            // As many partitions as the throughput needs, else the default.
            let partitions = throughput.map(Throughput::partitions_needed);
            let seq = match router.shard_collection(&ns, key, partitions).await? {
                Sharded::Done(_, seq) => seq,
                Sharded::AlreadyOnKey(_) => {
                    bail!(NamespaceExists, "Collection {ns} already exists.")
                }
            };
            router.durable(seq).await?;
        }
        None => router.create_collection(&ns, Document::new()).await?,
    }
    if let Some(t) = throughput {
        router.provision_collection(&ns, t).await?;
    }
    if let Some(specs) = indexes.filter(|s| !s.is_empty()) {
        let created = router.create_indexes(&ns, &specs).await?;
        router.durable(created.seq).await?;
    }
    Ok(Document::new())
}

async fn update_collection(req: &Request<'_>) -> Result<Document> {
    args::check_fields(
        req,
        &[
            "collection",
            "offerThroughput",
            "autoScaleSettings",
            "indexes",
        ],
    )?;
    let ns = collection_arg(req)?;
    let throughput = throughput_arg(&req.body)?;
    let indexes = indexes_arg(&req.body)?;
    let router = req.state.router.clone();
    let Some(coll) = router.collection(&ns) else {
        bail!(NamespaceNotFound, "Collection {ns} not found.");
    };
    if let Some(t) = throughput {
        let shared = router
            .database_settings(&ns.db)
            .is_some_and(|s| s.throughput.is_some());
        if coll.throughput().is_none() && shared {
            bail!(
                BadValue,
                "Collection {ns} shares the throughput of database {}; change it with UpdateDatabase",
                ns.db
            );
        }
        router.provision_collection(&ns, t).await?;
    }
    if let Some(specs) = indexes {
        replace_indexes(req, &ns, specs).await?;
    }
    Ok(Document::new())
}

/// Makes `specs` (and `_id`) the whole index set of `ns`: drops every
/// index no specification names with the same key and options, then
/// creates those missing.
async fn replace_indexes(req: &Request<'_>, ns: &Namespace, specs: Vec<Document>) -> Result<()> {
    let router = &req.state.router;
    let mut wanted = Vec::with_capacity(specs.len());
    for spec in &specs {
        wanted.push(Index::parse(spec, 0)?);
    }
    let dropped = router
        .drop_indexes(ns, |current| {
            Ok(current
                .iter()
                .filter(|i| i.name != ID_INDEX_NAME)
                .filter(|i| {
                    !wanted
                        .iter()
                        .any(|w| w.name == i.name && w.same_key(i) && w.same_options(i))
                })
                .map(|i| i.number)
                .collect())
        })
        .await?;
    if let Some((_, seq)) = dropped {
        router.durable(seq).await?;
    }
    if !specs.is_empty() {
        let created = router.create_indexes(ns, &specs).await?;
        router.durable(created.seq).await?;
    }
    Ok(())
}

fn get_collection(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["collection"])?;
    let ns = collection_arg(req)?;
    let router = &req.state.router;
    let Some(coll) = router.collection(&ns) else {
        bail!(NamespaceNotFound, "Collection {ns} not found.");
    };
    let mut reply = doc! {"database": &ns.db, "collection": &ns.coll};
    if let Some(s) = &coll.sharding {
        reply.insert("shardKeyDefinition", s.key.pattern());
    }
    if let Some(t) = router.stored_throughput(&coll) {
        reply.extend(t.reply_fields());
    }
    // Not in Cosmos DB's reply: how many physical partitions serve it.
    let partitions = coll
        .sharding
        .as_ref()
        .map_or(1, |s| s.map().partitions.len() as i64);
    reply.insert("partitions", partitions);
    Ok(reply)
}
