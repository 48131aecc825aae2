//! Spilling blocking stages to temporary files when they pass their
//! memory limit (with `allowDiskUse`).
//!
//! A blocking stage (`$sort`, `$group`) counts the approximate bytes it
//! holds. Past [`Limits::max_blocking_bytes`](super::Limits) it either
//! fails with MongoDB's error 292 (no `allowDiskUse`) or sorts what it
//! holds and appends it as one *run* of BSON documents to a file in the
//! spill directory. Reading merges the runs (k-way, ties to the earlier
//! run, so a stable sort stays stable). Each run's file is removed when
//! the run is dropped, whether it was read to the end or not.

use std::cmp::Ordering;
use std::fs::File;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use bson::{Bson, Document};

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
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        let n = NEXT_RUN.fetch_add(1, AtomicOrdering::Relaxed);
        let path = dir.join(format!("shardgate-spill-{}-{n}.bson", std::process::id()));
        let file = File::create(&path).map_err(|e| io_error(&path, e))?;
        // From here on the file is removed if anything fails.
        let run = SpillRun { path };
        let mut out = BufWriter::new(file);
        for doc in docs {
            let bytes = doc.to_vec().map_err(|e| {
                Error::new(
                    ErrorCode::InternalError,
                    format!("spilling a document: {e}"),
                )
            })?;
            out.write_all(&bytes).map_err(|e| io_error(&run.path, e))?;
        }
        out.flush().map_err(|e| io_error(&run.path, e))?;
        Ok(run)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the run back, in the order written.
    pub fn into_reader(self) -> Result<RunReader> {
        let file = File::open(&self.path).map_err(|e| io_error(&self.path, e))?;
        Ok(RunReader {
            input: BufReader::new(file),
            run: self,
        })
    }
}

impl Drop for SpillRun {
    fn drop(&mut self) {
        // Best effort: a file that is already gone is fine.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The documents of one run; the file goes when the reader is dropped.
#[derive(Debug)]
pub struct RunReader {
    input: BufReader<File>,
    run: SpillRun,
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
}
