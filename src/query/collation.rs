//! Collations: how strings compare when a command, a collection or an
//! index names a `collation` other than the simple one.
//!
//! A collation document (`{locale, caseLevel, caseFirst, strength,
//! numericOrdering, alternate, maxVariable, normalization, backwards,
//! version}`) is parsed once into a [`Collation`], checked as MongoDB 7.0
//! checks it, with the defaults of its locale filled in ([`Collation::spec`]
//! is the document `listIndexes` and `listCollections` show). The simple
//! collation (`{locale: "simple"}`, or none) is `None` everywhere: strings
//! then compare by their UTF-8 bytes.
//!
//! Comparison is ICU4X's collator (CLDR root order and locale tailorings).
//! Two ways in:
//! - [`scoped`] makes a collation current on this thread for the length of
//!   a synchronous call; [`crate::query::compare`] then orders strings by
//!   it. Filters and sorts that carry a collation wrap their evaluation in
//!   it, so every comparison inside (`$in`, arrays, embedded documents) is
//!   collated without threading an argument through each one.
//! - [`Collation::collate_value`] replaces every string inside a value by a
//!   string whose byte order is the collation's order (the hex digits of
//!   the ICU sort key). Index keys of a collated index are built from such
//!   values, so the index orders, and a unique index compares, by the
//!   collation.

use std::cmp::Ordering;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use icu_collator::options::{AlternateHandling, CaseLevel, CollatorOptions, MaxVariable, Strength};
use icu_collator::preferences::{CollationCaseFirst, CollationNumericOrdering};
use icu_collator::{CollatorBorrowed, CollatorPreferences};
use icu_locale_core::Locale;

use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{has_string_order, type_name, with_string_order, StringOrder};

/// The ICU version MongoDB 7.0 reports in a collation's `version`.
pub const VERSION: &str = "57.1";

/// The locales MongoDB 7.0 accepts (its documented list), as written in a
/// collation document.
const LOCALES: &[&str] = &[
    "af",
    "am",
    "ar",
    "as",
    "az",
    "be",
    "bg",
    "bn",
    "bo",
    "bs",
    "bs_Cyrl",
    "ca",
    "chr",
    "cs",
    "cy",
    "da",
    "de",
    "de_AT",
    "dsb",
    "dz",
    "ee",
    "el",
    "en",
    "en_US",
    "en_US_POSIX",
    "eo",
    "es",
    "et",
    "fa",
    "fa_AF",
    "fi",
    "fi_FI",
    "fil",
    "fo",
    "fr",
    "fr_CA",
    "ga",
    "gl",
    "gu",
    "ha",
    "haw",
    "he",
    "hi",
    "hr",
    "hsb",
    "hu",
    "hy",
    "id",
    "ig",
    "is",
    "it",
    "ja",
    "ka",
    "kk",
    "kl",
    "km",
    "kn",
    "ko",
    "kok",
    "ky",
    "lb",
    "lkt",
    "ln",
    "lo",
    "lt",
    "lv",
    "mk",
    "ml",
    "mn",
    "mr",
    "ms",
    "mt",
    "my",
    "nb",
    "ne",
    "nl",
    "nn",
    "om",
    "or",
    "pa",
    "pl",
    "ps",
    "pt",
    "ro",
    "ru",
    "se",
    "si",
    "sk",
    "sl",
    "smn",
    "sq",
    "sr",
    "sr_Latn",
    "sv",
    "sw",
    "ta",
    "te",
    "th",
    "to",
    "tr",
    "ug",
    "uk",
    "ur",
    "vi",
    "wae",
    "yi",
    "yo",
    "zh",
    "zh_Hant",
    "zu",
    "root",
];

/// A parsed, non-simple collation.
pub struct Collation {
    /// The full specification, every field filled in.
    spec: Document,
    collator: CollatorBorrowed<'static>,
}

impl std::fmt::Debug for Collation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Collation({})", self.spec)
    }
}

/// Two collations are one when their full specifications are.
impl PartialEq for Collation {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

/// True when two optional collations (`None` is simple) are the same.
pub fn same(a: Option<&Arc<Collation>>, b: Option<&Arc<Collation>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

fn field_error(field: &str, value: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field 'collation.{field}' is the wrong type '{}', expected type '{expected}'",
        type_name(value)
    ))
}

fn bool_field(spec: &Document, field: &str) -> Result<Option<bool>> {
    match spec.get(field) {
        None => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(other) => Err(field_error(field, other, "bool")),
    }
}

fn str_field<'a>(spec: &'a Document, field: &str) -> Result<Option<&'a str>> {
    match spec.get(field) {
        None => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s)),
        Some(other) => Err(field_error(field, other, "string")),
    }
}

fn enum_error(field: &str, value: &str) -> Error {
    Error::bad_value(format!(
        "Enumeration value '{value}' for field 'collation.{field}' is not a valid value."
    ))
}

impl Collation {
    /// Parses a `collation` option: `None` for the simple collation.
    pub fn parse(value: &Bson) -> Result<Option<Arc<Collation>>> {
        let Bson::Document(spec) = value else {
            return Err(Error::type_mismatch(format!(
                "BSON field 'collation' is the wrong type '{}', expected type 'object'",
                type_name(value)
            )));
        };
        Self::parse_document(spec)
    }

    /// Parses a collation document: `None` for the simple collation.
    pub fn parse_document(spec: &Document) -> Result<Option<Arc<Collation>>> {
        const FIELDS: &[&str] = &[
            "locale",
            "caseLevel",
            "caseFirst",
            "strength",
            "numericOrdering",
            "alternate",
            "maxVariable",
            "normalization",
            "backwards",
            "version",
        ];
        if let Some(unknown) = spec.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(Error::new(
                ErrorCode::UnknownField,
                format!("BSON field 'collation.{unknown}' is an unknown field."),
            ));
        }
        let Some(locale) = str_field(spec, "locale")? else {
            return Err(Error::new(
                ErrorCode::MissingField,
                "BSON field 'collation.locale' is missing but a required field",
            ));
        };
        let case_level = bool_field(spec, "caseLevel")?;
        let case_first = str_field(spec, "caseFirst")?;
        let strength = match spec.get("strength") {
            None => None,
            Some(v) => match crate::query::compare::Number::of(v).and_then(|n| n.integral()) {
                Some(n) => Some(n),
                None if crate::query::compare::is_number(v) => {
                    return Err(Error::bad_value(format!(
                        "BSON field 'collation.strength' must be a whole number, got {v}"
                    )))
                }
                None => {
                    return Err(Error::type_mismatch(format!(
                        "BSON field 'collation.strength' is the wrong type '{}', expected types '[long, int, decimal, double]'",
                        type_name(v)
                    )))
                }
            },
        };
        let numeric = bool_field(spec, "numericOrdering")?;
        let alternate = str_field(spec, "alternate")?;
        let max_variable = str_field(spec, "maxVariable")?;
        let normalization = bool_field(spec, "normalization")?;
        let backwards = bool_field(spec, "backwards")?;
        let version = str_field(spec, "version")?;

        if locale.contains('\0') {
            return Err(Error::bad_value(format!(
                "Field 'locale' cannot contain null byte. Collation spec: {spec}"
            )));
        }
        if locale == "simple" {
            return Ok(None);
        }
        let strength = match strength {
            None => Strength::Tertiary,
            Some(1) => Strength::Primary,
            Some(2) => Strength::Secondary,
            Some(3) => Strength::Tertiary,
            Some(4) => Strength::Quaternary,
            Some(5) => Strength::Identical,
            Some(n) if n < 0 => {
                return Err(Error::new(
                    ErrorCode::ValueNegative,
                    format!("BSON field 'strength' value must be >= 0, actual value '{n}'"),
                ))
            }
            Some(n) if n > 5 => {
                return Err(Error::new(
                    ErrorCode::ValueNegative,
                    format!("BSON field 'strength' value must be <= 5, actual value '{n}'"),
                ))
            }
            Some(n) => {
                return Err(Error::failed_to_parse(format!(
                    "Field 'strength' must be an integer 1 through 5. Got: {n}"
                )))
            }
        };
        let case_first = match case_first {
            None => None,
            Some("upper") => Some(CollationCaseFirst::Upper),
            Some("lower") => Some(CollationCaseFirst::Lower),
            Some("off") => Some(CollationCaseFirst::False),
            Some(other) => return Err(enum_error("caseFirst", other)),
        };
        let alternate = match alternate {
            None | Some("non-ignorable") => AlternateHandling::NonIgnorable,
            Some("shifted") => AlternateHandling::Shifted,
            Some(other) => return Err(enum_error("alternate", other)),
        };
        let max_variable = match max_variable {
            None | Some("punct") => MaxVariable::Punctuation,
            Some("space") => MaxVariable::Space,
            Some(other) => return Err(enum_error("maxVariable", other)),
        };
        if locale.is_empty() {
            return Err(Error::bad_value(format!(
                "Field 'locale' cannot be the empty string in: {spec}"
            )));
        }
        let icu_locale = icu_locale(locale)
            .ok_or_else(|| Error::bad_value(format!("Field 'locale' is invalid in: {spec}")))?;

        let mut prefs = CollatorPreferences::from(&icu_locale);
        if let Some(cf) = case_first {
            prefs.case_first = Some(cf);
        }
        if let Some(n) = numeric {
            prefs.numeric_ordering = Some(if n {
                CollationNumericOrdering::True
            } else {
                CollationNumericOrdering::False
            });
        }
        let mut options = CollatorOptions::default();
        options.strength = Some(strength);
        options.alternate_handling = Some(alternate);
        options.max_variable = Some(max_variable);
        options.case_level = case_level.map(|on| if on { CaseLevel::On } else { CaseLevel::Off });
        let collator = CollatorBorrowed::try_new(prefs, options)
            .map_err(|e| Error::bad_value(format!("Field 'locale' is invalid in: {spec}: {e}")))?;
        let resolved = collator.resolved_options();
        // ICU4X takes backward secondary weights from the locale only
        // (Canadian French is the one CLDR locale with them); it has no
        // switch for them.
        let locale_backwards = locale == "fr_CA";
        if let Some(b) = backwards {
            if b != locale_backwards {
                return Err(Error::bad_value(format!(
                    "'backwards: {b}' is not supported with locale '{locale}': backward secondary ordering follows the locale (on for fr_CA only)"
                )));
            }
        }
        let case_level = resolved.case_level == CaseLevel::On;
        let case_first = match resolved.case_first {
            CollationCaseFirst::Upper => "upper",
            CollationCaseFirst::Lower => "lower",
            _ => "off",
        };
        let strength_number = match strength {
            Strength::Primary => 1,
            Strength::Secondary => 2,
            Strength::Tertiary => 3,
            Strength::Quaternary => 4,
            _ => 5,
        };
        if locale_backwards && strength_number == 1 {
            return Err(Error::bad_value(format!(
                "'backwards' is invalid with 'strength' of 1 in: {spec}"
            )));
        }
        if case_first != "off" && !case_level && strength_number < 3 {
            return Err(Error::bad_value(format!(
                "'caseFirst' is invalid unless 'caseLevel' is on or 'strength' is greater than 2 in: {spec}"
            )));
        }
        if let Some(v) = version {
            if v != VERSION {
                return Err(Error::new(
                    ErrorCode::IncompatibleCollationVersion,
                    format!(
                        "Requested collation version {v} but the only available collator version was {VERSION}. Requested collation spec: {spec}"
                    ),
                ));
            }
        }
        let spec = doc! {
            "locale": locale,
            "caseLevel": case_level,
            "caseFirst": case_first,
            "strength": strength_number,
            "numericOrdering": resolved.numeric == CollationNumericOrdering::True,
            "alternate": if alternate == AlternateHandling::Shifted { "shifted" } else { "non-ignorable" },
            "maxVariable": if max_variable == MaxVariable::Space { "space" } else { "punct" },
            "normalization": normalization.unwrap_or(false),
            "backwards": locale_backwards,
            "version": VERSION,
        };
        Ok(Some(Arc::new(Collation { spec, collator })))
    }

    /// The full specification, as MongoDB echoes it.
    pub fn spec(&self) -> &Document {
        &self.spec
    }

    /// Orders two strings by this collation.
    pub fn compare_strs(&self, a: &str, b: &str) -> Ordering {
        self.collator.compare(a, b)
    }

    /// The ICU sort key of `s`: byte order is collation order.
    pub fn sort_key(&self, s: &str) -> Vec<u8> {
        let mut key = Vec::with_capacity(s.len() * 2 + 8);
        let Ok(()) = self.collator.write_sort_key_to(s, &mut key);
        key
    }

    /// A string whose byte order among such strings is the collation
    /// order of the originals: the sort key in hex digits.
    pub fn key_string(&self, s: &str) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let key = self.sort_key(s);
        let mut out = String::with_capacity(key.len() * 2);
        for b in key {
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
        out
    }

    /// `value` with every string inside it (not field names) replaced by
    /// its [`Collation::key_string`]: values so mapped order by bytes as
    /// the originals order by the collation.
    pub fn collate_value(&self, value: &Bson) -> Bson {
        match value {
            Bson::String(s) => Bson::String(self.key_string(s)),
            Bson::Symbol(s) => Bson::Symbol(self.key_string(s)),
            Bson::Array(items) => {
                Bson::Array(items.iter().map(|v| self.collate_value(v)).collect())
            }
            Bson::Document(d) => Bson::Document(
                d.iter()
                    .map(|(k, v)| (k.clone(), self.collate_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// The ICU4X locale for one of MongoDB's locale names (`zh_Hant`).
fn icu_locale(name: &str) -> Option<Locale> {
    if !LOCALES.contains(&name) {
        return None;
    }
    let tag = match name {
        "root" => "und".to_string(),
        "en_US_POSIX" => "en-US-posix".to_string(),
        other => other.replace('_', "-"),
    };
    tag.parse::<Locale>().ok()
}

/// True when `value` holds a string anywhere inside it.
pub fn has_string(value: &Bson) -> bool {
    match value {
        Bson::String(_) | Bson::Symbol(_) => true,
        Bson::Array(items) => items.iter().any(has_string),
        Bson::Document(d) => d.values().any(has_string),
        _ => false,
    }
}

impl StringOrder for Collation {
    fn compare_strs(&self, a: &str, b: &str) -> Ordering {
        self.collator.compare(a, b)
    }
}

/// Runs `f` with `collation` current on this thread (`None`: simple),
/// restoring the previous one afterwards: every string comparison of
/// [`crate::query::compare`] inside uses it. `f` must not await: the
/// scope is the thread's, not a task's.
pub fn scoped<R>(collation: Option<&Arc<Collation>>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<Collation>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
    let previous = CURRENT.with(|c| c.replace(collation.cloned()));
    let _restore = Restore(previous);
    with_string_order(collation.map(|c| Arc::clone(c) as Arc<dyn StringOrder>), f)
}

thread_local! {
    /// The collation [`scoped`] made current on this thread.
    static CURRENT: std::cell::RefCell<Option<Arc<Collation>>> =
        const { std::cell::RefCell::new(None) };
}

/// The value as the current collation compares it for equality (its
/// strings replaced by sort keys), when a collation is current and the
/// value holds a string: what sets and hash keys use in its place.
pub fn scoped_key(value: &Bson) -> Option<Bson> {
    if !has_string(value) {
        return None;
    }
    CURRENT.with(|c| c.borrow().as_ref().map(|c| c.collate_value(value)))
}

/// True when a non-simple collation is current on this thread.
pub fn is_scoped() -> bool {
    has_string_order()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::compare::compare_strings;

    fn parse(spec: Document) -> Result<Option<Arc<Collation>>> {
        Collation::parse_document(&spec)
    }

    fn code(spec: Document) -> i32 {
        parse(spec).unwrap_err().code.number()
    }

    #[test]
    fn simple_is_none_and_defaults_are_filled_in() {
        assert!(parse(doc! {"locale": "simple"}).unwrap().is_none());
        let c = parse(doc! {"locale": "en", "strength": 2})
            .unwrap()
            .unwrap();
        assert_eq!(
            c.spec(),
            &doc! {
                "locale": "en", "caseLevel": false, "caseFirst": "off", "strength": 2,
                "numericOrdering": false, "alternate": "non-ignorable", "maxVariable": "punct",
                "normalization": false, "backwards": false, "version": "57.1",
            }
        );
        let fr_ca = parse(doc! {"locale": "fr_CA"}).unwrap().unwrap();
        assert_eq!(fr_ca.spec().get_bool("backwards").ok(), Some(true));
        let da = parse(doc! {"locale": "da"}).unwrap().unwrap();
        assert_eq!(da.spec().get_str("caseFirst").ok(), Some("upper"));
    }

    #[test]
    fn bad_specs_get_mongodb_codes() {
        assert_eq!(code(doc! {"locale": "en", "foo": 1}), 40415);
        assert_eq!(code(doc! {"strength": 2}), 40414);
        assert_eq!(code(doc! {"locale": 1}), 14);
        assert_eq!(code(doc! {"locale": "xx"}), 2);
        assert_eq!(code(doc! {"locale": ""}), 2);
        assert_eq!(code(doc! {"locale": "en", "strength": 6}), 51024);
        assert_eq!(code(doc! {"locale": "en", "strength": "2"}), 14);
        assert_eq!(code(doc! {"locale": "en", "caseFirst": "x"}), 2);
        assert_eq!(code(doc! {"locale": "en", "caseLevel": 1}), 14);
        assert_eq!(
            code(doc! {"locale": "en", "caseFirst": "upper", "strength": 2}),
            2
        );
        assert_eq!(code(doc! {"locale": "en", "version": "1.0"}), 161);
        assert_eq!(code(doc! {"locale": "simple", "foo": 1}), 40415);
    }

    #[test]
    fn strengths_numeric_ordering_and_locales() {
        let ci = parse(doc! {"locale": "en", "strength": 2})
            .unwrap()
            .unwrap();
        assert_eq!(ci.compare_strs("Alice", "alice"), Ordering::Equal);
        assert_eq!(ci.compare_strs("alice", "Bob"), Ordering::Less);
        let base = parse(doc! {"locale": "en", "strength": 1})
            .unwrap()
            .unwrap();
        assert_eq!(base.compare_strs("é", "E"), Ordering::Equal);
        let en = parse(doc! {"locale": "en"}).unwrap().unwrap();
        assert_eq!(en.compare_strs("a", "B"), Ordering::Less);
        assert_eq!(en.compare_strs("10", "9"), Ordering::Less);
        let num = parse(doc! {"locale": "en", "numericOrdering": true})
            .unwrap()
            .unwrap();
        assert_eq!(num.compare_strs("10", "9"), Ordering::Greater);
        // German puts ä with a; Swedish after z.
        let de = parse(doc! {"locale": "de"}).unwrap().unwrap();
        let sv = parse(doc! {"locale": "sv"}).unwrap().unwrap();
        assert_eq!(de.compare_strs("äb", "z"), Ordering::Less);
        assert_eq!(sv.compare_strs("äb", "z"), Ordering::Greater);
        let upper = parse(doc! {"locale": "en", "caseFirst": "upper"})
            .unwrap()
            .unwrap();
        assert_eq!(upper.compare_strs("A", "a"), Ordering::Less);
        assert_eq!(en.compare_strs("A", "a"), Ordering::Greater);
    }

    #[test]
    fn key_strings_order_as_the_collation() {
        let c = parse(doc! {"locale": "en", "strength": 2})
            .unwrap()
            .unwrap();
        let words = ["b", "A", "a", "B", "ä", "ab", "", "Z"];
        for x in words {
            for y in words {
                assert_eq!(
                    c.key_string(x).cmp(&c.key_string(y)),
                    c.compare_strs(x, y),
                    "{x} {y}"
                );
            }
        }
        assert_eq!(
            c.collate_value(&Bson::Array(vec!["A".into(), 1.into()])),
            Bson::Array(vec![c.key_string("a").into(), 1.into()])
        );
    }

    #[test]
    fn scoped_comparison_restores_the_previous_collation() {
        let c = parse(doc! {"locale": "en", "strength": 2})
            .unwrap()
            .unwrap();
        assert_eq!(compare_strings("A", "a"), Ordering::Less);
        scoped(Some(&c), || {
            assert_eq!(compare_strings("A", "a"), Ordering::Equal);
            scoped(None, || {
                assert_eq!(compare_strings("A", "a"), Ordering::Less)
            });
            assert!(is_scoped());
        });
        assert!(!is_scoped());
    }
}
