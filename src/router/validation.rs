//! Schema validation: a collection's `validator`, `validationLevel` and
//! `validationAction`, as `create` and `collMod` set them, and the check
//! every insert, update, replacement and upsert makes before it writes.
//!
//! The validator is a query filter (query operators, `$expr` and
//! `$jsonSchema`). A document that does not match it fails with 121
//! `DocumentValidationFailure`, whose `errInfo` says why, as MongoDB 7.0
//! explains it ([`failure_details`]); with `validationAction:
//! "warn"` the write goes ahead and the failure is logged instead. With
//! `validationLevel: "moderate"` an update of a document that already
//! failed the validator is not checked; `"off"` checks nothing. A write
//! with `bypassDocumentValidation` skips the check
//! ([`DocumentValidation::Bypass`]).

use bson::{doc, Bson, Document};

use crate::bail;
use crate::base::namespace::Namespace;
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::{failure_details, Filter};

/// The options a collection is created with and `collMod` changes,
/// with the validator they name parsed once.
#[derive(Debug)]
pub struct CollectionOptions {
    /// The options as given; `listCollections` shows them.
    pub document: Document,
    validator: Validator,
    /// A capped collection's bounds.
    pub capped: Option<super::kinds::Capped>,
    /// A time-series collection's fields.
    pub timeseries: Option<super::timeseries::TimeSeries>,
}

/// Whether a write is checked against its collection's validator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DocumentValidation {
    #[default]
    Enforce,
    /// `bypassDocumentValidation: true`.
    Bypass,
}

#[derive(Debug)]
enum Validator {
    None,
    Active {
        /// As written, for the failure's details.
        source: Document,
        filter: Box<Filter>,
        level: Level,
        action: Action,
    },
    /// A stored validator this version cannot parse: every checked write
    /// fails with the error, as mongod refuses writes to such a
    /// collection, rather than letting unchecked documents in.
    Unusable(Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Strict,
    Moderate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Error,
    Warn,
}

/// The option names this module reads.
pub const VALIDATION_OPTIONS: [&str; 3] = ["validator", "validationLevel", "validationAction"];

impl CollectionOptions {
    /// No options: what a collection created by its first insert has.
    pub fn none() -> CollectionOptions {
        CollectionOptions {
            document: Document::new(),
            validator: Validator::None,
            capped: None,
            timeseries: None,
        }
    }

    /// Checks and parses the options `command` (`create`, `collMod`) gives
    /// `ns`, with MongoDB's errors for a malformed validator or level.
    pub fn parse(command: &str, ns: &Namespace, document: Document) -> Result<CollectionOptions> {
        let validator = parse_validator(command, ns, &document)?;
        Ok(CollectionOptions {
            capped: super::kinds::Capped::of_options(&document),
            timeseries: super::timeseries::TimeSeries::of_options(&document),
            document,
            validator,
        })
    }

    /// Options read back from the catalog. A validator that no longer
    /// parses makes checked writes fail instead of stopping the start.
    pub fn stored(ns: &Namespace, document: Document) -> CollectionOptions {
        let validator = parse_validator("create", ns, &document).unwrap_or_else(|e| {
            tracing::error!(namespace = %ns, "the stored validator does not parse: {e}");
            Validator::Unusable(e)
        });
        CollectionOptions {
            capped: super::kinds::Capped::of_options(&document),
            timeseries: super::timeseries::TimeSeries::of_options(&document),
            document,
            validator,
        }
    }

    /// The field whose dates expire documents and after how many
    /// seconds, for a collection-level `expireAfterSeconds`: a
    /// time-series collection's time field, a clustered collection's
    /// `_id`.
    pub fn expiry(&self) -> Option<(&str, i64)> {
        if let Some(ts) = &self.timeseries {
            return Some((ts.time_field.as_str(), ts.expire_after_secs?));
        }
        if self.document.contains_key("clusteredIndex") {
            return Some(("_id", super::timeseries::expire_after_secs(&self.document)?));
        }
        None
    }

    /// Whether change streams get the documents before and after each
    /// change (`changeStreamPreAndPostImages: {enabled: true}`).
    pub fn keeps_images(&self) -> bool {
        matches!(
            self.document.get("changeStreamPreAndPostImages"),
            Some(Bson::Document(d)) if matches!(d.get_bool("enabled"), Ok(true))
        )
    }

    /// Whether writes to the collection must see whole documents to check
    /// them (so an update cannot be applied to stored bytes unseen).
    pub fn validates(&self, validation: DocumentValidation) -> bool {
        validation == DocumentValidation::Enforce && !matches!(self.validator, Validator::None)
    }

    /// Checks a document about to be written: `new`, replacing `old` when
    /// it is an update. Fails with 121 `DocumentValidationFailure` when
    /// the validator refuses it and its action is `error`.
    pub fn check(
        &self,
        ns: &Namespace,
        new: &Document,
        old: Option<&Document>,
        validation: DocumentValidation,
    ) -> Result<()> {
        if validation == DocumentValidation::Bypass {
            return Ok(());
        }
        let (source, filter, level, action) = match &self.validator {
            Validator::None => return Ok(()),
            Validator::Unusable(e) => return Err(e.clone()),
            Validator::Active {
                source,
                filter,
                level,
                action,
            } => (source, filter, *level, *action),
        };
        if passes(filter, new) {
            return Ok(());
        }
        // Moderate: a document that already broke the rules may be
        // updated without being brought in line.
        if level == Level::Moderate && old.is_some_and(|old| !passes(filter, old)) {
            return Ok(());
        }
        let info = doc! {
            "failingDocumentId": new.get("_id").cloned().unwrap_or(Bson::Null),
            "details": failure_details(source, new),
        };
        match action {
            Action::Warn => {
                tracing::warn!(
                    namespace = %ns,
                    document = %new,
                    errInfo = %info,
                    "Document would fail validation"
                );
                Ok(())
            }
            Action::Error => Err(Error::new(
                ErrorCode::DocumentValidationFailure,
                "Document failed validation",
            )
            .with_extra(doc! {"errInfo": info})),
        }
    }
}

/// Whether `doc` satisfies the validator; a `$expr` that cannot be
/// evaluated on it does not.
fn passes(filter: &Filter, doc: &Document) -> bool {
    filter.try_matches(doc).unwrap_or(false)
}

fn parse_validator(command: &str, ns: &Namespace, options: &Document) -> Result<Validator> {
    let level = match enum_option(command, options, "validationLevel")? {
        None | Some("strict") => Some(Level::Strict),
        Some("moderate") => Some(Level::Moderate),
        Some("off") => None,
        Some(other) => bail!(
            BadValue,
            "Enumeration value '{other}' for field '{command}.validationLevel' is not a valid value."
        ),
    };
    let action = match enum_option(command, options, "validationAction")? {
        None | Some("error") => Action::Error,
        Some("warn") => Action::Warn,
        Some(other) => bail!(
            BadValue,
            "Enumeration value '{other}' for field '{command}.validationAction' is not a valid value."
        ),
    };
    let validator = match options.get("validator") {
        None => return Ok(Validator::None),
        Some(Bson::Document(v)) => v,
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{command}.validator' is the wrong type '{}', expected type 'object'",
            crate::query::compare::type_name(other)
        ),
    };
    if validator.is_empty() {
        return Ok(Validator::None);
    }
    if ns.coll.starts_with("system.") || matches!(ns.db.as_str(), "admin" | "local" | "config") {
        bail!(
            InvalidOptions,
            "Document validators not allowed on system collection {ns}"
        );
    }
    let filter = Filter::parse(validator).and_then(|filter| {
        if filter.uses_rand() {
            bail!(
                RandInValidator,
                "$rand not allowed inside collection validators"
            );
        }
        match filter.script_operator() {
            None => Ok(filter),
            Some("$where") => bail!(BadValue, "$where is not allowed in this context"),
            Some(op) => Err(Error::new(
                if op == "$function" {
                    ErrorCode::FunctionInValidator
                } else {
                    ErrorCode::EmitInValidator
                },
                format!("{op} cannot be used inside a validator."),
            )),
        }
    });
    // As MongoDB words every error of a validator that does not parse.
    let filter = filter.map_err(|e| Error {
        message: format!(
            "Parsing of collection validator failed :: caused by :: {}",
            e.message
        ),
        ..e
    })?;
    Ok(match level {
        None => Validator::None,
        Some(level) => Validator::Active {
            source: validator.clone(),
            filter: Box::new(filter),
            level,
            action,
        },
    })
}

/// A string option of `command`, with the IDL's type error otherwise.
fn enum_option<'a>(command: &str, options: &'a Document, name: &str) -> Result<Option<&'a str>> {
    match options.get(name) {
        None => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s)),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{command}.{name}' is the wrong type '{}', expected type 'string'",
            crate::query::compare::type_name(other)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> Namespace {
        Namespace::new("test", "people").unwrap()
    }

    fn options(d: Document) -> CollectionOptions {
        CollectionOptions::parse("create", &ns(), d).unwrap()
    }

    fn check(o: &CollectionOptions, new: Document, old: Option<Document>) -> Result<()> {
        o.check(&ns(), &new, old.as_ref(), DocumentValidation::Enforce)
    }

    #[test]
    fn a_failing_document_is_refused_with_its_id_and_the_reason() {
        let o = options(doc! {"validator": {"age": {"$gte": 18}}});
        assert!(check(&o, doc! {"_id": 1, "age": 30}, None).is_ok());
        let e = check(&o, doc! {"_id": 2, "age": 3}, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::DocumentValidationFailure);
        assert_eq!(e.message, "Document failed validation");
        let info = e.extra.unwrap();
        let info = info.get_document("errInfo").unwrap();
        assert_eq!(info.get("failingDocumentId"), Some(&Bson::Int32(2)));
        assert_eq!(
            info.get_document("details").unwrap(),
            &doc! {
                "operatorName": "$gte",
                "specifiedAs": {"age": {"$gte": 18}},
                "reason": "comparison failed",
                "consideredValue": 3,
            }
        );
    }

    #[test]
    fn warn_bypass_and_off_let_the_document_through() {
        let bad = doc! {"_id": 1, "age": 3};
        let warn = options(doc! {"validator": {"age": {"$gte": 18}}, "validationAction": "warn"});
        assert!(check(&warn, bad.clone(), None).is_ok());
        let off = options(doc! {"validator": {"age": {"$gte": 18}}, "validationLevel": "off"});
        assert!(check(&off, bad.clone(), None).is_ok());
        assert!(!off.validates(DocumentValidation::Enforce));
        let strict = options(doc! {"validator": {"age": {"$gte": 18}}});
        assert!(strict
            .check(&ns(), &bad, None, DocumentValidation::Bypass)
            .is_ok());
        assert!(!strict.validates(DocumentValidation::Bypass));
        assert!(strict.validates(DocumentValidation::Enforce));
    }

    #[test]
    fn moderate_checks_inserts_and_updates_of_valid_documents_only() {
        let o = options(doc! {"validator": {"age": {"$gte": 18}}, "validationLevel": "moderate"});
        let bad = doc! {"_id": 1, "age": 3};
        // An insert is checked.
        assert!(check(&o, bad.clone(), None).is_err());
        // An update of a document that was already invalid is not.
        assert!(check(&o, bad.clone(), Some(doc! {"_id": 1, "age": 2})).is_ok());
        // An update that breaks a valid document is.
        assert!(check(&o, bad, Some(doc! {"_id": 1, "age": 20})).is_err());
        let strict = options(doc! {"validator": {"age": {"$gte": 18}}});
        assert!(check(
            &strict,
            doc! {"_id": 1, "age": 3},
            Some(doc! {"_id": 1, "age": 2})
        )
        .is_err());
    }

    #[test]
    fn malformed_options_are_refused_as_mongodb_refuses_them() {
        let parse = |d: Document| CollectionOptions::parse("collMod", &ns(), d).unwrap_err();
        let e = parse(doc! {"validationLevel": "loose"});
        assert_eq!(e.code, ErrorCode::BadValue);
        assert_eq!(
            e.message,
            "Enumeration value 'loose' for field 'collMod.validationLevel' is not a valid value."
        );
        assert_eq!(
            parse(doc! {"validationAction": "log"}).code,
            ErrorCode::BadValue
        );
        assert_eq!(
            parse(doc! {"validationAction": 1}).code,
            ErrorCode::TypeMismatch
        );
        let e = parse(doc! {"validator": 5});
        assert_eq!(e.code, ErrorCode::TypeMismatch);
        assert_eq!(
            e.message,
            "BSON field 'collMod.validator' is the wrong type 'int', expected type 'object'"
        );
        let e = parse(doc! {"validator": {"a": {"$bogus": 1}}});
        assert_eq!(e.code, ErrorCode::BadValue);
        assert!(
            e.message
                .starts_with("Parsing of collection validator failed :: caused by :: "),
            "{}",
            e.message
        );
        // Scripts are refused however deep they sit.
        let e = parse(doc! {"validator": {"$or": [{"a": 1}, {"$where": "true"}]}});
        assert_eq!(e.code, ErrorCode::BadValue);
        assert_eq!(
            e.message,
            "Parsing of collection validator failed :: caused by :: $where is not allowed in this context"
        );
        let function =
            doc! {"$function": {"body": "function() { return true; }", "args": [], "lang": "js"}};
        let e = parse(doc! {"validator": {"$expr": {"$and": [true, function]}}});
        assert_eq!(e.code, ErrorCode::FunctionInValidator);
        assert_eq!(
            e.message,
            "Parsing of collection validator failed :: caused by :: $function cannot be used inside a validator."
        );
        let system = Namespace::new("admin", "c").unwrap();
        let e =
            CollectionOptions::parse("create", &system, doc! {"validator": {"a": 1}}).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidOptions);
    }

    #[test]
    fn an_unparsable_stored_validator_refuses_checked_writes() {
        let o = CollectionOptions::stored(&ns(), doc! {"validator": {"a": {"$bogus": 1}}});
        assert!(check(&o, doc! {"_id": 1, "a": 1}, None).is_err());
        assert!(o
            .check(&ns(), &doc! {"_id": 1}, None, DocumentValidation::Bypass)
            .is_ok());
        assert_eq!(o.document, doc! {"validator": {"a": {"$bogus": 1}}});
    }
}
