//! Time-series collections: measurements with a time field (a date every
//! document must carry) and an optional meta field, as `create` with
//! `timeseries` makes them in MongoDB 7.0.
//!
//! MongoDB stores measurements in buckets and unpacks them for every
//! read; queries and aggregations see the measurements. Shardgate stores
//! each measurement as a document of its own, so every read sees exactly
//! what it would see through the buckets, and every query operator,
//! stage, index and partitioning works on them unchanged. What is
//! particular to the kind is kept here: the time field's check on each
//! insert, the update restrictions of MongoDB 7.0 (updates only of the
//! meta field, by a `multi` operator update filtering on the meta field
//! alone), and expiry by the time field (`expireAfterSeconds`).

use bson::{Bson, Document, RawDocument};

use crate::bail;
use crate::error::{Error, Result};

/// A time-series collection's fields and expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeSeries {
    pub time_field: String,
    pub meta_field: Option<String>,
    /// Measurements older than this are deleted by the TTL monitor.
    pub expire_after_secs: Option<i64>,
}

impl TimeSeries {
    /// The time-series settings an options document holds (`timeseries:
    /// {timeField, metaField, …}`, `expireAfterSeconds`), if any.
    pub fn of_options(options: &Document) -> Option<TimeSeries> {
        let ts = options.get_document("timeseries").ok()?;
        let time_field = ts.get_str("timeField").ok()?.to_string();
        let meta_field = ts.get_str("metaField").ok().map(str::to_string);
        Some(TimeSeries {
            time_field,
            meta_field,
            expire_after_secs: expire_after_secs(options),
        })
    }

    /// Fails unless the measurement's time field holds a date, as
    /// MongoDB refuses it (2 `BadValue`).
    pub fn check_measurement(&self, doc: &RawDocument) -> Result<()> {
        match doc.get(&self.time_field) {
            Ok(Some(bson::RawBsonRef::DateTime(_))) => Ok(()),
            _ => bail!(
                BadValue,
                "'{}' must be present and contain a valid BSON UTC datetime value",
                self.time_field
            ),
        }
    }

    /// Checks an update statement (`q`, `u`, `multi`, `upsert`) against
    /// MongoDB 7.0's rules for time-series collections: it must be
    /// `multi`, not an upsert, filter on the meta field only and change
    /// only the meta field with update operators. Fails with 72.
    pub fn check_update(&self, q: &Document, u: &Bson, multi: bool, upsert: bool) -> Result<()> {
        let Some(meta) = &self.meta_field else {
            bail!(
                InvalidOptions,
                "Cannot perform an update on a time-series collection that does not have a metaField"
            );
        };
        if !multi {
            bail!(
                InvalidOptions,
                "Cannot perform a non-multi update on a time-series collection"
            );
        }
        if upsert {
            bail!(
                InvalidOptions,
                "Cannot perform an upsert on a time-series collection"
            );
        }
        if !filters_only(q, meta) {
            bail!(
                InvalidOptions,
                "Cannot perform an update on a time-series collection using a query that \
                 filters on a field other than the metaField '{meta}'"
            );
        }
        let Bson::Document(update) = u else {
            bail!(
                InvalidOptions,
                "Cannot perform an update on a time-series collection with a pipeline"
            );
        };
        for (op, fields) in update {
            if !op.starts_with('$') {
                bail!(
                    InvalidOptions,
                    "Cannot perform an update on a time-series collection with a replacement \
                     document"
                );
            }
            let Bson::Document(fields) = fields else {
                continue;
            };
            for (path, value) in fields {
                let renamed_to = match (op.as_str(), value) {
                    ("$rename", Bson::String(to)) => Some(to.as_str()),
                    _ => None,
                };
                if !under(path, meta) || renamed_to.is_some_and(|to| !under(to, meta)) {
                    bail!(
                        InvalidOptions,
                        "Cannot perform an update on a time-series collection which updates a \
                         field that is not the metaField '{meta}'"
                    );
                }
            }
        }
        Ok(())
    }
}

/// A collection-level `expireAfterSeconds` (time-series and clustered
/// collections).
pub fn expire_after_secs(options: &Document) -> Option<i64> {
    match options.get("expireAfterSeconds")? {
        Bson::Int64(n) => Some(*n),
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Double(d) => Some(*d as i64),
        _ => None,
    }
}

/// Whether `path` is `field` or below it.
fn under(path: &str, field: &str) -> bool {
    path == field
        || path
            .strip_prefix(field)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// Whether a query reads no field but `meta` (and those below it).
fn filters_only(q: &Document, meta: &str) -> bool {
    q.iter().all(|(key, value)| match key.as_str() {
        "$and" | "$or" | "$nor" => match value {
            Bson::Array(clauses) => clauses.iter().all(|c| match c {
                Bson::Document(c) => filters_only(c, meta),
                _ => false,
            }),
            _ => false,
        },
        "$comment" => true,
        k if k.starts_with('$') => false,
        k => under(k, meta),
    })
}

/// The `bucketMaxSpanSeconds` MongoDB gives a granularity.
pub fn max_span_of(granularity: &str) -> Option<i64> {
    match granularity {
        "seconds" => Some(3600),
        "minutes" => Some(86_400),
        "hours" => Some(2_592_000),
        _ => None,
    }
}

/// The ordering of granularities: a collection may only move to a
/// coarser one.
pub fn granularity_rank(granularity: &str) -> Option<u8> {
    ["seconds", "minutes", "hours"]
        .iter()
        .position(|g| *g == granularity)
        .map(|p| p as u8)
}

/// The error for a misuse reported as MongoDB reports it.
pub fn not_on_time_series(what: &str) -> Error {
    Error::new(
        crate::error::ErrorCode::InvalidOptions,
        format!("{what} is not supported on a time-series collection"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, rawdoc};

    fn ts() -> TimeSeries {
        TimeSeries::of_options(&doc! {
            "timeseries": {"timeField": "t", "metaField": "m", "granularity": "seconds"},
            "expireAfterSeconds": 60_i64,
        })
        .unwrap()
    }

    #[test]
    fn options_name_the_fields_and_the_expiry() {
        let ts = ts();
        assert_eq!(ts.time_field, "t");
        assert_eq!(ts.meta_field.as_deref(), Some("m"));
        assert_eq!(ts.expire_after_secs, Some(60));
        assert_eq!(TimeSeries::of_options(&doc! {"capped": true}), None);
    }

    #[test]
    fn a_measurement_needs_a_date_in_its_time_field() {
        let ts = ts();
        let now = bson::DateTime::now();
        assert!(ts.check_measurement(&rawdoc! {"t": now, "v": 1}).is_ok());
        for bad in [rawdoc! {"v": 1}, rawdoc! {"t": "today"}, rawdoc! {"t": 5}] {
            assert_eq!(ts.check_measurement(&bad).unwrap_err().code.number(), 2);
        }
    }

    #[test]
    fn updates_may_change_only_the_meta_field() {
        let ts = ts();
        let ok = |q: Document, u: Bson| ts.check_update(&q, &u, true, false);
        assert!(ok(doc! {"m": "a"}, Bson::Document(doc! {"$set": {"m": "b"}})).is_ok());
        assert!(ok(
            doc! {"$or": [{"m.x": 1}, {"m": {"$exists": false}}]},
            Bson::Document(doc! {"$set": {"m.y": 2}, "$unset": {"m.z": ""}})
        )
        .is_ok());
        let code = |r: Result<()>| r.unwrap_err().code.number();
        assert_eq!(
            code(ok(doc! {"v": 1}, Bson::Document(doc! {"$set": {"m": 1}}))),
            72
        );
        assert_eq!(
            code(ok(doc! {}, Bson::Document(doc! {"$set": {"v": 1}}))),
            72
        );
        assert_eq!(code(ok(doc! {}, Bson::Document(doc! {"m": 1}))), 72);
        assert_eq!(
            code(ok(doc! {}, Bson::Document(doc! {"$rename": {"m": "v"}}))),
            72
        );
        assert_eq!(code(ok(doc! {}, Bson::Array(vec![]))), 72);
        assert_eq!(
            code(ok(
                doc! {"$expr": true},
                Bson::Document(doc! {"$set": {"m": 1}})
            )),
            72
        );
        let set = Bson::Document(doc! {"$set": {"m": 1}});
        assert_eq!(code(ts.check_update(&doc! {}, &set, false, false)), 72);
        assert_eq!(code(ts.check_update(&doc! {}, &set, true, true)), 72);
        let no_meta = TimeSeries {
            meta_field: None,
            ..ts.clone()
        };
        assert_eq!(code(no_meta.check_update(&doc! {}, &set, true, false)), 72);
        // `metadata` is not under `m`.
        assert!(!under("metadata", "m"));
    }
}
