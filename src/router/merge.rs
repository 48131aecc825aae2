//! Fan-out: running one query on many partitions at once and merging
//! what they return.
//!
//! Each targeted partition is a lazy [`RowStream`]: its records, filtered,
//! sorted (when the query sorts) and projected. [`Merge`] pulls from them
//! a chunk at a time, refilling every partition that ran dry in parallel
//! on the blocking thread pool, at most `parallelism` at once. A chunk is
//! small, so memory stays bounded by partitions × chunk however large
//! the result, and nothing runs between two `getMore`s: the streams just
//! wait where they stopped. The rows read ahead count in
//! [`held_bytes`](crate::aggregate::spill::held_bytes), as what an open
//! cursor holds.
//!
//! Sorted queries are merged k-way by the sort key, ties broken by `_id`,
//! so the order is the same as the order of the same query on one
//! partition.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::mpsc;

use bson::{Bson, Document};

use crate::aggregate::spill::Held;
use crate::error::{Error, Result};
use crate::query::compare::compare;
use crate::query::interrupt;
use crate::query::sort::SortSpec;

/// One result row of one partition.
pub(crate) struct Row {
    /// The sort key (empty for an unsorted query).
    pub key: Vec<Bson>,
    /// The `_id`, which breaks ties between equal sort keys.
    pub id: Bson,
    /// The document as returned (projected).
    pub doc: Document,
}

pub(crate) type RowStream = Box<dyn Iterator<Item = Result<Row>> + Send>;

/// Most rows taken from one partition in one refill.
const CHUNK_ROWS: usize = 256;
/// Rows taken from a partition in its first refill; each refill after
/// takes twice as many, up to [`CHUNK_ROWS`]. A cursor left after a small
/// first batch (a driver's `batchSize: 1`) holds a few rows per
/// partition, not a full chunk of each.
const FIRST_CHUNK_ROWS: usize = 16;
/// Most bytes of documents taken from one partition in one refill: an
/// idle cursor over many partitions holds up to one chunk of each.
const CHUNK_BYTES: usize = 256 * 1024;

/// Runs `tasks` with at most `parallelism` running at once, on the
/// blocking pool when there is a runtime, and returns their results in
/// task order.
pub(crate) fn run_parallel<T: Send + 'static>(
    tasks: Vec<Box<dyn FnOnce() -> T + Send>>,
    parallelism: usize,
) -> Result<Vec<T>> {
    let handle = tokio::runtime::Handle::try_current().ok();
    let (Some(handle), true) = (handle, tasks.len() > 1 && parallelism > 1) else {
        return Ok(tasks.into_iter().map(|t| t()).collect());
    };
    let n = tasks.len();
    let (tx, rx) = mpsc::channel::<(usize, T)>();
    let mut pending = tasks.into_iter().enumerate();
    // The tasks work for the caller's operation: they stop with it.
    // ... and are charged to it.
    let op = interrupt::current();
    let meter = super::charge::current();
    let spawn = |pending: &mut dyn Iterator<Item = (usize, Box<dyn FnOnce() -> T + Send>)>| {
        if let Some((i, task)) = pending.next() {
            let tx = tx.clone();
            let op = op.clone();
            let meter = meter.clone();
            handle.spawn_blocking(move || {
                let _entered = interrupt::enter(op);
                let value = {
                    // Leaving the meter hands it what the task charged,
                    // before the caller can read it.
                    let _metered = super::charge::enter(meter);
                    task()
                };
                let _ = tx.send((i, value));
            });
        }
    };
    for _ in 0..parallelism.min(n) {
        spawn(&mut pending);
    }
    let mut results: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let (i, value) = rx
            .recv()
            .map_err(|_| Error::internal("a partition task stopped without a result"))?;
        results[i] = Some(value);
        spawn(&mut pending);
    }
    results
        .into_iter()
        .map(|r| r.ok_or_else(|| Error::internal("a partition task returned nothing")))
        .collect()
}

/// A partition's stream and the rows read ahead from it, with their
/// sizes.
struct Source {
    stream: Option<RowStream>,
    buffer: VecDeque<(Row, usize)>,
    held: Held,
    /// Rows its next refill takes.
    chunk_rows: usize,
    exhausted: bool,
}

impl Source {
    fn front(&self) -> Option<&Row> {
        self.buffer.front().map(|(row, _)| row)
    }

    fn pop_front(&mut self) -> Option<Row> {
        let (row, size) = self.buffer.pop_front()?;
        self.held.set(self.held.bytes().saturating_sub(size));
        Some(row)
    }
}

/// The merged results of several partitions.
pub(crate) struct Merge {
    sources: Vec<Source>,
    sort: Option<SortSpec>,
    parallelism: usize,
    /// The partition an unsorted merge is draining.
    current: usize,
    failed: bool,
}

/// What one refill of one partition produced.
struct Chunk {
    stream: RowStream,
    rows: Vec<(Row, usize)>,
    bytes: usize,
    exhausted: bool,
    error: Option<Error>,
}

fn read_chunk(mut stream: RowStream, max_rows: usize) -> Chunk {
    let mut rows = Vec::new();
    let mut bytes = 0usize;
    let (exhausted, error) = loop {
        if rows.len() >= max_rows || bytes >= CHUNK_BYTES {
            break (false, None);
        }
        let next = match interrupt::check() {
            Ok(()) => stream.next(),
            Err(e) => Some(Err(e)),
        };
        match next {
            None => break (true, None),
            Some(Err(e)) => break (true, Some(e)),
            Some(Ok(row)) => {
                let size = crate::aggregate::spill::doc_size(&row.doc);
                bytes += size;
                rows.push((row, size));
            }
        }
    };
    Chunk {
        stream,
        rows,
        bytes,
        exhausted,
        error,
    }
}

impl Merge {
    pub fn new(streams: Vec<RowStream>, sort: Option<SortSpec>, parallelism: usize) -> Merge {
        Merge {
            sources: streams
                .into_iter()
                .map(|s| Source {
                    stream: Some(s),
                    buffer: VecDeque::new(),
                    held: Held::default(),
                    chunk_rows: FIRST_CHUNK_ROWS,
                    exhausted: false,
                })
                .collect(),
            sort,
            parallelism: parallelism.max(1),
            current: 0,
            failed: false,
        }
    }

    /// Reads the next chunk of each of `which` in parallel.
    fn refill(&mut self, which: Vec<usize>) -> Result<()> {
        let mut tasks: Vec<Box<dyn FnOnce() -> Chunk + Send>> = Vec::new();
        let mut owners = Vec::new();
        for i in which {
            let source = &mut self.sources[i];
            if let Some(stream) = source.stream.take() {
                let rows = source.chunk_rows;
                source.chunk_rows = (rows * 2).min(CHUNK_ROWS);
                tasks.push(Box::new(move || read_chunk(stream, rows)));
                owners.push(i);
            }
        }
        let chunks = run_parallel(tasks, self.parallelism)?;
        let mut first_error = None;
        for (i, chunk) in owners.into_iter().zip(chunks) {
            let source = &mut self.sources[i];
            source.buffer.extend(chunk.rows);
            source.held.set(source.held.bytes() + chunk.bytes);
            source.exhausted = chunk.exhausted;
            if !chunk.exhausted {
                source.stream = Some(chunk.stream);
            }
            if first_error.is_none() {
                first_error = chunk.error;
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn needs_refill(&self, i: usize) -> bool {
        let s = &self.sources[i];
        s.buffer.is_empty() && !s.exhausted
    }

    fn next_sorted(&mut self, sort: &SortSpec) -> Result<Option<Row>> {
        let dry: Vec<usize> = (0..self.sources.len())
            .filter(|&i| self.needs_refill(i))
            .collect();
        if !dry.is_empty() {
            self.refill(dry)?;
        }
        let mut best: Option<usize> = None;
        for (i, source) in self.sources.iter().enumerate() {
            let Some(head) = source.front() else {
                continue;
            };
            let better = match best.and_then(|b| self.sources[b].front()) {
                None => true,
                Some(current) => row_order(sort, head, current) == Ordering::Less,
            };
            if better {
                best = Some(i);
            }
        }
        Ok(best.and_then(|i| self.sources[i].pop_front()))
    }

    fn next_unsorted(&mut self) -> Result<Option<Row>> {
        while self.current < self.sources.len() {
            if let Some(row) = self.sources[self.current].pop_front() {
                return Ok(Some(row));
            }
            if self.sources[self.current].exhausted {
                self.current += 1;
                continue;
            }
            // Read this partition and, while at it, the next ones.
            let ahead: Vec<usize> = (self.current..self.sources.len())
                .filter(|&i| self.needs_refill(i))
                .take(self.parallelism)
                .collect();
            self.refill(ahead)?;
        }
        Ok(None)
    }
}

/// The merge order of two rows: by sort key, then by `_id`.
pub(crate) fn row_order(sort: &SortSpec, a: &Row, b: &Row) -> Ordering {
    sort.compare_keys(&a.key, &b.key)
        .then_with(|| compare(&a.id, &b.id))
}

impl Iterator for Merge {
    type Item = Result<Document>;

    fn next(&mut self) -> Option<Result<Document>> {
        if self.failed {
            return None;
        }
        let sort = self.sort.take();
        let next = match &sort {
            Some(s) => self.next_sorted(s),
            None => self.next_unsorted(),
        };
        self.sort = sort;
        match next {
            Ok(row) => row.map(|r| Ok(r.doc)),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn stream(rows: Vec<(i32, i32)>) -> RowStream {
        Box::new(rows.into_iter().map(|(k, id)| {
            Ok(Row {
                key: vec![Bson::Int32(k)],
                id: Bson::Int32(id),
                doc: doc! {"_id": id, "k": k},
            })
        }))
    }

    fn ids(m: Merge) -> Vec<i32> {
        m.map(|d| d.unwrap().get_i32("_id").unwrap()).collect()
    }

    #[test]
    fn sorted_merge_orders_by_key_then_id() {
        let sort = SortSpec::parse(&doc! {"k": 1}).unwrap();
        let m = Merge::new(
            vec![
                stream(vec![(1, 5), (3, 1)]),
                stream(vec![]),
                stream(vec![(1, 2), (2, 9), (3, 0)]),
            ],
            Some(sort),
            2,
        );
        assert_eq!(ids(m), [2, 5, 9, 0, 1]);
    }

    #[test]
    fn unsorted_merge_returns_every_row_once() {
        let many: Vec<(i32, i32)> = (0..1000).map(|i| (0, i)).collect();
        let m = Merge::new(
            vec![stream(many), stream(vec![(0, 1000)]), stream(vec![])],
            None,
            3,
        );
        let got = ids(m);
        assert_eq!(got, (0..=1000).collect::<Vec<_>>());
    }

    #[test]
    fn an_error_ends_the_merge() {
        let failing: RowStream = Box::new(std::iter::once(Err(Error::internal("disk"))));
        let mut m = Merge::new(vec![stream(vec![(0, 1)]), failing], None, 1);
        assert!(m.next().unwrap().is_ok());
        assert!(m.next().unwrap().is_err());
        assert!(m.next().is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_run_in_parallel_and_keep_their_order() {
        let results = tokio::task::block_in_place(|| {
            let tasks: Vec<Box<dyn FnOnce() -> usize + Send>> = (0..20usize)
                .map(|i| Box::new(move || i * 2) as Box<dyn FnOnce() -> usize + Send>)
                .collect();
            run_parallel(tasks, 4).unwrap()
        });
        assert_eq!(results, (0..20).map(|i| i * 2).collect::<Vec<_>>());
    }
}
