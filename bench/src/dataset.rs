//! The documents the workloads send, each computed from its number as its
//! batch is sent, so that any data set fits the client's memory; update
//! specifications are built before any timing starts, so that the timed
//! client spends its CPU on the wire path and not on building BSON.
//!
//! The shape follows YCSB's `usertable`: an integer `_id`, ten string fields
//! `field0`..`field9` that share the payload, and a `counter` that updates
//! increment.
//!
//! The sharded workloads use smaller documents ([`FanoutData`], [`KeyRange`]).

use std::borrow::Cow;

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

/// The `usertable` documents, computed batch by batch as loaders send
/// them (so a data set of ten million fits), and pre-built update
/// specifications.
pub struct Dataset {
    rows: WideRows,
    /// Number of documents, i.e. keys are `0..docs`.
    pub docs: u64,
    /// `{$set: {fieldN: ...}, $inc: {counter: 1}}` documents.
    pub updates: Vec<Document>,
    /// Encoded BSON size of the first document, for the report.
    pub doc_bytes: usize,
    /// When not 0, each document has `tenant: "tNNN"` with `NNN` its
    /// `_id` modulo this ([`Dataset::tenant`]).
    pub tenants: u64,
    /// Documents each `scan` returns at most.
    pub scan_limit: i64,
}

impl Dataset {
    /// `docs` documents of roughly `doc_size` encoded bytes each, in
    /// batches of `batch`. `tenants` as [`Dataset::tenants`]; `scan`
    /// returns 10 documents until told otherwise.
    pub fn generate(docs: u64, doc_size: usize, batch: usize, tenants: u64, seed: u64) -> Dataset {
        let mut rows = WideRows::new(docs, doc_size, batch, seed);
        rows.tenants = tenants;
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
        let updates = (0..UPDATE_POOL).map(|_| rows.update(&mut rng)).collect();
        let mut bytes = Vec::new();
        let doc_bytes = if docs > 0 {
            rows.document(0)
                .to_writer(&mut bytes)
                .map_or(0, |()| bytes.len())
        } else {
            0
        };
        Dataset {
            rows,
            docs,
            updates,
            doc_bytes,
            tenants,
            scan_limit: 10,
        }
    }

    /// One of the pre-built update documents.
    pub fn update(&self, rng: &mut impl Rng) -> &Document {
        &self.updates[rng.random_range(0..self.updates.len())]
    }

    /// The tenant of document `key`, when documents have one.
    pub fn tenant(&self, key: i64) -> Option<String> {
        (self.tenants > 0).then(|| tenant_name(key as u64, self.tenants))
    }
}

fn tenant_name(key: u64, tenants: u64) -> String {
    format!("t{:03}", key % tenants)
}

/// A data set that loaders send as numbered `insertMany` batches.
pub trait Batches: Send + Sync + 'static {
    /// Documents in all batches together.
    fn doc_count(&self) -> u64;
    fn batch_count(&self) -> usize;
    /// Batch `index` (below [`Batches::batch_count`]), borrowed when pre-built.
    fn batch(&self, index: usize) -> Cow<'_, [Document]>;
}

/// Documents computed from their number, in batches of a fixed size: a
/// data set with nothing stored up front.
pub trait Generated: Send + Sync + 'static {
    fn docs(&self) -> u64;
    fn batch_size(&self) -> usize;
    fn document(&self, i: u64) -> Document;
}

impl<T: Generated> Batches for T {
    fn doc_count(&self) -> u64 {
        self.docs()
    }

    fn batch_count(&self) -> usize {
        usize::try_from(self.docs().div_ceil(self.batch_size() as u64)).unwrap_or(usize::MAX)
    }

    fn batch(&self, index: usize) -> Cow<'_, [Document]> {
        let first = index as u64 * self.batch_size() as u64;
        let last = (first + self.batch_size() as u64).min(self.docs());
        Cow::Owned((first..last).map(|i| self.document(i)).collect())
    }
}

impl Batches for Dataset {
    fn doc_count(&self) -> u64 {
        self.docs
    }

    fn batch_count(&self) -> usize {
        self.rows.batch_count()
    }

    fn batch(&self, index: usize) -> Cow<'_, [Document]> {
        self.rows.batch(index)
    }
}

/// Documents `first..first + len` of a data set of `docs` cut into batches
/// of `batch`, for batch `index`.
fn batch_range(docs: u64, batch: usize, index: usize) -> std::ops::Range<u64> {
    let first = index as u64 * batch as u64;
    first..(first + batch as u64).min(docs)
}

fn batch_count(docs: u64, batch: usize) -> usize {
    usize::try_from(docs.div_ceil(batch as u64)).unwrap_or(usize::MAX)
}

/// How many results the fan-out query returns at most.
pub const FANOUT_LIMIT: usize = 50;

/// `f` takes values `0..FANOUT_F_VALUES`; the query keeps `f < FANOUT_F_BELOW`,
/// one document in a hundred.
pub const FANOUT_F_VALUES: u64 = 1000;
pub const FANOUT_F_BELOW: i32 = 10;

/// The fan-out query's collection: `{_id: i, k, f, score}` where `k` (the
/// shard key) is a random 63-bit integer, so distinct but for chance, `f` a
/// random integer in `0..1000` and `score` a random double in `[0, 1)`.
/// Every value is a hash of the seed and `i`, so any batch can be built on
/// its own and the query's answer is known in advance.
pub struct FanoutData {
    pub docs: u64,
    batch: usize,
    salt: u64,
    /// Scores of the documents `find({f: {$lt: 10}}).sort({score: -1})
    /// .limit(50)` returns, in that order.
    pub expected_scores: Vec<f64>,
}

impl FanoutData {
    pub fn new(docs: u64, batch: usize, seed: u64) -> FanoutData {
        let mut data = FanoutData {
            docs,
            batch: batch.max(1),
            salt: mix(seed ^ 0xfa40_7000),
            expected_scores: Vec::new(),
        };
        let mut matching: Vec<f64> = (0..docs)
            .filter(|&i| data.f(i) < FANOUT_F_BELOW)
            .map(|i| data.score(i))
            .collect();
        matching.sort_unstable_by(|a, b| b.total_cmp(a));
        matching.truncate(FANOUT_LIMIT);
        data.expected_scores = matching;
        data
    }

    fn value(&self, i: u64, field: u64) -> u64 {
        mix(self
            .salt
            .wrapping_add(i.wrapping_mul(4).wrapping_add(field)))
    }

    fn k(&self, i: u64) -> i64 {
        (self.value(i, 0) >> 1) as i64
    }

    fn f(&self, i: u64) -> i32 {
        // Below 1000, so the cast is exact.
        (self.value(i, 1) % FANOUT_F_VALUES) as i32
    }

    fn score(&self, i: u64) -> f64 {
        // The top 53 bits, scaled into [0, 1) exactly.
        (self.value(i, 2) >> 11) as f64 / (1_u64 << 53) as f64
    }

    fn document(&self, i: u64) -> Document {
        doc! {
            "_id": i as i64,
            "k": self.k(i),
            "f": self.f(i),
            "score": self.score(i),
        }
    }
}

impl Batches for FanoutData {
    fn doc_count(&self) -> u64 {
        self.docs
    }

    fn batch_count(&self) -> usize {
        batch_count(self.docs, self.batch)
    }

    fn batch(&self, index: usize) -> Cow<'_, [Document]> {
        Cow::Owned(
            batch_range(self.docs, self.batch, index)
                .map(|i| self.document(i))
                .collect(),
        )
    }
}

/// `{_id: i, k: i}` for `i` in `0..docs`: one document per shard-key value.
pub struct KeyRange {
    pub docs: u64,
    batch: usize,
}

impl KeyRange {
    pub fn new(docs: u64, batch: usize) -> KeyRange {
        KeyRange {
            docs,
            batch: batch.max(1),
        }
    }
}

impl Batches for KeyRange {
    fn doc_count(&self) -> u64 {
        self.docs
    }

    fn batch_count(&self) -> usize {
        batch_count(self.docs, self.batch)
    }

    fn batch(&self, index: usize) -> Cow<'_, [Document]> {
        Cow::Owned(
            batch_range(self.docs, self.batch, index)
                .map(|i| doc! { "_id": i as i64, "k": i as i64 })
                .collect(),
        )
    }
}

/// YCSB-shaped documents (`_id`, `field0`..`field9`, `counter`) like
/// [`Dataset`]'s, each field cut from the text pool at an offset hashed from
/// the document's number: for data sets of gigabytes, which would not fit
/// in memory built up front.
pub struct WideRows {
    pub docs: u64,
    batch: usize,
    salt: u64,
    text: Text,
    field_names: Vec<String>,
    /// When not 0, documents get a `tenant` ([`Dataset::tenants`]).
    pub tenants: u64,
}

impl WideRows {
    pub fn new(docs: u64, doc_size: usize, batch: usize, seed: u64) -> WideRows {
        let field_len = (doc_size.saturating_sub(OVERHEAD_BYTES) / FIELD_COUNT).max(1);
        WideRows {
            docs,
            batch: batch.max(1),
            salt: mix(seed ^ 0x3017_e000),
            text: Text::new(field_len, seed),
            field_names: (0..FIELD_COUNT).map(|i| format!("field{i}")).collect(),
            tenants: 0,
        }
    }

    fn document(&self, i: u64) -> Document {
        let mut d = Document::new();
        d.insert("_id", Bson::Int64(i as i64));
        if self.tenants > 0 {
            d.insert("tenant", tenant_name(i, self.tenants));
        }
        for (f, name) in self.field_names.iter().enumerate() {
            let at = mix(self
                .salt
                .wrapping_add(i.wrapping_mul(16).wrapping_add(f as u64)));
            d.insert(name.as_str(), self.text.at(at));
        }
        d.insert("counter", Bson::Int64(0));
        d
    }

    /// `{$set: {fieldN: ...}, $inc: {counter: 1}}` with a random field and text.
    pub fn update(&self, rng: &mut impl Rng) -> Document {
        let field = &self.field_names[rng.random_range(0..FIELD_COUNT)];
        doc! {
            "$set": { field.as_str(): self.text.sample(rng) },
            "$inc": { "counter": 1_i64 },
        }
    }
}

impl Batches for WideRows {
    fn doc_count(&self) -> u64 {
        self.docs
    }

    fn batch_count(&self) -> usize {
        batch_count(self.docs, self.batch)
    }

    fn batch(&self, index: usize) -> Cow<'_, [Document]> {
        Cow::Owned(
            batch_range(self.docs, self.batch, index)
                .map(|i| self.document(i))
                .collect(),
        )
    }
}

/// SplitMix64's finaliser: consecutive inputs give unrelated outputs.
pub(crate) fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

    /// The field that starts at `offset`, wrapped into the pool.
    fn at(&self, offset: u64) -> String {
        // The pool is at least four fields long, so the range is not empty.
        let starts = (self.pool.len() - self.field_len + 1) as u64;
        let start = (offset % starts) as usize;
        self.pool[start..start + self.field_len].to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_batches_cover_every_document_once() {
        let data = KeyRange::new(2_501, 1_000);
        assert_eq!(data.batch_count(), 3);
        let ids: Vec<i64> = (0..data.batch_count())
            .flat_map(|b| data.batch(b).into_owned())
            .map(|d| d.get_i64("_id").expect("_id"))
            .collect();
        assert_eq!(ids, (0..2_501).collect::<Vec<i64>>());
    }

    #[test]
    fn wide_rows_are_the_asked_size_and_numbered() {
        let data = WideRows::new(2_050, 1_000, 1_000, 7);
        assert_eq!(data.batch_count(), 3);
        let docs: Vec<Document> = (0..data.batch_count())
            .flat_map(|b| data.batch(b).into_owned())
            .collect();
        let ids: Vec<i64> = docs
            .iter()
            .map(|d| d.get_i64("_id").expect("_id"))
            .collect();
        assert_eq!(ids, (0..2_050).collect::<Vec<i64>>());
        for d in &docs[..10] {
            let mut bytes = Vec::new();
            d.to_writer(&mut bytes).expect("encodes");
            assert!(
                (950..=1_000).contains(&bytes.len()),
                "{} bytes",
                bytes.len()
            );
        }
        // The same number gives the same document; neighbours differ.
        assert_eq!(data.batch(0)[5], data.batch(0)[5]);
        assert_ne!(docs[0].get_str("field0"), docs[1].get_str("field0"));
    }

    #[test]
    fn fanout_answer_matches_its_documents() {
        let data = FanoutData::new(20_000, 512, 7);
        let docs: Vec<Document> = (0..data.batch_count())
            .flat_map(|b| data.batch(b).into_owned())
            .collect();
        assert_eq!(docs.len(), 20_000);
        let mut matching: Vec<f64> = docs
            .iter()
            .filter(|d| d.get_i32("f").expect("f") < FANOUT_F_BELOW)
            .map(|d| d.get_f64("score").expect("score"))
            .collect();
        // About one in a hundred matches, so the limit is reached.
        assert!(matching.len() > FANOUT_LIMIT);
        matching.sort_by(|a, b| b.total_cmp(a));
        matching.truncate(FANOUT_LIMIT);
        assert_eq!(matching, data.expected_scores);
        assert!(docs.iter().all(|d| {
            let f = d.get_i32("f").expect("f");
            let s = d.get_f64("score").expect("score");
            (0..1000).contains(&f) && (0.0..1.0).contains(&s) && d.get_i64("k").expect("k") >= 0
        }));
    }
}
