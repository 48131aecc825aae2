//! The documents the workloads send, generated once before any timing starts so
//! that the client spends its CPU on the wire path and not on building BSON.
//!
//! The shape follows YCSB's `usertable`: an integer `_id`, ten string fields
//! `field0`..`field9` that share the payload, and a `counter` that updates
//! increment.

use mongodb::bson::{doc, Bson, Document};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Number of `fieldN` payload fields per document, as in YCSB.
pub const FIELD_COUNT: usize = 10;

/// Bytes a document spends outside its payload strings: the header, `_id`,
/// `counter`, and each field's type byte, name, length and terminator.
const OVERHEAD_BYTES: usize = 5 + 13 + 17 + FIELD_COUNT * 13 + 1;

/// Distinct update documents cycled through by the update workload.
const UPDATE_POOL: usize = 1024;

/// Pre-built documents for loading and pre-built update specifications.
pub struct Dataset {
    /// Documents in `_id` order, already cut into `insertMany` batches.
    pub batches: Vec<Vec<Document>>,
    /// Number of documents, i.e. keys are `0..docs`.
    pub docs: u64,
    /// `{$set: {fieldN: ...}, $inc: {counter: 1}}` documents.
    pub updates: Vec<Document>,
    /// Encoded BSON size of the first document, for the report.
    pub doc_bytes: usize,
}

impl Dataset {
    /// Builds `docs` documents of roughly `doc_size` encoded bytes each.
    pub fn generate(docs: u64, doc_size: usize, batch: usize, seed: u64) -> Dataset {
        let field_len = (doc_size.saturating_sub(OVERHEAD_BYTES) / FIELD_COUNT).max(1);
        let text = Text::new(field_len, seed);
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
        let field_names: Vec<String> = (0..FIELD_COUNT).map(|i| format!("field{i}")).collect();

        let batch = batch.max(1);
        let mut batches = Vec::with_capacity(usize::try_from(docs).unwrap_or(0) / batch + 1);
        let mut current = Vec::with_capacity(batch);
        for key in 0..docs {
            let mut d = Document::new();
            d.insert("_id", Bson::Int64(key as i64));
            for name in &field_names {
                d.insert(name.as_str(), text.sample(&mut rng));
            }
            d.insert("counter", Bson::Int64(0));
            current.push(d);
            if current.len() == batch {
                batches.push(std::mem::replace(&mut current, Vec::with_capacity(batch)));
            }
        }
        if !current.is_empty() {
            batches.push(current);
        }

        let updates = (0..UPDATE_POOL)
            .map(|i| {
                let field = &field_names[i % FIELD_COUNT];
                doc! {
                    "$set": { field.as_str(): text.sample(&mut rng) },
                    "$inc": { "counter": 1_i64 },
                }
            })
            .collect();

        let doc_bytes = batches
            .first()
            .and_then(|b| b.first())
            .and_then(|d| {
                let mut bytes = Vec::new();
                d.to_writer(&mut bytes).ok().map(|()| bytes)
            })
            .map_or(0, |v| v.len());

        Dataset {
            batches,
            docs,
            updates,
            doc_bytes,
        }
    }

    /// One of the pre-built update documents.
    pub fn update(&self, rng: &mut impl Rng) -> &Document {
        &self.updates[rng.random_range(0..self.updates.len())]
    }
}

/// A block of random printable text that field values are cut from.
struct Text {
    pool: String,
    field_len: usize,
}

impl Text {
    fn new(field_len: usize, seed: u64) -> Text {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let mut rng = SmallRng::seed_from_u64(seed);
        let len = (64 * 1024).max(field_len * 4);
        let pool = (0..len)
            .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
            .collect();
        Text { pool, field_len }
    }

    fn sample(&self, rng: &mut impl Rng) -> String {
        let start = rng.random_range(0..=self.pool.len() - self.field_len);
        self.pool[start..start + self.field_len].to_owned()
    }
}
