//! Deciding a filter on a document still in BSON form, so a scan decodes
//! only what it returns ([`super::Filter::matches_raw`]).
//!
//! A condition is decided when its path reaches a missing field or a value
//! outside any array ([`raw_leaf`]): the matcher's walk then offers that
//! one value (or "missing"), and [`super::test`] gives the answer. Strings
//! are tested in place; every other value is decoded on its own (numbers,
//! dates and the like cost nothing to decode), so each operator keeps its
//! one definition. An array on a path, a field named twice, or unreadable
//! bytes leave the condition undecided.
//!
//! `$and`, `$or`, `$nor` and `$not` combine three-valued results. The full
//! match evaluates in order and stops at the first decisive clause; a
//! `$expr` may fail, which fails the whole match, so an undecided clause
//! that holds a `$expr` stops the raw evaluation too: the full match must
//! run to see whether it fails.

use bson::{Bson, RawBsonRef, RawDocument};

use super::{test, CmpOp, FieldPath, Node, PathNode, Pred};
use crate::query::compare::{canonical_type_rank, compare_to_str, STRING_RANK};
use crate::query::path::{raw_leaf, RawLeaf};

/// The BSON type code of a string, for `$type`.
const STRING_TYPE: i32 = 2;

/// The last path looked up: `{a: {$gte: x, $lt: y}}` reads `a` once.
type Looked<'f, 'd> = Option<(&'f FieldPath, RawLeaf<'d>)>;

pub(super) fn decide(node: &Node, doc: &RawDocument) -> Option<bool> {
    decide_node(node, doc, &mut None)
}

fn decide_node<'f, 'd>(
    node: &'f Node,
    doc: &'d RawDocument,
    looked: &mut Looked<'f, 'd>,
) -> Option<bool> {
    match node {
        Node::And(children) => decide_all(children, doc, looked, false),
        Node::Or(children) => decide_all(children, doc, looked, true).map(|b| !b),
        Node::Nor(children) => decide_all(children, doc, looked, true),
        Node::Not(child) => decide_node(child, doc, looked).map(|b| !b),
        Node::Always(b) => Some(*b),
        // A schema reads whole subdocuments; the full match decides.
        Node::Expr(_) | Node::Schema(_) | Node::Where(_) => None,
        Node::Path(p) => decide_path(p, doc, looked),
    }
}

/// Whether no child decides `stop` (`$and`: no child is false; `$or`,
/// `$nor`: no child is true, the caller negating for `$or`), in order.
fn decide_all<'f, 'd>(
    children: &'f [Node],
    doc: &'d RawDocument,
    looked: &mut Looked<'f, 'd>,
    stop: bool,
) -> Option<bool> {
    let mut decided = true;
    for child in children {
        match decide_node(child, doc, looked) {
            Some(b) if b == stop => return Some(false),
            Some(_) => {}
            None if may_fail(child) => return None,
            None => decided = false,
        }
    }
    decided.then_some(true)
}

/// True when evaluating `node` may fail the match (a `$expr` inside).
fn may_fail(node: &Node) -> bool {
    match node {
        Node::And(children) | Node::Or(children) | Node::Nor(children) => {
            children.iter().any(may_fail)
        }
        Node::Not(child) => may_fail(child),
        Node::Expr(_) | Node::Where(_) => true,
        Node::Path(_) | Node::Always(_) | Node::Schema(_) => false,
    }
}

fn decide_path<'f, 'd>(
    p: &'f PathNode,
    doc: &'d RawDocument,
    looked: &mut Looked<'f, 'd>,
) -> Option<bool> {
    let path: &'f FieldPath = &p.path;
    if path.parts.is_empty() {
        return None;
    }
    let leaf = match looked {
        Some((seen, leaf)) if seen.dotted == path.dotted => *leaf,
        _ => {
            let leaf = raw_leaf(doc, &path.parts);
            *looked = Some((path, leaf));
            leaf
        }
    };
    match leaf {
        RawLeaf::Unknown | RawLeaf::Value(RawBsonRef::Array(_)) => None,
        RawLeaf::Missing => Some(test(&p.pred, None).is_some()),
        RawLeaf::Value(RawBsonRef::String(s)) => Some(test_str(&p.pred, s)),
        RawLeaf::Value(other) => {
            let value = Bson::try_from(other).ok()?;
            Some(test(&p.pred, Some(&value)).is_some())
        }
    }
}

/// [`test`] of a string value, without copying it.
fn test_str(pred: &Pred, s: &str) -> bool {
    match pred {
        Pred::Compare { op, value } => {
            if canonical_type_rank(value) != STRING_RANK {
                return match value {
                    Bson::MinKey => matches!(op, CmpOp::Gt | CmpOp::Gte),
                    Bson::MaxKey => matches!(op, CmpOp::Lt | CmpOp::Lte),
                    _ => false,
                };
            }
            op.accepts(compare_to_str(value, s).reverse())
        }
        Pred::In(set) => {
            set.values
                .binary_search_by(|probe| compare_to_str(probe, s))
                .is_ok()
                || set.regexes.iter().any(|r| r.compiled.is_match(s))
        }
        Pred::Regex(r) => r.compiled.is_match(s),
        Pred::Exists => true,
        Pred::Type(types) => types.contains_code(STRING_TYPE),
        // Array conditions, and numeric ones a string never meets.
        Pred::Size(_)
        | Pred::Mod { .. }
        | Pred::ElemMatchObject(_)
        | Pred::ElemMatchValue(_)
        | Pred::Bits { .. }
        | Pred::Geo(_) => false,
    }
}
