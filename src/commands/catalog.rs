//! Catalog commands: `listDatabases`, `listCollections`, `create`,
//! `drop`, `dropDatabase`, `renameCollection`, `collStats`, `dbStats`.

use bson::{doc, Bson, Document};

use super::args::{bool_or, collection_namespace, opt_document, opt_str};
use super::request::Request;
use crate::cursor::{cursor_batch_size, reply_with_cursor};
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::router::{Collection, Namespace};

pub async fn list_databases(req: &Request<'_>) -> Result<Document> {
    let b = &req.body;
    let name_only = bool_or("listDatabases", b, "nameOnly", false)?;
    let filter = opt_document("listDatabases", b, "filter")?
        .map(Filter::parse)
        .transpose()?;
    let router = &req.state.router;
    let mut dbs: Vec<(String, u64)> = Vec::new();
    for coll in router.collections() {
        let size = if name_only {
            0
        } else {
            router.collection_stats(&coll).await?.size
        };
        match dbs.last_mut() {
            Some((name, total)) if *name == coll.ns.db => *total += size,
            _ => dbs.push((coll.ns.db.clone(), size)),
        }
    }
    // A mongos always lists the cluster's own databases: `admin`, and
    // `config`, which Shardgate generates from its catalog.
    for name in ["admin", "config"] {
        if let Err(at) = dbs.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            dbs.insert(at, (name.to_string(), 0));
        }
    }
    let mut out = Vec::new();
    let mut total = 0u64;
    for (name, size) in dbs {
        let empty = size == 0 && !matches!(name.as_str(), "admin" | "config");
        let entry = if name_only {
            doc! {"name": &name}
        } else {
            doc! {"name": &name, "sizeOnDisk": size as i64, "empty": empty}
        };
        if filter.as_ref().is_some_and(|f| !f.matches(&entry)) {
            continue;
        }
        total += size;
        out.push(Bson::Document(entry));
    }
    if name_only {
        Ok(doc! {"databases": out})
    } else {
        Ok(
            doc! {"databases": out, "totalSize": total as i64, "totalSizeMb": (total / (1024 * 1024)) as i64},
        )
    }
}

fn collection_info(c: &Collection) -> Document {
    let options = c.options();
    if options.timeseries.is_some() {
        // A time-series collection has no `_id` index, as in MongoDB.
        return doc! {
            "name": &c.ns.coll,
            "type": "timeseries",
            "options": options.document.clone(),
            "info": {"readOnly": false},
        };
    }
    doc! {
        "name": &c.ns.coll,
        "type": "collection",
        "options": options.document.clone(),
        "info": {"readOnly": false, "uuid": c.uuid.clone()},
        "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"},
    }
}

pub async fn list_collections(req: &Request<'_>) -> Result<Document> {
    let b = &req.body;
    let name_only = bool_or("listCollections", b, "nameOnly", false)?;
    let filter = opt_document("listCollections", b, "filter")?
        .map(Filter::parse)
        .transpose()?;
    let batch_size = cursor_batch_size("listCollections", b)?;
    let mut out = Vec::new();
    let router = &req.state.router;
    let collections = router.collections_in(&req.db).into_iter();
    let views = super::views::list(router, &req.db).await?.into_iter();
    let infos = collections
        .map(|c| collection_info(&c))
        .chain(views.map(|v| v.info()));
    for info in infos {
        if filter.as_ref().is_some_and(|f| !f.matches(&info)) {
            continue;
        }
        if name_only {
            let mut short = Document::new();
            for field in ["name", "type"] {
                if let Some(v) = info.get(field) {
                    short.insert(field, v.clone());
                }
            }
            out.push(short);
        } else {
            out.push(info);
        }
    }
    let ns = format!("{}.$cmd.listCollections", req.db);
    reply_with_cursor(&req.state.cursors, req.cursor_opener(), ns, out, batch_size)
}

pub async fn create(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("create", &req.db, &req.body)?;
    let capped = super::capped::create_options(&req.body)?;
    if req.body.contains_key("viewOn") || req.body.contains_key("pipeline") {
        return create_view(req, &ns).await;
    }
    if super::views::find(&req.state.router, &ns).await?.is_some() {
        return Err(Error::new(
            ErrorCode::NamespaceExists,
            format!("Namespace {ns} already exists as a view"),
        ));
    }
    let kinds = super::timeseries::create_options(&req.body)?;
    if !kinds.is_empty() && !capped.is_empty() && kinds.contains_key("clusteredIndex") {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "Cannot create a clustered collection that is capped",
        ));
    }
    let mut options = capped;
    options.extend(kinds);
    for (k, v) in &req.body {
        if matches!(
            k.as_str(),
            "validator" | "validationLevel" | "validationAction" | "collation"
        ) {
            options.insert(k.clone(), v.clone());
        }
    }
    if let Some(images) = super::coll_mod::images_option("create", &req.body)? {
        if matches!(images.get_bool("enabled"), Ok(true)) {
            options.insert("changeStreamPreAndPostImages", images);
        }
    }
    super::collation::normalise_create_option(&mut options)?;
    let router = &req.state.router;
    if let Some(existing) = router.collection(&ns) {
        // Creating it again with the same options is a no-op, as in 7.0.
        if existing.options().document == options {
            return Ok(Document::new());
        }
        return Err(Error::new(
            ErrorCode::NamespaceExists,
            format!("Collection {ns} already exists with different options"),
        ));
    }
    let default_index = super::timeseries::default_index(&options);
    router.create_collection(&ns, options).await?;
    if let Some(spec) = default_index {
        let created = router.create_indexes(&ns, &[spec]).await?;
        router.durable(created.seq).await?;
    }
    Ok(Document::new())
}

/// `create` with `viewOn` and `pipeline`: a view. Creating the same view
/// again succeeds; any other namespace already there is 48.
async fn create_view(req: &Request<'_>, ns: &Namespace) -> Result<Document> {
    for field in req.body.keys().skip(1) {
        if !matches!(field.as_str(), "viewOn" | "pipeline" | "collation")
            && !field.starts_with('$')
            && !super::args::GENERIC_FIELDS.contains(&field.as_str())
        {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                format!("option '{field}' is not supported on a view"),
            ));
        }
    }
    let router = &req.state.router;
    if router.collection(ns).is_some() {
        return Err(Error::new(
            ErrorCode::NamespaceExists,
            format!("Namespace already exists: {ns}"),
        ));
    }
    let view = super::views::define(router, "create", ns, &req.body).await?;
    if let Some(existing) = super::views::find(router, ns).await? {
        if existing == view {
            return Ok(Document::new());
        }
        return Err(Error::new(
            ErrorCode::NamespaceExists,
            format!("Namespace already exists: {ns}"),
        ));
    }
    super::views::create(router, &view).await?;
    Ok(Document::new())
}

pub async fn drop(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("drop", &req.db, &req.body)?;
    let router = &req.state.router;
    if router.drop_collection(&ns).await? {
        Ok(doc! {"nIndexesWas": 1, "ns": ns.full()})
    } else if super::views::drop(router, &ns).await? {
        Ok(doc! {"ns": ns.full()})
    } else {
        // Dropping a missing collection succeeds since MongoDB 7.0.
        Ok(doc! {"ns": ns.full()})
    }
}

pub async fn drop_database(req: &Request<'_>) -> Result<Document> {
    req.state.router.drop_database(&req.db).await?;
    Ok(doc! {"dropped": &req.db})
}

pub async fn rename_collection(req: &Request<'_>) -> Result<Document> {
    let b = &req.body;
    let from = opt_str("renameCollection", b, "renameCollection")?
        .ok_or_else(|| Error::failed_to_parse("renameCollection needs a source namespace"))?;
    let to = opt_str("renameCollection", b, "to")?
        .ok_or_else(|| Error::failed_to_parse("renameCollection needs a 'to' namespace"))?;
    let from = Namespace::parse(from)?;
    let to = Namespace::parse(to)?;
    super::views::refuse(&req.state.router, &from).await?;
    let drop_target = bool_or("renameCollection", b, "dropTarget", false)?;
    if from == to {
        return Err(Error::new(
            ErrorCode::IllegalOperation,
            "Can't rename a collection to itself",
        ));
    }
    let router = &req.state.router;
    if router.collection(&from).is_none() {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("Source collection {from} does not exist"),
        ));
    }
    if !drop_target && router.collection(&to).is_some() {
        return Err(Error::new(
            ErrorCode::NamespaceExists,
            "target namespace exists",
        ));
    }
    router.rename_collection(&from, &to, drop_target).await?;
    Ok(Document::new())
}

pub async fn coll_stats(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("collStats", &req.db, &req.body)?;
    let scale = match super::args::opt_i64("collStats", &req.body, "scale")? {
        Some(s) if s < 1 => return Err(Error::bad_value("scale has to be >= 1")),
        Some(s) => s as u64,
        None => 1,
    };
    let router = &req.state.router;
    super::views::refuse(router, &ns).await?;
    let Some(coll) = router.collection(&ns) else {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("Collection [{ns}] not found."),
        ));
    };
    let stats = router.collection_stats(&coll).await?;
    let (nindexes, index_sizes) = super::indexes::index_counts(&coll);
    let avg = stats.size.checked_div(stats.count).unwrap_or(0);
    let mut reply = doc! {
        "ns": ns.full(),
        "sharded": coll.sharding.is_some(),
        "size": (stats.size / scale) as i64,
        "count": stats.count as i64,
        "avgObjSize": avg as i64,
        "storageSize": (stats.size / scale) as i64,
        "freeStorageSize": 0i64,
        "capped": coll.options().capped.is_some(),
        "nindexes": nindexes,
        "indexDetails": {},
        "indexBuilds": [],
        "totalIndexSize": 0i64,
        "totalSize": (stats.size / scale) as i64,
        "indexSizes": index_sizes.clone(),
        "scaleFactor": scale as i64,
    };
    let ids: Vec<u64> = match coll.sharding {
        Some(_) => router
            .partition_stats(&coll)
            .iter()
            .map(|(p, _)| p.id)
            .collect(),
        None => vec![0],
    };
    if let Some(capped) = coll.options().capped {
        reply.insert("maxSize", (capped.size / scale) as i64);
        if let Some(max) = capped.max {
            reply.insert("max", max as i64);
        }
    }
    let units = router.partition_units(&coll, &ids);
    reply.insert(
        "requestUnits",
        doc! {
            "provisioned": router.provisioned_rus(&coll).map_or(0, i64::from),
            "consumed": units.iter().map(|u| u.consumed).sum::<f64>(),
            "throttled": units.iter().map(|u| u.throttled as i64).sum::<i64>(),
        },
    );
    if coll.sharding.is_some() {
        // A mongos's shape: one entry per shard (a partition, or a
        // server holding several).
        let partitions = router.partition_stats(&coll);
        let mut by_shard: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, (p, _)) in partitions.iter().enumerate() {
            let name = router.shard_of(&coll, Some(p));
            match by_shard.iter_mut().find(|(n, _)| *n == name) {
                Some((_, members)) => members.push(i),
                None => by_shard.push((name, vec![i])),
            }
        }
        let mut shards = Document::new();
        for (name, members) in by_shard {
            let (mut count, mut bytes, mut consumed, mut throttled) = (0u64, 0u64, 0f64, 0u64);
            for &i in &members {
                count += partitions[i].1.count;
                bytes += partitions[i].1.bytes;
                if let Some(u) = units.get(i) {
                    consumed += u.consumed;
                    throttled += u.throttled;
                }
            }
            let mut entry = doc! {
                "ns": ns.full(),
                "count": count as i64,
                "size": (bytes / scale) as i64,
                "avgObjSize": bytes.checked_div(count).unwrap_or(0) as i64,
                "storageSize": (bytes / scale) as i64,
                "freeStorageSize": 0i64,
                "capped": false,
                "nindexes": nindexes,
                "totalIndexSize": 0i64,
                "totalSize": (bytes / scale) as i64,
                "indexSizes": index_sizes.clone(),
                "scaleFactor": scale as i64,
                "ok": 1.0,
            };
            let range = |i: usize| doc! {"min": partitions[i].0.min, "max": partitions[i].0.max};
            match members.as_slice() {
                [one] => entry.insert("hashRange", range(*one)),
                many => entry.insert(
                    "hashRanges",
                    many.iter()
                        .map(|&i| Bson::Document(range(i)))
                        .collect::<Vec<_>>(),
                ),
            };
            entry.insert(
                "requestUnits",
                doc! {
                    "provisioned": members
                        .iter()
                        .filter_map(|&i| units.get(i))
                        .map(|u| u.provisioned as i64)
                        .sum::<i64>(),
                    "consumed": consumed,
                    "throttled": throttled as i64,
                },
            );
            shards.insert(name, entry);
        }
        reply.insert("nchunks", partitions.len() as i64);
        reply.insert("shards", shards);
    }
    Ok(reply)
}

pub async fn db_stats(req: &Request<'_>) -> Result<Document> {
    let scale = match super::args::opt_i64("dbStats", &req.body, "scale")? {
        Some(s) if s < 1 => return Err(Error::bad_value("scale has to be >= 1")),
        Some(s) => s as u64,
        None => 1,
    };
    let router = &req.state.router;
    let colls = router.collections_in(&req.db);
    let total = router.total_stats(&colls).await?;
    let (objects, size) = (total.count, total.size);
    Ok(doc! {
        "db": &req.db,
        "collections": colls.len() as i64,
        "views": 0,
        "objects": objects as i64,
        "avgObjSize": if objects > 0 { size as f64 / objects as f64 } else { 0.0 },
        "dataSize": (size / scale) as f64,
        "storageSize": (size / scale) as f64,
        "indexes": colls.len() as i64,
        "indexSize": 0.0,
        "totalSize": (size / scale) as f64,
        "scaleFactor": scale as i64,
    })
}

/// One partition's throughput figures, as `collStats` and `$collStats`
/// show them: its share of the provisioned RU/s (0: not provisioned), the
/// RU charged to it and the requests refused with 16500.
pub fn request_units(u: &crate::router::throttle::PartitionUnits) -> Document {
    doc! {
        "provisioned": u.provisioned as i64,
        "consumed": u.consumed,
        "throttled": u.throttled as i64,
    }
}
