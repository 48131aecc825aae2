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

use std::cmp::Ordering;
use std::fs::File;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use bson::{Bson, Document};

use super::Limits;
use crate::error::{Error, ErrorCode, Result};

/// Distinguishes the spill files of one process.
static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

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
        let file = File::open(&self.path).map_err(|e| io_error(&self.path, e))?;
        Ok(RunReader {
            input: BufReader::new(file),
            run: Arc::clone(self),
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
    pub fn create(dir: &Path) -> Result<SpillWriter> {
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        let n = NEXT_RUN.fetch_add(1, AtomicOrdering::Relaxed);
        let path = dir.join(format!("shardgate-spill-{}-{n}.bson", std::process::id()));
        let file = File::create(&path).map_err(|e| io_error(&path, e))?;
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

/// The documents of one run; the file goes when the reader (and every
/// other holder of the run) is dropped.
#[derive(Debug)]
pub struct RunReader {
    input: BufReader<File>,
    run: Arc<SpillRun>,
}

impl RunReader {
    fn read_one(&mut self) -> Result<Option<Document>> {
        let mut len = [0u8; 4];
        match self.input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(io_error(&self.run.path, e)),
        }
        let total = i32::from_le_bytes(len);
        let total = usize::try_from(total)
            .ok()
            .filter(|n| (5..=64 * 1024 * 1024).contains(n))
            .ok_or_else(|| {
                Error::new(ErrorCode::InternalError, "corrupt spill file: bad length")
            })?;
        let mut bytes = vec![0u8; total];
        bytes[..4].copy_from_slice(&len);
        self.input
            .read_exact(&mut bytes[4..])
            .map_err(|e| io_error(&self.run.path, e))?;
        Document::from_reader(&bytes[..])
            .map(Some)
            .map_err(|e| Error::new(ErrorCode::InternalError, format!("corrupt spill file: {e}")))
    }
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

/// A stable external sort of documents by a BSON key: equal keys come
/// out in the order they were pushed. It holds at most about
/// `max_blocking_bytes`; past that its sorted buffer becomes a run of
/// `{k: key, d: document}` (with `allowDiskUse`) or the push fails.
pub struct KeyedSort {
    limits: Limits,
    order: fn(&Bson, &Bson) -> Ordering,
    memory_error: fn(usize) -> Error,
    buffer: Vec<(Bson, Document)>,
    bytes: usize,
    runs: Vec<SpillRun>,
    len: usize,
}

impl KeyedSort {
    /// `memory_error` makes the error (given the limit) for passing the
    /// limit without `allowDiskUse`.
    pub fn new(
        limits: &Limits,
        order: fn(&Bson, &Bson) -> Ordering,
        memory_error: fn(usize) -> Error,
    ) -> KeyedSort {
        KeyedSort {
            limits: limits.clone(),
            order,
            memory_error,
            buffer: Vec::new(),
            bytes: 0,
            runs: Vec::new(),
            len: 0,
        }
    }

    pub fn push(&mut self, key: Bson, doc: Document) -> Result<()> {
        self.bytes = self
            .bytes
            .saturating_add(approx_size(&key))
            .saturating_add(doc_size(&doc));
        self.buffer.push((key, doc));
        self.len += 1;
        if self.bytes > self.limits.max_blocking_bytes {
            if !self.limits.allow_disk_use {
                return Err((self.memory_error)(self.limits.max_blocking_bytes));
            }
            self.sort_buffer();
            let docs = std::mem::take(&mut self.buffer)
                .into_iter()
                .map(|(k, d)| bson::doc! {"k": k, "d": d});
            self.runs
                .push(SpillRun::write(&self.limits.spill_dir, docs)?);
            self.bytes = 0;
        }
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
        let order = self.order;
        self.buffer.sort_by(|a, b| order(&a.0, &b.0));
    }

    /// Everything pushed, in key order: the buffer alone, or the runs
    /// merged with it (the buffer last, so ties keep push order).
    pub fn finish(mut self) -> Result<KeyedStream> {
        self.sort_buffer();
        if self.runs.is_empty() {
            return Ok(Box::new(self.buffer.into_iter().map(Ok)));
        }
        let mut sources: Vec<Box<dyn Iterator<Item = Result<Document>> + Send>> =
            Vec::with_capacity(self.runs.len() + 1);
        for run in self.runs {
            sources.push(Box::new(run.into_reader()?));
        }
        let last: Vec<Result<Document>> = self
            .buffer
            .into_iter()
            .map(|(k, d)| Ok(bson::doc! {"k": k, "d": d}))
            .collect();
        sources.push(Box::new(last.into_iter()));
        let order = self.order;
        let merged = MergedRuns::new(
            sources,
            Box::new(|d: &Document| d.get("k").cloned().unwrap_or(Bson::Null)),
            Box::new(move |a: &Bson, b: &Bson| order(a, b)),
        );
        Ok(Box::new(merged.map(|d| d.and_then(unwrap_keyed))))
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
}
