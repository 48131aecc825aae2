//! Dotted field paths and the walks through documents and arrays that
//! filter, update, projection, sort and aggregate share. Pure BSON logic
//! below all of them: they split a path once with [`parts`] and follow it
//! with the walk whose array rule is theirs.
//!
//! MongoDB follows a path through arrays in a few distinct ways, each kept
//! here once:
//! - [`walk`], the query matcher's (`BSONElementIterator`): an array in the
//!   middle of a path is traversed (each document element continues the
//!   path) and a numeric component also selects the element at that index;
//!   an array at the end offers each element and then itself.
//! - [`visit_sort_values`], sort keys: a numeric component selects an
//!   element, otherwise every document element continues the path; an
//!   array at the end offers its elements.
//! - [`expression_value`], aggregation field paths (`$a.b`): arrays map the
//!   rest of the path over their document elements, with no numeric index.
//! - [`all_values`], `$lookup`'s `visitAllValuesAtPath`: arrays along the
//!   way and at the end expand one level.
//! - [`get_in_documents`]: documents only; an array on the way is missing.
//! - [`get_positional`], [`get_positional_mut`] and [`existing_prefix_len`],
//!   updates': arrays are entered only by a numeric component.
//! - [`raw_leaf`], scans reading documents still in BSON form: embedded
//!   documents only; an array on the way, or a field named twice, is
//!   left to a walk of the decoded document.
//! - [`element_at_path`], `$push`'s `$sort` keys (`extractElementAtPath`):
//!   the rest of the path is first tried as one literal field name, and
//!   arrays are entered only by a canonical index.
//! - [`for_each_value_mut`] and [`first_array_mut`], projection's edits
//!   of its output (`$slice`, the positional `$`): arrays along the way are
//!   traversed, or the first one found is the target.
//!
//! The numeric-component rule differs too: queries and sorts take only the
//! canonical form ([`array_index`]: `"0"`, `"12"`, not `"01"`), updates any
//! run of digits ([`update_index`]).

use std::borrow::Cow;

use bson::{Bson, Document, RawBsonRef, RawDocument};

use crate::query::raw_fields::unique_field;

/// One component of a dotted path, split once at parse time.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub name: String,
    /// The array index this component names, when it is a canonical
    /// decimal number (`"0"`, `"12"`, not `"01"`).
    pub index: Option<usize>,
}

impl Part {
    pub fn new(name: &str) -> Part {
        Part {
            name: name.to_string(),
            index: array_index(name),
        }
    }
}

impl AsRef<str> for Part {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

/// Splits a dotted path into its components.
pub fn parts(dotted: &str) -> Vec<Part> {
    dotted.split('.').map(Part::new).collect()
}

/// The array index a path component names in queries and sorts: a
/// canonical decimal number (no sign, no leading zero).
pub fn array_index(name: &str) -> Option<usize> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if name.len() > 1 && name.starts_with('0') {
        return None;
    }
    name.parse().ok()
}

/// The array index a path component names in an update: any run of
/// digits that fits 32 bits (`"01"` is element 1).
pub fn update_index(part: &str) -> Option<usize> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse::<u32>()
        .ok()
        .and_then(|n| usize::try_from(n).ok())
}

/// A document or an array seen as a document with keys "0", "1", ...
/// (`$elemMatch` applies document conditions to nested arrays that way).
#[derive(Clone, Copy)]
pub(crate) enum Container<'a> {
    Doc(&'a Document),
    Arr(&'a [Bson]),
}

impl<'a> Container<'a> {
    pub(crate) fn get(self, part: &Part) -> Option<&'a Bson> {
        match self {
            Container::Doc(d) => field(d, &part.name),
            Container::Arr(a) => part.index.and_then(|i| a.get(i)),
        }
    }
}

/// Looks a field up. Small documents (the common case) are scanned, which
/// beats hashing the name; larger ones use the index.
#[inline]
pub fn field<'a>(doc: &'a Document, name: &str) -> Option<&'a Bson> {
    if doc.len() <= 12 {
        doc.iter().find(|(k, _)| k.as_str() == name).map(|(_, v)| v)
    } else {
        doc.get(name)
    }
}

/// The value a path reached (`None` when missing) and the index of the
/// outermost array element it came from.
pub(crate) type Visit<'v, 'a> = &'v mut dyn FnMut(Option<&'a Bson>, Option<usize>) -> bool;

/// Offers every value `parts` reaches in `start` to `visit`, in MongoDB's
/// order, until `visit` returns true.
pub(crate) fn walk<'a>(
    start: Container<'a>,
    parts: &[Part],
    leaf_arrays: bool,
    visit: Visit<'_, 'a>,
) -> bool {
    let mut current = start;
    let mut i = 0;
    while let Some(part) = parts.get(i) {
        let last = i + 1 == parts.len();
        match current.get(part) {
            None => return visit(None, None),
            Some(value @ Bson::Array(items)) => {
                return walk_array(value, items, &parts[i + 1..], leaf_arrays, visit)
            }
            Some(value) if last => return visit(Some(value), None),
            Some(Bson::Document(sub)) => {
                current = Container::Doc(sub);
                i += 1;
            }
            Some(_) => return visit(None, None),
        }
    }
    false
}

fn walk_array<'a>(
    array: &'a Bson,
    items: &'a [Bson],
    rest: &[Part],
    leaf_arrays: bool,
    visit: Visit<'_, 'a>,
) -> bool {
    if rest.is_empty() && !leaf_arrays {
        return visit(Some(array), None);
    }
    for (index, item) in items.iter().enumerate() {
        if rest.is_empty() {
            if visit(Some(item), Some(index)) {
                return true;
            }
            continue;
        }
        let index_match = rest[0].index == Some(index);
        match item {
            Bson::Document(sub) => {
                // Implicit traversal: the outer position wins.
                let found = walk(Container::Doc(sub), rest, leaf_arrays, &mut |v, _| {
                    visit(v, Some(index))
                });
                if found {
                    return true;
                }
                if index_match {
                    let found = if rest.len() == 1 {
                        visit(Some(item), None)
                    } else {
                        walk(Container::Doc(sub), &rest[1..], leaf_arrays, visit)
                    };
                    if found {
                        return true;
                    }
                }
            }
            _ if index_match => {
                let found = if rest.len() == 1 {
                    visit(Some(item), None)
                } else if let Bson::Array(inner) = item {
                    walk_array(item, inner, &rest[1..], leaf_arrays, visit)
                } else {
                    false
                };
                if found {
                    return true;
                }
            }
            _ => {}
        }
    }
    if !rest.is_empty() {
        return false;
    }
    visit(Some(array), None)
}

/// Where a path leads in a document still in BSON form ([`raw_leaf`]).
#[derive(Debug, Clone, Copy)]
pub enum RawLeaf<'a> {
    /// The path ends early: a missing field, or a scalar where a document
    /// was needed.
    Missing,
    /// The value at the end of the path (an array or a document too).
    Value(RawBsonRef<'a>),
    /// Only the decoded document can tell: an array on the way, a field
    /// named twice (decoding keeps the last value, in the first place),
    /// or bytes that do not read.
    Unknown,
}

/// Follows `parts` through the embedded documents of `doc` without
/// decoding it. Where this gives a value or `Missing`, every walk above
/// that follows documents the same way (the matcher's, aggregation field
/// paths) reaches the same thing in the decoded document.
pub fn raw_leaf<'a, S: AsRef<str>>(doc: &'a RawDocument, parts: &[S]) -> RawLeaf<'a> {
    let mut current = doc;
    for (i, part) in parts.iter().enumerate() {
        let value = match unique_field(current, part.as_ref()) {
            Some(Some(value)) => value,
            Some(None) => return RawLeaf::Missing,
            None => return RawLeaf::Unknown,
        };
        match value {
            value if i + 1 == parts.len() => return RawLeaf::Value(value),
            RawBsonRef::Document(sub) => current = sub,
            RawBsonRef::Array(_) => return RawLeaf::Unknown,
            _ => return RawLeaf::Missing,
        }
    }
    RawLeaf::Unknown
}

/// Where a sort path ends in a document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SortLeaf<'a> {
    Value(&'a Bson),
    /// The path ends early: a missing field or a scalar on the way.
    Missing,
    /// An empty array at the end of the path.
    EmptyArray,
}

/// Offers every value a sort path reaches in `doc`.
pub fn visit_sort_values<'a>(
    doc: &'a Document,
    parts: &[Part],
    offer: &mut dyn FnMut(SortLeaf<'a>),
) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    match field(doc, &first.name) {
        None => offer(SortLeaf::Missing),
        Some(value) if rest.is_empty() => visit_sort_leaf(value, offer),
        Some(Bson::Document(sub)) => visit_sort_values(sub, rest, offer),
        Some(Bson::Array(items)) => visit_sort_array(items, rest, offer),
        Some(_) => offer(SortLeaf::Missing),
    }
}

fn visit_sort_leaf<'a>(value: &'a Bson, offer: &mut dyn FnMut(SortLeaf<'a>)) {
    match value {
        Bson::Array(items) if items.is_empty() => offer(SortLeaf::EmptyArray),
        Bson::Array(items) => items.iter().for_each(|v| offer(SortLeaf::Value(v))),
        other => offer(SortLeaf::Value(other)),
    }
}

/// An array in the middle of a sort path: a numeric component selects an
/// element; otherwise every document element continues the path.
fn visit_sort_array<'a>(items: &'a [Bson], rest: &[Part], offer: &mut dyn FnMut(SortLeaf<'a>)) {
    if let Some(item) = rest[0].index.and_then(|i| items.get(i)) {
        match (item, &rest[1..]) {
            (value, []) => visit_sort_leaf(value, offer),
            (Bson::Document(sub), tail) => visit_sort_values(sub, tail, offer),
            (Bson::Array(inner), tail) => visit_sort_array(inner, tail, offer),
            _ => offer(SortLeaf::Missing),
        }
        return;
    }
    let mut any = false;
    for item in items {
        if let Bson::Document(sub) = item {
            any = true;
            visit_sort_values(sub, rest, offer);
        }
    }
    if !any {
        offer(SortLeaf::Missing);
    }
}

/// An aggregation field path into a value: documents descend, arrays map
/// the rest of the path over their document elements.
pub fn expression_value<'a, S: AsRef<str>>(value: &'a Bson, path: &[S]) -> Option<Cow<'a, Bson>> {
    if path.is_empty() {
        return Some(Cow::Borrowed(value));
    }
    match value {
        Bson::Document(d) => expression_value_in(d, path),
        Bson::Array(items) => Some(Cow::Owned(Bson::Array(expression_array(items, path)))),
        _ => None,
    }
}

/// MongoDB's expression field paths: `"$a.b"` over `{a: [{b: 1}, {b: 2}]}`
/// is `[1, 2]`; elements without the field (and non-document elements) are
/// left out.
pub fn expression_value_in<'a, S: AsRef<str>>(
    doc: &'a Document,
    path: &[S],
) -> Option<Cow<'a, Bson>> {
    let (first, rest) = path.split_first()?;
    let value = field(doc, first.as_ref())?;
    expression_value(value, rest)
}

fn expression_array<S: AsRef<str>>(items: &[Bson], path: &[S]) -> Vec<Bson> {
    items
        .iter()
        .filter_map(|item| match item {
            Bson::Document(d) => expression_value_in(d, path).map(Cow::into_owned),
            _ => None,
        })
        .collect()
}

/// Every value at `path` below `value`, arrays along the way and at the
/// end expanded one level (MongoDB's `visitAllValuesAtPath`).
pub fn all_values<S: AsRef<str>>(value: &Bson, path: &[S], out: &mut Vec<Bson>) {
    let Some((head, rest)) = path.split_first() else {
        match value {
            Bson::Array(items) => out.extend(items.iter().cloned()),
            other => out.push(other.clone()),
        }
        return;
    };
    match value {
        Bson::Document(d) => {
            if let Some(next) = d.get(head.as_ref()) {
                all_values(next, rest, out);
            }
        }
        Bson::Array(items) => {
            for item in items {
                if let Bson::Document(d) = item {
                    if let Some(next) = d.get(head.as_ref()) {
                        all_values(next, rest, out);
                    }
                }
            }
        }
        _ => {}
    }
}

/// The value at `path` following documents only; an array or a scalar on
/// the way means missing.
pub fn get_in_documents<S: AsRef<str>>(
    doc: &Document,
    path: impl IntoIterator<Item = S>,
) -> Option<&Bson> {
    let mut parts = path.into_iter();
    let first = parts.next()?;
    let value = doc.get(first.as_ref())?;
    value_in_documents(value, parts)
}

/// [`get_in_documents`] starting from any value (a non-document has no
/// fields).
pub fn value_in_documents<S: AsRef<str>>(
    value: &Bson,
    path: impl IntoIterator<Item = S>,
) -> Option<&Bson> {
    let mut current = value;
    for part in path {
        let Bson::Document(doc) = current else {
            return None;
        };
        current = doc.get(part.as_ref())?;
    }
    Some(current)
}

/// One step of an update path: a document's field, or an array's element
/// by [`update_index`].
pub fn child<'a>(value: &'a Bson, part: &str) -> Option<&'a Bson> {
    match value {
        Bson::Document(doc) => doc.get(part),
        Bson::Array(array) => array.get(update_index(part)?),
        _ => None,
    }
}

/// [`child`], mutably.
pub fn child_mut<'a>(value: &'a mut Bson, part: &str) -> Option<&'a mut Bson> {
    match value {
        Bson::Document(doc) => doc.get_mut(part),
        Bson::Array(array) => array.get_mut(update_index(part)?),
        _ => None,
    }
}

/// The value at an update path: arrays are entered only by index.
pub fn get_positional<'a, S: AsRef<str>>(doc: &'a Document, path: &[S]) -> Option<&'a Bson> {
    let (first, rest) = path.split_first()?;
    let mut current = doc.get(first.as_ref())?;
    for part in rest {
        current = child(current, part.as_ref())?;
    }
    Some(current)
}

/// [`get_positional`], mutably.
pub fn get_positional_mut<'a, S: AsRef<str>>(
    doc: &'a mut Document,
    path: &[S],
) -> Option<&'a mut Bson> {
    let (first, rest) = path.split_first()?;
    let mut current = doc.get_mut(first.as_ref())?;
    for part in rest {
        current = child_mut(current, part.as_ref())?;
    }
    Some(current)
}

/// How many leading components of an update path exist in `doc`
/// (arrays entered by index only): where creating the rest starts.
pub fn existing_prefix_len<S: AsRef<str>>(doc: &Document, path: &[S]) -> usize {
    let Some((first, rest)) = path.split_first() else {
        return 0;
    };
    let Some(mut current) = doc.get(first.as_ref()) else {
        return 0;
    };
    let mut found = 1;
    for part in rest {
        match child(current, part.as_ref()) {
            Some(next) => {
                current = next;
                found += 1;
            }
            None => break,
        }
    }
    found
}

/// The value at a dotted `path` below `doc` as `$push`'s `$sort` reads a
/// sort field (MongoDB's `extractElementAtPath`): at each level the whole
/// rest of the path is first looked up as one field name (`"a.b"` may
/// be a field), then its first component is followed. Arrays are entered
/// only by a canonical index (`"1"`, not `"01"`).
pub fn element_at_path<'a>(doc: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut container = Container::Doc(doc);
    let mut rest = path;
    loop {
        if let Some(value) = container.get_named(rest) {
            return Some(value);
        }
        let (left, right) = rest.split_once('.')?;
        container = match container.get_named(left)? {
            Bson::Document(sub) => Container::Doc(sub),
            Bson::Array(items) => Container::Arr(items),
            _ => return None,
        };
        rest = right;
    }
}

impl<'a> Container<'a> {
    /// [`Container::get`] for a name not split into [`Part`]s.
    fn get_named(self, name: &str) -> Option<&'a Bson> {
        match self {
            Container::Doc(d) => d.get(name),
            Container::Arr(a) => array_index(name).and_then(|i| a.get(i)),
        }
    }
}

/// Offers every value at `path` in `doc` to `edit`, mutably, as
/// projection's `$slice` finds its arrays: documents descend, an array
/// along the way passes the rest of the path to each of its document
/// elements (other elements are left alone), and a missing field or a
/// scalar along the way ends that branch.
pub fn for_each_value_mut<S: AsRef<str>>(
    doc: &mut Document,
    path: &[S],
    edit: &mut dyn FnMut(&mut Bson),
) {
    let mut current = doc;
    let mut parts = path;
    while let Some((first, rest)) = parts.split_first() {
        let Some(value) = current.get_mut(first.as_ref()) else {
            return;
        };
        if rest.is_empty() {
            edit(value);
            return;
        }
        match value {
            Bson::Document(sub) => {
                current = sub;
                parts = rest;
            }
            Bson::Array(items) => {
                for item in items {
                    if let Bson::Document(sub) = item {
                        for_each_value_mut(sub, rest, edit);
                    }
                }
                return;
            }
            _ => return,
        }
    }
}

/// The first array met along `path` in `doc`, following documents only
/// (the positional `field.$` projection cuts that array); `None` when the
/// path is missing, meets a scalar, or ends without an array.
pub fn first_array_mut<'a, S: AsRef<str>>(
    doc: &'a mut Document,
    path: &[S],
) -> Option<&'a mut Vec<Bson>> {
    let mut current = doc;
    for part in path {
        match current.get_mut(part.as_ref())? {
            Bson::Array(items) => return Some(items),
            Bson::Document(sub) => current = sub,
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    /// What `raw_leaf` finds, decoded, with `Missing` and `Unknown` as
    /// strings.
    fn raw_found(doc: &Document, path: &str) -> Bson {
        let bytes = doc.to_vec().unwrap();
        let raw = RawDocument::from_bytes(&bytes).unwrap();
        match raw_leaf(raw, &parts(path)) {
            RawLeaf::Missing => Bson::String("missing".into()),
            RawLeaf::Unknown => Bson::String("unknown".into()),
            RawLeaf::Value(v) => Bson::try_from(v).unwrap(),
        }
    }

    #[test]
    fn raw_leaves_follow_documents_only() {
        let d = doc! {"a": {"b": {"c": 1}}, "s": 5, "arr": [{"b": 1}], "e": {}};
        assert_eq!(raw_found(&d, "a.b.c"), bson!(1));
        assert_eq!(raw_found(&d, "a.b"), bson!({"c": 1}));
        assert_eq!(raw_found(&d, "a.x"), bson!("missing"));
        assert_eq!(raw_found(&d, "s.x"), bson!("missing"));
        assert_eq!(raw_found(&d, "zz"), bson!("missing"));
        assert_eq!(raw_found(&d, "arr"), bson!([{"b": 1}]));
        assert_eq!(raw_found(&d, "arr.b"), bson!("unknown"));
        assert_eq!(raw_found(&d, "arr.0"), bson!("unknown"));
        assert_eq!(raw_found(&d, "e.x"), bson!("missing"));
        // The same path the decoded walks reach.
        for path in ["a.b.c", "a.b", "a.x", "s.x", "zz", "arr", "e.x"] {
            let decoded = expression_value_in(&d, &parts(path)).map(Cow::into_owned);
            let raw = match raw_found(&d, path) {
                Bson::String(s) if s == "missing" => None,
                other => Some(other),
            };
            assert_eq!(raw, decoded, "{path}");
        }
        let mut twice = bson::RawDocumentBuf::new();
        let key = <&bson::raw::CStr>::try_from("k").unwrap();
        twice.append(key, 1);
        twice.append(key, 2);
        assert!(matches!(raw_leaf(&twice, &["k"]), RawLeaf::Unknown));
        assert!(matches!(raw_leaf(&twice, &["j"]), RawLeaf::Missing));
    }

    fn walked(doc: &Document, path: &str, leaf_arrays: bool) -> Vec<(Option<Bson>, Option<usize>)> {
        let parts = parts(path);
        let mut out = Vec::new();
        walk(Container::Doc(doc), &parts, leaf_arrays, &mut |v, i| {
            out.push((v.cloned(), i));
            false
        });
        out
    }

    #[test]
    fn numeric_components_follow_each_rule() {
        assert_eq!(array_index("0"), Some(0));
        assert_eq!(array_index("12"), Some(12));
        assert_eq!(array_index("01"), None);
        assert_eq!(array_index("-1"), None);
        assert_eq!(array_index(""), None);
        assert_eq!(update_index("01"), Some(1));
        assert_eq!(update_index("4294967296"), None);
        assert_eq!(
            parts("a.0.b")[1],
            Part {
                name: "0".into(),
                index: Some(0)
            }
        );
    }

    #[test]
    fn query_walk_traverses_arrays_and_offers_them_last() {
        let d = doc! {"a": [{"b": 1}, {"b": [2, 3]}, 4]};
        assert_eq!(
            walked(&d, "a.b", true),
            vec![
                (Some(bson!(1)), Some(0)),
                (Some(bson!(2)), Some(1)),
                (Some(bson!(3)), Some(1)),
                (Some(bson!([2, 3])), Some(1)),
            ]
        );
        // Each document element is asked for a field "1" (missing there),
        // and the numeric component also selects the element itself.
        assert_eq!(
            walked(&d, "a.1.b", false),
            vec![
                (None, Some(0)),
                (None, Some(1)),
                (Some(bson!([2, 3])), None),
            ]
        );
        assert_eq!(walked(&d, "x", true), vec![(None, None)]);
        assert_eq!(
            walked(&doc! {"a": [1, 2]}, "a", false),
            vec![(Some(bson!([1, 2])), None)]
        );
    }

    #[test]
    fn sort_values_select_by_index_or_spread_over_documents() {
        let collect = |d: &Document, path: &str| {
            let mut out = Vec::new();
            visit_sort_values(d, &parts(path), &mut |leaf| {
                out.push(match leaf {
                    SortLeaf::Value(v) => Some(v.clone()),
                    SortLeaf::Missing => None,
                    SortLeaf::EmptyArray => Some(bson!("empty")),
                })
            });
            out
        };
        let d = doc! {"a": [{"b": 1}, {"b": [2, 3]}, {"c": 0}], "e": []};
        assert_eq!(
            collect(&d, "a.b"),
            vec![Some(bson!(1)), Some(bson!(2)), Some(bson!(3)), None]
        );
        assert_eq!(collect(&d, "a.1.b"), vec![Some(bson!(2)), Some(bson!(3))]);
        assert_eq!(collect(&d, "e"), vec![Some(bson!("empty"))]);
        assert_eq!(collect(&d, "z.y"), vec![None]);
    }

    #[test]
    fn expression_paths_map_over_arrays() {
        let d = doc! {"a": [{"b": 1}, {"c": 2}, 3, {"b": [4]}]};
        assert_eq!(
            expression_value_in(&d, &["a", "b"]).map(Cow::into_owned),
            Some(bson!([1, [4]]))
        );
        assert_eq!(
            expression_value_in(&d, &["a", "0"]).map(Cow::into_owned),
            Some(bson!([]))
        );
        assert_eq!(expression_value_in(&d, &["x"]), None);
    }

    #[test]
    fn lookup_values_expand_one_level() {
        let mut out = Vec::new();
        all_values(&bson!([{"b": [1, [2]]}, {"b": 3}, 4]), &["b"], &mut out);
        assert_eq!(out, vec![bson!(1), bson!([2]), bson!(3)]);
    }

    #[test]
    fn existing_prefixes_enter_arrays_by_index() {
        let d = doc! {"a": {"b": [10, {"c": 1}]}};
        assert_eq!(existing_prefix_len(&d, &["a", "b", "1", "c"]), 4);
        assert_eq!(existing_prefix_len(&d, &["a", "b", "01", "x"]), 3);
        assert_eq!(existing_prefix_len(&d, &["a", "b", "c"]), 2);
        assert_eq!(existing_prefix_len(&d, &["x", "y"]), 0);
        assert_eq!(existing_prefix_len::<&str>(&d, &[]), 0);
    }

    #[test]
    fn push_sort_keys_try_literal_names_first() {
        let d = doc! {"a.b": 1, "a": {"b": 2, "c": [{"d": 3}, {"d": 4}]}};
        assert_eq!(element_at_path(&d, "a.b"), Some(&bson!(1)));
        assert_eq!(element_at_path(&d, "a.c.1.d"), Some(&bson!(4)));
        // Arrays take only canonical indexes and never spread.
        assert_eq!(element_at_path(&d, "a.c.01.d"), None);
        assert_eq!(element_at_path(&d, "a.c.d"), None);
        assert_eq!(element_at_path(&d, "a.b.x"), None);
        let nested = doc! {"x": {"y.z": 5}};
        assert_eq!(element_at_path(&nested, "x.y.z"), Some(&bson!(5)));
    }

    #[test]
    fn mutable_walk_reaches_every_value_through_arrays() {
        let mut d = doc! {"a": [{"b": [1, 2]}, 7, {"b": 3}, [{"b": 4}]], "c": {"b": 5}};
        let mut seen = Vec::new();
        for_each_value_mut(&mut d, &["a", "b"], &mut |v| {
            seen.push(v.clone());
            *v = bson!("x");
        });
        assert_eq!(seen, vec![bson!([1, 2]), bson!(3)]);
        assert_eq!(
            d,
            doc! {"a": [{"b": "x"}, 7, {"b": "x"}, [{"b": 4}]], "c": {"b": 5}}
        );
        let mut count = 0;
        for_each_value_mut(&mut d, &["c", "b", "z"], &mut |_| count += 1);
        for_each_value_mut(&mut d, &["missing"], &mut |_| count += 1);
        assert_eq!(count, 0);
    }

    #[test]
    fn first_array_on_a_path() {
        let mut d = doc! {"a": {"b": [1, 2], "s": 3}, "t": [[0]]};
        assert_eq!(
            first_array_mut(&mut d, &["a", "b", "c"]).map(|a| a.len()),
            Some(2)
        );
        assert_eq!(first_array_mut(&mut d, &["t"]).map(|a| a.len()), Some(1));
        assert!(first_array_mut(&mut d, &["a", "s"]).is_none());
        assert!(first_array_mut(&mut d, &["a"]).is_none());
        assert!(first_array_mut(&mut d, &["z"]).is_none());
        if let Some(array) = first_array_mut(&mut d, &["a", "b"]) {
            array.truncate(1);
        }
        assert_eq!(d, doc! {"a": {"b": [1], "s": 3}, "t": [[0]]});
    }

    #[test]
    fn document_and_positional_gets() {
        let mut d = doc! {"a": {"b": [10, {"c": 1}]}};
        assert_eq!(
            get_in_documents(&d, "a.b".split('.')),
            Some(&bson!([10, {"c": 1}]))
        );
        assert_eq!(get_in_documents(&d, ["a", "b", "1", "c"]), None);
        assert_eq!(get_positional(&d, &["a", "b", "1", "c"]), Some(&bson!(1)));
        assert_eq!(
            get_positional(&d, &["a", "b", "01"]),
            Some(&bson!({"c": 1}))
        );
        assert_eq!(value_in_documents(&bson!(5), ["a"]), None);
        if let Some(v) = get_positional_mut(&mut d, &["a", "b", "0"]) {
            *v = bson!(11);
        }
        assert_eq!(d, doc! {"a": {"b": [11, {"c": 1}]}});
        assert_eq!(field(&d, "a"), d.get("a"));
    }
}
