//! The options of `create` for time-series (`timeseries`,
//! `expireAfterSeconds`) and clustered collections (`clusteredIndex`),
//! and what `collMod` may change of them. The collections themselves are
//! the router's ([`crate::router::timeseries`]).

use bson::{doc, Bson, Document};

use super::args::type_name;
use crate::bail;
use crate::error::{Error, ErrorCode, Result};
use crate::router::timeseries::{granularity_rank, max_span_of, TimeSeries};

/// The `timeseries`, `clusteredIndex` and `expireAfterSeconds` options of
/// a `create` command as the collection keeps them, with MongoDB 7.0's
/// errors for malformed ones; empty when it names none.
pub fn create_options(body: &Document) -> Result<Document> {
    let mut options = Document::new();
    let expire = expire_after_seconds("create", body.get("expireAfterSeconds"))?;
    let clustered = match body.get("clusteredIndex") {
        None | Some(Bson::Null) => None,
        Some(spec) => Some(clustered_index(spec)?),
    };
    match body.get("timeseries") {
        None | Some(Bson::Null) => {}
        Some(Bson::Document(spec)) => {
            if clustered.is_some() {
                bail!(
                    InvalidOptions,
                    "Invalid option 'clusteredIndex' for a time-series collection"
                );
            }
            if body
                .get("capped")
                .is_some_and(|c| !matches!(c, Bson::Boolean(false) | Bson::Null))
            {
                bail!(
                    InvalidOptions,
                    "Invalid option 'capped' for a time-series collection"
                );
            }
            options.insert("timeseries", timeseries_spec(spec)?);
        }
        Some(other) => bail!(
            TypeMismatch,
            "BSON field 'create.timeseries' is the wrong type '{}', expected type 'object'",
            type_name(other)
        ),
    }
    if let Some(spec) = clustered {
        if body
            .get("capped")
            .is_some_and(|c| !matches!(c, Bson::Boolean(false) | Bson::Null))
        {
            bail!(
                InvalidOptions,
                "Cannot create a clustered collection that is capped"
            );
        }
        options.insert("clusteredIndex", spec);
    }
    if let Some(secs) = expire {
        if !options.contains_key("timeseries") && !options.contains_key("clusteredIndex") {
            bail!(
                InvalidOptions,
                "'expireAfterSeconds' requires clustering to be enabled"
            );
        }
        options.insert("expireAfterSeconds", secs);
    }
    Ok(options)
}

/// A `timeseries` option checked and completed as MongoDB 7.0 keeps it:
/// `{timeField, metaField?, granularity, bucketMaxSpanSeconds}`, or with
/// custom bucketing `{timeField, metaField?, bucketRoundingSeconds,
/// bucketMaxSpanSeconds}`.
fn timeseries_spec(spec: &Document) -> Result<Document> {
    let field = "create.timeseries";
    for key in spec.keys() {
        if !matches!(
            key.as_str(),
            "timeField"
                | "metaField"
                | "granularity"
                | "bucketMaxSpanSeconds"
                | "bucketRoundingSeconds"
        ) {
            bail!(
                UnknownField,
                "BSON field '{field}.{key}' is an unknown field."
            );
        }
    }
    let name = |key: &str, required: bool| -> Result<Option<String>> {
        match spec.get(key) {
            None if required => Err(Error::new(
                ErrorCode::MissingField,
                format!("BSON field '{field}.{key}' is missing but a required field"),
            )),
            None => Ok(None),
            Some(Bson::String(s)) => {
                if s.is_empty() || s.starts_with('$') || s.contains('.') || s.contains('\0') {
                    bail!(
                        BadValue,
                        "The '{key}' option must be a non-empty field name without dots or a \
                         leading '$': '{s}'"
                    );
                }
                Ok(Some(s.clone()))
            }
            Some(other) => bail!(
                TypeMismatch,
                "BSON field '{field}.{key}' is the wrong type '{}', expected type 'string'",
                type_name(other)
            ),
        }
    };
    let time = name("timeField", true)?.unwrap_or_default();
    let meta = name("metaField", false)?;
    if let Some(meta) = &meta {
        if *meta == time {
            bail!(
                InvalidOptions,
                "The 'metaField' option cannot be the same as the 'timeField' option"
            );
        }
        if meta == "_id" {
            bail!(InvalidOptions, "The 'metaField' option cannot be '_id'");
        }
    }
    let granularity = match spec.get("granularity") {
        None => None,
        Some(Bson::String(g)) if max_span_of(g).is_some() => Some(g.clone()),
        Some(Bson::String(g)) => bail!(
            BadValue,
            "Enumeration value '{g}' for field '{field}.granularity' is not a valid value."
        ),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{field}.granularity' is the wrong type '{}', expected type 'string'",
            type_name(other)
        ),
    };
    let seconds = |key: &str| -> Result<Option<i64>> {
        match spec.get(key) {
            None => Ok(None),
            Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
                let n = super::args::number_as_i64(v).unwrap_or(0);
                if !(1..=31_536_000).contains(&n) {
                    bail!(
                        ValueNegative,
                        "BSON field '{field}.{key}' value must be >= 1 and <= 31536000, actual \
                         value '{n}'"
                    );
                }
                Ok(Some(n))
            }
            Some(other) => bail!(
                TypeMismatch,
                "BSON field '{field}.{key}' is the wrong type '{}', expected types '[int, long]'",
                type_name(other)
            ),
        }
    };
    let max_span = seconds("bucketMaxSpanSeconds")?;
    let rounding = seconds("bucketRoundingSeconds")?;
    let mut out = doc! {"timeField": time};
    if let Some(meta) = meta {
        out.insert("metaField", meta);
    }
    match (granularity, max_span, rounding) {
        (None, Some(span), Some(round)) => {
            if span != round {
                bail!(
                    InvalidOptions,
                    "Timeseries 'bucketRoundingSeconds' needs to be equal to \
                     'bucketMaxSpanSeconds'"
                );
            }
            out.insert("bucketRoundingSeconds", round as i32);
            out.insert("bucketMaxSpanSeconds", span as i32);
        }
        (Some(_), _, Some(_)) | (None, None, Some(_)) => bail!(
            InvalidOptions,
            "Timeseries 'bucketMaxSpanSeconds' needs to be set alongside 'bucketRoundingSeconds'"
        ),
        (granularity, span, None) => {
            let granularity = granularity.unwrap_or_else(|| "seconds".to_string());
            let default = max_span_of(&granularity).unwrap_or(3600);
            if span.is_some_and(|s| s != default) {
                bail!(
                    InvalidOptions,
                    "Timeseries 'bucketMaxSpanSeconds' is not configurable to a value other than \
                     the default of {default} for the provided granularity"
                );
            }
            out.insert("granularity", granularity);
            out.insert("bucketMaxSpanSeconds", default as i32);
        }
    }
    Ok(out)
}

/// `clusteredIndex`: `true` (the legacy form) or `{key: {_id: 1},
/// unique: true, name?, v?}`. Records are kept in `_id` order already,
/// so the only cluster key is `_id`.
fn clustered_index(spec: &Bson) -> Result<Bson> {
    let spec = match spec {
        Bson::Boolean(true) => return Ok(Bson::Boolean(true)),
        Bson::Boolean(false) => bail!(
            InvalidOptions,
            "The clusteredIndex option must be true or an index specification"
        ),
        Bson::Document(spec) => spec,
        other => bail!(
            TypeMismatch,
            "BSON field 'create.clusteredIndex' is the wrong type '{}', expected types '[bool, \
             object]'",
            type_name(other)
        ),
    };
    for key in spec.keys() {
        if !matches!(key.as_str(), "key" | "unique" | "name" | "v") {
            bail!(
                UnknownField,
                "BSON field 'create.clusteredIndex.{key}' is an unknown field."
            );
        }
    }
    let Some(key) = spec.get("key") else {
        bail!(
            MissingField,
            "BSON field 'create.clusteredIndex.key' is missing but a required field"
        );
    };
    if !spec.contains_key("unique") {
        bail!(
            MissingField,
            "BSON field 'create.clusteredIndex.unique' is missing but a required field"
        );
    }
    if !spec
        .get("unique")
        .is_some_and(|u| matches!(u, Bson::Boolean(true)))
    {
        return Err(Error::new(
            ErrorCode::from_number(5979700),
            "The clusteredIndex option requires unique: true to be specified",
        ));
    }
    let on_id = matches!(key, Bson::Document(k) if k.len() == 1
        && k.get("_id").and_then(super::args::number_as_i64) == Some(1));
    if !on_id {
        bail!(
            InvalidIndexSpecificationOption,
            "The clusteredIndex option is only supported for key: {{_id: 1}}"
        );
    }
    if let Some(v) = spec.get("v") {
        if super::args::number_as_i64(v) != Some(2) {
            return Err(Error::new(
                ErrorCode::from_number(5979704),
                format!("Invalid clusteredIndex specification {spec}; cannot create a clusteredIndex with v={v}"),
            ));
        }
    }
    let name = match spec.get("name") {
        None => crate::index::ID_INDEX_NAME.to_string(),
        Some(Bson::String(name)) => name.clone(),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field 'create.clusteredIndex.name' is the wrong type '{}', expected type \
             'string'",
            type_name(other)
        ),
    };
    // As MongoDB shows it: the version and the name filled in.
    Ok(Bson::Document(
        doc! {"v": 2, "key": {"_id": 1}, "name": name, "unique": true},
    ))
}

/// `expireAfterSeconds` of `create` or `collMod`: a non-negative number
/// (kept as a long), or `"off"` on `collMod` (returned as `None` with
/// `off` true).
fn expire_after_seconds(cmd: &str, value: Option<&Bson>) -> Result<Option<i64>> {
    match value {
        None | Some(Bson::Null) => Ok(None),
        Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))) => {
            let n = super::args::number_as_i64(v).unwrap_or(-1);
            if n < 0 {
                bail!(
                    InvalidOptions,
                    "TTL index 'expireAfterSeconds' option must be within an acceptable range, \
                     try a lower number"
                );
            }
            Ok(Some(n))
        }
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{cmd}.expireAfterSeconds' is the wrong type '{}', expected types \
             '[long, int, decimal, double]'",
            type_name(other)
        ),
    }
}

/// `collMod`'s `expireAfterSeconds` (a number, or `"off"`) and
/// `timeseries: {granularity}` applied to a collection's options: `None`
/// when the command names neither.
pub fn modified_options(body: &Document, options: &Document) -> Result<Option<Document>> {
    let expire = body.get("expireAfterSeconds");
    let timeseries = body.get("timeseries");
    if expire.is_none() && timeseries.is_none() {
        return Ok(None);
    }
    let is_timeseries = TimeSeries::of_options(options).is_some();
    let mut options = options.clone();
    if let Some(value) = expire {
        if !is_timeseries && !options.contains_key("clusteredIndex") {
            bail!(
                InvalidOptions,
                "collMod expireAfterSeconds is only supported on time-series and clustered \
                 collections; use collMod with 'index' for a TTL index"
            );
        }
        match value {
            Bson::String(s) if s == "off" => {
                options.remove("expireAfterSeconds");
            }
            Bson::String(s) => bail!(
                InvalidOptions,
                "Invalid string value for the 'expireAfterSeconds' option: '{s}'; only 'off' is \
                 allowed"
            ),
            other => {
                if let Some(secs) = expire_after_seconds("collMod", Some(other))? {
                    options.insert("expireAfterSeconds", secs);
                }
            }
        }
    }
    if let Some(spec) = timeseries {
        let Bson::Document(spec) = spec else {
            bail!(
                TypeMismatch,
                "BSON field 'collMod.timeseries' is the wrong type '{}', expected type 'object'",
                type_name(spec)
            );
        };
        if !is_timeseries {
            bail!(
                InvalidOptions,
                "option only supported on a time-series collection: timeseries"
            );
        }
        let current = options
            .get_document("timeseries")
            .cloned()
            .unwrap_or_default();
        let mut changed = current.clone();
        for (key, value) in spec {
            match (key.as_str(), value) {
                ("granularity", Bson::String(g)) => {
                    let (Some(new), old) = (
                        granularity_rank(g),
                        current
                            .get_str("granularity")
                            .ok()
                            .and_then(granularity_rank),
                    ) else {
                        bail!(
                            BadValue,
                            "Enumeration value '{g}' for field 'collMod.timeseries.granularity' \
                             is not a valid value."
                        );
                    };
                    if old.is_some_and(|old| new < old) {
                        bail!(
                            InvalidOptions,
                            "Invalid transition for timeseries.granularity. Can only transition \
                             from 'seconds' to 'minutes' or 'minutes' to 'hours'."
                        );
                    }
                    changed.insert("granularity", g.clone());
                    changed.insert(
                        "bucketMaxSpanSeconds",
                        max_span_of(g).unwrap_or(3600) as i32,
                    );
                    changed.remove("bucketRoundingSeconds");
                }
                (key, _) => bail!(
                    InvalidOptions,
                    "collMod of 'timeseries.{key}' is not supported by Shardgate yet"
                ),
            }
        }
        options.insert("timeseries", changed);
    }
    Ok(Some(options))
}

/// The index MongoDB 7.0 creates with a time-series collection that has a
/// meta field: `{<meta>: 1, <time>: 1}`.
pub fn default_index(options: &Document) -> Option<Document> {
    let ts = TimeSeries::of_options(options)?;
    let meta = ts.meta_field?;
    Some(doc! {
        "key": {meta.clone(): 1, ts.time_field.clone(): 1},
        "name": format!("{meta}_1_{}_1", ts.time_field),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<Document>) -> i32 {
        r.unwrap_err().code.number()
    }

    #[test]
    fn time_series_options_are_completed_as_mongodb_keeps_them() {
        assert_eq!(
            create_options(&doc! {"timeseries": {"timeField": "t", "metaField": "m"}}).unwrap(),
            doc! {"timeseries": {"timeField": "t", "metaField": "m", "granularity": "seconds", "bucketMaxSpanSeconds": 3600}}
        );
        assert_eq!(
            create_options(&doc! {"timeseries": {"timeField": "t", "granularity": "hours"}, "expireAfterSeconds": 60}).unwrap(),
            doc! {"timeseries": {"timeField": "t", "granularity": "hours", "bucketMaxSpanSeconds": 2_592_000}, "expireAfterSeconds": 60_i64}
        );
        assert_eq!(
            create_options(&doc! {"timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 600, "bucketRoundingSeconds": 600}}).unwrap(),
            doc! {"timeseries": {"timeField": "t", "bucketRoundingSeconds": 600, "bucketMaxSpanSeconds": 600}}
        );
    }

    #[test]
    fn malformed_time_series_options_fail_with_mongodb_codes() {
        let ts = |spec: Document| create_options(&doc! {"timeseries": spec});
        assert_eq!(code(ts(doc! {"metaField": "m"})), 40414);
        assert_eq!(code(ts(doc! {"timeField": 1})), 14);
        assert_eq!(code(ts(doc! {"timeField": "t", "x": 1})), 40415);
        assert_eq!(code(ts(doc! {"timeField": "t", "metaField": "t"})), 72);
        assert_eq!(code(ts(doc! {"timeField": "t", "metaField": "_id"})), 72);
        assert_eq!(code(ts(doc! {"timeField": "$t"})), 2);
        assert_eq!(code(ts(doc! {"timeField": "t", "granularity": "days"})), 2);
        assert_eq!(
            code(ts(doc! {"timeField": "t", "bucketMaxSpanSeconds": 10})),
            72
        );
        assert_eq!(
            code(ts(doc! {"timeField": "t", "bucketRoundingSeconds": 10})),
            72
        );
        assert_eq!(code(create_options(&doc! {"timeseries": 1})), 14);
        assert_eq!(code(create_options(&doc! {"expireAfterSeconds": 10})), 72);
        assert_eq!(
            code(create_options(
                &doc! {"timeseries": {"timeField": "t"}, "expireAfterSeconds": -1}
            )),
            72
        );
    }

    #[test]
    fn clustered_indexes_are_on_id_and_unique() {
        let spec = doc! {"key": {"_id": 1}, "unique": true};
        assert_eq!(
            create_options(&doc! {"clusteredIndex": spec, "expireAfterSeconds": 5}).unwrap(),
            doc! {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}, "expireAfterSeconds": 5_i64}
        );
        assert_eq!(
            create_options(&doc! {"clusteredIndex": true}).unwrap(),
            doc! {"clusteredIndex": true}
        );
        let clustered = |spec: Document| create_options(&doc! {"clusteredIndex": spec});
        assert_eq!(
            code(clustered(doc! {"key": {"_id": 1}, "unique": false})),
            5979700
        );
        assert_eq!(code(clustered(doc! {"key": {"a": 1}, "unique": true})), 197);
        assert_eq!(code(clustered(doc! {"unique": true})), 40414);
        assert_eq!(
            code(clustered(doc! {"key": {"_id": 1}, "unique": true, "v": 1})),
            5979704
        );
    }

    #[test]
    fn coll_mod_changes_expiry_and_coarsens_granularity() {
        let ts = doc! {"timeseries": {"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 3600}};
        assert_eq!(modified_options(&doc! {}, &ts).unwrap(), None);
        let changed = modified_options(
            &doc! {"expireAfterSeconds": 30, "timeseries": {"granularity": "minutes"}},
            &ts,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            changed,
            doc! {"timeseries": {"timeField": "t", "granularity": "minutes", "bucketMaxSpanSeconds": 86_400}, "expireAfterSeconds": 30_i64}
        );
        let off = modified_options(&doc! {"expireAfterSeconds": "off"}, &changed)
            .unwrap()
            .unwrap();
        assert!(!off.contains_key("expireAfterSeconds"));
        let back = modified_options(&doc! {"timeseries": {"granularity": "seconds"}}, &changed);
        assert_eq!(back.unwrap_err().code.number(), 72);
        let plain = modified_options(&doc! {"expireAfterSeconds": 5}, &doc! {});
        assert_eq!(plain.unwrap_err().code.number(), 72);
    }
}
