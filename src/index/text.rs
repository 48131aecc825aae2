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

use bson::{Bson, Document};

use super::plan::{prefix_successor, IndexPlan};
use super::Index;
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::query::text::{self as text, TERM_FIELD};

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
    let term_at = index.text_term_position();
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

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

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
