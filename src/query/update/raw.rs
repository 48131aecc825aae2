//! Operator updates applied to a stored document's bytes.
//!
//! Most updates set, unset or bump a few fields: `{$set: {status: "x"},
//! $inc: {"stats.views": 1}}`. Decoding the whole stored document, applying
//! the update to the copy and encoding it again costs more than the update
//! itself. Here the stored bytes are copied element by element into the new
//! document, and only the elements the update names are decoded, changed
//! with the same code as the full path ([`modify_existing`]) and written
//! back. The result is byte for byte what the full path would store.
//!
//! Only what needs no more than that is done here: `$set`, `$unset`,
//! `$inc`, `$mul`, `$min`, `$max`, `$currentDate` (and `$setOnInsert`,
//! which does nothing to a stored document) on paths through embedded
//! documents. Anything else — `_id`, arrays on the path, a missing parent,
//! positional operators, other operators, a result near the size limit —
//! is [`RawApplied::Decode`]: the caller runs the full path, which gives
//! MongoDB's answer in every case.

use bson::raw::CStr;
use bson::{Bson, DateTime, RawBson, RawBsonRef, RawDocument, RawDocumentBuf};

use super::{
    check_depth, modify_existing, new_value, Internal, InternalKind, LeafOp, Node, OpEnv, Outcome,
    UpdateKind, MAX_DOCUMENT_BYTES,
};
use crate::error::{Error, Result};

/// What applying an update to stored bytes gave.
#[derive(Debug, PartialEq)]
pub enum RawApplied {
    /// The update changes nothing: the stored document stays as it is.
    Unchanged,
    /// The new document's bytes.
    Changed(Vec<u8>),
    /// This update or this document needs the full path.
    Decode,
}

impl super::Update {
    /// Applies the update to `stored` (not an upsert's insert) if it can
    /// be done on the bytes; see the module's description.
    pub fn apply_raw(&self, stored: &RawDocument) -> Result<RawApplied> {
        let UpdateKind::Operators(ops) = &self.kind else {
            return Ok(RawApplied::Decode);
        };
        let Node::Internal(root) = &ops.root else {
            return Ok(RawApplied::Decode);
        };
        if !ops.array_filters.is_empty() || root.children.keys().any(|k| k.0 == "_id") {
            return Ok(RawApplied::Decode);
        }
        let id = match stored.get("_id").map_err(invalid)? {
            Some(id) => Some(Bson::try_from(id).map_err(invalid)?),
            None => None,
        };
        let mut applier = RawApplier {
            id,
            now: DateTime::now(),
            changed: false,
            path: Vec::new(),
        };
        // The full path applies the leaves in the tree's order, this one
        // in the document's: when one fails, the full path says which.
        let Ok(Some(doc)) = applier.apply_object(stored, root) else {
            return Ok(RawApplied::Decode);
        };
        if !applier.changed {
            return Ok(RawApplied::Unchanged);
        }
        // The full path reports a document grown past the limit with its
        // own wording.
        if doc.as_bytes().len() > MAX_DOCUMENT_BYTES {
            return Ok(RawApplied::Decode);
        }
        Ok(RawApplied::Changed(doc.into_bytes()))
    }
}

struct RawApplier {
    id: Option<Bson>,
    now: DateTime,
    changed: bool,
    /// The path of the document being written, for messages and depth.
    path: Vec<String>,
}

impl RawApplier {
    /// `doc` with `node`'s children applied, or `None` when one of them
    /// needs the full path.
    fn apply_object(
        &mut self,
        doc: &RawDocument,
        node: &Internal,
    ) -> Result<Option<RawDocumentBuf>> {
        if node.kind != InternalKind::Object || node.children.keys().any(|k| k.0 == "$") {
            return Ok(None);
        }
        let mut out = RawDocumentBuf::new();
        let mut seen = vec![false; node.children.len()];
        for element in doc.iter_elements() {
            let element = element.map_err(invalid)?;
            let key = element.key();
            let value = element.value().map_err(invalid)?;
            let Some(i) = node.children.keys().position(|k| k.0 == key.as_str()) else {
                out.append(key, value);
                continue;
            };
            seen[i] = true;
            let Some(child) = node.children.values().nth(i) else {
                return Ok(None);
            };
            self.path.push(key.as_str().to_owned());
            let written = self.apply_child(&mut out, key, value, child)?;
            self.path.pop();
            if !written {
                return Ok(None);
            }
        }
        // Fields the update names that the document lacks are appended in
        // the tree's order, as the full path creates them.
        for (i, (name, child)) in node.children.iter().enumerate() {
            if seen[i] {
                continue;
            }
            let Node::Leaf(op) = child else {
                // A missing parent would be created: the full path does it.
                return Ok(None);
            };
            match op.as_ref() {
                LeafOp::Unset | LeafOp::SetOnInsert(_) => continue,
                op if supported(op) => {}
                _ => return Ok(None),
            }
            let value = new_value(op, self.now)?;
            check_depth(self.path.len() + 1, &value)?;
            let Ok(key) = <&CStr>::try_from(name.0.as_str()) else {
                return Ok(None);
            };
            out.append(key, raw(value)?);
            self.changed = true;
        }
        Ok(Some(out))
    }

    /// Writes the element `key: value` as `child` leaves it (or leaves it
    /// out); `false` when the full path must do it.
    fn apply_child(
        &mut self,
        out: &mut RawDocumentBuf,
        key: &CStr,
        value: RawBsonRef<'_>,
        child: &Node,
    ) -> Result<bool> {
        match child {
            Node::Internal(inner) => {
                let RawBsonRef::Document(sub) = value else {
                    return Ok(false);
                };
                let Some(sub) = self.apply_object(sub, inner)? else {
                    return Ok(false);
                };
                out.append(key, sub);
                Ok(true)
            }
            Node::Leaf(op) => match op.as_ref() {
                LeafOp::Unset => {
                    self.changed = true;
                    Ok(true)
                }
                LeafOp::SetOnInsert(_) => {
                    out.append(key, value);
                    Ok(true)
                }
                op if supported(op) => {
                    let mut current = Bson::try_from(value).map_err(invalid)?;
                    let env = OpEnv {
                        id: self.id.as_ref(),
                        path: &self.path,
                        now: self.now,
                    };
                    match modify_existing(op, &mut current, &env)? {
                        Outcome::Unchanged => out.append(key, value),
                        Outcome::Changed { .. } => {
                            if op.may_deepen() {
                                check_depth(self.path.len(), &current)?;
                            }
                            out.append(key, raw(current)?);
                            self.changed = true;
                        }
                    }
                    Ok(true)
                }
                _ => Ok(false),
            },
        }
    }
}

/// The leaves that change one value in place.
fn supported(op: &LeafOp) -> bool {
    matches!(
        op,
        LeafOp::Set(_)
            | LeafOp::Inc(_)
            | LeafOp::Mul(_)
            | LeafOp::Min(_)
            | LeafOp::Max(_)
            | LeafOp::CurrentDate { .. }
    )
}

fn raw(value: Bson) -> Result<RawBson> {
    RawBson::try_from(value).map_err(invalid)
}

fn invalid(e: bson::error::Error) -> Error {
    Error::internal(format!("stored document is not valid BSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::update::{ApplyContext, PipelineRunner, Update};
    use bson::{doc, Document};
    use std::sync::Arc;

    fn no_pipelines(_: &[Bson]) -> Result<Arc<dyn PipelineRunner>> {
        Err(Error::internal("no pipelines here"))
    }

    fn update(u: Document) -> Update {
        Update::parse_with(&Bson::Document(u), None, &no_pipelines).unwrap()
    }

    /// The raw path's answer, checked against the full path's.
    fn both(stored: Document, u: Document) -> RawApplied {
        let update = update(u);
        let bytes = stored.to_vec().unwrap();
        let raw = update
            .apply_raw(RawDocument::from_bytes(&bytes).unwrap())
            .unwrap();
        let full = || update.apply(&stored, &ApplyContext::default()).unwrap();
        match &raw {
            RawApplied::Changed(new) => assert_eq!(new, &full().to_vec().unwrap()),
            RawApplied::Unchanged => assert_eq!(full(), stored),
            RawApplied::Decode => {}
        }
        raw
    }

    #[test]
    fn top_level_and_nested_fields_change_as_the_full_path_changes_them() {
        let stored = doc! {"_id": 1, "a": 1, "s": {"n": 5, "t": "x"}, "z": "last"};
        for u in [
            doc! {"$set": {"a": 2}},
            doc! {"$inc": {"a": 1, "s.n": 2}},
            doc! {"$set": {"new": 1, "another": {"x": 1}}},
            doc! {"$unset": {"s.t": "", "z": 1}},
            doc! {"$mul": {"a": 3}, "$max": {"s.n": 9}, "$min": {"s.m": 0}},
            doc! {"$set": {"s.u": [1, 2]}, "$inc": {"b": 1.5}},
            doc! {"$inc": {"a": 2_147_483_647}},
        ] {
            assert!(
                matches!(both(stored.clone(), u.clone()), RawApplied::Changed(_)),
                "{u}"
            );
        }
    }

    #[test]
    fn an_update_that_changes_nothing_leaves_the_document() {
        let stored = doc! {"_id": 1, "a": 1, "s": {"n": 5}};
        for u in [
            doc! {"$set": {"a": 1}},
            doc! {"$unset": {"missing": 1, "s.missing": 1}},
            doc! {"$max": {"a": 0}},
            doc! {"$setOnInsert": {"a": 7}},
        ] {
            assert_eq!(
                both(stored.clone(), u.clone()),
                RawApplied::Unchanged,
                "{u}"
            );
        }
    }

    #[test]
    fn what_the_bytes_cannot_answer_goes_to_the_full_path() {
        let stored = doc! {"_id": 1, "a": 1, "arr": [{"b": 1}], "n": null};
        for u in [
            doc! {"$set": {"_id": 1}},
            doc! {"$set": {"arr.0.b": 2}},
            doc! {"$set": {"arr.$[].b": 2}},
            doc! {"$set": {"missing.b": 2}},
            doc! {"$set": {"n.b": 2}},
            doc! {"$push": {"arr": 2}},
            doc! {"$rename": {"a": "c"}},
            doc! {"$set": {"x": 1}, "$push": {"arr": 2}},
        ] {
            assert_eq!(both(stored.clone(), u.clone()), RawApplied::Decode, "{u}");
        }
    }

    #[test]
    fn a_failing_update_is_left_to_the_full_path() {
        // The full path names the first failing field in the update's
        // order (`d` before `i`); this one meets `i` first.
        let stored = doc! {"_id": 1, "i": [1], "d": "text"};
        assert_eq!(
            both(stored, doc! {"$inc": {"i": 1, "d": 1}}),
            RawApplied::Decode
        );
    }
}
