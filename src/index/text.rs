//! Text indexes: their key patterns, the entries a document gives them
//! and the scans a `$text` query reads. The text logic itself (terms,
//! scores, query matching) is in [`crate::query::text`].
//!
//! A text index's fields are its prefix fields, one `_fts` field that
//! holds a term, then its suffix fields; MongoDB shows the key pattern
//! as `{prefix..., _fts: "text", _ftsx: 1, suffix...}`. A document gives
//! one entry per distinct term of its indexed strings, with key values
//! `[prefix..., term, suffix...]` and, after them in the entry, the
//! term's score in the document. A `$text` query reads the entries of its
//! positive terms under its prefix values, nothing else, and fetches
//! those documents (each once).

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::plan::{prefix_successor, IndexPlan};
use super::{collect_document, DocumentKeys, Index, KeyField, KeyKind};
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::query::text::{self as text, TextSpec};

/// The name of the term field in a text index's key pattern.
pub const TERM_FIELD: &str = "_fts";

/// True when a key pattern describes a text index.
pub fn is_text_pattern(key: &Document) -> bool {
    key.iter()
        .any(|(k, v)| k == TERM_FIELD || matches!(v, Bson::String(s) if s == "text"))
}

/// Parses a text index's key pattern and options: its fields, the key
/// pattern as MongoDB shows it, and its options.
pub fn parse(key: &Document, spec: &Document) -> Result<(Vec<KeyField>, Document, TextSpec)> {
    let location = |code: i32, message: &str| Error::new(ErrorCode::Location(code), message);
    let mut fields = Vec::new();
    let mut shown = Document::new();
    let mut text_fields: Vec<String> = Vec::new();
    // 0: prefix fields, 1: text fields, 2: suffix fields.
    let mut stage = 0;
    for (path, value) in key {
        match (path.as_str(), value) {
            (TERM_FIELD, Bson::String(s)) if s == "text" => {
                if stage != 0 {
                    return Err(location(
                        17389,
                        "'text' fields in index must all be adjacent",
                    ));
                }
                stage = 1;
            }
            (TERM_FIELD, _) => return Err(location(17271, "expecting _fts:\"text\"")),
            ("_ftsx", v) => {
                if crate::query::compare::Number::of(v).map(|n| n.to_f64()) != Some(1.0) {
                    return Err(location(17272, "expecting _ftsx:1"));
                }
            }
            (_, Bson::String(s)) if s == "text" => {
                if stage == 2 {
                    return Err(location(
                        17389,
                        "'text' fields in index must all be adjacent",
                    ));
                }
                stage = 1;
                text_fields.push(path.clone());
            }
            (_, v) => {
                if path == "_ftsx" {
                    return Err(location(
                        17289,
                        "text index with reserved fields _fts/_ftsx not allowed",
                    ));
                }
                let kind = match crate::query::compare::Number::of(v).map(|n| n.to_f64()) {
                    Some(1.0) => KeyKind::Ascending,
                    Some(-1.0) => KeyKind::Descending,
                    _ => {
                        return Err(location(
                            17273,
                            "expected value 1 or -1 for non-text key in compound index",
                        ))
                    }
                };
                if stage == 1 {
                    stage = 2;
                    fields.push(KeyField {
                        path: TERM_FIELD.to_string(),
                        kind: KeyKind::Text,
                    });
                    shown.insert(TERM_FIELD, "text");
                    shown.insert("_ftsx", 1);
                }
                fields.push(KeyField {
                    path: path.clone(),
                    kind,
                });
                shown.insert(path.clone(), v.clone());
            }
        }
    }
    if stage == 1 {
        fields.push(KeyField {
            path: TERM_FIELD.to_string(),
            kind: KeyKind::Text,
        });
        shown.insert(TERM_FIELD, "text");
        shown.insert("_ftsx", 1);
    }
    let text_spec = TextSpec::parse(&text_fields, spec)?;
    if !text_spec.wildcard && text_spec.weights.is_empty() {
        return Err(Error::new(
            ErrorCode::CannotCreateIndex,
            format!("a text index needs at least one text field. Specification: {spec}"),
        ));
    }
    Ok((fields, shown, text_spec))
}

/// The entries `doc` gives a text index: one per distinct term, its
/// score after the key values.
pub fn keys_of(index: &Index, spec: &TextSpec, doc: &Document) -> Result<DocumentKeys> {
    let scores = spec.score_document(doc)?;
    let mut out = DocumentKeys::default();
    if scores.is_empty() {
        return Ok(out);
    }
    let mut extra: Vec<Bson> = Vec::new();
    for field in index.fields.iter().filter(|f| f.kind != KeyKind::Text) {
        let parts: Vec<&str> = field.path.split('.').collect();
        let mut values = Vec::new();
        let mut through_array = false;
        collect_document(doc, &parts, &mut values, &mut through_array);
        if through_array {
            return Err(Error::new(
                ErrorCode::CannotBuildIndexKeys,
                format!(
                    "Field '{}' of text index contains an array in document: {doc}",
                    field.path
                ),
            ));
        }
        extra.push(values.pop().unwrap_or(Bson::Null));
    }
    let term_at = term_position(index);
    out.multikey = scores.len() > 1;
    for (term, score) in scores {
        let mut values = extra.clone();
        values.insert(term_at, Bson::String(term));
        let key = index.encode(&values);
        values.push(Bson::Double(score));
        out.keys.push((key, values));
    }
    out.keys.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Where the term sits among a text index's key values.
fn term_position(index: &Index) -> usize {
    index
        .fields
        .iter()
        .position(|f| f.kind == KeyKind::Text)
        .unwrap_or(0)
}

/// The scan a `$text` query reads: the collection's text index (27
/// IndexNotFound without one), under the equality values the filter
/// gives its prefix fields, one range per positive term. Binds the
/// filter's `$text` to the index.
pub fn plan(indexes: &[Arc<Index>], filter: &Filter) -> Result<IndexPlan> {
    let Some(text_filter) = filter.text() else {
        return Err(Error::internal("a text plan without $text"));
    };
    let Some((index, spec)) = indexes
        .iter()
        .filter(|i| !i.hidden)
        .find_map(|i| i.text.as_ref().map(|s| (i, s)))
    else {
        return Err(text::index_required());
    };
    let query = text_filter.bind(spec);
    let term_at = term_position(index);
    let mut prefix = Vec::with_capacity(term_at);
    for field in &index.fields[..term_at] {
        match filter.equality_values(&field.path).as_deref() {
            Some([value]) => prefix.push(value.clone()),
            _ => {
                return Err(Error::new(
                    ErrorCode::NoQueryExecutionPlans,
                    "error processing query: planner returned error :: caused by :: failed to use text index to satisfy $text query (if text index is compound, are equality predicates given for all prefix fields?)",
                ))
            }
        }
    }
    let terms = query.lookup_terms();
    let mut ranges = Vec::with_capacity(terms.len());
    for term in &terms {
        let mut values = prefix.clone();
        values.push(Bson::String(term.clone()));
        let start = index.encode(&values);
        let end = prefix_successor(&start).map_or(Bound::Unbounded, Bound::Excluded);
        ranges.push((Bound::Included(start), end));
    }
    ranges.sort_by(|a, b| match (&a.0, &b.0) {
        (Bound::Included(x), Bound::Included(y)) => x.cmp(y),
        _ => std::cmp::Ordering::Equal,
    });
    let mut bounds = Document::new();
    for (field, value) in index.fields[..term_at].iter().zip(&prefix) {
        bounds.insert(field.path.clone(), vec![format!("[{value}, {value}]")]);
    }
    bounds.insert(TERM_FIELD, terms.clone());
    Ok(IndexPlan {
        index: index.clone(),
        ranges,
        reverse: false,
        provides_sort: false,
        dedupe: true,
        bounds,
    })
}

/// The options a text index's specification shows after its name.
pub fn shown_options(spec: &TextSpec) -> Document {
    spec.options()
}

/// The `$text` stages explain shows above the index scan, as MongoDB 7.0
/// names them.
pub fn explain_stages(filter: &Filter) -> Option<Document> {
    let text = filter.text()?;
    Some(doc! {
        "stage": "TEXT_MATCH",
        "indexPrefix": {},
        "parsedTextQuery": {"search": text.args.search.clone()},
        "textIndexVersion": text::TEXT_INDEX_VERSION,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(spec: Document) -> Index {
        Index::parse(&spec, 1).unwrap()
    }

    #[test]
    fn text_specs_show_as_mongodb_does() {
        let i = index(
            doc! {"key": {"title": "text", "body": "text"}, "name": "t", "weights": {"title": 10}},
        );
        assert_eq!(
            i.spec(),
            doc! {"v": 2, "key": {"_fts": "text", "_ftsx": 1}, "name": "t", "weights": {"body": 1, "title": 10}, "default_language": "english", "language_override": "language", "textIndexVersion": 3}
        );
        let back = Index::from_stored(&i.to_stored()).unwrap();
        assert_eq!(back.spec(), i.spec());
        let i = index(doc! {"key": {"a": 1, "t": "text", "b": -1}, "name": "x"});
        assert_eq!(
            i.spec().get_document("key").unwrap(),
            &doc! {"a": 1, "_fts": "text", "_ftsx": 1, "b": -1}
        );
        assert_eq!(i.fields.len(), 3);
        assert_eq!(
            default_name_of(doc! {"title": "text", "body": "text"}),
            "title_text_body_text"
        );
    }

    fn default_name_of(key: Document) -> String {
        super::super::default_name(&key)
    }

    #[test]
    fn bad_text_specs_get_mongodb_codes() {
        let code = |spec: Document| Index::parse(&spec, 1).unwrap_err().code.number();
        assert_eq!(
            code(doc! {"key": {"a": "text", "b": 1, "c": "text"}, "name": "x"}),
            17389
        );
        assert_eq!(
            code(doc! {"key": {"a": "text", "b": 2}, "name": "x"}),
            17273
        );
        assert_eq!(
            code(doc! {"key": {"a": "text"}, "name": "x", "weights": {"a": "x"}}),
            17283
        );
    }

    #[test]
    fn entries_hold_terms_and_scores() {
        let i = index(doc! {"key": {"k": 1, "t": "text"}, "name": "x"});
        let keys = i.keys_of(&doc! {"k": 5, "t": "cake and coffee"}).unwrap();
        assert!(keys.multikey);
        let values: Vec<Vec<Bson>> = keys.keys.into_iter().map(|(_, v)| v).collect();
        assert_eq!(
            values,
            vec![
                vec![
                    Bson::Int32(5),
                    Bson::String("cake".into()),
                    Bson::Double(0.75)
                ],
                vec![
                    Bson::Int32(5),
                    Bson::String("coffe".into()),
                    Bson::Double(0.75)
                ],
            ]
        );
        assert!(i.keys_of(&doc! {"k": 5}).unwrap().keys.is_empty());
    }
}
