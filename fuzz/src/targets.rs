//! The targets: one per parser a client reaches, each taking the bytes a
//! client could make the server see and running them through the same
//! calls the server makes.
//!
//! A target must never panic, abort, overflow its stack, take seconds or
//! allocate without bound; errors are fine (they are what a client gets
//! back). Each returns a signature of what happened (which error, how
//! many results) that the runner uses as a cheap stand-in for coverage.
//!
//! Structured targets take one BSON document: the thing under test under
//! a fixed key (`filter`, `update`, `pipeline`, `expr`, `projection`,
//! `sort`) and the documents to apply it to under `docs`. It is checked
//! with the wire's validator first, as every command is.

use std::sync::Arc;

use bson::{Bson, Document, RawDocument};
use bytes::BytesMut;
use tokio_util::codec::Decoder;

use shardgate::aggregate::parse_update;
use shardgate::aggregate::{self, Context, DocStream, Limits, MergeSpec, ParseContext, Pipeline};
use shardgate::base::{Compressor, CompressorList};
use shardgate::error::{Error, Result};
use shardgate::query::filter::Filter;
use shardgate::query::projection::Projection;
use shardgate::query::sort::SortSpec;
use shardgate::query::update::{documents_identical, ApplyContext, RawApplied, Update};
use shardgate::wire::compression::compress_message;
use shardgate::wire::message::checked_document;
use shardgate::wire::{check_document, Message, MessageCodec};

use crate::generate::Gen;

/// Most results a pipeline target reads from its stream.
const MAX_RESULTS: usize = 1000;

/// What a target's input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Raw bytes (a wire stream, a BSON document).
    Bytes,
    /// One BSON document, as described in the module docs.
    Document,
}

pub struct Target {
    pub name: &'static str,
    pub input: Input,
    /// Runs one input; returns the signature of its outcome.
    pub run: fn(&[u8]) -> u64,
    /// Builds a fresh input from the grammar.
    pub generate: fn(&mut Gen) -> Vec<u8>,
    pub about: &'static str,
}

/// The longest one input may run before it must stop, as a request's
/// `maxTimeMS` bounds it on the server: slow but bounded work (values
/// that double up to the size limits) ends with `MaxTimeMSExpired` from
/// the same interrupt checks, well inside the runner's timeout.
pub const TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Target {
    /// Runs one input as the server runs a request with a time limit.
    pub fn execute(&self, input: &[u8]) -> u64 {
        let deadline = std::time::Instant::now() + TIME_LIMIT;
        let op = shardgate::query::interrupt::Operation::new(Some(deadline), None);
        let _current = shardgate::query::interrupt::enter(Some(op));
        (self.run)(input)
    }
}

pub static TARGETS: &[Target] = &[
    Target {
        name: "wire",
        input: Input::Bytes,
        run: wire,
        generate: generate_wire,
        about: "a byte stream through MessageCodec (whole and in pieces, OP_COMPRESSED unwrapped), then each message's documents",
    },
    Target {
        name: "bson",
        input: Input::Bytes,
        run: bson_document,
        generate: generate_bson,
        about: "BSON validation, conversion to a document and back",
    },
    Target {
        name: "filter",
        input: Input::Document,
        run: filter,
        generate: generate_filter,
        about: "Filter::parse, the planner's questions, matching (raw pre-check agrees)",
    },
    Target {
        name: "update",
        input: Input::Document,
        run: update,
        generate: generate_update,
        about: "parse_update with arrayFilters, apply (and apply_raw, which must agree), upsert documents",
    },
    Target {
        name: "pipeline",
        input: Input::Document,
        run: pipeline,
        generate: generate_pipeline,
        about: "Pipeline::parse and run over a few documents",
    },
    Target {
        name: "expression",
        input: Input::Document,
        run: expression,
        generate: generate_expression,
        about: "one aggregation expression in $project, $match/$expr and a $group accumulator",
    },
    Target {
        name: "projection",
        input: Input::Document,
        run: projection,
        generate: generate_projection,
        about: "Projection::parse and apply, with the filter's match details",
    },
    Target {
        name: "sort",
        input: Input::Document,
        run: sort,
        generate: generate_sort,
        about: "SortSpec::parse; the order is total and agrees with its keys",
    },
];

pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// A running hash of outcomes.
#[derive(Default)]
struct Signature(u64);

impl Signature {
    fn add(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x100_0000_01b3).rotate_left(5);
    }

    fn error(&mut self, e: &Error) {
        self.add(0xe000_0000 | e.code.number() as u32 as u64);
    }

    fn result<T>(&mut self, r: &Result<T>) {
        match r {
            Ok(_) => self.add(1),
            Err(e) => self.error(e),
        }
    }
}

/// Decodes a structured input the way a command body is decoded.
fn input_document(data: &[u8]) -> Option<Document> {
    checked_document(data).ok()
}

fn documents(input: &Document) -> Vec<Document> {
    match input.get("docs") {
        Some(Bson::Array(items)) => items
            .iter()
            .filter_map(|d| d.as_document().cloned())
            .collect(),
        _ => Vec::new(),
    }
}

/// Encodes what a command would send back; an unencodable result is
/// reported, not a crash.
fn encoded_len(doc: &Document) -> Option<usize> {
    doc.to_vec().ok().map(|v| v.len())
}

// ---------------------------------------------------------------------------
// wire

fn wire(data: &[u8]) -> u64 {
    let mut sig = Signature::default();
    let whole = decode_stream(data, data.len().max(1), &mut sig);
    // The same bytes arriving in pieces must decode to the same messages.
    let piece = 1 + data.first().map_or(0, |b| *b as usize % 61);
    let pieces = decode_stream(data, piece, &mut Signature::default());
    assert_eq!(whole, pieces, "decoding depends on how the bytes arrive");
    sig.0
}

/// Feeds `data` to the codec `piece` bytes at a time; returns a summary
/// of each message or error in order. The codec accepts every
/// compressor, as if `hello` had agreed on them all, so OP_COMPRESSED
/// frames reach the decompressors.
fn decode_stream(data: &[u8], piece: usize, sig: &mut Signature) -> Vec<String> {
    let mut codec = MessageCodec::accepting(CompressorList::all());
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in data.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(message)) => out.push(message_summary(&message, sig)),
                Ok(None) => break,
                Err(e) => {
                    sig.add(0x10_0000 + e.to_string().len() as u64);
                    out.push(format!("error: {e}"));
                    return out;
                }
            }
        }
    }
    out
}

fn message_summary(message: &Message, sig: &mut Signature) -> String {
    let shape = message_shape(message, sig);
    match message.compressor() {
        Some(c) => {
            sig.add(8 + u64::from(c.id()));
            format!("{c}: {shape}")
        }
        None => shape,
    }
}

fn message_shape(message: &Message, sig: &mut Signature) -> String {
    match message {
        Message::Msg(m) => {
            let command = m.command();
            sig.add(2 + command.is_ok() as u64);
            let shape = match &command {
                Ok(c) => format!("{} keys, {} sequences", c.body.len(), c.sequences.len()),
                Err(e) => e.to_string(),
            };
            format!("msg {} flags {:#x}: {shape}", m.request_id, m.flags)
        }
        Message::Query(q) => {
            let query = checked_document(&q.query);
            sig.add(4 + query.is_ok() as u64);
            format!(
                "query {} {}: {}",
                q.request_id,
                q.full_collection_name,
                query.is_ok()
            )
        }
    }
}

fn generate_wire(g: &mut Gen) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..1 + g.below(3) {
        let mut cmd = match g.below(3) {
            0 => bson::doc! {"find": "c", "filter": g.filter()},
            1 => bson::doc! {"aggregate": "c", "pipeline": g.pipeline(), "cursor": {}},
            _ => bson::doc! {"update": "c", "updates": [{"q": g.filter(), "u": g.update()}]},
        };
        cmd.insert("$db", "test");
        let body = cmd.to_vec().unwrap_or_default();
        let frame = if g.chance(0.2) {
            op_query_frame(g.below(1000) as i32, &body)
        } else {
            let sequence = if g.chance(0.3) {
                let docs: Vec<Vec<u8>> = (0..g.below(3))
                    .map(|_| g.document().to_vec().unwrap_or_default())
                    .collect();
                Some(("documents", docs))
            } else {
                None
            };
            op_msg_frame(g.below(1000) as i32, g.chance(0.2), &body, sequence)
        };
        let frame = if g.chance(0.25) {
            compress_message(&frame, Compressor::ALL[g.below(Compressor::ALL.len())])
        } else {
            frame
        };
        out.extend(frame);
    }
    out
}

/// An OP_MSG with one body section and an optional document sequence,
/// with a CRC-32C checksum when asked.
pub fn op_msg_frame(
    request_id: i32,
    checksum: bool,
    body: &[u8],
    sequence: Option<(&str, Vec<Vec<u8>>)>,
) -> Vec<u8> {
    let mut payload = Vec::new();
    let flags: u32 = if checksum { 1 } else { 0 };
    payload.extend(flags.to_le_bytes());
    payload.push(0);
    payload.extend(body);
    if let Some((identifier, docs)) = sequence {
        let size = 4 + identifier.len() + 1 + docs.iter().map(Vec::len).sum::<usize>();
        payload.push(1);
        payload.extend((size as i32).to_le_bytes());
        payload.extend(identifier.as_bytes());
        payload.push(0);
        for d in docs {
            payload.extend(d);
        }
    }
    let mut frame = header(
        request_id,
        2013,
        payload.len() + if checksum { 4 } else { 0 },
    );
    frame.extend(payload);
    if checksum {
        let crc = crc32c(&frame);
        frame.extend(crc.to_le_bytes());
    }
    frame
}

fn op_query_frame(request_id: i32, query: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend(0i32.to_le_bytes());
    payload.extend(b"admin.$cmd\0");
    payload.extend(0i32.to_le_bytes());
    payload.extend((-1i32).to_le_bytes());
    payload.extend(query);
    let mut frame = header(request_id, 2004, payload.len());
    frame.extend(payload);
    frame
}

fn header(request_id: i32, op_code: i32, payload: usize) -> Vec<u8> {
    let mut h = Vec::with_capacity(16 + payload);
    h.extend(((16 + payload) as i32).to_le_bytes());
    h.extend(request_id.to_le_bytes());
    h.extend(0i32.to_le_bytes());
    h.extend(op_code.to_le_bytes());
    h
}

/// CRC-32C (Castagnoli), bit by bit: only generated frames use it.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

// ---------------------------------------------------------------------------
// bson

fn bson_document(data: &[u8]) -> u64 {
    let mut sig = Signature::default();
    let Ok(depth) = check_document(data) else {
        sig.add(1);
        return sig.0;
    };
    sig.add(0x100 + depth as u64);
    let raw = RawDocument::from_bytes(data).expect("validated bytes are a raw document");
    let Ok(doc) = Document::try_from(raw) else {
        sig.add(2);
        return sig.0;
    };
    // What was accepted must encode again, and encoding is stable.
    let bytes = doc.to_vec().expect("an accepted document encodes");
    assert_eq!(
        check_document(&bytes).ok(),
        Some(depth),
        "re-encoding changed the depth"
    );
    let again = Document::from_reader(&bytes[..]).expect("re-encoded bytes decode");
    assert_eq!(again.to_vec().ok(), Some(bytes), "encoding is not stable");
    sig.0
}

fn generate_bson(g: &mut Gen) -> Vec<u8> {
    let mut d = g.document();
    d.insert("f", g.filter());
    if g.chance(0.3) {
        d.insert("p", g.pipeline());
    }
    d.to_vec().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// filter

fn filter(data: &[u8]) -> u64 {
    let mut sig = Signature::default();
    let Some(input) = input_document(data) else {
        return 1;
    };
    let spec = input.get_document("filter").cloned().unwrap_or_default();
    let f = match Filter::parse(&spec) {
        Ok(f) => f,
        Err(e) => {
            sig.error(&e);
            return sig.0;
        }
    };
    // What the planner and router ask of every filter.
    for path in ["_id", "a", "a.b", "c"] {
        sig.add(f.equality_values(path).map_or(0, |v| v.len() as u64 + 1));
        sig.add(f.range_bounds(path).is_some() as u64);
        sig.add(f.range_predicates(path).len() as u64);
        sig.add(f.equality_predicates(path).len() as u64);
        sig.add(f.accepts_missing(path) as u64);
    }
    sig.add(f.paths().map_or(0, |p| p.len() as u64));
    sig.add(f.conjuncts().len() as u64);
    sig.result(&f.upsert_seed());
    for d in documents(&input) {
        let matched = f.try_matches_with_details(&d);
        sig.result(&matched);
        if let Ok(details) = &matched {
            sig.add(details.matched as u64);
        }
        let Ok(bytes) = d.to_vec() else {
            continue;
        };
        let Ok(raw) = RawDocument::from_bytes(&bytes) else {
            continue;
        };
        // What the stored bytes decide is what the full match says.
        if let Some(decided) = f.matches_raw(raw) {
            match &matched {
                Ok(details) => assert!(
                    details.matched == decided
                        && (!decided || details.array_position.is_none()),
                    "the raw decision {decided} differs from the full match: {spec} on {d}"
                ),
                Err(e) => panic!(
                    "the raw decision {decided} on a document the full match fails on: {spec} on {d}: {e}"
                ),
            }
        }
        if let Ok(details) = &matched {
            assert!(
                f.may_match_raw(raw) || !details.matched,
                "the raw pre-check rejects a matching document: {spec} on {d}"
            );
        }
    }
    sig.0
}

fn generate_filter(g: &mut Gen) -> Vec<u8> {
    let d = bson::doc! {"filter": g.filter(), "docs": g.documents()};
    d.to_vec().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// update

fn update(data: &[u8]) -> u64 {
    let mut sig = Signature::default();
    let Some(input) = input_document(data) else {
        return 1;
    };
    let spec = input.get("update").cloned().unwrap_or(Bson::Null);
    let array_filters: Option<Vec<Document>> = input
        .get_array("arrayFilters")
        .ok()
        .map(|a| a.iter().filter_map(|f| f.as_document().cloned()).collect());
    let u = match parse_update(&spec, array_filters.as_deref()) {
        Ok(u) => u,
        Err(e) => {
            sig.error(&e);
            return sig.0;
        }
    };
    sig.add(u.modified_paths().map_or(0, |p| p.len() as u64 + 1));
    let query = input
        .get_document("filter")
        .ok()
        .and_then(|f| Filter::parse(f).ok());
    for d in documents(&input) {
        let details = query
            .as_ref()
            .map(|q| q.matches_with_details(&d))
            .unwrap_or_default();
        let ctx = ApplyContext {
            details,
            inserting: false,
        };
        let updated = u.apply(&d, &ctx);
        check_raw_update(&u, &spec, &d, &updated);
        sig.result(&updated);
        if let Ok(updated) = updated {
            sig.add(encoded_len(&updated).map_or(0, |n| n.min(1 << 20) as u64));
        }
    }
    if let Some(q) = &query {
        if let Ok(seed) = q.upsert_seed() {
            sig.result(&u.upsert_document(seed));
        }
    }
    sig.0
}

/// Whether an update sets the current time (`$currentDate`).
fn reads_the_clock(spec: &Bson) -> bool {
    matches!(spec, Bson::Document(d) if d.contains_key("$currentDate"))
}

/// What the update makes of the stored bytes is what the full path
/// makes of the document, byte for byte, error for error.
fn check_raw_update(u: &Update, spec: &Bson, d: &Document, full: &Result<Document>) {
    let Ok(bytes) = d.to_vec() else {
        return;
    };
    let Ok(raw) = bson::RawDocument::from_bytes(&bytes) else {
        return;
    };
    match (u.apply_raw(raw), full) {
        (Ok(RawApplied::Decode), _) => {}
        (Ok(RawApplied::Unchanged), Ok(full)) => assert!(
            documents_identical(full, d),
            "the raw path changed nothing, the full path did: {spec} on {d}"
        ),
        // `$currentDate` reads the clock once per path, so the two may
        // fall on either side of a millisecond.
        (Ok(RawApplied::Changed(_)), Ok(_)) if reads_the_clock(spec) => {}
        (Ok(RawApplied::Changed(new)), Ok(full)) => assert!(
            full.to_vec().is_ok_and(|f| f == new),
            "the raw path wrote other bytes than the full path: {spec} on {d}"
        ),
        (Err(e), Err(f)) => assert!(
            e.code == f.code && e.message == f.message,
            "the raw path failed otherwise than the full path: {spec} on {d}: {e:?} / {f:?}"
        ),
        (raw, full) => panic!("the raw and full paths disagree: {spec} on {d}: {raw:?} / {full:?}"),
    }
}

fn generate_update(g: &mut Gen) -> Vec<u8> {
    let mut d = bson::doc! {"update": g.update(), "docs": g.documents()};
    if g.chance(0.4) {
        d.insert("arrayFilters", g.array_filters());
    }
    if g.chance(0.5) {
        d.insert("filter", g.filter());
    }
    d.to_vec().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// pipelines and expressions

/// A context that reads the input documents for any other collection
/// (so `$lookup` and `$unionWith` run) and drops writes.
struct FuzzContext {
    docs: Vec<Document>,
    limits: Limits,
}

impl Context for FuzzContext {
    fn db(&self) -> &str {
        "test"
    }

    fn aggregate(
        &self,
        _: &str,
        _: &str,
        pipeline: &[Document],
        vars: &Document,
    ) -> Result<DocStream> {
        let stages: Vec<Bson> = pipeline.iter().cloned().map(Bson::Document).collect();
        let ctx = ParseContext {
            vars: vars.clone(),
            nested: true,
            ..ParseContext::default()
        };
        let parsed = Pipeline::parse(&stages, &ctx)?;
        let me: Arc<dyn Context> = Arc::new(FuzzContext {
            docs: self.docs.clone(),
            limits: self.limits.clone(),
        });
        parsed.run(Box::new(self.docs.clone().into_iter().map(Ok)), &me)
    }

    fn replace_collection(&self, _: &str, _: &str, _: Vec<Document>) -> Result<()> {
        Ok(())
    }

    fn merge_into(&self, _: &str, _: &str, _: &MergeSpec, _: Vec<Document>) -> Result<()> {
        Ok(())
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }
}

fn run_pipeline(stages: &[Bson], docs: Vec<Document>, sig: &mut Signature) {
    let parsed = match Pipeline::parse(stages, &ParseContext::default()) {
        Ok(p) => p,
        Err(e) => {
            sig.error(&e);
            return;
        }
    };
    let limits = Limits {
        max_blocking_bytes: aggregate::DEFAULT_MAX_BLOCKING_BYTES,
        allow_disk_use: false,
        spill_dir: std::env::temp_dir(),
    };
    let ctx: Arc<dyn Context> = Arc::new(FuzzContext {
        docs: docs.clone(),
        limits,
    });
    let stream = match parsed.run(Box::new(docs.into_iter().map(Ok)), &ctx) {
        Ok(s) => s,
        Err(e) => {
            sig.error(&e);
            return;
        }
    };
    for result in stream.take(MAX_RESULTS) {
        match result {
            Ok(doc) => sig.add(encoded_len(&doc).map_or(0, |n| (n as u64).min(1 << 20) / 64)),
            Err(e) => {
                sig.error(&e);
                return;
            }
        }
    }
}

fn pipeline(data: &[u8]) -> u64 {
    let mut sig = Signature::default();
    let Some(input) = input_document(data) else {
        return 1;
    };
    let stages = input.get_array("pipeline").cloned().unwrap_or_default();
    run_pipeline(&stages, documents(&input), &mut sig);
    sig.0
}

fn generate_pipeline(g: &mut Gen) -> Vec<u8> {
    let d = bson::doc! {"pipeline": g.pipeline(), "docs": g.documents()};
    d.to_vec().unwrap_or_default()
}

fn expression(data: &[u8]) -> u64 {
    let mut sig = Signature::default();
    let Some(input) = input_document(data) else {
        return 1;
    };
    let expr = input.get("expr").cloned().unwrap_or(Bson::Null);
    let docs = documents(&input);
    let project = [Bson::Document(
        bson::doc! {"$project": {"_id": 0, "x": expr.clone()}},
    )];
    run_pipeline(&project, docs.clone(), &mut sig);
    let matching = [Bson::Document(
        bson::doc! {"$match": {"$expr": expr.clone()}},
    )];
    run_pipeline(&matching, docs.clone(), &mut sig);
    let accumulator = input.get_str("acc").unwrap_or("$push");
    let group = [Bson::Document(
        bson::doc! {"$group": {"_id": null, "v": {accumulator: expr}}},
    )];
    run_pipeline(&group, docs, &mut sig);
    sig.0
}

fn generate_expression(g: &mut Gen) -> Vec<u8> {
    let mut d = bson::doc! {"expr": g.expr(), "docs": g.documents()};
    if g.chance(0.5) {
        d.insert(
            "acc",
            *g.pick(&[
                "$push",
                "$addToSet",
                "$mergeObjects",
                "$sum",
                "$max",
                "$first",
            ]),
        );
    }
    d.to_vec().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// projection

fn projection(data: &[u8]) -> u64 {
    let mut sig = Signature::default();
    let Some(input) = input_document(data) else {
        return 1;
    };
    let spec = input
        .get_document("projection")
        .cloned()
        .unwrap_or_default();
    let p = match Projection::parse(&spec) {
        Ok(p) => p,
        Err(e) => {
            sig.error(&e);
            return sig.0;
        }
    };
    sig.add(p.is_inclusion() as u64 + 2 * p.has_positional() as u64);
    sig.add(
        p.included_paths()
            .map_or(0, |(paths, _)| paths.len() as u64 + 1),
    );
    let query = input
        .get_document("filter")
        .ok()
        .and_then(|f| Filter::parse(f).ok());
    for d in documents(&input) {
        let details = query
            .as_ref()
            .map(|q| q.matches_with_details(&d))
            .unwrap_or_default();
        let projected = p.apply(&d, &details);
        sig.result(&projected);
        if let Ok(out) = projected {
            sig.add(encoded_len(&out).map_or(0, |n| (n as u64).min(1 << 20)));
        }
    }
    sig.0
}

fn generate_projection(g: &mut Gen) -> Vec<u8> {
    let mut d = bson::doc! {"projection": g.projection(), "docs": g.documents()};
    if g.chance(0.5) {
        d.insert("filter", g.filter());
    }
    d.to_vec().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// sort

fn sort(data: &[u8]) -> u64 {
    let mut sig = Signature::default();
    let Some(input) = input_document(data) else {
        return 1;
    };
    let spec = input.get_document("sort").cloned().unwrap_or_default();
    let s = match SortSpec::parse(&spec) {
        Ok(s) => s,
        Err(e) => {
            sig.error(&e);
            return sig.0;
        }
    };
    let docs = documents(&input);
    let keys: Vec<Vec<Bson>> = docs.iter().map(|d| s.key_for(d)).collect();
    for (i, a) in docs.iter().enumerate() {
        for (j, b) in docs.iter().enumerate() {
            let forward = s.compare(a, b);
            assert_eq!(
                forward,
                s.compare(b, a).reverse(),
                "order is not antisymmetric: {spec} on {a} and {b}"
            );
            assert_eq!(
                forward,
                s.compare_keys(&keys[i], &keys[j]),
                "keys order differently: {spec} on {a} and {b}"
            );
            sig.add(forward as i8 as u64);
        }
    }
    // The standard library's sorts may panic on an order that is not total.
    let mut sorted = docs;
    sorted.sort_by(|a, b| s.compare(a, b));
    sig.0
}

fn generate_sort(g: &mut Gen) -> Vec<u8> {
    let d = bson::doc! {"sort": g.sort(), "docs": g.documents()};
    d.to_vec().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_inputs_run_in_every_target() {
        let mut g = Gen::new(3);
        for target in TARGETS {
            for _ in 0..50 {
                let input = (target.generate)(&mut g);
                target.execute(&input);
            }
        }
    }

    #[test]
    fn generated_frames_decode() {
        let body = bson::doc! {"ping": 1, "$db": "admin"}.to_vec().unwrap();
        for checksum in [false, true] {
            let frame = op_msg_frame(1, checksum, &body, Some(("documents", vec![body.clone()])));
            let mut buf = BytesMut::from(&frame[..]);
            let Ok(Some(Message::Msg(m))) = MessageCodec::default().decode(&mut buf) else {
                panic!("frame did not decode");
            };
            assert_eq!(m.command().unwrap().sequences.len(), 1);
        }
    }
}
