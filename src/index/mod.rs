//! Secondary indexes: their specifications, the keys a document gives
//! them, and the plans that read them.
//!
//! An index entry lives in the engine's index space under
//! `collection | index number | keystring(key values) | keystring(_id)`
//! and holds the document's shard-key hash (8 bytes) followed by the key
//! values as a BSON document (`{"0": v0, "1": v1}`), so that a covered
//! query never reads the document and a fetch knows the record key
//! (`collection | hash | keystring(_id)`). Keystrings are prefix-free, so
//! all entries of one key value share one key prefix: a unique check is
//! one short prefix scan.
//!
//! Each physical partition's index is the set of entries whose hash it
//! owns: a partition reads its own entries and skips the others, so a
//! split stays a metadata change, exactly as for records.

pub mod geo;
pub mod geo_keys;
pub mod plan;
pub mod text;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocument};

use crate::error::{Error, ErrorCode, Result};

use crate::query::collation::Collation;
use crate::query::filter::Filter;
use crate::query::hash;
use crate::query::keystring;
use crate::{bail, err};

/// Most indexes a collection may have, `_id` included (MongoDB's limit).
pub const MAX_INDEXES: usize = 64;

/// The name of the `_id` index.
pub const ID_INDEX_NAME: &str = "_id_";

/// How one field of a key pattern orders its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Ascending,
    Descending,
    Hashed,
    /// `"2dsphere"`: cells of GeoJSON and legacy pairs on the sphere.
    Geo2dSphere,
    /// `"2d"`: cells of legacy pairs on a flat plane.
    Geo2d,
    /// A text index's term ([`text`]).
    Text,
}

/// One field of a key pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyField {
    pub path: String,
    pub kind: KeyKind,
}

impl KeyKind {
    /// The geo kind of a `2dsphere` or `2d` field.
    pub fn geo(self) -> Option<geo_keys::GeoKind> {
        match self {
            KeyKind::Geo2dSphere => Some(geo_keys::GeoKind::Sphere),
            KeyKind::Geo2d => Some(geo_keys::GeoKind::Flat),
            _ => None,
        }
    }
}

impl KeyField {
    pub fn descending(&self) -> bool {
        self.kind == KeyKind::Descending
    }
}

/// A secondary index of a collection.
#[derive(Debug)]
pub struct Index {
    /// Numbers entries are stored under; never reused in a collection.
    pub number: u32,
    pub name: String,
    pub fields: Vec<KeyField>,
    /// The key pattern as the client gave it.
    pub key: Document,
    pub unique: bool,
    pub sparse: bool,
    /// `partialFilterExpression`, as given and parsed.
    pub partial: Option<(Document, Filter)>,
    pub expire_after_secs: Option<i64>,
    pub hidden: bool,
    /// The collation its string keys order by (`None`: simple); see
    /// [`Index::encode`].
    pub collation: Option<Arc<Collation>>,
    /// The cell plane of a `2dsphere` or `2d` index.
    pub geo: Option<geo_keys::GeoOptions>,
    /// Options a client gave that change nothing here (`background`,
    /// `storageEngine`), kept so `listIndexes` shows them as MongoDB does.
    pub kept: Document,
    /// A text index's options.
    pub text: Option<Arc<crate::query::text::TextSpec>>,
    /// Set once any document gave this index more than one key.
    multikey: AtomicBool,
}

/// The keys a document gives an index.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DocumentKeys {
    /// Each key's keystring and its values, without duplicates.
    pub keys: Vec<(Vec<u8>, Vec<Bson>)>,
    /// True when an array was met on a key path.
    pub multikey: bool,
}

impl Index {
    /// Parses and checks one specification from `createIndexes`.
    pub fn parse(spec: &Document, number: u32) -> Result<Index> {
        let key = match spec.get("key") {
            Some(Bson::Document(k)) if !k.is_empty() => k.clone(),
            Some(Bson::Document(_)) => bail!(
                CannotCreateIndex,
                "Index keys cannot be empty. Specification: {spec}"
            ),
            Some(_) => bail!(
                TypeMismatch,
                "The field 'key' must be an object, but got another type. Specification: {spec}"
            ),
            None => bail!(
                FailedToParse,
                "The 'key' field is a required property of an index specification. Specification: {spec}"
            ),
        };
        let (fields, key, text) = if is_text_pattern(&key) {
            let (fields, shown, spec) = parse_text_pattern(&key, spec)?;
            (fields, shown, Some(Arc::new(spec)))
        } else {
            (parse_key_pattern(&key)?, key, None)
        };
        let name = match spec.get("name") {
            Some(Bson::String(n)) if !n.is_empty() => n.clone(),
            Some(Bson::String(_)) => bail!(
                CannotCreateIndex,
                "The index name cannot be empty. Specification: {spec}"
            ),
            Some(_) => bail!(
                TypeMismatch,
                "The field 'name' must be a string. Specification: {spec}"
            ),
            None => default_name(spec.get_document("key").unwrap_or(&key)),
        };
        let mut index = Index {
            number,
            name,
            fields,
            key,
            unique: false,
            sparse: false,
            partial: None,
            expire_after_secs: None,
            hidden: false,
            collation: None,
            geo: None,
            kept: Document::new(),
            text,
            multikey: AtomicBool::new(false),
        };
        let kinds: Vec<_> = index.fields.iter().map(|f| f.kind.geo()).collect();
        index.geo = geo_keys::parse_options(&kinds, index.is_hashed(), spec)?;
        for (option, value) in spec {
            match option.as_str() {
                "key" | "name" | "ns" => {}
                name if geo_keys::is_geo_option(name) => {}
                "weights" | "default_language" | "language_override" | "textIndexVersion"
                    if index.text.is_some() => {}
                "background" | "storageEngine" => {
                    index.kept.insert(option.clone(), value.clone());
                }
                "v" => match crate::query::compare::Number::of(value).map(|n| n.to_f64()) {
                    Some(v) if v == 1.0 || v == 2.0 => {}
                    _ => bail!(
                        CannotCreateIndex,
                        "Invalid index specification {spec}; cannot create an index with v={value}"
                    ),
                },
                "unique" => index.unique = truthy(value),
                "sparse" => index.sparse = truthy(value),
                "hidden" => index.hidden = truthy(value),
                "partialFilterExpression" => {
                    let Bson::Document(d) = value else {
                        bail!(
                            TypeMismatch,
                            "The field 'partialFilterExpression' must be an object. Specification: {spec}"
                        );
                    };
                    index.partial = Some((d.clone(), Filter::parse(d)?));
                }
                "expireAfterSeconds" => {
                    index.expire_after_secs = Some(parse_expire_after(value)?);
                }
                "collation" => index.collation = Collation::parse(value)?,
                other => bail!(
                    InvalidIndexSpecificationOption,
                    "The field '{other}' is not valid for an index specification. Specification: {spec}"
                ),
            }
        }
        if index.is_id()
            && (index.unique
                || index.sparse
                || index.partial.is_some()
                || index.expire_after_secs.is_some()
                || index.hidden)
        {
            bail!(
                InvalidIndexSpecificationOption,
                "The _id index takes no options. Specification: {spec}"
            );
        }
        if index.is_hashed() && index.collation.is_some() {
            bail!(
                CannotCreateIndex,
                "A hashed index with a non-simple collation is not supported. Specification: {spec}"
            );
        }
        if index.fields.iter().any(|f| f.kind == KeyKind::Hashed) && index.unique {
            bail!(
                CannotCreateIndex,
                "Currently hashed indexes cannot guarantee uniqueness. Use a regular index."
            );
        }
        if index.expire_after_secs.is_some() && index.fields.len() > 1 {
            bail!(
                CannotCreateIndex,
                "TTL indexes are single-field indexes, compound indexes do not support TTL. Index spec: {spec}"
            );
        }
        if index.partial.is_some() && index.sparse {
            bail!(
                CannotCreateIndex,
                "cannot mix \"partialFilterExpression\" and \"sparse\" options"
            );
        }
        Ok(index)
    }

    /// Where a text index's term sits among its key values.
    pub fn text_term_position(&self) -> usize {
        self.fields
            .iter()
            .position(|f| f.kind == KeyKind::Text)
            .unwrap_or(0)
    }

    /// True for a key pattern of `{_id: 1}`.
    pub fn is_id(&self) -> bool {
        self.fields.len() == 1
            && self.fields[0].path == "_id"
            && self.fields[0].kind == KeyKind::Ascending
    }

    pub fn is_multikey(&self) -> bool {
        self.multikey.load(Ordering::Acquire)
    }

    /// Marks the index multikey; true when it was not yet.
    pub fn set_multikey(&self) -> bool {
        !self.multikey.swap(true, Ordering::AcqRel)
    }

    /// True for a `2dsphere` or `2d` index.
    pub fn is_geo(&self) -> bool {
        self.fields.iter().any(|f| f.kind.geo().is_some())
    }

    pub fn is_hashed(&self) -> bool {
        self.fields.iter().any(|f| f.kind == KeyKind::Hashed)
    }

    /// The specification as `listIndexes` shows it.
    pub fn spec(&self) -> Document {
        let mut d = doc! {"v": 2, "key": self.key.clone(), "name": self.name.clone()};
        d.extend(self.kept.clone());
        if let Some(g) = &self.geo {
            d.extend(g.shown.clone());
        }
        if let Some(text) = &self.text {
            d.extend(text.options());
        }
        if self.unique {
            d.insert("unique", true);
        }
        if self.sparse {
            d.insert("sparse", true);
        }
        if let Some((p, _)) = &self.partial {
            d.insert("partialFilterExpression", p.clone());
        }
        if let Some(secs) = self.expire_after_secs {
            d.insert("expireAfterSeconds", secs);
        }
        if self.hidden {
            d.insert("hidden", true);
        }
        if let Some(c) = &self.collation {
            d.insert("collation", c.spec().clone());
        }
        d
    }

    /// What the catalog stores: the specification, the number and whether
    /// it is multikey.
    pub fn to_stored(&self) -> Document {
        doc! {"number": self.number as i64, "spec": self.spec(), "multikey": self.is_multikey()}
    }

    pub fn from_stored(d: &Document) -> Result<Index> {
        let number = d
            .get_i64("number")
            .map_err(|_| Error::internal(format!("corrupt index entry in the catalog: {d}")))?
            as u32;
        let spec = d
            .get_document("spec")
            .map_err(|_| Error::internal(format!("corrupt index entry in the catalog: {d}")))?;
        let index = Index::parse(spec, number)?;
        if d.get_bool("multikey").unwrap_or(false) {
            index.set_multikey();
        }
        Ok(index)
    }

    /// A copy with other options (for `collMod`), keeping the number and
    /// the multikey flag.
    pub fn with_options(&self, expire_after_secs: Option<i64>, hidden: bool) -> Index {
        Index {
            number: self.number,
            name: self.name.clone(),
            fields: self.fields.clone(),
            key: self.key.clone(),
            unique: self.unique,
            sparse: self.sparse,
            partial: self.partial.clone(),
            expire_after_secs,
            hidden,
            collation: self.collation.clone(),
            geo: self.geo.clone(),
            kept: self.kept.clone(),
            text: self.text.clone(),
            multikey: AtomicBool::new(self.is_multikey()),
        }
    }

    /// True when `other` would be the same index: same key pattern and
    /// the options that change its contents or behaviour.
    pub fn same_options(&self, other: &Index) -> bool {
        self.unique == other.unique
            && self.sparse == other.sparse
            && self.partial.as_ref().map(|p| &p.0) == other.partial.as_ref().map(|p| &p.0)
            && self.expire_after_secs == other.expire_after_secs
            && self.hidden == other.hidden
            && crate::query::collation::same(self.collation.as_ref(), other.collation.as_ref())
            && self.text == other.text
    }

    pub fn same_key(&self, other: &Index) -> bool {
        self.fields == other.fields
    }

    /// The keys `doc` gives this index: none when a partial filter
    /// excludes it or a sparse index finds none of its fields.
    pub fn keys_of(&self, doc: &Document) -> Result<DocumentKeys> {
        if let Some((_, filter)) = &self.partial {
            if !filter.matches(doc) {
                return Ok(DocumentKeys::default());
            }
        }
        if let Some(spec) = &self.text {
            return text_keys_of(self, spec, doc);
        }
        let mut per_field: Vec<Vec<Bson>> = Vec::with_capacity(self.fields.len());
        let mut array_fields: Vec<&str> = Vec::new();
        let mut all_missing = true;
        let mut geo_multikey = false;
        for field in &self.fields {
            let parts: Vec<&str> = field.path.split('.').collect();
            let mut values = Vec::new();
            let mut through_array = false;
            collect_document(doc, &parts, &mut values, &mut through_array);
            if let Some(kind) = field.kind.geo() {
                // A document without the geo field has no entry.
                let Some((cells, several)) =
                    geo_keys::field_keys(self.geo.as_ref(), kind, &field.path, doc)?
                else {
                    return Ok(DocumentKeys::default());
                };
                geo_multikey |= several || through_array;
                all_missing = false;
                per_field.push(cells);
                continue;
            }
            if through_array {
                array_fields.push(&field.path);
            }
            if values.is_empty() {
                values.push(Bson::Null);
            } else {
                all_missing = false;
            }
            if field.kind == KeyKind::Hashed {
                if through_array {
                    return Err(Error::new(
                        ErrorCode::HashedIndexOnArray,
                        format!(
                            "Error: hashed indexes do not currently support array values. Found array at path: {}",
                            field.path
                        ),
                    ));
                }
                let hashed = if all_missing_value(doc, &parts) {
                    hash::hash_missing()
                } else {
                    hash::hash_value(&values[0])
                };
                values = vec![Bson::Int64(hashed)];
            }
            per_field.push(values);
        }
        if self.sparse && all_missing {
            return Ok(DocumentKeys::default());
        }
        if array_fields.len() > 1 {
            bail!(
                CannotIndexParallelArrays,
                "cannot index parallel arrays [{}] [{}]",
                array_fields[1],
                array_fields[0]
            );
        }
        let mut out = DocumentKeys {
            keys: Vec::new(),
            multikey: !array_fields.is_empty() || geo_multikey,
        };
        let mut combo: Vec<Bson> = Vec::with_capacity(self.fields.len());
        self.product(&per_field, &mut combo, &mut out.keys);
        out.keys.sort_by(|a, b| a.0.cmp(&b.0));
        out.keys.dedup_by(|a, b| a.0 == b.0);
        Ok(out)
    }

    fn product(
        &self,
        per_field: &[Vec<Bson>],
        combo: &mut Vec<Bson>,
        out: &mut Vec<(Vec<u8>, Vec<Bson>)>,
    ) {
        let depth = combo.len();
        if depth == per_field.len() {
            out.push((self.encode(combo), combo.clone()));
            return;
        }
        for v in &per_field[depth] {
            combo.push(v.clone());
            self.product(per_field, combo, out);
            combo.pop();
        }
    }

    /// The keystring of one key, one value per field. Under a collation
    /// each string is encoded as its collation key, so the index orders
    /// (and a unique index compares) strings by the collation.
    pub fn encode(&self, values: &[Bson]) -> Vec<u8> {
        if let Some(c) = &self.collation {
            let collated: Vec<Bson> = values.iter().map(|v| c.collate_value(v)).collect();
            return self.encode_keys(&collated);
        }
        self.encode_keys(values)
    }

    fn encode_keys(&self, values: &[Bson]) -> Vec<u8> {
        let parts: Vec<(&Bson, bool)> = values
            .iter()
            .zip(&self.fields)
            .map(|(v, f)| (v, f.descending()))
            .collect();
        keystring::encode_key(&parts)
    }
}

// Text indexes (see [`text`] for how they are read): key patterns and
// entries.
use crate::query::text::TERM_FIELD;

/// True when a key pattern describes a text index.
pub fn is_text_pattern(key: &Document) -> bool {
    key.iter()
        .any(|(k, v)| k == TERM_FIELD || matches!(v, Bson::String(s) if s == "text"))
}

/// Parses a text index's key pattern and options: its fields, the key
/// pattern as MongoDB shows it, and its options.
pub fn parse_text_pattern(
    key: &Document,
    spec: &Document,
) -> Result<(Vec<KeyField>, Document, crate::query::text::TextSpec)> {
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
    let text_spec = crate::query::text::TextSpec::parse(&text_fields, spec)?;
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
fn text_keys_of(
    index: &Index,
    spec: &crate::query::text::TextSpec,
    doc: &Document,
) -> Result<DocumentKeys> {
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
    let term_at = index.text_term_position();
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

/// The hash of a hashed field: a missing field hashes as null does.
fn all_missing_value(doc: &Document, parts: &[&str]) -> bool {
    let mut values = Vec::new();
    let mut through_array = false;
    collect_document(doc, parts, &mut values, &mut through_array);
    values.is_empty()
}

fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        Bson::Int32(n) => *n != 0,
        Bson::Int64(n) => *n != 0,
        Bson::Double(n) => *n != 0.0,
        _ => true,
    }
}

/// Checks `expireAfterSeconds` the way MongoDB does.
pub fn parse_expire_after(value: &Bson) -> Result<i64> {
    let secs = match value {
        Bson::Int32(n) => *n as i64,
        Bson::Int64(n) => *n,
        Bson::Double(f) if f.is_finite() && f.fract() == 0.0 => *f as i64,
        Bson::Double(f) if f.is_finite() => f.trunc() as i64,
        _ => bail!(
            CannotCreateIndex,
            "TTL index 'expireAfterSeconds' option must be numeric, but received a type of '{}'",
            crate::query::compare::type_name(value)
        ),
    };
    if !(0..=i32::MAX as i64).contains(&secs) {
        bail!(
            CannotCreateIndex,
            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number: {secs}"
        );
    }
    Ok(secs)
}

/// Parses a key pattern: positive numbers ascend, negative descend,
/// `"hashed"` hashes (at most one field).
pub fn parse_key_pattern(key: &Document) -> Result<Vec<KeyField>> {
    let mut fields = Vec::with_capacity(key.len());
    for (path, value) in key {
        if path.is_empty() || path.split('.').any(str::is_empty) {
            bail!(
                CannotCreateIndex,
                "Index keys cannot be an empty field. Key pattern: {key}"
            );
        }
        if path.starts_with('$') || path.split('.').any(|p| p.starts_with('$')) {
            bail!(
                CannotCreateIndex,
                "Index key contains an illegal field name: field name starts with '$'. Key pattern: {key}"
            );
        }
        let kind = match value {
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                let n = crate::query::compare::Number::of(value)
                    .map(|n| n.to_f64())
                    .unwrap_or(0.0);
                if n > 0.0 {
                    KeyKind::Ascending
                } else if n < 0.0 {
                    KeyKind::Descending
                } else {
                    bail!(
                        CannotCreateIndex,
                        "Values in the index key pattern can't be 0. Key pattern: {key}"
                    )
                }
            }
            Bson::String(s) if s == "hashed" => KeyKind::Hashed,
            Bson::String(s) if s == "2dsphere" => KeyKind::Geo2dSphere,
            Bson::String(s) if s == "2d" => KeyKind::Geo2d,
            // Text key patterns are parsed by `parse_text_pattern`.
            Bson::String(s) if s == "geoHaystack" => {
                bail!(
                    CannotCreateIndex,
                    "'{s}' indexes are not supported; supported kinds are ascending (1), descending (-1), \"hashed\", \"2dsphere\", \"2d\" and \"text\". Key pattern: {key}"
                )
            }
            Bson::String(s) => bail!(
                CannotCreateIndex,
                "Unknown index plugin '{s}' in key pattern {key}"
            ),
            _ => bail!(
                CannotCreateIndex,
                "Values in v:2 index key pattern cannot be of type {}. Only numbers > 0, numbers < 0, and strings are allowed. Key pattern: {key}",
                crate::query::compare::type_name(value)
            ),
        };
        if path.contains("$**") {
            bail!(
                CannotCreateIndex,
                "wildcard indexes are not supported. Key pattern: {key}"
            );
        }
        fields.push(KeyField {
            path: path.clone(),
            kind,
        });
    }
    if fields.iter().filter(|f| f.kind == KeyKind::Hashed).count() > 1 {
        bail!(
            CannotCreateIndex,
            "A maximum of one index field is allowed to be hashed but found 2 for 'key' {key}"
        );
    }
    Ok(fields)
}

/// MongoDB's default index name: `a_1_b_-1`, `k_hashed`.
pub fn default_name(key: &Document) -> String {
    key.iter()
        .map(|(k, v)| {
            let v = match v {
                Bson::String(s) => s.clone(),
                Bson::Int32(n) => n.to_string(),
                Bson::Int64(n) => n.to_string(),
                Bson::Double(f) if f.fract() == 0.0 => format!("{}", *f as i64),
                other => other.to_string(),
            };
            format!("{k}_{v}")
        })
        .collect::<Vec<_>>()
        .join("_")
}

/// Collects the values `parts` reaches in `doc`, MongoDB's way: arrays on
/// the path are expanded (each element document is followed; a leaf array
/// gives each element, an empty one `undefined`); array elements that lack
/// the rest of the path give `null`.
fn collect_document(doc: &Document, parts: &[&str], out: &mut Vec<Bson>, through: &mut bool) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    if let Some(v) = doc.get(*first) {
        collect_value(v, rest, out, through);
    }
}

fn collect_value(v: &Bson, rest: &[&str], out: &mut Vec<Bson>, through: &mut bool) {
    match (v, rest.is_empty()) {
        (Bson::Array(items), true) => {
            *through = true;
            if items.is_empty() {
                out.push(Bson::Undefined);
            }
            out.extend(items.iter().cloned());
        }
        (_, true) => out.push(v.clone()),
        (Bson::Document(d), false) => collect_document(d, rest, out, through),
        (Bson::Array(items), false) => {
            *through = true;
            // A numeric component may name an element position.
            if let Some(pos) = rest[0]
                .parse::<usize>()
                .ok()
                .filter(|_| rest[0].bytes().all(|b| b.is_ascii_digit()))
            {
                if let Some(item) = items.get(pos) {
                    collect_value(item, &rest[1..], out, through);
                    return;
                }
            }
            let before = out.len();
            for item in items {
                if let Bson::Document(d) = item {
                    let n = out.len();
                    collect_document(d, rest, out, through);
                    if out.len() == n {
                        out.push(Bson::Null);
                    }
                }
            }
            if out.len() == before && !items.is_empty() {
                out.push(Bson::Null);
            }
        }
        _ => {}
    }
}

/// What an index entry's value holds: the record's hash, the length of
/// the key's keystring (so the `_id` after it can be found without
/// decoding), and the key values.
pub fn entry_value(hash: i64, key_len: usize, values: &[Bson]) -> Vec<u8> {
    let mut d = Document::new();
    for (i, v) in values.iter().enumerate() {
        d.insert(i.to_string(), v.clone());
    }
    let mut out = hash.to_be_bytes().to_vec();
    out.extend_from_slice(&(key_len as u32).to_be_bytes());
    // A document of valid BSON values always encodes.
    if d.to_writer(&mut out).is_err() {
        out.truncate(12);
    }
    out
}

/// The hash an index entry's value names (the `_id` index of a sharded
/// collection stores it alone).
pub fn entry_hash(value: &[u8]) -> Option<i64> {
    let bytes: [u8; 8] = value.get(..8)?.try_into().ok()?;
    Some(i64::from_be_bytes(bytes))
}

/// The length of the key's keystring in an entry.
pub fn entry_key_len(value: &[u8]) -> Option<usize> {
    let bytes: [u8; 4] = value.get(8..12)?.try_into().ok()?;
    Some(u32::from_be_bytes(bytes) as usize)
}

/// The key values an index entry's value holds.
pub fn entry_values(value: &[u8]) -> Result<Vec<Bson>> {
    let raw = RawDocument::from_bytes(value.get(12..).unwrap_or_default())
        .map_err(|e| err!(InternalError, "corrupt index entry: {e}"))?;
    let mut values = Vec::new();
    for item in raw.iter() {
        let (_, v) = item.map_err(|e| err!(InternalError, "corrupt index entry: {e}"))?;
        values
            .push(Bson::try_from(v).map_err(|e| err!(InternalError, "corrupt index entry: {e}"))?);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(spec: Document) -> Index {
        Index::parse(&spec, 1).unwrap()
    }

    fn values(index: &Index, d: Document) -> Vec<Vec<Bson>> {
        index
            .keys_of(&d)
            .unwrap()
            .keys
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    #[test]
    fn specs_parse_and_show_like_mongodb() {
        let i = index(doc! {"key": {"a": 1, "b": -1}, "name": "ab", "unique": true});
        assert_eq!(
            i.spec(),
            doc! {"v": 2, "key": {"a": 1, "b": -1}, "name": "ab", "unique": true}
        );
        assert_eq!(i.fields[1].kind, KeyKind::Descending);
        let i = index(doc! {"key": {"a.b": "hashed"}});
        assert_eq!(i.name, "a.b_hashed");
        assert_eq!(default_name(&doc! {"a": 1, "b": -1}), "a_1_b_-1");
        let stored = index(doc! {"key": {"t": 1}, "name": "t", "expireAfterSeconds": 5});
        let back = Index::from_stored(&stored.to_stored()).unwrap();
        assert_eq!(back.spec(), stored.spec());
    }

    #[test]
    fn bad_specs_get_mongodb_codes() {
        let code = |spec: Document| Index::parse(&spec, 1).unwrap_err().code;
        assert_eq!(
            code(doc! {"key": {"a": 0}, "name": "x"}),
            ErrorCode::CannotCreateIndex
        );
        assert_eq!(
            code(doc! {"key": {"a": "geoHaystack"}, "name": "x"}),
            ErrorCode::CannotCreateIndex
        );
        assert_eq!(
            code(doc! {"key": {"a": 1}, "name": "x", "bogus": 1}),
            ErrorCode::InvalidIndexSpecificationOption
        );
        assert_eq!(
            code(doc! {"key": {"a": "hashed"}, "name": "x", "unique": true}),
            ErrorCode::CannotCreateIndex
        );
        assert_eq!(
            code(doc! {"key": {"a": 1, "b": 1}, "name": "x", "expireAfterSeconds": 1}),
            ErrorCode::CannotCreateIndex
        );
        assert_eq!(
            code(doc! {"key": {"a": "hashed"}, "name": "x", "collation": {"locale": "fr"}}),
            ErrorCode::CannotCreateIndex
        );
        assert_eq!(
            code(doc! {"key": {"a": 1}, "name": "x", "collation": {"locale": "xx"}}),
            ErrorCode::BadValue
        );
        let collated = index(
            doc! {"key": {"a": 1}, "name": "x", "unique": true, "collation": {"locale": "en", "strength": 2}},
        );
        assert_eq!(
            collated.encode(&["Alice".into()]),
            collated.encode(&["aLICE".into()])
        );
        assert!(collated.encode(&["alice".into()]) < collated.encode(&["Bob".into()]));
        assert_eq!(
            collated
                .spec()
                .get_document("collation")
                .ok()
                .and_then(|c| c.get_i32("strength").ok()),
            Some(2)
        );
        assert_eq!(code(doc! {"name": "x"}), ErrorCode::FailedToParse);
    }

    #[test]
    fn keys_follow_arrays_and_paths() {
        let i = index(doc! {"key": {"a.b": 1}, "name": "x"});
        assert_eq!(
            values(&i, doc! {"a": [{"b": 1}, {"b": [2, 3]}, {"c": 1}]}),
            vec![
                vec![Bson::Null],
                vec![Bson::Int32(1)],
                vec![Bson::Int32(2)],
                vec![Bson::Int32(3)]
            ]
        );
        assert_eq!(values(&i, doc! {"x": 1}), vec![vec![Bson::Null]]);
        assert!(i.keys_of(&doc! {"a": [{"b": 1}]}).unwrap().multikey);
        assert!(!i.keys_of(&doc! {"a": {"b": 1}}).unwrap().multikey);
        let i = index(doc! {"key": {"a": 1}, "name": "x"});
        assert_eq!(values(&i, doc! {"a": []}), vec![vec![Bson::Undefined]]);
        assert_eq!(
            values(&i, doc! {"a": [1, 1, 1.0]}),
            vec![vec![Bson::Int32(1)]]
        );
    }

    #[test]
    fn compound_keys_refuse_parallel_arrays() {
        let i = index(doc! {"key": {"a": 1, "b": 1}, "name": "x"});
        assert_eq!(
            values(&i, doc! {"a": [1, 2], "b": 5}),
            vec![
                vec![Bson::Int32(1), Bson::Int32(5)],
                vec![Bson::Int32(2), Bson::Int32(5)]
            ]
        );
        let e = i.keys_of(&doc! {"a": [1], "b": [2]}).unwrap_err();
        assert_eq!(e.code, ErrorCode::CannotIndexParallelArrays);
        assert_eq!(e.message, "cannot index parallel arrays [b] [a]");
    }

    #[test]
    fn sparse_partial_and_hashed_keys() {
        let i = index(doc! {"key": {"a": 1, "b": 1}, "name": "x", "sparse": true});
        assert!(values(&i, doc! {"c": 1}).is_empty());
        assert_eq!(values(&i, doc! {"b": 1}).len(), 1);
        let i = index(
            doc! {"key": {"a": 1}, "name": "x", "partialFilterExpression": {"n": {"$gt": 5}}},
        );
        assert!(values(&i, doc! {"a": 1, "n": 1}).is_empty());
        assert_eq!(values(&i, doc! {"a": 1, "n": 9}).len(), 1);
        let i = index(doc! {"key": {"a": "hashed"}, "name": "x"});
        assert_eq!(
            values(&i, doc! {"a": "string to hash"}),
            vec![vec![Bson::Int64(763543691661428748)]]
        );
        assert_eq!(
            values(&i, doc! {}),
            vec![vec![Bson::Int64(hash::hash_missing())]]
        );
        assert_eq!(
            i.keys_of(&doc! {"a": [1]}).unwrap_err().code,
            ErrorCode::HashedIndexOnArray
        );
    }

    #[test]
    fn descending_fields_invert_order() {
        let i = index(doc! {"key": {"a": -1}, "name": "x"});
        assert!(i.encode(&[Bson::Int32(2)]) < i.encode(&[Bson::Int32(1)]));
    }

    #[test]
    fn entry_values_round_trip() {
        let v = entry_value(-7, 9, &[Bson::Int32(1), Bson::String("x".into())]);
        assert_eq!(entry_hash(&v), Some(-7));
        assert_eq!(entry_key_len(&v), Some(9));
        assert_eq!(
            entry_values(&v).unwrap(),
            vec![Bson::Int32(1), Bson::String("x".into())]
        );
    }
}
