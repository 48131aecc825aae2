//! Sort specifications: parsing `{a: 1, b: -1}` and ordering documents the
//! way MongoDB's `find` sorts them.
//!
//! Each sort field reduces a document to one sort value: a missing field is
//! `null`; an array field contributes its elements, and an ascending sort
//! uses the smallest of all values the path reaches while a descending
//! sort uses the largest; an empty array sorts below `null` in both
//! directions. Values then order by [`compare`].
//!
//! Sorting many documents should compute each document's key once with
//! [`SortSpec::key_for`] and order keys with [`SortSpec::compare_keys`];
//! [`SortSpec::compare`] does the same work per comparison without
//! allocating.

use std::cmp::Ordering;

use std::sync::Arc;

use bson::{Bson, Document};

use crate::error::Result;
use crate::query::collation::{self, Collation};
use crate::query::compare::{compare, Number};
use crate::query::geo::Near;
use crate::query::path::{parts, visit_sort_values, Part, SortLeaf};

/// A parsed sort specification such as `{a: 1, b: -1}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SortSpec {
    fields: Vec<SortField>,
    /// The collation strings order by (`None`: simple, by bytes).
    collation: Option<Arc<Collation>>,
}

/// One field of a sort specification.
#[derive(Debug, Clone, PartialEq)]
pub struct SortField {
    path: String,
    parts: Vec<Part>,
    ascending: bool,
    /// A `$near` order: the field sorts by its distance from this point
    /// (the path is then not a document path and names no index field).
    distance: Option<Arc<Near>>,
    /// `{$meta: "textScore"}`: by the `$text` score, highest first.
    text_score: bool,
}

impl SortField {
    /// The dotted path, as written in the specification.
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn ascending(&self) -> bool {
        self.ascending
    }
}

/// The sort value of a missing field.
static NULL: Bson = Bson::Null;
/// The sort value of an empty array: below `null` (MongoDB uses
/// `undefined`, which our comparison order puts level with `null`).
static EMPTY_ARRAY: Bson = Bson::MinKey;

impl SortSpec {
    /// Parses `{field: 1 | -1, ...}`; an empty specification means no sort.
    pub fn parse(spec: &Document) -> Result<SortSpec> {
        let mut fields = Vec::with_capacity(spec.len());
        for (path, direction) in spec {
            if path.is_empty() || path.split('.').any(str::is_empty) {
                crate::bail!(BadValue, "FieldPath field names may not be empty strings.");
            }
            if path.starts_with('$') {
                crate::bail!(BadValue, "FieldPath field names may not start with '$'.");
            }
            let text_score = matches!(direction, Bson::Document(meta)
                if meta.len() == 1 && meta.get_str("$meta").ok() == Some("textScore"));
            let ascending = match direction {
                Bson::Document(_) if text_score => false,
                Bson::Document(meta) if meta.contains_key("$meta") => {
                    crate::bail!(BadValue, "$meta sort keys are not supported");
                }
                other => match Number::of(other).map(Number::to_f64) {
                    Some(1.0) => true,
                    Some(-1.0) => false,
                    _ => crate::bail!(
                        BadValue,
                        "$sort key ordering must be 1 (for ascending) or -1 (for descending)"
                    ),
                },
            };
            fields.push(SortField {
                path: path.clone(),
                parts: parts(path),
                ascending,
                distance: None,
                text_score,
            });
        }
        Ok(SortSpec {
            fields,
            collation: None,
        })
    }

    /// The order of `$near`: nearest first by the distance from the
    /// point to the geometry at `path`, shown as `$distance.<path>`.
    pub fn by_distance(path: &str, near: &Near) -> SortSpec {
        SortSpec {
            fields: vec![SortField {
                path: format!("$distance.{path}"),
                parts: parts(path),
                ascending: true,
                distance: Some(Arc::new(near.clone())),
                text_score: false,
            }],
            collation: None,
        }
    }

    /// True for `{}`: results keep their natural order.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    pub fn fields(&self) -> &[SortField] {
        &self.fields
    }

    /// The same specification ordering strings by `collation`.
    pub fn with_collation(mut self, collation: Option<Arc<Collation>>) -> SortSpec {
        self.collation = collation;
        self
    }

    /// The collation strings order by; `None` for the simple one.
    pub fn collation(&self) -> Option<&Arc<Collation>> {
        self.collation.as_ref()
    }

    /// Runs `f` with this sort's collation current, when it has one.
    fn collated<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.collation {
            None => f(),
            some => collation::scoped(some.as_ref(), f),
        }
    }

    /// Orders two documents by the specification.
    pub fn compare(&self, a: &Document, b: &Document) -> Ordering {
        self.collated(|| self.compare_simple(a, b))
    }

    fn compare_simple(&self, a: &Document, b: &Document) -> Ordering {
        for field in &self.fields {
            let ord = match &field.distance {
                Some(near) => distance_of(a, field, near).total_cmp(&distance_of(b, field, near)),
                None => compare(sort_value(a, field), sort_value(b, field)),
            };
            let ord = if field.ascending { ord } else { ord.reverse() };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }

    /// The document's sort key, one value per field, for sorting large sets
    /// with [`SortSpec::compare_keys`].
    pub fn key_for(&self, doc: &Document) -> Vec<Bson> {
        self.collated(|| self.key_for_simple(doc))
    }

    fn key_for_simple(&self, doc: &Document) -> Vec<Bson> {
        self.fields
            .iter()
            .map(|f| match &f.distance {
                Some(near) => Bson::Double(distance_of(doc, f, near)),
                None => sort_value(doc, f).clone(),
            })
            .collect()
    }

    /// The sort key of a document a `$text` query scored `score`.
    pub fn key_for_scored(&self, doc: &Document, score: Option<f64>) -> Vec<Bson> {
        let mut key = self.key_for(doc);
        if let Some(score) = score {
            for (value, field) in key.iter_mut().zip(&self.fields) {
                if field.text_score {
                    *value = Bson::Double(score);
                }
            }
        }
        key
    }

    /// Whether a field sorts by `{$meta: "textScore"}`.
    pub fn wants_text_score(&self) -> bool {
        self.fields.iter().any(|f| f.text_score)
    }

    /// Whether the sort is by `{$meta: "textScore"}` alone (best first,
    /// ties by `_id` as every sort).
    pub fn is_text_score_only(&self) -> bool {
        matches!(self.fields.as_slice(), [f] if f.text_score)
    }

    /// Orders two keys from [`SortSpec::key_for`].
    pub fn compare_keys(&self, a: &[Bson], b: &[Bson]) -> Ordering {
        self.collated(|| self.compare_keys_simple(a, b))
    }

    fn compare_keys_simple(&self, a: &[Bson], b: &[Bson]) -> Ordering {
        for ((field, x), y) in self.fields.iter().zip(a).zip(b) {
            let ord = compare(x, y);
            let ord = if field.ascending { ord } else { ord.reverse() };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }
}

/// The distance of a document's nearest geometry at the field's path
/// (infinite when it has none).
fn distance_of(doc: &Document, field: &SortField, near: &Near) -> f64 {
    fn walk(value: &Bson, rest: &[Part], near: &Near, best: &mut f64) {
        match (value, rest.split_first()) {
            (leaf, None) => {
                if let Some((d, _)) = near.distance_within(leaf) {
                    *best = best.min(d);
                }
            }
            (Bson::Document(d), Some((first, rest))) => {
                if let Some(v) = d.get(&first.name) {
                    walk(v, rest, near, best);
                }
            }
            (Bson::Array(items), Some(_)) => {
                for item in items {
                    walk(item, rest, near, best);
                }
            }
            _ => {}
        }
    }
    let mut best = f64::INFINITY;
    if let Some((first, rest)) = field.parts.split_first() {
        if let Some(v) = doc.get(&first.name) {
            walk(v, rest, near, &mut best);
        }
    }
    best
}

/// The one value a field sorts a document by: the smallest (ascending) or
/// largest (descending) of the values its path reaches.
fn sort_value<'a>(doc: &'a Document, field: &SortField) -> &'a Bson {
    if field.text_score {
        return doc.get(crate::query::text::SCORE_FIELD).unwrap_or(&NULL);
    }
    let mut best: Option<&'a Bson> = None;
    let mut offer = |leaf: SortLeaf<'a>| {
        let v = match leaf {
            SortLeaf::Value(v) => v,
            SortLeaf::Missing => &NULL,
            SortLeaf::EmptyArray => &EMPTY_ARRAY,
        };
        let better = match best {
            None => true,
            Some(current) => {
                let ord = compare(v, current);
                if field.ascending {
                    ord == Ordering::Less
                } else {
                    ord == Ordering::Greater
                }
            }
        };
        if better {
            best = Some(v);
        }
    };
    visit_sort_values(doc, &field.parts, &mut offer);
    best.unwrap_or(&NULL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use bson::doc;

    fn sorted(spec: Document, docs: Vec<Document>) -> Vec<Document> {
        let spec = SortSpec::parse(&spec).unwrap();
        let mut a = docs.clone();
        a.sort_by(|x, y| spec.compare(x, y));
        let mut keyed: Vec<_> = docs.into_iter().map(|d| (spec.key_for(&d), d)).collect();
        keyed.sort_by(|x, y| spec.compare_keys(&x.0, &y.0));
        let b: Vec<_> = keyed.into_iter().map(|(_, d)| d).collect();
        assert_eq!(a, b, "compare and key_for agree");
        a
    }

    #[test]
    fn collated_sorts_order_strings_by_the_collation() {
        let docs = vec![
            doc! {"_id": 1, "s": "b"},
            doc! {"_id": 2, "s": "B"},
            doc! {"_id": 3, "s": "a"},
            doc! {"_id": 4, "s": ["c", "A"]},
            doc! {"_id": 5, "s": "10"},
            doc! {"_id": 6, "s": "9"},
        ];
        let order = |collation: Document| -> Vec<i32> {
            let c = crate::query::collation::Collation::parse_document(&collation).unwrap();
            let spec = SortSpec::parse(&doc! {"s": 1, "_id": 1})
                .unwrap()
                .with_collation(c);
            let mut by_doc = docs.clone();
            by_doc.sort_by(|x, y| spec.compare(x, y));
            let mut keyed: Vec<_> = docs.iter().map(|d| (spec.key_for(d), d.clone())).collect();
            keyed.sort_by(|x, y| spec.compare_keys(&x.0, &y.0));
            let by_key: Vec<Document> = keyed.into_iter().map(|(_, d)| d).collect();
            assert_eq!(by_doc, by_key, "compare and key_for agree");
            ids(by_doc)
        };
        assert_eq!(
            ids(sorted(doc! {"s": 1, "_id": 1}, docs.clone())),
            [5, 6, 4, 2, 3, 1]
        );
        assert_eq!(
            order(doc! {"locale": "en", "strength": 2}),
            [5, 6, 3, 4, 1, 2]
        );
        assert_eq!(
            order(doc! {"locale": "en", "numericOrdering": true}),
            [6, 5, 3, 4, 1, 2]
        );
    }

    fn ids(docs: Vec<Document>) -> Vec<i32> {
        docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
    }

    #[test]
    fn parses_directions() {
        assert!(SortSpec::parse(&doc! {}).unwrap().is_empty());
        let s = SortSpec::parse(&doc! {"a": 1, "b": -1i64, "c": 1.0, "d": -1.0}).unwrap();
        let dirs: Vec<_> = s
            .fields()
            .iter()
            .map(|f| (f.path(), f.ascending()))
            .collect();
        assert_eq!(
            dirs,
            vec![("a", true), ("b", false), ("c", true), ("d", false)]
        );
        for bad in [
            doc! {"a": 0},
            doc! {"a": 2},
            doc! {"a": "asc"},
            doc! {"a": 0.5},
            doc! {"a": {"$meta": "randVal"}},
            doc! {"": 1},
            doc! {"a..b": 1},
        ] {
            let e = SortSpec::parse(&bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadValue, "{bad}");
        }
        assert_eq!(
            SortSpec::parse(&doc! {"a": 0}).unwrap_err().message,
            "$sort key ordering must be 1 (for ascending) or -1 (for descending)"
        );
    }

    #[test]
    fn orders_across_types_and_fields() {
        let docs = vec![
            doc! {"_id": 1, "a": "x"},
            doc! {"_id": 2, "a": 5},
            doc! {"_id": 3},
            doc! {"_id": 4, "a": 2.5},
            doc! {"_id": 5, "a": null},
            doc! {"_id": 6, "a": {"b": 1}},
        ];
        assert_eq!(
            ids(sorted(doc! {"a": 1, "_id": 1}, docs.clone())),
            vec![3, 5, 4, 2, 1, 6]
        );
        assert_eq!(
            ids(sorted(doc! {"a": -1, "_id": 1}, docs)),
            vec![6, 1, 2, 4, 3, 5]
        );
        let docs = vec![
            doc! {"_id": 1, "a": 1, "b": 1},
            doc! {"_id": 2, "a": 1, "b": 2},
            doc! {"_id": 3, "a": 0, "b": 0},
        ];
        assert_eq!(ids(sorted(doc! {"a": -1, "b": -1}, docs)), vec![2, 1, 3]);
    }

    #[test]
    fn arrays_use_min_ascending_and_max_descending() {
        let docs = vec![
            doc! {"_id": 1, "a": [1, 10]},
            doc! {"_id": 2, "a": 5},
            doc! {"_id": 3, "a": [3, 4]},
            doc! {"_id": 4, "a": []},
            doc! {"_id": 5},
        ];
        assert_eq!(
            ids(sorted(doc! {"a": 1}, docs.clone())),
            vec![4, 5, 1, 3, 2]
        );
        assert_eq!(ids(sorted(doc! {"a": -1}, docs)), vec![1, 2, 3, 5, 4]);
    }

    #[test]
    fn dotted_paths_collect_through_arrays() {
        let docs = vec![
            doc! {"_id": 1, "a": [{"b": 3}, {"b": 9}]},
            doc! {"_id": 2, "a": [{"b": 5}]},
            doc! {"_id": 3, "a": {"b": 4}},
            doc! {"_id": 4, "a": [{"c": 1}, {"b": 6}]},
        ];
        // _id 4 has a missing b in one element, which counts as null.
        assert_eq!(ids(sorted(doc! {"a.b": 1}, docs.clone())), vec![4, 1, 3, 2]);
        assert_eq!(ids(sorted(doc! {"a.b": -1}, docs)), vec![1, 4, 2, 3]);
        let docs = vec![doc! {"_id": 1, "a": [5, 1]}, doc! {"_id": 2, "a": [2, 3]}];
        assert_eq!(ids(sorted(doc! {"a.0": 1}, docs)), vec![2, 1]);
    }

    proptest::proptest! {
        #[test]
        fn sort_order_is_consistent(
            a in proptest::collection::vec(proptest::prelude::any::<i8>(), 0..3),
            b in proptest::collection::vec(proptest::prelude::any::<i8>(), 0..3),
            c in proptest::collection::vec(proptest::prelude::any::<i8>(), 0..3),
            desc in proptest::prelude::any::<bool>(),
        ) {
            let spec = SortSpec::parse(&doc! {"x": if desc { -1 } else { 1 }}).unwrap();
            let make = |v: &Vec<i8>| match v.len() {
                0 => doc! {},
                1 => doc! {"x": i32::from(v[0])},
                _ => doc! {"x": v.iter().map(|&i| Bson::Int32(i32::from(i))).collect::<Vec<_>>()},
            };
            let docs = [make(&a), make(&b), make(&c)];
            for x in &docs {
                for y in &docs {
                    proptest::prop_assert_eq!(spec.compare(x, y), spec.compare(y, x).reverse());
                    proptest::prop_assert_eq!(
                        spec.compare(x, y),
                        spec.compare_keys(&spec.key_for(x), &spec.key_for(y))
                    );
                }
            }
        }
    }

    #[test]
    fn numbers_compare_across_types() {
        let docs = vec![
            doc! {"_id": 1, "a": 2i64},
            doc! {"_id": 2, "a": 1.5},
            doc! {"_id": 3, "a": 1},
        ];
        assert_eq!(ids(sorted(doc! {"a": 1}, docs)), vec![3, 2, 1]);
    }
}
