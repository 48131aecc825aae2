//! `corpus`: turns recorded client streams into seed inputs per target.
//!
//! Each stream (one file per connection, from `record`) is cut into
//! frames by the server's own codec; every command's filters, updates,
//! pipelines, expressions, projections and sorts become inputs of their
//! targets, applied to the documents the same connection last inserted.
//! Inputs are deduplicated and kept small: the first of each shape (its
//! operator names), then more up to a cap.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;

use bson::{doc, Bson, Document};
use bytes::BytesMut;
use tokio_util::codec::Decoder;

use shardgate::wire::message::checked_document;
use shardgate::wire::{Message, MessageCodec};
use shardgate_fuzz::runner::{fnv, Options};

/// Most seeds per target, and the largest one.
const MAX_SEEDS: usize = 80;
const MAX_SEED_BYTES: usize = 4096;
/// Largest document taken as an input document.
const MAX_DOC_BYTES: usize = 512;

#[derive(Default)]
struct Collected {
    /// target -> (shape, input) in order of appearance.
    inputs: BTreeMap<&'static str, Vec<(String, Vec<u8>)>>,
    expressions: HashSet<String>,
}

impl Collected {
    fn add(&mut self, target: &'static str, shape: String, input: Vec<u8>) {
        if input.len() <= MAX_SEED_BYTES {
            self.inputs.entry(target).or_default().push((shape, input));
        }
    }

    /// Adds `input`; its shape is that of everything but its documents.
    fn add_doc(&mut self, target: &'static str, input: Document) {
        let mut tested = input.clone();
        tested.remove("docs");
        let shape = shape_of(&Bson::Document(tested));
        if let Ok(bytes) = input.to_vec() {
            self.add(target, shape, bytes);
        }
    }
}

pub fn main(args: &[String]) -> ExitCode {
    let mut frames = None;
    let mut out = Options::default().corpus;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--corpus" => match it.next() {
                Some(dir) => out = PathBuf::from(dir),
                None => return ExitCode::from(2),
            },
            dir => frames = Some(PathBuf::from(dir)),
        }
    }
    let Some(frames) = frames else {
        eprintln!("usage: corpus FRAMES_DIR [--corpus DIR]");
        return ExitCode::from(2);
    };
    let mut streams: Vec<PathBuf> = match std::fs::read_dir(&frames) {
        Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            eprintln!("{}: {e}", frames.display());
            return ExitCode::FAILURE;
        }
    };
    streams.sort();
    let mut c = Collected::default();
    for path in &streams {
        if let Ok(bytes) = std::fs::read(path) {
            collect_stream(&bytes, &mut c);
        }
    }
    for (target, inputs) in &c.inputs {
        let chosen = choose(inputs);
        let dir = out.join(target);
        let _ = std::fs::create_dir_all(&dir);
        for input in &chosen {
            let _ = std::fs::write(dir.join(format!("{:016x}", fnv(input))), input);
        }
        println!(
            "{target}: {} seeds from {} candidates",
            chosen.len(),
            inputs.len()
        );
    }
    ExitCode::SUCCESS
}

/// The first input of each shape, then others, up to the cap.
fn choose(inputs: &[(String, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut seen_inputs = HashSet::new();
    let mut seen_shapes = HashSet::new();
    let mut first = Vec::new();
    let mut rest = Vec::new();
    for (shape, input) in inputs {
        if !seen_inputs.insert(fnv(input)) {
            continue;
        }
        if seen_shapes.insert(shape.clone()) {
            first.push(input.clone());
        } else {
            rest.push(input.clone());
        }
    }
    first.truncate(MAX_SEEDS);
    // Spread the rest over the recording rather than taking its start.
    let room = MAX_SEEDS - first.len();
    if room > 0 && !rest.is_empty() {
        let step = rest.len().div_ceil(room);
        first.extend(rest.into_iter().step_by(step.max(1)).take(room));
    }
    first
}

/// The operator names in a value, in order: what makes two inputs
/// different for the code under test.
fn shape_of(value: &Bson) -> String {
    fn walk(v: &Bson, out: &mut String) {
        match v {
            Bson::Document(d) => {
                for (k, v) in d {
                    if k.starts_with('$') {
                        out.push_str(k);
                    }
                    walk(v, out);
                }
            }
            Bson::Array(a) => a.iter().for_each(|v| walk(v, out)),
            other => {
                out.push(char::from(b'a' + (other.element_type() as u8 % 26)));
            }
        }
    }
    let mut s = String::new();
    walk(value, &mut s);
    s
}

fn default_docs() -> Vec<Bson> {
    vec![
        Bson::Document(doc! {"_id": 1, "a": 1, "b": "x", "c": [1, 2, 3], "d": {"e": 1}}),
        Bson::Document(
            doc! {"_id": 2, "a": [1, {"b": 2}], "s": "hello", "c": [{"b": 1}, {"b": 5}]},
        ),
        Bson::Document(doc! {"_id": 3}),
    ]
}

fn collect_stream(bytes: &[u8], c: &mut Collected) {
    let mut codec = MessageCodec::default();
    let mut buf = BytesMut::from(bytes);
    let mut docs: Vec<Bson> = default_docs();
    let mut frames = Vec::new();
    let mut offset = 0usize;
    loop {
        let before = buf.len();
        let message = match codec.decode(&mut buf) {
            Ok(Some(m)) => m,
            _ => break,
        };
        let frame = &bytes[offset..offset + (before - buf.len())];
        offset += before - buf.len();
        frames.push(frame.to_vec());
        let (body, sequences) = match &message {
            Message::Msg(m) => match m.command() {
                Ok(cmd) => (cmd.body, cmd.sequences),
                Err(_) => continue,
            },
            Message::Query(q) => match checked_document(&q.query) {
                Ok(d) => (d, Vec::new()),
                Err(_) => continue,
            },
        };
        let name = body.keys().next().cloned().unwrap_or_default();
        c.add(
            "wire",
            format!("{name}{}", shape_of(&Bson::Document(body.clone()))),
            frame.to_vec(),
        );
        if let Ok(b) = body.to_vec() {
            c.add(
                "bson",
                format!("{name}{}", shape_of(&Bson::Document(body.clone()))),
                b,
            );
        }
        collect_command(&name, &body, &sequences, &mut docs, c);
    }
    // A connection's opening exchange, as one stream of frames.
    let opening: Vec<u8> = frames.iter().take(3).flatten().copied().collect();
    if frames.len() > 1 {
        c.add("wire", format!("stream{}", frames.len().min(3)), opening);
    }
}

fn collect_command(
    name: &str,
    body: &Document,
    sequences: &[(String, Vec<bytes::Bytes>)],
    docs: &mut Vec<Bson>,
    c: &mut Collected,
) {
    let docs_now = || Bson::Array(docs.clone());
    match name {
        "insert" => {
            let mut inserted: Vec<Bson> = body.get_array("documents").cloned().unwrap_or_default();
            for (id, seq) in sequences {
                if id == "documents" {
                    inserted.extend(
                        seq.iter()
                            .filter_map(|b| checked_document(b).ok())
                            .map(Bson::Document),
                    );
                }
            }
            let small: Vec<Bson> = inserted
                .into_iter()
                .filter(|d| {
                    d.as_document()
                        .and_then(|d| d.to_vec().ok())
                        .is_some_and(|b| b.len() <= MAX_DOC_BYTES)
                })
                .take(4)
                .collect();
            if !small.is_empty() {
                *docs = small;
            }
        }
        "find" => {
            let filter = body.get_document("filter").cloned().unwrap_or_default();
            c.add_doc(
                "filter",
                doc! {"filter": filter.clone(), "docs": docs_now()},
            );
            if let Ok(p) = body.get_document("projection") {
                c.add_doc(
                    "projection",
                    doc! {"projection": p.clone(), "filter": filter, "docs": docs_now()},
                );
            }
            if let Ok(s) = body.get_document("sort") {
                c.add_doc("sort", doc! {"sort": s.clone(), "docs": docs_now()});
            }
        }
        "count" | "distinct" => {
            if let Ok(q) = body.get_document("query") {
                c.add_doc("filter", doc! {"filter": q.clone(), "docs": docs_now()});
            }
        }
        "delete" => {
            for d in statements(body, sequences, "deletes") {
                if let Ok(q) = d.get_document("q") {
                    c.add_doc("filter", doc! {"filter": q.clone(), "docs": docs_now()});
                }
            }
        }
        "update" => {
            for u in statements(body, sequences, "updates") {
                let q = u.get_document("q").cloned().unwrap_or_default();
                c.add_doc("filter", doc! {"filter": q.clone(), "docs": docs_now()});
                if let Some(spec) = u.get("u") {
                    let mut input = doc! {"update": spec.clone(), "filter": q, "docs": docs_now()};
                    if let Ok(af) = u.get_array("arrayFilters") {
                        input.insert("arrayFilters", af.clone());
                    }
                    c.add_doc("update", input);
                    if spec.as_array().is_some() {
                        collect_expressions(spec, docs, c);
                    }
                }
            }
        }
        "findAndModify" | "findandmodify" => {
            let q = body.get_document("query").cloned().unwrap_or_default();
            c.add_doc("filter", doc! {"filter": q.clone(), "docs": docs_now()});
            if let Some(spec) = body.get("update") {
                let mut input =
                    doc! {"update": spec.clone(), "filter": q.clone(), "docs": docs_now()};
                if let Ok(af) = body.get_array("arrayFilters") {
                    input.insert("arrayFilters", af.clone());
                }
                c.add_doc("update", input);
            }
            if let Ok(p) = body.get_document("fields") {
                c.add_doc(
                    "projection",
                    doc! {"projection": p.clone(), "filter": q, "docs": docs_now()},
                );
            }
            if let Ok(s) = body.get_document("sort") {
                c.add_doc("sort", doc! {"sort": s.clone(), "docs": docs_now()});
            }
        }
        "aggregate" => {
            let Ok(pipeline) = body.get_array("pipeline") else {
                return;
            };
            c.add_doc(
                "pipeline",
                doc! {"pipeline": pipeline.clone(), "docs": docs_now()},
            );
            for stage in pipeline.iter().filter_map(Bson::as_document) {
                match stage.iter().next() {
                    Some((k, Bson::Document(arg))) if k == "$match" => {
                        c.add_doc("filter", doc! {"filter": arg.clone(), "docs": docs_now()});
                    }
                    Some((k, Bson::Document(arg))) if k == "$sort" => {
                        c.add_doc("sort", doc! {"sort": arg.clone(), "docs": docs_now()});
                    }
                    Some((k, Bson::Document(arg))) if k == "$project" => {
                        c.add_doc(
                            "projection",
                            doc! {"projection": arg.clone(), "docs": docs_now()},
                        );
                    }
                    _ => {}
                }
            }
            collect_expressions(&Bson::Array(pipeline.clone()), docs, c);
        }
        _ => {}
    }
}

/// The statements of a write, from the body or a document sequence.
fn statements(
    body: &Document,
    sequences: &[(String, Vec<bytes::Bytes>)],
    key: &str,
) -> Vec<Document> {
    let mut out: Vec<Document> = body
        .get_array(key)
        .map(|a| a.iter().filter_map(|d| d.as_document().cloned()).collect())
        .unwrap_or_default();
    for (id, seq) in sequences {
        if id == key {
            out.extend(seq.iter().filter_map(|b| checked_document(b).ok()));
        }
    }
    out
}

/// Every operator expression inside the pipeline `value` (a one-key
/// document whose key is an expression operator) becomes an
/// `expression` input. Inside `$match` only `$expr` holds expressions:
/// `{a: {$gt: 5}}` there is a query.
fn collect_expressions(value: &Bson, docs: &[Bson], c: &mut Collected) {
    let operators: HashSet<&str> = shardgate::query::expr::operator_names().collect();
    let mut found = Vec::new();
    fn walk(v: &Bson, ops: &HashSet<&str>, found: &mut Vec<Bson>) {
        match v {
            Bson::Document(d) => {
                if d.len() == 1 && d.keys().next().is_some_and(|k| ops.contains(k.as_str())) {
                    found.push(v.clone());
                }
                for (k, v) in d {
                    match (k.as_str(), v) {
                        ("$expr", e) => {
                            found.push(e.clone());
                            walk(e, ops, found);
                        }
                        ("$match", Bson::Document(m)) => {
                            if let Some(e) = m.get("$expr") {
                                found.push(e.clone());
                                walk(e, ops, found);
                            }
                        }
                        _ => walk(v, ops, found),
                    }
                }
            }
            Bson::Array(a) => a.iter().for_each(|v| walk(v, ops, found)),
            _ => {}
        }
    }
    walk(value, &operators, &mut found);
    for e in found {
        let shown = e.to_string();
        if c.expressions.insert(shown) {
            c.add_doc(
                "expression",
                doc! {"expr": e, "docs": Bson::Array(docs.to_vec())},
            );
        }
    }
}
