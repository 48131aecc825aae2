//! Group commit: many writers, one sync.
//!
//! A writer applies its batch to the engine (visible, not yet durable),
//! takes a ticket from [`GroupCommit::ticket`] and awaits
//! [`GroupCommit::wait`]. One syncer thread repeatedly syncs the journal
//! and publishes how far it got; every writer whose ticket was issued
//! before that sync started is released by it. Under load one sync covers
//! every writer that arrived while the previous sync ran.
//!
//! Writes nobody waits for (a write concern of `j: false`) are synced by
//! the same thread at most `interval` after they were issued, as mongod's
//! `journalCommitInterval` does.
//!
//! Dropping the [`GroupCommit`] stops the thread and waits for it, after
//! a last sync of anything still pending.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use super::{StorageError, StorageResult};

/// The sync step of a backend, run on the syncer thread.
pub type SyncFn = Box<dyn Fn() -> StorageResult<()> + Send + 'static>;

pub struct GroupCommit {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the writers and the syncer thread share.
struct Shared {
    issued: AtomicU64,
    /// Set by a waiting writer; cleared by the syncer when it starts.
    pending: Mutex<bool>,
    wake: Condvar,
    stopping: AtomicBool,
    synced: watch::Sender<SyncState>,
    /// Syncs done, and the writes they made durable, since start.
    syncs: AtomicU64,
    synced_writes: AtomicU64,
}

/// What group commit has done since start: syncs, and the writes they
/// made durable (their ratio is the writes per sync).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    pub syncs: u64,
    pub writes: u64,
}

#[derive(Debug, Clone)]
struct SyncState {
    upto: u64,
    /// The first failed sync's error; every later wait fails with it, as
    /// a journal that failed to sync may have lost what it held.
    failed: Option<StorageError>,
}

impl GroupCommit {
    /// Starts the syncer thread; writes not waited for are synced within
    /// `interval`.
    pub fn start(sync: SyncFn, interval: Duration) -> Arc<GroupCommit> {
        let (synced, _) = watch::channel(SyncState {
            upto: 0,
            failed: None,
        });
        let shared = Arc::new(Shared {
            issued: AtomicU64::new(0),
            pending: Mutex::new(false),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
            synced,
            syncs: AtomicU64::new(0),
            synced_writes: AtomicU64::new(0),
        });
        let worker = shared.clone();
        let thread = thread::Builder::new()
            .name("shardgate-sync".into())
            .spawn(move || worker.run(sync, interval));
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::error!("cannot start the sync thread: {e}");
                None
            }
        };
        Arc::new(GroupCommit {
            shared,
            thread: Mutex::new(thread),
        })
    }

    /// Issues the ticket of a write that has just been applied.
    pub fn ticket(&self) -> u64 {
        self.shared.issued.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Syncs and synced writes since start.
    pub fn stats(&self) -> SyncStats {
        SyncStats {
            syncs: self.shared.syncs.load(Ordering::Relaxed),
            writes: self.shared.synced_writes.load(Ordering::Relaxed),
        }
    }

    /// Waits until a sync that started after `ticket` was issued finished.
    pub async fn wait(&self, ticket: u64) -> StorageResult<()> {
        let shared = &self.shared;
        let mut rx = shared.synced.subscribe();
        {
            let state = rx.borrow();
            if let Some(e) = &state.failed {
                return Err(e.clone());
            }
            if state.upto >= ticket {
                return Ok(());
            }
        }
        {
            let mut pending = shared.pending.lock();
            *pending = true;
            shared.wake.notify_one();
        }
        let state = rx
            .wait_for(|s| s.failed.is_some() || s.upto >= ticket)
            .await
            .map_err(|_| StorageError::Engine("sync thread stopped".into()))?;
        match &state.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        {
            let _pending = self.shared.pending.lock();
            self.shared.wake.notify_one();
        }
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    /// Whether writes were issued since the last sync started.
    fn unsynced(&self) -> bool {
        self.issued.load(Ordering::Acquire) > self.synced.borrow().upto
    }

    fn run(&self, sync: SyncFn, interval: Duration) {
        loop {
            {
                let mut pending = self.pending.lock();
                while !*pending && !self.stopping.load(Ordering::Acquire) {
                    let timed_out = self.wake.wait_for(&mut pending, interval).timed_out();
                    if timed_out && self.unsynced() {
                        break;
                    }
                }
                if !*pending && !self.unsynced() {
                    return;
                }
                *pending = false;
            }
            let synced_before = self.synced.borrow().upto;
            let target = self.issued.load(Ordering::Acquire);
            let started = Instant::now();
            let result = sync();
            let failed = result.is_err();
            if !failed {
                self.syncs.fetch_add(1, Ordering::Relaxed);
                self.synced_writes
                    .fetch_add(target.saturating_sub(synced_before), Ordering::Relaxed);
            }
            tracing::trace!(
                writes = target.saturating_sub(synced_before),
                micros = started.elapsed().as_micros() as u64,
                "journal synced"
            );
            self.synced.send_modify(|s| {
                if let Err(e) = result {
                    tracing::error!("journal sync failed: {e}");
                    s.failed.get_or_insert(e);
                } else if target > s.upto {
                    s.upto = target;
                }
            });
            if failed && self.stopping.load(Ordering::Acquire) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    const INTERVAL: Duration = Duration::from_millis(100);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writers_share_syncs() {
        let syncs = Arc::new(AtomicUsize::new(0));
        let counter = syncs.clone();
        let gc = GroupCommit::start(
            Box::new(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(5));
                Ok(())
            }),
            INTERVAL,
        );
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let gc = gc.clone();
            tasks.push(tokio::spawn(async move {
                let t = gc.ticket();
                gc.wait(t).await
            }));
        }
        for t in tasks {
            assert!(t.await.is_ok_and(|r| r.is_ok()));
        }
        let n = syncs.load(Ordering::SeqCst);
        assert!((1..64).contains(&n), "64 writers took {n} syncs");
        // Every sync is counted with the writes it made durable.
        assert_eq!(
            gc.stats(),
            SyncStats {
                syncs: n as u64,
                writes: 64
            }
        );
    }

    #[tokio::test]
    async fn dropping_stops_the_thread_after_a_last_sync() {
        let syncs = Arc::new(AtomicUsize::new(0));
        let counter = syncs.clone();
        let gc = GroupCommit::start(
            Box::new(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
            INTERVAL,
        );
        let t = gc.ticket();
        gc.wait(t).await.unwrap();
        drop(gc);
        // The closure (and whatever it holds) is gone once drop returns.
        assert_eq!(Arc::strong_count(&syncs), 1);
    }

    #[tokio::test]
    async fn writes_nobody_waits_for_are_synced_within_the_interval() {
        let syncs = Arc::new(AtomicUsize::new(0));
        let counter = syncs.clone();
        let gc = GroupCommit::start(
            Box::new(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
            Duration::from_millis(20),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(syncs.load(Ordering::SeqCst), 0, "nothing to sync, no sync");
        let t = gc.ticket();
        let mut synced = gc.shared.synced.subscribe();
        let waited =
            tokio::time::timeout(Duration::from_secs(5), synced.wait_for(|s| s.upto >= t)).await;
        assert!(waited.is_ok(), "the unwaited write was never synced");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(syncs.load(Ordering::SeqCst), 1, "one write, one sync");
    }

    #[tokio::test]
    async fn a_failed_sync_fails_the_waiters() {
        let gc = GroupCommit::start(
            Box::new(|| Err(StorageError::Engine("disk".into()))),
            INTERVAL,
        );
        let t = gc.ticket();
        assert!(gc.wait(t).await.is_err());
    }

    /// Waiters see why the sync failed (a full disk is answered
    /// differently from other failures), and so does every later waiter.
    #[tokio::test]
    async fn a_failed_sync_keeps_its_reason() {
        let gc = GroupCommit::start(
            Box::new(|| Err(StorageError::DiskFull("no space".into()))),
            INTERVAL,
        );
        for _ in 0..2 {
            let t = gc.ticket();
            assert!(matches!(gc.wait(t).await, Err(StorageError::DiskFull(m)) if m == "no space"));
        }
    }
}
