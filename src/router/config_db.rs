//! The `config` database, as a mongos serves it: read-only collections
//! generated from the catalog and the partition maps, so that tools
//! written for MongoDB's sharding (`sh.status()`,
//! `getShardDistribution()`, monitoring agents) read the partition layout
//! without knowing about Shardgate.
//!
//! Each partition is presented as a shard holding one chunk: its hash
//! range.

use bson::{doc, oid::ObjectId, Bson, Document, Timestamp};

use super::{Collection, FindSpec, Router, PRIMARY_PARTITION};
use crate::error::Result;
use crate::partition::Partition;
use crate::query::filter::MatchDetails;
use crate::storage::{ServerState, WHOLE_COLLECTION};

/// The `config` collections generated here.
pub const COLLECTIONS: &[&str] = &["chunks", "collections", "databases", "shards", "version"];

/// A stable ObjectId for a generated document: `kind` and two numbers.
fn object_id(kind: u8, a: u64, b: u64) -> ObjectId {
    let mut bytes = [0u8; 12];
    bytes[0] = kind;
    bytes[1..5].copy_from_slice(&(a as u32).to_be_bytes());
    bytes[5..12].copy_from_slice(&b.to_be_bytes()[1..]);
    ObjectId::from_bytes(bytes)
}

/// A UUID derived from a name, the same every time.
fn stable_uuid(name: &str) -> bson::Binary {
    use md5::Digest;
    bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: md5::Md5::digest(name.as_bytes()).to_vec(),
    }
}

/// The name of the shard a server of the store is shown as.
fn server_shard(server: usize) -> String {
    format!("shard{server}")
}

impl Router {
    /// The shard partition `partition` of `coll` is shown on (`None`: an
    /// unsharded collection's one partition): the server holding it when
    /// the store places partitions on servers, else the partition itself.
    pub fn shard_of(&self, coll: &Collection, partition: Option<&Partition>) -> String {
        if self.store.servers().is_some() {
            let id = partition.map_or(WHOLE_COLLECTION, |p| p.id);
            return server_shard(self.store.server_of(coll.id, id).unwrap_or(0));
        }
        match partition {
            Some(p) => p.name().to_string(),
            None => PRIMARY_PARTITION.to_string(),
        }
    }

    /// The address shard `name` answers at.
    pub fn shard_host(&self, name: &str) -> String {
        let servers = self.store.servers().unwrap_or_default();
        name.strip_prefix("shard")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| servers.get(n).map(|s| s.name.clone()))
            .unwrap_or_else(|| self.options.host.clone())
    }
}

/// One document per shard: a server of the store when it places
/// partitions on servers; otherwise one per partition of every sharded
/// collection, and one for the partition that holds unsharded collections.
pub fn shards(router: &Router, host: &str) -> Vec<Document> {
    if let Some(servers) = router.store.servers() {
        return servers
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state != ServerState::Removed)
            .map(|(i, s)| {
                let mut shard = doc! {
                    "_id": server_shard(i),
                    "host": &s.name,
                    "state": 1,
                    "topologyTime": Timestamp { time: 0, increment: 1 },
                };
                if s.state == ServerState::Draining {
                    shard.insert("draining", true);
                }
                shard
            })
            .collect();
    }
    let mut out = vec![doc! {
        "_id": PRIMARY_PARTITION,
        "host": host,
        "state": 1,
        "topologyTime": Timestamp { time: 0, increment: 1 },
    }];
    for coll in router.catalog.list() {
        let Some(s) = &coll.sharding else { continue };
        for p in &s.map().partitions {
            out.push(doc! {
                "_id": p.name().to_string(),
                "host": host,
                "state": 1,
                "topologyTime": s.timestamp,
            });
        }
    }
    out
}

fn collection_entry(coll: &Collection) -> Option<Document> {
    let s = coll.sharding.as_ref()?;
    Some(doc! {
        "_id": coll.ns.full(),
        "lastmodEpoch": s.epoch,
        "lastmod": bson::DateTime::from_millis(s.timestamp.time as i64 * 1000),
        "timestamp": s.timestamp,
        "uuid": coll.uuid.clone(),
        "key": s.key.pattern(),
        "unique": false,
        "noBalance": false,
    })
}

fn chunks_of(router: &Router, coll: &Collection) -> Vec<Document> {
    let Some(s) = &coll.sharding else {
        return Vec::new();
    };
    let map = s.map();
    let last = map.partitions.len().saturating_sub(1);
    map.partitions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let min = if i == 0 {
                Bson::MinKey
            } else {
                Bson::Int64(p.min)
            };
            let max = match p.max.checked_add(1) {
                Some(next) if i != last => Bson::Int64(next),
                _ => Bson::MaxKey,
            };
            let lastmod = Timestamp {
                time: map.version as u32,
                increment: i as u32,
            };
            let name = router.shard_of(coll, Some(p));
            doc! {
                "_id": object_id(1, coll.id, p.id),
                "uuid": coll.uuid.clone(),
                "min": { s.key.path.clone(): min },
                "max": { s.key.path.clone(): max },
                "shard": &name,
                "lastmod": lastmod,
                "onCurrentShardSince": s.timestamp,
                "history": [{"validAfter": s.timestamp, "shard": &name}],
            }
        })
        .collect()
}

/// The documents of `config.<name>`, or `None` for a collection that is
/// not generated.
pub fn documents(router: &Router, name: &str, host: &str) -> Option<Vec<Document>> {
    let colls = router.catalog.list();
    Some(match name {
        "collections" => colls.iter().filter_map(|c| collection_entry(c)).collect(),
        "chunks" => colls.iter().flat_map(|c| chunks_of(router, c)).collect(),
        "shards" => shards(router, host),
        "databases" => {
            let mut dbs: Vec<&str> = colls
                .iter()
                .map(|c| c.ns.db.as_str())
                .filter(|d| !matches!(*d, "admin" | "config" | "local"))
                .collect();
            dbs.dedup();
            dbs.into_iter()
                .map(|db| {
                    doc! {
                        "_id": db,
                        "primary": PRIMARY_PARTITION,
                        "partitioned": true,
                        "version": {
                            "uuid": stable_uuid(db),
                            "timestamp": Timestamp { time: 0, increment: 1 },
                            "lastMod": 1,
                        },
                    }
                })
                .collect()
        }
        // `currentVersion: 5` tells mongosh there is no balancer action
        // log to read.
        "version" => vec![doc! {
            "_id": 1,
            "minCompatibleVersion": 5,
            "currentVersion": 5,
            "clusterId": object_id(3, 0, 0),
        }],
        _ => return None,
    })
}

/// Runs a find over generated documents: filter, sort, skip, limit and
/// projection, in memory (they are few).
pub fn find(docs: Vec<Document>, spec: &FindSpec) -> Result<Vec<Document>> {
    let mut out = Vec::new();
    for d in docs {
        if spec.filter.as_ref().is_none_or(|f| f.matches(&d)) {
            out.push(d);
        }
    }
    if let Some(sort) = &spec.sort {
        out.sort_by(|a, b| sort.compare(a, b));
    }
    let skip = usize::try_from(spec.skip).unwrap_or(usize::MAX);
    let limit = spec
        .limit
        .filter(|&l| l > 0)
        .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
        .unwrap_or(usize::MAX);
    out.into_iter()
        .skip(skip)
        .take(limit)
        .map(|d| match &spec.projection {
            Some(p) => p.apply(&d, &MatchDetails::default()),
            None => Ok(d),
        })
        .collect()
}
