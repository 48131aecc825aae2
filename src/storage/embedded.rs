//! The embedded backend: one `fjall` database in the data directory.
//!
//! fjall is an LSM-tree engine with a write-ahead journal: a write batch
//! is one journal append (cheap, sequential), and durability is a journal
//! sync that [`GroupCommit`] shares between concurrent writers. Recovery
//! replays the journal, so a batch is either wholly present after a crash
//! or wholly absent.
//!
//! A full disk: fjall fails the write that found it and then takes no
//! more writes ("poisoned"), since a journal write that failed half-way
//! may have left a torn record. Reads go on; every write, and every wait
//! for durability, fails with [`StorageError::DiskFull`] (answered as
//! `OutOfDiskSpace`) until the server restarts with space free, when the
//! journal replays up to the last whole batch. See docs/ROBUSTNESS.md.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable, Snapshot};
use futures::future::BoxFuture;

use super::durability::GroupCommit;
use super::kv::{KvEngine, KvOp, KvRead, KvStore, ScanIter, Space, ValueFilter};
use super::layout::KeyRange;
use super::{CommitSeq, StorageError, StorageResult};

/// Size at which a memtable is sealed and flushed to disk.
const MEMTABLE_BYTES: u64 = 32 * 1024 * 1024;

fn engine_err(e: fjall::Error) -> StorageError {
    StorageError::Engine(e.to_string())
}

/// Whether `e`, or an error it wraps, is the operating system's "no space
/// left on device" (or over quota).
fn is_disk_full(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(err) = cause {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            let raw = io.raw_os_error();
            if io.kind() == std::io::ErrorKind::StorageFull
                || raw == Some(rustix::io::Errno::NOSPC.raw_os_error())
                || raw == Some(rustix::io::Errno::DQUOT.raw_os_error())
            {
                return true;
            }
        }
        cause = err.source();
    }
    false
}

/// The answer to every write once the disk has filled.
fn disk_full(dir: &Path) -> StorageError {
    StorageError::DiskFull(format!(
        "the disk holding the data directory {} is full: the storage engine takes no more \
         writes. Acknowledged writes are kept; free space, then restart the server",
        dir.display()
    ))
}

/// Turns the engine's write errors into storage errors, remembering a
/// full disk: the engine answers every later write with a bare
/// "poisoned", and a flush that filled the disk in the background
/// reports nothing else.
#[derive(Clone)]
struct WriteErrors {
    dir: PathBuf,
    disk_full: Arc<AtomicBool>,
    /// Test hook: writes fail as on a full disk once the batches handed
    /// to the engine passed this many bytes of keys and values.
    full_after: Option<Arc<(u64, AtomicU64)>>,
}

impl WriteErrors {
    fn map(&self, e: fjall::Error) -> StorageError {
        let full = is_disk_full(&e)
            || (matches!(e, fjall::Error::Poisoned)
                && (self.disk_full.load(Ordering::Acquire) || self.no_space_left()));
        if full {
            if !self.disk_full.swap(true, Ordering::AcqRel) {
                tracing::error!("{e}: the disk holding {} is full", self.dir.display());
            }
            return disk_full(&self.dir);
        }
        if matches!(e, fjall::Error::Poisoned) {
            return StorageError::Engine(
                "the storage engine takes no more writes after an I/O error (see the log); \
                 restart the server"
                    .into(),
            );
        }
        engine_err(e)
    }

    /// Whether the file system of the data directory has (almost) no
    /// space left for an unprivileged writer.
    fn no_space_left(&self) -> bool {
        rustix::fs::statvfs(&self.dir)
            .map(|s| s.f_bavail.saturating_mul(s.f_frsize) < 1 << 20)
            .unwrap_or(false)
    }

    /// Fails a batch of `bytes` as a full disk would, when the test hook
    /// says so or the disk filled before.
    fn check(&self, bytes: u64) -> StorageResult<()> {
        if let Some(hook) = &self.full_after {
            let (limit, written) = &**hook;
            if written
                .fetch_add(bytes, Ordering::AcqRel)
                .saturating_add(bytes)
                > *limit
            {
                self.disk_full.store(true, Ordering::Release);
            }
            if self.disk_full.load(Ordering::Acquire) {
                return Err(disk_full(&self.dir));
            }
        }
        Ok(())
    }
}

/// The journal file fjall is appending to, opened for syncing.
///
/// fjall names journals `<n>.jnl` and appends to the highest-numbered one;
/// when it rotates to a new file it first syncs the old one completely.
/// So after the buffered bytes are handed to the OS, syncing the newest
/// journal file makes every earlier write durable.
struct ActiveJournal {
    dir: PathBuf,
    open: Option<(u64, File)>,
}

impl ActiveJournal {
    fn new(dir: PathBuf) -> ActiveJournal {
        ActiveJournal { dir, open: None }
    }

    fn newest(&self) -> std::io::Result<Option<u64>> {
        let mut newest = None;
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".jnl"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            newest = newest.max(Some(id));
        }
        Ok(newest)
    }

    fn sync(&mut self) -> std::io::Result<()> {
        let newest = self
            .newest()?
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no journal file"))?;
        let file = match &self.open {
            Some((id, file)) if *id == newest => file,
            _ => {
                let file = File::open(self.dir.join(format!("{newest}.jnl")))?;
                &self.open.insert((newest, file)).1
            }
        };
        file.sync_data()
    }
}

/// The engine's keyspaces, one per [`Space`].
#[derive(Clone)]
struct Spaces {
    records: Keyspace,
    catalog: Keyspace,
    index: Keyspace,
    usage: Keyspace,
    changes: Keyspace,
}

impl Spaces {
    fn get(&self, space: Space) -> &Keyspace {
        match space {
            Space::Records => &self.records,
            Space::Catalog => &self.catalog,
            Space::Index => &self.index,
            Space::Usage => &self.usage,
            Space::Changes => &self.changes,
        }
    }
}

pub struct EmbeddedEngine {
    db: Database,
    spaces: Spaces,
    group: Arc<GroupCommit>,
    errors: WriteErrors,
}

/// A point-in-time view of every space.
struct EmbeddedSnapshot {
    snapshot: Snapshot,
    spaces: Spaces,
}

/// Owned `(key, value)` pairs. A fjall iterator holds its own snapshot,
/// so it reads one point in time however long it is kept.
fn owned(
    iter: impl Iterator<Item = fjall::Guard> + Send + 'static,
) -> impl Iterator<Item = StorageResult<(Vec<u8>, Vec<u8>)>> + Send + 'static {
    iter.map(|guard| {
        let (k, v) = guard.into_inner().map_err(engine_err)?;
        Ok((k.to_vec(), v.to_vec()))
    })
}

/// [`owned`] pairs whose value passes `keep`, tested before the copy.
fn owned_where(
    iter: impl Iterator<Item = fjall::Guard> + Send + 'static,
    keep: ValueFilter,
) -> impl Iterator<Item = StorageResult<(Vec<u8>, Vec<u8>)>> + Send + 'static {
    iter.filter_map(move |guard| match guard.into_inner() {
        Err(e) => Some(Err(engine_err(e))),
        Ok((k, v)) => keep(&v).then(|| Ok((k.to_vec(), v.to_vec()))),
    })
}

/// A scan, backwards when `reverse`, of the pairs `keep` passes (all
/// without it).
fn scan_iter<I>(iter: I, reverse: bool, keep: Option<ValueFilter>) -> ScanIter
where
    I: DoubleEndedIterator<Item = fjall::Guard> + Send + 'static,
{
    match (reverse, keep) {
        (false, None) => Box::new(owned(iter)),
        (true, None) => Box::new(owned(iter.rev())),
        (false, Some(keep)) => Box::new(owned_where(iter, keep)),
        (true, Some(keep)) => Box::new(owned_where(iter.rev(), keep)),
    }
}

impl KvRead for EmbeddedSnapshot {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        Ok(self
            .snapshot
            .get(self.spaces.get(space), key)
            .map_err(engine_err)?
            .map(|v| v.to_vec()))
    }

    fn scan(&self, space: Space, range: KeyRange, reverse: bool) -> ScanIter {
        self.scan_with(space, range, reverse, None)
    }

    fn scan_where(
        &self,
        space: Space,
        range: KeyRange,
        reverse: bool,
        keep: ValueFilter,
    ) -> ScanIter {
        self.scan_with(space, range, reverse, Some(keep))
    }
}

impl EmbeddedSnapshot {
    fn scan_with(
        &self,
        space: Space,
        range: KeyRange,
        reverse: bool,
        keep: Option<ValueFilter>,
    ) -> ScanIter {
        let iter = self
            .snapshot
            .range::<Vec<u8>, _>(self.spaces.get(space), range);
        scan_iter(iter, reverse, keep)
    }
}

impl KvRead for Spaces {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        Ok(Spaces::get(self, space)
            .get(key)
            .map_err(engine_err)?
            .map(|v| v.to_vec()))
    }

    fn scan(&self, space: Space, range: KeyRange, reverse: bool) -> ScanIter {
        scan_iter(
            Spaces::get(self, space).range::<Vec<u8>, _>(range),
            reverse,
            None,
        )
    }

    fn scan_where(
        &self,
        space: Space,
        range: KeyRange,
        reverse: bool,
        keep: ValueFilter,
    ) -> ScanIter {
        let iter = Spaces::get(self, space).range::<Vec<u8>, _>(range);
        scan_iter(iter, reverse, Some(keep))
    }
}

impl EmbeddedEngine {
    /// Opens (or creates) the store in `dir`, recovering from the journal.
    /// `full_after` is a test hook: writes fail as on a full disk once
    /// that many bytes were written.
    pub fn open_store(
        dir: &Path,
        cache_bytes: u64,
        commit_interval: Duration,
        full_after: Option<u64>,
    ) -> StorageResult<Arc<KvStore>> {
        Ok(KvStore::new(EmbeddedEngine::open_with(
            dir,
            cache_bytes,
            commit_interval,
            full_after,
        )?))
    }

    /// Opens (or creates) the database in `dir`, recovering from the
    /// journal. Writes nobody waits to be durable are synced within
    /// `commit_interval`.
    pub fn open(
        dir: &Path,
        cache_bytes: u64,
        commit_interval: Duration,
    ) -> StorageResult<Arc<EmbeddedEngine>> {
        Self::open_with(dir, cache_bytes, commit_interval, None)
    }

    fn open_with(
        dir: &Path,
        cache_bytes: u64,
        commit_interval: Duration,
        full_after: Option<u64>,
    ) -> StorageResult<Arc<EmbeddedEngine>> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StorageError::Engine(format!("cannot create {}: {e}", dir.display())))?;
        let db = Database::builder(dir.join("engine"))
            .cache_size(cache_bytes)
            // Durability is ours: every acknowledged write waits for a sync.
            .manual_journal_persist(true)
            .open()
            .map_err(engine_err)?;
        let records = db
            .keyspace("records", || {
                KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES)
            })
            .map_err(engine_err)?;
        let catalog = db
            .keyspace("catalog", KeyspaceCreateOptions::default)
            .map_err(engine_err)?;
        let index = db
            .keyspace("index", || {
                KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES)
            })
            .map_err(engine_err)?;
        let usage = db
            .keyspace("usage", KeyspaceCreateOptions::default)
            .map_err(engine_err)?;
        let changes = db
            .keyspace("changes", || {
                KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES)
            })
            .map_err(engine_err)?;
        let sync_db = db.clone();
        let journal = Mutex::new(ActiveJournal::new(dir.join("engine")));
        let errors = WriteErrors {
            dir: dir.to_path_buf(),
            disk_full: Arc::default(),
            full_after: full_after.map(|n| Arc::new((n, AtomicU64::new(0)))),
        };
        let sync_errors = errors.clone();
        let group = GroupCommit::start(
            Box::new(move || {
                // Hand the journal's buffered bytes to the OS (brief, under
                // fjall's journal lock), then sync the file outside that lock
                // so writers keep appending while the disk works.
                sync_db
                    .persist(PersistMode::Buffer)
                    .map_err(|e| sync_errors.map(e))?;
                match journal.lock().sync() {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        tracing::warn!(
                            "journal sync by file failed ({e}); syncing through the engine"
                        );
                        sync_db
                            .persist(PersistMode::SyncData)
                            .map_err(|e| sync_errors.map(e))
                    }
                }
            }),
            commit_interval,
        );
        Ok(Arc::new(EmbeddedEngine {
            db,
            spaces: Spaces {
                records,
                catalog,
                index,
                usage,
                changes,
            },
            group,
            errors,
        }))
    }
}

impl KvRead for EmbeddedEngine {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        KvRead::get(&self.spaces, space, key)
    }

    fn scan(&self, space: Space, range: KeyRange, reverse: bool) -> ScanIter {
        KvRead::scan(&self.spaces, space, range, reverse)
    }

    fn scan_where(
        &self,
        space: Space,
        range: KeyRange,
        reverse: bool,
        keep: ValueFilter,
    ) -> ScanIter {
        KvRead::scan_where(&self.spaces, space, range, reverse, keep)
    }
}

impl KvEngine for EmbeddedEngine {
    fn snapshot(&self) -> Arc<dyn KvRead> {
        Arc::new(EmbeddedSnapshot {
            snapshot: self.db.snapshot(),
            spaces: self.spaces.clone(),
        })
    }

    fn live(&self) -> Arc<dyn KvRead> {
        Arc::new(self.spaces.clone())
    }

    fn write(&self, ops: Vec<KvOp>) -> StorageResult<CommitSeq> {
        let bytes: usize = ops
            .iter()
            .map(|op| match op {
                KvOp::Put { key, value, .. } => key.len() + value.len(),
                KvOp::Delete { key, .. } => key.len(),
            })
            .sum();
        self.errors.check(bytes as u64)?;
        let mut wb = self.db.batch();
        for op in ops {
            match op {
                KvOp::Put { space, key, value } => wb.insert(self.spaces.get(space), key, value),
                KvOp::Delete { space, key } => wb.remove(self.spaces.get(space), key),
            }
        }
        wb.commit().map_err(|e| self.errors.map(e))?;
        Ok(self.group.ticket())
    }

    fn durable(&self, seq: CommitSeq) -> BoxFuture<'static, StorageResult<()>> {
        let group = self.group.clone();
        Box::pin(async move { group.wait(seq).await })
    }

    /// Hands the journal's buffered bytes, this commit's among them, to
    /// the OS; the group commit syncs them within its interval.
    fn written(&self, _seq: CommitSeq) -> BoxFuture<'static, StorageResult<()>> {
        let flushed = self
            .db
            .persist(PersistMode::Buffer)
            .map_err(|e| self.errors.map(e));
        Box::pin(async move { flushed })
    }

    fn disk_bytes(&self) -> u64 {
        self.db.disk_space().unwrap_or(0)
    }

    fn space_bytes(&self, space: Space) -> u64 {
        self.spaces.get(space).disk_space()
    }

    fn sync_stats(&self) -> Option<super::durability::SyncStats> {
        Some(self.group.stats())
    }

    fn close(&self) -> StorageResult<()> {
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.errors.map(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Bound;

    fn put(space: Space, k: &[u8], v: &[u8]) -> KvOp {
        KvOp::Put {
            space,
            key: k.to_vec(),
            value: v.to_vec(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = EmbeddedEngine::open(dir.path(), 1 << 20, Duration::from_millis(100)).unwrap();
            let seq = e
                .write(vec![
                    put(Space::Records, b"k1", b"v1"),
                    put(Space::Catalog, b"c", b"m"),
                    put(Space::Usage, b"u", b"1"),
                ])
                .unwrap();
            e.durable(seq).await.unwrap();
        }
        let e = EmbeddedEngine::open(dir.path(), 1 << 20, Duration::from_millis(100)).unwrap();
        assert_eq!(
            KvRead::get(&*e, Space::Records, b"k1").unwrap(),
            Some(b"v1".to_vec())
        );
        assert_eq!(
            KvRead::get(&*e, Space::Catalog, b"c").unwrap(),
            Some(b"m".to_vec())
        );
        assert_eq!(
            KvRead::get(&*e, Space::Usage, b"u").unwrap(),
            Some(b"1".to_vec())
        );
        assert_eq!(KvRead::get(&*e, Space::Records, b"c").unwrap(), None);
    }

    #[test]
    fn a_full_disk_is_told_from_other_io_errors() {
        let full = std::io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error());
        assert!(is_disk_full(&fjall::Error::Io(full)));
        let quota = std::io::Error::from_raw_os_error(rustix::io::Errno::DQUOT.raw_os_error());
        assert!(is_disk_full(&fjall::Error::Io(quota)));
        let other = std::io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error());
        assert!(!is_disk_full(&fjall::Error::Io(other)));
        assert!(!is_disk_full(&fjall::Error::Poisoned));
    }

    /// The hook fails writes as a full disk does: the batch that passes
    /// the limit is not applied, nor is any after it; what came before
    /// survives a reopen.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_disk_full_hook_fails_every_write_after_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = EmbeddedEngine::open_with(
                dir.path(),
                1 << 20,
                Duration::from_millis(100),
                Some(100),
            )
            .unwrap();
            let seq = e.write(vec![put(Space::Records, b"k1", b"v1")]).unwrap();
            e.durable(seq).await.unwrap();
            let big = put(Space::Records, b"k2", &[7u8; 200]);
            assert!(matches!(e.write(vec![big]), Err(StorageError::DiskFull(_))));
            let small = put(Space::Records, b"k3", b"v3");
            assert!(matches!(
                e.write(vec![small]),
                Err(StorageError::DiskFull(_))
            ));
            assert_eq!(
                KvRead::get(&*e, Space::Records, b"k1").unwrap(),
                Some(b"v1".to_vec())
            );
        }
        let e = EmbeddedEngine::open(dir.path(), 1 << 20, Duration::from_millis(100)).unwrap();
        assert_eq!(
            KvRead::get(&*e, Space::Records, b"k1").unwrap(),
            Some(b"v1".to_vec())
        );
        assert_eq!(KvRead::get(&*e, Space::Records, b"k2").unwrap(), None);
        assert_eq!(KvRead::get(&*e, Space::Records, b"k3").unwrap(), None);
        e.write(vec![put(Space::Records, b"k4", b"v4")]).unwrap();
    }

    #[test]
    fn filtered_scans_skip_values_in_the_engine() {
        let dir = tempfile::tempdir().unwrap();
        let e = EmbeddedEngine::open(dir.path(), 1 << 20, Duration::from_millis(100)).unwrap();
        let ops = [
            (b"k1", b"keep"),
            (b"k2", b"drop"),
            (b"k3", b"keep"),
            (b"k4", b"drop"),
        ]
        .into_iter()
        .map(|(k, v)| put(Space::Records, k, v))
        .collect();
        e.write(ops).unwrap();
        let keep: ValueFilter = Arc::new(|v: &[u8]| v == b"keep");
        let all = (Bound::Unbounded, Bound::Unbounded);
        let keys = |read: &dyn KvRead, reverse: bool| -> Vec<Vec<u8>> {
            read.scan_where(Space::Records, all.clone(), reverse, keep.clone())
                .map(|r| r.unwrap().0)
                .collect()
        };
        assert_eq!(keys(&*e, false), vec![b"k1".to_vec(), b"k3".to_vec()]);
        assert_eq!(keys(&*e, true), vec![b"k3".to_vec(), b"k1".to_vec()]);
        assert_eq!(
            keys(&*e.snapshot(), false),
            vec![b"k1".to_vec(), b"k3".to_vec()]
        );
        assert_eq!(keys(&*e.live(), true), vec![b"k3".to_vec(), b"k1".to_vec()]);
    }

    #[test]
    fn scans_are_ordered_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let e = EmbeddedEngine::open(dir.path(), 1 << 20, Duration::from_millis(100)).unwrap();
        let ops = [b"a3", b"a1", b"b1", b"a2"]
            .into_iter()
            .map(|k| put(Space::Records, k, b""))
            .collect();
        e.write(ops).unwrap();
        let keys = |range: KeyRange, reverse: bool| -> Vec<Vec<u8>> {
            KvRead::scan(&*e, Space::Records, range, reverse)
                .map(|r| r.unwrap().0)
                .collect()
        };
        assert_eq!(
            keys(
                (
                    Bound::Included(b"a".to_vec()),
                    Bound::Excluded(b"b".to_vec())
                ),
                false
            ),
            vec![b"a1".to_vec(), b"a2".to_vec(), b"a3".to_vec()]
        );
        assert_eq!(
            keys((Bound::Unbounded, Bound::Excluded(b"b".to_vec())), true),
            vec![b"a3".to_vec(), b"a2".to_vec(), b"a1".to_vec()]
        );
        let snapshot = e.snapshot();
        e.write(vec![put(Space::Records, b"a0", b"")]).unwrap();
        assert_eq!(
            snapshot
                .scan(Space::Records, (Bound::Unbounded, Bound::Unbounded), false)
                .count(),
            4
        );
        assert_eq!(
            e.live()
                .scan(Space::Records, (Bound::Unbounded, Bound::Unbounded), false)
                .count(),
            5
        );
    }
}
