//! `writeConcern`: parsed as MongoDB 7.0 parses it
//! (`WriteConcernOptions::parse`, `write_concern_options.idl`), before the
//! command runs, so a malformed one fails the command and writes nothing.
//!
//! A well-formed write concern this server cannot satisfy — it acts as one
//! data-bearing node per partition — does not stop the write: as on a
//! replica set, the write happens and the reply carries a
//! `writeConcernError` (`w: 2`: UnsatisfiableWriteConcern; an unknown
//! mode: UnknownReplWriteConcern).

use bson::{doc, Bson, Document};

use super::args::type_name;
use crate::error::{Error, ErrorCode, Result};

/// The most members of a replica set, and so the largest numeric `w`.
const MAX_MEMBERS: i64 = 50;

/// Commands whose reply carries a `writeConcernError` when the write
/// concern cannot be satisfied.
const WRITE_COMMANDS: &[&str] = &[
    "aggregate",
    "collMod",
    "create",
    "createIndexes",
    "delete",
    "drop",
    "dropDatabase",
    "dropIndexes",
    "findAndModify",
    "insert",
    "renameCollection",
    "shardCollection",
    "update",
];

/// What a command's `writeConcern` asks of its reply.
#[derive(Debug, Default, PartialEq)]
pub struct Checked {
    /// The `writeConcernError` to put in a write command's reply when the
    /// write concern cannot be satisfied.
    pub error: Option<Document>,
    /// False when the client asked not to wait for the journal
    /// (`j: false`, without `w: "majority"` or `fsync`): the write is
    /// acknowledged once it survives a crash of the process, and synced
    /// within `--journal-commit-interval-ms`.
    pub journal: bool,
}

/// Checks the command's `writeConcern`. Fails when it is malformed.
pub fn check(command: &str, body: &Document) -> Result<Checked> {
    let Some(wc) = body.get("writeConcern") else {
        return Ok(Checked {
            error: None,
            journal: true,
        });
    };
    let Bson::Document(wc) = wc else {
        return Err(Error::type_mismatch(format!(
            "\"writeConcern\" had the wrong type. Expected object, found {}",
            type_name(wc)
        )));
    };
    let parsed = parse(wc)?;
    let error = parsed
        .unsatisfiable
        .filter(|_| WRITE_COMMANDS.contains(&command))
        .map(|e| {
            doc! {
                "code": e.code.number(),
                "codeName": e.code.name().as_ref(),
                "errmsg": e.message,
                "errInfo": {"writeConcern": wc.clone()},
            }
        });
    Ok(Checked {
        error,
        journal: parsed.journal,
    })
}

/// A parsed write concern.
struct Parsed {
    /// Why it cannot be satisfied, if it cannot.
    unsatisfiable: Option<Error>,
    journal: bool,
}

/// Parses a write concern document.
fn parse(wc: &Document) -> Result<Parsed> {
    let mut unsatisfiable = None;
    let mut j = None;
    let mut fsync = false;
    let mut majority = false;
    for (field, value) in wc {
        match field.as_str() {
            "w" => {
                unsatisfiable = parse_w(value)?;
                majority = matches!(value, Bson::String(m) if m == "majority");
            }
            "j" => j = Some(safe_bool(field, value)?),
            "fsync" => fsync = safe_bool(field, value)?,
            // Any value: a number that is not one counts as 0.
            "wtimeout" => {}
            // Accepted for compatibility and ignored, as MongoDB does.
            "wElectionId" | "wOpTime" | "getLastError" | "provenance" => {}
            other => {
                return Err(Error::new(
                    ErrorCode::UnknownField,
                    format!("BSON field 'writeConcern.{other}' is an unknown field."),
                ))
            }
        }
    }
    if j == Some(true) && fsync {
        return Err(Error::failed_to_parse(
            "fsync and j options cannot be used together",
        ));
    }
    Ok(Parsed {
        unsatisfiable,
        journal: j != Some(false) || fsync || majority,
    })
}

fn parse_w(w: &Bson) -> Result<Option<Error>> {
    let number = match w {
        Bson::Null | Bson::Undefined => return Ok(None),
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.is_nan() => return Err(Error::failed_to_parse("w cannot be NaN")),
        // As MongoDB's safeNumberLong: truncated, saturating.
        Bson::Double(f) => Some(*f as i64),
        Bson::Decimal128(d) => match d.to_string().parse::<f64>() {
            Ok(f) if f.is_nan() => return Err(Error::failed_to_parse("w cannot be NaN")),
            Ok(f) => Some(f as i64),
            Err(_) => return Err(Error::failed_to_parse("w cannot be NaN")),
        },
        Bson::String(mode) if mode == "majority" => return Ok(None),
        Bson::String(mode) => {
            return Ok(Some(Error::new(
                ErrorCode::UnknownReplWriteConcern,
                format!("No write concern mode named '{mode}' found in replica set configuration"),
            )))
        }
        Bson::Document(tags) => {
            if tags.is_empty() {
                return Err(Error::failed_to_parse("tagged write concern requires tags"));
            }
            for (tag, count) in tags {
                if !matches!(
                    count,
                    Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
                ) {
                    return Err(Error::failed_to_parse(format!(
                        "tags must be a single level document with only number values; found: {tag}: {count}"
                    )));
                }
            }
            return Ok(Some(Error::new(
                ErrorCode::UnsatisfiableWriteConcern,
                "Not enough nodes match write concern mode",
            )));
        }
        other => {
            return Err(Error::failed_to_parse(format!(
                "w has to be a number, string, or object; found: {}",
                type_name(other)
            )))
        }
    };
    match number {
        Some(n) if !(0..=MAX_MEMBERS).contains(&n) => Err(Error::failed_to_parse(format!(
            "w has to be a non-negative number and not greater than {MAX_MEMBERS}; found: {n}"
        ))),
        Some(n) if n > 1 => Ok(Some(Error::new(
            ErrorCode::UnsatisfiableWriteConcern,
            "Not enough data-bearing nodes",
        ))),
        _ => Ok(None),
    }
}

/// An IDL `safeBool`: a boolean or any number.
fn safe_bool(field: &str, v: &Bson) -> Result<bool> {
    match v {
        Bson::Boolean(b) => Ok(*b),
        Bson::Int32(n) => Ok(*n != 0),
        Bson::Int64(n) => Ok(*n != 0),
        Bson::Double(f) => Ok(*f != 0.0),
        Bson::Decimal128(d) => Ok(d.to_string().parse::<f64>().is_ok_and(|f| f != 0.0)),
        other => Err(Error::type_mismatch(format!(
            "BSON field 'writeConcern.{field}' is the wrong type '{}', expected types '[bool, long, int, decimal, double]'",
            type_name(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(wc: Bson) -> Option<i32> {
        check("insert", &doc! {"insert": "c", "writeConcern": wc})
            .err()
            .map(|e| e.code.number())
    }

    fn wc_error(wc: Bson) -> Option<i32> {
        check("insert", &doc! {"insert": "c", "writeConcern": wc})
            .unwrap()
            .error
            .map(|d| d.get_i32("code").unwrap())
    }

    fn journal(wc: Document) -> bool {
        check("insert", &doc! {"insert": "c", "writeConcern": wc})
            .unwrap()
            .journal
    }

    #[test]
    fn malformed_write_concerns_are_refused_with_mongodb_codes() {
        assert_eq!(code(Bson::Document(doc! {"w": -1})), Some(9));
        assert_eq!(code(Bson::Document(doc! {"w": 1000})), Some(9));
        assert_eq!(code(Bson::Document(doc! {"w": 51})), Some(9));
        assert_eq!(code(Bson::Document(doc! {"w": f64::NAN})), Some(9));
        assert_eq!(code(Bson::Document(doc! {"w": {}})), Some(9));
        assert_eq!(code(Bson::Document(doc! {"w": {"dc": "x"}})), Some(9));
        assert_eq!(code(Bson::Document(doc! {"w": true})), Some(9));
        assert_eq!(code(Bson::Document(doc! {"w": [1]})), Some(9));
        assert_eq!(code(Bson::Document(doc! {"j": "x"})), Some(14));
        assert_eq!(code(Bson::Document(doc! {"fsync": "x"})), Some(14));
        assert_eq!(
            code(Bson::Document(doc! {"j": true, "fsync": true})),
            Some(9)
        );
        assert_eq!(code(Bson::Document(doc! {"x": 1})), Some(40415));
        assert_eq!(code(Bson::String("majority".into())), Some(14));
    }

    #[test]
    fn well_formed_write_concerns_pass() {
        for wc in [
            doc! {},
            doc! {"w": 0},
            doc! {"w": 1, "j": true, "wtimeout": 100},
            doc! {"w": 1.0, "j": 1, "fsync": false},
            doc! {"w": "majority", "wtimeout": "ignored"},
            doc! {"w": Bson::Null},
        ] {
            assert_eq!(code(Bson::Document(wc.clone())), None, "{wc}");
            assert_eq!(wc_error(Bson::Document(wc.clone())), None, "{wc}");
        }
    }

    #[test]
    fn unsatisfiable_ones_let_the_write_happen_and_say_so() {
        assert_eq!(wc_error(Bson::Document(doc! {"w": 2})), Some(100));
        assert_eq!(wc_error(Bson::Document(doc! {"w": 50})), Some(100));
        assert_eq!(wc_error(Bson::Document(doc! {"w": "dc"})), Some(79));
        assert_eq!(wc_error(Bson::Document(doc! {"w": {"dc": 1}})), Some(100));
        // Reads have nothing to report.
        let find = check("find", &doc! {"find": "c", "writeConcern": {"w": 2}}).unwrap();
        assert!(find.error.is_none());
    }

    #[test]
    fn only_an_explicit_j_false_skips_the_journal_wait() {
        assert!(check("insert", &doc! {"insert": "c"}).unwrap().journal);
        assert!(journal(doc! {}));
        assert!(journal(doc! {"w": 1}));
        assert!(journal(doc! {"w": 1, "j": true}));
        assert!(!journal(doc! {"w": 1, "j": false}));
        assert!(!journal(doc! {"j": 0}));
        assert!(journal(doc! {"w": "majority", "j": false}));
        assert!(journal(doc! {"j": false, "fsync": true}));
    }
}
