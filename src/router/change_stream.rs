//! Change streams: `$changeStream` reads the store's change log
//! ([`crate::storage::ChangeLog`]) from a position, turns each entry into
//! the event MongoDB shows, runs the stages after `$changeStream` over it
//! and hands out batches with a resume token after each.
//!
//! One store keeps one log, in the order its batches commit, whatever
//! partition or collection they touched: a split moves no entry, so a
//! stream sees every change once, in commit order, through splits. A
//! stream over a collection, a database or the whole deployment reads the
//! same log and keeps the entries of its scope, as a mongos's streams read
//! each shard's oplog.
//!
//! A resume token (`{_data: <hex>}`) names a place in the log: the
//! cluster time of a commit and the change's index in it, and whether it
//! was the `invalidate` that followed. Reading to the end of the log moves
//! the stream's place to a time every later commit will pass
//! ([`crate::storage::ChangeLog::horizon`]), so `postBatchResumeToken`
//! keeps moving on a quiet stream and resuming from it skips nothing.

use std::sync::Arc;

use bson::raw::cstr;
use bson::{doc, Bson, Document, RawDocument, RawDocumentBuf, Timestamp};

use super::changes::{HASH, POST_IMAGE, PRE_IMAGE};
use super::{FindSpec, Namespace, Router};
use crate::aggregate::{Context, ParseContext, Pipeline};
use crate::bail;
use crate::base::clock;
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::storage::{blocking, ChangeLog, ChangePosition};

/// Stages that may follow `$changeStream`: those that look at one event
/// at a time.
const ALLOWED_STAGES: [&str; 9] = [
    "$match",
    "$project",
    "$addFields",
    "$set",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
    "$redact",
    "$changeStreamSplitLargeEvent",
];

/// Most log entries one batch reads, however few of them its stream
/// keeps: a stream whose filter drops everything still answers promptly,
/// with a resume token further on.
const SCAN_PER_BATCH: usize = 10_000;
/// Bytes of events in one batch after its first.
const BATCH_BYTES: usize = crate::base::limits::MAX_BSON_OBJECT_SIZE;

/// What a stream watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Collection(Namespace),
    Database(String),
    /// `allChangesForCluster`: every database but `admin`, `config` and
    /// `local`.
    Cluster,
}

/// `fullDocument`: what an update event carries of the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FullDocument {
    Default,
    UpdateLookup,
    WhenAvailable,
    Required,
}

/// `fullDocumentBeforeChange`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BeforeChange {
    Off,
    WhenAvailable,
    Required,
}

/// A place in the log as a resume token carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeToken {
    pub position: ChangePosition,
    /// The token of the `invalidate` after the change at `position`.
    pub invalidate: bool,
    /// The shard-key hashes (both ends inclusive) of the one partition a
    /// stream resumed from it follows (`GetChangeStreamTokens`).
    pub hashes: Option<(i64, i64)>,
}

const TOKEN_VERSION: u8 = 1;
const INVALIDATE: u8 = 1;
const HASHES: u8 = 2;

impl ResumeToken {
    /// `{_data: "<hex>"}`: version, time, index, flags and the hash range
    /// if there is one, upper-case hex as MongoDB writes its tokens.
    pub fn to_document(self) -> Document {
        let mut bytes = vec![TOKEN_VERSION];
        bytes.extend_from_slice(&self.position.encode());
        let mut flags = 0;
        if self.invalidate {
            flags |= INVALIDATE;
        }
        if self.hashes.is_some() {
            flags |= HASHES;
        }
        bytes.push(flags);
        if let Some((min, max)) = self.hashes {
            bytes.extend_from_slice(&min.to_be_bytes());
            bytes.extend_from_slice(&max.to_be_bytes());
        }
        // Written for every event: no string per byte.
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let data: String = bytes
            .iter()
            .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])
            .map(char::from)
            .collect();
        doc! {"_data": data}
    }

    pub fn parse(token: &Bson) -> Result<ResumeToken> {
        let bad = || {
            Error::new(
                ErrorCode::InvalidResumeToken,
                format!("The resume token {token} is not one this server issued: pass the _id of a change event or a postBatchResumeToken as it was given"),
            )
        };
        let Bson::Document(d) = token else {
            return Err(bad());
        };
        let Some(Bson::String(data)) = d.get("_data") else {
            return Err(bad());
        };
        if data.len() % 2 != 0 || !data.is_ascii() {
            return Err(bad());
        }
        let bytes: Vec<u8> = (0..data.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&data[i..i + 2], 16))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| bad())?;
        const PLAIN: usize = 2 + ChangePosition::ENCODED_LEN;
        let (Some(&TOKEN_VERSION), Some(&flags)) = (bytes.first(), bytes.get(PLAIN - 1)) else {
            return Err(bad());
        };
        let hashes = match (flags & HASHES != 0, &bytes[PLAIN..]) {
            (false, []) => None,
            (true, range) if range.len() == 16 => {
                let (min, max) = range.split_at(8);
                let number = |b: &[u8]| b.try_into().map(i64::from_be_bytes).map_err(|_| bad());
                Some((number(min)?, number(max)?))
            }
            _ => return Err(bad()),
        };
        if flags & !(INVALIDATE | HASHES) != 0 {
            return Err(bad());
        }
        Ok(ResumeToken {
            position: ChangePosition::decode(&bytes[1..PLAIN - 1]).map_err(|_| bad())?,
            invalidate: flags & INVALIDATE != 0,
            hashes,
        })
    }
}

/// Where a new stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Now,
    /// After this place (`resumeAfter`, `startAfter`).
    After(ChangePosition),
    /// At the first change at or after this time (`startAtOperationTime`).
    At(u64),
}

/// A parsed `$changeStream` stage.
#[derive(Debug, Clone)]
pub struct ChangeStreamSpec {
    scope: Scope,
    full_document: FullDocument,
    before_change: BeforeChange,
    start: Start,
    show_expanded: bool,
    /// One partition's hashes, from a `GetChangeStreamTokens` token.
    hashes: Option<(i64, i64)>,
}

fn choice<T: Copy>(spec: &Document, field: &str, options: &[(&str, T)], default: T) -> Result<T> {
    match spec.get(field) {
        None => Ok(default),
        Some(Bson::String(s)) => options
            .iter()
            .find(|(name, _)| name == s)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
                Error::bad_value(format!(
                    "'{s}' is not a valid value for $changeStream.{field}: use one of {}",
                    names.join(", ")
                ))
            }),
        Some(other) => Err(Error::type_mismatch(format!(
            "BSON field '$changeStream.{field}' is the wrong type '{}', expected type 'string'",
            crate::query::compare::type_name(other)
        ))),
    }
}

fn flag(spec: &Document, field: &str) -> Result<bool> {
    match spec.get(field) {
        None => Ok(false),
        Some(Bson::Boolean(b)) => Ok(*b),
        Some(other) => Err(Error::type_mismatch(format!(
            "BSON field '$changeStream.{field}' is the wrong type '{}', expected type 'bool'",
            crate::query::compare::type_name(other)
        ))),
    }
}

impl ChangeStreamSpec {
    /// Parses the stage's argument for a stream opened on `ns` (whose
    /// collection is `$cmd.aggregate` for `aggregate: 1`).
    pub fn parse(arg: &Bson, ns: &Namespace, collectionless: bool) -> Result<ChangeStreamSpec> {
        let Bson::Document(spec) = arg else {
            bail!(
                FailedToParse,
                "the $changeStream stage specification must be an object, not {}",
                crate::query::compare::type_name(arg)
            );
        };
        const FIELDS: [&str; 7] = [
            "fullDocument",
            "fullDocumentBeforeChange",
            "resumeAfter",
            "startAfter",
            "startAtOperationTime",
            "allChangesForCluster",
            "showExpandedEvents",
        ];
        if let Some(unknown) = spec
            .keys()
            .find(|k| !FIELDS.contains(&k.as_str()) && k.as_str() != "showMigrationEvents")
        {
            bail!(
                UnknownField,
                "BSON field '$changeStream.{unknown}' is an unknown field."
            );
        }
        let all = flag(spec, "allChangesForCluster")?;
        let scope = if all {
            if !(collectionless && ns.db == "admin") {
                bail!(
                    InvalidOptions,
                    "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' database, and with no collection name"
                );
            }
            Scope::Cluster
        } else if collectionless {
            if matches!(ns.db.as_str(), "admin" | "config" | "local") {
                bail!(
                    InvalidNamespace,
                    "$changeStream may not be opened on the internal {} database",
                    ns.db
                );
            }
            Scope::Database(ns.db.clone())
        } else {
            if matches!(ns.db.as_str(), "admin" | "config" | "local")
                || ns.coll.starts_with("system.")
            {
                bail!(
                    InvalidNamespace,
                    "$changeStream may not be opened on the internal {ns} namespace"
                );
            }
            Scope::Collection(ns.clone())
        };
        let full_document = choice(
            spec,
            "fullDocument",
            &[
                ("default", FullDocument::Default),
                ("updateLookup", FullDocument::UpdateLookup),
                ("whenAvailable", FullDocument::WhenAvailable),
                ("required", FullDocument::Required),
            ],
            FullDocument::Default,
        )?;
        let before_change = choice(
            spec,
            "fullDocumentBeforeChange",
            &[
                ("off", BeforeChange::Off),
                ("whenAvailable", BeforeChange::WhenAvailable),
                ("required", BeforeChange::Required),
            ],
            BeforeChange::Off,
        )?;
        let resume_after = spec.get("resumeAfter");
        let start_after = spec.get("startAfter");
        let at = spec.get("startAtOperationTime");
        if resume_after.is_some() && start_after.is_some() {
            bail!(
                ChangeStreamResumeAndStartAfter,
                "Do not specify both 'resumeAfter' and 'startAfter' in a $changeStream stage"
            );
        }
        if at.is_some() && (resume_after.is_some() || start_after.is_some()) {
            bail!(
                ChangeStreamTwoResumeOptions,
                "Only one type of resume option is allowed, but multiple were found."
            );
        }
        let mut hashes = None;
        let start = match (resume_after, start_after, at) {
            (Some(token), _, _) => {
                let token = ResumeToken::parse(token)?;
                if token.invalidate {
                    bail!(
                        InvalidResumeToken,
                        "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate notification."
                    );
                }
                hashes = token.hashes;
                Start::After(token.position)
            }
            (_, Some(token), _) => {
                let token = ResumeToken::parse(token)?;
                hashes = token.hashes;
                Start::After(token.position)
            }
            (_, _, Some(Bson::Timestamp(ts))) => Start::At(clock::pack(*ts)),
            (_, _, Some(other)) => bail!(
                TypeMismatch,
                "BSON field '$changeStream.startAtOperationTime' is the wrong type '{}', expected type 'timestamp'",
                crate::query::compare::type_name(other)
            ),
            _ => Start::Now,
        };
        Ok(ChangeStreamSpec {
            scope,
            full_document,
            before_change,
            start,
            show_expanded: flag(spec, "showExpandedEvents")?,
            hashes,
        })
    }
}

/// Checks the stages after `$changeStream`: only those that look at one
/// event at a time.
pub fn check_stages(rest: &[Bson]) -> Result<()> {
    for stage in rest {
        let name = match stage {
            Bson::Document(d) => d.keys().next().map(String::as_str).unwrap_or(""),
            _ => "",
        };
        if name == "$changeStream" {
            bail!(
                StageMustBeFirst,
                "$changeStream is only valid as the first stage in a pipeline"
            );
        }
        if !ALLOWED_STAGES.contains(&name) {
            bail!(
                IllegalOperation,
                "{name} is not permitted in a $changeStream pipeline"
            );
        }
    }
    Ok(())
}

/// One batch of a stream.
pub struct ChangeBatch {
    /// The events, encoded: most are written straight from their entry.
    pub events: Vec<RawDocumentBuf>,
    /// `postBatchResumeToken`.
    pub resume_token: Document,
    /// The stream was invalidated: the cursor closes.
    pub closed: bool,
}

/// An open change stream: its place in the log and what it keeps.
pub struct ChangeStream {
    router: Arc<Router>,
    spec: ChangeStreamSpec,
    pipeline: Pipeline,
    ctx: Arc<dyn Context>,
    /// Everything up to here has been read.
    position: ChangePosition,
    /// The horizon of the last read: the log's newest commit passing it
    /// is what a waiting `getMore` waits for.
    horizon: u64,
    closed: bool,
}

impl ChangeStream {
    /// Opens a stream; `rest` are the stages after `$changeStream`.
    pub fn open(
        router: Arc<Router>,
        spec: ChangeStreamSpec,
        rest: &[Bson],
        parse: &ParseContext,
        ctx: Arc<dyn Context>,
    ) -> Result<ChangeStream> {
        check_stages(rest)?;
        let pipeline = Pipeline::parse(rest, parse)?;
        let log = change_log(&router)?;
        let horizon = log.horizon();
        let start = log.start()?;
        let position = match spec.start {
            Start::Now => ChangePosition::end_of(horizon),
            Start::After(position) => position,
            Start::At(0) => ChangePosition::default(),
            Start::At(time) => ChangePosition::end_of(time - 1),
        };
        check_retained(position, start)?;
        Ok(ChangeStream {
            router,
            spec,
            pipeline,
            ctx,
            position,
            horizon,
            closed: false,
        })
    }

    pub fn resume_token(&self) -> Document {
        self.token(self.position, false).to_document()
    }

    /// The token of `position` in this stream (keeping its partition).
    fn token(&self, position: ChangePosition, invalidate: bool) -> ResumeToken {
        ResumeToken {
            position,
            invalidate,
            hashes: self.spec.hashes,
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// What a `getMore` that found nothing waits on: the log's newest
    /// commit, and the value it must pass.
    pub fn wake(&self) -> Option<(tokio::sync::watch::Receiver<u64>, u64)> {
        let log = self.router.store.change_log()?;
        Some((log.subscribe(), self.horizon))
    }

    /// The next events, up to `max` (all that fit a reply without it).
    pub fn next_batch(&mut self, max: Option<usize>) -> Result<ChangeBatch> {
        let mut events = Vec::new();
        if self.closed {
            return Ok(self.batch(events));
        }
        let router = self.router.clone();
        let log = change_log(&router)?;
        let horizon = log.horizon();
        let view = router.store.view();
        check_retained(self.position, log.start()?)?;
        let mut bytes = 0usize;
        let mut reached_end = true;
        for (scanned, item) in blocking::iter(view.scan_changes(self.position)).enumerate() {
            if max.is_some_and(|m| events.len() >= m) || scanned >= SCAN_PER_BATCH {
                reached_end = false;
                break;
            }
            let (position, entry) = item?;
            let entry = RawDocument::from_bytes(&entry).map_err(not_bson)?;
            let produced = match self.plain_event(position, entry)? {
                Plain::Event(event) => vec![event],
                Plain::Skipped => Vec::new(),
                Plain::General => {
                    let entry = Document::try_from(entry).map_err(not_bson)?;
                    self.events_of(position, entry)?
                        .iter()
                        .map(RawDocumentBuf::try_from)
                        .collect::<std::result::Result<_, _>>()
                        .map_err(not_bson)?
                }
            };
            let before = events.len();
            for event in produced {
                let size = event.as_bytes().len();
                if !events.is_empty() && bytes + size > BATCH_BYTES {
                    // The entry is read again by the next batch.
                    events.truncate(before);
                    self.closed = false;
                    return Ok(self.batch(events));
                }
                bytes += size;
                events.push(event);
            }
            self.position = position;
            if self.closed {
                // After the invalidate nothing follows.
                return Ok(self.batch(events));
            }
        }
        if reached_end {
            self.position = self.position.max(ChangePosition::end_of(horizon));
        }
        self.horizon = horizon;
        Ok(self.batch(events))
    }

    fn batch(&self, events: Vec<RawDocumentBuf>) -> ChangeBatch {
        ChangeBatch {
            events,
            resume_token: self.resume_token(),
            closed: self.closed,
        }
    }

    /// Whether an entry on `ns` belongs to this stream.
    fn watches(&self, db: &str, coll: Option<&str>) -> bool {
        let internal_db = matches!(db, "admin" | "config" | "local");
        let system = coll.is_some_and(|c| c.starts_with("system."));
        match &self.spec.scope {
            Scope::Collection(ns) => ns.db == db && coll == Some(ns.coll.as_str()),
            Scope::Database(d) => d == db && !system,
            Scope::Cluster => !internal_db && !system,
        }
    }

    /// The event of an entry written straight from its bytes, when it
    /// needs nothing but them: no stages to run, no document to look up
    /// or image to add, no `invalidate` to follow.
    fn plain_event(&self, position: ChangePosition, entry: &RawDocument) -> Result<Plain> {
        if !self.pipeline.stages.is_empty() {
            return Ok(Plain::General);
        }
        let str_of = |d: &RawDocument, key: &str| d.get_str(key).ok().map(str::to_string);
        let Some(operation) = str_of(entry, "operationType") else {
            return Ok(Plain::General);
        };
        let Ok(ns) = entry.get_document("ns") else {
            return Ok(Plain::Skipped);
        };
        let (db, coll) = (str_of(ns, "db").unwrap_or_default(), str_of(ns, "coll"));
        if !self.watches(&db, coll.as_deref()) {
            return Ok(Plain::Skipped);
        }
        let needs_more = match operation.as_str() {
            "insert" => false,
            "update" => {
                self.spec.full_document != FullDocument::Default
                    || self.spec.before_change != BeforeChange::Off
            }
            "replace" | "delete" => self.spec.before_change != BeforeChange::Off,
            // DDL, and what may invalidate the stream.
            _ => true,
        };
        if needs_more {
            return Ok(Plain::General);
        }
        if let (Ok(hash), Some((min, max))) = (entry.get_i64(HASH), self.spec.hashes) {
            if hash < min || hash > max {
                return Ok(Plain::Skipped);
            }
        }
        let token = RawDocumentBuf::try_from(&self.token(position, false).to_document())
            .map_err(not_bson)?;
        let mut event = RawDocumentBuf::new();
        event.append(cstr!("_id"), token);
        event.append(cstr!("operationType"), operation.as_str());
        event.append(cstr!("clusterTime"), clock::unpack(position.time));
        for element in entry {
            let (field, value) = element.map_err(not_bson)?;
            let hidden = field.as_str().starts_with('\u{1}')
                || (!self.spec.show_expanded && field.as_str() == "collectionUUID");
            if !hidden && field.as_str() != "operationType" {
                event.append(field, value);
            }
        }
        Ok(Plain::Event(event))
    }

    /// The events an entry makes in this stream: none, one, or a change
    /// and the `invalidate` it causes.
    fn events_of(
        &mut self,
        position: ChangePosition,
        mut entry: Document,
    ) -> Result<Vec<Document>> {
        let operation = entry.get_str("operationType").unwrap_or("").to_string();
        let (db, coll) = match entry.get_document("ns") {
            Ok(ns) => (
                ns.get_str("db").unwrap_or("").to_string(),
                ns.get_str("coll").ok().map(str::to_string),
            ),
            Err(_) => return Ok(Vec::new()),
        };
        if !self.watches(&db, coll.as_deref()) {
            return Ok(Vec::new());
        }
        let expanded_only = matches!(
            operation.as_str(),
            "create" | "createIndexes" | "dropIndexes" | "shardCollection" | "modify"
        );
        if expanded_only && !self.spec.show_expanded {
            return Ok(Vec::new());
        }
        let invalidates = matches!(
            (&self.spec.scope, operation.as_str()),
            (Scope::Collection(_), "drop" | "rename") | (Scope::Database(_), "dropDatabase")
        );
        let hash = entry.remove(HASH);
        if let (Some(Bson::Int64(hash)), Some((min, max))) = (hash, self.spec.hashes) {
            if hash < min || hash > max {
                return Ok(Vec::new());
            }
        }
        let pre = entry.remove(PRE_IMAGE);
        let post = entry.remove(POST_IMAGE);
        if !self.spec.show_expanded {
            entry.remove("collectionUUID");
            entry.remove("operationDescription");
        }
        let time = clock::unpack(position.time);
        let token = self.token(position, false);
        let mut event = doc! {
            "_id": token.to_document(),
            "operationType": &operation,
            "clusterTime": time,
        };
        let is_write = matches!(
            operation.as_str(),
            "insert" | "update" | "replace" | "delete"
        );
        for (field, value) in entry {
            if field == "operationType" {
                continue;
            }
            event.insert(field, value);
        }
        if operation == "update" {
            let full = match self.spec.full_document {
                FullDocument::Default => None,
                FullDocument::UpdateLookup => Some(self.look_up(&db, coll.as_deref(), &event)?),
                FullDocument::WhenAvailable => Some(post.unwrap_or(Bson::Null)),
                FullDocument::Required => Some(post.ok_or_else(|| missing_image("post"))?),
            };
            if let Some(full) = full {
                event.insert("fullDocument", full);
            }
        }
        if is_write && operation != "insert" {
            match self.spec.before_change {
                BeforeChange::Off => {}
                BeforeChange::WhenAvailable => {
                    event.insert("fullDocumentBeforeChange", pre.unwrap_or(Bson::Null));
                }
                BeforeChange::Required => {
                    let pre = pre.ok_or_else(|| missing_image("pre"))?;
                    event.insert("fullDocumentBeforeChange", pre);
                }
            }
        }
        let mut out = Vec::with_capacity(2);
        let kept = self
            .pipeline
            .run(Box::new(std::iter::once(Ok(event))), &self.ctx)?;
        let id = token.to_document();
        for doc in kept {
            let doc = doc?;
            if doc.get_document("_id").ok() != Some(&id) {
                bail!(
                    ChangeStreamFatalError,
                    "Encountered an event whose _id field, which contains the resume token, was modified by the pipeline. Modifying the _id field of an event makes it impossible to resume the stream from that point. Only transformations that retain the unmodified _id field are allowed."
                );
            }
            out.push(doc);
        }
        if invalidates {
            let token = self.token(position, true);
            out.push(doc! {
                "_id": token.to_document(),
                "operationType": "invalidate",
                "clusterTime": time,
                "wallTime": bson::DateTime::now(),
            });
            self.closed = true;
        }
        Ok(out)
    }

    /// The current version of an updated document (`updateLookup`):
    /// `null` when it is gone.
    fn look_up(&self, db: &str, coll: Option<&str>, event: &Document) -> Result<Bson> {
        let (Some(coll), Ok(key)) = (coll, event.get_document("documentKey")) else {
            return Ok(Bson::Null);
        };
        let ns = Namespace {
            db: db.to_string(),
            coll: coll.to_string(),
        };
        if self.router.collection(&ns).is_none() {
            return Ok(Bson::Null);
        }
        let spec = FindSpec {
            filter: Some(Filter::parse(key)?),
            limit: Some(1),
            ..FindSpec::default()
        };
        match self.router.find_stream(&ns, spec)?.next() {
            Some(doc) => Ok(Bson::Document(doc?)),
            None => Ok(Bson::Null),
        }
    }
}

/// Fails with `ChangeStreamHistoryLost` when the log, which starts at
/// `start`, no longer holds every change after `position`.
fn check_retained(position: ChangePosition, start: u64) -> Result<()> {
    if start > 0 && position.time < start.saturating_sub(1) {
        bail!(
                ChangeStreamHistoryLost,
                "Resume of change stream was not possible, as the resume point may no longer be in the change log (it starts at {:?}; the stream is at {:?}). Raise --change-log-retention-hours to keep changes longer.",
                clock::unpack(start),
                clock::unpack(position.time)
            );
    }
    Ok(())
}

/// What [`ChangeStream::plain_event`] made of an entry.
enum Plain {
    Event(RawDocumentBuf),
    /// Not this stream's.
    Skipped,
    /// It needs the general path.
    General,
}

fn not_bson(e: bson::error::Error) -> Error {
    Error::internal(format!("a change event is not valid BSON: {e}"))
}

fn missing_image(which: &str) -> Error {
    Error::new(
        ErrorCode::NoMatchingDocument,
        format!("Change stream was configured to require a {which}-image for all update, delete and replace events, but the {which}-image was not found: enable changeStreamPreAndPostImages on the collection"),
    )
}

fn change_log(router: &Router) -> Result<&dyn ChangeLog> {
    router.store.change_log().ok_or_else(|| {
        Error::new(
            ErrorCode::CommandNotSupported,
            "change streams need a storage backend with a change log (the embedded engine); this one keeps none",
        )
    })
}

/// One resume token per physical partition of `ns` (Cosmos DB's
/// `GetChangeStreamTokens`): a stream resumed from one follows the
/// changes of that partition's documents only, from now or from
/// `start_at`, so consumers can share a collection's changes. A token
/// keeps its hash range through later splits.
pub fn partition_tokens(
    router: &Router,
    ns: &Namespace,
    start_at: Option<Timestamp>,
) -> Result<Vec<Document>> {
    let log = change_log(router)?;
    let Some(coll) = router.collection(ns) else {
        bail!(NamespaceNotFound, "ns does not exist: {ns}");
    };
    let position = match start_at.map(clock::pack) {
        None => ChangePosition::end_of(log.horizon()),
        Some(0) => ChangePosition::default(),
        Some(time) => ChangePosition::end_of(time - 1),
    };
    check_retained(position, log.start()?)?;
    let ranges: Vec<(i64, i64)> = match &coll.sharding {
        Some(sharding) => sharding
            .map()
            .partitions
            .iter()
            .map(|p| (p.min, p.max))
            .collect(),
        None => vec![(i64::MIN, i64::MAX)],
    };
    Ok(ranges
        .into_iter()
        .map(|hashes| {
            ResumeToken {
                position,
                invalidate: false,
                hashes: Some(hashes),
            }
            .to_document()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bad_ones_are_refused() {
        let mut token = ResumeToken {
            position: ChangePosition {
                time: (1_700_000_000u64 << 32) | 7,
                index: 3,
            },
            invalidate: true,
            hashes: None,
        };
        let doc = token.to_document();
        assert_eq!(ResumeToken::parse(&Bson::Document(doc)).unwrap(), token);
        token.hashes = Some((i64::MIN, -5));
        let doc = token.to_document();
        assert_eq!(ResumeToken::parse(&Bson::Document(doc)).unwrap(), token);
        for bad in [
            Bson::Int32(1),
            Bson::Document(doc! {"_data": "zz"}),
            Bson::Document(doc! {"_data": "02000000000000000000000000000000"}),
            Bson::Document(doc! {"_data": "0100000000000000000000000002AB"}),
            Bson::Document(doc! {"_data": "0100000000000000000000000004"}),
        ] {
            let e = ResumeToken::parse(&bad).unwrap_err();
            assert_eq!(e.code.number(), 260);
        }
    }

    #[test]
    fn options_are_checked_as_mongodb_checks_them() {
        let ns = Namespace {
            db: "d".into(),
            coll: "c".into(),
        };
        let code = |spec: Document, collectionless: bool| {
            ChangeStreamSpec::parse(&Bson::Document(spec), &ns, collectionless)
                .unwrap_err()
                .code
                .number()
        };
        assert_eq!(code(doc! {"bogus": 1}, false), 40415);
        assert_eq!(code(doc! {"fullDocument": "sometimes"}, false), 2);
        assert_eq!(code(doc! {"allChangesForCluster": true}, true), 72);
        let token = ResumeToken {
            position: ChangePosition::default(),
            invalidate: false,
            hashes: None,
        }
        .to_document();
        assert_eq!(
            code(
                doc! {"resumeAfter": token.clone(), "startAfter": token.clone()},
                false
            ),
            50865
        );
        assert_eq!(
            code(
                doc! {"resumeAfter": token, "startAtOperationTime": Timestamp {time: 1, increment: 0}},
                false
            ),
            40674
        );
        assert_eq!(
            check_stages(&[Bson::Document(doc! {"$group": {"_id": null}})])
                .unwrap_err()
                .code
                .number(),
            20
        );
        assert!(
            check_stages(&[Bson::Document(doc! {"$match": {"operationType": "insert"}})]).is_ok()
        );
    }
}
