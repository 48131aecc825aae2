//! Group commit: many writers, one sync.
//!
//! A writer applies its batch to the engine (visible, not yet durable),
//! takes a ticket from [`GroupCommit::ticket`] and awaits
//! [`GroupCommit::wait`]. One syncer thread repeatedly syncs the journal
//! and publishes how far it got; every writer whose ticket was issued
//! before that sync started is released by it. Under load one sync covers
//! every writer that arrived while the previous sync ran.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use super::{StorageError, StorageResult};

/// The sync step of a backend, run on the syncer thread.
pub type SyncFn = Box<dyn Fn() -> StorageResult<()> + Send + 'static>;

pub struct GroupCommit {
    issued: AtomicU64,
    wake: Mutex<bool>,
    wake_cv: Condvar,
    synced: watch::Sender<SyncState>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct SyncState {
    upto: u64,
    failed: bool,
}

impl GroupCommit {
    /// Starts the syncer thread.
    pub fn start(sync: SyncFn) -> Arc<GroupCommit> {
        let (synced, _) = watch::channel(SyncState {
            upto: 0,
            failed: false,
        });
        let gc = Arc::new(GroupCommit {
            issued: AtomicU64::new(0),
            wake: Mutex::new(false),
            wake_cv: Condvar::new(),
            synced,
        });
        let worker = Arc::downgrade(&gc);
        let spawned = thread::Builder::new()
            .name("shardgate-sync".into())
            .spawn(move || loop {
                let Some(gc) = worker.upgrade() else { return };
                {
                    let mut pending = gc.wake.lock();
                    while !*pending {
                        // Wake up now and then to notice shutdown (the Arc dropped).
                        if gc
                            .wake_cv
                            .wait_for(&mut pending, std::time::Duration::from_millis(200))
                            .timed_out()
                        {
                            break;
                        }
                    }
                    if !*pending {
                        drop(pending);
                        drop(gc);
                        continue;
                    }
                    *pending = false;
                }
                let target = gc.issued.load(Ordering::Acquire);
                let failed = sync().is_err();
                gc.synced.send_modify(|s| {
                    if failed {
                        s.failed = true;
                    } else if target > s.upto {
                        s.upto = target;
                    }
                });
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the sync thread: {e}");
        }
        gc
    }

    /// Issues the ticket of a write that has just been applied.
    pub fn ticket(&self) -> u64 {
        self.issued.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Waits until a sync that started after `ticket` was issued finished.
    pub async fn wait(&self, ticket: u64) -> StorageResult<()> {
        let mut rx = self.synced.subscribe();
        {
            let state = *rx.borrow();
            if state.failed {
                return Err(StorageError::Engine("journal sync failed".into()));
            }
            if state.upto >= ticket {
                return Ok(());
            }
        }
        {
            let mut pending = self.wake.lock();
            *pending = true;
            self.wake_cv.notify_one();
        }
        let state = rx
            .wait_for(|s| s.failed || s.upto >= ticket)
            .await
            .map_err(|_| StorageError::Engine("sync thread stopped".into()))?;
        if state.failed {
            return Err(StorageError::Engine("journal sync failed".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writers_share_syncs() {
        let syncs = Arc::new(AtomicUsize::new(0));
        let counter = syncs.clone();
        let gc = GroupCommit::start(Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(5));
            Ok(())
        }));
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
        assert!(n >= 1 && n < 64, "64 writers took {n} syncs");
    }

    #[tokio::test]
    async fn a_failed_sync_fails_the_waiters() {
        let gc = GroupCommit::start(Box::new(|| Err(StorageError::Engine("disk".into()))));
        let t = gc.ticket();
        assert!(gc.wait(t).await.is_err());
    }
}
