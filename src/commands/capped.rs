//! The capped-collection options of `create` and `collMod`,
//! `convertToCapped` and `cloneCollectionAsCapped`. The collections themselves are the router's
//! ([`crate::router::capped`]).

use bson::{doc, Bson, Document};

use super::args::{check_fields, collection_namespace, type_name};
use super::request::Request;
use crate::bail;
use crate::base::namespace::Namespace;
use crate::error::{Error, ErrorCode, Result};
use crate::router::kinds::{adjusted_max, rounded_size, MAX_DOCS_LIMIT, MAX_SIZE};

/// A number field of a capped option: absent or null is `None`.
fn number(cmd: &str, body: &Document, field: &str) -> Result<Option<i64>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int32(n)) => Ok(Some(i64::from(*n))),
        Some(Bson::Int64(n)) => Ok(Some(*n)),
        Some(Bson::Double(d)) => Ok(Some(*d as i64)),
        Some(Bson::Decimal128(d)) => Ok(Some(d.to_string().parse::<f64>().map_or(0, |d| d as i64))),
        Some(other) => Err(Error::type_mismatch(format!(
            "BSON field '{cmd}.{field}' is the wrong type '{}', expected types \
             '[long, int, decimal, double']",
            type_name(other)
        ))),
    }
}

/// A count as MongoDB writes it into options: an int when it fits.
fn as_number(n: i64) -> Bson {
    i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32)
}

/// `size` as `checkAndAdjustCappedSize` takes it: within 1 PB, rounded up.
fn checked_size(size: i64) -> Result<i64> {
    if size < 0 {
        bail!(BadValue, "size has to be >= 0");
    }
    if size > MAX_SIZE {
        bail!(BadValue, "size cannot exceed 1 PB");
    }
    Ok(rounded_size(size))
}

/// `max` as `checkAndAdjustCappedMaxDocs` takes it.
fn checked_max(max: i64) -> Result<i64> {
    if max >= MAX_DOCS_LIMIT {
        bail!(
            BadValue,
            "max in a capped collection has to be < 2^31 or not set"
        );
    }
    Ok(adjusted_max(max))
}

/// The capped options of a `create` command, as the collection's options
/// keep them (`{capped: true, size, max}`, empty when not capped), with
/// MongoDB 7.0's errors for malformed ones.
pub fn create_options(body: &Document) -> Result<Document> {
    let capped = match body.get("capped") {
        None | Some(Bson::Null) => false,
        Some(Bson::Boolean(b)) => *b,
        Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))) => {
            v.as_f64().is_none_or(|n| n != 0.0)
        }
        Some(other) => bail!(
            TypeMismatch,
            "BSON field 'create.capped' is the wrong type '{}', expected types \
             '[bool, long, int, decimal, double']",
            type_name(other)
        ),
    };
    let size = number("create", body, "size")?;
    let max = number("create", body, "max")?;
    if let Some(size) = size {
        if size < 1 {
            bail!(
                ValueNegative,
                "BSON field 'size' value must be >= 1, actual value '{size}'"
            );
        }
        if size > MAX_SIZE {
            bail!(
                ValueNegative,
                "BSON field 'size' value must be <= {MAX_SIZE}, actual value '{size}'"
            );
        }
    }
    if let Some(max) = max.filter(|&m| m >= MAX_DOCS_LIMIT) {
        bail!(
            ValueNegative,
            "BSON field 'max' value must be < {MAX_DOCS_LIMIT}, actual value '{max}'"
        );
    }
    if !capped {
        if size.is_some() || max.is_some() {
            bail!(
                InvalidOptions,
                "the 'capped' field needs to be true when either the 'size' or 'max' fields \
                 are present"
            );
        }
        return Ok(Document::new());
    }
    let Some(size) = size else {
        bail!(
            InvalidOptions,
            "the 'size' field is required when 'capped' is true"
        );
    };
    let mut options = doc! {"capped": true, "size": as_number(rounded_size(size))};
    if let Some(max) = max {
        options.insert("max", as_number(adjusted_max(max)));
    }
    Ok(options)
}

/// `collMod`'s `cappedSize` and `cappedMax` applied to a collection's
/// options: `None` when the command names neither. Fails with 72 on a
/// collection that is not capped.
pub fn modified_options(body: &Document, options: &Document) -> Result<Option<Document>> {
    let size = number("collMod", body, "cappedSize")?;
    let max = number("collMod", body, "cappedMax")?;
    if size.is_none() && max.is_none() {
        return Ok(None);
    }
    if !options.get_bool("capped").unwrap_or(false) {
        bail!(InvalidOptions, "Collection must be capped.");
    }
    let mut options = options.clone();
    if let Some(size) = size {
        options.insert("size", as_number(checked_size(size)?));
    }
    if let Some(max) = max {
        options.insert("max", as_number(checked_max(max)?));
    }
    Ok(Some(options))
}

/// `convertToCapped`: the collection becomes capped at `size` bytes,
/// keeping its newest documents (in `_id` order for a collection that
/// was not capped) and only its `_id` index.
pub async fn convert_to_capped(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("convertToCapped", &req.db, &req.body)?;
    check_fields(req, &["size"])?;
    let Some(size) = number("convertToCapped", &req.body, "size")? else {
        return Err(Error::new(
            ErrorCode::MissingField,
            "BSON field 'convertToCapped.size' is missing but a required field",
        ));
    };
    let size = checked_size(size)?;
    let router = &req.state.router;
    super::views::refuse(router, &ns).await?;
    router.convert_to_capped(&ns, as_number(size)).await?;
    Ok(Document::new())
}

/// `cloneCollectionAsCapped`: a capped copy of a collection under a new
/// name in the same database.
pub async fn clone_collection_as_capped(req: &Request<'_>) -> Result<Document> {
    const CMD: &str = "cloneCollectionAsCapped";
    let from = collection_namespace(CMD, &req.db, &req.body)?;
    check_fields(req, &["toCollection", "size"])?;
    let to = match req.body.get("toCollection") {
        Some(Bson::String(name)) => Namespace::new(&req.db, name)?,
        None => {
            return Err(Error::new(
                ErrorCode::MissingField,
                format!("BSON field '{CMD}.toCollection' is missing but a required field"),
            ))
        }
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field '{CMD}.toCollection' is the wrong type '{}', expected type 'string'",
                type_name(other)
            )))
        }
    };
    let Some(size) = number(CMD, &req.body, "size")? else {
        return Err(Error::new(
            ErrorCode::MissingField,
            format!("BSON field '{CMD}.size' is missing but a required field"),
        ));
    };
    let size = checked_size(size)?;
    let router = &req.state.router;
    if router.collection(&from).is_none() && super::views::find(router, &from).await?.is_some() {
        bail!(
            CommandNotSupportedOnView,
            "cloneCollectionAsCapped not supported for views: {from}"
        );
    }
    router.clone_as_capped(&from, &to, as_number(size)).await?;
    Ok(Document::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<Document>) -> i32 {
        r.unwrap_err().code.number()
    }

    #[test]
    fn create_options_are_checked_as_mongodb_checks_them() {
        assert_eq!(create_options(&doc! {"create": "c"}).unwrap(), doc! {});
        assert_eq!(
            create_options(&doc! {"capped": true, "size": 1000, "max": 0}).unwrap(),
            doc! {"capped": true, "size": 1024, "max": 0x7fff_ffff}
        );
        assert_eq!(
            create_options(&doc! {"capped": 1, "size": 5_000_000_000_i64}).unwrap(),
            doc! {"capped": true, "size": 5_000_000_000_i64}
        );
        assert_eq!(code(create_options(&doc! {"capped": true})), 72);
        assert_eq!(code(create_options(&doc! {"capped": true, "max": 5})), 72);
        assert_eq!(code(create_options(&doc! {"size": 4096})), 72);
        assert_eq!(
            code(create_options(&doc! {"capped": true, "size": 0})),
            51024
        );
        assert_eq!(
            code(create_options(&doc! {"capped": true, "size": -5})),
            51024
        );
        assert_eq!(
            code(create_options(&doc! {"capped": true, "size": "x"})),
            14
        );
        assert_eq!(code(create_options(&doc! {"capped": "x", "size": 1})), 14);
        assert_eq!(
            code(create_options(
                &doc! {"capped": true, "size": 1, "max": 1_i64 << 31}
            )),
            51024
        );
        // Null counts as absent.
        assert_eq!(
            create_options(&doc! {"capped": null, "size": null}).unwrap(),
            doc! {}
        );
    }

    #[test]
    fn coll_mod_changes_only_capped_collections() {
        let capped = doc! {"capped": true, "size": 4096};
        assert_eq!(modified_options(&doc! {}, &capped).unwrap(), None);
        assert_eq!(
            modified_options(&doc! {"cappedSize": 5000, "cappedMax": 3}, &capped).unwrap(),
            Some(doc! {"capped": true, "size": 5120, "max": 3})
        );
        let err = modified_options(&doc! {"cappedSize": 5000}, &doc! {}).unwrap_err();
        assert_eq!(err.code.number(), 72);
        let err = modified_options(&doc! {"cappedSize": -1}, &capped).unwrap_err();
        assert_eq!(err.code.number(), 2);
        let err = modified_options(&doc! {"cappedMax": 1_i64 << 31}, &capped).unwrap_err();
        assert_eq!(err.code.number(), 2);
    }
}
