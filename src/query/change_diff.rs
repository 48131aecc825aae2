//! A change stream's `updateDescription`: what an update changed in a
//! document, as `updatedFields` (dotted path → new value), `removedFields`
//! and `truncatedArrays` (`{field, newSize}`).
//!
//! It is computed from the document before and after, not from the update
//! operators, so every way of changing a document describes its change the
//! same way. Sub-documents are described field by field when the new one
//! keeps every field of the old one in its order (what `$set` or `$inc` of
//! a nested path does), and as a whole otherwise (a `$set` of the whole
//! sub-document). Arrays that keep their prefix are described element by
//! element (`$push` adds `"tags.2"`), and a shorter one as truncated;
//! anything else replaces the array.

use bson::raw::RawBsonRef;
use bson::{doc, Bson, Document, RawDocument};

/// The `updateDescription` of the change from `old` to `new`.
pub fn describe(old: &Document, new: &Document) -> Document {
    let mut diff = Diff::default();
    diff.documents("", old, new);
    diff.into_description()
}

/// [`describe`] of stored documents, decoding only what changed: an
/// update of one field of a large document costs that field.
pub fn describe_raw(old: &RawDocument, new: &RawDocument) -> bson::error::Result<Document> {
    let mut diff = Diff::default();
    diff.raw_documents("", old, new)?;
    Ok(diff.into_description())
}

#[derive(Default)]
struct Diff {
    updated: Document,
    removed: Vec<Bson>,
    truncated: Vec<Bson>,
}

fn join(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_string()
    } else {
        format!("{prefix}.{field}")
    }
}

impl Diff {
    fn into_description(self) -> Document {
        doc! {
            "updatedFields": self.updated,
            "removedFields": self.removed,
            "truncatedArrays": self.truncated,
            // MongoDB 7.0 reports `disambiguatedPaths` only when asked for
            // expanded events and a path needs it; none here do.
        }
    }

    fn raw_documents(
        &mut self,
        prefix: &str,
        old: &RawDocument,
        new: &RawDocument,
    ) -> bson::error::Result<()> {
        let before: Vec<(&str, RawBsonRef)> = old
            .iter()
            .map(|e| e.map(|(k, v)| (k.as_str(), v)))
            .collect::<bson::error::Result<_>>()?;
        let mut kept = vec![false; before.len()];
        for (i, element) in new.iter().enumerate() {
            let (field, value) = element?;
            let field = field.as_str();
            // Fields mostly keep their places; look there first.
            let found = match before.get(i) {
                Some((f, _)) if *f == field => Some(i),
                _ => before.iter().position(|(f, _)| *f == field),
            };
            let path = join(prefix, field);
            let Some(j) = found else {
                self.updated.insert(path, Bson::try_from(value)?);
                continue;
            };
            kept[j] = true;
            let was = before[j].1;
            if was == value {
                continue;
            }
            match (was, value) {
                (RawBsonRef::Document(a), RawBsonRef::Document(b)) if raw_keeps_fields(a, b)? => {
                    self.raw_documents(&path, a, b)?
                }
                _ => self.value(path, &Bson::try_from(was)?, &Bson::try_from(value)?),
            }
        }
        for ((field, _), kept) in before.iter().zip(kept) {
            if !kept {
                self.removed.push(Bson::String(join(prefix, field)));
            }
        }
        Ok(())
    }

    fn documents(&mut self, prefix: &str, old: &Document, new: &Document) {
        for (field, value) in new {
            let path = join(prefix, field);
            match old.get(field) {
                Some(before) if before == value => {}
                Some(before) => self.value(path, before, value),
                None => {
                    self.updated.insert(path, value.clone());
                }
            }
        }
        for field in old.keys().filter(|f| !new.contains_key(*f)) {
            self.removed.push(Bson::String(join(prefix, field)));
        }
    }

    fn value(&mut self, path: String, old: &Bson, new: &Bson) {
        match (old, new) {
            (Bson::Document(a), Bson::Document(b)) if keeps_fields(a, b) => {
                self.documents(&path, a, b)
            }
            (Bson::Array(a), Bson::Array(b)) if !a.is_empty() && !b.is_empty() => {
                let common = a.len().min(b.len());
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    if x != y {
                        let element = format!("{path}.{i}");
                        match (x, y) {
                            (Bson::Document(p), Bson::Document(q)) if keeps_fields(p, q) => {
                                self.documents(&element, p, q)
                            }
                            _ => {
                                self.updated.insert(element, y.clone());
                            }
                        }
                    }
                }
                for (i, y) in b.iter().enumerate().skip(common) {
                    self.updated.insert(format!("{path}.{i}"), y.clone());
                }
                if b.len() < a.len() {
                    self.truncated.push(Bson::Document(
                        doc! {"field": path, "newSize": b.len() as i32},
                    ));
                }
            }
            _ => {
                self.updated.insert(path, new.clone());
            }
        }
    }
}

/// [`keeps_fields`] of stored documents.
fn raw_keeps_fields(old: &RawDocument, new: &RawDocument) -> bson::error::Result<bool> {
    let mut fields = new.iter();
    for element in old {
        let (field, _) = element?;
        loop {
            match fields.next() {
                Some(next) => {
                    if next?.0 == field {
                        break;
                    }
                }
                None => return Ok(false),
            }
        }
    }
    Ok(true)
}

/// Whether `new` holds every field of `old`, in `old`'s order.
fn keeps_fields(old: &Document, new: &Document) -> bool {
    let mut fields = new.keys();
    old.keys().all(|f| fields.any(|g| g == f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_inc_and_unset_name_their_paths() {
        let old = doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "gone": true};
        let new = doc! {"_id": 1, "a": 2, "b": {"c": 1, "d": 3, "e": 4}, "f": "new"};
        assert_eq!(
            describe(&old, &new),
            doc! {
                "updatedFields": {"a": 2, "b.d": 3, "b.e": 4, "f": "new"},
                "removedFields": ["gone"],
                "truncatedArrays": [],
            }
        );
    }

    #[test]
    fn a_sub_document_that_lost_a_field_is_replaced_whole() {
        let old = doc! {"a": {"x": 0, "y": 2}};
        let new = doc! {"a": {"x": 1}};
        assert_eq!(
            describe(&old, &new).get_document("updatedFields").unwrap(),
            &doc! {"a": {"x": 1}}
        );
    }

    #[test]
    fn stored_documents_are_described_as_decoded_ones_are() {
        let cases = [
            (
                doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "gone": true},
                doc! {"_id": 1, "a": 2, "b": {"c": 1, "d": 3, "e": 4}, "f": "new"},
            ),
            (doc! {"a": {"x": 0, "y": 2}}, doc! {"a": {"x": 1}}),
            (
                doc! {"tags": ["a", "b", "c"], "n": [{"k": 1}], "z": 1},
                doc! {"z": 1.0, "tags": ["a", "z"], "n": [{"k": 2}, {"k": 3}]},
            ),
            (doc! {"same": [1, {"x": 1}]}, doc! {"same": [1, {"x": 1}]}),
        ];
        for (old, new) in cases {
            let raw = describe_raw(
                &bson::RawDocumentBuf::try_from(&old).unwrap(),
                &bson::RawDocumentBuf::try_from(&new).unwrap(),
            )
            .unwrap();
            assert_eq!(raw, describe(&old, &new), "{old} -> {new}");
        }
    }

    #[test]
    fn arrays_grow_shrink_and_change_by_element() {
        let old = doc! {"tags": ["a", "b", "c"], "n": [{"k": 1}]};
        let new = doc! {"tags": ["a", "z"], "n": [{"k": 2}, {"k": 3}]};
        assert_eq!(
            describe(&old, &new),
            doc! {
                "updatedFields": {"tags.1": "z", "n.0.k": 2, "n.1": {"k": 3}},
                "removedFields": [],
                "truncatedArrays": [{"field": "tags", "newSize": 2}],
            }
        );
        let emptied = doc! {"tags": []};
        assert_eq!(
            describe(&old, &emptied)
                .get_document("updatedFields")
                .unwrap(),
            &doc! {"tags": []}
        );
    }
}
