//! Update documents: the `u` of `update` and `findAndModify`, parsed once and
//! applied to every matched document (or to an upsert's seed).
//!
//! A replacement document (no `$` key first) swaps the whole document but
//! keeps `_id`. Operator updates are parsed, as MongoDB 7.0 does, into a tree
//! with one node per path component: `{$set: {"a.b": 1}, $inc: {"a.c": 1}}`
//! becomes `a -> {b: $set, c: $inc}`. The tree is what makes MongoDB's rules
//! fall out naturally:
//!
//! - two operators on the same path, or on a path and its prefix, meet at a
//!   node while parsing (`ConflictingUpdateOperators`);
//! - children are applied in field-name order (numeric names numerically), so
//!   new fields are appended in that order, not in the order they were
//!   written;
//! - `$[]` / `$[id]` nodes fan out over array elements at apply time, and the
//!   updates that land on one element are merged (a conflict there is only
//!   found at apply time, as in MongoDB).
//!
//! Applying works on a copy of the document and addresses values by concrete
//! path (`["a", "3", "b"]`), looked up afresh for each leaf, so a leaf sees
//! what earlier leaves created. The caller compares the result with the
//! original to count `nModified`: a no-op update returns an identical
//! document.
//!
//! Numbers follow MongoDB's `SafeNum`: int32 results that overflow widen to
//! int64, int64 overflow is an error, anything with a double is a double and
//! anything with a decimal is a decimal (34 digits, round half to even).

mod raw;

pub use raw::RawApplied;

use crate::query::compare::type_name;
use crate::query::compare::DecimalValue;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Document, Timestamp};

use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{compare, values_equal, Canonical, Number};
use crate::query::filter::{Filter, MatchDetails};
use crate::query::path::{
    element_at_path, existing_prefix_len, get_positional, get_positional_mut, update_index,
};
use crate::{bail, err};

/// MongoDB refuses to pad an array by more than this many nulls
/// (`kMaxPaddingAllowed`).
const MAX_PADDING: u64 = 1_500_000;

/// The largest document MongoDB stores; an update that grows a document by
/// more than this is refused before it can allocate without bound (a `$[]`
/// update multiplies its values by the array's length).
const MAX_DOCUMENT_BYTES: usize = crate::base::limits::MAX_BSON_OBJECT_SIZE;

/// MongoDB's nesting limit for stored documents
/// (`BSONDepth::getMaxDepthForUserStorage`).
const MAX_DEPTH: usize = 100;

/// Paths longer than this cannot name anything storable (see [`MAX_DEPTH`]);
/// refusing them at parse time keeps the tree walk's recursion shallow.
const MAX_PATH_PARTS: usize = 200;

/// The field an array element is wrapped under to match a `$pull`
/// condition such as `{$gte: 5}` with [`Filter`].
const PULL_WRAP_FIELD: &str = "pulled";

/// A parsed update: a replacement document or update operators.
#[derive(Debug, Clone)]
pub struct Update {
    kind: UpdateKind,
}

#[derive(Debug, Clone)]
enum UpdateKind {
    Replacement(Document),
    Operators(OperatorUpdate),
    Pipeline(PipelineUpdate),
}

/// An update given as an aggregation pipeline of `$set`/`$addFields`,
/// `$unset`, `$project` and `$replaceRoot`/`$replaceWith` stages. The
/// stages are checked here; running them is the aggregate layer's work
/// (it sits above this one), handed in as a [`PipelineRunner`] when the
/// update is parsed.
#[derive(Clone)]
struct PipelineUpdate {
    stages: Vec<Bson>,
    runner: Arc<dyn PipelineRunner>,
}

/// Runs an update pipeline's stages over one document. The aggregate layer
/// builds it (`aggregate::parse_update`), so this module never imports the
/// stages it checks.
pub trait PipelineRunner: Send + Sync {
    /// The document the stages make of `doc`.
    fn run(&self, doc: Document) -> Result<Document>;
}

/// Builds a [`PipelineRunner`] from stages that passed [`UPDATE_STAGES`];
/// parse errors in the stages surface when the update is parsed, before
/// any document is read.
pub type CompilePipeline<'a> = &'a dyn Fn(&[Bson]) -> Result<Arc<dyn PipelineRunner>>;

impl std::fmt::Debug for PipelineUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PipelineUpdate({:?})", self.stages)
    }
}

/// The stages an update pipeline may hold.
const UPDATE_STAGES: &[&str] = &[
    "$addFields",
    "$project",
    "$replaceRoot",
    "$replaceWith",
    "$set",
    "$unset",
];

impl PipelineUpdate {
    fn parse(stages: &[Bson], compile: CompilePipeline<'_>) -> Result<PipelineUpdate> {
        for stage in stages {
            let Bson::Document(d) = stage else {
                bail!(
                    FailedToParse,
                    "Each element of the update pipeline must be an object"
                );
            };
            let name = d.keys().next().map(String::as_str).unwrap_or_default();
            if !UPDATE_STAGES.contains(&name) {
                bail!(
                    InvalidOptions,
                    "{name} is not allowed to be used within an update"
                );
            }
        }
        Ok(PipelineUpdate {
            stages: stages.to_vec(),
            runner: compile(stages)?,
        })
    }

    /// Runs the stages over `doc`; `_id` may not change.
    fn apply(&self, doc: Document) -> Result<Document> {
        let id = doc.get("_id").cloned();
        let result = self.runner.run(doc)?;
        match (&id, result.get("_id")) {
            (Some(before), Some(after)) if before != after => bail!(
                ImmutableField,
                "Performing an update on the path '_id' would modify the immutable field '_id'"
            ),
            (Some(before), None) => {
                let mut with_id = Document::new();
                with_id.insert("_id", before.clone());
                with_id.extend(result);
                Ok(with_id)
            }
            _ => Ok(result),
        }
    }
}

/// Per-application context.
#[derive(Debug, Clone, Default)]
pub struct ApplyContext {
    /// What the query matched, for the positional `$` operator.
    pub details: MatchDetails,
    /// True when the update builds a new upserted document
    /// (`$setOnInsert` applies only then).
    pub inserting: bool,
}

impl Update {
    /// Parses `u` (a document, or an array of pipeline stages that
    /// `compile` turns into a runner) and the optional `arrayFilters`.
    /// Callers above the aggregate layer use `aggregate::parse_update`.
    pub fn parse_with(
        u: &Bson,
        array_filters: Option<&[Document]>,
        compile: CompilePipeline<'_>,
    ) -> Result<Update> {
        let u = match u {
            Bson::Document(u) => u,
            Bson::Array(stages) => {
                if array_filters.is_some_and(|filters| !filters.is_empty()) {
                    bail!(
                        FailedToParse,
                        "arrayFilters may not be specified for pipeline-style updates"
                    );
                }
                return Ok(Update {
                    kind: UpdateKind::Pipeline(PipelineUpdate::parse(stages, compile)?),
                });
            }
            _ => bail!(
                FailedToParse,
                "Update argument must be either an object or an array"
            ),
        };
        let is_replacement = u.keys().next().is_none_or(|key| !key.starts_with('$'));
        if is_replacement {
            if array_filters.is_some_and(|filters| !filters.is_empty()) {
                bail!(
                    FailedToParse,
                    "arrayFilters may not be specified for replacement-style updates"
                );
            }
            return Ok(Update {
                kind: UpdateKind::Replacement(u.clone()),
            });
        }
        Ok(Update {
            kind: UpdateKind::Operators(OperatorUpdate::parse(u, array_filters.unwrap_or(&[]))?),
        })
    }

    pub fn is_replacement(&self) -> bool {
        matches!(self.kind, UpdateKind::Replacement(_))
    }

    /// The paths the operators name, as written (`a.$[i].b`), including the
    /// source of a `$rename`; `None` for a replacement, which may change
    /// every field. Used to tell whether an update can touch a shard key.
    pub fn modified_paths(&self) -> Option<Vec<String>> {
        match &self.kind {
            UpdateKind::Replacement(_) | UpdateKind::Pipeline(_) => None,
            UpdateKind::Operators(ops) => Some(ops.paths.clone()),
        }
    }

    /// Applies the update to `doc`, returning the new document. Changing
    /// `_id` is an ImmutableField error.
    pub fn apply(&self, doc: &Document, ctx: &ApplyContext) -> Result<Document> {
        match &self.kind {
            UpdateKind::Replacement(replacement) => apply_replacement(doc, replacement),
            UpdateKind::Operators(ops) => ops.apply(doc.clone(), ctx),
            UpdateKind::Pipeline(p) => p.apply(doc.clone()),
        }
    }

    /// The document an upsert inserts, starting from the filter's seed: the
    /// operators applied with `inserting` set, or the replacement with the
    /// seed's `_id`. `_id` comes first, and is a new ObjectId when neither
    /// the seed nor the update gave one.
    pub fn upsert_document(&self, seed: Document) -> Result<Document> {
        let doc = match &self.kind {
            UpdateKind::Replacement(replacement) => {
                // Only `_id` is taken from the query for a replacement.
                let mut start = Document::new();
                if let Some(id) = seed.get("_id") {
                    start.insert("_id", id.clone());
                }
                apply_replacement(&start, replacement)?
            }
            UpdateKind::Operators(ops) => {
                let ctx = ApplyContext {
                    details: MatchDetails::default(),
                    inserting: true,
                };
                ops.apply(seed, &ctx)?
            }
            UpdateKind::Pipeline(p) => p.apply(seed)?,
        };
        let doc = id_first(doc);
        if let Some(id) = doc.get("_id") {
            validate_id(id)?;
        }
        Ok(doc)
    }
}

/// Moves `_id` to the front, generating an ObjectId when there is none.
fn id_first(mut doc: Document) -> Document {
    if doc.keys().next().is_some_and(|key| key == "_id") {
        return doc;
    }
    let id = doc
        .remove("_id")
        .unwrap_or_else(|| Bson::ObjectId(ObjectId::new()));
    let mut out = Document::new();
    out.insert("_id", id);
    out.extend(doc);
    out
}

/// The `_id` types MongoDB refuses to store.
fn validate_id(id: &Bson) -> Result<()> {
    match id {
        Bson::Array(_) | Bson::RegularExpression(_) | Bson::Undefined => bail!(
            InvalidIdField,
            "The '_id' value cannot be of type {}",
            type_name(id)
        ),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// Replacement
// ---------------------------------------------------------------------------

fn apply_replacement(original: &Document, replacement: &Document) -> Result<Document> {
    if documents_identical(original, replacement) {
        return Ok(original.clone());
    }
    for key in replacement.keys() {
        if key.starts_with('$') {
            bail!(
                DollarPrefixedFieldName,
                "The dollar ($) prefixed field '{key}' in '{key}' is not allowed in the context \
                 of an update's replacement document. Consider using an aggregation pipeline \
                 with $replaceWith."
            );
        }
    }
    if let Some(id) = replacement.get("_id") {
        validate_id(id)?;
    }
    if replacement
        .values()
        .any(|value| depth_exceeds(value, MAX_DEPTH - 1))
    {
        bail!(
            Overflow,
            "Document exceeds maximum nesting depth of {MAX_DEPTH}"
        );
    }
    let mut out = Document::new();
    match (original.get("_id"), replacement.get("_id")) {
        (Some(old), Some(new)) if compare(old, new) != Ordering::Equal => bail!(
            ImmutableField,
            "After applying the update, the (immutable) field '_id' was found to have been \
             altered to {}",
            element_string("_id", new)
        ),
        // The stored `_id` keeps its exact value and type (1 and 1.0 are the
        // same key; the original is what storage indexed).
        (Some(old), _) => {
            out.insert("_id", old.clone());
        }
        (None, Some(new)) => {
            out.insert("_id", new.clone());
        }
        (None, None) => {}
    }
    for (key, value) in replacement {
        if key != "_id" {
            out.insert(key.clone(), value.clone());
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Operator updates: parsing
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct OperatorUpdate {
    root: Node,
    array_filters: BTreeMap<String, Arc<Filter>>,
    paths: Vec<String>,
}

/// A node of the update tree. Internal nodes are keyed by path component:
/// an object node's children by field name (`$` is the positional child), an
/// array node's (`$[]` / `$[id]`) by identifier, `""` standing for `$[]`.
#[derive(Debug, Clone)]
enum Node {
    Internal(Internal),
    Leaf(Box<LeafOp>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InternalKind {
    Object,
    Array,
}

#[derive(Debug, Clone)]
struct Internal {
    kind: InternalKind,
    children: BTreeMap<FieldKey, Node>,
}

impl Internal {
    fn new(kind: InternalKind) -> Internal {
        Internal {
            kind,
            children: BTreeMap::new(),
        }
    }
}

/// A field name ordered as MongoDB orders update children
/// (`pathsupport::cmpPathsAndArrayIndexes`): names that start with a digit
/// (and are not zero-padded) by length first, so `"9" < "10"`; others
/// bytewise.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldKey(String);

impl Ord for FieldKey {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        let numeric_like =
            |s: &[u8]| !s.is_empty() && s[0].is_ascii_digit() && (s[0] != b'0' || s.len() == 1);
        if numeric_like(a) && numeric_like(b) && a.len() != b.len() {
            return a.len().cmp(&b.len());
        }
        a.cmp(b)
    }
}

impl PartialOrd for FieldKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The update operators MongoDB 7.0 knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    Set,
    SetOnInsert,
    Unset,
    Inc,
    Mul,
    Min,
    Max,
    Rename,
    CurrentDate,
    Push,
    AddToSet,
    Pop,
    Pull,
    PullAll,
    Bit,
}

impl Operator {
    fn from_name(name: &str) -> Option<Operator> {
        Some(match name {
            "$set" => Operator::Set,
            "$setOnInsert" => Operator::SetOnInsert,
            "$unset" => Operator::Unset,
            "$inc" => Operator::Inc,
            "$mul" => Operator::Mul,
            "$min" => Operator::Min,
            "$max" => Operator::Max,
            "$rename" => Operator::Rename,
            "$currentDate" => Operator::CurrentDate,
            "$push" => Operator::Push,
            "$addToSet" => Operator::AddToSet,
            "$pop" => Operator::Pop,
            "$pull" => Operator::Pull,
            "$pullAll" => Operator::PullAll,
            "$bit" => Operator::Bit,
            _ => return None,
        })
    }
}

/// What a leaf does at its path.
#[derive(Debug, Clone)]
enum LeafOp {
    Set(Bson),
    SetOnInsert(Bson),
    Unset,
    Inc(Bson),
    Mul(Bson),
    Min(Bson),
    Max(Bson),
    CurrentDate {
        timestamp: bool,
    },
    Push(PushSpec),
    /// The values to add, already deduplicated.
    AddToSet(Vec<Bson>),
    Pop {
        front: bool,
    },
    Pull(PullMatcher),
    PullAll(Vec<Bson>),
    Bit(Vec<(BitOp, Bson)>),
    /// Sits at the destination; moves the value from `from`.
    Rename {
        from: Vec<String>,
    },
    /// Sits at a `$rename` source so other operators conflict with it.
    RenameSource,
}

#[derive(Debug, Clone)]
struct PushSpec {
    values: Vec<Bson>,
    slice: Option<i64>,
    sort: Option<PushSort>,
    position: Option<i64>,
}

#[derive(Debug, Clone)]
enum PushSort {
    /// `$sort: 1` / `-1`: whole values.
    Whole { descending: bool },
    /// `$sort: {field: 1, ...}`: (dotted field, descending) pairs.
    Pattern(Vec<(String, bool)>),
}

/// How `$pull` recognises the elements to remove (MongoDB's three matchers).
#[derive(Debug, Clone)]
enum PullMatcher {
    /// `{a: {b: 1}}`: a query over document elements.
    Object(Arc<Filter>),
    /// `{a: {$gte: 5}}` or a regex: the condition on the element itself.
    Wrapped(Arc<Filter>),
    /// Anything else: equality.
    Equal(Bson),
}

impl PullMatcher {
    fn matches(&self, element: &Bson) -> bool {
        match self {
            PullMatcher::Object(filter) => {
                matches!(element, Bson::Document(doc) if filter.matches(doc))
            }
            PullMatcher::Wrapped(filter) => {
                let mut wrapped = Document::new();
                wrapped.insert(PULL_WRAP_FIELD, element.clone());
                filter.matches(&wrapped)
            }
            PullMatcher::Equal(value) => values_equal(element, value),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BitOp {
    And,
    Or,
    Xor,
}

impl OperatorUpdate {
    fn parse(u: &Document, raw_filters: &[Document]) -> Result<OperatorUpdate> {
        let array_filters = parse_array_filters(raw_filters)?;
        let mut tree = TreeBuilder {
            root: Internal::new(InternalKind::Object),
            array_filters: &array_filters,
            used_identifiers: BTreeSet::new(),
        };
        let mut paths = Vec::new();
        for (name, spec) in u {
            let op = Operator::from_name(name).ok_or_else(|| {
                err!(
                    FailedToParse,
                    "Unknown modifier: {name}. Expected a valid update modifier or \
                     pipeline-style update specified as an array"
                )
            })?;
            let Bson::Document(fields) = spec else {
                bail!(
                    FailedToParse,
                    "Modifiers operate on fields but we found type {} instead. For example: \
                     {{$mod: {{<field>: ...}}}} not {{{}}}",
                    type_name(spec),
                    element_string(name, spec)
                );
            };
            for (field, arg) in fields {
                if op == Operator::Rename {
                    tree.add(field, || Ok(LeafOp::RenameSource))?;
                    paths.push(field.clone());
                    let Bson::String(to) = arg else {
                        bail!(
                            BadValue,
                            "The 'to' field for $rename must be a string: {}",
                            element_string(field, arg)
                        );
                    };
                    tree.add(to, || parse_rename(field, to, arg))?;
                    paths.push(to.clone());
                } else {
                    tree.add(field, || parse_leaf(op, field, arg))?;
                    paths.push(field.clone());
                }
            }
        }
        for identifier in array_filters.keys() {
            if !tree.used_identifiers.contains(identifier) {
                bail!(
                    FailedToParse,
                    "The array filter for identifier '{identifier}' was not used in the update {}",
                    value_string(&Bson::Document(u.clone()))
                );
            }
        }
        let root = Node::Internal(tree.root);
        Ok(OperatorUpdate {
            root,
            array_filters,
            paths,
        })
    }

    fn apply(&self, doc: Document, ctx: &ApplyContext) -> Result<Document> {
        let id = doc.get("_id").cloned();
        let now = DateTime::now();
        let mut applier = Applier {
            id_immutable: id.is_some(),
            id,
            doc,
            ctx,
            array_filters: &self.array_filters,
            now,
            growth: 0,
        };
        applier.apply_nodes(&[&self.root], &mut Vec::new())?;
        Ok(applier.doc)
    }
}

/// Parses `arrayFilters` into identifier → filter.
fn parse_array_filters(raw: &[Document]) -> Result<BTreeMap<String, Arc<Filter>>> {
    let mut filters = BTreeMap::new();
    for raw_filter in raw {
        let filter = Filter::parse(raw_filter).map_err(|e| {
            Error::new(
                e.code,
                format!("Error parsing array filter :: caused by :: {}", e.message),
            )
        })?;
        let identifier = top_level_identifier(raw_filter).map_err(|e| {
            Error::new(
                e.code,
                format!("Error parsing array filter :: caused by :: {}", e.message),
            )
        })?;
        let Some(identifier) = identifier else {
            bail!(
                FailedToParse,
                "Cannot use an expression without a top-level field name in arrayFilters"
            );
        };
        if !is_valid_identifier(&identifier) {
            bail!(
                BadValue,
                "Error parsing array filter :: caused by :: The top-level field name must be an \
                 alphanumeric string beginning with a lowercase letter, found '{identifier}'"
            );
        }
        if filters.contains_key(&identifier) {
            bail!(
                FailedToParse,
                "Found multiple array filters with the same top-level field name {identifier}"
            );
        }
        filters.insert(identifier, Arc::new(filter));
    }
    Ok(filters)
}

/// The one top-level field name of an array filter (`elem` in
/// `{"elem.grade": {$gte: 85}}`), looking through `$and`/`$or`/`$nor`.
fn top_level_identifier(filter: &Document) -> Result<Option<String>> {
    let mut found: Option<String> = None;
    let mut note = |name: String| -> Result<()> {
        match &found {
            None => found = Some(name),
            Some(existing) if *existing != name => bail!(
                FailedToParse,
                "Expected a single top-level field name, found '{existing}' and '{name}'"
            ),
            Some(_) => {}
        }
        Ok(())
    };
    for (key, value) in filter {
        match key.as_str() {
            "$and" | "$or" | "$nor" => {
                if let Bson::Array(clauses) = value {
                    for clause in clauses {
                        if let Bson::Document(clause) = clause {
                            if let Some(name) = top_level_identifier(clause)? {
                                note(name)?;
                            }
                        }
                    }
                }
            }
            key if key.starts_with('$') => {}
            key => note(key.split('.').next().unwrap_or(key).to_string())?,
        }
    }
    Ok(found)
}

fn is_valid_identifier(identifier: &str) -> bool {
    let mut chars = identifier.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

/// `$[]` or `$[id]`.
fn is_array_filter_part(part: &str) -> bool {
    part.len() >= 3 && part.starts_with("$[") && part.ends_with(']')
}

struct TreeBuilder<'f> {
    root: Internal,
    array_filters: &'f BTreeMap<String, Arc<Filter>>,
    used_identifiers: BTreeSet<String>,
}

impl TreeBuilder<'_> {
    /// Checks `path` and adds the leaf `make_leaf` builds at its end
    /// (MongoDB's `UpdateObjectNode::parseAndMerge`).
    fn add(&mut self, path: &str, make_leaf: impl FnOnce() -> Result<LeafOp>) -> Result<()> {
        if path.is_empty() {
            return Err(Error::new(
                empty_field_name_code(),
                "An empty update path is not valid.",
            ));
        }
        let parts: Vec<&str> = path.split('.').collect();
        if parts.iter().any(|part| part.is_empty()) {
            return Err(Error::new(
                empty_field_name_code(),
                format!(
                    "The update path '{path}' contains an empty field name, which is not allowed."
                ),
            ));
        }
        let positional: Vec<usize> = (0..parts.len()).filter(|&i| parts[i] == "$").collect();
        if positional.len() > 1 {
            bail!(
                BadValue,
                "Too many positional (i.e. '$') elements found in path '{path}'"
            );
        }
        if positional.first() == Some(&0) {
            bail!(
                BadValue,
                "Cannot have positional (i.e. '$') element in the first position in path '{path}'"
            );
        }
        let leaf = make_leaf()?;
        if parts.len() > MAX_PATH_PARTS {
            bail!(
                Overflow,
                "Document exceeds maximum nesting depth of {MAX_DEPTH}"
            );
        }

        let TreeBuilder {
            root,
            array_filters,
            used_identifiers,
        } = self;
        let mut child_name =
            |i: usize| child_name(array_filters, used_identifiers, &parts, i, path);
        let mut current = root;
        for i in 0..parts.len() - 1 {
            let name = child_name(i)?;
            let want = if is_array_filter_part(parts[i + 1]) {
                InternalKind::Array
            } else {
                InternalKind::Object
            };
            let child = current
                .children
                .entry(FieldKey(name))
                .or_insert_with(|| Node::Internal(Internal::new(want)));
            current = match child {
                Node::Internal(internal) if internal.kind == want => internal,
                _ => bail!(
                    ConflictingUpdateOperators,
                    "Updating the path '{path}' would create a conflict at '{}'",
                    parts[..=i].join(".")
                ),
            };
        }
        let name = FieldKey(child_name(parts.len() - 1)?);
        if current.children.contains_key(&name) {
            bail!(
                ConflictingUpdateOperators,
                "Updating the path '{path}' would create a conflict at '{path}'"
            );
        }
        current.children.insert(name, Node::Leaf(Box::new(leaf)));
        Ok(())
    }
}

/// The key of part `i` in its parent: the part itself, or the identifier of
/// `$[id]` (`""` for `$[]`), which must have a filter.
fn child_name(
    array_filters: &BTreeMap<String, Arc<Filter>>,
    used_identifiers: &mut BTreeSet<String>,
    parts: &[&str],
    i: usize,
    path: &str,
) -> Result<String> {
    let part = parts[i];
    if !is_array_filter_part(part) {
        return Ok(part.to_string());
    }
    if i == 0 {
        bail!(
            BadValue,
            "Cannot have array filter identifier (i.e. '$[<id>]') element in the first \
                 position in path '{path}'"
        );
    }
    let identifier = &part[2..part.len() - 1];
    if !identifier.is_empty() {
        if !array_filters.contains_key(identifier) {
            bail!(
                BadValue,
                "No array filter found for identifier '{identifier}' in path '{path}'"
            );
        }
        used_identifiers.insert(identifier.to_string());
    }
    Ok(identifier.to_string())
}

/// MongoDB reports bad paths as `EmptyFieldName` (56).
fn empty_field_name_code() -> ErrorCode {
    ErrorCode::EmptyFieldName
}

/// MongoDB's `CannotBackfillArray` (34).
fn cannot_backfill_array_code() -> ErrorCode {
    ErrorCode::CannotBackfillArray
}

fn parse_leaf(op: Operator, field: &str, arg: &Bson) -> Result<LeafOp> {
    Ok(match op {
        Operator::Set => LeafOp::Set(arg.clone()),
        Operator::SetOnInsert => LeafOp::SetOnInsert(arg.clone()),
        Operator::Unset => LeafOp::Unset,
        Operator::Inc | Operator::Mul => {
            if Number::of(arg).is_none() {
                bail!(
                    TypeMismatch,
                    "Cannot {} with non-numeric argument: {{{}}}",
                    if op == Operator::Inc {
                        "increment"
                    } else {
                        "multiply"
                    },
                    element_string(field, arg)
                );
            }
            if op == Operator::Inc {
                LeafOp::Inc(arg.clone())
            } else {
                LeafOp::Mul(arg.clone())
            }
        }
        Operator::Min => LeafOp::Min(arg.clone()),
        Operator::Max => LeafOp::Max(arg.clone()),
        Operator::CurrentDate => parse_current_date(arg)?,
        Operator::Push => LeafOp::Push(parse_push(arg)?),
        Operator::AddToSet => LeafOp::AddToSet(parse_add_to_set(arg)?),
        Operator::Pop => {
            let n = parse_integer(field, arg)?;
            if n != 1 && n != -1 {
                bail!(FailedToParse, "$pop expects 1 or -1, found: {n}");
            }
            LeafOp::Pop { front: n == -1 }
        }
        Operator::Pull => LeafOp::Pull(parse_pull(arg)?),
        Operator::PullAll => {
            let Bson::Array(values) = arg else {
                bail!(
                    BadValue,
                    "$pullAll requires an array argument but was given a {}",
                    type_name(arg)
                );
            };
            LeafOp::PullAll(values.clone())
        }
        Operator::Bit => LeafOp::Bit(parse_bit(arg)?),
        // $rename is parsed by parse_rename, the source by the caller.
        Operator::Rename => LeafOp::RenameSource,
    })
}

fn parse_rename(from: &str, to: &str, arg: &Bson) -> Result<LeafOp> {
    if to.contains('\0') {
        bail!(
            BadValue,
            "The 'to' field for $rename cannot contain an embedded null byte"
        );
    }
    let from_parts: Vec<String> = from.split('.').map(str::to_string).collect();
    let to_parts: Vec<&str> = to.split('.').collect();
    if from_parts
        .iter()
        .map(String::as_str)
        .eq(to_parts.iter().copied())
    {
        bail!(
            BadValue,
            "The source and target field for $rename must differ: {}",
            element_string(from, arg)
        );
    }
    let is_prefix = |a: &[&str], b: &[&str]| a.len() < b.len() && b.starts_with(a);
    let from_refs: Vec<&str> = from_parts.iter().map(String::as_str).collect();
    if is_prefix(&from_refs, &to_parts) || is_prefix(&to_parts, &from_refs) {
        bail!(
            BadValue,
            "The source and target field for $rename must not be on the same path: {}",
            element_string(from, arg)
        );
    }
    let dynamic = |parts: &[&str]| {
        parts
            .iter()
            .any(|part| *part == "$" || is_array_filter_part(part))
    };
    if dynamic(&from_refs) {
        bail!(
            BadValue,
            "The source field for $rename may not be dynamic: {from}"
        );
    }
    if dynamic(&to_parts) {
        bail!(
            BadValue,
            "The destination field for $rename may not be dynamic: {to}"
        );
    }
    Ok(LeafOp::Rename { from: from_parts })
}

fn parse_current_date(arg: &Bson) -> Result<LeafOp> {
    match arg {
        Bson::Boolean(_) => Ok(LeafOp::CurrentDate { timestamp: false }),
        Bson::Document(spec) => {
            let mut timestamp = None;
            for (key, value) in spec {
                if key != "$type" {
                    bail!(BadValue, "Unrecognized $currentDate option: {key}");
                }
                match value {
                    Bson::String(s) if s == "date" => timestamp = Some(false),
                    Bson::String(s) if s == "timestamp" => timestamp = Some(true),
                    _ => {}
                }
            }
            match timestamp {
                Some(timestamp) => Ok(LeafOp::CurrentDate { timestamp }),
                None => bail!(
                    BadValue,
                    "The '$type' string field is required to be 'date' or 'timestamp': \
                     {{$currentDate: {{field : {{$type: 'date'}}}}}}"
                ),
            }
        }
        other => bail!(
            BadValue,
            "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type \
             expression ({{$type: 'timestamp/date'}}).",
            type_name(other)
        ),
    }
}

/// MongoDB's `parseIntegerElementToLong`: an integral number.
fn parse_integer(field: &str, value: &Bson) -> Result<i64> {
    match value {
        Bson::Int32(n) => Ok(i64::from(*n)),
        Bson::Int64(n) => Ok(*n),
        Bson::Double(d) => {
            if d.is_nan() {
                bail!(
                    FailedToParse,
                    "Expected an integer, but found NaN in: {}",
                    element_string(field, value)
                );
            }
            // 2^63 as a double; anything at or above it does not fit.
            if *d >= 9_223_372_036_854_775_808.0 || *d < -9_223_372_036_854_775_808.0 {
                bail!(
                    FailedToParse,
                    "Cannot represent as a 64-bit integer: {}",
                    element_string(field, value)
                );
            }
            if d.fract() != 0.0 {
                bail!(
                    FailedToParse,
                    "Expected an integer: {}",
                    element_string(field, value)
                );
            }
            Ok(*d as i64)
        }
        Bson::Decimal128(d) => match DecimalValue::from_decimal128(d).to_i64_exact() {
            Some(n) => Ok(n),
            None => bail!(
                FailedToParse,
                "Expected an integer: {}",
                element_string(field, value)
            ),
        },
        _ => bail!(
            FailedToParse,
            "Expected a number in: {}",
            element_string(field, value)
        ),
    }
}

fn parse_push(arg: &Bson) -> Result<PushSpec> {
    let plain = PushSpec {
        values: vec![arg.clone()],
        slice: None,
        sort: None,
        position: None,
    };
    let Bson::Document(spec) = arg else {
        return Ok(plain);
    };
    if !spec.contains_key("$each") {
        return Ok(plain);
    }
    for key in spec.keys() {
        if !matches!(key.as_str(), "$each" | "$slice" | "$sort" | "$position") {
            bail!(BadValue, "Unrecognized clause in $push: {key}");
        }
    }
    let values = match spec.get("$each") {
        Some(Bson::Array(values)) => values.clone(),
        Some(other) => bail!(
            BadValue,
            "The argument to $each in $push must be an array but it was of type: {}",
            type_name(other)
        ),
        None => Vec::new(),
    };
    let slice = match spec.get("$slice") {
        Some(value) => Some(parse_integer("$slice", value).map_err(|_| {
            err!(
                BadValue,
                "The value for $slice must be an integer value but was given type: {}",
                type_name(value)
            )
        })?),
        None => None,
    };
    let sort = match spec.get("$sort") {
        Some(value) => Some(parse_push_sort(value)?),
        None => None,
    };
    let position = match spec.get("$position") {
        Some(value) => Some(parse_integer("$position", value).map_err(|_| {
            err!(
                BadValue,
                "The value for $position must be an integer value, not of type: {}",
                type_name(value)
            )
        })?),
        None => None,
    };
    Ok(PushSpec {
        values,
        slice,
        sort,
        position,
    })
}

fn parse_push_sort(value: &Bson) -> Result<PushSort> {
    let direction = |v: &Bson| -> Option<bool> {
        let order = Number::of(v)?.to_f64();
        if order == 1.0 {
            Some(false)
        } else if order == -1.0 {
            Some(true)
        } else {
            None
        }
    };
    match value {
        Bson::Document(pattern) => {
            if pattern.is_empty() {
                bail!(
                    BadValue,
                    "The $sort pattern is empty when it should be a set of fields."
                );
            }
            let mut fields = Vec::new();
            for (field, order) in pattern {
                let Some(descending) = direction(order) else {
                    bail!(BadValue, "The $sort element value must be either 1 or -1");
                };
                if field.is_empty() {
                    bail!(BadValue, "The $sort field cannot be empty");
                }
                if field.split('.').any(str::is_empty) {
                    bail!(
                        BadValue,
                        "The $sort field is a dotted field but has an empty part: {field}"
                    );
                }
                fields.push((field.clone(), descending));
            }
            Ok(PushSort::Pattern(fields))
        }
        v if Number::of(v).is_some() => match direction(v) {
            Some(descending) => Ok(PushSort::Whole { descending }),
            None => bail!(BadValue, "The $sort element value must be either 1 or -1"),
        },
        _ => bail!(
            BadValue,
            "The $sort is invalid: use 1/-1 to sort the whole element, or {{field:1/-1}} to \
             sort embedded fields"
        ),
    }
}

fn parse_add_to_set(arg: &Bson) -> Result<Vec<Bson>> {
    let values = match arg {
        Bson::Document(spec) if spec.keys().next().is_some_and(|k| k == "$each") => {
            let Some(Bson::Array(values)) = spec.get("$each") else {
                let each = spec.get("$each").unwrap_or(&Bson::Null);
                bail!(
                    TypeMismatch,
                    "The argument to $each in $addToSet must be an array but it was of type {}",
                    type_name(each)
                );
            };
            if spec.len() > 1 {
                bail!(
                    BadValue,
                    "Found unexpected fields after $each in $addToSet: {}",
                    value_string(arg)
                );
            }
            values.clone()
        }
        other => vec![other.clone()],
    };
    // Deduplicated through an ordered set: `$each` of 100,000 values is
    // O(n log n), not a scan of the kept values per value.
    let mut seen = BTreeSet::new();
    let keep: Vec<bool> = values
        .iter()
        .map(|value| seen.insert(Canonical(value)))
        .collect();
    drop(seen);
    Ok(values
        .into_iter()
        .zip(keep)
        .filter_map(|(value, keep)| keep.then_some(value))
        .collect())
}

/// Query operators that take a path (`MatchExpressionParser::
/// parsePathAcceptingKeyword`): a `$pull` condition starting with one of
/// these is about the element itself.
const PATH_ACCEPTING_KEYWORDS: &[&str] = &[
    "$eq",
    "$ne",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$exists",
    "$type",
    "$mod",
    "$regex",
    "$options",
    "$elemMatch",
    "$all",
    "$size",
    "$not",
    "$bitsAllSet",
    "$bitsAllClear",
    "$bitsAnySet",
    "$bitsAnyClear",
    "$geoWithin",
    "$geoIntersects",
    "$within",
    "$near",
    "$nearSphere",
    "$geoNear",
];

fn parse_pull(arg: &Bson) -> Result<PullMatcher> {
    match arg {
        Bson::Document(condition) => {
            let first = condition.keys().next();
            if first.is_some_and(|key| PATH_ACCEPTING_KEYWORDS.contains(&key.as_str())) {
                let mut wrapped = Document::new();
                wrapped.insert(PULL_WRAP_FIELD, arg.clone());
                Ok(PullMatcher::Wrapped(Arc::new(Filter::parse(&wrapped)?)))
            } else {
                Ok(PullMatcher::Object(Arc::new(Filter::parse(condition)?)))
            }
        }
        Bson::RegularExpression(_) => {
            let mut wrapped = Document::new();
            wrapped.insert(PULL_WRAP_FIELD, arg.clone());
            Ok(PullMatcher::Wrapped(Arc::new(Filter::parse(&wrapped)?)))
        }
        other => Ok(PullMatcher::Equal(other.clone())),
    }
}

fn parse_bit(arg: &Bson) -> Result<Vec<(BitOp, Bson)>> {
    let Bson::Document(spec) = arg else {
        bail!(
            BadValue,
            "The $bit modifier is not compatible with a {}. You must pass in an embedded \
             document: {{$bit: {{field: {{and/or/xor: #}}}}",
            type_name(arg)
        );
    };
    if spec.is_empty() {
        bail!(
            BadValue,
            "You must pass in at least one bitwise operation. The format is: {{$bit: {{field: \
             {{and/or/xor: #}}}}"
        );
    }
    let mut ops = Vec::new();
    for (name, value) in spec {
        let op = match name.as_str() {
            "and" => BitOp::And,
            "or" => BitOp::Or,
            "xor" => BitOp::Xor,
            _ => bail!(
                BadValue,
                "The $bit modifier only supports 'and', 'or', and 'xor', not '{name}' which is \
                 an unknown operator: {{{}}}",
                element_string(name, value)
            ),
        };
        if !matches!(value, Bson::Int32(_) | Bson::Int64(_)) {
            bail!(
                BadValue,
                "The $bit modifier field must be an Integer(32/64 bit); a '{}' is not supported \
                 here: {{{}}}",
                type_name(value),
                element_string(name, value)
            );
        }
        ops.push((op, value.clone()));
    }
    Ok(ops)
}

// ---------------------------------------------------------------------------
// Operator updates: applying
// ---------------------------------------------------------------------------

struct Applier<'a> {
    doc: Document,
    ctx: &'a ApplyContext,
    array_filters: &'a BTreeMap<String, Arc<Filter>>,
    /// The original `_id`, for messages.
    id: Option<Bson>,
    /// `_id` may not change once the document has one (an upsert's seed
    /// without `_id` may still get one from the update).
    id_immutable: bool,
    now: DateTime,
    /// Estimated bytes this update added, checked against
    /// [`MAX_DOCUMENT_BYTES`].
    growth: usize,
}

impl Applier<'_> {
    /// Applies the nodes that all address `path`. More than one happens when
    /// `$[]`, `$[id]` and `$` land on the same element; MongoDB merges them,
    /// and a leaf among them is a conflict.
    fn apply_nodes(&mut self, nodes: &[&Node], path: &mut Vec<String>) -> Result<()> {
        let mut internals = Vec::with_capacity(nodes.len());
        for node in nodes {
            match node {
                Node::Leaf(leaf) if nodes.len() == 1 => return self.apply_leaf(leaf, path),
                Node::Leaf(_) => return Err(update_conflict(path)),
                Node::Internal(internal) => internals.push(internal),
            }
        }
        let Some(first) = internals.first() else {
            return Ok(());
        };
        if internals.iter().any(|node| node.kind != first.kind) {
            return Err(update_conflict(path));
        }
        match first.kind {
            InternalKind::Object => self.apply_object(&internals, path),
            InternalKind::Array => self.apply_array(&internals, path),
        }
    }

    fn apply_object(&mut self, nodes: &[&Internal], path: &mut Vec<String>) -> Result<()> {
        let positional = FieldKey("$".to_string());
        let matched = if nodes
            .iter()
            .any(|node| node.children.contains_key(&positional))
        {
            match self.ctx.details.array_position {
                Some(position) => Some(FieldKey(position.to_string())),
                None => bail!(
                    BadValue,
                    "The positional operator did not find the match needed from the query."
                ),
            }
        } else {
            None
        };
        let mut groups: BTreeMap<&FieldKey, Vec<&Node>> = BTreeMap::new();
        for node in nodes {
            for (key, child) in &node.children {
                let key = match &matched {
                    Some(matched) if *key == positional => matched,
                    _ => key,
                };
                groups.entry(key).or_default().push(child);
            }
        }
        for (key, group) in groups {
            path.push(key.0.clone());
            let result = self.apply_nodes(&group, path);
            path.pop();
            result?;
        }
        Ok(())
    }

    fn apply_array(&mut self, nodes: &[&Internal], path: &mut Vec<String>) -> Result<()> {
        let array = match get_positional(&self.doc, path) {
            Some(Bson::Array(array)) => array,
            Some(other) => bail!(
                BadValue,
                "Cannot apply array updates to non-array element {}",
                element_string(path.last().map_or("", String::as_str), other)
            ),
            None => bail!(
                BadValue,
                "The path '{}' must exist in the document in order to apply array updates.",
                path.join(".")
            ),
        };
        // Match every element first, as MongoDB does, then apply.
        let mut matching: Vec<(usize, Vec<&Node>)> = Vec::new();
        for (index, element) in array.iter().enumerate() {
            crate::query::interrupt::check()?;
            let mut updates = Vec::new();
            for node in nodes {
                for (identifier, child) in &node.children {
                    if identifier.0.is_empty()
                        || self
                            .array_filters
                            .get(&identifier.0)
                            .is_some_and(|filter| filter_matches(filter, &identifier.0, element))
                    {
                        updates.push(child);
                    }
                }
            }
            if !updates.is_empty() {
                matching.push((index, updates));
            }
        }
        for (index, updates) in matching {
            path.push(index.to_string());
            let result = self.apply_nodes(&updates, path);
            path.pop();
            result?;
        }
        Ok(())
    }

    fn apply_leaf(&mut self, op: &LeafOp, path: &[String]) -> Result<()> {
        match op {
            LeafOp::RenameSource => return Ok(()),
            LeafOp::SetOnInsert(_) if !self.ctx.inserting => return Ok(()),
            LeafOp::Rename { from } => return self.apply_rename(from, path),
            _ => {}
        }
        let found = existing_prefix_len(&self.doc, path);
        if found == path.len() {
            self.update_existing(op, path)
        } else {
            self.update_missing(op, path, found)
        }
    }

    fn update_existing(&mut self, op: &LeafOp, path: &[String]) -> Result<()> {
        if let LeafOp::Unset = op {
            self.check_immutable(path)?;
            remove_at(&mut self.doc, path);
            return Ok(());
        }
        let env = OpEnv {
            id: self.id.as_ref(),
            path,
            now: self.now,
        };
        let Some(target) = get_positional_mut(&mut self.doc, path) else {
            return Err(Error::internal(format!(
                "update path {} vanished",
                path.join(".")
            )));
        };
        let outcome = modify_existing(op, target, &env)?;
        let Outcome::Changed { added } = outcome else {
            return Ok(());
        };
        self.check_immutable(path)?;
        if op.may_deepen() {
            if let Some(value) = get_positional(&self.doc, path) {
                check_depth(path.len(), value)?;
            }
        }
        self.grow(added)
    }

    fn update_missing(&mut self, op: &LeafOp, path: &[String], found: usize) -> Result<()> {
        match op {
            LeafOp::Unset => return Ok(()),
            LeafOp::Pop { .. } | LeafOp::Pull(_) | LeafOp::PullAll(_) => {
                return self.check_viable(path, found)
            }
            _ => {}
        }
        let value = new_value(op, self.now)?;
        let added = approx_size(&value);
        create_path(&mut self.doc, path, found, value, &mut self.growth)?;
        if let Some(value) = get_positional(&self.doc, path) {
            check_depth(path.len(), value)?;
        }
        if self.id_immutable && path[0] == "_id" {
            bail!(
                ImmutableField,
                "Updating the path '{}' to {} would modify the immutable field '_id'",
                path.join("."),
                get_positional(&self.doc, &path[..1])
                    .map_or(String::new(), |v| element_string("_id", v))
            );
        }
        self.grow(added)
    }

    /// For operators that never create (`$pop`, `$pull`, `$pullAll`): a
    /// missing path is a no-op unless it runs through a scalar.
    fn check_viable(&self, path: &[String], found: usize) -> Result<()> {
        let Some(base) = (found > 0)
            .then(|| get_positional(&self.doc, &path[..found]))
            .flatten()
        else {
            return Ok(());
        };
        match base {
            Bson::Document(_) => Ok(()),
            Bson::Array(_) if update_index(&path[found]).is_some() => Ok(()),
            other => bail!(
                PathNotViable,
                "Cannot use the part ({}) of ({}) to traverse the element ({{{}}})",
                path[found],
                path.join("."),
                element_string(&path[found - 1], other)
            ),
        }
    }

    fn check_immutable(&self, path: &[String]) -> Result<()> {
        if self.id_immutable && path[0] == "_id" {
            bail!(
                ImmutableField,
                "Performing an update on the path '{}' would modify the immutable field '_id'",
                path.join(".")
            );
        }
        Ok(())
    }

    fn grow(&mut self, added: usize) -> Result<()> {
        self.growth = self.growth.saturating_add(added);
        if self.growth > MAX_DOCUMENT_BYTES {
            bail!(
                BSONObjectTooLarge,
                "Resulting document after update is larger than {MAX_DOCUMENT_BYTES}"
            );
        }
        Ok(())
    }

    /// `$rename` at destination `to`: a `$set` of the source's value at `to`
    /// followed by an `$unset` of the source, neither through an array.
    fn apply_rename(&mut self, from: &[String], to: &[String]) -> Result<()> {
        match find_longest_prefix(&self.doc, from) {
            Prefix::Missing => return Ok(()),
            Prefix::NotViable { part, element } => bail!(
                PathNotViable,
                "cannot use the part ({part} of {}) to traverse the element ({{{element}}})",
                from.join(".")
            ),
            Prefix::Found => {}
        }
        let id_string = || {
            self.id
                .as_ref()
                .map_or("no id".to_string(), |id| element_string("_id", id))
        };
        for k in (1..from.len()).rev() {
            if let Some(Bson::Array(_)) = get_positional(&self.doc, &from[..k]) {
                bail!(
                    BadValue,
                    "The source field cannot be an array element, '{}' in doc with {} has an \
                     array field called '{}'",
                    from.join("."),
                    id_string(),
                    from[k - 1]
                );
            }
        }
        let found = existing_prefix_len(&self.doc, to);
        let start = if found == to.len() { found - 1 } else { found };
        for k in (1..=start).rev() {
            if let Some(Bson::Array(_)) = get_positional(&self.doc, &to[..k]) {
                bail!(
                    BadValue,
                    "The destination field cannot be an array element, '{}' in doc with {} has \
                     an array field called '{}'",
                    to.join("."),
                    id_string(),
                    to[k - 1]
                );
            }
        }
        let Some(value) = get_positional(&self.doc, from).cloned() else {
            return Ok(());
        };
        if found == to.len() {
            let Some(target) = get_positional_mut(&mut self.doc, to) else {
                return Ok(());
            };
            // Equal (not identical) values leave the destination alone.
            if compare(target, &value) != Ordering::Equal {
                *target = value;
                self.check_immutable(to)?;
            }
        } else {
            create_path(&mut self.doc, to, found, value, &mut self.growth)?;
            if self.id_immutable && to[0] == "_id" {
                bail!(
                    ImmutableField,
                    "Updating the path '{}' would modify the immutable field '_id'",
                    to.join(".")
                );
            }
        }
        if self.id_immutable && from[0] == "_id" {
            bail!(
                ImmutableField,
                "Unsetting the path '{}' using $rename would modify the immutable field '_id'",
                from.join(".")
            );
        }
        remove_at(&mut self.doc, from);
        Ok(())
    }
}

fn update_conflict(path: &[String]) -> Error {
    err!(
        ConflictingUpdateOperators,
        "Update created a conflict at '{}'",
        path.join(".")
    )
}

/// Whether array element `element` passes the array filter for
/// `identifier` (the filter sees `{identifier: element}`).
fn filter_matches(filter: &Filter, identifier: &str, element: &Bson) -> bool {
    let mut wrapped = Document::new();
    wrapped.insert(identifier, element.clone());
    filter.matches(&wrapped)
}

impl LeafOp {
    /// Whether the operator can put new nesting into the document.
    fn may_deepen(&self) -> bool {
        matches!(
            self,
            LeafOp::Set(_) | LeafOp::SetOnInsert(_) | LeafOp::Push(_) | LeafOp::AddToSet(_)
        )
    }
}

/// What an existing-element update needs besides the element.
struct OpEnv<'a> {
    id: Option<&'a Bson>,
    path: &'a [String],
    now: DateTime,
}

impl OpEnv<'_> {
    fn field_name(&self) -> &str {
        self.path.last().map_or("", String::as_str)
    }

    /// `_id: 1` for messages, or `""` without one.
    fn id_string(&self) -> String {
        self.id
            .map_or(String::new(), |id| element_string("_id", id))
    }
}

enum Outcome {
    Unchanged,
    /// `added` estimates the bytes the update put into the document.
    Changed {
        added: usize,
    },
}

fn modify_existing(op: &LeafOp, target: &mut Bson, env: &OpEnv) -> Result<Outcome> {
    match op {
        LeafOp::Set(value) | LeafOp::SetOnInsert(value) => {
            if identical(target, value) {
                return Ok(Outcome::Unchanged);
            }
            *target = value.clone();
            Ok(Outcome::Changed {
                added: approx_size(value),
            })
        }
        LeafOp::Inc(arg) | LeafOp::Mul(arg) => {
            let is_inc = matches!(op, LeafOp::Inc(_));
            let name = if is_inc { "$inc" } else { "$mul" };
            let Some(current) = Number::of(target) else {
                bail!(
                    TypeMismatch,
                    "Cannot apply {name} to a value of non-numeric type. {{{}}} has the field \
                     '{}' of non-numeric type {}",
                    env.id_string(),
                    env.field_name(),
                    type_name(target)
                );
            };
            let Some(operand) = Number::of(arg) else {
                return Ok(Outcome::Unchanged);
            };
            let result = if is_inc {
                current.checked_add(operand)
            } else {
                current.combine_checked(operand, i64::checked_mul, |a, b| a * b, DecimalValue::mul)
            };
            let Some(result) = result else {
                bail!(
                    BadValue,
                    "Failed to apply {name} operations to current value ({}) for document {{{}}}",
                    safe_num_string(current),
                    if env.id.is_some() {
                        env.id_string()
                    } else {
                        "no id".to_string()
                    }
                );
            };
            set_if_different(target, result.into_bson())
        }
        LeafOp::Min(value) | LeafOp::Max(value) => {
            let wanted = if matches!(op, LeafOp::Min(_)) {
                Ordering::Greater
            } else {
                Ordering::Less
            };
            if compare(target, value) != wanted {
                return Ok(Outcome::Unchanged);
            }
            *target = value.clone();
            Ok(Outcome::Changed {
                added: approx_size(value),
            })
        }
        LeafOp::CurrentDate { timestamp } => {
            *target = current_date(*timestamp, env.now);
            Ok(Outcome::Changed { added: 8 })
        }
        LeafOp::Push(spec) => {
            let Bson::Array(array) = target else {
                bail!(
                    BadValue,
                    "The field '{}' must be an array but is of type {} in document {{{}}}",
                    env.path.join("."),
                    type_name(target),
                    env.id
                        .map_or("no id".to_string(), |id| element_string("_id", id))
                );
            };
            // Only `$sort` or `$slice` can leave the array as it was; a
            // plain push always changes it, without copying it first.
            let before = (spec.sort.is_some() || spec.slice.is_some()).then(|| array.clone());
            let grows = !spec.values.is_empty();
            push_into(array, spec);
            let changed = match before {
                Some(before) => !arrays_identical(&before, array),
                None => grows,
            };
            if changed {
                Ok(Outcome::Changed {
                    added: spec.values.iter().map(approx_size).sum(),
                })
            } else {
                Ok(Outcome::Unchanged)
            }
        }
        LeafOp::AddToSet(values) => {
            let Bson::Array(array) = target else {
                bail!(
                    BadValue,
                    "Cannot apply $addToSet to non-array field. Field named '{}' has non-array \
                     type {}",
                    env.field_name(),
                    type_name(target)
                );
            };
            let present = ValueLookup::of(array);
            let missing: Vec<&Bson> = values
                .iter()
                .filter(|value| !present.contains(value))
                .collect();
            if missing.is_empty() {
                return Ok(Outcome::Unchanged);
            }
            let added = missing.iter().map(|value| approx_size(value)).sum();
            array.extend(missing.into_iter().cloned());
            Ok(Outcome::Changed { added })
        }
        LeafOp::Pop { front } => {
            let Bson::Array(array) = target else {
                bail!(
                    TypeMismatch,
                    "Path '{}' contains an element of non-array type '{}'",
                    env.path.join("."),
                    type_name(target)
                );
            };
            if array.is_empty() {
                return Ok(Outcome::Unchanged);
            }
            if *front {
                array.remove(0);
            } else {
                array.pop();
            }
            Ok(Outcome::Changed { added: 0 })
        }
        LeafOp::Pull(_) | LeafOp::PullAll(_) => {
            let Bson::Array(array) = target else {
                bail!(BadValue, "Cannot apply $pull to a non-array value");
            };
            let before = array.len();
            match op {
                LeafOp::Pull(matcher) => array.retain(|element| !matcher.matches(element)),
                LeafOp::PullAll(values) => {
                    let pulled = ValueLookup::of(values);
                    let keep: Vec<bool> = array.iter().map(|e| !pulled.contains(e)).collect();
                    drop(pulled);
                    let mut keep = keep.into_iter();
                    array.retain(|_| keep.next().unwrap_or(true));
                }
                _ => {}
            }
            if array.len() == before {
                Ok(Outcome::Unchanged)
            } else {
                Ok(Outcome::Changed { added: 0 })
            }
        }
        LeafOp::Bit(ops) => {
            if !matches!(target, Bson::Int32(_) | Bson::Int64(_)) {
                bail!(
                    BadValue,
                    "Cannot apply $bit to a value of non-integral type.{{{}}} has the field {} \
                     of non-integer type {}",
                    env.id_string(),
                    env.field_name(),
                    type_name(target)
                );
            }
            let result = apply_bits(target, ops);
            set_if_different(target, result)
        }
        // Handled by the caller.
        LeafOp::Unset | LeafOp::Rename { .. } | LeafOp::RenameSource => Ok(Outcome::Unchanged),
    }
}

/// Membership in a list of values by MongoDB equality: a scan for a few
/// values, an ordered set for many, so that `$addToSet` and `$pullAll`
/// with many values stay O(n log n).
enum ValueLookup<'a> {
    Few(&'a [Bson]),
    Many(BTreeSet<Canonical<'a>>),
}

impl<'a> ValueLookup<'a> {
    fn of(values: &'a [Bson]) -> ValueLookup<'a> {
        if values.len() <= 16 {
            ValueLookup::Few(values)
        } else {
            ValueLookup::Many(values.iter().map(Canonical).collect())
        }
    }

    fn contains(&self, value: &Bson) -> bool {
        match self {
            ValueLookup::Few(values) => values.iter().any(|v| values_equal(v, value)),
            ValueLookup::Many(set) => set.contains(&Canonical(value)),
        }
    }
}

fn set_if_different(target: &mut Bson, value: Bson) -> Result<Outcome> {
    if identical(target, &value) {
        return Ok(Outcome::Unchanged);
    }
    let added = approx_size(&value);
    *target = value;
    Ok(Outcome::Changed { added })
}

/// The value a creating operator puts at a path that does not exist yet.
fn new_value(op: &LeafOp, now: DateTime) -> Result<Bson> {
    Ok(match op {
        LeafOp::Set(value)
        | LeafOp::SetOnInsert(value)
        | LeafOp::Min(value)
        | LeafOp::Max(value)
        | LeafOp::Inc(value) => value.clone(),
        LeafOp::Mul(value) => match Number::of(value) {
            // Multiplying "nothing" gives a zero of the argument's type.
            Some(n) => n
                .combine_checked(
                    Number::Int32(0),
                    i64::checked_mul,
                    |a, b| a * b,
                    DecimalValue::mul,
                )
                .map_or(Bson::Int32(0), Number::into_bson),
            None => Bson::Int32(0),
        },
        LeafOp::CurrentDate { timestamp } => current_date(*timestamp, now),
        LeafOp::Push(spec) => {
            let mut array = Vec::new();
            push_into(&mut array, spec);
            Bson::Array(array)
        }
        LeafOp::AddToSet(values) => Bson::Array(values.clone()),
        LeafOp::Bit(ops) => apply_bits(&Bson::Int32(0), ops),
        LeafOp::Unset
        | LeafOp::Pop { .. }
        | LeafOp::Pull(_)
        | LeafOp::PullAll(_)
        | LeafOp::Rename { .. }
        | LeafOp::RenameSource => {
            return Err(Error::internal("operator does not create fields"));
        }
    })
}

fn current_date(timestamp: bool, now: DateTime) -> Bson {
    if timestamp {
        let secs = now.timestamp_millis().div_euclid(1000);
        Bson::Timestamp(Timestamp {
            time: u32::try_from(secs).unwrap_or(u32::MAX),
            increment: 1,
        })
    } else {
        Bson::DateTime(now)
    }
}

/// `$push`: insert at `$position`, then `$sort`, then `$slice`.
fn push_into(array: &mut Vec<Bson>, spec: &PushSpec) {
    if !spec.values.is_empty() {
        let len = array.len();
        let position = spec.position.unwrap_or(i64::MAX);
        let at = if len == 0 {
            0
        } else if position >= 0 {
            usize::try_from(position).map_or(len, |p| p.min(len))
        } else {
            match usize::try_from(position.unsigned_abs()) {
                Ok(back) if back < len => len - back,
                _ => 0,
            }
        };
        array.splice(at..at, spec.values.iter().cloned());
    }
    if let Some(sort) = &spec.sort {
        array.sort_by(|a, b| compare_for_push_sort(sort, a, b));
    }
    if let Some(slice) = spec.slice {
        let keep = usize::try_from(slice.unsigned_abs()).unwrap_or(usize::MAX);
        if array.len() > keep {
            if slice >= 0 {
                array.truncate(keep);
            } else {
                let drop = array.len() - keep;
                array.drain(..drop);
            }
        }
    }
}

fn compare_for_push_sort(sort: &PushSort, a: &Bson, b: &Bson) -> Ordering {
    match sort {
        PushSort::Whole { descending } => {
            let order = compare(a, b);
            if *descending {
                order.reverse()
            } else {
                order
            }
        }
        PushSort::Pattern(fields) => {
            for (field, descending) in fields {
                let key_a = sort_key(a, field).unwrap_or(&Bson::Null);
                let key_b = sort_key(b, field).unwrap_or(&Bson::Null);
                let order = compare(key_a, key_b);
                let order = if *descending { order.reverse() } else { order };
                if order != Ordering::Equal {
                    return order;
                }
            }
            Ordering::Equal
        }
    }
}

/// The value at `path` in a document element for a `$push` `$sort`;
/// non-documents have no keys.
fn sort_key<'a>(element: &'a Bson, path: &str) -> Option<&'a Bson> {
    let Bson::Document(doc) = element else {
        return None;
    };
    element_at_path(doc, path)
}

fn apply_bits(value: &Bson, ops: &[(BitOp, Bson)]) -> Bson {
    let mut current = value.clone();
    for (op, operand) in ops {
        current = match (&current, operand) {
            (Bson::Int32(a), Bson::Int32(b)) => Bson::Int32(bit(*op, *a, *b)),
            _ => {
                let a = int_of(&current);
                let b = int_of(operand);
                Bson::Int64(bit(*op, a, b))
            }
        };
    }
    current
}

fn int_of(value: &Bson) -> i64 {
    match value {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        _ => 0,
    }
}

fn bit<T>(op: BitOp, a: T, b: T) -> T
where
    T: std::ops::BitAnd<Output = T> + std::ops::BitOr<Output = T> + std::ops::BitXor<Output = T>,
{
    match op {
        BitOp::And => a & b,
        BitOp::Or => a | b,
        BitOp::Xor => a ^ b,
    }
}

// ---------------------------------------------------------------------------
// Paths in documents
// ---------------------------------------------------------------------------

/// `$unset`: removes a field, or nulls an array element.
fn remove_at(doc: &mut Document, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    if parent.is_empty() {
        doc.remove(last);
        return;
    }
    match get_positional_mut(doc, parent) {
        Some(Bson::Document(parent)) => {
            parent.remove(last);
        }
        Some(Bson::Array(parent)) => {
            if let Some(element) = update_index(last).and_then(|i| parent.get_mut(i)) {
                *element = Bson::Null;
            }
        }
        _ => {}
    }
}

/// Creates `path[found..]` under the existing `path[..found]` and puts
/// `value` at its end, padding arrays with nulls (`pathsupport::
/// createPathAt`).
fn create_path(
    doc: &mut Document,
    path: &[String],
    found: usize,
    value: Bson,
    growth: &mut usize,
) -> Result<()> {
    let (base_path, rest) = path.split_at(found);
    let Some((first, nested)) = rest.split_first() else {
        return Ok(());
    };
    let mut value = value;
    for part in nested.iter().rev() {
        let mut wrapper = Document::new();
        wrapper.insert(part.clone(), value);
        value = Bson::Document(wrapper);
    }
    if base_path.is_empty() {
        doc.insert(first.clone(), value);
        return Ok(());
    }
    let base_name = base_path.last().map_or("", String::as_str);
    let Some(base) = get_positional_mut(doc, base_path) else {
        return Err(Error::internal("update path vanished"));
    };
    match base {
        Bson::Document(parent) => {
            parent.insert(first.clone(), value);
        }
        Bson::Array(array) => {
            if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
                bail!(
                    PathNotViable,
                    "Cannot create field '{first}' in element {{{base_name}: {}}}",
                    array_string(array)
                );
            }
            let index = first.parse::<u64>().unwrap_or(u64::MAX);
            let len = array.len() as u64;
            if index > len && index - len > MAX_PADDING {
                return Err(Error::new(
                    cannot_backfill_array_code(),
                    format!("can't backfill more than {MAX_PADDING} elements"),
                ));
            }
            let index = usize::try_from(index).unwrap_or(usize::MAX);
            if index < array.len() {
                array[index] = value;
            } else {
                // Each padding null costs a type byte, its index and a NUL.
                let padding = index - array.len();
                let digits = first.len();
                *growth = growth.saturating_add(padding.saturating_mul(digits + 2));
                if *growth > MAX_DOCUMENT_BYTES {
                    bail!(
                        BSONObjectTooLarge,
                        "Resulting document after update is larger than {MAX_DOCUMENT_BYTES}"
                    );
                }
                array.resize(index, Bson::Null);
                array.push(value);
            }
        }
        other => bail!(
            PathNotViable,
            "Cannot create field '{first}' in element {{{}}}",
            element_string(base_name, other)
        ),
    }
    Ok(())
}

enum Prefix {
    Found,
    Missing,
    NotViable { part: String, element: String },
}

/// MongoDB's `findLongestPrefix` for a `$rename` source: walking into a
/// scalar, or into an array by name, is an error rather than a miss.
fn find_longest_prefix(doc: &Document, path: &[String]) -> Prefix {
    let Some((first, rest)) = path.split_first() else {
        return Prefix::Missing;
    };
    let Some(mut current) = doc.get(first) else {
        return Prefix::Missing;
    };
    let mut name = first;
    for part in rest {
        let next = match current {
            Bson::Document(d) => d.get(part),
            Bson::Array(a) if part.bytes().all(|b| b.is_ascii_digit()) => {
                update_index(part).and_then(|i| a.get(i))
            }
            other => {
                return Prefix::NotViable {
                    part: name.clone(),
                    element: element_string(name, other),
                }
            }
        };
        match next {
            Some(next) => {
                current = next;
                name = part;
            }
            None => return Prefix::Missing,
        }
    }
    Prefix::Found
}

fn check_depth(path_len: usize, value: &Bson) -> Result<()> {
    if path_len > MAX_DEPTH || depth_exceeds(value, MAX_DEPTH - path_len) {
        bail!(
            Overflow,
            "Document exceeds maximum nesting depth of {MAX_DEPTH}"
        );
    }
    Ok(())
}

/// Whether `value` nests more than `limit` levels below itself.
fn depth_exceeds(value: &Bson, limit: usize) -> bool {
    let children: Box<dyn Iterator<Item = &Bson>> = match value {
        Bson::Document(doc) => Box::new(doc.values()),
        Bson::Array(array) => Box::new(array.iter()),
        _ => return false,
    };
    let mut children = children.peekable();
    if children.peek().is_none() {
        return false;
    }
    if limit == 0 {
        return true;
    }
    children.any(|child| depth_exceeds(child, limit - 1))
}

/// An estimate of a value's BSON size (without its field name), bounded in
/// recursion.
fn approx_size(value: &Bson) -> usize {
    fn size(value: &Bson, depth: usize) -> usize {
        if depth > MAX_PATH_PARTS {
            return 0;
        }
        match value {
            Bson::Document(doc) => doc.iter().fold(5, |total, (key, value)| {
                total
                    .saturating_add(key.len() + 2)
                    .saturating_add(size(value, depth + 1))
            }),
            Bson::Array(array) => array.iter().fold(5, |total, value| {
                total
                    .saturating_add(8)
                    .saturating_add(size(value, depth + 1))
            }),
            Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => s.len() + 5,
            Bson::Binary(binary) => binary.bytes.len() + 5,
            Bson::RegularExpression(regex) => regex.pattern.len() + regex.options.len() + 2,
            Bson::Int32(_) => 4,
            Bson::Decimal128(_) => 16,
            Bson::ObjectId(_) => 12,
            Bson::Boolean(_) => 1,
            Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
            _ => 16,
        }
    }
    size(value, 0)
}

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

/// MongoDB's binary equality: same types and same bytes, fields in order.
/// An update that sets an identical value is a no-op.
fn identical(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => x.to_bits() == y.to_bits(),
        (Bson::Document(x), Bson::Document(y)) => documents_identical(x, y),
        (Bson::Array(x), Bson::Array(y)) => arrays_identical(x, y),
        _ => a == b,
    }
}

/// Whether two documents are the same BSON: field order, types and values
/// (NaN equal to itself). This is what decides `nModified`; `Document`'s
/// `==` ignores field order, so an update that only reorders a
/// sub-document would look like a no-op to it.
pub fn documents_identical(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
}

fn arrays_identical(a: &[Bson], b: &[Bson]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| identical(x, y))
}

/// `SafeNum::debugString`: a number as update errors print it.
fn safe_num_string(n: Number) -> String {
    match n {
        Number::Int32(n) => format!("(NumberInt){n}"),
        Number::Int64(n) => format!("(NumberLong){n}"),
        Number::Double(d) => format!("(NumberDouble){d}"),
        Number::Decimal(d) => format!("(NumberDecimal){}", d.to_decimal128()),
    }
}

// ---------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------

/// `name: value` as MongoDB prints an element in messages.
fn element_string(name: &str, value: &Bson) -> String {
    format!("{name}: {}", value_string(value))
}

fn value_string(value: &Bson) -> String {
    value_string_at(value, 0)
}

/// Messages print nested values only so deep; input can nest far more.
const MAX_PRINT_DEPTH: usize = 20;

fn value_string_at(value: &Bson, depth: usize) -> String {
    if depth > MAX_PRINT_DEPTH {
        return "...".to_string();
    }
    match value {
        Bson::Double(d) if d.is_finite() && d.fract() == 0.0 && d.abs() < 1e15 => {
            format!("{d:.1}")
        }
        Bson::Double(d) => format!("{d}"),
        Bson::String(s) => format!("\"{s}\""),
        Bson::Int32(n) => n.to_string(),
        Bson::Int64(n) => n.to_string(),
        Bson::Boolean(b) => b.to_string(),
        Bson::Null => "null".to_string(),
        Bson::ObjectId(oid) => format!("ObjectId('{oid}')"),
        Bson::Document(doc) if doc.is_empty() => "{}".to_string(),
        Bson::Document(doc) => {
            let fields: Vec<String> = doc
                .iter()
                .map(|(key, value)| format!("{key}: {}", value_string_at(value, depth + 1)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        Bson::Array(array) => array_string_at(array, depth),
        Bson::DateTime(date) => format!("new Date({})", date.timestamp_millis()),
        Bson::Timestamp(ts) => format!("Timestamp({}, {})", ts.time, ts.increment),
        Bson::Decimal128(d) => format!("NumberDecimal(\"{d}\")"),
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope".to_string(),
        other => other.to_string(),
    }
}

fn array_string(array: &[Bson]) -> String {
    array_string_at(array, 0)
}

fn array_string_at(array: &[Bson], depth: usize) -> String {
    if array.is_empty() {
        return "[]".to_string();
    }
    let values: Vec<String> = array
        .iter()
        .map(|value| value_string_at(value, depth + 1))
        .collect();
    format!("[ {} ]", values.join(", "))
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use super::*;

    /// Pipelines are the aggregate layer's (tested there); here they are
    /// refused, so a test that reached one would fail loudly.
    fn no_pipelines(_: &[Bson]) -> Result<Arc<dyn PipelineRunner>> {
        Err(Error::new(ErrorCode::InternalError, "no pipelines here"))
    }

    fn parse_update(u: &Bson, filters: Option<&[Document]>) -> Result<Update> {
        Update::parse_with(u, filters, &no_pipelines)
    }

    fn parse(u: Document) -> Result<Update> {
        parse_update(&Bson::Document(u), None)
    }

    fn parse_with(u: Document, filters: Vec<Document>) -> Result<Update> {
        parse_update(&Bson::Document(u), Some(&filters))
    }

    fn apply(doc: Document, u: Document) -> Result<Document> {
        parse(u)?.apply(&doc, &ApplyContext::default())
    }

    fn apply_at(doc: Document, u: Document, position: usize) -> Result<Document> {
        let ctx = ApplyContext {
            details: MatchDetails {
                matched: true,
                array_position: Some(position),
                text_score: None,
            },
            inserting: false,
        };
        parse(u)?.apply(&doc, &ctx)
    }

    fn applied(doc: Document, u: Document) -> Document {
        match apply(doc, u) {
            Ok(doc) => doc,
            Err(e) => panic!("update failed: {e}"),
        }
    }

    /// Asserts the exact field order, which `Document`'s `==` ignores.
    fn assert_doc(actual: &Document, expected: &Document) {
        assert!(
            documents_identical(actual, expected),
            "\n  actual: {actual}\nexpected: {expected}"
        );
    }

    fn code_of<T: std::fmt::Debug>(result: Result<T>) -> (i32, String) {
        match result {
            Ok(v) => panic!("expected an error, got {v:?}"),
            Err(e) => (e.code.number(), e.message),
        }
    }

    // --- parsing ---------------------------------------------------------

    #[test]
    fn replacement_or_operators_by_first_key() {
        assert!(parse(doc! {"a": 1}).unwrap().is_replacement());
        assert!(parse(doc! {}).unwrap().is_replacement());
        assert!(!parse(doc! {"$set": {"a": 1}}).unwrap().is_replacement());
    }

    #[test]
    fn unknown_modifier_and_mixed_update() {
        let (code, msg) = code_of(parse(doc! {"$foo": {"a": 1}}));
        assert_eq!(code, 9);
        assert_eq!(
            msg,
            "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update \
             specified as an array"
        );
        let (code, msg) = code_of(parse(doc! {"$set": {"a": 1}, "b": 2}));
        assert_eq!(code, 9);
        assert!(msg.starts_with("Unknown modifier: b."));
    }

    #[test]
    fn replacement_with_dollar_field_fails_on_apply() {
        let update = parse(doc! {"a": 1, "$set": {"b": 1}}).unwrap();
        let (code, msg) = code_of(update.apply(&doc! {"_id": 1}, &ApplyContext::default()));
        assert_eq!(code, 52);
        assert!(msg.starts_with("The dollar ($) prefixed field '$set' in '$set' is not allowed"));
    }

    /// Stands in for the aggregate layer: sets `b` to 5 and, when the
    /// document has `swap`, gives it another `_id`.
    struct FakeRunner;

    impl PipelineRunner for FakeRunner {
        fn run(&self, mut doc: Document) -> Result<Document> {
            doc.insert("b", 5);
            if doc.contains_key("swap") {
                doc.insert("_id", 2);
            }
            Ok(doc)
        }
    }

    fn fake(_: &[Bson]) -> Result<Arc<dyn PipelineRunner>> {
        Ok(Arc::new(FakeRunner))
    }

    #[test]
    fn pipelines_are_checked_here_and_run_by_their_runner() {
        let update = Update::parse_with(&bson!([{"$set": {"b": 5}}]), None, &fake).unwrap();
        let out = update
            .apply(&doc! {"_id": 1, "a": 4}, &ApplyContext::default())
            .unwrap();
        assert_eq!(out, doc! {"_id": 1, "a": 4, "b": 5});
        let (code, msg) = code_of(Update::parse_with(
            &bson!([{"$match": {"a": 1}}]),
            None,
            &fake,
        ));
        assert_eq!(code, ErrorCode::InvalidOptions.number());
        assert_eq!(msg, "$match is not allowed to be used within an update");
        let (code, _) = code_of(Update::parse_with(&bson!([1]), None, &fake));
        assert_eq!(code, ErrorCode::FailedToParse.number());
        let (code, _) =
            code_of(update.apply(&doc! {"_id": 1, "swap": 1}, &ApplyContext::default()));
        assert_eq!(code, ErrorCode::ImmutableField.number());
        let (code, _) = code_of(Update::parse_with(&Bson::Int32(1), None, &fake));
        assert_eq!(code, 9);
        let (code, _) = code_of(Update::parse_with(
            &bson!([{"$set": {"b": 5}}]),
            Some(&[doc! {"i": 1}]),
            &fake,
        ));
        assert_eq!(code, ErrorCode::FailedToParse.number());
    }

    #[test]
    fn modifier_must_be_a_document() {
        let (code, msg) = code_of(parse(doc! {"$set": 5}));
        assert_eq!(code, 9);
        assert!(msg.starts_with("Modifiers operate on fields but we found type int instead."));
    }

    #[test]
    fn empty_modifier_is_a_no_op() {
        let original = doc! {"_id": 1, "a": 1};
        assert_doc(&applied(original.clone(), doc! {"$set": {}}), &original);
    }

    #[test]
    fn conflicting_paths() {
        let (code, msg) = code_of(parse(doc! {"$set": {"a": 1}, "$inc": {"a": 1}}));
        assert_eq!(code, 40);
        assert_eq!(msg, "Updating the path 'a' would create a conflict at 'a'");
        let (code, msg) = code_of(parse(doc! {"$set": {"a": 1, "a.b": 2}}));
        assert_eq!(code, 40);
        assert_eq!(
            msg,
            "Updating the path 'a.b' would create a conflict at 'a'"
        );
        let (code, msg) = code_of(parse(doc! {"$set": {"a.b": 1}, "$unset": {"a": 1}}));
        assert_eq!(code, 40);
        assert_eq!(msg, "Updating the path 'a' would create a conflict at 'a'");
        // Siblings are fine.
        assert!(parse(doc! {"$set": {"a.b": 1, "a.c": 2}}).is_ok());
        // A rename's source and destination both take part.
        let (code, _) = code_of(parse(doc! {"$rename": {"a": "b"}, "$set": {"b": 1}}));
        assert_eq!(code, 40);
        let (code, _) = code_of(parse(doc! {"$rename": {"a": "b"}, "$set": {"a": 1}}));
        assert_eq!(code, 40);
        // `$[]` and an index at the same level cannot share a node.
        let (code, msg) = code_of(parse(doc! {"$set": {"a.$[]": 1, "a.0": 2}}));
        assert_eq!(code, 40);
        assert_eq!(
            msg,
            "Updating the path 'a.0' would create a conflict at 'a'"
        );
    }

    #[test]
    fn bad_paths() {
        let (code, msg) = code_of(parse(doc! {"$set": {"": 1}}));
        assert_eq!(code, empty_field_name_code().number());
        assert_eq!(msg, "An empty update path is not valid.");
        let (_, msg) = code_of(parse(doc! {"$set": {"a..b": 1}}));
        assert_eq!(
            msg,
            "The update path 'a..b' contains an empty field name, which is not allowed."
        );
        let (code, msg) = code_of(parse(doc! {"$set": {"$.a": 1}}));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "Cannot have positional (i.e. '$') element in the first position in path '$.a'"
        );
        let (code, msg) = code_of(parse(doc! {"$set": {"a.$.b.$": 1}}));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "Too many positional (i.e. '$') elements found in path 'a.$.b.$'"
        );
        let deep = vec!["a"; MAX_PATH_PARTS + 1].join(".");
        let (code, _) = code_of(parse(doc! {"$set": {deep: 1}}));
        assert_eq!(code, ErrorCode::Overflow.number());
    }

    #[test]
    fn inc_argument_must_be_numeric() {
        let (code, msg) = code_of(parse(doc! {"$inc": {"a": "x"}}));
        assert_eq!(code, 14);
        assert_eq!(
            msg,
            "Cannot increment with non-numeric argument: {a: \"x\"}"
        );
        let (code, msg) = code_of(parse(doc! {"$mul": {"a": null}}));
        assert_eq!(code, 14);
        assert_eq!(msg, "Cannot multiply with non-numeric argument: {a: null}");
    }

    // --- $set / field order ----------------------------------------------

    #[test]
    fn set_keeps_position_and_appends_new_fields_sorted() {
        let out = applied(
            doc! {"_id": 1, "b": 1, "a": 1},
            doc! {"$set": {"z": 1, "a": 2, "c": 3, "b": 1}},
        );
        assert_doc(&out, &doc! {"_id": 1, "b": 1, "a": 2, "c": 3, "z": 1});
    }

    #[test]
    fn new_fields_sorted_numerically() {
        let out = applied(doc! {"_id": 1}, doc! {"$set": {"10": 1, "9": 1, "a": 1}});
        assert_doc(&out, &doc! {"_id": 1, "9": 1, "10": 1, "a": 1});
    }

    #[test]
    fn set_creates_intermediate_documents() {
        let out = applied(doc! {"_id": 1}, doc! {"$set": {"a.b.c": 1, "a.b.a": 2}});
        assert_doc(&out, &doc! {"_id": 1, "a": {"b": {"a": 2, "c": 1}}});
    }

    #[test]
    fn set_same_value_is_identical() {
        let original = doc! {"_id": 1, "a": {"b": [1, 2]}, "c": 1.5};
        let out = applied(
            original.clone(),
            doc! {"$set": {"a": {"b": [1, 2]}, "c": 1.5}},
        );
        assert_doc(&out, &original);
        // Same number, different type: a modification.
        let out = applied(doc! {"_id": 1, "a": 1}, doc! {"$set": {"a": 1.0}});
        assert_doc(&out, &doc! {"_id": 1, "a": 1.0});
        // Same fields, different order: a modification.
        let out = applied(
            doc! {"_id": 1, "a": {"x": 1, "y": 2}},
            doc! {"$set": {"a": {"y": 2, "x": 1}}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": {"y": 2, "x": 1}});
    }

    #[test]
    fn set_array_index_and_padding() {
        let out = applied(doc! {"_id": 1, "a": [1, 2]}, doc! {"$set": {"a.1": 5}});
        assert_doc(&out, &doc! {"_id": 1, "a": [1, 5]});
        let out = applied(doc! {"_id": 1, "a": [1]}, doc! {"$set": {"a.3": 5}});
        assert_doc(&out, &doc! {"_id": 1, "a": [1, null, null, 5]});
        let out = applied(doc! {"_id": 1, "a": []}, doc! {"$set": {"a.2.b": 1}});
        assert_doc(&out, &doc! {"_id": 1, "a": [null, null, {"b": 1}]});
        // A numeric part under a document is a field name.
        let out = applied(doc! {"_id": 1, "a": {}}, doc! {"$set": {"a.2": 1}});
        assert_doc(&out, &doc! {"_id": 1, "a": {"2": 1}});
    }

    #[test]
    fn huge_array_index_is_refused() {
        let (code, msg) = code_of(apply(
            doc! {"_id": 1, "a": []},
            doc! {"$set": {"a.99999999": 1}},
        ));
        assert_eq!(code, cannot_backfill_array_code().number());
        assert_eq!(msg, "can't backfill more than 1500000 elements");
        let (code, _) = code_of(apply(
            doc! {"_id": 1, "a": []},
            doc! {"$set": {"a.99999999999999999999999": 1}},
        ));
        assert_eq!(code, cannot_backfill_array_code().number());
    }

    #[test]
    fn padding_within_the_limit_is_allowed() {
        let out = applied(doc! {"_id": 1, "a": []}, doc! {"$set": {"a.1000": 1}});
        let array = out.get_array("a").unwrap();
        assert_eq!(array.len(), 1001);
        assert_eq!(array[1000], Bson::Int32(1));
    }

    #[test]
    fn set_through_a_scalar_is_not_viable() {
        let (code, msg) = code_of(apply(doc! {"_id": 1, "a": 5}, doc! {"$set": {"a.b": 1}}));
        assert_eq!(code, 28);
        assert_eq!(msg, "Cannot create field 'b' in element {a: 5}");
        let (code, msg) = code_of(apply(
            doc! {"_id": 1, "a": [{"b": 0}]},
            doc! {"$set": {"a.b": 1}},
        ));
        assert_eq!(code, 28);
        assert_eq!(msg, "Cannot create field 'b' in element {a: [ { b: 0 } ]}");
    }

    #[test]
    fn depth_limit() {
        let path = vec!["a"; 100].join(".");
        assert!(apply(doc! {"_id": 1}, doc! {"$set": {path: 1}}).is_ok());
        let path = vec!["a"; 101].join(".");
        let (code, _) = code_of(apply(doc! {"_id": 1}, doc! {"$set": {path: 1}}));
        assert_eq!(code, 15);
        let path = vec!["a"; 100].join(".");
        let (code, _) = code_of(apply(doc! {"_id": 1}, doc! {"$set": {path: {"b": 1}}}));
        assert_eq!(code, 15);
    }

    // --- _id ----------------------------------------------------------------

    #[test]
    fn id_is_immutable() {
        let (code, msg) = code_of(apply(doc! {"_id": 1, "a": 1}, doc! {"$set": {"_id": 2}}));
        assert_eq!(code, 66);
        assert_eq!(
            msg,
            "Performing an update on the path '_id' would modify the immutable field '_id'"
        );
        // Setting the same value is fine.
        let out = applied(doc! {"_id": 1, "a": 1}, doc! {"$set": {"_id": 1}});
        assert_doc(&out, &doc! {"_id": 1, "a": 1});
        let (code, _) = code_of(apply(doc! {"_id": 1}, doc! {"$unset": {"_id": 1}}));
        assert_eq!(code, 66);
        let (code, _) = code_of(apply(doc! {"_id": {"x": 1}}, doc! {"$set": {"_id.y": 1}}));
        assert_eq!(code, 66);
        let (code, _) = code_of(apply(
            doc! {"_id": 1, "a": 2},
            doc! {"$rename": {"a": "_id"}},
        ));
        assert_eq!(code, 66);
        // Renaming an equal value onto `_id` leaves it alone.
        let out = applied(doc! {"_id": 1, "a": 1.0}, doc! {"$rename": {"a": "_id"}});
        assert_doc(&out, &doc! {"_id": 1});
        let (code, _) = code_of(apply(doc! {"_id": 1}, doc! {"$inc": {"_id": 1}}));
        assert_eq!(code, 66);
        // $inc by zero leaves it identical.
        assert!(apply(doc! {"_id": 1}, doc! {"$inc": {"_id": 0}}).is_ok());
    }

    // --- $unset ---------------------------------------------------------------

    #[test]
    fn unset_removes_fields_and_nulls_array_elements() {
        let out = applied(
            doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "e": [1, 2, 3]},
            doc! {"$unset": {"a": "", "b.c": 1, "e.1": 1, "missing": 1, "x.y.z": 1}},
        );
        assert_doc(&out, &doc! {"_id": 1, "b": {"d": 2}, "e": [1, null, 3]});
        // Through a scalar it is a no-op.
        let out = applied(doc! {"_id": 1, "a": 5}, doc! {"$unset": {"a.b": 1}});
        assert_doc(&out, &doc! {"_id": 1, "a": 5});
    }

    // --- $inc / $mul --------------------------------------------------------

    #[test]
    fn inc_numeric_rules() {
        let out = applied(
            doc! {"_id": 1, "i": 1, "l": 1i64, "d": 1.5, "big": i32::MAX},
            doc! {"$inc": {"i": 2, "l": 2, "d": 1, "big": 1, "new": 5i64}},
        );
        assert_doc(
            &out,
            &doc! {"_id": 1, "i": 3, "l": 3i64, "d": 2.5, "big": i64::from(i32::MAX) + 1, "new": 5i64},
        );
        let out = applied(doc! {"_id": 1, "i": 1}, doc! {"$inc": {"i": 0.5}});
        assert_doc(&out, &doc! {"_id": 1, "i": 1.5});
        let out = applied(doc! {"_id": 1, "i": 1}, doc! {"$inc": {"i": 1i64}});
        assert_doc(&out, &doc! {"_id": 1, "i": 2i64});
        // int32 + int32 overflowing downwards also widens.
        let out = applied(doc! {"_id": 1, "i": i32::MIN}, doc! {"$inc": {"i": -1}});
        assert_doc(&out, &doc! {"_id": 1, "i": i64::from(i32::MIN) - 1});
    }

    #[test]
    fn inc_int64_overflow_fails() {
        let (code, msg) = code_of(apply(
            doc! {"_id": 1, "l": i64::MAX},
            doc! {"$inc": {"l": 1}},
        ));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) \
             for document {_id: 1}"
        );
        let (code, _) = code_of(apply(
            doc! {"_id": 1, "i": 1},
            doc! {"$inc": {"i": i64::MAX}},
        ));
        assert_eq!(code, 2);
        let (code, _) = code_of(apply(
            doc! {"_id": 1, "l": i64::MAX},
            doc! {"$mul": {"l": 2}},
        ));
        assert_eq!(code, 2);
    }

    #[test]
    fn inc_on_non_number_fails() {
        let (code, msg) = code_of(apply(doc! {"_id": 1, "x": "s"}, doc! {"$inc": {"x": 1}}));
        assert_eq!(code, 14);
        assert_eq!(
            msg,
            "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'x' of \
             non-numeric type string"
        );
    }

    #[test]
    fn inc_by_zero_is_identical() {
        let original = doc! {"_id": 1, "a": 5, "b": 2.5};
        assert_doc(
            &applied(original.clone(), doc! {"$inc": {"a": 0, "b": 0}}),
            &original,
        );
        assert_doc(
            &applied(original.clone(), doc! {"$mul": {"a": 1}}),
            &original,
        );
    }

    #[test]
    fn mul_rules() {
        let out = applied(
            doc! {"_id": 1, "a": 3, "b": 2i64, "c": 1.5, "big": 100_000},
            doc! {"$mul": {"a": 2, "b": 3, "c": 2, "big": 100_000, "n1": 5, "n2": 5i64, "n3": 2.5}},
        );
        assert_doc(
            &out,
            &doc! {"_id": 1, "a": 6, "b": 6i64, "c": 3.0, "big": 10_000_000_000i64,
            "n1": 0, "n2": 0i64, "n3": 0.0},
        );
    }

    #[test]
    fn decimal_arithmetic() {
        let dec = |s: &str| Bson::Decimal128(s.parse().unwrap());
        let out = applied(
            doc! {"_id": 1, "a": dec("1.1"), "b": 1, "c": dec("2.50")},
            doc! {"$inc": {"a": dec("2.2"), "b": dec("0.5")}, "$mul": {"c": dec("3")}},
        );
        assert_eq!(out.get("a"), Some(&dec("3.3")));
        assert_eq!(out.get("b"), Some(&dec("1.5")));
        assert_eq!(out.get("c"), Some(&dec("7.50")));
        // 34 digits, rounding half to even.
        let out = applied(
            doc! {"_id": 1, "a": dec("9999999999999999999999999999999999")},
            doc! {"$inc": {"a": dec("1")}},
        );
        assert_eq!(
            out.get("a"),
            Some(&dec("1.000000000000000000000000000000000E+34"))
        );
        // Doubles become decimals with 15 significant digits.
        let out = applied(doc! {"_id": 1, "a": dec("1")}, doc! {"$inc": {"a": 0.1}});
        assert_eq!(out.get("a"), Some(&dec("1.100000000000000")));
        // Adding zero keeps the value identical.
        let original = doc! {"_id": 1, "a": dec("1.0")};
        assert_doc(
            &applied(original.clone(), doc! {"$inc": {"a": dec("0")}}),
            &original,
        );
    }

    #[test]
    fn decimal_codec_round_trips() {
        for text in [
            "0",
            "-0",
            "1.5",
            "-123.456E+20",
            "9999999999999999999999999999999999",
            "1E-6176",
        ] {
            let d: bson::Decimal128 = text.parse().unwrap();
            assert_eq!(
                DecimalValue::from_decimal128(&d).to_decimal128(),
                d,
                "{text}"
            );
        }
    }

    // --- $min / $max ----------------------------------------------------------

    #[test]
    fn min_and_max() {
        let out = applied(
            doc! {"_id": 1, "a": 5, "b": 5, "c": 5, "d": 5},
            doc! {"$min": {"a": 3, "b": 7, "e": 1}, "$max": {"c": 3, "d": 7.5}},
        );
        assert_doc(
            &out,
            &doc! {"_id": 1, "a": 3, "b": 5, "c": 5, "d": 7.5, "e": 1},
        );
        // Equal values (even of another type) are left alone.
        let out = applied(doc! {"_id": 1, "a": 5}, doc! {"$min": {"a": 5.0}});
        assert_doc(&out, &doc! {"_id": 1, "a": 5});
        // Comparison crosses types in BSON order: strings above numbers.
        let out = applied(doc! {"_id": 1, "a": 5}, doc! {"$max": {"a": "x"}});
        assert_doc(&out, &doc! {"_id": 1, "a": "x"});
    }

    // --- $rename --------------------------------------------------------------

    #[test]
    fn rename_moves_to_the_end_or_in_place() {
        let out = applied(
            doc! {"_id": 1, "a": 1, "b": 2},
            doc! {"$rename": {"a": "c"}},
        );
        assert_doc(&out, &doc! {"_id": 1, "b": 2, "c": 1});
        let out = applied(
            doc! {"_id": 1, "a": 1, "b": 2},
            doc! {"$rename": {"b": "a"}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": 2});
        let out = applied(
            doc! {"_id": 1, "a": {"b": 1}},
            doc! {"$rename": {"a.b": "c.d"}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": {}, "c": {"d": 1}});
        let out = applied(doc! {"_id": 1}, doc! {"$rename": {"a": "b"}});
        assert_doc(&out, &doc! {"_id": 1});
    }

    #[test]
    fn rename_errors() {
        let (code, msg) = code_of(parse(doc! {"$rename": {"a": "a"}}));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "The source and target field for $rename must differ: a: \"a\""
        );
        let (code, msg) = code_of(parse(doc! {"$rename": {"a": "a.b"}}));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "The source and target field for $rename must not be on the same path: a: \"a.b\""
        );
        let (code, msg) = code_of(parse(doc! {"$rename": {"a": 1}}));
        assert_eq!(code, 2);
        assert_eq!(msg, "The 'to' field for $rename must be a string: a: 1");
        let (code, msg) = code_of(parse(doc! {"$rename": {"a.$": "b"}}));
        assert_eq!(code, 2);
        assert_eq!(msg, "The source field for $rename may not be dynamic: a.$");
        let (code, msg) = code_of(apply(
            doc! {"_id": 1, "a": [{"b": 1}]},
            doc! {"$rename": {"a.0.b": "c"}},
        ));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "The source field cannot be an array element, 'a.0.b' in doc with _id: 1 has an \
             array field called 'a'"
        );
        let (code, msg) = code_of(apply(
            doc! {"_id": 1, "a": 1, "b": []},
            doc! {"$rename": {"a": "b.0"}},
        ));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "The destination field cannot be an array element, 'b.0' in doc with _id: 1 has an \
             array field called 'b'"
        );
        let (code, _) = code_of(apply(
            doc! {"_id": 1, "a": 5},
            doc! {"$rename": {"a.b": "c"}},
        ));
        assert_eq!(code, 28);
    }

    // --- $currentDate ---------------------------------------------------------

    #[test]
    fn current_date() {
        let out = applied(
            doc! {"_id": 1},
            doc! {"$currentDate": {"d": true, "t": {"$type": "timestamp"}, "e": {"$type": "date"}}},
        );
        assert!(matches!(out.get("d"), Some(Bson::DateTime(_))));
        assert!(matches!(out.get("e"), Some(Bson::DateTime(_))));
        assert!(matches!(
            out.get("t"),
            Some(Bson::Timestamp(Timestamp { increment: 1, .. }))
        ));
        let (code, _) = code_of(parse(doc! {"$currentDate": {"d": {"$type": "x"}}}));
        assert_eq!(code, 2);
        let (code, msg) = code_of(parse(doc! {"$currentDate": {"d": 1}}));
        assert_eq!(code, 2);
        assert!(msg.starts_with("int is not valid type for $currentDate."));
    }

    // --- $setOnInsert / upsert ------------------------------------------------

    #[test]
    fn set_on_insert_only_when_inserting() {
        let update = parse(doc! {"$setOnInsert": {"a": 1}, "$set": {"b": 2}}).unwrap();
        let out = update
            .apply(&doc! {"_id": 1}, &ApplyContext::default())
            .unwrap();
        assert_doc(&out, &doc! {"_id": 1, "b": 2});
        let out = update.upsert_document(doc! {"_id": 5, "x": 1}).unwrap();
        assert_doc(&out, &doc! {"_id": 5, "x": 1, "a": 1, "b": 2});
    }

    #[test]
    fn upsert_puts_id_first_and_generates_one() {
        let update = parse(doc! {"$set": {"_id": 7, "a": 1}}).unwrap();
        let out = update.upsert_document(doc! {"b": 1}).unwrap();
        assert_doc(&out, &doc! {"_id": 7, "b": 1, "a": 1});
        let out = parse(doc! {"$set": {"a": 1}})
            .unwrap()
            .upsert_document(doc! {})
            .unwrap();
        assert!(matches!(out.get("_id"), Some(Bson::ObjectId(_))));
        assert_eq!(out.keys().next().map(String::as_str), Some("_id"));
        // The query's _id cannot be changed by the update.
        let (code, _) = code_of(update.upsert_document(doc! {"_id": 1}));
        assert_eq!(code, 66);
        // Positional needs a match, which an insert does not have.
        let (code, _) = code_of(
            parse(doc! {"$set": {"a.$": 1}})
                .unwrap()
                .upsert_document(doc! {}),
        );
        assert_eq!(code, 2);
        let (code, _) = code_of(
            parse(doc! {"$set": {"_id": [1]}})
                .unwrap()
                .upsert_document(doc! {}),
        );
        assert_eq!(code, ErrorCode::InvalidIdField.number());
    }

    #[test]
    fn upsert_replacement_takes_only_the_id() {
        let update = parse(doc! {"b": 2, "c": 3}).unwrap();
        let out = update.upsert_document(doc! {"a": 1, "_id": 9}).unwrap();
        assert_doc(&out, &doc! {"_id": 9, "b": 2, "c": 3});
        let update = parse(doc! {"b": 2, "_id": 3}).unwrap();
        let out = update.upsert_document(doc! {"a": 1}).unwrap();
        assert_doc(&out, &doc! {"_id": 3, "b": 2});
        let (code, _) = code_of(update.upsert_document(doc! {"_id": 4}));
        assert_eq!(code, 66);
    }

    // --- replacement ----------------------------------------------------------

    #[test]
    fn replacement_keeps_id_first() {
        let update = parse(doc! {"b": 1, "_id": 1, "a": 2}).unwrap();
        let out = update
            .apply(&doc! {"_id": 1, "x": 1}, &ApplyContext::default())
            .unwrap();
        assert_doc(&out, &doc! {"_id": 1, "b": 1, "a": 2});
        let out = parse(doc! {})
            .unwrap()
            .apply(&doc! {"_id": 1, "x": 1}, &ApplyContext::default())
            .unwrap();
        assert_doc(&out, &doc! {"_id": 1});
        let (code, msg) = code_of(
            parse(doc! {"_id": 2, "a": 1})
                .unwrap()
                .apply(&doc! {"_id": 1}, &ApplyContext::default()),
        );
        assert_eq!(code, 66);
        assert_eq!(
            msg,
            "After applying the update, the (immutable) field '_id' was found to have been \
             altered to _id: 2"
        );
        let original = doc! {"_id": 1, "a": 1};
        let out = parse(doc! {"a": 1})
            .unwrap()
            .apply(&original, &ApplyContext::default())
            .unwrap();
        assert_doc(&out, &original);
    }

    #[test]
    fn replacement_refuses_array_filters() {
        let (code, _) = code_of(parse_with(doc! {"a": 1}, vec![doc! {"x": 1}]));
        assert_eq!(code, 9);
        assert!(parse_with(doc! {"a": 1}, vec![]).is_ok());
    }

    // --- $push ------------------------------------------------------------------

    #[test]
    fn push_basics() {
        let out = applied(
            doc! {"_id": 1, "a": [1]},
            doc! {"$push": {"a": 2, "b": {"x": 1}, "c": {"$each": []}}},
        );
        assert_doc(
            &out,
            &doc! {"_id": 1, "a": [1, 2], "b": [{"x": 1}], "c": []},
        );
        let (code, msg) = code_of(apply(doc! {"_id": 1, "a": 1}, doc! {"$push": {"a": 2}}));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "The field 'a' must be an array but is of type int in document {_id: 1}"
        );
    }

    #[test]
    fn push_position_slice() {
        let base = doc! {"_id": 1, "a": [1, 2, 3]};
        let push = |spec: Document| applied(base.clone(), doc! {"$push": {"a": spec}});
        assert_doc(
            &push(doc! {"$each": [9], "$position": 0}),
            &doc! {"_id": 1, "a": [9, 1, 2, 3]},
        );
        assert_doc(
            &push(doc! {"$each": [9, 8], "$position": 1}),
            &doc! {"_id": 1, "a": [1, 9, 8, 2, 3]},
        );
        assert_doc(
            &push(doc! {"$each": [9], "$position": -1}),
            &doc! {"_id": 1, "a": [1, 2, 9, 3]},
        );
        assert_doc(
            &push(doc! {"$each": [9], "$position": -10}),
            &doc! {"_id": 1, "a": [9, 1, 2, 3]},
        );
        assert_doc(
            &push(doc! {"$each": [9], "$position": 10}),
            &doc! {"_id": 1, "a": [1, 2, 3, 9]},
        );
        assert_doc(
            &push(doc! {"$each": [4, 5], "$slice": 3}),
            &doc! {"_id": 1, "a": [1, 2, 3]},
        );
        assert_doc(
            &push(doc! {"$each": [4, 5], "$slice": -2}),
            &doc! {"_id": 1, "a": [4, 5]},
        );
        assert_doc(
            &push(doc! {"$each": [], "$slice": 0}),
            &doc! {"_id": 1, "a": []},
        );
    }

    #[test]
    fn push_sort() {
        let out = applied(
            doc! {"_id": 1, "a": [3, 1]},
            doc! {"$push": {"a": {"$each": [2], "$sort": -1}}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": [3, 2, 1]});
        let out = applied(
            doc! {"_id": 1, "a": [{"s": 3, "n": "c"}, {"s": 1, "n": "a"}]},
            doc! {"$push": {"a": {"$each": [{"s": 2, "n": "b"}], "$sort": {"s": 1}, "$slice": 2}}},
        );
        assert_doc(
            &out,
            &doc! {"_id": 1, "a": [{"s": 1, "n": "a"}, {"s": 2, "n": "b"}]},
        );
        // Non-documents sort as if their key were null.
        let out = applied(
            doc! {"_id": 1, "a": [{"s": 1}, 5]},
            doc! {"$push": {"a": {"$each": [], "$sort": {"s": 1}}}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": [5, {"s": 1}]});
    }

    #[test]
    fn push_clause_errors() {
        let (code, msg) = code_of(parse(doc! {"$push": {"a": {"$each": [1], "$foo": 1}}}));
        assert_eq!(code, 2);
        assert_eq!(msg, "Unrecognized clause in $push: $foo");
        let (code, _) = code_of(parse(doc! {"$push": {"a": {"$each": 1}}}));
        assert_eq!(code, 2);
        let (code, _) = code_of(parse(doc! {"$push": {"a": {"$each": [1], "$slice": 1.5}}}));
        assert_eq!(code, 2);
        let (code, msg) = code_of(parse(doc! {"$push": {"a": {"$each": [1], "$sort": 2}}}));
        assert_eq!(code, 2);
        assert_eq!(msg, "The $sort element value must be either 1 or -1");
        let (code, _) = code_of(parse(doc! {"$push": {"a": {"$each": [1], "$sort": {}}}}));
        assert_eq!(code, 2);
        // Without $each, the document is the value pushed.
        let out = applied(doc! {"_id": 1}, doc! {"$push": {"a": {"$slice": 1}}});
        assert_doc(&out, &doc! {"_id": 1, "a": [{"$slice": 1}]});
    }

    // --- $addToSet --------------------------------------------------------------

    #[test]
    fn add_to_set() {
        let out = applied(
            doc! {"_id": 1, "a": [1, 2]},
            doc! {"$addToSet": {"a": {"$each": [2, 3, 3, 4.0]}, "b": 1}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": [1, 2, 3, 4.0], "b": [1]});
        let original = doc! {"_id": 1, "a": [1, 2]};
        assert_doc(
            &applied(original.clone(), doc! {"$addToSet": {"a": 1.0}}),
            &original,
        );
        let (code, msg) = code_of(apply(doc! {"_id": 1, "a": 1}, doc! {"$addToSet": {"a": 2}}));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "Cannot apply $addToSet to non-array field. Field named 'a' has non-array type int"
        );
        let (code, _) = code_of(parse(doc! {"$addToSet": {"a": {"$each": 1}}}));
        assert_eq!(code, 14);
    }

    // --- $pop / $pull / $pullAll ------------------------------------------------

    #[test]
    fn pop() {
        let out = applied(
            doc! {"_id": 1, "a": [1, 2, 3], "b": [1, 2, 3], "c": []},
            doc! {"$pop": {"a": 1, "b": -1, "c": 1, "d": 1}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": [1, 2], "b": [2, 3], "c": []});
        let (code, msg) = code_of(parse(doc! {"$pop": {"a": 2}}));
        assert_eq!(code, 9);
        assert_eq!(msg, "$pop expects 1 or -1, found: 2");
        let (code, msg) = code_of(apply(doc! {"_id": 1, "a": 1}, doc! {"$pop": {"a": 1}}));
        assert_eq!(code, 14);
        assert_eq!(msg, "Path 'a' contains an element of non-array type 'int'");
        let (code, _) = code_of(apply(doc! {"_id": 1, "a": 1}, doc! {"$pop": {"a.b": 1}}));
        assert_eq!(code, 28);
    }

    #[test]
    fn pull_values_and_conditions() {
        let out = applied(
            doc! {"_id": 1, "a": [1, 2, 3, 2.0], "b": [1, 5, 6, 7], "c": [[1], [2]]},
            doc! {"$pull": {"a": 2, "b": {"$gte": 6}, "c": [1]}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": [1, 3], "b": [1, 5], "c": [[2]]});
        let out = applied(
            doc! {"_id": 1, "a": [{"x": 1, "y": 1}, {"x": 2}, 1]},
            doc! {"$pull": {"a": {"x": 1}}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": [{"x": 2}, 1]});
        let out = applied(
            doc! {"_id": 1, "a": [{"x": 1}, 1, "s"]},
            doc! {"$pull": {"a": {}}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": [1, "s"]});
        let original = doc! {"_id": 1, "a": [1]};
        assert_doc(
            &applied(original.clone(), doc! {"$pull": {"a": 5}}),
            &original,
        );
        let (code, msg) = code_of(apply(doc! {"_id": 1, "a": 1}, doc! {"$pull": {"a": 1}}));
        assert_eq!(code, 2);
        assert_eq!(msg, "Cannot apply $pull to a non-array value");
    }

    #[test]
    fn pull_all() {
        let out = applied(
            doc! {"_id": 1, "a": [1, 2, 3, 1]},
            doc! {"$pullAll": {"a": [1, 3.0]}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": [2]});
        let (code, msg) = code_of(parse(doc! {"$pullAll": {"a": 1}}));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "$pullAll requires an array argument but was given a int"
        );
    }

    // --- $bit ---------------------------------------------------------------------

    #[test]
    fn bit() {
        let out = applied(
            doc! {"_id": 1, "a": 13, "b": 1i64},
            doc! {"$bit": {"a": {"and": 10}, "b": {"or": 4}, "c": {"xor": 5}}},
        );
        assert_doc(&out, &doc! {"_id": 1, "a": 8, "b": 5i64, "c": 5});
        let (code, _) = code_of(parse(doc! {"$bit": {"a": {"and": 1.0}}}));
        assert_eq!(code, 2);
    }

    // --- positional -------------------------------------------------------------

    #[test]
    fn positional() {
        let out = apply_at(
            doc! {"_id": 1, "a": [1, 2, 3]},
            doc! {"$set": {"a.$": 9}},
            1,
        )
        .unwrap();
        assert_doc(&out, &doc! {"_id": 1, "a": [1, 9, 3]});
        let out = apply_at(
            doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
            doc! {"$inc": {"a.$.b": 10}},
            1,
        )
        .unwrap();
        assert_doc(&out, &doc! {"_id": 1, "a": [{"b": 1}, {"b": 12}]});
        let (code, msg) = code_of(apply(doc! {"_id": 1, "a": [1]}, doc! {"$set": {"a.$": 1}}));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "The positional operator did not find the match needed from the query."
        );
    }

    #[test]
    fn positional_merging_with_an_index() {
        // Different leaves under the same element merge.
        let out = apply_at(
            doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
            doc! {"$set": {"a.$.c": 1, "a.1.d": 2}},
            1,
        )
        .unwrap();
        assert_doc(
            &out,
            &doc! {"_id": 1, "a": [{"b": 1}, {"b": 2, "c": 1, "d": 2}]},
        );
        let (code, msg) = code_of(apply_at(
            doc! {"_id": 1, "a": [1, 2]},
            doc! {"$set": {"a.$": 1, "a.1": 2}},
            1,
        ));
        assert_eq!(code, 40);
        assert_eq!(msg, "Update created a conflict at 'a.1'");
    }

    // --- $[] and $[id] ------------------------------------------------------

    #[test]
    fn all_positional() {
        let out = applied(
            doc! {"_id": 1, "a": [1, 2, 3], "b": [{"c": 1}, {"c": 2}]},
            doc! {"$inc": {"a.$[]": 10, "b.$[].c": 1}},
        );
        assert_doc(
            &out,
            &doc! {"_id": 1, "a": [11, 12, 13], "b": [{"c": 2}, {"c": 3}]},
        );
        let (code, msg) = code_of(apply(doc! {"_id": 1}, doc! {"$set": {"a.$[]": 1}}));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "The path 'a' must exist in the document in order to apply array updates."
        );
        let (code, msg) = code_of(apply(doc! {"_id": 1, "a": 5}, doc! {"$set": {"a.$[]": 1}}));
        assert_eq!(code, 2);
        assert_eq!(msg, "Cannot apply array updates to non-array element a: 5");
        let (code, _) = code_of(apply(
            doc! {"_id": 1, "a": [1, "x"]},
            doc! {"$inc": {"a.$[]": 1}},
        ));
        assert_eq!(code, 14);
    }

    #[test]
    fn array_filters() {
        let update = parse_with(
            doc! {"$set": {"grades.$[g].ok": true}},
            vec![doc! {"g.score": {"$gte": 85}}],
        )
        .unwrap();
        let out = update
            .apply(
                &doc! {"_id": 1, "grades": [{"score": 90}, {"score": 80}, {"score": 85}]},
                &ApplyContext::default(),
            )
            .unwrap();
        assert_doc(
            &out,
            &doc! {"_id": 1, "grades": [
                {"score": 90, "ok": true}, {"score": 80}, {"score": 85, "ok": true}
            ]},
        );
        let update =
            parse_with(doc! {"$set": {"a.$[x]": 0}}, vec![doc! {"x": {"$gt": 1}}]).unwrap();
        let out = update
            .apply(&doc! {"_id": 1, "a": [1, 2, 3]}, &ApplyContext::default())
            .unwrap();
        assert_doc(&out, &doc! {"_id": 1, "a": [1, 0, 0]});
    }

    #[test]
    fn array_filters_merge_and_conflict() {
        let update = parse_with(
            doc! {"$set": {"a.$[x].b": 1, "a.$[].c": 2}},
            vec![doc! {"x.k": 1}],
        )
        .unwrap();
        let out = update
            .apply(
                &doc! {"_id": 1, "a": [{"k": 1}, {"k": 2}]},
                &ApplyContext::default(),
            )
            .unwrap();
        assert_doc(
            &out,
            &doc! {"_id": 1, "a": [{"k": 1, "b": 1, "c": 2}, {"k": 2, "c": 2}]},
        );
        let update = parse_with(
            doc! {"$set": {"a.$[x]": 1, "a.$[]": 2}},
            vec![doc! {"x": 1}],
        )
        .unwrap();
        let (code, msg) =
            code_of(update.apply(&doc! {"_id": 1, "a": [1, 5]}, &ApplyContext::default()));
        assert_eq!(code, 40);
        assert_eq!(msg, "Update created a conflict at 'a.0'");
    }

    #[test]
    fn array_filter_errors() {
        let (code, msg) = code_of(parse(doc! {"$set": {"a.$[x]": 1}}));
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "No array filter found for identifier 'x' in path 'a.$[x]'"
        );
        let (code, msg) = code_of(parse_with(
            doc! {"$set": {"a.$[x]": 1}},
            vec![doc! {"x": 1}, doc! {"y": 1}],
        ));
        assert_eq!(code, 9);
        assert!(msg.starts_with("The array filter for identifier 'y' was not used in the update"));
        let (code, _) = code_of(parse_with(
            doc! {"$set": {"a.$[x]": 1}},
            vec![doc! {"x": 1}, doc! {"x": 2}],
        ));
        assert_eq!(code, 9);
        let (code, _) = code_of(parse_with(doc! {"$set": {"a": 1}}, vec![doc! {}]));
        assert_eq!(code, 9);
        let (code, msg) = code_of(parse_with(doc! {"$set": {"a": 1}}, vec![doc! {"X": 1}]));
        assert_eq!(code, 2);
        assert!(msg.ends_with("found 'X'"));
        let (code, _) = code_of(parse_with(
            doc! {"$set": {"a": 1}},
            vec![doc! {"x": 1, "y": 1}],
        ));
        assert_eq!(code, 9);
        let (code, _) = code_of(parse(doc! {"$set": {"$[]": 1}}));
        assert_eq!(code, 2);
    }

    // --- no-ops (what nModified counts) -------------------------------------

    #[test]
    fn no_op_updates_return_an_identical_document() {
        let original = doc! {
            "_id": 1, "a": [1, 2], "b": 5, "c": [], "d": {"e": 1}, "s": "x",
        };
        for u in [
            doc! {"$set": {"b": 5, "d.e": 1}},
            doc! {"$unset": {"missing": 1, "d.missing": 1, "s.x": 1}},
            doc! {"$inc": {"b": 0}},
            doc! {"$mul": {"b": 1}},
            doc! {"$min": {"b": 6}},
            doc! {"$max": {"b": 4}},
            doc! {"$addToSet": {"a": {"$each": [1, 2]}}},
            doc! {"$push": {"a": {"$each": []}}},
            doc! {"$push": {"a": {"$each": [], "$slice": 5}}},
            doc! {"$pull": {"a": 7}},
            doc! {"$pullAll": {"a": [7]}},
            doc! {"$pop": {"c": 1, "missing": 1}},
            doc! {"$rename": {"missing": "z"}},
            doc! {"$setOnInsert": {"z": 1}},
            doc! {"$bit": {"b": {"or": 1}}},
        ] {
            let out = applied(original.clone(), u.clone());
            assert!(documents_identical(&out, &original), "{u} changed {out}");
        }
    }

    // --- misc ---------------------------------------------------------------

    #[test]
    fn modified_paths_lists_operator_paths() {
        let update = parse(doc! {"$set": {"a.b": 1}, "$rename": {"c": "d"}}).unwrap();
        assert_eq!(
            update.modified_paths(),
            Some(vec!["a.b".to_string(), "c".to_string(), "d".to_string()])
        );
        assert_eq!(parse(doc! {"a": 1}).unwrap().modified_paths(), None);
    }

    #[test]
    fn updates_are_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Update>();
    }

    #[test]
    fn identity_is_order_and_type_sensitive() {
        assert!(documents_identical(
            &doc! {"a": f64::NAN, "b": [1]},
            &doc! {"a": f64::NAN, "b": [1]}
        ));
        assert!(!documents_identical(
            &doc! {"a": 1, "b": 2},
            &doc! {"b": 2, "a": 1}
        ));
        assert!(!documents_identical(&doc! {"a": 1}, &doc! {"a": 1i64}));
    }

    #[test]
    fn deep_values_in_messages_are_cut_short() {
        let mut value = Bson::String("x".to_string());
        for _ in 0..1_000 {
            value = Bson::Array(vec![value]);
        }
        let text = value_string(&value);
        assert!(text.len() < 200, "{text}");
    }

    #[test]
    fn array_operators_are_linear_over_100k_elements() {
        let n = 100_000;
        let ints = |range: std::ops::Range<i32>| Bson::Array(range.map(Bson::Int32).collect());
        let len = |d: &Document, f: &str| d.get_array(f).map(Vec::len).unwrap_or(0);
        let base = doc! {"_id": 1, "a": ints(0..n)};

        // $addToSet with $each: half the values are new.
        let out = applied(
            base.clone(),
            doc! {"$addToSet": {"a": {"$each": ints(n / 2..n + n / 2)}}},
        );
        assert_eq!(len(&out, "a"), 150_000);
        // Duplicates within $each are kept once.
        let out = applied(
            doc! {"_id": 1},
            doc! {"$addToSet": {"a": {"$each": ints(0..n).as_array().unwrap().iter().chain(ints(0..n).as_array().unwrap()).cloned().collect::<Vec<_>>()}}},
        );
        assert_eq!(len(&out, "a"), 100_000);
        // $pullAll of every other value.
        let evens = Bson::Array((0..n).step_by(2).map(Bson::Int32).collect());
        let out = applied(base.clone(), doc! {"$pullAll": {"a": evens.clone()}});
        assert_eq!(len(&out, "a"), 50_000);
        // $pull with an $in condition.
        let out = applied(base.clone(), doc! {"$pull": {"a": {"$in": evens}}});
        assert_eq!(len(&out, "a"), 50_000);
        // $push with $each, $position, $sort and $slice.
        let out = applied(
            base.clone(),
            doc! {"$push": {"a": {"$each": ints(0..n), "$position": 0}}},
        );
        assert_eq!(len(&out, "a"), 200_000);
        let out = applied(
            base.clone(),
            doc! {"$push": {"a": {"$each": ints(0..n), "$sort": -1, "$slice": 150_000}}},
        );
        assert_eq!(len(&out, "a"), 150_000);
        // Positional updates of every element.
        let out = applied(base.clone(), doc! {"$inc": {"a.$[]": 1}});
        assert_eq!(out.get_array("a").unwrap()[n as usize - 1], Bson::Int32(n));
        let out = parse_with(
            doc! {"$set": {"a.$[big]": 0}},
            vec![doc! {"big": {"$gte": n / 2}}],
        )
        .unwrap()
        .apply(&base, &ApplyContext::default())
        .unwrap();
        let zeros = out
            .get_array("a")
            .unwrap()
            .iter()
            .filter(|v| **v == Bson::Int32(0));
        assert_eq!(zeros.count(), n as usize / 2 + 1);
    }

    #[test]
    fn field_key_order() {
        let mut keys: Vec<FieldKey> = ["b", "10", "9", "a", "09", "1a", "_"]
            .iter()
            .map(|s| FieldKey(s.to_string()))
            .collect();
        keys.sort();
        let names: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
        assert_eq!(names, ["09", "9", "10", "1a", "_", "a", "b"]);
    }

    mod props {
        use proptest::prelude::*;

        use super::*;

        fn path_strategy() -> impl Strategy<Value = String> {
            proptest::collection::vec(
                prop_oneof![
                    Just("a".to_string()),
                    Just("b".to_string()),
                    Just("0".to_string()),
                    Just("7".to_string()),
                    Just("$".to_string()),
                    Just("$[]".to_string()),
                    Just("99999999".to_string()),
                    Just("".to_string()),
                ],
                1..5,
            )
            .prop_map(|parts| parts.join("."))
        }

        fn value_strategy() -> impl Strategy<Value = Bson> {
            let leaf = prop_oneof![
                any::<i32>().prop_map(Bson::Int32),
                any::<i64>().prop_map(Bson::Int64),
                any::<f64>().prop_map(Bson::Double),
                "[a-z]{0,3}".prop_map(Bson::String),
                Just(Bson::Null),
            ];
            leaf.prop_recursive(3, 12, 3, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
                    proptest::collection::vec(("[ab0]", inner), 0..3)
                        .prop_map(|fields| { Bson::Document(fields.into_iter().collect()) }),
                ]
            })
        }

        fn operator_strategy() -> impl Strategy<Value = &'static str> {
            prop_oneof![
                Just("$set"),
                Just("$unset"),
                Just("$inc"),
                Just("$mul"),
                Just("$min"),
                Just("$max"),
                Just("$push"),
                Just("$addToSet"),
                Just("$pop"),
                Just("$pull"),
                Just("$pullAll"),
                Just("$rename"),
                Just("$currentDate"),
            ]
        }

        proptest! {
            /// No input makes parsing or applying panic, and failures leave
            /// nothing half-applied (the caller's document is untouched).
            #[test]
            fn never_panics(
                doc_fields in proptest::collection::vec(("[ab0]", value_strategy()), 0..4),
                ops in proptest::collection::vec(
                    (operator_strategy(), path_strategy(), value_strategy()), 1..4),
                position in proptest::option::of(0usize..4),
            ) {
                let mut doc: Document = doc_fields.into_iter().collect();
                doc.insert("_id", 1);
                let mut u = Document::new();
                for (op, path, value) in ops {
                    let entry = u.entry(op.to_string()).or_insert_with(|| Bson::Document(Document::new()));
                    if let Bson::Document(fields) = entry {
                        fields.insert(path, value);
                    }
                }
                if let Ok(update) = parse_update(&Bson::Document(u), None) {
                    let ctx = ApplyContext {
                        details: MatchDetails { matched: true, array_position: position, text_score: None },
                        inserting: false,
                    };
                    let before = doc.clone();
                    let _ = update.apply(&doc, &ctx);
                    let _ = update.upsert_document(doc.clone());
                    prop_assert!(documents_identical(&before, &doc));
                }
            }

            /// A `$set` of every field to its own value changes nothing.
            #[test]
            fn set_to_same_value_is_identical(
                doc_fields in proptest::collection::vec(("[ab]", value_strategy()), 0..4),
            ) {
                let mut doc = Document::new();
                doc.insert("_id", 1);
                for (k, v) in doc_fields {
                    doc.insert(k, v);
                }
                let set: Document = doc.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                let update = parse_update(&bson!({"$set": set}), None).unwrap();
                let out = update.apply(&doc, &ApplyContext::default()).unwrap();
                prop_assert!(documents_identical(&out, &doc));
            }
        }
    }
}
