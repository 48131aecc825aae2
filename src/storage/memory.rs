//! The in-memory backend: the key-value engine of [`super::kv`] as
//! ordered maps behind a lock. Snapshots share the maps copy-on-write.
//!
//! It exists for tests: router tests run against it without a disk, and
//! crash-point tests use its two faults: [`MemoryEngine::fail_at`] makes
//! the next batch fail at a chosen step (nothing of it becomes visible,
//! as with a real engine whose journal append failed), and
//! [`MemoryEngine::crash`] drops every commit not yet made durable.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;

use super::kv::{KvEngine, KvOp, KvRead, KvStore, ScanIter, Space};
use super::layout::KeyRange;
use super::{CommitSeq, StorageError, StorageResult};

type Table = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every space's map.
#[derive(Clone, Default)]
struct Tables([Table; 5]);

impl Tables {
    fn table(&self, space: Space) -> &Table {
        &self.0[space as usize]
    }

    fn table_mut(&mut self, space: Space) -> &mut Table {
        &mut self.0[space as usize]
    }
}

impl KvRead for Arc<Tables> {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        Ok(self.table(space).get(key).cloned())
    }

    fn scan(&self, space: Space, range: KeyRange, reverse: bool) -> ScanIter {
        let items: Vec<(Vec<u8>, Vec<u8>)> = self
            .table(space)
            .range::<Vec<u8>, _>(range)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if reverse {
            Box::new(items.into_iter().rev().map(Ok))
        } else {
            Box::new(items.into_iter().map(Ok))
        }
    }
}

#[derive(Default)]
struct State {
    current: Arc<Tables>,
    /// What survives a crash.
    durable: Arc<Tables>,
    committed: CommitSeq,
    /// The next batch fails at this step.
    fail_at: Option<usize>,
    /// When set, `durable` does not sync (commits stay loss-prone).
    hold_sync: bool,
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
}

/// Reads of the latest state.
struct Live(Arc<Inner>);

impl KvRead for Live {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        let current = self.0.state.lock().current.clone();
        current.get(space, key)
    }

    fn scan(&self, space: Space, range: KeyRange, reverse: bool) -> ScanIter {
        let current = self.0.state.lock().current.clone();
        current.scan(space, range, reverse)
    }
}

#[derive(Default, Clone)]
pub struct MemoryEngine {
    inner: Arc<Inner>,
}

impl MemoryEngine {
    pub fn new() -> MemoryEngine {
        MemoryEngine::default()
    }

    /// A store over a fresh engine.
    pub fn store() -> (Arc<KvStore>, MemoryEngine) {
        let engine = MemoryEngine::new();
        (KvStore::new(Arc::new(engine.clone())), engine)
    }

    /// Makes the next batch fail at step `step` (0-based); a batch with
    /// fewer steps succeeds and the fault stays armed.
    pub fn fail_at(&self, step: usize) {
        self.inner.state.lock().fail_at = Some(step);
    }

    /// Disarms [`MemoryEngine::fail_at`]; true when the fault had fired.
    pub fn disarm(&self) -> bool {
        self.inner.state.lock().fail_at.take().is_none()
    }

    /// Stops (or resumes) syncing: while held, commits are visible but
    /// not durable.
    pub fn hold_sync(&self, hold: bool) {
        let mut state = self.inner.state.lock();
        state.hold_sync = hold;
        if !hold {
            state.durable = state.current.clone();
        }
    }

    /// Loses every commit that is not durable, as a power cut would.
    pub fn crash(&self) {
        let mut state = self.inner.state.lock();
        state.current = state.durable.clone();
    }

    /// Every `(key, value)` of one space, for checks.
    pub fn dump(&self, space: Space) -> Vec<(Vec<u8>, Vec<u8>)> {
        let current = self.inner.state.lock().current.clone();
        current
            .table(space)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// How many batches have been committed.
    pub fn commits(&self) -> CommitSeq {
        self.inner.state.lock().committed
    }

    /// Deletes a raw key, bypassing the typed layer.
    pub fn delete_raw(&self, space: Space, key: Vec<u8>) -> StorageResult<()> {
        self.write(vec![KvOp::Delete { space, key }]).map(|_| ())
    }

    /// Puts raw bytes, bypassing the typed layer (tests write old layouts).
    pub fn put_raw(&self, space: Space, key: Vec<u8>, value: Vec<u8>) -> StorageResult<()> {
        self.write(vec![KvOp::Put { space, key, value }])
            .map(|_| ())
    }
}

impl KvRead for MemoryEngine {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        Live(self.inner.clone()).get(space, key)
    }

    fn scan(&self, space: Space, range: KeyRange, reverse: bool) -> ScanIter {
        Live(self.inner.clone()).scan(space, range, reverse)
    }
}

impl KvEngine for MemoryEngine {
    fn snapshot(&self) -> Arc<dyn KvRead> {
        Arc::new(self.inner.state.lock().current.clone())
    }

    fn live(&self) -> Arc<dyn KvRead> {
        Arc::new(Live(self.inner.clone()))
    }

    fn write(&self, ops: Vec<KvOp>) -> StorageResult<CommitSeq> {
        let mut state = self.inner.state.lock();
        if let Some(step) = state.fail_at {
            if step < ops.len() {
                state.fail_at = None;
                return Err(StorageError::Engine(format!(
                    "injected failure at step {step} of {}",
                    ops.len()
                )));
            }
        }
        let mut next = (*state.current).clone();
        for op in ops {
            match op {
                KvOp::Put { space, key, value } => {
                    next.table_mut(space).insert(key, value);
                }
                KvOp::Delete { space, key } => {
                    next.table_mut(space).remove(&key);
                }
            }
        }
        state.current = Arc::new(next);
        state.committed += 1;
        Ok(state.committed)
    }

    fn durable(&self, _seq: CommitSeq) -> BoxFuture<'static, StorageResult<()>> {
        let mut state = self.inner.state.lock();
        if !state.hold_sync {
            state.durable = state.current.clone();
        }
        Box::pin(async { Ok(()) })
    }

    fn disk_bytes(&self) -> u64 {
        0
    }

    fn space_bytes(&self, space: Space) -> u64 {
        let state = self.inner.state.lock();
        state
            .current
            .table(space)
            .iter()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum()
    }

    fn close(&self) -> StorageResult<()> {
        self.hold_sync(false);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Bound;

    fn put(k: &[u8]) -> KvOp {
        KvOp::Put {
            space: Space::Records,
            key: k.to_vec(),
            value: vec![],
        }
    }

    fn keys(e: &MemoryEngine) -> Vec<Vec<u8>> {
        e.dump(Space::Records).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn a_failed_batch_leaves_nothing() {
        let e = MemoryEngine::new();
        e.write(vec![put(b"a")]).unwrap();
        e.fail_at(1);
        assert!(e.write(vec![put(b"b"), put(b"c")]).is_err());
        assert_eq!(keys(&e), vec![b"a".to_vec()]);
        // The fault fired once.
        e.write(vec![put(b"b"), put(b"c")]).unwrap();
        assert_eq!(keys(&e).len(), 3);
    }

    #[test]
    fn a_crash_loses_what_was_not_durable() {
        let e = MemoryEngine::new();
        let seq = e.write(vec![put(b"a")]).unwrap();
        futures::executor::block_on(e.durable(seq)).unwrap();
        e.hold_sync(true);
        let seq = e.write(vec![put(b"b")]).unwrap();
        futures::executor::block_on(e.durable(seq)).unwrap();
        e.crash();
        assert_eq!(keys(&e), vec![b"a".to_vec()]);
    }

    #[test]
    fn snapshots_keep_their_point_in_time() {
        let e = MemoryEngine::new();
        e.write(vec![put(b"a")]).unwrap();
        let snap = e.snapshot();
        e.write(vec![put(b"b")]).unwrap();
        let all = (Bound::Unbounded, Bound::Unbounded);
        assert_eq!(snap.scan(Space::Records, all.clone(), false).count(), 1);
        assert_eq!(e.live().scan(Space::Records, all.clone(), true).count(), 2);
    }
}
