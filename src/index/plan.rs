//! The query planner: which index, if any, a query reads, and which key
//! ranges of it.
//!
//! Planning follows MongoDB 7.0's rules for one index scan, without
//! trial runs: each candidate index gets bounds from the filter —
//! equality points on its leading fields (their product at most
//! [`MAX_POINTS`]), then at most one range on the next field (type
//! bracketed: `$gt: 5` stops at the end of the numbers), the remaining
//! fields unbounded — and the best is picked by a fixed score (see
//! [`Candidate::score`]). The scan yields a superset of the matches: the
//! caller always applies the whole filter to what it reads (or, for a
//! covered query, to [`covered_document`]).
//!
//! Ranges are over entry suffixes `keystring(key values) | keystring(_id)`.
//! A field's bounds become byte bounds on its keystring: every entry whose
//! suffix starts with the encoding of `[1, 1]` lies in
//! `[enc(1), successor(enc(1)))`, where the successor is the smallest byte
//! string above every string with that prefix. Descending fields are
//! stored inverted, so their value bounds swap ends.

use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document};

use super::{Index, KeyKind, ID_INDEX_NAME};
use crate::err;
use crate::error::Result;
use crate::query::collation;
use crate::query::compare::{canonical_type_rank, compare, values_equal, Number};
use crate::query::filter::Filter;
use crate::query::hash;
use crate::query::keystring;
use crate::query::projection::Projection;
use crate::query::sort::SortSpec;

/// Most equality points (the product over the leading fields) one plan
/// reads; a field that would pass it ends the equality prefix.
pub const MAX_POINTS: usize = 200;

/// A `hint`: an index by name or key pattern, or `{$natural: ±1}`.
#[derive(Debug, Clone, PartialEq)]
pub enum Hint {
    Name(String),
    Pattern(Document),
    /// A collection scan; `true` for `{$natural: -1}`.
    Natural(bool),
}

impl Hint {
    /// Parses the `hint` field of a command (`None` for an empty hint).
    pub fn parse(value: &Bson) -> Result<Option<Hint>> {
        match value {
            Bson::String(name) if name.is_empty() => Ok(None),
            Bson::String(name) => Ok(Some(Hint::Name(name.clone()))),
            Bson::Document(d) if d.is_empty() => Ok(None),
            Bson::Document(d) => match d.get("$natural") {
                Some(direction) => match Number::of(direction).map(Number::to_f64) {
                    Some(n) if n > 0.0 => Ok(Some(Hint::Natural(false))),
                    Some(n) if n < 0.0 => Ok(Some(Hint::Natural(true))),
                    _ => Err(err!(BadValue, "$natural hint must be 1 or -1")),
                },
                None => Ok(Some(Hint::Pattern(d.clone()))),
            },
            _ => Err(err!(BadValue, "hint must be a string or an object")),
        }
    }

    /// True when the hint names the `_id` index, which is not among the
    /// secondary indexes the planner is given.
    fn names_id_index(&self) -> bool {
        match self {
            Hint::Name(name) => name == ID_INDEX_NAME,
            Hint::Pattern(pattern) => {
                pattern.len() == 1
                    && pattern
                        .get("_id")
                        .and_then(Number::of)
                        .is_some_and(|n| n.to_f64() == 1.0)
            }
            Hint::Natural(_) => false,
        }
    }

    /// True when the hint names `index`.
    pub fn selects(&self, index: &Index) -> bool {
        match self {
            Hint::Name(name) => &index.name == name,
            Hint::Pattern(pattern) => same_pattern(&index.key, pattern),
            Hint::Natural(_) => false,
        }
    }
}

/// Key patterns are equal field by field, numbers by value (`{a: 1}`
/// names the index `{a: 1.0}`).
fn same_pattern(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && values_equal(va, vb))
}

/// A range of index entry suffixes, as the engine's range scan takes it.
pub type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// A scan of one index.
#[derive(Debug, Clone)]
pub struct IndexPlan {
    pub index: Arc<Index>,
    /// Ranges of entry suffixes (`keystring(key) | keystring(_id)`) to
    /// read, in scan order, not overlapping.
    pub ranges: Vec<KeyRange>,
    /// Scan backwards (each range from its end, the ranges in reverse).
    pub reverse: bool,
    /// The scan yields documents in the order of the query's sort.
    pub provides_sort: bool,
    /// One document may appear more than once in the ranges.
    pub dedupe: bool,
    /// `indexBounds` for explain: `{field: ["[1, 1]", ...]}`.
    pub bounds: Document,
}

/// How a query reads a collection.
#[derive(Debug, Clone)]
pub enum Plan {
    /// Every record (the `_id`-based access paths still apply).
    Collscan,
    Index(IndexPlan),
}

/// Picks the plan for a query.
///
/// A hint naming the `_id` index gives `Collscan` (records are already
/// keyed by `_id`); a hinted partial index whose filter the query does
/// not imply is refused as MongoDB does, with the not-found error.
pub fn choose(
    indexes: &[Arc<Index>],
    filter: Option<&Filter>,
    sort: Option<&SortSpec>,
    hint: Option<&Hint>,
) -> Result<Plan> {
    let match_all = Filter::match_all();
    let filter = filter.unwrap_or(&match_all);
    let sort = sort.filter(|s| !s.is_empty());
    if let Some(hint) = hint {
        if matches!(hint, Hint::Natural(_)) || hint.names_id_index() {
            return Ok(Plan::Collscan);
        }
        let index = indexes
            .iter()
            .find(|i| !i.hidden && hint.selects(i))
            .filter(|i| partial_allows(i, filter))
            .ok_or_else(|| {
                err!(
                    BadValue,
                    "planner returned error :: caused by :: hint provided does not correspond to an existing index"
                )
            })?;
        return Ok(Plan::Index(
            Candidate::analyse(index, filter, sort).into_plan(),
        ));
    }
    let query_collation = filter
        .collation()
        .or_else(|| sort.and_then(SortSpec::collation));
    let mut best: Option<Candidate> = None;
    for index in indexes.iter().filter(|i| !i.hidden && !i.is_geo()) {
        if !partial_allows(index, filter)
            || !collation::same(index.collation.as_ref(), query_collation)
        {
            continue;
        }
        let candidate = Candidate::analyse(index, filter, sort);
        let predicate = candidate.eq_fields > 0 || candidate.has_range;
        if !predicate && !candidate.provides_sort {
            continue;
        }
        if index.sparse && !(predicate && sparse_allows(index, filter)) {
            continue;
        }
        if best.as_ref().is_none_or(|b| candidate.score() > b.score()) {
            best = Some(candidate);
        }
    }
    Ok(best.map_or(Plan::Collscan, |c| Plan::Index(c.into_plan())))
}

/// True when the index alone answers the query: the index is not
/// multikey, every path the filter, projection and sort use is one of
/// its (non-hashed) fields, and `_id` is excluded unless indexed.
///
/// As in MongoDB, a covered document holds `null` for a field the
/// document lacks (both have the key `null`); filters that tell the two
/// apart (`$exists`, `$type`) are therefore not covered.
pub fn covers(
    plan: &IndexPlan,
    filter: Option<&Filter>,
    projection: Option<&Projection>,
    sort: Option<&SortSpec>,
) -> bool {
    let index = &plan.index;
    // Collated string keys are collation keys, not the strings.
    if index.is_multikey() || index.collation.is_some() || index.is_geo() {
        return false;
    }
    let indexed = |path: &str| {
        index
            .fields
            .iter()
            .any(|f| f.path == path && f.kind != KeyKind::Hashed)
    };
    let Some((paths, id_included)) = projection.and_then(Projection::included_paths) else {
        return false;
    };
    if id_included && !indexed("_id") {
        return false;
    }
    if !paths.iter().all(|p| indexed(p)) {
        return false;
    }
    if let Some(filter) = filter {
        let Some(paths) = filter.paths() else {
            return false;
        };
        if !paths
            .iter()
            .all(|p| indexed(p) && !filter.tests_presence(p))
        {
            return false;
        }
    }
    sort.is_none_or(|s| s.fields().iter().all(|f| indexed(f.path())))
}

/// The document a covered query sees: the index's fields, set from an
/// entry's key values (dotted paths as nested documents).
pub fn covered_document(index: &Index, values: &[Bson]) -> Document {
    let mut doc = Document::new();
    for (field, value) in index.fields.iter().zip(values) {
        let parts: Vec<&str> = field.path.split('.').collect();
        insert_at(&mut doc, &parts, value.clone());
    }
    doc
}

fn insert_at(doc: &mut Document, parts: &[&str], value: Bson) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    if rest.is_empty() {
        doc.insert(*first, value);
        return;
    }
    if !doc.contains_key(*first) {
        doc.insert(*first, Document::new());
    }
    if let Some(Bson::Document(sub)) = doc.get_mut(*first) {
        insert_at(sub, rest, value);
    }
}

// ---------------------------------------------------------------------------
// Which indexes may answer a query at all.

/// A partial index holds only the documents its filter matches: usable
/// when every top-level condition of that filter follows from the query.
fn partial_allows(index: &Index, filter: &Filter) -> bool {
    let Some((_, partial)) = &index.partial else {
        return true;
    };
    partial.conjuncts().iter().all(|condition| {
        let Some(path) = condition.path() else {
            return false;
        };
        // The query pins the path to values that all meet the condition
        // (null also stands for a missing field).
        let pinned = filter.equality_predicates(path).iter().any(|values| {
            values
                .iter()
                .all(|v| condition.accepts(v) && (!is_nullish(v) || condition.accepts_missing()))
        });
        if pinned {
            return true;
        }
        if condition.is_exists() {
            return excludes_missing(filter, path);
        }
        match condition.range() {
            Some(range) => filter
                .range_predicates(path)
                .iter()
                .any(|q| range_within(q, &range)),
            None => false,
        }
    })
}

/// A sparse index lacks documents missing all its fields: usable when a
/// condition rules such documents out, and none asks for missing or null.
fn sparse_allows(index: &Index, filter: &Filter) -> bool {
    let paths = || index.fields.iter().map(|f| f.path.as_str());
    paths().any(|p| excludes_missing(filter, p)) && !paths().any(|p| filter.accepts_missing(p))
}

/// True when every match has a non-null value at `path`: an equality to
/// non-null values or a range away from null.
fn excludes_missing(filter: &Filter, path: &str) -> bool {
    filter
        .equality_predicates(path)
        .iter()
        .any(|values| !values.iter().any(is_nullish))
        || filter
            .range_predicates(path)
            .iter()
            .any(|(lo, hi)| !bound_touches_null(lo) && !bound_touches_null(hi))
}

fn is_nullish(v: &Bson) -> bool {
    matches!(v, Bson::Null | Bson::Undefined)
}

/// Null, MinKey and MaxKey bounds reach missing fields.
fn bound_touches_null(b: &Bound<Bson>) -> bool {
    matches!(
        b,
        Bound::Included(v) | Bound::Excluded(v)
            if matches!(v, Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey)
    )
}

/// True when the query range `q` lies inside `p`, both type bracketed:
/// every finite bound of both must be of one type.
fn range_within(q: &(Bound<Bson>, Bound<Bson>), p: &(Bound<Bson>, Bound<Bson>)) -> bool {
    let values: Vec<&Bson> = [&q.0, &q.1, &p.0, &p.1]
        .into_iter()
        .filter_map(|b| match b {
            Bound::Included(v) | Bound::Excluded(v) => Some(v),
            Bound::Unbounded => None,
        })
        .collect();
    if values.iter().any(|v| {
        matches!(
            v,
            Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey
        ) || canonical_type_rank(v) != canonical_type_rank(values[0])
    }) {
        return false;
    }
    // `inner` is at least as tight as `outer`; `upper` flips the order.
    let tighter = |inner: &Bound<Bson>, outer: &Bound<Bson>, upper: bool| match (inner, outer) {
        (_, Bound::Unbounded) => true,
        (Bound::Unbounded, _) => false,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b)) => {
            let ord = compare(a, b);
            if upper {
                ord.is_le()
            } else {
                ord.is_ge()
            }
        }
        (Bound::Excluded(a), Bound::Excluded(b)) => {
            let ord = compare(a, b);
            if upper {
                ord.is_le()
            } else {
                ord.is_ge()
            }
        }
        (Bound::Included(a), Bound::Excluded(b)) => {
            let ord = compare(a, b);
            if upper {
                ord.is_lt()
            } else {
                ord.is_gt()
            }
        }
    };
    tighter(&q.0, &p.0, false) && tighter(&q.1, &p.1, true)
}

// ---------------------------------------------------------------------------
// Bounds of one index.

/// What a scan reads of one index field.
#[derive(Debug, Clone)]
enum FieldScan {
    /// Equality points: key values (hashes for a hashed field), sorted by
    /// their encoding in the field's direction, without duplicates.
    Points(Vec<Bson>),
    Range(Box<Interval>),
    /// A range no value satisfies (`$gt: 5, $lt: "a"`).
    Nothing,
    All,
}

/// A range of one field's values, in value order.
#[derive(Debug, Clone)]
struct Interval {
    lo: Low,
    hi: High,
}

#[derive(Debug, Clone)]
enum Low {
    Min,
    /// The smallest value of the type of this value.
    TypeStart(Bson),
    Value(Bson, bool),
}

#[derive(Debug, Clone)]
enum High {
    Max,
    /// The largest value of the type of this value.
    TypeEnd(Bson),
    Value(Bson, bool),
}

impl Interval {
    /// The type-bracketed interval of comparison bounds: a one-sided
    /// range stops at the edge of its value's type, except that MinKey
    /// and MaxKey bound every type. `None` when nothing fits.
    fn bracket(lo: &Bound<Bson>, hi: &Bound<Bson>) -> Option<Interval> {
        let value = |b: &Bound<Bson>| match b {
            Bound::Included(v) | Bound::Excluded(v) => Some(v.clone()),
            Bound::Unbounded => None,
        };
        let (lo_value, hi_value) = (value(lo), value(hi));
        if let (Some(a), Some(b)) = (&lo_value, &hi_value) {
            let spans_types = matches!(a, Bson::MinKey) || matches!(b, Bson::MaxKey);
            if !spans_types && canonical_type_rank(a) != canonical_type_rank(b) {
                return None;
            }
            let ord = compare(a, b);
            let both_inclusive =
                matches!(lo, Bound::Included(_)) && matches!(hi, Bound::Included(_));
            if ord.is_gt() || (ord.is_eq() && !both_inclusive) {
                return None;
            }
        }
        let low = match (lo, &hi_value) {
            (Bound::Included(v), _) => Low::Value(v.clone(), true),
            (Bound::Excluded(v), _) => Low::Value(v.clone(), false),
            (Bound::Unbounded, Some(Bson::MaxKey) | None) => Low::Min,
            (Bound::Unbounded, Some(v)) => Low::TypeStart(v.clone()),
        };
        let high = match (hi, &lo_value) {
            (Bound::Included(v), _) => High::Value(v.clone(), true),
            (Bound::Excluded(v), _) => High::Value(v.clone(), false),
            (Bound::Unbounded, Some(Bson::MinKey) | None) => High::Max,
            (Bound::Unbounded, Some(v)) => High::TypeEnd(v.clone()),
        };
        Some(Interval { lo: low, hi: high })
    }

    const ALL: Interval = Interval {
        lo: Low::Min,
        hi: High::Max,
    };
}

/// A bound on the bytes of one field: the entries whose field bytes
/// start with `bytes` are inside the range (`with`) or just outside it.
struct Edge {
    bytes: Vec<u8>,
    with: bool,
}

fn encode_field(v: &Bson, descending: bool) -> Vec<u8> {
    keystring::encode_key(&[(v, descending)])
}

fn type_byte(v: &Bson) -> u8 {
    keystring::encode_id(v).first().copied().unwrap_or(0)
}

/// The byte edges (lower, upper) of an interval on a field stored in
/// `descending` order, whose bytes are inverted.
fn field_edges(interval: &Interval, descending: bool) -> (Edge, Edge) {
    let whole = || Edge {
        bytes: Vec::new(),
        with: true,
    };
    let value = |v: &Bson, inclusive: bool| Edge {
        bytes: encode_field(v, descending),
        with: inclusive,
    };
    let type_edge = |v: &Bson| {
        let t = type_byte(v);
        Edge {
            bytes: vec![if descending { !t } else { t }],
            with: true,
        }
    };
    let from_low = |lo: &Low| match lo {
        Low::Min => whole(),
        Low::TypeStart(v) => type_edge(v),
        Low::Value(v, inclusive) => value(v, *inclusive),
    };
    let from_high = |hi: &High| match hi {
        High::Max => whole(),
        High::TypeEnd(v) => type_edge(v),
        High::Value(v, inclusive) => value(v, *inclusive),
    };
    if descending {
        (from_high(&interval.hi), from_low(&interval.lo))
    } else {
        (from_low(&interval.lo), from_high(&interval.hi))
    }
}

/// The smallest byte string above every string that starts with
/// `prefix`; `None` when there is none (empty, or all `0xFF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut out = prefix.to_vec();
    while out.last() == Some(&0xFF) {
        out.pop();
    }
    let last = out.last_mut()?;
    *last += 1;
    Some(out)
}

/// The suffix range of the entries under `prefix` whose next field lies
/// between the edges; `None` when it is empty.
fn byte_range(prefix: &[u8], lower: &Edge, upper: &Edge) -> Option<KeyRange> {
    let join = |edge: &Edge| {
        let mut bytes = prefix.to_vec();
        bytes.extend_from_slice(&edge.bytes);
        bytes
    };
    let start = join(lower);
    let from = if lower.with {
        if start.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Included(start)
        }
    } else {
        Bound::Included(prefix_successor(&start)?)
    };
    let end = join(upper);
    let to = if upper.with {
        prefix_successor(&end).map_or(Bound::Unbounded, Bound::Excluded)
    } else {
        Bound::Excluded(end)
    };
    if let (Bound::Included(a), Bound::Excluded(b)) = (&from, &to) {
        if a >= b {
            return None;
        }
    }
    Some((from, to))
}

/// One index analysed against one query.
struct Candidate {
    index: Arc<Index>,
    fields: Vec<FieldScan>,
    /// Leading fields pinned by equality.
    eq_fields: usize,
    /// A range bounds the field after them.
    has_range: bool,
    provides_sort: bool,
    reverse: bool,
}

impl Candidate {
    fn analyse(index: &Arc<Index>, filter: &Filter, sort: Option<&SortSpec>) -> Candidate {
        // The index serves the query's string conditions and sort only
        // under the same collation: otherwise it is read whole.
        let query_collation = filter
            .collation()
            .or_else(|| sort.and_then(SortSpec::collation));
        if !collation::same(index.collation.as_ref(), query_collation) {
            return Candidate::analyse_simple(index, &Filter::match_all(), None);
        }
        match &index.collation {
            Some(_) => Candidate::analyse_simple(index, &filter.without_collation(), sort),
            None => Candidate::analyse_simple(index, filter, sort),
        }
    }

    fn analyse_simple(index: &Arc<Index>, filter: &Filter, sort: Option<&SortSpec>) -> Candidate {
        let collate = |v: &Bson| match &index.collation {
            Some(c) => c.collate_value(v),
            None => v.clone(),
        };
        let multikey = index.is_multikey();
        let mut fields = Vec::with_capacity(index.fields.len());
        let mut product = 1usize;
        for field in &index.fields {
            let Some(values) = equality_points(filter, &field.path, multikey) else {
                break;
            };
            let mut points: Vec<(Vec<u8>, Bson)> = values
                .iter()
                .map(|v| {
                    let key = if field.kind == KeyKind::Hashed {
                        Bson::Int64(hash::hash_value(v))
                    } else {
                        collate(v)
                    };
                    (encode_field(&key, field.descending()), key)
                })
                .collect();
            points.sort_by(|a, b| a.0.cmp(&b.0));
            points.dedup_by(|a, b| a.0 == b.0);
            match product.checked_mul(points.len()) {
                Some(p) if p <= MAX_POINTS => product = p,
                _ => break,
            }
            fields.push(FieldScan::Points(
                points.into_iter().map(|(_, v)| v).collect(),
            ));
        }
        let eq_fields = fields.len();
        let mut has_range = false;
        if let Some(field) = index.fields.get(eq_fields) {
            if field.kind != KeyKind::Hashed {
                let range = if multikey {
                    filter.range_predicates(&field.path).into_iter().next()
                } else {
                    filter.range_bounds(&field.path)
                };
                if let Some((lo, hi)) = range {
                    let collate_bound = |b: Bound<Bson>| match b {
                        Bound::Included(v) => Bound::Included(collate(&v)),
                        Bound::Excluded(v) => Bound::Excluded(collate(&v)),
                        Bound::Unbounded => Bound::Unbounded,
                    };
                    let (lo, hi) = (collate_bound(lo), collate_bound(hi));
                    has_range = true;
                    fields.push(
                        Interval::bracket(&lo, &hi)
                            .map_or(FieldScan::Nothing, |i| FieldScan::Range(Box::new(i))),
                    );
                }
            }
        }
        fields.resize(index.fields.len(), FieldScan::All);
        let order = sort.and_then(|s| sort_order(index, &fields[..eq_fields], s));
        Candidate {
            index: Arc::clone(index),
            fields,
            eq_fields,
            has_range,
            provides_sort: order.is_some(),
            reverse: order.unwrap_or(false),
        }
    }

    /// More equality-pinned fields, then a range, then the sort, then
    /// unique, then fewer fields.
    fn score(&self) -> (usize, bool, bool, bool, std::cmp::Reverse<usize>) {
        (
            self.eq_fields,
            self.has_range,
            self.provides_sort,
            self.index.unique,
            std::cmp::Reverse(self.index.fields.len()),
        )
    }

    fn into_plan(self) -> IndexPlan {
        let index = &self.index;
        // The byte prefixes of every combination of equality points, in
        // byte order (each field's points are sorted, keystrings are
        // prefix-free).
        let mut prefixes: Vec<Vec<u8>> = vec![Vec::new()];
        for (scan, field) in self.fields.iter().zip(&index.fields).take(self.eq_fields) {
            let FieldScan::Points(points) = scan else {
                continue;
            };
            let encoded: Vec<Vec<u8>> = points
                .iter()
                .map(|p| encode_field(p, field.descending()))
                .collect();
            prefixes = prefixes
                .iter()
                .flat_map(|prefix| {
                    encoded.iter().map(move |e| {
                        let mut bytes = prefix.clone();
                        bytes.extend_from_slice(e);
                        bytes
                    })
                })
                .collect();
        }
        let next = self.fields.get(self.eq_fields);
        let descending = index
            .fields
            .get(self.eq_fields)
            .is_some_and(|f| f.descending());
        let ranges = match next {
            Some(FieldScan::Nothing) => Vec::new(),
            Some(FieldScan::Range(interval)) => {
                let (lower, upper) = field_edges(interval, descending);
                prefixes
                    .iter()
                    .filter_map(|p| byte_range(p, &lower, &upper))
                    .collect()
            }
            _ => {
                let (lower, upper) = field_edges(&Interval::ALL, false);
                prefixes
                    .iter()
                    .filter_map(|p| byte_range(p, &lower, &upper))
                    .collect()
            }
        };
        let mut bounds = Document::new();
        for (scan, field) in self.fields.iter().zip(&index.fields) {
            let mut intervals = show_field(scan, field.descending());
            if self.reverse {
                intervals.reverse();
                for i in &mut intervals {
                    i.flip();
                }
            }
            bounds.insert(
                field.path.clone(),
                intervals
                    .iter()
                    .map(|i| Bson::String(i.to_string()))
                    .collect::<Vec<_>>(),
            );
        }
        IndexPlan {
            dedupe: index.is_multikey(),
            index: self.index,
            ranges,
            reverse: self.reverse,
            provides_sort: self.provides_sort,
            bounds,
        }
    }
}

/// The values an index field may be pinned to; `None` when no usable
/// equality names it (arrays and regexes match more than their value).
/// A multikey field takes the smallest single condition: on arrays,
/// `{a: 1}` and `{a: 2}` may both hold, so they are not intersected.
fn equality_points(filter: &Filter, path: &str, multikey: bool) -> Option<Vec<Bson>> {
    let usable = |values: &Vec<Bson>| {
        !values
            .iter()
            .any(|v| matches!(v, Bson::Array(_) | Bson::RegularExpression(_)))
    };
    if multikey {
        filter
            .equality_predicates(path)
            .into_iter()
            .filter(usable)
            .min_by_key(Vec::len)
    } else {
        filter.equality_values(path).filter(usable)
    }
}

/// Whether scanning in index order yields the sort: `Some(reverse)`.
/// Fields pinned to a single point drop out of the sort; the rest must
/// be the index fields right after the leading single points, not
/// hashed, with directions all equal to the index's or all opposite.
fn sort_order(index: &Index, pinned: &[FieldScan], sort: &SortSpec) -> Option<bool> {
    if index.is_multikey() {
        return None;
    }
    let single = |i: usize| matches!(pinned.get(i), Some(FieldScan::Points(p)) if p.len() == 1);
    let rest: Vec<_> = sort
        .fields()
        .iter()
        .filter(|s| {
            !index
                .fields
                .iter()
                .enumerate()
                .any(|(i, f)| f.path == s.path() && single(i))
        })
        .collect();
    let start = (0..index.fields.len()).take_while(|&i| single(i)).count();
    let targets = index.fields.get(start..start + rest.len())?;
    let mut reverse = None;
    for (s, f) in rest.iter().zip(targets) {
        if f.path != s.path() || f.kind == KeyKind::Hashed {
            return None;
        }
        let opposite = s.ascending() != (f.kind == KeyKind::Ascending);
        if *reverse.get_or_insert(opposite) != opposite {
            return None;
        }
    }
    Some(reverse.unwrap_or(false))
}

// ---------------------------------------------------------------------------
// `indexBounds` as explain shows them.

/// One interval of explain's `indexBounds`, from its scan start to its
/// scan end.
struct ShownInterval {
    start: String,
    start_inclusive: bool,
    end: String,
    end_inclusive: bool,
}

impl ShownInterval {
    fn flip(&mut self) {
        std::mem::swap(&mut self.start, &mut self.end);
        std::mem::swap(&mut self.start_inclusive, &mut self.end_inclusive);
    }
}

impl std::fmt::Display for ShownInterval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{}, {}{}",
            if self.start_inclusive { '[' } else { '(' },
            self.start,
            self.end,
            if self.end_inclusive { ']' } else { ')' }
        )
    }
}

/// A field's intervals in index order (high to low for a descending
/// field).
fn show_field(scan: &FieldScan, descending: bool) -> Vec<ShownInterval> {
    let mut intervals = match scan {
        FieldScan::Points(points) => {
            // Already in index order: sorted by their directed encoding.
            return points
                .iter()
                .map(|p| ShownInterval {
                    start: show_value(p),
                    start_inclusive: true,
                    end: show_value(p),
                    end_inclusive: true,
                })
                .collect();
        }
        FieldScan::Nothing => return Vec::new(),
        FieldScan::All => vec![ShownInterval {
            start: "MinKey".into(),
            start_inclusive: true,
            end: "MaxKey".into(),
            end_inclusive: true,
        }],
        FieldScan::Range(interval) => {
            let (start, start_inclusive) = match &interval.lo {
                Low::Min => ("MinKey".to_string(), true),
                Low::TypeStart(v) => type_start(v),
                Low::Value(v, inclusive) => (show_value(v), *inclusive),
            };
            let (end, end_inclusive) = match &interval.hi {
                High::Max => ("MaxKey".to_string(), true),
                High::TypeEnd(v) => type_end(v),
                High::Value(v, inclusive) => (show_value(v), *inclusive),
            };
            vec![ShownInterval {
                start,
                start_inclusive,
                end,
                end_inclusive,
            }]
        }
    };
    if descending {
        for i in &mut intervals {
            i.flip();
        }
    }
    intervals
}

/// How MongoDB writes the lowest bound of a value's type.
fn type_start(v: &Bson) -> (String, bool) {
    let s = match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => "-inf.0",
        Bson::String(_) | Bson::Symbol(_) => "\"\"",
        Bson::Document(_) => "{}",
        Bson::Array(_) => "[]",
        Bson::Binary(_) => "BinData(0, )",
        Bson::ObjectId(_) => "ObjectId('000000000000000000000000')",
        Bson::Boolean(_) => "false",
        Bson::DateTime(_) => "new Date(-9223372036854775808)",
        Bson::Timestamp(_) => "Timestamp(0, 0)",
        Bson::Null | Bson::Undefined => "null",
        _ => "MinKey",
    };
    (s.to_string(), true)
}

/// How MongoDB writes the highest bound of a value's type.
fn type_end(v: &Bson) -> (String, bool) {
    let (s, inclusive) = match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => ("inf.0", true),
        Bson::String(_) | Bson::Symbol(_) => ("{}", false),
        Bson::Document(_) => ("[]", false),
        Bson::Array(_) => ("BinData(0, )", false),
        Bson::Binary(_) => ("ObjectId('000000000000000000000000')", false),
        Bson::ObjectId(_) => ("ObjectId('ffffffffffffffffffffffff')", true),
        Bson::Boolean(_) => ("true", true),
        Bson::DateTime(_) => ("new Date(9223372036854775807)", true),
        Bson::Timestamp(_) => ("Timestamp(4294967295, 4294967295)", true),
        Bson::Null | Bson::Undefined => ("null", true),
        _ => ("MaxKey", true),
    };
    (s.to_string(), inclusive)
}

/// A value as MongoDB's explain writes it in bounds.
fn show_value(v: &Bson) -> String {
    match v {
        Bson::Double(f) if f.is_nan() => "nan.0".into(),
        Bson::Double(f) if f.is_infinite() => if *f > 0.0 { "inf.0" } else { "-inf.0" }.into(),
        Bson::Double(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.1}"),
        Bson::ObjectId(oid) => format!("ObjectId('{oid}')"),
        Bson::DateTime(dt) => format!("new Date({})", dt.timestamp_millis()),
        Bson::Timestamp(ts) => format!("Timestamp({}, {})", ts.time, ts.increment),
        Bson::Decimal128(d) => d.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use bson::doc;

    fn index(spec: Document) -> Arc<Index> {
        Arc::new(Index::parse(&spec, 1).unwrap())
    }

    fn filter(f: Document) -> Filter {
        Filter::parse(&f).unwrap()
    }

    fn sort(s: Document) -> SortSpec {
        SortSpec::parse(&s).unwrap()
    }

    fn plan_of(
        indexes: &[Arc<Index>],
        f: Document,
        s: Option<Document>,
        hint: Option<Hint>,
    ) -> Plan {
        let f = filter(f);
        let s = s.map(sort);
        choose(indexes, Some(&f), s.as_ref(), hint.as_ref()).unwrap()
    }

    fn index_plan(indexes: &[Arc<Index>], f: Document, s: Option<Document>) -> IndexPlan {
        match plan_of(indexes, f.clone(), s, None) {
            Plan::Index(p) => p,
            Plan::Collscan => panic!("{f}: expected an index scan"),
        }
    }

    fn is_collscan(indexes: &[Arc<Index>], f: Document, s: Option<Document>) -> bool {
        matches!(plan_of(indexes, f, s, None), Plan::Collscan)
    }

    fn within(range: &KeyRange, key: &[u8]) -> bool {
        let above = match &range.0 {
            Bound::Included(b) => key >= b.as_slice(),
            Bound::Excluded(b) => key > b.as_slice(),
            Bound::Unbounded => true,
        };
        let below = match &range.1 {
            Bound::Included(b) => key <= b.as_slice(),
            Bound::Excluded(b) => key < b.as_slice(),
            Bound::Unbounded => true,
        };
        above && below
    }

    /// True when the entry of `values` (with a few `_id`s) is read.
    fn reads(plan: &IndexPlan, values: &[Bson]) -> bool {
        let ids = [
            Bson::MinKey,
            Bson::Int32(7),
            Bson::String("z".into()),
            Bson::MaxKey,
        ];
        let hits: Vec<bool> = ids
            .iter()
            .map(|id| {
                let mut key = plan.index.encode(values);
                key.extend(keystring::encode_id(id));
                plan.ranges.iter().any(|r| within(r, &key))
            })
            .collect();
        assert!(
            hits.iter().all(|h| *h == hits[0]),
            "the _id changed the answer"
        );
        hits[0]
    }

    #[test]
    fn collated_indexes_serve_only_queries_of_their_collation() {
        let ci = doc! {"locale": "en", "strength": 2};
        let idx = index(doc! {"key": {"name": 1}, "name": "n", "collation": ci.clone()});
        let c = crate::query::collation::Collation::parse_document(&ci).unwrap();
        let collated = Filter::parse_collated(&doc! {"name": "ALICE"}, c.as_ref()).unwrap();
        let Plan::Index(plan) =
            choose(std::slice::from_ref(&idx), Some(&collated), None, None).unwrap()
        else {
            panic!("the index of the same collation is not used");
        };
        assert!(reads(&plan, &["alice".into()]));
        assert!(reads(&plan, &["Alice".into()]));
        assert!(!reads(&plan, &["bob".into()]));
        assert!(!covers(&plan, Some(&collated), None, None));
        // A simple query, or one of another collation, does not use it.
        assert!(is_collscan(
            std::slice::from_ref(&idx),
            doc! {"name": "alice"},
            None
        ));
        let fr =
            crate::query::collation::Collation::parse_document(&doc! {"locale": "fr"}).unwrap();
        let other = Filter::parse_collated(&doc! {"name": "alice"}, fr.as_ref()).unwrap();
        assert!(matches!(
            choose(std::slice::from_ref(&idx), Some(&other), None, None).unwrap(),
            Plan::Collscan
        ));
        // A simple index does not serve a collated string query, and the
        // collated sort is not its order.
        let plain = index(doc! {"key": {"name": 1}, "name": "p"});
        assert!(matches!(
            choose(std::slice::from_ref(&plain), Some(&collated), None, None).unwrap(),
            Plan::Collscan
        ));
        let collated_sort = sort(doc! {"name": 1}).with_collation(c.clone());
        assert!(matches!(
            choose(&[plain], None, Some(&collated_sort), None).unwrap(),
            Plan::Collscan
        ));
        // Ranges bound collation keys.
        let range =
            Filter::parse_collated(&doc! {"name": {"$gte": "B", "$lt": "c"}}, c.as_ref()).unwrap();
        let Plan::Index(plan) = choose(&[idx], Some(&range), None, None).unwrap() else {
            panic!("a collated range uses the collated index");
        };
        assert!(reads(&plan, &["bob".into()]));
        assert!(reads(&plan, &["BOB".into()]));
        assert!(!reads(&plan, &["alice".into()]));
        assert!(!reads(&plan, &["Carl".into()]));
    }

    fn assert_ordered(plan: &IndexPlan) {
        for pair in plan.ranges.windows(2) {
            let end = match &pair[0].1 {
                Bound::Excluded(b) | Bound::Included(b) => b,
                Bound::Unbounded => panic!("an unbounded range before another"),
            };
            let start = match &pair[1].0 {
                Bound::Included(b) | Bound::Excluded(b) => b,
                Bound::Unbounded => panic!("an unbounded range after another"),
            };
            assert!(end <= start, "ranges overlap or are out of order");
        }
    }

    fn bounds(plan: &IndexPlan, field: &str) -> Vec<String> {
        plan.bounds
            .get_array(field)
            .unwrap()
            .iter()
            .map(|b| b.as_str().unwrap().to_string())
            .collect()
    }

    fn i(n: i32) -> Bson {
        Bson::Int32(n)
    }

    fn s(v: &str) -> Bson {
        Bson::String(v.into())
    }

    #[test]
    fn equality_reads_one_key_value() {
        let ix = [index(doc! {"key": {"a": 1}, "name": "a_1"})];
        let p = index_plan(&ix, doc! {"a": 5}, None);
        assert_eq!(bounds(&p, "a"), ["[5, 5]"]);
        assert!(!p.dedupe && !p.reverse && !p.provides_sort);
        assert!(reads(&p, &[i(5)]));
        assert!(reads(&p, &[Bson::Double(5.0)]));
        assert!(reads(&p, &[Bson::Int64(5)]));
        for other in [
            i(4),
            i(6),
            Bson::Double(5.5),
            s("5"),
            Bson::Null,
            Bson::MaxKey,
        ] {
            assert!(!reads(&p, std::slice::from_ref(&other)), "{other} read");
        }
        let p = index_plan(&ix, doc! {"a": "x"}, None);
        assert_eq!(bounds(&p, "a"), ["[\"x\", \"x\"]"]);
        assert!(reads(&p, &[s("x")]) && !reads(&p, &[s("xy")]) && !reads(&p, &[s("")]));
    }

    #[test]
    fn in_reads_each_value_in_index_order() {
        let ix = [index(doc! {"key": {"a": 1}, "name": "a_1"})];
        let p = index_plan(&ix, doc! {"a": {"$in": [3, 1, 2, 1.0]}}, None);
        assert_eq!(bounds(&p, "a"), ["[1, 1]", "[2, 2]", "[3, 3]"]);
        assert_eq!(p.ranges.len(), 3);
        assert_ordered(&p);
        assert!(reads(&p, &[i(1)]) && reads(&p, &[i(2)]) && reads(&p, &[i(3)]));
        assert!(!reads(&p, &[i(4)]) && !reads(&p, &[Bson::Double(1.5)]));

        let ix = [index(doc! {"key": {"a": -1}, "name": "a_-1"})];
        let p = index_plan(&ix, doc! {"a": {"$in": [3, 1, 2]}}, None);
        assert_eq!(bounds(&p, "a"), ["[3, 3]", "[2, 2]", "[1, 1]"]);
        assert_ordered(&p);
        assert!(reads(&p, &[i(1)]) && reads(&p, &[i(3)]) && !reads(&p, &[i(0)]));

        // An empty intersection reads nothing.
        let p = index_plan(
            &[index(doc! {"key": {"a": 1}, "name": "a_1"})],
            doc! {"a": 1, "$and": [{"a": 2}]},
            None,
        );
        assert!(p.ranges.is_empty());
    }

    #[test]
    fn ranges_are_type_bracketed_in_both_directions() {
        for direction in [1, -1] {
            let ix = [index(doc! {"key": {"a": direction}, "name": "a"})];
            let p = index_plan(&ix, doc! {"a": {"$gt": 5}}, None);
            let shown = if direction == 1 {
                "(5, inf.0]"
            } else {
                "[inf.0, 5)"
            };
            assert_eq!(bounds(&p, "a"), [shown]);
            assert!(reads(&p, &[i(6)]) && reads(&p, &[Bson::Double(5.0001)]));
            assert!(reads(&p, &[Bson::Double(f64::INFINITY)]));
            for out in [
                i(5),
                i(4),
                s("a"),
                Bson::Null,
                Bson::MaxKey,
                Bson::Boolean(true),
            ] {
                assert!(
                    !reads(&p, std::slice::from_ref(&out)),
                    "{direction}: {out} read"
                );
            }

            let p = index_plan(&ix, doc! {"a": {"$gte": 5}}, None);
            assert!(reads(&p, &[i(5)]) && reads(&p, &[i(50)]) && !reads(&p, &[i(4)]));

            let p = index_plan(&ix, doc! {"a": {"$lt": 5}}, None);
            let shown = if direction == 1 {
                "[-inf.0, 5)"
            } else {
                "(5, -inf.0]"
            };
            assert_eq!(bounds(&p, "a"), [shown]);
            assert!(reads(&p, &[i(4)]) && reads(&p, &[Bson::Double(f64::NEG_INFINITY)]));
            assert!(!reads(&p, &[i(5)]) && !reads(&p, &[Bson::Null]) && !reads(&p, &[s("")]));

            let p = index_plan(&ix, doc! {"a": {"$gt": 5, "$lte": 10}}, None);
            let shown = if direction == 1 { "(5, 10]" } else { "[10, 5)" };
            assert_eq!(bounds(&p, "a"), [shown]);
            assert!(reads(&p, &[i(10)]) && reads(&p, &[i(6)]));
            assert!(!reads(&p, &[i(5)]) && !reads(&p, &[i(11)]));

            let p = index_plan(&ix, doc! {"a": {"$gt": "b"}}, None);
            let shown = if direction == 1 {
                "(\"b\", {})"
            } else {
                "({}, \"b\")"
            };
            assert_eq!(bounds(&p, "a"), [shown]);
            assert!(reads(&p, &[s("c")]) && reads(&p, &[s("ba")]));
            assert!(
                !reads(&p, &[s("b")])
                    && !reads(&p, &[i(1)])
                    && !reads(&p, &[Bson::Document(doc! {})])
            );

            // Bounds of two types meet nothing.
            let p = index_plan(&ix, doc! {"a": {"$gt": 5, "$lt": "z"}}, None);
            assert!(p.ranges.is_empty());
            assert!(bounds(&p, "a").is_empty());
        }
    }

    #[test]
    fn compound_prefix_pins_then_ranges() {
        let ix = [
            index(doc! {"key": {"a": 1}, "name": "a_1"}),
            index(doc! {"key": {"a": 1, "b": -1, "c": 1}, "name": "abc"}),
        ];
        let p = index_plan(&ix, doc! {"a": 1, "b": {"$gt": 5}}, None);
        assert_eq!(p.index.name, "abc");
        assert_eq!(bounds(&p, "a"), ["[1, 1]"]);
        assert_eq!(bounds(&p, "b"), ["[inf.0, 5)"]);
        assert_eq!(bounds(&p, "c"), ["[MinKey, MaxKey]"]);
        assert!(reads(&p, &[i(1), i(6), s("x")]));
        assert!(reads(&p, &[i(1), i(60), Bson::MinKey]));
        assert!(!reads(&p, &[i(1), i(5), s("x")]));
        assert!(!reads(&p, &[i(2), i(6), s("x")]));
        assert!(!reads(&p, &[i(1), s("z"), s("x")]));

        let p = index_plan(
            &ix,
            doc! {"a": {"$in": [2, 1]}, "b": {"$in": [4, 3]}, "c": 9},
            None,
        );
        assert_eq!(p.ranges.len(), 4);
        assert_ordered(&p);
        assert_eq!(bounds(&p, "b"), ["[4, 4]", "[3, 3]"]);
        assert!(reads(&p, &[i(2), i(3), i(9)]) && !reads(&p, &[i(2), i(3), i(8)]));

        // Only the field after the points takes a range.
        let p = index_plan(&ix, doc! {"a": {"$gte": 1}, "b": 2}, None);
        assert_eq!(p.index.name, "a_1");
        assert_eq!(bounds(&p, "a"), ["[1, inf.0]"]);
    }

    #[test]
    fn too_many_points_end_the_equality_prefix() {
        let ix = [index(doc! {"key": {"a": 1, "b": 1}, "name": "ab"})];
        let many: Vec<i32> = (0..20).collect();
        let p = index_plan(
            &ix,
            doc! {"a": {"$in": many.clone()}, "b": {"$in": many}},
            None,
        );
        assert_eq!(bounds(&p, "a").len(), 20);
        assert_eq!(bounds(&p, "b"), ["[MinKey, MaxKey]"]);
        assert_eq!(p.ranges.len(), 20);
        // Arrays match element-wise: not a point.
        let p = index_plan(&ix, doc! {"a": 1, "b": [1, 2]}, None);
        assert_eq!(bounds(&p, "b"), ["[MinKey, MaxKey]"]);
        assert!(is_collscan(&ix, doc! {"a": [1, 2]}, None));
    }

    #[test]
    fn sort_by_the_index_in_either_direction() {
        let ix = [index(doc! {"key": {"a": 1, "b": 1}, "name": "ab"})];
        let p = index_plan(&ix, doc! {"a": 1}, Some(doc! {"b": -1}));
        assert!(p.provides_sort && p.reverse);
        assert_eq!(bounds(&p, "a"), ["[1, 1]"]);
        assert_eq!(bounds(&p, "b"), ["[MaxKey, MinKey]"]);
        let p = index_plan(&ix, doc! {"a": 1}, Some(doc! {"b": 1}));
        assert!(p.provides_sort && !p.reverse);
        let p = index_plan(&ix, doc! {"a": 1}, Some(doc! {"a": -1, "b": 1}));
        assert!(p.provides_sort && !p.reverse);
        // Sort only: the whole index in order.
        let p = index_plan(&ix, doc! {}, Some(doc! {"a": -1, "b": -1}));
        assert!(p.provides_sort && p.reverse);
        assert_eq!(p.ranges, vec![(Bound::Unbounded, Bound::Unbounded)]);
        assert_eq!(bounds(&p, "a"), ["[MaxKey, MinKey]"]);
        let p = index_plan(&ix, doc! {"x": 1}, Some(doc! {"a": 1}));
        assert!(p.provides_sort);
        // Not in the index's order.
        let p = index_plan(&ix, doc! {"a": {"$in": [1, 2]}}, Some(doc! {"b": 1}));
        assert!(!p.provides_sort);
        assert!(is_collscan(&ix, doc! {}, Some(doc! {"a": 1, "b": -1})));
        assert!(is_collscan(&ix, doc! {}, Some(doc! {"b": 1})));
        assert!(is_collscan(&ix, doc! {}, None));
        // A multikey index does not sort.
        ix[0].set_multikey();
        assert!(is_collscan(&ix, doc! {}, Some(doc! {"a": 1})));
    }

    #[test]
    fn multikey_uses_one_comparison_and_dedupes() {
        let ix = [index(doc! {"key": {"a": 1}, "name": "a_1"})];
        let p = index_plan(&ix, doc! {"a": {"$gt": 5, "$lt": 10}}, None);
        assert_eq!(bounds(&p, "a"), ["(5, 10)"]);
        assert!(!reads(&p, &[i(12)]) && !p.dedupe);

        ix[0].set_multikey();
        // `[3, 12]` matches; its key 12 must be read.
        let p = index_plan(&ix, doc! {"a": {"$gt": 5, "$lt": 10}}, None);
        assert_eq!(bounds(&p, "a"), ["(5, inf.0]"]);
        assert!(reads(&p, &[i(12)]) && p.dedupe);
        // `[1, 2]` matches both equalities.
        let p = index_plan(&ix, doc! {"$and": [{"a": 1}, {"a": 2}]}, None);
        assert_eq!(p.ranges.len(), 1);
        assert!(reads(&p, &[i(1)]) || reads(&p, &[i(2)]));
        let p = index_plan(
            &ix,
            doc! {"a": {"$in": [1, 2, 3]}, "$and": [{"a": 2}]},
            None,
        );
        assert_eq!(bounds(&p, "a"), ["[2, 2]"]);
    }

    #[test]
    fn sparse_needs_a_condition_that_rules_out_missing() {
        let ix = [index(doc! {"key": {"a": 1}, "name": "a_1", "sparse": true})];
        assert!(!is_collscan(&ix, doc! {"a": 5}, None));
        assert!(!is_collscan(&ix, doc! {"a": {"$gt": 5}}, None));
        assert!(is_collscan(&ix, doc! {"a": null}, None));
        assert!(is_collscan(&ix, doc! {"a": {"$in": [null, 1]}}, None));
        assert!(is_collscan(
            &ix,
            doc! {"a": 5, "$or": [{"a": {"$exists": false}}, {"b": 1}]},
            None
        ));
        assert!(is_collscan(&ix, doc! {"a": {"$gte": null}}, None));
        assert!(is_collscan(&ix, doc! {"b": 1}, Some(doc! {"a": 1})));
        // A hint still uses it.
        let p = plan_of(&ix, doc! {}, None, Some(Hint::Name("a_1".into())));
        assert!(matches!(p, Plan::Index(_)));
    }

    #[test]
    fn partial_needs_the_query_to_imply_its_filter() {
        let ix = [index(
            doc! {"key": {"a": 1}, "name": "a_1", "partialFilterExpression": {"n": {"$gt": 5}}},
        )];
        assert!(is_collscan(&ix, doc! {"a": 1}, None));
        assert!(!is_collscan(&ix, doc! {"a": 1, "n": 7}, None));
        assert!(!is_collscan(&ix, doc! {"a": 1, "n": {"$in": [6, 8]}}, None));
        assert!(!is_collscan(&ix, doc! {"a": 1, "n": {"$gt": 6}}, None));
        assert!(!is_collscan(
            &ix,
            doc! {"a": 1, "n": {"$gt": 5, "$lt": 9}},
            None
        ));
        assert!(is_collscan(&ix, doc! {"a": 1, "n": {"$gte": 5}}, None));
        assert!(is_collscan(&ix, doc! {"a": 1, "n": {"$gt": 4}}, None));
        assert!(is_collscan(&ix, doc! {"a": 1, "n": {"$in": [5, 8]}}, None));
        assert!(is_collscan(&ix, doc! {"a": 1, "n": {"$gt": "x"}}, None));
        assert!(is_collscan(
            &ix,
            doc! {"a": 1, "$or": [{"n": 7}, {"n": 8}]},
            None
        ));
        let e = choose(
            &ix,
            Some(&filter(doc! {"a": 1})),
            None,
            Some(&Hint::Name("a_1".into())),
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::BadValue);

        let ix = [index(
            doc! {"key": {"a": 1}, "name": "a_1", "partialFilterExpression": {"x": {"$exists": true}, "k": "v"}},
        )];
        assert!(!is_collscan(&ix, doc! {"a": 1, "x": 3, "k": "v"}, None));
        assert!(!is_collscan(
            &ix,
            doc! {"a": 1, "x": {"$lt": 3}, "k": "v"},
            None
        ));
        assert!(is_collscan(&ix, doc! {"a": 1, "x": null, "k": "v"}, None));
        assert!(is_collscan(&ix, doc! {"a": 1, "k": "v"}, None));
        assert!(is_collscan(&ix, doc! {"a": 1, "x": 3, "k": "w"}, None));
    }

    #[test]
    fn hashed_fields_take_equality_only() {
        let ix = [index(doc! {"key": {"h": "hashed"}, "name": "h_hashed"})];
        let p = index_plan(&ix, doc! {"h": "v"}, None);
        let hashed = hash::hash_value(&s("v"));
        assert_eq!(bounds(&p, "h"), [format!("[{hashed}, {hashed}]")]);
        assert!(reads(&p, &[Bson::Int64(hashed)]));
        assert!(!reads(&p, &[Bson::Int64(hashed.wrapping_add(1))]));
        let p = index_plan(&ix, doc! {"h": {"$in": ["v", "w"]}}, None);
        assert_eq!(p.ranges.len(), 2);
        assert_ordered(&p);
        assert!(reads(&p, &[Bson::Int64(hash::hash_value(&s("w")))]));
        assert!(is_collscan(&ix, doc! {"h": {"$gt": 1}}, None));
        assert!(is_collscan(&ix, doc! {}, Some(doc! {"h": 1})));

        let ix = [index(doc! {"key": {"a": 1, "h": "hashed"}, "name": "ah"})];
        let p = index_plan(&ix, doc! {"a": 1, "h": 2}, None);
        let hashed = hash::hash_value(&i(2));
        assert!(reads(&p, &[i(1), Bson::Int64(hashed)]));
        assert!(!reads(&p, &[i(1), Bson::Int64(2)]));
    }

    #[test]
    fn scores_prefer_pinned_fields_ranges_sort_unique_and_size() {
        let a = index(doc! {"key": {"a": 1}, "name": "a"});
        let ab = index(doc! {"key": {"a": 1, "b": 1}, "name": "ab"});
        let a_unique = index(doc! {"key": {"a": 1}, "name": "au", "unique": true});
        let b = index(doc! {"key": {"b": 1}, "name": "b"});
        let name = |ix: &[Arc<Index>], f: Document, s: Option<Document>| {
            index_plan(ix, f, s).index.name.clone()
        };
        let all = [a.clone(), ab.clone(), a_unique.clone(), b.clone()];
        assert_eq!(name(&all, doc! {"a": 1, "b": 2}, None), "ab");
        assert_eq!(name(&all, doc! {"a": 1, "b": {"$gt": 2}}, None), "ab");
        assert_eq!(name(&all, doc! {"a": 1}, None), "au");
        assert_eq!(name(&[ab.clone(), a.clone()], doc! {"a": 1}, None), "a");
        assert_eq!(
            name(&[a.clone(), ab.clone()], doc! {"a": 1}, Some(doc! {"b": 1})),
            "ab"
        );
        assert_eq!(
            name(
                &[a.clone(), b.clone()],
                doc! {"a": {"$gt": 1}, "b": 3},
                None
            ),
            "b"
        );
        let hidden = Arc::new(b.with_options(None, true));
        assert!(is_collscan(&[hidden], doc! {"b": 3}, None));
    }

    #[test]
    fn hints_parse_and_select() {
        assert_eq!(
            Hint::parse(&s("a_1")).unwrap(),
            Some(Hint::Name("a_1".into()))
        );
        assert_eq!(Hint::parse(&s("")).unwrap(), None);
        assert_eq!(Hint::parse(&Bson::Document(doc! {})).unwrap(), None);
        assert_eq!(
            Hint::parse(&Bson::Document(doc! {"$natural": -1})).unwrap(),
            Some(Hint::Natural(true))
        );
        assert_eq!(
            Hint::parse(&Bson::Document(doc! {"$natural": 1})).unwrap(),
            Some(Hint::Natural(false))
        );
        assert_eq!(
            Hint::parse(&Bson::Document(doc! {"a": 1})).unwrap(),
            Some(Hint::Pattern(doc! {"a": 1}))
        );
        let e = Hint::parse(&i(5)).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadValue);
        assert_eq!(e.message, "hint must be a string or an object");

        let ix = [
            index(doc! {"key": {"a": 1}, "name": "a_1"}),
            index(doc! {"key": {"b": -1}, "name": "b_-1"}),
            Arc::new(
                Index::parse(&doc! {"key": {"c": 1}, "name": "c_1", "hidden": true}, 3).unwrap(),
            ),
        ];
        let Plan::Index(p) = plan_of(
            &ix,
            doc! {"a": 1},
            Some(doc! {"b": 1}),
            Some(Hint::Name("b_-1".into())),
        ) else {
            panic!("expected the hinted index");
        };
        assert_eq!(p.index.name, "b_-1");
        assert!(p.provides_sort && p.reverse);
        assert_eq!(p.ranges, vec![(Bound::Unbounded, Bound::Unbounded)]);
        assert_eq!(bounds(&p, "b"), ["[MinKey, MaxKey]"]);
        let Plan::Index(p) = plan_of(
            &ix,
            doc! {"b": 3},
            None,
            Some(Hint::Pattern(doc! {"b": -1.0})),
        ) else {
            panic!("expected the hinted index");
        };
        assert_eq!(bounds(&p, "b"), ["[3, 3]"]);
        assert!(matches!(
            plan_of(&ix, doc! {"a": 1}, None, Some(Hint::Natural(true))),
            Plan::Collscan
        ));
        assert!(matches!(
            plan_of(&ix, doc! {"a": 1}, None, Some(Hint::Name("_id_".into()))),
            Plan::Collscan
        ));
        for bad in [
            Hint::Name("nope".into()),
            Hint::Name("c_1".into()),
            Hint::Pattern(doc! {"a": -1}),
        ] {
            let e = choose(&ix, None, None, Some(&bad)).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadValue);
            assert_eq!(
                e.message,
                "planner returned error :: caused by :: hint provided does not correspond to an existing index"
            );
        }
    }

    fn projection(p: Document) -> Projection {
        Projection::parse(&p).unwrap()
    }

    #[test]
    fn covered_queries_follow_mongodb_rules() {
        let ix = [index(doc! {"key": {"a": 1, "b": 1}, "name": "ab"})];
        let p = index_plan(&ix, doc! {"a": 1}, None);
        let covered = |f: Document, proj: Option<Document>, s: Option<Document>| {
            let f = filter(f);
            let proj = proj.map(projection);
            let s = s.map(sort);
            covers(&p, Some(&f), proj.as_ref(), s.as_ref())
        };
        assert!(covered(
            doc! {"a": 1},
            Some(doc! {"a": 1, "b": 1, "_id": 0}),
            None
        ));
        assert!(covered(
            doc! {"a": 1, "b": {"$gt": 1}},
            Some(doc! {"b": 1, "_id": 0}),
            Some(doc! {"b": 1})
        ));
        assert!(!covered(doc! {"a": 1}, Some(doc! {"a": 1, "b": 1}), None));
        assert!(!covered(
            doc! {"a": 1},
            Some(doc! {"a": 1, "c": 1, "_id": 0}),
            None
        ));
        assert!(!covered(
            doc! {"a": 1, "c": 1},
            Some(doc! {"a": 1, "_id": 0}),
            None
        ));
        assert!(!covered(doc! {"a": 1}, Some(doc! {"a": 0}), None));
        assert!(!covered(
            doc! {"a": 1},
            Some(doc! {"a": {"$slice": 1}, "_id": 0}),
            None
        ));
        assert!(!covered(doc! {"a": 1}, None, None));
        assert!(!covered(
            doc! {"a": 1},
            Some(doc! {"a": 1, "_id": 0}),
            Some(doc! {"c": 1})
        ));
        assert!(!covered(
            doc! {"a": 1, "b": {"$exists": true}},
            Some(doc! {"a": 1, "_id": 0}),
            None
        ));
        assert!(!covered(
            doc! {"a": 1, "$expr": {"$eq": ["$a", 1]}},
            Some(doc! {"a": 1, "_id": 0}),
            None
        ));
        assert!(covers(
            &p,
            None,
            Some(&projection(doc! {"a": 1, "_id": 0})),
            None
        ));
        ix[0].set_multikey();
        assert!(!covered(doc! {"a": 1}, Some(doc! {"a": 1, "_id": 0}), None));

        let ix = [index(doc! {"key": {"a": 1, "_id": 1}, "name": "a_id"})];
        let p = index_plan(&ix, doc! {"a": 1}, None);
        assert!(covers(&p, None, Some(&projection(doc! {"a": 1})), None));

        let ix = [index(doc! {"key": {"a": 1, "h": "hashed"}, "name": "ah"})];
        let p = index_plan(&ix, doc! {"a": 1}, None);
        assert!(covers(
            &p,
            Some(&filter(doc! {"a": 1})),
            Some(&projection(doc! {"a": 1, "_id": 0})),
            None
        ));
        assert!(!covers(
            &p,
            Some(&filter(doc! {"a": 1})),
            Some(&projection(doc! {"h": 1, "_id": 0})),
            None
        ));
        assert!(!covers(
            &p,
            Some(&filter(doc! {"a": 1, "h": 2})),
            Some(&projection(doc! {"a": 1, "_id": 0})),
            None
        ));
    }

    #[test]
    fn covered_documents_nest_dotted_paths() {
        let ix = index(doc! {"key": {"a.b": 1, "a.c": -1, "d": 1}, "name": "x"});
        assert_eq!(
            covered_document(&ix, &[i(1), s("x"), Bson::Null]),
            doc! {"a": {"b": 1, "c": "x"}, "d": null}
        );
    }

    #[test]
    fn prefix_successors() {
        assert_eq!(prefix_successor(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_successor(&[1, 0xFF, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xFF]), None);
        assert_eq!(prefix_successor(&[]), None);
    }
}
