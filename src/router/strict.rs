//! Cosmos-strict mode (`--cosmos-strict`): the limits Azure Cosmos DB for
//! MongoDB (RU) puts where MongoDB has none, so that an application
//! developed against Shardgate meets them before production does.
//!
//! MongoDB's behaviour stays the default; with the mode on, the router
//! asks these rules at the points they concern: the planner before a
//! sorted query ([`check_sort`]), index creation ([`check_new_index`],
//! [`check_index_counts`]) and every document a write stores
//! ([`CosmosStrict::prepare`], which also stamps `_ts`). Pure functions of
//! their arguments; no I/O here.

use std::sync::Arc;

use bson::{Bson, Document};

use crate::bail;
use crate::error::{Error, ErrorCode, Result};
use crate::index::{Index, KeyKind};
use crate::query::sort::SortSpec;

/// The largest document Cosmos DB stores by default (2 MiB).
pub const COSMOS_MAX_DOCUMENT_BYTES: usize = 2 * 1024 * 1024;
/// Most single-field indexes of one collection.
pub const MAX_SINGLE_FIELD_INDEXES: usize = 500;
/// Most fields of one compound index.
pub const MAX_COMPOUND_FIELDS: usize = 8;
/// The field every document carries in strict mode: the seconds since
/// the Unix epoch of its last write. The only field a TTL index may use.
pub const TS_FIELD: &str = "_ts";

/// The rules of strict mode, as the flags set them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CosmosStrict {
    /// The largest document a write may store: 2 MiB, or 16 MiB with
    /// `--cosmos-16mb-documents`.
    pub max_document_bytes: usize,
}

impl Default for CosmosStrict {
    fn default() -> Self {
        CosmosStrict {
            max_document_bytes: COSMOS_MAX_DOCUMENT_BYTES,
        }
    }
}

impl CosmosStrict {
    /// A document about to be stored: `_ts` set to `now_secs` (replacing
    /// any value the client gave), and refused past the size limit.
    pub fn prepare(&self, doc: &mut Document, now_secs: i64) -> Result<()> {
        doc.insert(TS_FIELD, Bson::Int64(now_secs));
        self.check_size(bson_size(doc))
    }

    /// The same for a document in BSON form: returns its new bytes.
    pub fn prepare_bytes(&self, bytes: &[u8], now_secs: i64) -> Result<Vec<u8>> {
        let mut doc = Document::from_reader(bytes)
            .map_err(|e| Error::new(ErrorCode::InvalidBSON, format!("invalid document: {e}")))?;
        self.prepare(&mut doc, now_secs)?;
        doc.to_vec()
            .map_err(|e| Error::bad_value(format!("cannot encode document: {e}")))
    }

    fn check_size(&self, len: usize) -> Result<()> {
        if len > self.max_document_bytes {
            bail!(
                BSONObjectTooLarge,
                "Request size is too large: the document is {len} bytes and Azure Cosmos DB stores at most {} bytes per document (start Shardgate with --cosmos-16mb-documents for 16 MB documents)",
                self.max_document_bytes
            );
        }
        Ok(())
    }
}

fn bson_size(doc: &Document) -> usize {
    doc.to_vec().map(|b| b.len()).unwrap_or(usize::MAX)
}

/// The seconds since the Unix epoch, as `_ts` holds them.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Fails as Cosmos DB does when no index serves `sort`: a single field
/// needs a single-field index on it (`_id` and the shard key always have
/// one); several fields need a compound index with exactly those paths in
/// that order, in the same directions or all reversed.
pub fn check_sort(indexes: &[Arc<Index>], shard_key: Option<&str>, sort: &SortSpec) -> Result<()> {
    let fields = sort.fields();
    let servable = |i: &Index| !i.fields.iter().any(|f| f.kind == KeyKind::Hashed);
    match fields {
        [] => Ok(()),
        [one] => {
            let path = one.path();
            if path == "_id"
                || shard_key == Some(path)
                || indexes
                    .iter()
                    .any(|i| servable(i) && i.fields.len() == 1 && i.fields[0].path == path)
            {
                return Ok(());
            }
            bail!(
                BadValue,
                "The index path corresponding to the specified order-by item is excluded."
            )
        }
        many => {
            let matches = |i: &Index, flip: bool| {
                i.fields.len() == many.len()
                    && i.fields.iter().zip(many).all(|(f, s)| {
                        f.path == s.path()
                            && (f.kind == KeyKind::Ascending) == (s.ascending() != flip)
                    })
            };
            if indexes
                .iter()
                .any(|i| servable(i) && (matches(i, false) || matches(i, true)))
            {
                return Ok(());
            }
            bail!(
                BadValue,
                "The order by query does not have a corresponding composite index that it can be served from."
            )
        }
    }
}

/// Refuses an index Cosmos DB would not create: a TTL index on any field
/// but `_ts`, a compound index of more than [`MAX_COMPOUND_FIELDS`]
/// fields, a unique index on a collection that holds documents, and the
/// kinds Cosmos DB lacks: `text` and `2d` (it has `2dsphere`). (A unique
/// index of a sharded collection that does not start with the shard key
/// is refused in every mode.)
pub fn check_new_index(index: &Index, collection_is_empty: bool) -> Result<()> {
    if let Some(kind) = index
        .key
        .values()
        .filter_map(|v| v.as_str())
        .find(|kind| matches!(*kind, "text" | "2d"))
    {
        bail!(
            CannotCreateIndex,
            "'{kind}' indexes are not supported by Azure Cosmos DB: {} cannot be created",
            index.key
        );
    }
    if index.expire_after_secs.is_some()
        && !matches!(index.fields.as_slice(), [f] if f.path == TS_FIELD)
    {
        bail!(
            CannotCreateIndex,
            "TTL indexes are only allowed on the _ts field in Azure Cosmos DB, which holds the time of a document's last write: create {{_ts: 1}} with expireAfterSeconds instead of {}",
            index.key
        );
    }
    if index.fields.len() > MAX_COMPOUND_FIELDS {
        bail!(
            CannotCreateIndex,
            "Up to {MAX_COMPOUND_FIELDS} fields can be included in a compound index; {} has {}",
            index.key,
            index.fields.len()
        );
    }
    if index.unique && !collection_is_empty {
        bail!(
            CannotCreateIndex,
            "Unique indexes can only be created while the collection is empty in Azure Cosmos DB: {} cannot be created",
            index.name
        );
    }
    Ok(())
}

/// Refuses indexes past [`MAX_SINGLE_FIELD_INDEXES`] single-field indexes
/// (`_id` not counted); strict mode checks this in place of MongoDB's 64
/// indexes a collection.
pub fn check_index_counts(current: &[Arc<Index>], fresh: &[Index]) -> Result<()> {
    let single = current.iter().filter(|i| i.fields.len() == 1).count()
        + fresh.iter().filter(|i| i.fields.len() == 1).count();
    if single > MAX_SINGLE_FIELD_INDEXES {
        bail!(
            CannotCreateIndex,
            "Up to {MAX_SINGLE_FIELD_INDEXES} single field indexes can be created in a collection; this would make {single}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn index(spec: Document) -> Arc<Index> {
        Arc::new(Index::parse(&spec, 1).unwrap())
    }

    fn sort(spec: Document) -> SortSpec {
        SortSpec::parse(&spec).unwrap()
    }

    #[test]
    fn single_field_sorts_need_an_index_on_the_field() {
        let indexes = vec![
            index(doc! {"key": {"a": -1}}),
            index(doc! {"key": {"b": 1, "c": 1}}),
        ];
        assert!(check_sort(&indexes, None, &sort(doc! {"a": 1})).is_ok());
        assert!(check_sort(&indexes, None, &sort(doc! {"_id": -1})).is_ok());
        assert!(check_sort(&indexes, Some("k"), &sort(doc! {"k": 1})).is_ok());
        let e = check_sort(&indexes, None, &sort(doc! {"b": 1})).unwrap_err();
        assert!(matches!(e.code, ErrorCode::BadValue));
        assert_eq!(
            e.message,
            "The index path corresponding to the specified order-by item is excluded."
        );
    }

    #[test]
    fn multi_field_sorts_need_a_matching_compound_index() {
        let indexes = vec![index(doc! {"key": {"b": 1, "c": -1}})];
        assert!(check_sort(&indexes, None, &sort(doc! {"b": 1, "c": -1})).is_ok());
        assert!(check_sort(&indexes, None, &sort(doc! {"b": -1, "c": 1})).is_ok());
        for bad in [
            doc! {"b": 1, "c": 1},
            doc! {"c": -1, "b": 1},
            doc! {"b": 1, "c": -1, "d": 1},
        ] {
            let e = check_sort(&indexes, None, &sort(bad.clone())).unwrap_err();
            assert_eq!(
                e.message,
                "The order by query does not have a corresponding composite index that it can be served from.",
                "{bad}"
            );
        }
    }

    #[test]
    fn new_indexes_follow_cosmos_rules() {
        let ttl_ts = Index::parse(&doc! {"key": {"_ts": 1}, "expireAfterSeconds": 10}, 1).unwrap();
        assert!(check_new_index(&ttl_ts, false).is_ok());
        let ttl_other =
            Index::parse(&doc! {"key": {"at": 1}, "expireAfterSeconds": 10}, 1).unwrap();
        assert!(matches!(
            check_new_index(&ttl_other, true).unwrap_err().code,
            ErrorCode::CannotCreateIndex
        ));
        let nine: Document = (0..9).map(|i| (format!("f{i}"), Bson::Int32(1))).collect();
        let wide = Index::parse(&doc! {"key": nine}, 1).unwrap();
        assert!(check_new_index(&wide, true).is_err());
        let unique = Index::parse(&doc! {"key": {"u": 1}, "unique": true}, 1).unwrap();
        assert!(check_new_index(&unique, true).is_ok());
        assert!(check_new_index(&unique, false).is_err());
        let flat = Index::parse(&doc! {"key": {"p": "2d"}, "name": "p"}, 1).unwrap();
        assert!(check_new_index(&flat, true).is_err());
        let sphere = Index::parse(&doc! {"key": {"p": "2dsphere"}, "name": "p"}, 1).unwrap();
        assert!(check_new_index(&sphere, true).is_ok());
    }

    #[test]
    fn single_field_indexes_are_counted() {
        let current: Vec<Arc<Index>> = (0..MAX_SINGLE_FIELD_INDEXES)
            .map(|i| index(doc! {"key": {format!("f{i}"): 1}}))
            .collect();
        assert!(check_index_counts(&current, &[]).is_ok());
        let compound = Index::parse(&doc! {"key": {"a": 1, "b": 1}}, 1).unwrap();
        assert!(check_index_counts(&current, &[compound]).is_ok());
        let one_more = Index::parse(&doc! {"key": {"z": 1}}, 1).unwrap();
        assert!(check_index_counts(&current, &[one_more]).is_err());
    }

    #[test]
    fn stored_documents_get_ts_and_a_size_limit() {
        let strict = CosmosStrict::default();
        let mut d = doc! {"_id": 1, "_ts": "mine"};
        strict.prepare(&mut d, 1_700_000_000).unwrap();
        assert_eq!(d, doc! {"_id": 1, "_ts": 1_700_000_000_i64});
        let big = doc! {"_id": 2, "s": "x".repeat(COSMOS_MAX_DOCUMENT_BYTES)};
        let e = strict.prepare_bytes(&big.to_vec().unwrap(), 1).unwrap_err();
        assert!(matches!(e.code, ErrorCode::BSONObjectTooLarge));
        assert!(e.message.starts_with("Request size is too large"));
        let roomy = CosmosStrict {
            max_document_bytes: crate::base::limits::MAX_BSON_OBJECT_SIZE,
        };
        let bytes = roomy.prepare_bytes(&big.to_vec().unwrap(), 1).unwrap();
        let back = Document::from_reader(&bytes[..]).unwrap();
        assert_eq!(back.get_i64("_ts").ok(), Some(1));
    }
}
