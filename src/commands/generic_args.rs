//! Checks of the generic arguments any command may carry, made before it
//! runs, as a mongos makes them: the Stable API parameters (`apiVersion`,
//! `apiStrict`, `apiDeprecationErrors`) and `$readPreference`.
//!
//! Shardgate has one node, so a read preference changes nothing about
//! where a read runs; it is still checked, so a client that sends a
//! malformed one learns it here rather than against a real cluster.

use bson::{Bson, Document};

use super::args::type_name;
use crate::bail;
use crate::error::{Error, ErrorCode, Result};

/// The commands of Stable API version 1 (MongoDB 7.0).
const API_V1: &[&str] = &[
    "abortTransaction",
    "aggregate",
    "authenticate",
    "collMod",
    "commitTransaction",
    "count",
    "create",
    "createIndexes",
    "delete",
    "drop",
    "dropDatabase",
    "dropIndexes",
    "endSessions",
    "explain",
    "find",
    "findAndModify",
    "getMore",
    "hello",
    "insert",
    "killCursors",
    "listCollections",
    "listDatabases",
    "listIndexes",
    "ping",
    "refreshSessions",
    "saslContinue",
    "saslStart",
    "update",
];

/// Checks `body`'s generic arguments for command `name`.
pub fn check(name: &str, body: &Document) -> Result<()> {
    check_api(name, body)?;
    if let Some(pref) = body.get("$readPreference") {
        check_read_preference(pref)?;
    }
    Ok(())
}

fn flag(body: &Document, field: &str) -> Result<Option<bool>> {
    match body.get(field) {
        None => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{field}' is the wrong type '{}', expected type 'bool'",
            type_name(other)
        ),
    }
}

/// The Stable API: a declared version must be "1"; with `apiStrict`, a
/// command outside version 1 fails with 323; the flags need a version.
fn check_api(name: &str, body: &Document) -> Result<()> {
    let strict = flag(body, "apiStrict")?;
    let deprecation = flag(body, "apiDeprecationErrors")?;
    let version = match body.get("apiVersion") {
        None => None,
        Some(Bson::String(v)) => Some(v.as_str()),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field 'apiVersion' is the wrong type '{}', expected type 'string'",
            type_name(other)
        ),
    };
    let Some(version) = version else {
        if strict.is_some() || deprecation.is_some() {
            return Err(Error::new(
                ErrorCode::from_number(4886600),
                "Provided apiStrict and/or apiDeprecationErrors without passing apiVersion",
            ));
        }
        return Ok(());
    };
    if version != "1" {
        return Err(Error::new(
            ErrorCode::APIVersionError,
            "API version must be \"1\"",
        ));
    }
    if strict == Some(true) && !API_V1.contains(&name) {
        return Err(Error::new(
            ErrorCode::APIStrictError,
            format!(
                "Provided apiStrict:true, but the command {name} is not in API Version 1. \
                 Information on supported commands and migrations in API Version 1 can be found \
                 at https://dochub.mongodb.org/core/manual-versioned-api."
            ),
        ));
    }
    if strict == Some(true) {
        let pipeline = match name {
            "aggregate" => body.get_array("pipeline").ok(),
            "explain" => body
                .get_document("explain")
                .ok()
                .filter(|inner| inner.keys().next().map(String::as_str) == Some("aggregate"))
                .and_then(|inner| inner.get_array("pipeline").ok()),
            _ => None,
        };
        if let Some(pipeline) = pipeline {
            check_pipeline_api(pipeline)?;
        }
    }
    // No command of version 1 is deprecated, so `apiDeprecationErrors`
    // refuses nothing.
    Ok(())
}

/// Stages outside Stable API version 1 (MongoDB 7.0's
/// `AllowedWithApiStrict::kNeverInVersion1`).
const STAGES_NOT_IN_V1: &[&str] = &[
    "$currentOp",
    "$indexStats",
    "$listCatalog",
    "$listLocalSessions",
    "$listSearchIndexes",
    "$listSessions",
    "$planCacheStats",
    "$search",
    "$searchMeta",
    "$vectorSearch",
];

/// Window functions outside version 1.
const WINDOW_FUNCTIONS_NOT_IN_V1: &[&str] = &["$linearFill"];

/// With `apiStrict`, an aggregation may use only version 1's stages, in
/// its own pipeline and in every pipeline nested in it (`$lookup`,
/// `$unionWith`, `$facet`), as a mongos checks the lite-parsed pipeline.
fn check_pipeline_api(pipeline: &[Bson]) -> Result<()> {
    let refuse = |operator: &str| {
        Error::new(
            ErrorCode::APIStrictError,
            format!("{operator} is not allowed with 'apiStrict: true' in API Version 1"),
        )
    };
    for stage in pipeline {
        let Some((name, spec)) = stage.as_document().and_then(|d| d.iter().next()) else {
            continue;
        };
        if STAGES_NOT_IN_V1.contains(&name.as_str()) {
            return Err(refuse(name));
        }
        let Some(spec) = spec.as_document() else {
            continue;
        };
        match name.as_str() {
            "$collStats"
                if ["latencyStats", "storageStats", "queryExecStats"]
                    .iter()
                    .any(|option| spec.contains_key(*option)) =>
            {
                return Err(Error::new(
                    ErrorCode::APIStrictError,
                    "only the 'count' option to $collStats is supported in API Version 1",
                ));
            }
            "$lookup" | "$unionWith" => {
                if let Ok(inner) = spec.get_array("pipeline") {
                    check_pipeline_api(inner)?;
                }
            }
            "$facet" => {
                for inner in spec.values().filter_map(Bson::as_array) {
                    check_pipeline_api(inner)?;
                }
            }
            "$setWindowFields" => {
                let outputs = spec
                    .get_document("output")
                    .into_iter()
                    .flat_map(|o| o.values());
                for function in outputs.filter_map(Bson::as_document) {
                    if let Some(op) = function
                        .keys()
                        .find(|k| WINDOW_FUNCTIONS_NOT_IN_V1.contains(&k.as_str()))
                    {
                        return Err(refuse(op));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

const MODES: [&str; 5] = [
    "primary",
    "primaryPreferred",
    "secondary",
    "secondaryPreferred",
    "nearest",
];

/// `$readPreference: {mode, tags?, maxStalenessSeconds?, hedge?}`, as a
/// mongos parses it.
fn check_read_preference(pref: &Bson) -> Result<()> {
    let Bson::Document(pref) = pref else {
        bail!(
            TypeMismatch,
            "BSON field '$readPreference' is the wrong type '{}', expected type 'object'",
            type_name(pref)
        );
    };
    let mode = match pref.get("mode") {
        None => bail!(
            MissingField,
            "BSON field '$readPreference.mode' is missing but a required field"
        ),
        Some(Bson::String(mode)) if MODES.contains(&mode.as_str()) => mode.as_str(),
        Some(Bson::String(mode)) => bail!(
            BadValue,
            "Enumeration value '{mode}' for field '$readPreference.mode' is not a valid value."
        ),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '$readPreference.mode' is the wrong type '{}', expected type 'string'",
            type_name(other)
        ),
    };
    for field in pref.keys() {
        if !matches!(
            field.as_str(),
            "mode" | "tags" | "maxStalenessSeconds" | "hedge"
        ) {
            bail!(
                UnknownField,
                "BSON field '$readPreference.{field}' is an unknown field."
            );
        }
    }
    let tagged = match pref.get("tags") {
        None => false,
        Some(Bson::Array(tags)) => {
            if tags.iter().any(|t| !matches!(t, Bson::Document(_))) {
                bail!(TypeMismatch, "Tags in a read preference must be documents");
            }
            !(tags.is_empty()
                || tags.len() == 1 && matches!(&tags[0], Bson::Document(d) if d.is_empty()))
        }
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '$readPreference.tags' is the wrong type '{}', expected type 'array'",
            type_name(other)
        ),
    };
    let staleness = match pref.get("maxStalenessSeconds") {
        None => None,
        Some(v) => match super::args::number_as_i64(v) {
            Some(n) if n < 0 => bail!(
                BadValue,
                "maxStalenessSeconds must be a non-negative integer"
            ),
            Some(0) => None,
            Some(n) if n < 90 => bail!(
                BadValue,
                "maxStalenessSeconds value can not be less than 90"
            ),
            Some(n) => Some(n),
            None => bail!(
                TypeMismatch,
                "BSON field '$readPreference.maxStalenessSeconds' is the wrong type '{}', \
                 expected a number",
                type_name(v)
            ),
        },
    };
    if mode == "primary" && (tagged || staleness.is_some()) {
        bail!(
            BadValue,
            "mode primary does not allow for any tags or maxStalenessSeconds"
        );
    }
    if mode == "primary" && pref.contains_key("hedge") {
        bail!(BadValue, "hedge is not allowed with mode primary");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn code(name: &str, body: Document) -> Option<i32> {
        check(name, &body).err().map(|e| e.code.number())
    }

    #[test]
    fn the_stable_api_is_version_1_and_strict_about_its_commands() {
        assert_eq!(
            code("find", doc! {"apiVersion": "1", "apiStrict": true}),
            None
        );
        assert_eq!(code("distinct", doc! {"apiVersion": "1"}), None);
        assert_eq!(
            code("distinct", doc! {"apiVersion": "1", "apiStrict": true}),
            Some(323)
        );
        assert_eq!(code("find", doc! {"apiVersion": "2"}), Some(322));
        assert_eq!(code("find", doc! {"apiVersion": 1}), Some(14));
        assert_eq!(code("find", doc! {"apiStrict": true}), Some(4886600));
        assert_eq!(
            code("find", doc! {"apiDeprecationErrors": false}),
            Some(4886600)
        );
        assert_eq!(
            code("find", doc! {"apiVersion": "1", "apiStrict": "yes"}),
            Some(14)
        );
        assert_eq!(
            code(
                "find",
                doc! {"apiVersion": "1", "apiDeprecationErrors": true}
            ),
            None
        );
    }

    #[test]
    fn a_strict_aggregation_uses_only_version_1_stages() {
        let strict = |pipeline: Vec<Document>| {
            check(
                "aggregate",
                &doc! {"aggregate": "c", "pipeline": pipeline, "apiVersion": "1", "apiStrict": true},
            )
            .err()
            .map(|e| (e.code.number(), e.message))
        };
        assert_eq!(
            strict(vec![doc! {"$match": {}}, doc! {"$densify": {}}]),
            None
        );
        assert_eq!(
            strict(vec![doc! {"$currentOp": {}}]),
            Some((
                323,
                "$currentOp is not allowed with 'apiStrict: true' in API Version 1".into()
            ))
        );
        // Nested pipelines are checked too.
        let nested = doc! {"$lookup": {"from": "d", "pipeline": [{"$facet": {"a": [{"$listSessions": {}}]}}], "as": "x"}};
        assert_eq!(strict(vec![nested]).map(|e| e.0), Some(323));
        let window =
            doc! {"$setWindowFields": {"sortBy": {"t": 1}, "output": {"v": {"$linearFill": "$v"}}}};
        assert_eq!(strict(vec![window]).map(|e| e.0), Some(323));
        assert_eq!(strict(vec![doc! {"$collStats": {"count": {}}}]), None);
        assert_eq!(
            strict(vec![doc! {"$collStats": {"storageStats": {}}}]).map(|e| e.1),
            Some("only the 'count' option to $collStats is supported in API Version 1".into())
        );
        // Without apiStrict, or inside explain, as the command itself.
        assert_eq!(
            code(
                "aggregate",
                doc! {"aggregate": "c", "pipeline": [{"$currentOp": {}}], "apiVersion": "1"}
            ),
            None
        );
        assert_eq!(
            code(
                "explain",
                doc! {"explain": {"aggregate": "c", "pipeline": [{"$search": {}}]}, "apiVersion": "1", "apiStrict": true}
            ),
            Some(323)
        );
    }

    #[test]
    fn read_preferences_are_parsed_as_a_mongos_parses_them() {
        let pref = |p: Document| code("find", doc! {"$readPreference": p});
        assert_eq!(pref(doc! {"mode": "secondaryPreferred"}), None);
        assert_eq!(
            pref(doc! {"mode": "nearest", "maxStalenessSeconds": 120, "tags": [{"dc": "x"}, {}]}),
            None
        );
        assert_eq!(pref(doc! {"mode": "primary", "tags": [{}]}), None);
        assert_eq!(pref(doc! {"mode": "sometimes"}), Some(2));
        assert_eq!(pref(doc! {"tags": []}), Some(40414));
        assert_eq!(pref(doc! {"mode": 1}), Some(14));
        assert_eq!(
            pref(doc! {"mode": "secondary", "maxStalenessSeconds": 10}),
            Some(2)
        );
        assert_eq!(
            pref(doc! {"mode": "secondary", "maxStalenessSeconds": -5}),
            Some(2)
        );
        assert_eq!(
            pref(doc! {"mode": "primary", "maxStalenessSeconds": 100}),
            Some(2)
        );
        assert_eq!(
            pref(doc! {"mode": "primary", "tags": [{"dc": "x"}]}),
            Some(2)
        );
        assert_eq!(pref(doc! {"mode": "nearest", "other": 1}), Some(40415));
        assert_eq!(code("find", doc! {"$readPreference": "primary"}), Some(14));
    }
}
