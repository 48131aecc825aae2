//! Writes: insert, update, delete and find-and-modify.
//!
//! Each runs its read-modify-write synchronously under the collection's
//! write lock (so a check for a duplicate `_id` and the write that follows
//! are one step), commits one engine batch, releases the lock and only
//! then waits for the batch to be durable. No lock is held across
//! `.await`.

use std::collections::HashSet;
use std::sync::Arc;

use bson::{doc, oid::ObjectId, Bson, Document};

use super::{Collection, Namespace, Record, Router};
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::query::sort::SortSpec;
use crate::query::update::{documents_identical, ApplyContext, Update};
use crate::storage::{Space, WriteBatch};
use crate::wire::MAX_BSON_OBJECT_SIZE;
use crate::{bail, err};

/// The result of an insert batch.
#[derive(Debug, Default)]
pub struct InsertOutcome {
    pub inserted: u64,
    /// `(index in the batch, error)` for each document not written.
    pub errors: Vec<(usize, Error)>,
}

/// One update statement (`update` command entry or `findAndModify`).
#[derive(Debug, Clone)]
pub struct UpdateStatement {
    pub filter: Filter,
    pub update: Update,
    pub multi: bool,
    pub upsert: bool,
    /// Which document a single update picks first (`findAndModify`).
    pub sort: Option<SortSpec>,
}

/// The result of an update or a find-and-modify.
#[derive(Debug, Default)]
pub struct ModifyOutcome {
    pub matched: u64,
    pub modified: u64,
    pub upserted_id: Option<Bson>,
    /// The document before the change (single-document operations).
    pub before: Option<Document>,
    /// The document after the change (single-document operations).
    pub after: Option<Document>,
}

/// Encodes a document, refusing one over the BSON size limit.
fn encode_document(doc: &Document) -> Result<Vec<u8>> {
    let bytes = doc
        .to_vec()
        .map_err(|e| err!(BadValue, "cannot encode document: {e}"))?;
    if bytes.len() > MAX_BSON_OBJECT_SIZE {
        return Err(Error::new(
            ErrorCode::BSONObjectTooLarge,
            format!(
                "object to insert too large. size in bytes: {}, max size: {}",
                bytes.len(),
                MAX_BSON_OBJECT_SIZE
            ),
        ));
    }
    Ok(bytes)
}

/// Checks an `_id` value is one MongoDB accepts.
fn validate_id(id: &Bson) -> Result<()> {
    match id {
        Bson::Array(_) => bail!(InvalidIdField, "The '_id' value cannot be of type array"),
        Bson::RegularExpression(_) => {
            bail!(InvalidIdField, "The '_id' value cannot be of type regex")
        }
        Bson::Undefined => bail!(InvalidIdField, "The '_id' value cannot be of type undefined"),
        _ => Ok(()),
    }
}

/// Makes `_id` the first field, generating an ObjectId when missing.
pub fn with_id_first(mut doc: Document) -> Document {
    let id = doc.remove("_id").unwrap_or_else(|| Bson::ObjectId(ObjectId::new()));
    let mut out = Document::new();
    out.insert("_id", id);
    out.extend(doc);
    out
}

fn validate_for_insert(doc: &Document) -> Result<()> {
    for key in doc.keys() {
        if key.starts_with('$') {
            bail!(BadValue, "Document can't have $ prefixed field names: {key}");
        }
    }
    if let Some(id) = doc.get("_id") {
        validate_id(id)?;
    }
    Ok(())
}

pub(crate) fn duplicate_key_error(ns: &Namespace, id: &Bson) -> Error {
    let shown = Document::from_iter([("_id".to_string(), id.clone())]);
    Error::new(
        ErrorCode::DuplicateKey,
        format!("E11000 duplicate key error collection: {ns} index: _id_ dup key: {shown}"),
    )
    .with_extra(doc! {"keyPattern": {"_id": 1}, "keyValue": shown})
}

impl Router {
    /// The collection of `ns`, created if it does not exist yet. Returns
    /// the creation's commit sequence when it had to be created.
    pub fn collection_for_write(&self, ns: &Namespace) -> Result<(Arc<Collection>, u64)> {
        if let Some(c) = self.catalog.get(ns) {
            return Ok((c, 0));
        }
        let (c, seq) = self.catalog.create(ns, Document::new(), true)?;
        Ok((c, seq.unwrap_or(0)))
    }

    /// Runs `f` under the write lock of `ns`'s collection, retrying if the
    /// collection was dropped or renamed while we waited for the lock.
    fn with_write_lock<T>(
        &self,
        ns: &Namespace,
        create: bool,
        mut f: impl FnMut(&Collection) -> Result<T>,
    ) -> Result<Option<(T, u64)>> {
        loop {
            let (coll, created_seq) = if create {
                self.collection_for_write(ns)?
            } else {
                match self.catalog.get(ns) {
                    Some(c) => (c, 0),
                    None => return Ok(None),
                }
            };
            let _guard = coll.write_lock.lock();
            if coll.is_dropped() {
                continue;
            }
            return Ok(Some((f(&coll)?, created_seq)));
        }
    }

    /// Inserts documents; `ordered` stops at the first failure.
    pub async fn insert(
        &self,
        ns: &Namespace,
        docs: Vec<Document>,
        ordered: bool,
    ) -> Result<InsertOutcome> {
        let mut outcome = InsertOutcome::default();
        // Validate and encode outside the lock.
        let mut prepared = Vec::with_capacity(docs.len());
        for (i, doc) in docs.into_iter().enumerate() {
            let doc = with_id_first(doc);
            let checked = validate_for_insert(&doc).and_then(|_| encode_document(&doc));
            match checked {
                Ok(bytes) => prepared.push((i, doc, bytes)),
                Err(e) => {
                    outcome.errors.push((i, e));
                    if ordered {
                        break;
                    }
                }
            }
        }
        let first_error = outcome.errors.first().map(|(i, _)| *i);
        let result = tokio::task::block_in_place(|| {
            self.with_write_lock(ns, true, |coll| {
                let mut batch = WriteBatch::default();
                let mut seen = HashSet::new();
                let mut inserted = 0;
                let mut errors = Vec::new();
                for (i, doc, bytes) in &prepared {
                    if ordered && first_error.is_some_and(|f| *i > f) {
                        break;
                    }
                    let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
                    let key = Router::id_key(coll, &id);
                    let exists =
                        seen.contains(&key) || self.engine.get(Space::Records, &key)?.is_some();
                    if exists {
                        errors.push((*i, duplicate_key_error(ns, &id)));
                        if ordered {
                            break;
                        }
                        continue;
                    }
                    seen.insert(key.clone());
                    batch.put(Space::Records, key, bytes.clone());
                    inserted += 1;
                }
                let seq = if batch.is_empty() {
                    0
                } else {
                    self.engine.write(batch)?
                };
                Ok((inserted, errors, seq))
            })
        })?;
        let Some(((inserted, errors, seq), created_seq)) = result else {
            return Err(Error::internal("collection vanished during insert"));
        };
        outcome.inserted = inserted;
        outcome.errors.extend(errors);
        outcome.errors.sort_by_key(|(i, _)| *i);
        if ordered {
            outcome.errors.truncate(1);
        }
        self.durable(seq.max(created_seq)).await?;
        Ok(outcome)
    }

    /// Applies one update statement.
    pub async fn update(&self, ns: &Namespace, stmt: &UpdateStatement) -> Result<ModifyOutcome> {
        let result = tokio::task::block_in_place(|| {
            self.with_write_lock(ns, stmt.upsert, |coll| self.update_locked(ns, coll, stmt))
        })?;
        match result {
            None => Ok(ModifyOutcome::default()),
            Some(((outcome, seq), created_seq)) => {
                self.durable(seq.max(created_seq)).await?;
                Ok(outcome)
            }
        }
    }

    /// The records an update or delete works on: all matches for a multi
    /// operation, else the first (by `sort` when given).
    fn targets(
        &self,
        coll: &Collection,
        filter: &Filter,
        multi: bool,
        sort: Option<&SortSpec>,
    ) -> Result<Vec<(Record, crate::query::filter::MatchDetails)>> {
        let mut matching = self.matching(coll, Some(filter));
        if multi {
            return matching.collect();
        }
        match sort {
            Some(sort) => {
                let mut best: Option<(Record, crate::query::filter::MatchDetails)> = None;
                for item in matching {
                    let item = item?;
                    let better = match &best {
                        None => true,
                        Some(b) => sort.compare(&item.0.doc, &b.0.doc).is_lt(),
                    };
                    if better {
                        best = Some(item);
                    }
                }
                Ok(best.into_iter().collect())
            }
            None => Ok(matching.next().transpose()?.into_iter().collect()),
        }
    }

    fn update_locked(
        &self,
        ns: &Namespace,
        coll: &Collection,
        stmt: &UpdateStatement,
    ) -> Result<(ModifyOutcome, u64)> {
        let mut outcome = ModifyOutcome::default();
        let targets = self.targets(coll, &stmt.filter, stmt.multi, stmt.sort.as_ref())?;
        let mut batch = WriteBatch::default();
        for (rec, details) in targets {
            outcome.matched += 1;
            let ctx = ApplyContext {
                details,
                inserting: false,
            };
            let new_doc = stmt.update.apply(&rec.doc, &ctx)?;
            if !stmt.multi {
                outcome.before = Some(rec.doc.clone());
                outcome.after = Some(new_doc.clone());
            }
            if !documents_identical(&new_doc, &rec.doc) {
                let bytes = encode_document(&new_doc)?;
                outcome.modified += 1;
                batch.put(Space::Records, rec.key, bytes);
            }
        }
        if outcome.matched == 0 && stmt.upsert {
            let seed = stmt.filter.upsert_seed()?;
            let new_doc = with_id_first(stmt.update.upsert_document(seed)?);
            validate_for_insert(&new_doc)?;
            let bytes = encode_document(&new_doc)?;
            let id = new_doc.get("_id").cloned().unwrap_or(Bson::Null);
            let key = Router::id_key(coll, &id);
            if self.engine.get(Space::Records, &key)?.is_some() {
                return Err(duplicate_key_error(ns, &id));
            }
            batch.put(Space::Records, key, bytes);
            outcome.upserted_id = Some(id);
            outcome.after = Some(new_doc);
        }
        let seq = if batch.is_empty() {
            0
        } else {
            self.engine.write(batch)?
        };
        Ok((outcome, seq))
    }

    /// Deletes the first match (`multi == false`) or every match; returns
    /// the deleted documents' count and, for a single delete, the document.
    pub async fn delete(
        &self,
        ns: &Namespace,
        filter: &Filter,
        multi: bool,
        sort: Option<&SortSpec>,
    ) -> Result<(u64, Option<Document>)> {
        let result = tokio::task::block_in_place(|| {
            self.with_write_lock(ns, false, |coll| {
                let targets = self.targets(coll, filter, multi, sort)?;
                let n = targets.len() as u64;
                let mut batch = WriteBatch::default();
                let mut last = None;
                for (rec, _) in targets {
                    batch.delete(Space::Records, rec.key);
                    last = Some(rec.doc);
                }
                let seq = if batch.is_empty() {
                    0
                } else {
                    self.engine.write(batch)?
                };
                Ok((n, if multi { None } else { last }, seq))
            })
        })?;
        match result {
            None => Ok((0, None)),
            Some(((n, doc, seq), _)) => {
                self.durable(seq).await?;
                Ok((n, doc))
            }
        }
    }
}
