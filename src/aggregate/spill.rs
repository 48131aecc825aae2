//! Spilling blocking stages to temporary files when they pass their
//! memory limit (with `allowDiskUse`).
//!
//! A blocking stage (`$sort`, `$group`, `$bucketAuto`, `$facet`) counts
//! the approximate bytes it holds. Past
//! [`Limits::max_blocking_bytes`](super::Limits) it either fails with
//! MongoDB's error 292 (no `allowDiskUse`) or sorts what it holds and
//! appends it as one *run* of BSON documents to a file in the spill
//! directory. Reading merges the runs (k-way, ties to the earlier
//! run, so a stable sort stays stable). Each run's file is removed when
//! the run is dropped, whether it was read to the end or not.
//!
//! Two other shapes of spilling build on the same runs: [`KeyedSort`]
//! sorts `(key, document)` pairs externally for stages that need their
//! input in key order (`$bucketAuto`), and a run shared through an `Arc`
//! can be read several times ([`SpillRun::reader`]), as `$facet` reads
//! its input once per sub-pipeline.
//!
//! A finished result that a cursor may keep open between `getMore`s is
//! *parked* ([`park`], [`KeyedSort::park_output`]): a small one stays in
//! memory, counted in [`held_bytes`]; a bigger one is written to one run
//! and read back from the file, so an idle cursor holds a file position
//! rather than its whole result. Parking is not a stage passing its memory
//! limit, so it happens with or without `allowDiskUse`.

use std::cmp::Ordering;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use bson::{Bson, Document, RawDocumentBuf};

use super::{DocStream, Limits};
use crate::error::{Error, ErrorCode, Result};

/// Distinguishes the spill files of one process.
static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

/// Bytes of finished results held in memory until they are read.
static HELD_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Most bytes of a finished result kept in memory for its reader; a
/// bigger one is parked in a spill file. Small enough that thousands of
/// idle cursors fit in a few hundred MB, big enough that typical small
/// results never touch the disk.
pub const PARK_BYTES: usize = 256 * 1024;

/// Approximate bytes of finished results (parked in memory, or read
/// ahead from partitions) that the process holds until a reader takes
/// them: what open cursors cost, which `--max-cursor-memory-bytes` caps.
pub fn held_bytes() -> usize {
    HELD_BYTES.load(AtomicOrdering::Relaxed)
}

/// A share of [`held_bytes`], given back when dropped.
#[derive(Debug, Default)]
pub struct Held(usize);

impl Held {
    pub fn new(bytes: usize) -> Held {
        HELD_BYTES.fetch_add(bytes, AtomicOrdering::Relaxed);
        Held(bytes)
    }

    /// Changes the share to `bytes`.
    pub fn set(&mut self, bytes: usize) {
        if bytes >= self.0 {
            HELD_BYTES.fetch_add(bytes - self.0, AtomicOrdering::Relaxed);
        } else {
            HELD_BYTES.fetch_sub(self.0 - bytes, AtomicOrdering::Relaxed);
        }
        self.0 = bytes;
    }

    pub fn bytes(&self) -> usize {
        self.0
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD_BYTES.fetch_sub(self.0, AtomicOrdering::Relaxed);
    }
}

/// An in-memory result that keeps its share of [`held_bytes`] until it
/// is dropped.
struct HeldIter<I> {
    inner: I,
    _held: Held,
}

impl<I: Iterator> Iterator for HeldIter<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        self.inner.next()
    }
}

/// The finished, ordered output of a blocking stage (`bytes` as
/// [`doc_size`] counts them), ready to be read at the reader's pace:
/// kept in memory up to [`PARK_BYTES`], else written to one run in `dir`
/// and streamed back from it.
pub fn park(docs: Vec<Document>, bytes: usize, dir: &Path) -> Result<DocStream> {
    if bytes <= PARK_BYTES {
        return Ok(Box::new(HeldIter {
            inner: docs.into_iter().map(Ok),
            _held: Held::new(bytes),
        }));
    }
    Ok(Box::new(SpillRun::write(dir, docs)?.into_reader()?))
}

/// The error of a `$group` past its memory limit without `allowDiskUse`.
pub fn group_memory_error() -> Error {
    Error::new(
        ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
        "Exceeded memory limit for $group, but didn't allow external sort. Pass \
         allowDiskUse:true to opt in.",
    )
}

/// The error of a `$sort` past its memory limit without `allowDiskUse`.
pub fn sort_memory_error(limit: usize) -> Error {
    Error::new(
        ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
        format!(
            "Sort exceeded memory limit of {limit} bytes, but did not opt in to external \
             sorting."
        ),
    )
}

/// The error of a `$bucketAuto` past its memory limit without
/// `allowDiskUse`: MongoDB's `$bucketAuto` sorts through its external
/// sorter, so it reports the sorter's error.
pub fn bucket_auto_memory_error(limit: usize) -> Error {
    sort_memory_error(limit)
}

/// The error of a `$facet` whose buffered input passes the memory limit
/// without `allowDiskUse`. Today's MongoDB streams `$facet`'s input in
/// batches and has no such error (an early version failed with 40174,
/// "Exceeded memory limit for $facet"); the wording follows `$group`'s.
pub fn facet_memory_error() -> Error {
    Error::new(
        ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
        "Exceeded memory limit for $facet, but didn't allow external sort. Pass \
         allowDiskUse:true to opt in.",
    )
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::new(
        ErrorCode::InternalError,
        format!("spill file {}: {e}", path.display()),
    )
}

/// Approximate bytes a value holds in memory: its BSON size plus a
/// little for the heap structure around it.
pub fn approx_size(value: &Bson) -> usize {
    16 + match value {
        Bson::String(s) => s.len(),
        Bson::Document(d) => doc_size(d),
        Bson::Array(a) => a.iter().map(approx_size).sum(),
        Bson::Binary(b) => b.bytes.len(),
        Bson::JavaScriptCode(c) => c.len(),
        Bson::RegularExpression(r) => r.pattern.len() + r.options.len(),
        Bson::Decimal128(_) => 16,
        _ => 8,
    }
}

/// Approximate bytes a document holds in memory.
pub fn doc_size(doc: &Document) -> usize {
    16 + doc
        .iter()
        .map(|(k, v)| k.len() + approx_size(v))
        .sum::<usize>()
}

/// One sorted run of documents in a temporary file, removed on drop.
#[derive(Debug)]
pub struct SpillRun {
    path: PathBuf,
}

impl SpillRun {
    /// Writes `docs`, in order, to a new file in `dir`.
    pub fn write(dir: &Path, docs: impl IntoIterator<Item = Document>) -> Result<SpillRun> {
        let mut out = SpillWriter::create(dir)?;
        for doc in docs {
            out.append(&doc)?;
        }
        out.finish()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the run back, in the order written.
    pub fn into_reader(self) -> Result<RunReader> {
        Arc::new(self).reader()
    }

    /// Reads a shared run from its start; the file is removed once the
    /// last reader and the last `Arc` are gone.
    pub fn reader(self: &Arc<Self>) -> Result<RunReader> {
        Ok(RunReader {
            run: Arc::clone(self),
            offset: 0,
            buf: Vec::new(),
            pos: 0,
        })
    }
}

/// Appends documents one at a time to a new run; a writer dropped before
/// [`SpillWriter::finish`] removes its file.
pub struct SpillWriter {
    out: BufWriter<File>,
    run: SpillRun,
}

impl SpillWriter {
    /// Creates an empty run file in `dir`.
    /// The directory is made 0700 and the file 0600 whatever the umask:
    /// spilled documents are the client's data.
    pub fn create(dir: &Path) -> Result<SpillWriter> {
        let mut dirs = std::fs::DirBuilder::new();
        dirs.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut dirs, 0o700);
        dirs.create(dir).map_err(|e| io_error(dir, e))?;
        let n = NEXT_RUN.fetch_add(1, AtomicOrdering::Relaxed);
        let path = dir.join(format!("shardgate-spill-{}-{n}.bson", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&path).map_err(|e| io_error(&path, e))?;
        // From here on the file is removed if anything fails.
        Ok(SpillWriter {
            out: BufWriter::new(file),
            run: SpillRun { path },
        })
    }

    pub fn append(&mut self, doc: &Document) -> Result<()> {
        let bytes = doc.to_vec().map_err(|e| {
            Error::new(
                ErrorCode::InternalError,
                format!("spilling a document: {e}"),
            )
        })?;
        self.out
            .write_all(&bytes)
            .map_err(|e| io_error(&self.run.path, e))
    }

    /// Flushes the file and hands over the finished run.
    pub fn finish(mut self) -> Result<SpillRun> {
        self.out.flush().map_err(|e| io_error(&self.run.path, e))?;
        Ok(self.run)
    }
}

impl Drop for SpillRun {
    fn drop(&mut self) {
        // Best effort: a file that is already gone is fine.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Bytes a [`RunReader`] reads from its file at a time.
const READ_AHEAD: usize = 16 * 1024;

/// The documents of one run; the file goes when the reader (and every
/// other holder of the run) is dropped. It opens the file only while it
/// reads a 16 KiB chunk, so a reader left waiting (a cursor between `getMore`s)
/// holds its position and one chunk, not a file descriptor.
#[derive(Debug)]
pub struct RunReader {
    run: Arc<SpillRun>,
    /// Where in the file the next chunk starts.
    offset: u64,
    buf: Vec<u8>,
    /// The first unread byte of `buf`.
    pos: usize,
}

impl RunReader {
    /// Makes at least `need` unread bytes available, unless the file ends
    /// first; returns how many are.
    fn fill(&mut self, need: usize) -> Result<usize> {
        let available = self.buf.len() - self.pos;
        if available >= need {
            return Ok(available);
        }
        self.buf.drain(..self.pos);
        self.pos = 0;
        if self.buf.capacity() > 4 * READ_AHEAD && need <= READ_AHEAD {
            self.buf.shrink_to(READ_AHEAD);
        }
        let want = need.max(READ_AHEAD) - self.buf.len();
        let path = &self.run.path;
        let mut file = File::open(path).map_err(|e| io_error(path, e))?;
        file.seek(SeekFrom::Start(self.offset))
            .map_err(|e| io_error(path, e))?;
        let read = file
            .take(want as u64)
            .read_to_end(&mut self.buf)
            .map_err(|e| io_error(path, e))?;
        self.offset += read as u64;
        Ok(self.buf.len())
    }

    fn read_one(&mut self) -> Result<Option<Document>> {
        match self.fill(4)? {
            0 => return Ok(None),
            1..=3 => return Err(corrupt("truncated length")),
            _ => {}
        }
        let head = &self.buf[self.pos..self.pos + 4];
        let total = i32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        // Any length BSON allows: a stage may hold (and park) a document
        // larger than a reply can carry; the reply refuses it later.
        let total = usize::try_from(total)
            .ok()
            .filter(|&n| n >= 5)
            .ok_or_else(|| corrupt("bad length"))?;
        if self.fill(total)? < total {
            return Err(corrupt("truncated document"));
        }
        let bytes = &self.buf[self.pos..self.pos + total];
        self.pos += total;
        Document::from_reader(bytes)
            .map(Some)
            .map_err(|e| corrupt(&e.to_string()))
    }
}

fn corrupt(what: &str) -> Error {
    Error::new(
        ErrorCode::InternalError,
        format!("corrupt spill file: {what}"),
    )
}

impl Iterator for RunReader {
    type Item = Result<Document>;

    fn next(&mut self) -> Option<Result<Document>> {
        self.read_one().transpose()
    }
}

/// How merged runs are ordered: a key per document and an order of keys.
pub type KeyOf<K> = Box<dyn Fn(&Document) -> K + Send>;
pub type KeyOrder<K> = Box<dyn Fn(&K, &K) -> Ordering + Send>;

/// A k-way merge of sorted runs (plus, optionally, a last run still in
/// memory). Equal keys come from the earlier run first.
pub struct MergedRuns<K> {
    sources: Vec<Box<dyn Iterator<Item = Result<Document>> + Send>>,
    heads: Vec<Option<(K, Document)>>,
    key_of: KeyOf<K>,
    order: KeyOrder<K>,
    started: bool,
}

impl<K: Send> MergedRuns<K> {
    pub fn new(
        sources: Vec<Box<dyn Iterator<Item = Result<Document>> + Send>>,
        key_of: KeyOf<K>,
        order: KeyOrder<K>,
    ) -> MergedRuns<K> {
        let heads = sources.iter().map(|_| None).collect();
        MergedRuns {
            sources,
            heads,
            key_of,
            order,
            started: false,
        }
    }

    fn refill(&mut self, i: usize) -> Result<()> {
        let next = match self.sources.get_mut(i).and_then(Iterator::next) {
            Some(doc) => {
                let doc = doc?;
                Some(((self.key_of)(&doc), doc))
            }
            None => None,
        };
        if let Some(slot) = self.heads.get_mut(i) {
            *slot = next;
        }
        Ok(())
    }
}

impl<K: Send> Iterator for MergedRuns<K> {
    type Item = Result<Document>;

    fn next(&mut self) -> Option<Result<Document>> {
        if !self.started {
            self.started = true;
            for i in 0..self.sources.len() {
                if let Err(e) = self.refill(i) {
                    return Some(Err(e));
                }
            }
        }
        let mut best: Option<usize> = None;
        for (i, head) in self.heads.iter().enumerate() {
            let Some((key, _)) = head else { continue };
            best = match best.and_then(|b| self.heads[b].as_ref().map(|h| (b, &h.0))) {
                Some((b, best_key)) if (self.order)(key, best_key) != Ordering::Less => Some(b),
                _ => Some(i),
            };
        }
        let i = best?;
        let (_, doc) = self.heads.get_mut(i)?.take()?;
        if let Err(e) = self.refill(i) {
            return Some(Err(e));
        }
        Some(Ok(doc))
    }
}

/// `(key, document)` pairs in key order, as [`KeyedSort`] gives them back.
pub type KeyedStream = Box<dyn Iterator<Item = Result<(Bson, Document)>> + Send>;

/// The order of a [`KeyedSort`]'s keys.
pub type BsonOrder = Arc<dyn Fn(&Bson, &Bson) -> Ordering + Send + Sync>;

/// A stable external sort of documents by a BSON key: equal keys come
/// out in the order they were pushed. It holds at most about
/// `max_blocking_bytes`; past that its sorted buffer becomes a run of
/// `{k: key, d: document}` (with `allowDiskUse`) or the push fails.
pub struct KeyedSort {
    limits: Limits,
    order: BsonOrder,
    memory_error: fn(usize) -> Error,
    /// Documents are held encoded: a decoded tree takes several times its
    /// BSON size, so counting BSON bytes against the limit would let a
    /// sort hold many times the memory the limit names.
    buffer: Vec<(Bson, RawDocumentBuf)>,
    bytes: usize,
    runs: Vec<SpillRun>,
    len: usize,
    keep: Option<usize>,
    park: bool,
}

/// Approximate bytes of one buffered `(key, document)`.
fn entry_size(key: &Bson, doc: &RawDocumentBuf) -> usize {
    approx_size(key).saturating_add(doc.as_bytes().len())
}

/// A buffered document, encoded for holding.
fn pack(doc: &Document) -> Result<RawDocumentBuf> {
    RawDocumentBuf::try_from(doc)
        .map_err(|e| Error::internal(format!("cannot encode a sorted document: {e}")))
}

/// A held document, decoded again for the reader.
fn unpack(raw: &RawDocumentBuf) -> Result<Document> {
    Document::try_from(raw)
        .map_err(|e| Error::internal(format!("cannot decode a sorted document: {e}")))
}

impl KeyedSort {
    /// `memory_error` makes the error (given the limit) for passing the
    /// limit without `allowDiskUse`.
    pub fn new(
        limits: &Limits,
        order: impl Fn(&Bson, &Bson) -> Ordering + Send + Sync + 'static,
        memory_error: fn(usize) -> Error,
    ) -> KeyedSort {
        KeyedSort {
            limits: limits.clone(),
            order: Arc::new(order),
            memory_error,
            buffer: Vec::new(),
            bytes: 0,
            runs: Vec::new(),
            len: 0,
            keep: None,
            park: false,
        }
    }

    /// Keeps only the first `k` in key order (a sort under a limit): the
    /// buffer is cut back to `k` whenever it doubles, so memory follows
    /// `k`, not the input.
    pub fn keep(mut self, k: usize) -> KeyedSort {
        self.keep = Some(k);
        self
    }

    /// Parks the finished output ([`park`]) for a reader that may be a
    /// cursor left open: a big in-memory remainder goes to a run too.
    pub fn park_output(mut self) -> KeyedSort {
        self.park = true;
        self
    }

    pub fn push(&mut self, key: Bson, doc: Document) -> Result<()> {
        let doc = pack(&doc)?;
        self.bytes = self.bytes.saturating_add(entry_size(&key, &doc));
        self.buffer.push((key, doc));
        self.len += 1;
        if let Some(k) = self.keep {
            if self.buffer.len() >= k.saturating_mul(2).max(1024) {
                self.sort_buffer();
                self.buffer.truncate(k);
                self.bytes = self.buffer.iter().map(|(k, d)| entry_size(k, d)).sum();
            }
        }
        if self.bytes > self.limits.max_blocking_bytes {
            if let Some(k) = self.keep.filter(|&k| self.buffer.len() > k) {
                self.sort_buffer();
                self.buffer.truncate(k);
                self.bytes = self.buffer.iter().map(|(k, d)| entry_size(k, d)).sum();
                if self.bytes <= self.limits.max_blocking_bytes {
                    return Ok(());
                }
            }
            if !self.limits.allow_disk_use {
                return Err((self.memory_error)(self.limits.max_blocking_bytes));
            }
            self.spill_buffer()?;
        }
        Ok(())
    }

    /// Writes the sorted buffer as one run and empties it.
    fn spill_buffer(&mut self) -> Result<()> {
        self.sort_buffer();
        // One document decoded at a time, so spilling never holds the
        // buffer's decoded trees all at once.
        let mut writer = SpillWriter::create(&self.limits.spill_dir)?;
        for (k, d) in std::mem::take(&mut self.buffer) {
            writer.append(&bson::doc! {"k": k, "d": unpack(&d)?})?;
        }
        self.runs.push(writer.finish()?);
        self.bytes = 0;
        Ok(())
    }

    /// How many documents were pushed.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn sort_buffer(&mut self) {
        let order = &self.order;
        self.buffer.sort_by(|a, b| order(&a.0, &b.0));
    }

    /// Everything pushed, in key order: the buffer alone, or the runs
    /// merged with it (the buffer last, so ties keep push order).
    pub fn finish(mut self) -> Result<KeyedStream> {
        self.sort_buffer();
        if let Some(k) = self.keep {
            self.buffer.truncate(k);
            self.bytes = self.buffer.iter().map(|(k, d)| entry_size(k, d)).sum();
        }
        if self.park && self.bytes > PARK_BYTES {
            self.spill_buffer()?;
        }
        if self.runs.is_empty() {
            let held = Held::new(if self.park { self.bytes } else { 0 });
            return Ok(Box::new(HeldIter {
                inner: self
                    .buffer
                    .into_iter()
                    .map(|(k, d)| unpack(&d).map(|d| (k, d))),
                _held: held,
            }));
        }
        let mut sources: Vec<Box<dyn Iterator<Item = Result<Document>> + Send>> =
            Vec::with_capacity(self.runs.len() + 1);
        for run in self.runs {
            sources.push(Box::new(run.into_reader()?));
        }
        if !self.buffer.is_empty() {
            let last = self
                .buffer
                .into_iter()
                .map(|(k, d)| unpack(&d).map(|d| bson::doc! {"k": k, "d": d}));
            sources.push(Box::new(HeldIter {
                inner: last,
                _held: Held::new(if self.park { self.bytes } else { 0 }),
            }));
        }
        let order = self.order.clone();
        let merged = MergedRuns::new(
            sources,
            Box::new(|d: &Document| d.get("k").cloned().unwrap_or(Bson::Null)),
            Box::new(move |a: &Bson, b: &Bson| order(a, b)),
        )
        .map(|d| d.and_then(unwrap_keyed));
        Ok(match self.keep {
            Some(k) => Box::new(merged.take(k)),
            None => Box::new(merged),
        })
    }
}

/// Splits a spilled `{k, d}` back into its key and document.
fn unwrap_keyed(mut spilled: Document) -> Result<(Bson, Document)> {
    let key = spilled.remove("k").unwrap_or(Bson::Null);
    match spilled.remove("d") {
        Some(Bson::Document(doc)) => Ok((key, doc)),
        _ => Err(Error::new(
            ErrorCode::InternalError,
            "corrupt spill file: malformed keyed document",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn runs_round_trip_and_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let run = SpillRun::write(dir.path(), vec![doc! {"a": 1}, doc! {"a": "x"}]).unwrap();
        let path = run.path().to_path_buf();
        assert!(path.exists());
        let docs: Vec<Document> = run.into_reader().unwrap().map(|d| d.unwrap()).collect();
        assert_eq!(docs, vec![doc! {"a": 1}, doc! {"a": "x"}]);
        assert!(!path.exists());
    }

    #[test]
    fn dropped_reader_removes_file() {
        let dir = tempfile::tempdir().unwrap();
        let run = SpillRun::write(dir.path(), vec![doc! {"a": 1}, doc! {"a": 2}]).unwrap();
        let path = run.path().to_path_buf();
        let mut reader = run.into_reader().unwrap();
        assert!(reader.next().is_some());
        drop(reader);
        assert!(!path.exists());
    }

    #[test]
    fn merge_is_ordered_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let a = SpillRun::write(
            dir.path(),
            vec![doc! {"k": 1, "r": "a"}, doc! {"k": 3, "r": "a"}],
        )
        .unwrap();
        let b = SpillRun::write(
            dir.path(),
            vec![doc! {"k": 1, "r": "b"}, doc! {"k": 2, "r": "b"}],
        )
        .unwrap();
        let sources: Vec<Box<dyn Iterator<Item = Result<Document>> + Send>> = vec![
            Box::new(a.into_reader().unwrap()),
            Box::new(b.into_reader().unwrap()),
        ];
        let merged: Vec<Document> = MergedRuns::new(
            sources,
            Box::new(|d: &Document| d.get_i32("k").unwrap_or(0)),
            Box::new(|x: &i32, y: &i32| x.cmp(y)),
        )
        .map(|d| d.unwrap())
        .collect();
        let order: Vec<(i32, String)> = merged
            .iter()
            .map(|d| (d.get_i32("k").unwrap(), d.get_str("r").unwrap().to_string()))
            .collect();
        assert_eq!(
            order,
            vec![
                (1, "a".into()),
                (1, "b".into()),
                (2, "b".into()),
                (3, "a".into())
            ]
        );
    }

    #[test]
    fn memory_errors_are_mongodbs() {
        assert_eq!(group_memory_error().code.number(), 292);
        assert_eq!(
            sort_memory_error(100).message,
            "Sort exceeded memory limit of 100 bytes, but did not opt in to external sorting."
        );
    }

    #[test]
    fn keyed_sort_is_stable_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            max_blocking_bytes: 300,
            allow_disk_use: true,
            spill_dir: dir.path().to_path_buf(),
        };
        let order: fn(&Bson, &Bson) -> Ordering = crate::query::compare::compare;
        let mut sorted = KeyedSort::new(&limits, order, sort_memory_error);
        for i in 0..100 {
            sorted
                .push(Bson::Int32((i * 3) % 10), doc! {"i": i})
                .unwrap();
        }
        assert_eq!(sorted.len(), 100);
        assert!(std::fs::read_dir(dir.path()).unwrap().count() > 1);
        let out: Vec<(Bson, Document)> = sorted.finish().unwrap().map(|r| r.unwrap()).collect();
        let mut expected: Vec<(Bson, Document)> = (0..100)
            .map(|i| (Bson::Int32((i * 3) % 10), doc! {"i": i}))
            .collect();
        expected.sort_by(|a, b| order(&a.0, &b.0));
        assert_eq!(out, expected);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

        let no_disk = Limits {
            allow_disk_use: false,
            ..limits
        };
        let mut sorted = KeyedSort::new(&no_disk, order, bucket_auto_memory_error);
        let e = (0..100)
            .try_for_each(|i| sorted.push(Bson::Int32(i), doc! {"i": i}))
            .unwrap_err();
        assert_eq!(e.code.number(), 292);
    }

    #[test]
    fn shared_run_goes_with_its_last_reader() {
        let dir = tempfile::tempdir().unwrap();
        let run = Arc::new(SpillRun::write(dir.path(), vec![doc! {"a": 1}]).unwrap());
        let path = run.path().to_path_buf();
        let a = run.reader().unwrap();
        let b = run.reader().unwrap();
        drop(run);
        assert_eq!(
            a.map(|d| d.unwrap()).collect::<Vec<_>>(),
            vec![doc! {"a": 1}]
        );
        assert!(path.exists());
        drop(b);
        assert!(!path.exists());
    }

    #[test]
    fn park_keeps_small_results_in_memory_and_big_ones_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let small = vec![doc! {"a": 1}, doc! {"a": 2}];
        let bytes = small.iter().map(doc_size).sum();
        let out = park(small.clone(), bytes, dir.path()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(out.map(|d| d.unwrap()).collect::<Vec<_>>(), small);

        let big: Vec<Document> = (0..300)
            .map(|i| doc! {"i": i, "pad": "x".repeat(2000)})
            .collect();
        let bytes = big.iter().map(doc_size).sum();
        let mut out = park(big.clone(), bytes, dir.path()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(out.next().unwrap().unwrap(), big[0]);
        let rest: Vec<Document> = out.map(|d| d.unwrap()).collect();
        assert_eq!(rest, big[1..]);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn reader_holds_no_file_open_and_reads_documents_over_its_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let docs: Vec<Document> = (0..5)
            .map(|i| doc! {"i": i, "pad": "y".repeat(100_000 * i as usize)})
            .collect();
        let mut reader = SpillRun::write(dir.path(), docs.clone())
            .unwrap()
            .into_reader()
            .unwrap();
        assert_eq!(reader.next().unwrap().unwrap(), docs[0]);
        #[cfg(target_os = "linux")]
        {
            let path = reader.run.path().to_path_buf();
            let open = std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
                .any(|p| p == path);
            assert!(!open, "an idle reader keeps no descriptor");
        }
        let rest: Vec<Document> = reader.map(|d| d.unwrap()).collect();
        assert_eq!(rest, docs[1..]);
    }

    #[cfg(unix)]
    #[test]
    fn spill_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("spill");
        let run = SpillRun::write(&spill, vec![doc! {"a": 1}]).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(run.path()), 0o600);
        assert_eq!(mode(&spill), 0o700);
    }

    #[test]
    fn keyed_sort_keeps_the_best_and_parks_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            max_blocking_bytes: 1 << 20,
            allow_disk_use: false,
            spill_dir: dir.path().to_path_buf(),
        };
        let order = crate::query::compare::compare;
        let mut top = KeyedSort::new(&limits, order, sort_memory_error).keep(3);
        for i in (0..5000).rev() {
            top.push(Bson::Int32(i), doc! {"i": i}).unwrap();
        }
        let got: Vec<Bson> = top.finish().unwrap().map(|r| r.unwrap().0).collect();
        assert_eq!(got, vec![Bson::Int32(0), Bson::Int32(1), Bson::Int32(2)]);

        // Parked output past PARK_BYTES is read back from one file, even
        // without allowDiskUse: it is not over the memory limit.
        let mut all = KeyedSort::new(&limits, order, sort_memory_error).park_output();
        for i in (0..2000).rev() {
            all.push(Bson::Int32(i), doc! {"pad": "z".repeat(200)})
                .unwrap();
        }
        let mut out = all.finish().unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(out.next().unwrap().unwrap().0, Bson::Int32(0));
        assert_eq!(out.count(), 1999);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
