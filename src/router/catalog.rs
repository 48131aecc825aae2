//! The catalog: which collections exist, their ids and options.
//!
//! Collection metadata is stored in the engine's catalog space under the
//! namespace (`db.coll`) and kept in memory as a map of [`Collection`]
//! handles. A collection's records are keyed by its numeric id, never by
//! name, so a rename is a metadata change. Ids are never reused: the next
//! id is itself stored, so records of a dropped collection can never be
//! mistaken for a new one's.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use parking_lot::{Mutex, RwLock};

use crate::error::{Error, ErrorCode, Result};
use crate::storage::{SharedEngine, Space, WriteBatch};
use crate::{bail, err};

const NEXT_ID_KEY: &[u8] = b"\0next-collection-id";
const NS_PREFIX: &[u8] = b"ns:";

/// A validated `db.collection` namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace {
    pub db: String,
    pub coll: String,
}

impl Namespace {
    pub fn new(db: &str, coll: &str) -> Result<Namespace> {
        validate_db_name(db)?;
        if coll.is_empty() {
            bail!(InvalidNamespace, "Invalid namespace specified '{db}.'");
        }
        if coll.contains('\0') || coll.contains('$') {
            bail!(
                InvalidNamespace,
                "Invalid collection name: '{coll}': collection names must not contain '$' or null characters"
            );
        }
        if db.len() + 1 + coll.len() > 255 {
            bail!(
                InvalidNamespace,
                "Fully qualified namespace is too long: {db}.{coll}"
            );
        }
        Ok(Namespace {
            db: db.to_string(),
            coll: coll.to_string(),
        })
    }

    /// Parses `"db.coll"`.
    pub fn parse(full: &str) -> Result<Namespace> {
        match full.split_once('.') {
            Some((db, coll)) => Namespace::new(db, coll),
            None => Err(err!(
                InvalidNamespace,
                "Invalid namespace specified '{full}'"
            )),
        }
    }

    pub fn full(&self) -> String {
        format!("{}.{}", self.db, self.coll)
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.db, self.coll)
    }
}

/// Checks a database name the way MongoDB does.
pub fn validate_db_name(db: &str) -> Result<()> {
    if db.is_empty() {
        bail!(InvalidNamespace, "Invalid empty database name");
    }
    if db.len() >= 64 {
        bail!(InvalidNamespace, "db name is too long: {db}");
    }
    if db
        .chars()
        .any(|c| matches!(c, '/' | '\\' | '.' | ' ' | '"' | '$' | '\0'))
    {
        bail!(InvalidNamespace, "Invalid database name: '{db}'");
    }
    Ok(())
}

/// A collection as the router sees it.
#[derive(Debug)]
pub struct Collection {
    pub ns: Namespace,
    /// The numeric id its records are keyed by.
    pub id: u64,
    pub uuid: Binary,
    pub options: Document,
    /// Serializes read-modify-write operations on this collection. Held
    /// only for synchronous work, never across `.await`.
    pub write_lock: Mutex<()>,
    /// Set under `write_lock` when the collection is dropped; writers that
    /// raced with the drop see it and re-resolve the namespace.
    pub dropped: AtomicBool,
}

impl Collection {
    pub fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    fn meta_document(&self) -> Document {
        doc! {
            "ns": self.ns.full(),
            "id": self.id as i64,
            "uuid": self.uuid.clone(),
            "options": self.options.clone(),
        }
    }
}

pub struct Catalog {
    engine: SharedEngine,
    collections: RwLock<BTreeMap<Namespace, Arc<Collection>>>,
    /// Serializes catalog changes (create, drop, rename).
    ddl: Mutex<u64>,
}

fn ns_key(ns: &Namespace) -> Vec<u8> {
    let mut k = NS_PREFIX.to_vec();
    k.extend_from_slice(ns.full().as_bytes());
    k
}

fn new_uuid() -> Binary {
    Binary {
        subtype: BinarySubtype::Uuid,
        bytes: bson::Uuid::new().bytes().to_vec(),
    }
}

impl Catalog {
    /// Loads every collection's metadata from the engine.
    pub fn load(engine: SharedEngine) -> Result<Catalog> {
        let mut collections = BTreeMap::new();
        let mut max_id = 0u64;
        let mut prefix_end = NS_PREFIX.to_vec();
        if let Some(last) = prefix_end.last_mut() {
            *last += 1;
        }
        for item in engine.scan(
            Space::Catalog,
            std::ops::Bound::Included(NS_PREFIX.to_vec()),
            std::ops::Bound::Excluded(prefix_end),
        ) {
            let (_, value) = item?;
            let meta = Document::from_reader(&value[..])
                .map_err(|e| Error::internal(format!("corrupt catalog entry: {e}")))?;
            let ns = Namespace::parse(meta.get_str("ns").unwrap_or_default())?;
            let id = meta.get_i64("id").unwrap_or_default() as u64;
            let uuid = match meta.get("uuid") {
                Some(Bson::Binary(b)) => b.clone(),
                _ => new_uuid(),
            };
            let options = meta.get_document("options").cloned().unwrap_or_default();
            max_id = max_id.max(id);
            collections.insert(
                ns.clone(),
                Arc::new(Collection {
                    ns,
                    id,
                    uuid,
                    options,
                    write_lock: Mutex::new(()),
                    dropped: AtomicBool::new(false),
                }),
            );
        }
        let stored_next = engine
            .get(Space::Catalog, NEXT_ID_KEY)?
            .and_then(|v| v.try_into().ok().map(u64::from_be_bytes))
            .unwrap_or(1);
        Ok(Catalog {
            engine,
            collections: RwLock::new(collections),
            ddl: Mutex::new(stored_next.max(max_id + 1)),
        })
    }

    pub fn get(&self, ns: &Namespace) -> Option<Arc<Collection>> {
        self.collections.read().get(ns).cloned()
    }

    /// Every collection, in namespace order.
    pub fn list(&self) -> Vec<Arc<Collection>> {
        self.collections.read().values().cloned().collect()
    }

    /// The collections of one database.
    pub fn list_db(&self, db: &str) -> Vec<Arc<Collection>> {
        self.collections
            .read()
            .values()
            .filter(|c| c.ns.db == db)
            .cloned()
            .collect()
    }

    /// Creates the collection. Returns the commit sequence to wait for, or
    /// `NamespaceExists` when it is already there (and `existing_ok` is
    /// false).
    pub fn create(
        &self,
        ns: &Namespace,
        options: Document,
        existing_ok: bool,
    ) -> Result<(Arc<Collection>, Option<u64>)> {
        let mut next_id = self.ddl.lock();
        if let Some(existing) = self.get(ns) {
            if existing_ok {
                return Ok((existing, None));
            }
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!("Collection {ns} already exists."),
            ));
        }
        let coll = Arc::new(Collection {
            ns: ns.clone(),
            id: *next_id,
            uuid: new_uuid(),
            options,
            write_lock: Mutex::new(()),
            dropped: AtomicBool::new(false),
        });
        let mut batch = WriteBatch::default();
        batch.put(Space::Catalog, ns_key(ns), encode(&coll.meta_document())?);
        batch.put(
            Space::Catalog,
            NEXT_ID_KEY.to_vec(),
            (*next_id + 1).to_be_bytes().to_vec(),
        );
        let seq = self.engine.write(batch)?;
        *next_id += 1;
        self.collections.write().insert(ns.clone(), coll.clone());
        Ok((coll, Some(seq)))
    }

    /// Removes the collection's metadata and records. Returns the commit
    /// sequence to wait for, or `None` if it did not exist.
    pub fn drop_collection(&self, ns: &Namespace) -> Result<Option<u64>> {
        let _ddl = self.ddl.lock();
        let Some(coll) = self.get(ns) else {
            return Ok(None);
        };
        let _writes = coll.write_lock.lock();
        coll.dropped.store(true, Ordering::Release);
        self.collections.write().remove(ns);
        let mut batch = WriteBatch::default();
        batch.delete(Space::Catalog, ns_key(ns));
        let mut seq = self.engine.write(batch)?;
        seq = seq.max(self.delete_records(coll.id)?);
        Ok(Some(seq))
    }

    fn delete_records(&self, id: u64) -> Result<u64> {
        let (from, to) = crate::storage::keys::collection_range(id);
        let mut seq = 0;
        let mut batch = WriteBatch::default();
        for item in self.engine.scan(Space::Records, from, to) {
            let (key, _) = item?;
            batch.delete(Space::Records, key);
            if batch.ops.len() >= 10_000 {
                seq = self.engine.write(std::mem::take(&mut batch))?;
            }
        }
        if !batch.is_empty() {
            seq = self.engine.write(batch)?;
        }
        Ok(seq)
    }

    /// Renames `from` to `to`, dropping `to` first when `drop_target`.
    pub fn rename(&self, from: &Namespace, to: &Namespace, drop_target: bool) -> Result<u64> {
        let mut seq = 0;
        if drop_target && self.get(to).is_some() && from != to {
            seq = self.drop_collection(to)?.unwrap_or(0);
        }
        let _ddl = self.ddl.lock();
        let Some(coll) = self.get(from) else {
            bail!(NamespaceNotFound, "Source collection {from} does not exist");
        };
        if self.get(to).is_some() {
            bail!(NamespaceExists, "Target namespace exists");
        }
        let _writes = coll.write_lock.lock();
        let renamed = Arc::new(Collection {
            ns: to.clone(),
            id: coll.id,
            uuid: coll.uuid.clone(),
            options: coll.options.clone(),
            write_lock: Mutex::new(()),
            dropped: AtomicBool::new(false),
        });
        let mut batch = WriteBatch::default();
        batch.delete(Space::Catalog, ns_key(from));
        batch.put(
            Space::Catalog,
            ns_key(to),
            encode(&renamed.meta_document())?,
        );
        seq = seq.max(self.engine.write(batch)?);
        // Writers holding the old handle re-resolve and find the new name.
        coll.dropped.store(true, Ordering::Release);
        let mut map = self.collections.write();
        map.remove(from);
        map.insert(to.clone(), renamed);
        Ok(seq)
    }
}

fn encode(doc: &Document) -> Result<Vec<u8>> {
    doc.to_vec()
        .map_err(|e| Error::internal(format!("cannot encode catalog entry: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_validated() {
        assert!(Namespace::new("test", "c").is_ok());
        assert!(Namespace::new("", "c").is_err());
        assert!(Namespace::new("a.b", "c").is_err());
        assert!(Namespace::new("a", "").is_err());
        assert!(Namespace::new("a", "c$d").is_err());
        let ns = Namespace::parse("db.coll.sub").unwrap();
        assert_eq!((ns.db.as_str(), ns.coll.as_str()), ("db", "coll.sub"));
    }
}
