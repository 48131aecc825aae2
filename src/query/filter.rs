//! Query filters: `find`/`update`/`delete` predicates with MongoDB 7.0
//! semantics.
//!
//! A filter document is parsed once into a tree of [`Node`]s; matching walks
//! that tree over a borrowed document without cloning. Each operator on a
//! path is its own node that walks the path independently, which is what
//! gives MongoDB's array semantics: `{a: {$gt: 1, $lt: 5}}` matches
//! `{a: [0, 10]}` because some element is above 1 and some element is below
//! 5 (use `$elemMatch` to ask for one element satisfying both).
//!
//! Path traversal follows MongoDB's `BSONElementIterator`:
//! - an array met before the end of the path is traversed: each document
//!   element continues the rest of the path, and a numeric component also
//!   selects the element at that index;
//! - an array at the end of the path offers each element and then the array
//!   itself (except for `$size` and `$elemMatch`, which see the array only);
//! - a path that ends early (missing field, or a scalar where a document was
//!   needed) offers "missing", which `null`, `$exists` and `$type` see.
//!
//! The positional `$` needs the index of the array element that matched;
//! [`Filter::matches_with_details`] reports the first array position along
//! the matched path, recorded through `$and` but not through `$or`, `$nor`
//! or `$not`, like MongoDB.
//!
//! `$jsonSchema` is its own node, with JSON Schema's semantics rather than
//! the query language's (`schema`). A validator's rejection is explained by
//! [`failure_details`] (`details`), which follows the filter document as
//! written rather than the parsed tree.

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document, RawDocument};

use crate::error::{Error, ErrorCode, Result};
use crate::query::collation::{self, Collation};
use crate::query::compare::{
    canonical_type_rank, compare, f64_fits_i64, is_nan, type_code, values_equal, NotIntegral,
    Number, NUMBER_RANK,
};
use crate::query::expr::Expr;
use crate::query::geo;
use crate::query::js::JsFunction;
use crate::query::path::{parts, walk, Container, Part};
use crate::query::regex::compile_regex;
use crate::query::size::{nesting_exceeds, MAX_NESTING};

mod details;
mod raw;
mod schema;

pub use details::failure_details;

/// A parsed query filter.
#[derive(Debug, Clone)]
pub struct Filter {
    root: Node,
    /// The collation its comparisons use (`None`: simple, by bytes).
    collation: Option<Arc<Collation>>,
    /// `$text`, taken out of the top level ([`crate::query::text`]).
    text: Option<crate::query::text::TextFilter>,
}

/// What a successful match found, for the positional `$` operators.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MatchDetails {
    pub matched: bool,
    /// The index of the array element that satisfied the filter, for `$`.
    pub array_position: Option<usize>,
    /// The document's `$text` score, for `{$meta: "textScore"}`.
    pub text_score: Option<f64>,
}

impl Filter {
    /// Parses a filter document, rejecting unknown operators and malformed
    /// arguments with MongoDB's errors.
    pub fn parse(filter: &Document) -> Result<Filter> {
        if nesting_exceeds(filter.values(), MAX_NESTING) {
            crate::bail!(
                BadValue,
                "exceeded maximum query nesting depth of {MAX_NESTING}"
            );
        }
        let (rest, text) = crate::query::text::split_text(filter)?;
        Ok(Filter {
            root: parse_document(rest.as_ref().unwrap_or(filter), Level::Top)?,
            collation: None,
            text,
        })
    }

    /// Parses the filter of an aggregation's `$match`, where MongoDB
    /// refuses `$where` (2 BadValue) whether or not scripts are enabled.
    pub fn parse_in_pipeline(filter: &Document) -> Result<Filter> {
        if nesting_exceeds(filter.values(), MAX_NESTING) {
            crate::bail!(
                BadValue,
                "exceeded maximum query nesting depth of {MAX_NESTING}"
            );
        }
        let (rest, text) = crate::query::text::split_text(filter)?;
        let parsed = Filter {
            root: parse_document(rest.as_ref().unwrap_or(filter), Level::Pipeline)?,
            collation: None,
            text,
        };
        parsed.refuse_near()?;
        Ok(parsed)
    }

    /// Parses a filter whose string comparisons use `collation` (`None`:
    /// simple): its `$in` lists are ordered by it, and every match runs
    /// with it current ([`crate::query::collation::scoped`]).
    pub fn parse_collated(filter: &Document, collation: Option<&Arc<Collation>>) -> Result<Filter> {
        let mut parsed = collation::scoped(collation, || Filter::parse(filter))?;
        parsed.collation = collation.cloned();
        Ok(parsed)
    }

    /// [`Filter::parse_in_pipeline`] with a collation, as
    /// [`Filter::parse_collated`].
    pub fn parse_in_pipeline_collated(
        filter: &Document,
        collation: Option<&Arc<Collation>>,
    ) -> Result<Filter> {
        let mut parsed = collation::scoped(collation, || Filter::parse_in_pipeline(filter))?;
        parsed.collation = collation.cloned();
        Ok(parsed)
    }

    /// The collation its comparisons use; `None` for the simple one.
    pub fn collation(&self) -> Option<&Arc<Collation>> {
        self.collation.as_ref()
    }

    /// The same conditions read as if under the simple collation, for a
    /// planner that encodes their values with an index's own (equal)
    /// collation.
    pub fn without_collation(&self) -> Filter {
        Filter {
            root: self.root.clone(),
            collation: None,
            text: self.text.clone(),
        }
    }

    /// A filter that matches every document (`{}`).
    pub fn match_all() -> Filter {
        Filter {
            root: Node::And(Vec::new()),
            collation: None,
            text: None,
        }
    }

    /// True when the filter has no conditions (`{}` or only `$comment`), so
    /// callers can skip matching.
    pub fn is_match_all(&self) -> bool {
        self.text.is_none() && matches!(&self.root, Node::And(children) if children.is_empty())
    }

    /// The filter's `$text`, if it has one.
    pub fn text(&self) -> Option<&crate::query::text::TextFilter> {
        self.text.as_ref()
    }

    pub fn matches(&self, doc: &Document) -> bool {
        self.matches_with_details(doc).matched
    }

    /// Matches and reports the array position for the positional `$`. A
    /// `$expr` that fails to evaluate counts as no match; use
    /// [`Filter::try_matches_with_details`] to see the error.
    pub fn matches_with_details(&self, doc: &Document) -> MatchDetails {
        self.try_matches_with_details(doc).unwrap_or_default()
    }

    /// Like [`Filter::matches`], but reports a `$expr` evaluation error
    /// (e.g. `$add` of a string) as MongoDB does, failing the operation.
    pub fn try_matches(&self, doc: &Document) -> Result<bool> {
        Ok(self.try_matches_with_details(doc)?.matched)
    }

    /// A quick test on a document still in BSON form: false only when
    /// the document certainly does not match ([`Filter::matches_raw`]).
    /// Stores call it to drop records before they travel.
    pub fn may_match_raw(&self, doc: &RawDocument) -> bool {
        self.matches_raw(doc) != Some(false)
    }

    /// Decides the filter on a document still in BSON form, when its
    /// conditions reach only missing fields and values outside arrays:
    /// `Some(matched)` is exactly what [`Filter::try_matches_with_details`]
    /// says of the decoded document (which, matched, has no array
    /// position). `None` leaves the document to that full match: an
    /// array on a path, a field named twice, a `$expr` that might fail.
    /// Scans decode only the documents that match or stay undecided.
    pub fn matches_raw(&self, doc: &RawDocument) -> Option<bool> {
        if self.text.is_some() {
            return None;
        }
        if self.collation.is_none() && !collation::is_scoped() {
            return raw::decide(&self.root, doc);
        }
        collation::scoped(self.collation.as_ref(), || raw::decide(&self.root, doc))
    }

    pub fn try_matches_with_details(&self, doc: &Document) -> Result<MatchDetails> {
        let text_score = match &self.text {
            Some(text) => match text.evaluate(doc)? {
                Some(score) => Some(score),
                None => return Ok(MatchDetails::default()),
            },
            None => None,
        };
        let mut ctx = MatchContext::default();
        let matched = if self.collation.is_none() && !collation::is_scoped() {
            ctx.eval(&self.root, Container::Doc(doc), true)
        } else {
            collation::scoped(self.collation.as_ref(), || {
                ctx.eval(&self.root, Container::Doc(doc), true)
            })
        };
        if let Some(error) = ctx.error {
            return Err(error);
        }
        Ok(MatchDetails {
            matched,
            array_position: if matched { ctx.position } else { None },
            text_score: if matched { text_score } else { None },
        })
    }

    /// The geo conditions every match meets (top level and `$and`),
    /// with their paths.
    pub fn geo_conditions(&self) -> Vec<(&str, &geo::GeoPredicate)> {
        let mut conjuncts = Vec::new();
        necessary_conjuncts(&self.root, &mut conjuncts);
        conjuncts
            .into_iter()
            .filter_map(|p| match &p.pred {
                Pred::Geo(g) => Some((p.path.dotted.as_str(), g.as_ref())),
                _ => None,
            })
            .collect()
    }

    /// The `$near`/`$nearSphere` of the filter and its path. MongoDB
    /// takes one, at the top level or in `$and`; elsewhere (under `$or`,
    /// `$not`, `$elemMatch`) or twice it is refused (2).
    pub fn near(&self) -> Result<Option<(&str, &geo::Near)>> {
        let near: Vec<_> = self
            .geo_conditions()
            .into_iter()
            .filter_map(|(path, g)| g.near().map(|n| (path, n)))
            .collect();
        if near.len() > 1 {
            crate::bail!(BadValue, "Too many geoNear expressions");
        }
        if near.is_empty() && self.has_near() {
            crate::bail!(BadValue, "geoNear must be top-level expr");
        }
        Ok(near.into_iter().next())
    }

    /// True when `$near`/`$nearSphere` appears anywhere in the filter.
    pub fn has_near(&self) -> bool {
        fn walk(node: &Node) -> bool {
            match node {
                Node::And(c) | Node::Or(c) | Node::Nor(c) => c.iter().any(walk),
                Node::Not(c) => walk(c),
                Node::Path(p) => match &p.pred {
                    Pred::Geo(g) => g.near().is_some(),
                    Pred::ElemMatchObject(sub) => walk(sub),
                    Pred::ElemMatchValue(nodes) => nodes.iter().any(walk),
                    _ => false,
                },
                _ => false,
            }
        }
        walk(&self.root)
    }

    /// Refuses `$near`/`$nearSphere` where results are not sorted by
    /// distance (an aggregation's `$match`, `countDocuments`), as
    /// MongoDB 7.0 does.
    pub fn refuse_near(&self) -> Result<()> {
        if self.has_near() {
            return Err(Error::new(
                crate::error::ErrorCode::MatchOperatorInExpression,
                "$geoNear, $near, and $nearSphere are not allowed in this context, as these \
                 operators require sorting geospatial data. If you do not need sort, consider \
                 using $geoWithin instead. Check out https://dochub.mongodb.org/core/near-sort-operation \
                 and https://dochub.mongodb.org/core/nearSphere-sort-operationfor more details.",
            ));
        }
        Ok(())
    }

    /// True when the filter calls `$rand` (in `$expr`, or a `$sampleRate`
    /// strictly between 0 and 1), which collection validators refuse.
    pub fn uses_rand(&self) -> bool {
        fn walk(node: &Node) -> bool {
            match node {
                Node::And(c) | Node::Or(c) | Node::Nor(c) => c.iter().any(walk),
                Node::Not(inner) => walk(inner),
                Node::Expr(e) => e.uses_rand(),
                Node::Path(_) | Node::Always(_) | Node::Schema(_) | Node::Where(_) => false,
            }
        }
        walk(&self.root)
    }

    /// The first JavaScript operator the filter runs (`$where`, or
    /// `$function` in an `$expr`), which collection validators refuse.
    pub fn script_operator(&self) -> Option<&'static str> {
        fn walk(node: &Node) -> Option<&'static str> {
            match node {
                Node::And(c) | Node::Or(c) | Node::Nor(c) => c.iter().find_map(walk),
                Node::Not(inner) => walk(inner),
                Node::Where(_) => Some("$where"),
                Node::Expr(e) => e.script_operator(),
                Node::Path(_) | Node::Always(_) | Node::Schema(_) => None,
            }
        }
        walk(&self.root)
    }

    /// The values `path` must equal (from `{path: v}`, `$eq` or `$in` at the
    /// top level or under `$and`), or `None` when the filter does not pin it.
    ///
    /// Equality in MongoDB also matches array elements (`{a: 1}` matches
    /// `{a: [1, 2]}`) and numerically equal values of other types, and a
    /// `null` matches a missing field; callers use this for fields that are
    /// never arrays (`_id`, shard keys) and look values up by numeric value.
    /// When several conditions pin the path, the result is their
    /// intersection. `$in` with a regex pins nothing.
    pub fn equality_values(&self, path: &str) -> Option<Vec<Bson>> {
        let mut result: Option<Vec<Bson>> = None;
        collect_equalities(&self.root, path, &mut result);
        // Under a collation a string equals others with other bytes:
        // its bytes pin nothing.
        result.filter(|values| !self.collated_strings(values))
    }

    /// True when this filter has a collation and `values` hold a string,
    /// whose bytes then neither pin a key nor bound a byte range.
    fn collated_strings(&self, values: &[Bson]) -> bool {
        self.collation.is_some() && values.iter().any(collation::has_string)
    }

    /// The range `path` is confined to by comparisons (`$gt`, `$gte`,
    /// `$lt`, `$lte`, `$eq`) that every match must satisfy, or `None` when
    /// no such comparison names it. Bounds are in BSON order; type
    /// bracketing (a numeric bound never matches a string) is left to the
    /// caller, who still applies the whole filter to what the range yields.
    pub fn range_bounds(&self, path: &str) -> Option<(Bound<Bson>, Bound<Bson>)> {
        let mut conjuncts = Vec::new();
        necessary_conjuncts(&self.root, &mut conjuncts);
        let mut lower: Bound<Bson> = Bound::Unbounded;
        let mut upper: Bound<Bson> = Bound::Unbounded;
        let mut found = false;
        for p in conjuncts {
            if p.path.dotted != path {
                continue;
            }
            let Pred::Compare { op, value } = &p.pred else {
                continue;
            };
            // Arrays match element-wise and regexes by pattern: no range.
            if matches!(value, Bson::Array(_) | Bson::RegularExpression(_))
                || self.collated_strings(std::slice::from_ref(value))
            {
                continue;
            }
            found = true;
            let (lo, hi) = match op {
                CmpOp::Eq => (Bound::Included(value), Bound::Included(value)),
                CmpOp::Gt => (Bound::Excluded(value), Bound::Unbounded),
                CmpOp::Gte => (Bound::Included(value), Bound::Unbounded),
                CmpOp::Lt => (Bound::Unbounded, Bound::Excluded(value)),
                CmpOp::Lte => (Bound::Unbounded, Bound::Included(value)),
            };
            lower = tighter(lower, lo, Ordering::Greater);
            upper = tighter(upper, hi, Ordering::Less);
        }
        found.then_some((lower, upper))
    }

    /// The document an upsert starts from: the filter's equality conditions
    /// (`{a: v}`, `$eq`, a one-element `$in`, each `$all` element), taken
    /// from the top level and `$and`, with dotted paths expanded into
    /// embedded documents. Fields come in path order, like MongoDB's.
    /// A path pinned twice, or a path and its prefix, is
    /// `NotSingleValueField`.
    pub fn upsert_seed(&self) -> Result<Document> {
        let mut pairs: Vec<(&FieldPath, &Bson)> = Vec::new();
        collect_upsert_equalities(&self.root, &mut pairs);
        pairs.sort_by(|a, b| a.0.dotted.as_bytes().cmp(b.0.dotted.as_bytes()));
        for window in pairs.windows(2) {
            let (first, second) = (window[0].0, window[1].0);
            if first.dotted == second.dotted {
                crate::bail!(
                    NotSingleValueField,
                    "cannot infer query fields to set, path '{}' is matched twice",
                    first.dotted
                );
            }
        }
        for (i, (a, _)) in pairs.iter().enumerate() {
            for (b, _) in &pairs[i + 1..] {
                if a.is_prefix_of(b) || b.is_prefix_of(a) {
                    crate::bail!(
                        NotSingleValueField,
                        "cannot infer query fields to set, both paths '{}' and '{}' are matched",
                        a.dotted,
                        b.dotted
                    );
                }
            }
        }
        let mut seed = Document::new();
        for (path, value) in pairs {
            insert_at_path(&mut seed, &path.parts, value.clone());
        }
        Ok(seed)
    }
}

/// What the query planner asks of a filter: each condition on a path on
/// its own (an array field may meet each with a different element), the
/// paths a filter reads, and its top-level conditions for implication.
impl Filter {
    /// Each comparison (`$gt`, `$gte`, `$lt`, `$lte`, `$eq`) on `path`
    /// that every match must satisfy, as its own range, in filter order.
    /// Unlike [`Filter::range_bounds`] nothing is intersected: on an
    /// array field `{$gt: 5, $lt: 10}` matches `[3, 12]`, so only one of
    /// them may bound an index scan.
    pub fn range_predicates(&self, path: &str) -> Vec<(Bound<Bson>, Bound<Bson>)> {
        let mut conjuncts = Vec::new();
        necessary_conjuncts(&self.root, &mut conjuncts);
        conjuncts
            .into_iter()
            .filter(|p| p.path.dotted == path)
            .filter_map(|p| comparison_range(&p.pred))
            .filter(|(lo, hi)| {
                let values: Vec<Bson> = [lo, hi]
                    .into_iter()
                    .filter_map(|b| match b {
                        Bound::Included(v) | Bound::Excluded(v) => Some(v.clone()),
                        Bound::Unbounded => None,
                    })
                    .collect();
                !self.collated_strings(&values)
            })
            .collect()
    }

    /// Each equality condition (`{path: v}`, `$eq`, `$in` without
    /// regexes) every match must meet, one list of values per condition,
    /// not intersected (an array field can meet `{a: 1}` and `{a: 2}`).
    pub fn equality_predicates(&self, path: &str) -> Vec<Vec<Bson>> {
        let mut conjuncts = Vec::new();
        necessary_conjuncts(&self.root, &mut conjuncts);
        conjuncts
            .into_iter()
            .filter(|p| p.path.dotted == path)
            .filter_map(|p| match &p.pred {
                Pred::Compare {
                    op: CmpOp::Eq,
                    value,
                } => Some(vec![value.clone()]),
                Pred::In(set) if set.regexes.is_empty() => Some(set.values.clone()),
                _ => None,
            })
            .filter(|values| !self.collated_strings(values))
            .collect()
    }

    /// The dotted paths the filter's conditions name, sorted and unique
    /// (paths inside an `$elemMatch` object are relative to its array and
    /// are not listed). `None` when something reads the document in ways
    /// that cannot be listed: `$expr`.
    pub fn paths(&self) -> Option<Vec<String>> {
        let mut out = Vec::new();
        if !collect_paths(&self.root, &mut out) {
            return None;
        }
        out.sort();
        out.dedup();
        Some(out)
    }

    /// True when some condition on `path`, anywhere in the filter, holds
    /// for a document that lacks the field: a comparison with null that
    /// includes equality (`{a: null}`, `$in: [null]`, `$gte: null`) or
    /// `$exists: false` (also through `$not` and `$nor`).
    pub fn accepts_missing(&self, path: &str) -> bool {
        any_path_condition(&self.root, false, &mut |p, negated| {
            p.path.dotted == path
                && match &p.pred {
                    Pred::Compare { op, value } => {
                        !negated && op.inclusive() && matches!(value, Bson::Null | Bson::Undefined)
                    }
                    Pred::In(set) => !negated && set.has_null,
                    Pred::Exists => negated,
                    _ => false,
                }
        })
    }

    /// True when a condition on `path` tells a missing field from a null
    /// one (`$exists`, `$type`), anywhere in the filter.
    pub fn tests_presence(&self, path: &str) -> bool {
        any_path_condition(&self.root, false, &mut |p, _| {
            p.path.dotted == path && matches!(p.pred, Pred::Exists | Pred::Type(_))
        })
    }

    /// The conditions a match must meet, one per top-level condition
    /// (and per clause of a top-level `$and`), for checking whether one
    /// filter implies another (an index's `partialFilterExpression`).
    pub fn conjuncts(&self) -> Vec<Conjunct> {
        let mut out = Vec::new();
        flatten_conjuncts(&self.root, &mut out);
        out
    }
}

/// One condition of a filter's top level, from [`Filter::conjuncts`].
#[derive(Debug, Clone)]
pub struct Conjunct {
    node: Node,
}

impl Conjunct {
    /// The path the condition is on; `None` for `$or`, `$nor`, `$expr`,
    /// a `$not` and the like.
    pub fn path(&self) -> Option<&str> {
        match &self.node {
            Node::Path(p) => Some(&p.path.dotted),
            _ => None,
        }
    }

    /// True when a field holding `value` (or an array holding it) meets
    /// the condition.
    pub fn accepts(&self, value: &Bson) -> bool {
        match &self.node {
            Node::Path(p) => {
                if matches!(value, Bson::Array(_)) && !p.pred.traverses_leaf_arrays() {
                    return false;
                }
                test(&p.pred, Some(value)).is_some()
            }
            _ => false,
        }
    }

    /// True when a document lacking the field meets the condition
    /// (`{a: null}`, `$lte: null`).
    pub fn accepts_missing(&self) -> bool {
        match &self.node {
            Node::Path(p) => test(&p.pred, None).is_some(),
            _ => false,
        }
    }

    /// The range of a comparison condition (`$gt: 5`, `$eq: 1`).
    pub fn range(&self) -> Option<(Bound<Bson>, Bound<Bson>)> {
        match &self.node {
            Node::Path(p) => comparison_range(&p.pred),
            _ => None,
        }
    }

    /// True for `{path: {$exists: true}}`.
    pub fn is_exists(&self) -> bool {
        matches!(&self.node, Node::Path(p) if matches!(p.pred, Pred::Exists))
    }
}

/// The range a comparison confines its path to; arrays (matched element
/// by element) and regexes (matched by pattern) give none.
fn comparison_range(pred: &Pred) -> Option<(Bound<Bson>, Bound<Bson>)> {
    let Pred::Compare { op, value } = pred else {
        return None;
    };
    if matches!(value, Bson::Array(_) | Bson::RegularExpression(_)) {
        return None;
    }
    let v = || value.clone();
    Some(match op {
        CmpOp::Eq => (Bound::Included(v()), Bound::Included(v())),
        CmpOp::Gt => (Bound::Excluded(v()), Bound::Unbounded),
        CmpOp::Gte => (Bound::Included(v()), Bound::Unbounded),
        CmpOp::Lt => (Bound::Unbounded, Bound::Excluded(v())),
        CmpOp::Lte => (Bound::Unbounded, Bound::Included(v())),
    })
}

/// Collects every path a node names; false when a node reads the
/// document in a way no path list describes.
fn collect_paths(node: &Node, out: &mut Vec<String>) -> bool {
    match node {
        Node::And(children) | Node::Or(children) | Node::Nor(children) => {
            children.iter().all(|c| collect_paths(c, out))
        }
        Node::Not(child) => collect_paths(child, out),
        Node::Path(p) => {
            out.push(p.path.dotted.clone());
            true
        }
        Node::Always(_) => true,
        Node::Expr(_) | Node::Schema(_) | Node::Where(_) => false,
    }
}

/// True when `hit` holds for some path condition; `negated` tracks
/// whether the condition sits under an odd number of `$not`/`$nor`.
fn any_path_condition(
    node: &Node,
    negated: bool,
    hit: &mut dyn FnMut(&PathNode, bool) -> bool,
) -> bool {
    match node {
        Node::And(children) | Node::Or(children) => {
            children.iter().any(|c| any_path_condition(c, negated, hit))
        }
        Node::Nor(children) => children
            .iter()
            .any(|c| any_path_condition(c, !negated, hit)),
        Node::Not(child) => any_path_condition(child, !negated, hit),
        Node::Path(p) => hit(p, negated),
        Node::Always(_) | Node::Expr(_) | Node::Schema(_) | Node::Where(_) => false,
    }
}

fn flatten_conjuncts(node: &Node, out: &mut Vec<Conjunct>) {
    match node {
        Node::And(children) => children.iter().for_each(|c| flatten_conjuncts(c, out)),
        Node::Or(children) if children.len() == 1 => flatten_conjuncts(&children[0], out),
        other => out.push(Conjunct {
            node: other.clone(),
        }),
    }
}

/// A condition on single values, as `$elemMatch` applies it to each array
/// element; also what `$pull` with a condition and the `$elemMatch`
/// projection need.
#[derive(Debug, Clone)]
pub struct ElementMatcher {
    pred: Pred,
}

impl ElementMatcher {
    /// Parses a condition: operators (`{$gte: 5}`, `{$in: [...]}`) apply to
    /// the value itself; anything else (`{a: 1, b: {$gt: 2}}`, `{$or: ...}`)
    /// is a filter on documents (and arrays, seen as documents with keys
    /// "0", "1", ...).
    pub fn parse(condition: &Document) -> Result<ElementMatcher> {
        if nesting_exceeds(condition.values(), MAX_NESTING) {
            crate::bail!(
                BadValue,
                "exceeded maximum query nesting depth of {MAX_NESTING}"
            );
        }
        Ok(ElementMatcher {
            pred: parse_element_condition(condition)?,
        })
    }

    /// True when the value satisfies the condition. Arrays are not
    /// traversed: `{$gt: 1}` does not match `[5]`.
    pub fn matches(&self, value: &Bson) -> bool {
        match &self.pred {
            Pred::ElemMatchValue(nodes) => nodes.iter().all(|n| eval_on_value(n, value)),
            Pred::ElemMatchObject(sub) => {
                let container = match value {
                    Bson::Document(d) => Container::Doc(d),
                    Bson::Array(a) => Container::Arr(a),
                    _ => return false,
                };
                MatchContext::default().eval(sub, container, false)
            }
            other => test(other, Some(value)).is_some(),
        }
    }
}

fn insert_at_path(doc: &mut Document, parts: &[Part], value: Bson) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    if rest.is_empty() {
        doc.insert(first.name.clone(), value);
        return;
    }
    if !matches!(doc.get(&first.name), Some(Bson::Document(_))) {
        doc.insert(first.name.clone(), Document::new());
    }
    if let Some(Bson::Document(sub)) = doc.get_mut(&first.name) {
        insert_at_path(sub, rest, value);
    }
}

/// Equality conditions that hold for every matching document: the top
/// level, `$and`, and a one-clause `$or` (which MongoDB simplifies away).
fn necessary_conjuncts<'f>(node: &'f Node, out: &mut Vec<&'f PathNode>) {
    match node {
        Node::And(children) => {
            for child in children {
                necessary_conjuncts(child, out);
            }
        }
        Node::Or(children) if children.len() == 1 => necessary_conjuncts(&children[0], out),
        Node::Path(p) => out.push(p),
        _ => {}
    }
}

fn collect_equalities(node: &Node, path: &str, result: &mut Option<Vec<Bson>>) {
    let mut conjuncts = Vec::new();
    necessary_conjuncts(node, &mut conjuncts);
    for p in conjuncts {
        if p.path.dotted != path {
            continue;
        }
        let values: Vec<Bson> = match &p.pred {
            Pred::Compare {
                op: CmpOp::Eq,
                value,
            } => vec![value.clone()],
            Pred::In(set) if set.regexes.is_empty() => set.values.clone(),
            _ => continue,
        };
        *result = Some(match result.take() {
            None => values,
            Some(previous) => previous
                .into_iter()
                .filter(|v| values.iter().any(|w| values_equal(v, w)))
                .collect(),
        });
    }
}

/// The tighter of two bounds: the larger lower bound (`wanted` Greater)
/// or the smaller upper bound (`wanted` Less); exclusive wins a tie.
fn tighter(current: Bound<Bson>, candidate: Bound<&Bson>, wanted: Ordering) -> Bound<Bson> {
    let candidate = match candidate {
        Bound::Unbounded => return current,
        Bound::Included(v) => Bound::Included(v.clone()),
        Bound::Excluded(v) => Bound::Excluded(v.clone()),
    };
    let value = |b: &Bound<Bson>| match b {
        Bound::Included(v) | Bound::Excluded(v) => Some(v.clone()),
        Bound::Unbounded => None,
    };
    match (value(&current), value(&candidate)) {
        (None, _) => candidate,
        (Some(cur), Some(cand)) => match compare(&cand, &cur) {
            o if o == wanted => candidate,
            Ordering::Equal if matches!(candidate, Bound::Excluded(_)) => candidate,
            _ => current,
        },
        (Some(_), None) => current,
    }
}

fn collect_upsert_equalities<'f>(node: &'f Node, out: &mut Vec<(&'f FieldPath, &'f Bson)>) {
    let mut conjuncts = Vec::new();
    necessary_conjuncts(node, &mut conjuncts);
    for p in conjuncts {
        match &p.pred {
            Pred::Compare {
                op: CmpOp::Eq,
                value,
            } => out.push((&p.path, value)),
            Pred::In(set) if set.regexes.is_empty() && set.values.len() == 1 => {
                out.push((&p.path, &set.values[0]))
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------
// The parsed tree.

#[derive(Debug, Clone)]
enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Nor(Vec<Node>),
    Not(Box<Node>),
    Path(PathNode),
    Expr(Box<Expr>),
    /// `$where`: a JavaScript predicate on the whole document.
    Where(JsFunction),
    Always(bool),
    /// `$jsonSchema`, on the whole document.
    Schema(Box<schema::Schema>),
}

#[derive(Debug, Clone)]
struct PathNode {
    path: Arc<FieldPath>,
    pred: Pred,
}

/// A dotted path split once at parse time.
#[derive(Debug, Clone, PartialEq)]
struct FieldPath {
    dotted: String,
    parts: Vec<Part>,
}

impl FieldPath {
    fn new(dotted: &str) -> FieldPath {
        FieldPath {
            dotted: dotted.to_string(),
            parts: parts(dotted),
        }
    }

    /// The path of `$elemMatch` value-form operators: the element itself.
    fn element() -> FieldPath {
        FieldPath {
            dotted: String::new(),
            parts: Vec::new(),
        }
    }

    fn is_prefix_of(&self, other: &FieldPath) -> bool {
        self.parts.len() < other.parts.len()
            && self
                .parts
                .iter()
                .zip(&other.parts)
                .all(|(a, b)| a.name == b.name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Eq,
    Lt,
    Lte,
    Gt,
    Gte,
}

impl CmpOp {
    fn accepts(self, ord: Ordering) -> bool {
        match self {
            CmpOp::Eq => ord == Ordering::Equal,
            CmpOp::Lt => ord == Ordering::Less,
            CmpOp::Lte => ord != Ordering::Greater,
            CmpOp::Gt => ord == Ordering::Greater,
            CmpOp::Gte => ord != Ordering::Less,
        }
    }

    /// True for the operators that include equality.
    fn inclusive(self) -> bool {
        matches!(self, CmpOp::Eq | CmpOp::Lte | CmpOp::Gte)
    }
}

/// A predicate on one value reached by a path.
#[derive(Debug, Clone)]
enum Pred {
    Compare {
        op: CmpOp,
        value: Bson,
    },
    In(Box<InSet>),
    Regex(Box<QueryRegex>),
    Exists,
    Type(TypeSet),
    Size(usize),
    Mod {
        divisor: i64,
        remainder: i64,
    },
    ElemMatchObject(Box<Node>),
    ElemMatchValue(Vec<Node>),
    Bits {
        test: BitTest,
        mask: BitMask,
    },
    /// `$geoWithin`, `$geoIntersects`, `$near`/`$nearSphere` ([`geo`]).
    Geo(Box<geo::GeoPredicate>),
}

impl Pred {
    /// `$size` and `$elemMatch` look at a trailing array itself, never at
    /// its elements.
    fn traverses_leaf_arrays(&self) -> bool {
        !matches!(
            self,
            Pred::Size(_) | Pred::ElemMatchObject(_) | Pred::ElemMatchValue(_) | Pred::Geo(_)
        )
    }
}

#[derive(Debug, Clone)]
struct InSet {
    /// Sorted by [`compare`] and deduplicated, for binary search.
    values: Vec<Bson>,
    regexes: Vec<QueryRegex>,
    has_null: bool,
}

impl InSet {
    fn contains(&self, value: &Bson) -> bool {
        self.values
            .binary_search_by(|probe| compare(probe, value))
            .is_ok()
            || self.regexes.iter().any(|r| r.matches(value))
    }
}

/// A compiled `$regex` with its original pattern and options (a regex
/// value in a document matches only an identical regex).
#[derive(Debug, Clone)]
struct QueryRegex {
    pattern: String,
    options: String,
    compiled: regex::Regex,
}

impl QueryRegex {
    fn new(pattern: &str, options: &str) -> Result<QueryRegex> {
        let compiled = compile_regex(pattern, options)?;
        Ok(QueryRegex {
            pattern: pattern.to_string(),
            options: options.to_string(),
            compiled,
        })
    }

    fn matches(&self, value: &Bson) -> bool {
        match value {
            Bson::String(s) | Bson::Symbol(s) => self.compiled.is_match(s),
            Bson::RegularExpression(r) => {
                r.pattern.as_str() == self.pattern && r.options.as_str() == self.options
            }
            _ => false,
        }
    }
}

/// The types a `$type` accepts, as a bit set over type codes.
#[derive(Debug, Clone, Copy)]
struct TypeSet {
    bits: u32,
}

impl TypeSet {
    const MIN_KEY_BIT: u32 = 1 << 20;
    const MAX_KEY_BIT: u32 = 1 << 21;
    const NUMBER_BITS: u32 = (1 << 1) | (1 << 16) | (1 << 18) | (1 << 19);

    fn bit_for_code(code: i32) -> Option<u32> {
        match code {
            1..=19 => Some(1 << code),
            -1 => Some(Self::MIN_KEY_BIT),
            127 => Some(Self::MAX_KEY_BIT),
            _ => None,
        }
    }

    fn contains(&self, value: &Bson) -> bool {
        self.contains_code(type_code(value))
    }

    fn contains_code(&self, code: i32) -> bool {
        Self::bit_for_code(code).is_some_and(|bit| self.bits & bit != 0)
    }
}

const TYPE_ALIASES: &[(&str, i32)] = &[
    ("double", 1),
    ("string", 2),
    ("object", 3),
    ("array", 4),
    ("binData", 5),
    ("undefined", 6),
    ("objectId", 7),
    ("bool", 8),
    ("date", 9),
    ("null", 10),
    ("regex", 11),
    ("dbPointer", 12),
    ("javascript", 13),
    ("symbol", 14),
    ("javascriptWithScope", 15),
    ("int", 16),
    ("timestamp", 17),
    ("long", 18),
    ("decimal", 19),
    ("minKey", -1),
    ("maxKey", 127),
];

/// The bit positions a `$bits*` operator tests. A BinData mask stays as
/// bytes (expanding a 16MB mask into positions would take gigabytes).
#[derive(Debug, Clone)]
enum BitMask {
    Positions(Vec<u32>),
    Bytes(Vec<u8>),
}

impl BitMask {
    /// True when `pred` holds for some position in the mask.
    fn any(&self, mut pred: impl FnMut(u64) -> bool) -> bool {
        match self {
            BitMask::Positions(positions) => positions.iter().any(|&p| pred(u64::from(p))),
            BitMask::Bytes(bytes) => bytes.iter().enumerate().any(|(index, byte)| {
                (0..8u64).any(|bit| byte & (1 << bit) != 0 && pred(index as u64 * 8 + bit))
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BitTest {
    AllSet,
    AnySet,
    AllClear,
    AnyClear,
}

// ---------------------------------------------------------------------------
// Parsing.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The filter's own top level (and `$and`/`$or`/`$nor` under it).
    Top,
    /// Inside `$elemMatch`, where `$expr` and `$where` are not allowed.
    Sub,
    /// The top level of an aggregation's `$match` (and `$lookup`'s), where
    /// `$where` is not allowed.
    Pipeline,
}

fn parse_document(filter: &Document, level: Level) -> Result<Node> {
    let mut children = Vec::new();
    for (key, value) in filter {
        if key.starts_with('$') {
            if let Some(node) = parse_top_level_operator(key, value, level)? {
                children.push(node);
            }
            continue;
        }
        parse_field(key, value, &mut children)?;
    }
    Ok(Node::And(children))
}

fn parse_top_level_operator(key: &str, value: &Bson, level: Level) -> Result<Option<Node>> {
    let node = match key {
        "$and" | "$or" | "$nor" => {
            let Bson::Array(clauses) = value else {
                crate::bail!(BadValue, "{key} must be an array");
            };
            if clauses.is_empty() {
                crate::bail!(BadValue, "$and/$or/$nor must be a nonempty array");
            }
            let mut children = Vec::with_capacity(clauses.len());
            for clause in clauses {
                let Bson::Document(sub) = clause else {
                    crate::bail!(BadValue, "$or/$and/$nor entries need to be full objects");
                };
                children.push(parse_document(sub, level)?);
            }
            match key {
                "$and" => Node::And(children),
                "$or" => Node::Or(children),
                _ => Node::Nor(children),
            }
        }
        "$expr" => {
            if level == Level::Sub {
                crate::bail!(
                    BadValue,
                    "$expr can only be applied to the top-level document"
                );
            }
            Node::Expr(Box::new(Expr::parse(value)?))
        }
        "$comment" => return Ok(None),
        "$alwaysTrue" | "$alwaysFalse" => {
            if parse_integer(value).map_err(Error::failed_to_parse)? != 1 {
                crate::bail!(FailedToParse, "{key} must be an integer value of 1");
            }
            Node::Always(key == "$alwaysTrue")
        }
        // DBRef fields queried inside `$elemMatch` or on their own.
        "$ref" | "$id" | "$db" => Node::Path(PathNode {
            path: Arc::new(FieldPath::new(key)),
            pred: Pred::Compare {
                op: CmpOp::Eq,
                value: value.clone(),
            },
        }),
        "$where" => Node::Where(parse_where(value, level)?),
        "$text" if level == Level::Sub => crate::bail!(
            BadValue,
            "$text can only be applied to the top-level document"
        ),
        "$text" => crate::bail!(
            BadValue,
            "$text may only be at the top level of a query or in a top-level $and, and only once"
        ),
        "$jsonSchema" => Node::Schema(Box::new(schema::parse(value)?)),
        "$sampleRate" => {
            if level == Level::Sub {
                crate::bail!(
                    BadValue,
                    "$sampleRate can only be applied to the top-level document"
                );
            }
            let Some(rate) = Number::of(value) else {
                crate::bail!(BadValue, "argument to $sampleRate must be a numeric type");
            };
            // NaN lies outside the range, so it is refused too.
            let rate = rate.to_f64();
            if !(0.0..=1.0).contains(&rate) {
                crate::bail!(
                    BadValue,
                    "numeric argument to $sampleRate must be in [0, 1]"
                );
            }
            // As MongoDB desugars it: 0 and 1 are constants, anything
            // between is `{$expr: {$lt: [{$rand: {}}, rate]}}`.
            if rate == 0.0 {
                Node::Always(false)
            } else if rate == 1.0 {
                Node::Always(true)
            } else {
                let expr = bson::doc! {"$lt": [{"$rand": {}}, rate]};
                Node::Expr(Box::new(Expr::parse(&Bson::Document(expr))?))
            }
        }
        _ => crate::bail!(
            BadValue,
            "unknown top level operator: {key}. If you have a field name that starts with a '$' \
             symbol, consider using $getField or $setField."
        ),
    };
    Ok(Some(node))
}

/// `$where`'s argument: a function or expression as a string or BSON
/// JavaScript code, compiled now so a syntax error fails the operation
/// before it reads anything.
fn parse_where(value: &Bson, level: Level) -> Result<JsFunction> {
    match level {
        Level::Sub => crate::bail!(BadValue, "$elemMatch cannot contain $where expression"),
        Level::Pipeline => crate::bail!(BadValue, "$where is not allowed in this context"),
        Level::Top => {}
    }
    if !crate::query::js::enabled() {
        return Err(crate::query::js::where_disabled_error());
    }
    let source = match value {
        Bson::String(s) | Bson::JavaScriptCode(s) => s,
        Bson::JavaScriptCodeWithScope(_) => crate::bail!(
            BadValue,
            "$where no longer supports deprecated BSON type CodeWScope"
        ),
        _ => crate::bail!(BadValue, "$where got bad type"),
    };
    let function = JsFunction::new(source)?;
    function.check()?;
    Ok(function)
}

/// `{path: value}` at the top of a filter or `$elemMatch` object.
fn parse_field(path: &str, value: &Bson, out: &mut Vec<Node>) -> Result<()> {
    let field = Arc::new(FieldPath::new(path));
    match value {
        Bson::Document(sub) if is_operator_document(sub, false) => {
            parse_operators(&field, sub, out)
        }
        Bson::RegularExpression(r) => {
            out.push(path_node(
                &field,
                Pred::Regex(Box::new(QueryRegex::new(
                    r.pattern.as_str(),
                    r.options.as_str(),
                )?)),
            ));
            Ok(())
        }
        _ => {
            out.push(path_node(&field, equality(value)?));
            Ok(())
        }
    }
}

fn path_node(path: &Arc<FieldPath>, pred: Pred) -> Node {
    Node::Path(PathNode {
        path: Arc::clone(path),
        pred,
    })
}

fn equality(value: &Bson) -> Result<Pred> {
    if matches!(value, Bson::Undefined) {
        crate::bail!(BadValue, "cannot compare to undefined");
    }
    Ok(Pred::Compare {
        op: CmpOp::Eq,
        value: value.clone(),
    })
}

/// A document whose first field is an operator, so `{a: {$gt: 1}}` is a
/// condition while `{a: {b: 1}}` and DBRefs `{$ref, $id}` are values.
fn is_operator_document(doc: &Document, allow_incomplete_dbref: bool) -> bool {
    let Some(first) = doc.keys().next() else {
        return false;
    };
    if !first.starts_with('$') {
        return false;
    }
    let has = |k: &str| doc.contains_key(k);
    let is_dbref = if allow_incomplete_dbref {
        has("$ref") || has("$id") || has("$db")
    } else {
        has("$ref") && has("$id")
    };
    !is_dbref
}

/// The operators of `{path: {$op: arg, ...}}`, one node each.
fn parse_operators(path: &Arc<FieldPath>, ops: &Document, out: &mut Vec<Node>) -> Result<()> {
    for (op, arg) in ops {
        if let Some(node) = parse_operator(path, op, arg, ops)? {
            out.push(node);
        }
    }
    Ok(())
}

fn parse_operator(
    path: &Arc<FieldPath>,
    op: &str,
    arg: &Bson,
    siblings: &Document,
) -> Result<Option<Node>> {
    let compare_op = |cmp: CmpOp| -> Result<Node> {
        if matches!(arg, Bson::RegularExpression(_)) && cmp != CmpOp::Eq {
            crate::bail!(
                BadValue,
                "Can't have RegEx as arg to predicate over field '{}'.",
                path.dotted
            );
        }
        if matches!(arg, Bson::Undefined) {
            crate::bail!(BadValue, "cannot compare to undefined");
        }
        Ok(path_node(
            path,
            Pred::Compare {
                op: cmp,
                value: arg.clone(),
            },
        ))
    };
    let node = match op {
        "$eq" => compare_op(CmpOp::Eq)?,
        "$lt" => compare_op(CmpOp::Lt)?,
        "$lte" => compare_op(CmpOp::Lte)?,
        "$gt" => compare_op(CmpOp::Gt)?,
        "$gte" => compare_op(CmpOp::Gte)?,
        "$ne" => {
            if matches!(arg, Bson::RegularExpression(_)) {
                crate::bail!(BadValue, "Can't have regex as arg to $ne.");
            }
            Node::Not(Box::new(compare_op(CmpOp::Eq)?))
        }
        "$in" | "$nin" => {
            let Bson::Array(items) = arg else {
                crate::bail!(BadValue, "{op} needs an array");
            };
            let node = path_node(path, Pred::In(Box::new(parse_in(items)?)));
            if op == "$in" {
                node
            } else {
                Node::Not(Box::new(node))
            }
        }
        "$exists" => {
            let node = path_node(path, Pred::Exists);
            if element_true_value(arg) {
                node
            } else {
                Node::Not(Box::new(node))
            }
        }
        "$type" => path_node(path, Pred::Type(parse_type_set(arg)?)),
        "$size" => path_node(path, Pred::Size(parse_size(arg)?)),
        "$mod" => {
            let (divisor, remainder) = parse_mod(arg)?;
            path_node(path, Pred::Mod { divisor, remainder })
        }
        "$regex" => path_node(path, Pred::Regex(Box::new(parse_regex_operator(siblings)?))),
        "$options" => {
            if siblings.contains_key("$regex") {
                return Ok(None);
            }
            crate::bail!(BadValue, "$options needs a $regex");
        }
        "$elemMatch" => path_node(path, parse_elem_match(arg)?),
        "$all" => parse_all(path, arg)?,
        "$not" => parse_not(path, arg)?,
        "$bitsAllSet" => parse_bits(path, op, BitTest::AllSet, arg)?,
        "$bitsAnySet" => parse_bits(path, op, BitTest::AnySet, arg)?,
        "$bitsAllClear" => parse_bits(path, op, BitTest::AllClear, arg)?,
        "$bitsAnyClear" => parse_bits(path, op, BitTest::AnyClear, arg)?,
        "$where" => crate::bail!(BadValue, "$where cannot be applied to a field"),
        "$near" | "$nearSphere" | "$geoWithin" | "$geoIntersects" | "$within" | "$geoNear" => {
            path_node(
                path,
                Pred::Geo(Box::new(geo::GeoPredicate::parse(op, arg, siblings)?)),
            )
        }
        "$maxDistance" | "$minDistance"
            if siblings.contains_key("$near")
                || siblings.contains_key("$nearSphere")
                || siblings.contains_key("$geoNear") =>
        {
            return Ok(None)
        }
        _ => crate::bail!(BadValue, "unknown operator: {op}"),
    };
    Ok(Some(node))
}

fn parse_in(items: &[Bson]) -> Result<InSet> {
    let mut values = Vec::with_capacity(items.len());
    let mut regexes = Vec::new();
    for item in items {
        match item {
            Bson::Document(d) if is_operator_document(d, false) => {
                crate::bail!(BadValue, "cannot nest $ under $in");
            }
            Bson::RegularExpression(r) => {
                regexes.push(QueryRegex::new(r.pattern.as_str(), r.options.as_str())?)
            }
            Bson::Undefined => {
                crate::bail!(BadValue, "InMatchExpression equality cannot be undefined")
            }
            other => values.push(other.clone()),
        }
    }
    values.sort_by(compare);
    values.dedup_by(|a, b| values_equal(a, b));
    let has_null = values.iter().any(|v| matches!(v, Bson::Null));
    Ok(InSet {
        values,
        regexes,
        has_null,
    })
}

/// MongoDB's `BSONElement::trueValue`, used by `$exists`: false, null,
/// undefined and numeric zero are false.
fn element_true_value(value: &Bson) -> bool {
    match value {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(d) => *d != 0.0,
        Bson::Decimal128(d) => !crate::query::compare::DecimalValue::from_decimal128(d).is_zero(),
        _ => true,
    }
}

/// MongoDB's `parseIntegerElementToLong`: integral numbers only.
fn parse_integer(value: &Bson) -> std::result::Result<i64, String> {
    match value {
        Bson::Int32(i) => Ok(i64::from(*i)),
        Bson::Int64(i) => Ok(*i),
        Bson::Double(d) => {
            if d.is_nan() {
                return Err(format!("Expected an integer, but found NaN in: {d}"));
            }
            if !f64_fits_i64(*d) {
                return Err(format!("Cannot represent as a 64-bit integer: {d}"));
            }
            if d.trunc() != *d {
                return Err(format!("Expected an integer: {d}"));
            }
            Ok(*d as i64)
        }
        Bson::Decimal128(_) => {
            let f = Number::of(value).map(Number::to_f64).unwrap_or(f64::NAN);
            if f.is_nan() || f.trunc() != f || !f64_fits_i64(f) {
                return Err(format!("Cannot represent as a 64-bit integer: {value}"));
            }
            Ok(f as i64)
        }
        other => Err(format!("Expected a number in: {other}")),
    }
}

fn parse_type_set(arg: &Bson) -> Result<TypeSet> {
    let mut bits = 0u32;
    let mut add = |item: &Bson| -> Result<()> {
        match item {
            Bson::String(alias) => {
                if alias == "number" {
                    bits |= TypeSet::NUMBER_BITS;
                    return Ok(());
                }
                let Some((_, code)) = TYPE_ALIASES.iter().find(|(name, _)| name == alias) else {
                    crate::bail!(BadValue, "Unknown type name alias: {alias}");
                };
                bits |= TypeSet::bit_for_code(*code).unwrap_or(0);
                Ok(())
            }
            other if Number::of(other).is_some() => {
                let code = parse_integer(other)
                    .ok()
                    .and_then(|c| i32::try_from(c).ok())
                    .and_then(|c| TypeSet::bit_for_code(c).map(|bit| (c, bit)));
                match code {
                    Some((_, bit)) => {
                        bits |= bit;
                        Ok(())
                    }
                    None => crate::bail!(BadValue, "Invalid numerical type code: {other}"),
                }
            }
            _ => crate::bail!(
                TypeMismatch,
                "type must be represented as a number or a string"
            ),
        }
    };
    match arg {
        Bson::Array(items) => {
            for item in items {
                add(item)?;
            }
        }
        single => add(single)?,
    }
    if bits == 0 {
        crate::bail!(FailedToParse, "$type must match at least one type");
    }
    Ok(TypeSet { bits })
}

fn parse_size(arg: &Bson) -> Result<usize> {
    let size: i64 = match arg {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(i) => {
            if i32::try_from(*i).is_err() {
                crate::bail!(BadValue, "$size must be representable as a 32-bit integer");
            }
            *i
        }
        Bson::Double(_) | Bson::Decimal128(_) => {
            let f = Number::of(arg).map(Number::to_f64).unwrap_or(f64::NAN);
            if !f.is_finite() || f.trunc() != f {
                crate::bail!(BadValue, "$size must be a whole number");
            }
            if f > f64::from(i32::MAX) || f < f64::from(i32::MIN) {
                crate::bail!(BadValue, "$size must be representable as a 32-bit integer");
            }
            f as i64
        }
        _ => crate::bail!(BadValue, "$size needs a number"),
    };
    if size < 0 {
        crate::bail!(BadValue, "$size may not be negative");
    }
    usize::try_from(size).map_err(|_| crate::err!(BadValue, "$size needs a number"))
}

/// `$mod: [divisor, remainder]`; fractional values truncate, NaN, infinity
/// and values beyond 64 bits are rejected, and the divisor cannot be 0.
fn parse_mod(arg: &Bson) -> Result<(i64, i64)> {
    let Bson::Array(items) = arg else {
        crate::bail!(BadValue, "malformed mod, needs to be an array");
    };
    if items.len() < 2 {
        crate::bail!(BadValue, "malformed mod, not enough elements");
    }
    let Some(divisor) = Number::of(&items[0]) else {
        crate::bail!(BadValue, "malformed mod, divisor not a number");
    };
    let Some(remainder) = Number::of(&items[1]) else {
        crate::bail!(BadValue, "malformed mod, remainder not a number");
    };
    if items.len() > 2 {
        crate::bail!(BadValue, "malformed mod, too many elements");
    }
    let to_long = |n: Number, what: &str| -> Result<i64> {
        match n.truncate_to_i64() {
            Ok(i) => Ok(i),
            Err(NotIntegral::NotFinite) => crate::bail!(
                BadValue,
                "malformed mod, {what} value is invalid :: caused by :: Unable to coerce \
                 NaN/Inf to integral type"
            ),
            Err(NotIntegral::OutOfRange) => crate::bail!(
                BadValue,
                "malformed mod, {what} value is invalid :: caused by :: Out of bounds \
                 coercing to integral value"
            ),
        }
    };
    let divisor = to_long(divisor, "divisor")?;
    let remainder = to_long(remainder, "remainder")?;
    if divisor == 0 {
        crate::bail!(BadValue, "divisor cannot be 0");
    }
    Ok((divisor, remainder))
}

/// `$regex` with its sibling `$options`, in either order; `$regex` may be a
/// string or a BSON regex (whose flags then exclude `$options`).
fn parse_regex_operator(ops: &Document) -> Result<QueryRegex> {
    let mut pattern: Option<&str> = None;
    let mut options: Option<&str> = None;
    for (key, value) in ops {
        match key.as_str() {
            "$regex" => match value {
                Bson::String(s) => pattern = Some(s),
                Bson::RegularExpression(r) => {
                    pattern = Some(r.pattern.as_str());
                    if !r.options.as_str().is_empty() {
                        if options.is_some() {
                            return Err(Error::new(
                                ErrorCode::RegexOptionsTwiceInRegex,
                                "options set in both $regex and $options",
                            ));
                        }
                        options = Some(r.options.as_str());
                    }
                }
                _ => crate::bail!(BadValue, "$regex has to be a string"),
            },
            "$options" => {
                let Bson::String(s) = value else {
                    crate::bail!(BadValue, "$options has to be a string");
                };
                if options.is_some() {
                    return Err(Error::new(
                        ErrorCode::RegexOptionsTwice,
                        "options set in both $regex and $options",
                    ));
                }
                options = Some(s);
            }
            _ => {}
        }
    }
    QueryRegex::new(pattern.unwrap_or(""), options.unwrap_or(""))
}

/// Operators that make an `$elemMatch` argument a document condition
/// rather than conditions on the element itself.
fn is_top_level_operator(name: &str) -> bool {
    matches!(
        name,
        "$and"
            | "$or"
            | "$nor"
            | "$expr"
            | "$comment"
            | "$where"
            | "$text"
            | "$jsonSchema"
            | "$alwaysTrue"
            | "$alwaysFalse"
            | "$sampleRate"
            | "$ref"
            | "$id"
            | "$db"
    )
}

fn parse_elem_match(arg: &Bson) -> Result<Pred> {
    let Bson::Document(sub) = arg else {
        crate::bail!(BadValue, "$elemMatch needs an Object");
    };
    parse_element_condition(sub)
}

/// `$elemMatch`'s argument: operators on the element itself (value form)
/// or a filter on element documents (object form).
fn parse_element_condition(sub: &Document) -> Result<Pred> {
    let value_form = is_operator_document(sub, true)
        && sub
            .keys()
            .next()
            .is_some_and(|first| !is_top_level_operator(first));
    if value_form {
        let element = Arc::new(FieldPath::element());
        let mut nodes = Vec::new();
        parse_operators(&element, sub, &mut nodes)?;
        return Ok(Pred::ElemMatchValue(nodes));
    }
    Ok(Pred::ElemMatchObject(Box::new(parse_document(
        sub,
        Level::Sub,
    )?)))
}

fn parse_all(path: &Arc<FieldPath>, arg: &Bson) -> Result<Node> {
    let Bson::Array(items) = arg else {
        crate::bail!(BadValue, "$all needs an array");
    };
    let first_is_elem_match = |item: &Bson| matches!(item, Bson::Document(d) if d.keys().next().map(String::as_str) == Some("$elemMatch"));
    let mut children = Vec::with_capacity(items.len());
    if items.first().is_some_and(first_is_elem_match) {
        for item in items {
            let Bson::Document(d) = item else {
                crate::bail!(BadValue, "$all/$elemMatch has to be consistent");
            };
            match d.iter().next() {
                Some((key, inner)) if key == "$elemMatch" => {
                    children.push(path_node(path, parse_elem_match(inner)?))
                }
                _ => crate::bail!(BadValue, "$all/$elemMatch has to be consistent"),
            }
        }
        return Ok(Node::And(children));
    }
    for item in items {
        match item {
            Bson::RegularExpression(r) => children.push(path_node(
                path,
                Pred::Regex(Box::new(QueryRegex::new(
                    r.pattern.as_str(),
                    r.options.as_str(),
                )?)),
            )),
            Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {
                if is_operator_document(d, false) {
                    crate::bail!(BadValue, "no $ expressions in $all");
                }
                children.push(path_node(path, equality(item)?));
            }
            _ => children.push(path_node(path, equality(item)?)),
        }
    }
    if children.is_empty() {
        return Ok(Node::Always(false));
    }
    Ok(Node::And(children))
}

fn parse_not(path: &Arc<FieldPath>, arg: &Bson) -> Result<Node> {
    match arg {
        Bson::RegularExpression(r) => Ok(Node::Not(Box::new(path_node(
            path,
            Pred::Regex(Box::new(QueryRegex::new(
                r.pattern.as_str(),
                r.options.as_str(),
            )?)),
        )))),
        Bson::Document(sub) => {
            if sub.is_empty() {
                crate::bail!(BadValue, "$not cannot be empty");
            }
            let mut nodes = Vec::new();
            parse_operators(path, sub, &mut nodes)?;
            Ok(Node::Not(Box::new(Node::And(nodes))))
        }
        _ => crate::bail!(BadValue, "$not needs a regex or a document"),
    }
}

fn parse_bits(path: &Arc<FieldPath>, op: &str, test: BitTest, arg: &Bson) -> Result<Node> {
    let mut positions: Vec<u32> = Vec::new();
    match arg {
        Bson::Array(items) => {
            for item in items {
                if Number::of(item).is_none() {
                    crate::bail!(BadValue, "bit positions must be an integer but got: {item}");
                }
                let position = parse_integer(item).map_err(|_| {
                    crate::err!(BadValue, "bit positions must be an integer but got: {item}")
                })?;
                if position < 0 {
                    crate::bail!(BadValue, "bit positions must be >= 0 but got: {item}");
                }
                let position = i32::try_from(position)
                    .ok()
                    .and_then(|p| u32::try_from(p).ok())
                    .ok_or_else(|| {
                        crate::err!(
                        BadValue,
                        "bit positions cannot be represented as a 32-bit signed integer: {item}"
                    )
                    })?;
                positions.push(position);
            }
        }
        Bson::Binary(bin) => {
            return Ok(path_node(
                path,
                Pred::Bits {
                    test,
                    mask: BitMask::Bytes(bin.bytes.clone()),
                },
            ));
        }
        other if Number::of(other).is_some() => {
            let mask = parse_integer(other).map_err(Error::failed_to_parse)?;
            if mask < 0 {
                crate::bail!(FailedToParse, "Expected a positive number in: {other}");
            }
            for bit in 0..63u32 {
                if mask & (1 << bit) != 0 {
                    positions.push(bit);
                }
            }
        }
        other => crate::bail!(
            BadValue,
            "{op} takes an Array, a number, or a BinData but received: {other}"
        ),
    }
    positions.sort_unstable();
    positions.dedup();
    Ok(path_node(
        path,
        Pred::Bits {
            test,
            mask: BitMask::Positions(positions),
        },
    ))
}

// ---------------------------------------------------------------------------
// Matching.

#[derive(Default)]
struct MatchContext {
    /// The last array position recorded along a matching path.
    position: Option<usize>,
    error: Option<Error>,
}

impl MatchContext {
    /// Evaluates `node` against a document; `record` says whether array
    /// positions found here count for the positional `$`.
    fn eval(&mut self, node: &Node, container: Container<'_>, record: bool) -> bool {
        match node {
            Node::And(children) => children.iter().all(|c| self.eval(c, container, record)),
            Node::Or(children) => children.iter().any(|c| self.eval(c, container, false)),
            Node::Nor(children) => !children.iter().any(|c| self.eval(c, container, false)),
            Node::Not(child) => !self.eval(child, container, false),
            Node::Always(b) => *b,
            Node::Path(p) => {
                let mut found_position = None;
                let matched = walk(
                    container,
                    &p.path.parts,
                    p.pred.traverses_leaf_arrays(),
                    &mut |value, offset| match test(&p.pred, value) {
                        Some(inner) => {
                            found_position = offset.or(inner);
                            true
                        }
                        None => false,
                    },
                );
                if matched && record && found_position.is_some() {
                    self.position = found_position;
                }
                matched
            }
            Node::Schema(schema) => match container {
                Container::Doc(doc) => schema.matches_document(doc),
                // An array element under `$elemMatch`, seen as a document.
                Container::Arr(items) => schema.matches_document(&array_as_document(items)),
            },
            Node::Where(function) => {
                let Container::Doc(doc) = container else {
                    return false;
                };
                match function.call_predicate(doc) {
                    Ok(truth) => truth,
                    Err(e) => {
                        self.error.get_or_insert(e);
                        false
                    }
                }
            }
            Node::Expr(expr) => {
                let Container::Doc(doc) = container else {
                    return false;
                };
                match expr.evaluate_truthy(doc) {
                    Ok(truth) => truth,
                    Err(e) => {
                        self.error.get_or_insert(e);
                        false
                    }
                }
            }
        }
    }
}

/// `$elemMatch` value form: the conditions apply to the element itself,
/// without traversing it if it is an array.
fn eval_on_value(node: &Node, value: &Bson) -> bool {
    match node {
        Node::And(children) => children.iter().all(|c| eval_on_value(c, value)),
        Node::Or(children) => children.iter().any(|c| eval_on_value(c, value)),
        Node::Nor(children) => !children.iter().any(|c| eval_on_value(c, value)),
        Node::Not(child) => !eval_on_value(child, value),
        Node::Always(b) => *b,
        Node::Path(p) => test(&p.pred, Some(value)).is_some(),
        Node::Expr(_) | Node::Schema(_) | Node::Where(_) => false,
    }
}

/// An array as the document MongoDB sees in its place: keys "0", "1", ...
fn array_as_document(items: &[Bson]) -> Document {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| (i.to_string(), v.clone()))
        .collect()
}

/// Tests one value a path reached (`None` for missing). `Some(position)`
/// is a match, carrying the element index `$elemMatch` matched, if any.
fn test(pred: &Pred, value: Option<&Bson>) -> Option<Option<usize>> {
    let hit = match pred {
        Pred::Compare { op, value: rhs } => compare_matches(*op, value, rhs),
        Pred::In(set) => match value {
            None => set.has_null,
            Some(v) => set.contains(v),
        },
        Pred::Regex(r) => value.is_some_and(|v| r.matches(v)),
        Pred::Exists => value.is_some(),
        Pred::Type(types) => value.is_some_and(|v| types.contains(v)),
        Pred::Size(n) => matches!(value, Some(Bson::Array(items)) if items.len() == *n),
        Pred::Mod { divisor, remainder } => {
            value.is_some_and(|v| mod_matches(v, *divisor, *remainder))
        }
        Pred::ElemMatchObject(sub) => {
            let Some(Bson::Array(items)) = value else {
                return None;
            };
            let mut ctx = MatchContext::default();
            return items.iter().enumerate().find_map(|(i, item)| {
                let container = match item {
                    Bson::Document(d) => Container::Doc(d),
                    Bson::Array(a) => Container::Arr(a),
                    _ => return None,
                };
                ctx.eval(sub, container, false).then_some(Some(i))
            });
        }
        Pred::ElemMatchValue(nodes) => {
            let Some(Bson::Array(items)) = value else {
                return None;
            };
            return items.iter().enumerate().find_map(|(i, item)| {
                nodes
                    .iter()
                    .all(|n| eval_on_value(n, item))
                    .then_some(Some(i))
            });
        }
        Pred::Bits { test, mask } => value.is_some_and(|v| bits_match(v, *test, mask)),
        Pred::Geo(g) => value.is_some_and(|v| g.matches(v)),
    };
    hit.then_some(None)
}

/// `$eq`/`$lt`/... with type bracketing: only values of the same canonical
/// type compare; `null` also matches missing for the inclusive operators;
/// MinKey and MaxKey bound everything; NaN equals only NaN.
fn compare_matches(op: CmpOp, value: Option<&Bson>, rhs: &Bson) -> bool {
    let Some(value) = value else {
        return match rhs {
            Bson::Null => op.inclusive(),
            Bson::MinKey => matches!(op, CmpOp::Gt | CmpOp::Gte),
            Bson::MaxKey => matches!(op, CmpOp::Lt | CmpOp::Lte),
            _ => false,
        };
    };
    let rank = canonical_type_rank(value);
    if rank != canonical_type_rank(rhs) {
        return match rhs {
            Bson::MinKey => matches!(op, CmpOp::Gt | CmpOp::Gte),
            Bson::MaxKey => matches!(op, CmpOp::Lt | CmpOp::Lte),
            _ => false,
        };
    }
    if rank == NUMBER_RANK && (is_nan(value) || is_nan(rhs)) {
        return is_nan(value) && is_nan(rhs) && op.inclusive();
    }
    op.accepts(compare(value, rhs))
}

fn mod_matches(value: &Bson, divisor: i64, remainder: i64) -> bool {
    let Some(Ok(dividend)) = Number::of(value).map(Number::truncate_to_i64) else {
        return false;
    };
    // wrapping_rem gives 0 for i64::MIN % -1 instead of overflowing.
    dividend.wrapping_rem(divisor) == remainder
}

/// The bits `$bitsAllSet` and friends test: a BinData's bytes (bit 0 is
/// the low bit of the first byte) or an integral number in two's
/// complement, whose positions past 63 read the sign.
enum Bits<'a> {
    Binary(&'a [u8]),
    Integer(i64),
}

impl Bits<'_> {
    fn of(value: &Bson) -> Option<Bits<'_>> {
        match value {
            Bson::Binary(bin) => Some(Bits::Binary(&bin.bytes)),
            other => match Number::of(other)? {
                Number::Int32(i) => Some(Bits::Integer(i64::from(i))),
                Number::Int64(i) => Some(Bits::Integer(i)),
                n => {
                    let f = n.to_f64();
                    (f.trunc() == f && f64_fits_i64(f)).then_some(Bits::Integer(f as i64))
                }
            },
        }
    }

    fn is_set(&self, position: u64) -> bool {
        match *self {
            Bits::Binary(bytes) => usize::try_from(position / 8)
                .ok()
                .and_then(|index| bytes.get(index))
                .is_some_and(|byte| byte & (1 << (position % 8)) != 0),
            Bits::Integer(n) => {
                if position >= 64 {
                    n < 0
                } else {
                    (n >> position) & 1 == 1
                }
            }
        }
    }
}

fn bits_match(value: &Bson, test: BitTest, mask: &BitMask) -> bool {
    let Some(bits) = Bits::of(value) else {
        return false;
    };
    match test {
        BitTest::AllSet => !mask.any(|p| !bits.is_set(p)),
        BitTest::AnySet => mask.any(|p| bits.is_set(p)),
        BitTest::AllClear => !mask.any(|p| bits.is_set(p)),
        BitTest::AnyClear => mask.any(|p| !bits.is_set(p)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::query::raw_fields::arbitrary::{name, scalar, stored, Stored};
    use bson::{doc, Regex};

    #[test]
    fn the_raw_test_never_rejects_a_match() {
        let docs = [
            doc! {"f": 5, "a": {"b": 1}},
            doc! {"f": 50},
            doc! {"f": [1, 50]},
            doc! {"f": "x"},
            doc! {"a": [{"b": 1}]},
            doc! {"a": 7},
            doc! {"f": null},
            doc! {},
        ];
        let filters = [
            doc! {"f": {"$lt": 10}},
            doc! {"f": 50},
            doc! {"a.b": 1},
            doc! {"f": null},
            doc! {"f": {"$exists": false}},
            doc! {"$and": [{"f": {"$gte": 1}}, {"f": {"$lt": 100}}]},
            doc! {"$or": [{"f": 5}, {"a": 7}]},
            doc! {"f": {"$in": [5, "x"]}},
            doc! {"f": {"$ne": 5}},
        ];
        let mut rejected = 0;
        for f in &filters {
            let filter = Filter::parse(f).unwrap();
            for d in &docs {
                let bytes = d.to_vec().unwrap();
                let raw = RawDocument::from_bytes(&bytes).unwrap();
                let quick = filter.may_match_raw(raw);
                if filter.matches(d) {
                    assert!(quick, "{f} matches {d} but the raw test rejected it");
                } else if !quick {
                    rejected += 1;
                }
            }
        }
        assert!(
            rejected > 20,
            "the raw test should reject most non-matches, got {rejected}"
        );
    }

    fn filter(f: Document) -> Filter {
        Filter::parse(&f).unwrap_or_else(|e| panic!("{f}: {e}"))
    }

    fn m(f: Document, d: Document) -> bool {
        filter(f).matches(&d)
    }

    fn err(f: Document) -> Error {
        match Filter::parse(&f) {
            Ok(_) => panic!("{f} parsed"),
            Err(e) => e,
        }
    }

    fn re(p: &str, o: &str) -> Bson {
        Bson::RegularExpression(Regex {
            pattern: p.try_into().unwrap(),
            options: o.try_into().unwrap(),
        })
    }

    fn position(f: Document, d: Document) -> Option<usize> {
        let details = filter(f).matches_with_details(&d);
        assert!(details.matched);
        details.array_position
    }

    #[test]
    fn filters_are_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Filter>();
    }

    #[test]
    fn empty_filter_matches_everything() {
        assert!(m(doc! {}, doc! {"a": 1}));
        assert!(filter(doc! {"$comment": "x"}).is_match_all());
        assert!(!filter(doc! {"a": 1}).is_match_all());
    }

    #[test]
    fn implicit_equality_and_dotted_paths() {
        assert!(m(doc! {"a": 1}, doc! {"a": 1}));
        assert!(m(doc! {"a": 1}, doc! {"a": 1.0}));
        assert!(m(doc! {"a": 1}, doc! {"a": 1i64}));
        assert!(!m(doc! {"a": 1}, doc! {"a": "1"}));
        assert!(m(doc! {"a.b": 1}, doc! {"a": {"b": 1}}));
        assert!(!m(doc! {"a.b": 1}, doc! {"a": {"c": 1}}));
        assert!(m(doc! {"a.b.c": "x"}, doc! {"a": {"b": {"c": "x"}}}));
    }

    #[test]
    fn arrays_match_any_element_or_whole() {
        assert!(m(doc! {"a": 2}, doc! {"a": [1, 2, 3]}));
        assert!(m(doc! {"a": [1, 2]}, doc! {"a": [1, 2]}));
        assert!(!m(doc! {"a": [2, 1]}, doc! {"a": [1, 2]}));
        assert!(m(doc! {"a": [1, 2]}, doc! {"a": [[1, 2], 3]}));
        // Only one level of nesting is expanded at the leaf.
        assert!(!m(doc! {"a": 1}, doc! {"a": [[1]]}));
        assert!(m(doc! {"a.b": 1}, doc! {"a": [{"b": 0}, {"b": 1}]}));
        assert!(m(doc! {"a.b": 1}, doc! {"a": [{"b": [0, 1]}]}));
        // Arrays nested directly in arrays are not traversed by field names.
        assert!(!m(doc! {"a.b": 1}, doc! {"a": [[{"b": 1}]]}));
    }

    #[test]
    fn numeric_components_index_arrays_and_name_fields() {
        assert!(m(doc! {"a.0": 5}, doc! {"a": [5, 6]}));
        assert!(!m(doc! {"a.1": 5}, doc! {"a": [5, 6]}));
        assert!(m(doc! {"a.0.b": 1}, doc! {"a": [{"b": 1}]}));
        assert!(m(doc! {"a.0.b": 1}, doc! {"a": [{"0": {"b": 1}}]}));
        assert!(m(doc! {"a.0": 1}, doc! {"a": {"0": 1}}));
        assert!(m(doc! {"a.0.0": 7}, doc! {"a": [[7]]}));
        assert!(m(doc! {"a.1.b": 2}, doc! {"a": [[{"b": 1}], [{"b": 2}]]}));
        assert!(!m(doc! {"a.01": 6}, doc! {"a": [5, 6]}));
        // The element an index selects at the end of the path is not
        // expanded further.
        assert!(!m(doc! {"a.0": 1}, doc! {"a": [[1, 2]]}));
        assert!(m(doc! {"a.0": [1, 2]}, doc! {"a": [[1, 2]]}));
    }

    #[test]
    fn null_matches_missing_and_null() {
        assert!(m(doc! {"a": null}, doc! {}));
        assert!(m(doc! {"a": null}, doc! {"a": null}));
        assert!(m(doc! {"a": null}, doc! {"a": Bson::Undefined}));
        assert!(!m(doc! {"a": null}, doc! {"a": 0}));
        assert!(!m(doc! {"a": null}, doc! {"a": []}));
        assert!(m(doc! {"a": null}, doc! {"a": [1, null]}));
        assert!(m(doc! {"a.b": null}, doc! {"a": 4}));
        assert!(m(doc! {"a.b": null}, doc! {"a": [{"b": 1}, {}]}));
        assert!(!m(doc! {"a.b": null}, doc! {"a": [{"b": 1}, {"b": 3}]}));
        assert!(!m(doc! {"a.b": null}, doc! {"a": [1, 2]}));
        assert!(m(doc! {"a": {"$gte": null}}, doc! {}));
        assert!(!m(doc! {"a": {"$gt": null}}, doc! {}));
        assert!(!m(doc! {"a": {"$ne": null}}, doc! {}));
        assert!(m(doc! {"a": {"$ne": null}}, doc! {"a": 1}));
        assert!(m(doc! {"a": {"$in": [null, 5]}}, doc! {}));
        assert!(!m(doc! {"a": {"$nin": [null]}}, doc! {"b": 1}));
    }

    /// The documents of MongoDB's `jstests/core/null_query_semantics.js`.
    fn null_semantics_docs() -> Vec<Document> {
        vec![
            doc! {"_id": "a_empty_subobject", "a": {}},
            doc! {"_id": "a_null", "a": null},
            doc! {"_id": "a_number", "a": 4},
            doc! {"_id": "a_subobject_b_not_null", "a": {"b": "hi"}},
            doc! {"_id": "a_subobject_b_null", "a": {"b": null}},
            doc! {"_id": "a_subobject_b_undefined", "a": {"b": Bson::Undefined}},
            doc! {"_id": "a_undefined", "a": Bson::Undefined},
            doc! {"_id": "no_a"},
            doc! {"_id": "a_double_array", "a": [[]]},
            doc! {"_id": "a_empty_array", "a": []},
            doc! {"_id": "a_object_array_all_b_nulls", "a": [{"b": null}, {"b": Bson::Undefined}, {"b": null}, {}]},
            doc! {"_id": "a_object_array_no_b_nulls", "a": [{"b": 1}, {"b": 3}, {"b": "string"}]},
            doc! {"_id": "a_object_array_some_b_nulls", "a": [{"b": null}, {"b": 3}, {"b": null}]},
            doc! {"_id": "a_object_array_some_b_undefined", "a": [{"b": Bson::Undefined}, {"b": 3}]},
            doc! {"_id": "a_object_array_some_b_missing", "a": [{"b": 3}, {}]},
            doc! {"_id": "a_value_array_all_nulls", "a": [null, null]},
            doc! {"_id": "a_value_array_no_nulls", "a": [1, "string", 4]},
            doc! {"_id": "a_value_array_with_null", "a": [1, "string", null, 4]},
            doc! {"_id": "a_value_array_with_undefined", "a": [1, "string", Bson::Undefined, 4]},
        ]
    }

    fn matching_ids(f: Document) -> Vec<String> {
        let f = filter(f);
        let mut ids: Vec<String> = null_semantics_docs()
            .iter()
            .filter(|d| f.matches(d))
            .map(|d| d.get_str("_id").unwrap().to_string())
            .collect();
        ids.sort();
        ids
    }

    fn sorted_ids(ids: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn null_query_semantics_match_mongodb_jstests() {
        assert_eq!(
            matching_ids(doc! {"a": {"$eq": null}}),
            sorted_ids(&[
                "a_null",
                "a_undefined",
                "a_value_array_all_nulls",
                "a_value_array_with_null",
                "a_value_array_with_undefined",
                "no_a"
            ])
        );
        assert_eq!(
            matching_ids(doc! {"a.b": {"$eq": null}}),
            sorted_ids(&[
                "a_empty_subobject",
                "a_null",
                "a_number",
                "a_subobject_b_null",
                "a_subobject_b_undefined",
                "a_undefined",
                "no_a",
                "a_object_array_all_b_nulls",
                "a_object_array_some_b_nulls",
                "a_object_array_some_b_undefined",
                "a_object_array_some_b_missing"
            ])
        );
        assert_eq!(
            matching_ids(doc! {"a.b": {"$nin": [null, re("^str.*", "")]}}),
            sorted_ids(&[
                "a_subobject_b_not_null",
                "a_double_array",
                "a_empty_array",
                "a_value_array_all_nulls",
                "a_value_array_no_nulls",
                "a_value_array_with_null",
                "a_value_array_with_undefined"
            ])
        );
        assert_eq!(
            matching_ids(doc! {"a": {"$elemMatch": {"$ne": null}}}),
            sorted_ids(&[
                "a_double_array",
                "a_object_array_all_b_nulls",
                "a_object_array_no_b_nulls",
                "a_object_array_some_b_nulls",
                "a_object_array_some_b_undefined",
                "a_object_array_some_b_missing",
                "a_value_array_no_nulls",
                "a_value_array_with_undefined",
                "a_value_array_with_null"
            ])
        );
        assert_eq!(
            matching_ids(doc! {"a": {"$elemMatch": {"b": {"$eq": null}}}}),
            sorted_ids(&[
                "a_double_array",
                "a_object_array_all_b_nulls",
                "a_object_array_some_b_nulls",
                "a_object_array_some_b_undefined",
                "a_object_array_some_b_missing"
            ])
        );
        assert_eq!(
            matching_ids(doc! {"a.b": {"$exists": false}}),
            sorted_ids(&[
                "no_a",
                "a_empty_subobject",
                "a_null",
                "a_number",
                "a_undefined",
                "a_double_array",
                "a_empty_array",
                "a_value_array_all_nulls",
                "a_value_array_no_nulls",
                "a_value_array_with_null",
                "a_value_array_with_undefined",
            ])
        );
    }

    #[test]
    fn exists() {
        assert!(m(doc! {"a": {"$exists": true}}, doc! {"a": null}));
        assert!(!m(doc! {"a": {"$exists": true}}, doc! {"b": 1}));
        assert!(m(doc! {"a": {"$exists": false}}, doc! {"b": 1}));
        assert!(m(doc! {"a": {"$exists": 0}}, doc! {"b": 1}));
        assert!(m(
            doc! {"a.b": {"$exists": true}},
            doc! {"a": [1, {"b": 2}]}
        ));
        assert!(m(doc! {"a.b": {"$exists": false}}, doc! {"a": [1, 2]}));
        assert!(m(doc! {"a": {"$exists": true}}, doc! {"a": []}));
    }

    #[test]
    fn comparisons_are_type_bracketed() {
        assert!(m(doc! {"a": {"$gt": 5}}, doc! {"a": 6.5}));
        assert!(!m(doc! {"a": {"$gt": 5}}, doc! {"a": "6"}));
        assert!(!m(doc! {"a": {"$lt": "z"}}, doc! {"a": 1}));
        assert!(m(doc! {"a": {"$lt": "b"}}, doc! {"a": "a"}));
        assert!(m(doc! {"a": {"$gt": 1, "$lt": 5}}, doc! {"a": [0, 10]}));
        assert!(!m(
            doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 5}}},
            doc! {"a": [0, 10]}
        ));
        assert!(m(doc! {"a": {"$gte": [1, 2]}}, doc! {"a": [1, 2]}));
        assert!(m(doc! {"a": {"$gt": {"x": 1}}}, doc! {"a": {"x": 2}}));
        assert!(!m(doc! {"a": {"$gt": {"x": 1}}}, doc! {"a": 5}));
        assert!(m(doc! {"a": {"$gt": Bson::MinKey}}, doc! {"a": "x"}));
        assert!(m(doc! {"a": {"$gt": Bson::MinKey}}, doc! {}));
        assert!(m(doc! {"a": {"$lt": Bson::MaxKey}}, doc! {"a": {"b": 1}}));
        assert!(!m(doc! {"a": {"$gt": Bson::MaxKey}}, doc! {"a": 1}));
        assert!(m(
            doc! {"a": {"$lte": Bson::MaxKey}},
            doc! {"a": Bson::MaxKey}
        ));
        assert!(m(
            doc! {"a": {"$gt": 9_007_199_254_740_992i64}},
            doc! {"a": 9_007_199_254_740_993i64}
        ));
        assert!(!m(
            doc! {"a": {"$gt": 9_007_199_254_740_993i64}},
            doc! {"a": 9_007_199_254_740_992.0}
        ));
    }

    #[test]
    fn nan_semantics() {
        assert!(m(doc! {"a": f64::NAN}, doc! {"a": f64::NAN}));
        assert!(!m(doc! {"a": {"$lt": 5}}, doc! {"a": f64::NAN}));
        assert!(!m(doc! {"a": {"$gt": f64::NAN}}, doc! {"a": 5}));
        assert!(m(doc! {"a": {"$gte": f64::NAN}}, doc! {"a": f64::NAN}));
        assert!(m(doc! {"a": {"$in": [f64::NAN]}}, doc! {"a": f64::NAN}));
    }

    #[test]
    fn document_equality_is_exact_and_ordered() {
        assert!(m(
            doc! {"a": {"b": 1, "c": 2}},
            doc! {"a": {"b": 1, "c": 2}}
        ));
        assert!(!m(
            doc! {"a": {"b": 1, "c": 2}},
            doc! {"a": {"c": 2, "b": 1}}
        ));
        assert!(!m(doc! {"a": {"b": 1}}, doc! {"a": {"b": 1, "c": 2}}));
        assert!(m(doc! {"a": {"b": 1}}, doc! {"a": [{"b": 1}, 2]}));
        // DBRef-shaped documents are values, not operators.
        assert!(m(
            doc! {"r": {"$ref": "c", "$id": 1}},
            doc! {"r": {"$ref": "c", "$id": 1}}
        ));
    }

    #[test]
    fn in_and_nin() {
        assert!(m(doc! {"a": {"$in": [1, "x"]}}, doc! {"a": "x"}));
        assert!(m(doc! {"a": {"$in": [1, 2]}}, doc! {"a": [5, 2]}));
        assert!(!m(doc! {"a": {"$in": []}}, doc! {"a": 1}));
        assert!(m(doc! {"a": {"$in": [re("^x", "")]}}, doc! {"a": "xyz"}));
        assert!(m(doc! {"a": {"$in": [[1, 2]]}}, doc! {"a": [1, 2]}));
        assert!(m(doc! {"a": {"$nin": [1, 2]}}, doc! {"a": 3}));
        assert!(!m(doc! {"a": {"$nin": [1, 2]}}, doc! {"a": [3, 2]}));
        assert!(m(doc! {"a": {"$nin": [1]}}, doc! {}));
        let e = err(doc! {"a": {"$in": 5}});
        assert_eq!(
            (e.code, e.message.as_str()),
            (ErrorCode::BadValue, "$in needs an array")
        );
        assert_eq!(
            err(doc! {"a": {"$in": [{"$gt": 1}]}}).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn logical_operators() {
        let d = doc! {"a": 1, "b": 2};
        assert!(m(doc! {"$and": [{"a": 1}, {"b": 2}]}, d.clone()));
        assert!(!m(doc! {"$and": [{"a": 1}, {"b": 3}]}, d.clone()));
        assert!(m(doc! {"$or": [{"a": 5}, {"b": 2}]}, d.clone()));
        assert!(!m(doc! {"$nor": [{"a": 5}, {"b": 2}]}, d.clone()));
        assert!(m(doc! {"$nor": [{"a": 5}]}, d.clone()));
        assert!(m(doc! {"a": {"$not": {"$gt": 5}}}, d.clone()));
        assert!(m(doc! {"c": {"$not": {"$gt": 5}}}, d.clone()));
        assert!(!m(doc! {"a": {"$not": {"$lt": 5}}}, d.clone()));
        assert!(m(doc! {"s": {"$not": re("^a", "")}}, doc! {"s": "bc"}));
        assert!(m(doc! {"s": {"$not": {"$regex": "^a"}}}, doc! {"s": "bc"}));
        for bad in [
            doc! {"$and": []},
            doc! {"$or": 1},
            doc! {"$nor": [1]},
            doc! {"a": {"$not": 5}},
            doc! {"a": {"$not": {}}},
            doc! {"a": {"$not": {"b": 1}}},
        ] {
            assert_eq!(err(bad).code, ErrorCode::BadValue);
        }
    }

    #[test]
    fn unknown_operators() {
        let e = err(doc! {"a": {"$foo": 1}});
        assert_eq!(e.code, ErrorCode::BadValue);
        assert_eq!(e.message, "unknown operator: $foo");
        let e = err(doc! {"$foo": 1});
        assert_eq!(e.code, ErrorCode::BadValue);
        assert!(e.message.starts_with("unknown top level operator: $foo"));
        // A non-operator after an operator is an unknown operator too.
        assert_eq!(
            err(doc! {"a": {"$gt": 1, "b": 2}}).message,
            "unknown operator: b"
        );
        assert_eq!(
            err(doc! {"a": {"$gt": re("x", "")}}).code,
            ErrorCode::BadValue
        );
        assert_eq!(err(doc! {"a": Bson::Undefined}).code, ErrorCode::BadValue);
        assert_eq!(
            err(doc! {"a": {"$ne": re("x", "")}}).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn type_operator() {
        assert!(m(doc! {"a": {"$type": "string"}}, doc! {"a": "x"}));
        assert!(m(doc! {"a": {"$type": 2}}, doc! {"a": "x"}));
        assert!(m(doc! {"a": {"$type": 2.0}}, doc! {"a": "x"}));
        assert!(m(doc! {"a": {"$type": "number"}}, doc! {"a": 1i64}));
        assert!(m(doc! {"a": {"$type": ["bool", "int"]}}, doc! {"a": 3}));
        assert!(m(doc! {"a": {"$type": "array"}}, doc! {"a": [1]}));
        assert!(m(doc! {"a": {"$type": "array"}}, doc! {"a": [[1]]}));
        assert!(!m(doc! {"a": {"$type": "array"}}, doc! {"a": 1}));
        assert!(m(doc! {"a": {"$type": "int"}}, doc! {"a": [1.5, 2]}));
        assert!(m(doc! {"a": {"$type": "null"}}, doc! {"a": null}));
        assert!(!m(doc! {"a": {"$type": "null"}}, doc! {}));
        assert!(m(doc! {"a": {"$type": "minKey"}}, doc! {"a": Bson::MinKey}));
        assert!(m(doc! {"a": {"$type": -1}}, doc! {"a": Bson::MinKey}));
        assert_eq!(err(doc! {"a": {"$type": "foo"}}).code, ErrorCode::BadValue);
        assert_eq!(err(doc! {"a": {"$type": 100}}).code, ErrorCode::BadValue);
        assert_eq!(err(doc! {"a": {"$type": 2.5}}).code, ErrorCode::BadValue);
        assert_eq!(
            err(doc! {"a": {"$type": []}}).code,
            ErrorCode::FailedToParse
        );
        assert_eq!(err(doc! {"a": {"$type": {}}}).code, ErrorCode::TypeMismatch);
    }

    #[test]
    fn regex_matching_and_options() {
        assert!(m(doc! {"a": re("^ab", "")}, doc! {"a": "abc"}));
        assert!(!m(doc! {"a": re("^AB", "")}, doc! {"a": "abc"}));
        assert!(m(doc! {"a": re("^AB", "i")}, doc! {"a": "abc"}));
        assert!(m(
            doc! {"a": {"$regex": "^AB", "$options": "i"}},
            doc! {"a": "abc"}
        ));
        assert!(m(
            doc! {"a": {"$options": "i", "$regex": "^AB"}},
            doc! {"a": "abc"}
        ));
        assert!(m(doc! {"a": {"$regex": re("^AB", "i")}}, doc! {"a": "abc"}));
        assert!(m(
            doc! {"a": {"$regex": "^b", "$options": "m"}},
            doc! {"a": "a\nb"}
        ));
        assert!(!m(doc! {"a": {"$regex": "^b"}}, doc! {"a": "a\nb"}));
        assert!(m(
            doc! {"a": {"$regex": "a.b", "$options": "s"}},
            doc! {"a": "a\nb"}
        ));
        assert!(!m(doc! {"a": {"$regex": "a.b"}}, doc! {"a": "a\nb"}));
        assert!(m(
            doc! {"a": {"$regex": "a b # comment\n c", "$options": "x"}},
            doc! {"a": "abc"}
        ));
        assert!(m(
            doc! {"a": {"$regex": "[ ]", "$options": "x"}},
            doc! {"a": "x y"}
        ));
        assert!(m(doc! {"a": re("b", "")}, doc! {"a": ["x", "abc"]}));
        assert!(m(
            doc! {"a": re("b", "")},
            doc! {"a": Bson::Symbol("abc".into())}
        ));
        assert!(!m(doc! {"a": re("1", "")}, doc! {"a": 1}));
        assert!(m(doc! {"a": re("x", "i")}, doc! {"a": re("x", "i")}));
        assert!(!m(doc! {"a": re("x", "i")}, doc! {"a": re("x", "")}));
        // PCRE: `$` also matches before a final newline; \d is ASCII only.
        assert!(m(doc! {"a": re("c$", "")}, doc! {"a": "abc\n"}));
        assert!(!m(doc! {"a": re("^\\d$", "")}, doc! {"a": "٣"}));
        assert!(m(doc! {"a": re("a{2}", "")}, doc! {"a": "baab"}));
        assert!(m(doc! {"a": re("a{x", "")}, doc! {"a": "a{x"}));
        assert!(m(doc! {"a": re("[a[]", "")}, doc! {"a": "["}));
        assert!(m(doc! {"a": re("[]a]", "")}, doc! {"a": "]"}));
        assert!(m(doc! {"a": re("\\Qa.b\\E", "")}, doc! {"a": "a.b"}));
        assert!(!m(doc! {"a": re("\\Qa.b\\E", "")}, doc! {"a": "axb"}));
        assert!(m(doc! {"a": re("(?i)AB", "")}, doc! {"a": "ab"}));
        assert!(m(doc! {"a": re("[[:digit:]]+", "")}, doc! {"a": "a1"}));
        assert!(m(doc! {"a": re("(?'n'x)y", "")}, doc! {"a": "xy"}));
        assert!(m(doc! {"a": re("\\/", "")}, doc! {"a": "a/b"}));
        assert!(m(doc! {"a": re("a\\Z", "")}, doc! {"a": "a\n"}));
    }

    #[test]
    fn regex_errors() {
        for bad in [
            doc! {"a": {"$regex": "("}},
            doc! {"a": {"$regex": "a(?=b)"}},
            doc! {"a": {"$regex": "(?<!a)b"}},
            doc! {"a": {"$regex": "(a)\\1"}},
            doc! {"a": {"$regex": "a++"}},
            doc! {"a": {"$regex": "(?>a)"}},
            doc! {"a": {"$regex": "a", "$options": "z"}},
            doc! {"a": {"$regex": 5}},
            doc! {"a": {"$options": "i"}},
            doc! {"a": {"$regex": re("a", "i"), "$options": "m"}},
        ] {
            let e = err(bad.clone());
            assert!(
                matches!(
                    e.code,
                    ErrorCode::BadValue
                        | ErrorCode::RegexInvalid
                        | ErrorCode::RegexBadOption
                        | ErrorCode::RegexOptionsTwiceInRegex
                        | ErrorCode::RegexOptionsTwice
                ),
                "{bad}: {e}"
            );
        }
        let e = err(doc! {"a": {"$regex": "a(?=b)"}});
        assert_eq!(e.code, ErrorCode::RegexInvalid);
        assert!(e.message.contains("lookahead"));
        let e = err(doc! {"a": {"$regex": "a", "$options": "z"}});
        assert_eq!(e.code, ErrorCode::RegexBadOption);
    }

    #[test]
    fn mod_operator() {
        assert!(m(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5}));
        assert!(m(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5.9}));
        assert!(m(doc! {"a": {"$mod": [4, -1]}}, doc! {"a": -5}));
        assert!(!m(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": "5"}));
        assert!(!m(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": f64::NAN}));
        assert!(m(doc! {"a": {"$mod": [4.5, 1.9]}}, doc! {"a": 5}));
        assert!(m(doc! {"a": {"$mod": [-1, 0]}}, doc! {"a": i64::MIN}));
        assert!(m(doc! {"a": {"$mod": [i64::MAX, 0]}}, doc! {"a": 0}));
        assert!(!m(doc! {"a": {"$mod": [2, 0]}}, doc! {"a": 1e300}));
        for bad in [
            doc! {"a": {"$mod": 4}},
            doc! {"a": {"$mod": [4]}},
            doc! {"a": {"$mod": [4, 1, 2]}},
            doc! {"a": {"$mod": ["4", 1]}},
            doc! {"a": {"$mod": [4, "1"]}},
            doc! {"a": {"$mod": [0, 1]}},
            doc! {"a": {"$mod": [f64::NAN, 1]}},
            doc! {"a": {"$mod": [f64::INFINITY, 1]}},
            doc! {"a": {"$mod": [1e300, 1]}},
        ] {
            assert_eq!(err(bad.clone()).code, ErrorCode::BadValue, "{bad}");
        }
    }

    #[test]
    fn size_operator() {
        assert!(m(doc! {"a": {"$size": 2}}, doc! {"a": [1, [2, 3]]}));
        assert!(m(doc! {"a": {"$size": 0}}, doc! {"a": []}));
        assert!(!m(doc! {"a": {"$size": 0}}, doc! {}));
        assert!(!m(doc! {"a": {"$size": 1}}, doc! {"a": 1}));
        assert!(m(doc! {"a.b": {"$size": 1}}, doc! {"a": [{"b": [1]}]}));
        assert!(m(doc! {"a": {"$size": 2.0}}, doc! {"a": [1, 2]}));
        // $size does not look at arrays inside the array.
        assert!(!m(doc! {"a": {"$size": 2}}, doc! {"a": [[1, 2]]}));
        for bad in [
            doc! {"a": {"$size": -1}},
            doc! {"a": {"$size": 1.5}},
            doc! {"a": {"$size": "1"}},
            doc! {"a": {"$size": i64::MAX}},
            doc! {"a": {"$size": f64::NAN}},
        ] {
            assert_eq!(err(bad.clone()).code, ErrorCode::BadValue, "{bad}");
        }
    }

    #[test]
    fn all_operator() {
        assert!(m(doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3, 1]}));
        assert!(!m(doc! {"a": {"$all": [1, 4]}}, doc! {"a": [2, 3, 1]}));
        assert!(m(doc! {"a": {"$all": [1]}}, doc! {"a": 1}));
        assert!(!m(doc! {"a": {"$all": []}}, doc! {"a": [1]}));
        assert!(m(doc! {"a": {"$all": [[1, 2]]}}, doc! {"a": [[1, 2], 3]}));
        assert!(m(
            doc! {"a": {"$all": [re("^x", ""), "yz"]}},
            doc! {"a": ["xa", "yz"]}
        ));
        assert!(m(
            doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"c": 2}}]}},
            doc! {"a": [{"b": 1}, {"c": 2}]}
        ));
        assert!(!m(
            doc! {"a": {"$all": [{"$elemMatch": {"b": 1, "c": 2}}]}},
            doc! {"a": [{"b": 1}, {"c": 2}]}
        ));
        assert_eq!(
            err(doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, 5]}}).code,
            ErrorCode::BadValue
        );
        assert_eq!(err(doc! {"a": {"$all": 1}}).code, ErrorCode::BadValue);
        assert_eq!(
            err(doc! {"a": {"$all": [{"$gt": 1}]}}).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn elem_match_forms() {
        let d = doc! {"a": [{"b": 1, "c": 2}, {"b": 3, "c": 4}]};
        assert!(m(doc! {"a": {"$elemMatch": {"b": 1, "c": 2}}}, d.clone()));
        assert!(!m(doc! {"a": {"$elemMatch": {"b": 1, "c": 4}}}, d.clone()));
        // Without $elemMatch the conditions may be met by different elements.
        assert!(m(doc! {"a.b": 1, "a.c": 4}, d.clone()));
        assert!(m(
            doc! {"a": {"$elemMatch": {"$or": [{"b": 3}, {"c": 9}]}}},
            d.clone()
        ));
        assert!(m(
            doc! {"a": {"$elemMatch": {"$gte": 2, "$lt": 3}}},
            doc! {"a": [1, 2.5]}
        ));
        assert!(!m(doc! {"a": {"$elemMatch": {"$gte": 2}}}, doc! {"a": 5}));
        assert!(!m(
            doc! {"a": {"$elemMatch": {"$gt": 1}}},
            doc! {"a": [[5]]}
        ));
        assert!(m(doc! {"a": {"$elemMatch": {"0": 5}}}, doc! {"a": [[5]]}));
        assert!(m(
            doc! {"a": {"$elemMatch": {"$not": {"$gt": 5}}}},
            doc! {"a": [9, 3]}
        ));
        assert!(m(
            doc! {"a.b": {"$elemMatch": {"c": 1}}},
            doc! {"a": [{"b": [{"c": 1}]}]}
        ));
        assert!(m(
            doc! {"a": {"$elemMatch": {"$elemMatch": {"$eq": 2}}}},
            doc! {"a": [[1], [2]]}
        ));
        assert_eq!(err(doc! {"a": {"$elemMatch": 1}}).code, ErrorCode::BadValue);
        assert_eq!(
            err(doc! {"a": {"$elemMatch": {"$expr": {"$eq": [1, 1]}}}}).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn element_matcher_for_pull_and_projection() {
        let gte = ElementMatcher::parse(&doc! {"$gte": 6}).unwrap();
        assert!(gte.matches(&Bson::Int32(7)));
        assert!(!gte.matches(&Bson::Int32(5)));
        assert!(!gte.matches(&Bson::Array(vec![7.into()])));
        let obj = ElementMatcher::parse(&doc! {"score": 8, "item": "B"}).unwrap();
        assert!(obj.matches(&Bson::Document(doc! {"item": "B", "score": 8.0, "x": 1})));
        assert!(!obj.matches(&Bson::Document(doc! {"item": "B"})));
        assert!(!obj.matches(&Bson::Int32(8)));
        let or = ElementMatcher::parse(&doc! {"$or": [{"a": 1}, {"b": 2}]}).unwrap();
        assert!(or.matches(&Bson::Document(doc! {"b": 2})));
        assert!(ElementMatcher::parse(&doc! {"$bad": 1}).is_err());
    }

    #[test]
    fn positional_index_detection() {
        assert_eq!(position(doc! {"a": 2}, doc! {"a": [1, 2, 3]}), Some(1));
        assert_eq!(
            position(doc! {"a.b": 5}, doc! {"a": [{"b": 1}, {"b": 5}]}),
            Some(1)
        );
        // The outermost array position wins.
        assert_eq!(
            position(doc! {"a.b": 2}, doc! {"a": [{"b": [0]}, {"b": [1, 2]}]}),
            Some(1)
        );
        assert_eq!(
            position(
                doc! {"a": {"$elemMatch": {"x": 2}}},
                doc! {"a": [{"x": 1}, {"x": 2}]}
            ),
            Some(1)
        );
        assert_eq!(position(doc! {"a": [1, 2]}, doc! {"a": [1, 2]}), None);
        assert_eq!(position(doc! {"b": 1}, doc! {"b": 1, "a": [1]}), None);
        assert_eq!(position(doc! {"a.1": 2}, doc! {"a": [1, 2]}), None);
        // $or does not record positions.
        assert_eq!(position(doc! {"$or": [{"a": 2}]}, doc! {"a": [1, 2]}), None);
        assert_eq!(
            position(
                doc! {"$and": [{"a": 2}, {"x": 1}]},
                doc! {"a": [1, 2], "x": 1}
            ),
            Some(1)
        );
        let details = filter(doc! {"a": 9}).matches_with_details(&doc! {"a": [1]});
        assert_eq!(details, MatchDetails::default());
    }

    #[test]
    fn expr_in_filter() {
        assert!(m(
            doc! {"$expr": {"$gt": ["$a", "$b"]}},
            doc! {"a": 3, "b": 2}
        ));
        assert!(!m(
            doc! {"$expr": {"$gt": ["$a", "$b"]}},
            doc! {"a": 1, "b": 2}
        ));
        assert!(m(
            doc! {"$expr": {"$eq": ["$a", "x"]}, "b": 1},
            doc! {"a": "x", "b": 1}
        ));
        let f = filter(doc! {"$expr": {"$add": ["$a", 1]}});
        assert!(f.try_matches(&doc! {"a": "x"}).is_err());
        assert!(!f.matches(&doc! {"a": "x"}));
        assert!(f.matches(&doc! {"a": 1}));
        assert!(!f.matches(&doc! {"a": -1}));
    }

    #[test]
    fn bits_operators() {
        assert!(m(doc! {"a": {"$bitsAllSet": [0, 2]}}, doc! {"a": 5}));
        assert!(!m(doc! {"a": {"$bitsAllSet": [0, 1]}}, doc! {"a": 5}));
        assert!(m(doc! {"a": {"$bitsAnySet": 6}}, doc! {"a": 4}));
        assert!(m(doc! {"a": {"$bitsAllClear": 10}}, doc! {"a": 5}));
        assert!(m(doc! {"a": {"$bitsAnyClear": [0, 1]}}, doc! {"a": 5}));
        assert!(m(doc! {"a": {"$bitsAllSet": [100]}}, doc! {"a": -1}));
        assert!(!m(doc! {"a": {"$bitsAllSet": [0]}}, doc! {"a": 1.5}));
        assert_eq!(
            err(doc! {"a": {"$bitsAllSet": -1}}).code,
            ErrorCode::FailedToParse
        );
        assert_eq!(
            err(doc! {"a": {"$bitsAllSet": [-1]}}).code,
            ErrorCode::BadValue
        );
        assert_eq!(
            err(doc! {"a": {"$bitsAllSet": "x"}}).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn equality_values_for_targeting() {
        let f = filter(doc! {"_id": 5, "x": {"$gt": 1}});
        assert_eq!(f.equality_values("_id"), Some(vec![Bson::Int32(5)]));
        assert_eq!(f.equality_values("x"), None);
        let f = filter(doc! {"$and": [{"_id": {"$in": [1, 2, 3]}}, {"_id": {"$in": [2, 3, 4]}}]});
        assert_eq!(
            f.equality_values("_id"),
            Some(vec![Bson::Int32(2), Bson::Int32(3)])
        );
        let f = filter(doc! {"$or": [{"_id": 1}, {"_id": 2}]});
        assert_eq!(f.equality_values("_id"), None);
        let f = filter(doc! {"_id": {"$in": [1, re("x", "")]}});
        assert_eq!(f.equality_values("_id"), None);
        let f = filter(doc! {"_id": re("x", "")});
        assert_eq!(f.equality_values("_id"), None);
        let f = filter(doc! {"a.b": {"$eq": 1}});
        assert_eq!(f.equality_values("a.b"), Some(vec![Bson::Int32(1)]));
        let f = filter(doc! {"_id": {"$eq": {"$gt": 1}}});
        assert_eq!(
            f.equality_values("_id"),
            Some(vec![Bson::Document(doc! {"$gt": 1})])
        );
    }

    #[test]
    fn upsert_seed_from_equalities() {
        let seed = filter(doc! {"b": 1, "a.x": 2, "a.y": {"$eq": 3}, "c": {"$gt": 4}})
            .upsert_seed()
            .unwrap();
        assert_eq!(seed, doc! {"a": {"x": 2, "y": 3}, "b": 1});
        let seed = filter(doc! {"$and": [{"a": 1}, {"b": {"$in": [2]}}], "c": {"$in": [1, 2]}})
            .upsert_seed()
            .unwrap();
        assert_eq!(seed, doc! {"a": 1, "b": 2});
        assert_eq!(
            filter(doc! {"$or": [{"a": 1}, {"b": 2}]})
                .upsert_seed()
                .unwrap(),
            doc! {}
        );
        assert_eq!(
            filter(doc! {"a": {"$all": [1]}}).upsert_seed().unwrap(),
            doc! {"a": 1}
        );
        let e = filter(doc! {"a": {"$all": [1, 2]}})
            .upsert_seed()
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::NotSingleValueField);
        let e = filter(doc! {"a": 1, "a.b": 2}).upsert_seed().unwrap_err();
        assert_eq!(e.code, ErrorCode::NotSingleValueField);
        assert!(filter(doc! {"a": 1, "ab": 2}).upsert_seed().is_ok());
    }

    #[test]
    fn top_level_misc() {
        assert!(m(doc! {"$alwaysTrue": 1}, doc! {}));
        assert!(!m(doc! {"$alwaysFalse": 1}, doc! {}));
        assert_eq!(err(doc! {"$alwaysTrue": 2}).code, ErrorCode::FailedToParse);
        assert!(m(doc! {"a": 1, "$comment": "hi"}, doc! {"a": 1}));
        assert!(m(doc! {"": 1}, doc! {"": 1}));
    }

    #[test]
    fn where_runs_javascript_on_the_document() {
        assert!(m(doc! {"$where": "this.a > 1"}, doc! {"a": 2}));
        assert!(!m(doc! {"$where": "this.a > 1"}, doc! {"a": 1}));
        let code = Bson::JavaScriptCode("function() { return obj.a == 1; }".into());
        assert!(m(doc! {"$where": code, "a": 1}, doc! {"a": 1}));
        assert!(m(
            doc! {"$or": [{"$where": "this.b == 'x'"}, {"a": 5}]},
            doc! {"a": 1, "b": "x"}
        ));
        assert_eq!(err(doc! {"$where": 1}).code, ErrorCode::BadValue);
        assert_eq!(
            err(doc! {"a": {"$elemMatch": {"$where": "true"}}}).code,
            ErrorCode::BadValue
        );
        assert_eq!(
            err(doc! {"$where": "function( {"}).code,
            ErrorCode::JSInterpreterFailure
        );
        let thrower = filter(doc! {"$where": "nope.x"});
        assert_eq!(
            thrower.try_matches(&doc! {}).unwrap_err().code,
            ErrorCode::JSInterpreterFailure
        );
        assert!(thrower.paths().is_none());
        assert_eq!(thrower.matches_raw(&bson::rawdoc! {"a": 1}), None);
        let e = Filter::parse_in_pipeline(&doc! {"$and": [{"$where": "true"}]}).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadValue);
        assert_eq!(e.message, "$where is not allowed in this context");
    }

    fn arb_value() -> impl proptest::strategy::Strategy<Value = Bson> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Bson::Null),
            Just(Bson::MinKey),
            Just(Bson::MaxKey),
            any::<i32>().prop_map(Bson::Int32),
            prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0i64), Just(-1)].prop_map(Bson::Int64),
            prop_oneof![Just(f64::NAN), Just(1e300), Just(-0.5), Just(2.0)].prop_map(Bson::Double),
            "[ab$.0-9]{0,3}".prop_map(Bson::String),
            any::<bool>().prop_map(Bson::Boolean),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
                proptest::collection::vec(
                    (
                        prop_oneof![
                            Just("a"),
                            Just("b"),
                            Just("0"),
                            Just("a.b"),
                            Just("a.0"),
                            Just("$eq"),
                            Just("$gt"),
                            Just("$in"),
                            Just("$nin"),
                            Just("$all"),
                            Just("$size"),
                            Just("$mod"),
                            Just("$type"),
                            Just("$exists"),
                            Just("$elemMatch"),
                            Just("$not"),
                            Just("$regex"),
                            Just("$and"),
                            Just("$or"),
                            Just("$nor"),
                            Just("$bitsAllSet")
                        ],
                        inner
                    ),
                    0..3
                )
                .prop_map(|fields| {
                    let mut d = Document::new();
                    for (k, v) in fields {
                        d.insert(k, v);
                    }
                    Bson::Document(d)
                }),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn random_filters_never_panic(f in arb_value(), d in arb_value()) {
            let (Bson::Document(f), Bson::Document(d)) = (f, d) else {
                return Ok(());
            };
            if let Ok(parsed) = Filter::parse(&f) {
                let details = parsed.matches_with_details(&d);
                proptest::prop_assert!(details.matched || details.array_position.is_none());
                let _ = parsed.upsert_seed();
                let _ = parsed.equality_values("a");
            }
        }

        #[test]
        fn equality_agrees_with_in(v in arb_value(), d in arb_value()) {
            let Bson::Document(d) = d else {
                return Ok(());
            };
            let (Ok(eq), Ok(in_)) = (
                Filter::parse(&doc! {"a": {"$eq": v.clone()}}),
                Filter::parse(&doc! {"a": {"$in": [v.clone()]}}),
            ) else {
                return Ok(());
            };
            if matches!(v, Bson::RegularExpression(_)) {
                return Ok(());
            }
            proptest::prop_assert_eq!(eq.matches(&d), in_.matches(&d));
            let ne = filter(doc! {"a": {"$ne": v}});
            proptest::prop_assert_eq!(eq.matches(&d), !ne.matches(&d));
        }
    }

    #[test]
    fn raw_documents_are_decided_without_decoding_when_no_array_is_met() {
        let cases: Vec<(Document, Document, Option<bool>)> = vec![
            (
                doc! {"f": {"$gte": "b", "$lt": "c"}},
                doc! {"f": "bx"},
                Some(true),
            ),
            (
                doc! {"f": {"$gte": "b", "$lt": "c"}},
                doc! {"f": "cx"},
                Some(false),
            ),
            (doc! {"f": {"$gte": "b"}}, doc! {"f": 5}, Some(false)),
            (
                doc! {"f": {"$lt": Bson::MaxKey}},
                doc! {"f": "x"},
                Some(true),
            ),
            (doc! {"f": 1}, doc! {"f": 1.0}, Some(true)),
            (
                doc! {"f": 1},
                doc! {"f": Bson::Decimal128("1.00".parse().unwrap())},
                Some(true),
            ),
            (
                doc! {"f": {"$gt": 9_007_199_254_740_992i64}},
                doc! {"f": 9_007_199_254_740_992.0},
                Some(false),
            ),
            (doc! {"f": f64::NAN}, doc! {"f": f64::NAN}, Some(true)),
            (doc! {"f": {"$lt": 5}}, doc! {"f": f64::NAN}, Some(false)),
            (doc! {"f": null}, doc! {"g": 1}, Some(true)),
            (doc! {"f": null}, doc! {"f": Bson::Undefined}, Some(true)),
            (
                doc! {"f": {"$exists": false}},
                doc! {"f": null},
                Some(false),
            ),
            (doc! {"f": {"$type": "string"}}, doc! {"f": "s"}, Some(true)),
            (
                doc! {"f": {"$in": ["a", re("^b", "")]}},
                doc! {"f": "bc"},
                Some(true),
            ),
            (doc! {"f": {"$nin": ["a", 2]}}, doc! {"f": "a"}, Some(false)),
            (doc! {"f": {"$ne": "a"}}, doc! {"f": "b"}, Some(true)),
            (doc! {"f": re("^A", "i")}, doc! {"f": "abc"}, Some(true)),
            (
                doc! {"f": {"$not": {"$gt": "b"}}},
                doc! {"f": "a"},
                Some(true),
            ),
            (doc! {"a.b": 2}, doc! {"a": {"b": 2}}, Some(true)),
            (doc! {"a.b": 2}, doc! {"a": 7}, Some(false)),
            (doc! {"a": {"b": 2}}, doc! {"a": {"b": 2}}, Some(true)),
            (
                doc! {"$or": [{"f": 1}, {"g": 2}]},
                doc! {"g": 2},
                Some(true),
            ),
            (
                doc! {"$nor": [{"f": 1}, {"g": 2}]},
                doc! {"g": 3},
                Some(true),
            ),
            (
                doc! {"$and": [{"f": 1}, {"g": 2}]},
                doc! {"f": 1, "g": 3},
                Some(false),
            ),
            // Arrays are the full match's.
            (doc! {"f": 1}, doc! {"f": [1, 2]}, None),
            (doc! {"a.b": 1}, doc! {"a": [{"b": 1}]}, None),
            // A false clause decides an $and whatever an array says.
            (
                doc! {"f": 1, "a.b": 1},
                doc! {"f": 2, "a": [{"b": 1}]},
                Some(false),
            ),
            (
                doc! {"$or": [{"f": 1}, {"a.b": 1}]},
                doc! {"f": 1, "a": [{"b": 1}]},
                Some(true),
            ),
            // A $expr that might fail is the full match's, unless a clause
            // before it decides.
            (
                doc! {"$expr": {"$add": ["$f", 1]}, "g": 1},
                doc! {"f": "x", "g": 2},
                None,
            ),
            (
                doc! {"g": 1, "$expr": {"$add": ["$f", 1]}},
                doc! {"f": "x", "g": 2},
                Some(false),
            ),
        ];
        for (f, d, expected) in cases {
            let bytes = d.to_vec().unwrap();
            let raw = RawDocument::from_bytes(&bytes).unwrap();
            let parsed = filter(f.clone());
            assert_eq!(parsed.matches_raw(raw), expected, "{f} on {d}");
            if let Some(matched) = expected {
                assert_eq!(parsed.matches(&d), matched, "{f} on {d}");
            }
        }
    }

    #[test]
    fn a_field_named_twice_is_left_to_the_full_match() {
        // Decoding keeps the last value (in the first place); the raw
        // lookup would see the first.
        let mut raw = bson::RawDocumentBuf::new();
        let key = <&bson::raw::CStr>::try_from("f").unwrap();
        raw.append(key, 1);
        raw.append(key, 2);
        let decoded = Document::try_from(raw.as_ref()).unwrap();
        assert_eq!(decoded, doc! {"f": 2});
        let f = filter(doc! {"f": 1});
        assert_eq!(f.matches_raw(&raw), None);
        assert!(f.may_match_raw(&raw));
        assert!(!f.matches(&decoded));
        assert_eq!(filter(doc! {"g": null}).matches_raw(&raw), Some(true));
    }

    /// What a filter compares with: scalars, and arrays and documents of
    /// them.
    fn arb_constant() -> impl proptest::strategy::Strategy<Value = Bson> {
        use proptest::prelude::*;
        prop_oneof![
            4 => scalar(),
            1 => proptest::collection::vec(scalar(), 0..3).prop_map(Bson::Array),
            1 => (name(), scalar()).prop_map(|(k, v)| Bson::Document(doc! {k: v})),
        ]
    }

    /// A condition on one path: `{path: <this>}`.
    fn arb_condition() -> impl proptest::strategy::Strategy<Value = Bson> {
        use proptest::prelude::*;
        let cmp = prop_oneof![
            Just("$eq"),
            Just("$ne"),
            Just("$gt"),
            Just("$gte"),
            Just("$lt"),
            Just("$lte")
        ];
        let types = prop_oneof![
            Just("string"),
            Just("number"),
            Just("null"),
            Just("array"),
            Just("object"),
            Just("int"),
            Just("decimal"),
            Just("symbol")
        ];
        let one = |(op, v): (&str, Bson)| Bson::Document(doc! {op: v});
        prop_oneof![
            2 => arb_constant(),
            4 => (cmp.clone(), arb_constant()).prop_map(one),
            2 => (cmp.clone(), arb_constant(), cmp.clone(), arb_constant())
                .prop_map(|(o1, v1, o2, v2)| Bson::Document(doc! {o1: v1, o2: v2})),
            2 => (
                prop_oneof![Just("$in"), Just("$nin")],
                proptest::collection::vec(
                    prop_oneof![4 => arb_constant(), 1 => Just(re("^a", "i"))],
                    0..4
                )
            )
                .prop_map(|(op, vs)| Bson::Document(doc! {op: vs})),
            1 => any::<bool>().prop_map(|b| Bson::Document(doc! {"$exists": b})),
            1 => types.prop_map(|t| Bson::Document(doc! {"$type": t})),
            1 => prop_oneof![Just(re("^a", "")), Just(re("B", "i"))],
            1 => (cmp, arb_constant())
                .prop_map(|(op, v)| Bson::Document(doc! {"$not": {op: v}})),
            1 => prop_oneof![
                Just(Bson::Document(doc! {"$size": 1})),
                Just(Bson::Document(doc! {"$mod": [2, 0]})),
                Just(Bson::Document(doc! {"$all": [1]})),
                Just(Bson::Document(doc! {"$bitsAnySet": 1})),
                Just(Bson::Document(doc! {"$elemMatch": {"$gte": 1}})),
                Just(Bson::Document(doc! {"$elemMatch": {"a": 1}})),
            ],
        ]
    }

    fn arb_raw_filter() -> impl proptest::strategy::Strategy<Value = Document> {
        use proptest::prelude::*;
        let path = prop_oneof![
            Just("a"),
            Just("b"),
            Just("a.b"),
            Just("a.0"),
            Just("a.b.c"),
            Just("b.0.a"),
            Just("c")
        ];
        let leaf = (path, arb_condition()).prop_map(|(p, c)| doc! {p: c});
        leaf.prop_recursive(3, 16, 3, |inner| {
            let clauses = proptest::collection::vec(inner.clone(), 1..4);
            prop_oneof![
                (
                    prop_oneof![Just("$and"), Just("$or"), Just("$nor")],
                    clauses
                )
                    .prop_map(|(op, cs)| doc! {op: cs}),
                (inner.clone(), inner.clone()).prop_map(|(mut a, b)| {
                    a.extend(b);
                    a
                }),
                (inner, any::<bool>()).prop_map(|(f, first)| {
                    // $add fails on a string: the match fails.
                    let expr = doc! {"$expr": {"$add": ["$a", 1]}};
                    let mut out = if first { expr.clone() } else { f.clone() };
                    out.extend(if first { f } else { expr });
                    out
                }),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        #[test]
        fn raw_decisions_agree_with_the_full_match(
            f in arb_raw_filter(),
            fields in proptest::collection::vec((name(), stored()), 0..5),
        ) {
            let Ok(parsed) = Filter::parse(&f) else {
                return Ok(());
            };
            let raw = Stored::document(fields);
            let decoded = Document::try_from(raw.as_ref()).unwrap();
            let full = parsed.try_matches_with_details(&decoded);
            if let Some(decided) = parsed.matches_raw(&raw) {
                let details = match full {
                    Ok(details) => details,
                    Err(e) => panic!("{f} on {decoded}: decided {decided}, the full match fails: {e}"),
                };
                proptest::prop_assert_eq!(details.matched, decided, "{} on {}", f, decoded);
                proptest::prop_assert_eq!(details.array_position, None);
            } else if let Ok(details) = full {
                proptest::prop_assert!(
                    parsed.may_match_raw(&raw) || !details.matched,
                    "{} on {}", f, decoded
                );
            }
        }
    }

    #[test]
    fn deep_nesting_is_rejected() {
        let mut f = doc! {"a": 1};
        for _ in 0..300 {
            f = doc! {"$and": [f]};
        }
        assert_eq!(err(f).code, ErrorCode::BadValue);
        let mut e = Bson::from(1);
        for _ in 0..300 {
            e = Bson::Document(doc! {"$abs": e});
        }
        assert!(Expr::parse(&e).is_err());
    }

    #[test]
    fn no_panics_on_odd_input() {
        let odd = [
            doc! {"a": {"$size": i32::MIN}},
            doc! {"a": {"$mod": [i64::MIN, i64::MIN]}},
            doc! {"a": {"$type": i64::MAX}},
            doc! {"a": {"$bitsAllSet": [i64::MAX]}},
            doc! {"a": {"$bitsAllSet": f64::NAN}},
            doc! {"a..b": 1},
            doc! {"a": {"$regex": "\\"}},
            doc! {"a": {"$regex": "[a"}},
            doc! {"a": {"$regex": "(?"}},
            doc! {"a": {"$regex": "(?'x"}},
        ];
        for f in odd {
            if let Ok(f) = Filter::parse(&f) {
                f.matches(&doc! {"a": [1, {"b": i64::MIN}], "b": -1.5});
            }
        }
        assert!(m(doc! {"a": {"$mod": [-1, 0]}}, doc! {"a": [i64::MIN]}));
    }

    #[test]
    fn range_bounds_intersect_the_comparisons_on_a_path() {
        use std::ops::Bound;
        let f = Filter::parse(&doc! {"_id": {"$gte": 5, "$gt": 5, "$lt": 10}, "x": 1}).unwrap();
        assert_eq!(
            f.range_bounds("_id"),
            Some((
                Bound::Excluded(Bson::Int32(5)),
                Bound::Excluded(Bson::Int32(10))
            ))
        );
        let f =
            Filter::parse(&doc! {"$and": [{"_id": {"$lte": 3}}, {"_id": {"$lte": 2}}]}).unwrap();
        assert_eq!(
            f.range_bounds("_id"),
            Some((Bound::Unbounded, Bound::Included(Bson::Int32(2))))
        );
        let f = Filter::parse(&doc! {"$or": [{"_id": {"$gt": 1}}, {"y": 2}]}).unwrap();
        assert_eq!(f.range_bounds("_id"), None);
        assert_eq!(
            Filter::parse(&doc! {"x": 1}).unwrap().range_bounds("_id"),
            None
        );
    }
}

#[cfg(test)]
mod planner_tests {
    use super::*;
    use bson::{doc, Regex};

    fn filter(f: Document) -> Filter {
        Filter::parse(&f).unwrap()
    }

    #[test]
    fn collated_filters_compare_strings_by_the_collation() {
        let ci = crate::query::collation::Collation::parse_document(
            &doc! {"locale": "en", "strength": 2},
        )
        .unwrap();
        let parse = |f: Document| Filter::parse_collated(&f, ci.as_ref()).unwrap();
        let alice = doc! {"_id": 1, "name": "Alice", "tags": ["X", "y"], "sub": {"k": "V"}};
        for (f, by_bytes) in [
            (doc! {"name": "ALICE"}, false),
            (doc! {"name": {"$in": ["bob", "alice"]}}, false),
            (doc! {"name": {"$gte": "alice", "$lt": "B"}}, false),
            (doc! {"tags": "x"}, false),
            (doc! {"sub": {"k": "v"}}, false),
            (doc! {"name": {"$nin": ["bob", "ALICE"]}}, true),
        ] {
            assert_eq!(parse(f.clone()).matches(&alice), !by_bytes, "{f}");
            assert_eq!(Filter::parse(&f).unwrap().matches(&alice), by_bytes, "{f}");
            let raw = bson::RawDocumentBuf::try_from(&alice).unwrap();
            let decided = parse(f.clone()).matches_raw(&raw);
            assert!(decided.is_none_or(|m| m != by_bytes), "{f}");
        }
        assert!(!parse(doc! {"name": {"$ne": "alice"}}).matches(&alice));
        assert!(!parse(doc! {"name": {"$regex": "^a"}}).matches(&alice));
        // Strings pin neither keys nor byte ranges under a collation;
        // numbers still do.
        assert_eq!(parse(doc! {"_id": "a"}).equality_values("_id"), None);
        assert_eq!(
            parse(doc! {"_id": 5}).equality_values("_id"),
            Some(vec![Bson::Int32(5)])
        );
        assert_eq!(parse(doc! {"_id": {"$gt": "a"}}).range_bounds("_id"), None);
        assert!(parse(doc! {"a": {"$in": ["x"]}})
            .equality_predicates("a")
            .is_empty());
        assert_eq!(
            parse(doc! {"_id": "a"})
                .without_collation()
                .equality_values("_id"),
            Some(vec![Bson::String("a".into())])
        );
    }

    #[test]
    fn range_predicates_are_listed_one_by_one() {
        let f = filter(
            doc! {"a": {"$gt": 5, "$lt": 10}, "$and": [{"a": {"$lte": 8}}], "b": {"$gt": 1}},
        );
        assert_eq!(
            f.range_predicates("a"),
            vec![
                (Bound::Excluded(Bson::Int32(5)), Bound::Unbounded),
                (Bound::Unbounded, Bound::Excluded(Bson::Int32(10))),
                (Bound::Unbounded, Bound::Included(Bson::Int32(8))),
            ]
        );
        assert!(filter(doc! {"a": {"$gt": [1]}})
            .range_predicates("a")
            .is_empty());
        assert!(filter(doc! {"$or": [{"a": 1}, {"a": 2}]})
            .range_predicates("a")
            .is_empty());
        assert_eq!(filter(doc! {"a": 3}).range_predicates("a").len(), 1);
    }

    #[test]
    fn equality_predicates_are_not_intersected() {
        let f = filter(doc! {"a": 1, "$and": [{"a": {"$in": [2, 3]}}], "b": 1});
        assert_eq!(
            f.equality_predicates("a"),
            vec![vec![Bson::Int32(1)], vec![Bson::Int32(2), Bson::Int32(3)]]
        );
        assert!(filter(doc! {"a": {"$in": [1, Regex { pattern: "x".try_into().unwrap(), options: "".try_into().unwrap() }]}})
            .equality_predicates("a")
            .is_empty());
    }

    #[test]
    fn paths_lists_what_the_filter_reads() {
        let f = filter(
            doc! {"b": 1, "a.c": {"$gt": 1}, "$or": [{"d": 1}, {"b": {"$ne": 2}}], "e": {"$elemMatch": {"x": 1}}},
        );
        assert_eq!(
            f.paths(),
            Some(vec!["a.c".into(), "b".into(), "d".into(), "e".into()])
        );
        assert_eq!(filter(doc! {}).paths(), Some(vec![]));
        assert_eq!(
            filter(doc! {"a": 1, "$expr": {"$eq": ["$a", 1]}}).paths(),
            None
        );
    }

    #[test]
    fn missing_and_presence_tests() {
        assert!(filter(doc! {"a": null}).accepts_missing("a"));
        assert!(filter(doc! {"a": {"$in": [1, null]}}).accepts_missing("a"));
        assert!(filter(doc! {"a": {"$exists": false}}).accepts_missing("a"));
        assert!(filter(doc! {"$or": [{"a": {"$lte": null}}, {"b": 1}]}).accepts_missing("a"));
        assert!(filter(doc! {"a": {"$not": {"$exists": true}}}).accepts_missing("a"));
        assert!(!filter(doc! {"a": {"$ne": null}}).accepts_missing("a"));
        assert!(!filter(doc! {"a": {"$exists": true}}).accepts_missing("a"));
        assert!(!filter(doc! {"a": 1, "b": null}).accepts_missing("a"));
        assert!(filter(doc! {"a": {"$exists": true}}).tests_presence("a"));
        assert!(filter(doc! {"$nor": [{"a": {"$type": "null"}}]}).tests_presence("a"));
        assert!(!filter(doc! {"a": null, "b": {"$exists": 1}}).tests_presence("a"));
    }

    #[test]
    fn conjuncts_answer_for_themselves() {
        let f = filter(
            doc! {"n": {"$gt": 5}, "x": {"$exists": true}, "$or": [{"a": 1}, {"b": 1}], "k": null},
        );
        let c = f.conjuncts();
        assert_eq!(c.len(), 4);
        assert_eq!(c[0].path(), Some("n"));
        assert!(c[0].accepts(&Bson::Int32(6)) && !c[0].accepts(&Bson::Int32(5)));
        assert!(!c[0].accepts(&Bson::String("z".into())));
        assert_eq!(
            c[0].range(),
            Some((Bound::Excluded(Bson::Int32(5)), Bound::Unbounded))
        );
        assert!(c[1].is_exists() && !c[1].accepts_missing() && c[1].range().is_none());
        assert_eq!(c[2].path(), None);
        assert!(!c[2].accepts(&Bson::Int32(1)));
        assert!(c[3].accepts_missing() && c[3].accepts(&Bson::Null));
    }
}

#[cfg(test)]
mod sample_rate_tests {
    use super::*;
    use bson::doc;

    #[test]
    fn sample_rate_keeps_about_its_share() {
        let f = Filter::parse(&doc! {"$sampleRate": 0.25}).unwrap();
        assert!(f.uses_rand());
        let kept = (0..20_000).filter(|_| f.matches(&doc! {})).count();
        assert!((4_000..6_000).contains(&kept), "{kept}");
        // 0 and 1 are constants, as MongoDB desugars them.
        let none = Filter::parse(&doc! {"$sampleRate": 0}).unwrap();
        let all = Filter::parse(&doc! {"$sampleRate": 1.0}).unwrap();
        assert!(!none.uses_rand() && !all.uses_rand());
        assert!((0..100).all(|_| !none.matches(&doc! {}) && all.matches(&doc! {})));
        // Inside $and, beside other conditions.
        let f = Filter::parse(&doc! {"$and": [{"$sampleRate": 0.5}, {"a": 1}]}).unwrap();
        assert!((0..100).all(|_| !f.matches(&doc! {"a": 2})));
    }

    #[test]
    fn sample_rate_errors() {
        for (spec, message) in [
            (
                doc! {"$sampleRate": "x"},
                "argument to $sampleRate must be a numeric type",
            ),
            (
                doc! {"$sampleRate": 1.5},
                "numeric argument to $sampleRate must be in [0, 1]",
            ),
            (
                doc! {"$sampleRate": -0.1},
                "numeric argument to $sampleRate must be in [0, 1]",
            ),
            (
                doc! {"$sampleRate": f64::NAN},
                "numeric argument to $sampleRate must be in [0, 1]",
            ),
            (
                doc! {"a": {"$elemMatch": {"$sampleRate": 0.5}}},
                "$sampleRate can only be applied to the top-level document",
            ),
        ] {
            let e = Filter::parse(&spec).unwrap_err();
            assert_eq!(
                (e.code.number(), e.message.as_str()),
                (2, message),
                "{spec}"
            );
        }
    }
}
