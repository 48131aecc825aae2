//! Moving a partition to another server while it is read and written,
//! and the balancer that evens the number of partitions per server.
//!
//! A move first marks the partition as moving on the metadata server,
//! under the collection's lock among the gateways: every writer takes that
//! lock, learns there which partitions move, and its batch notes the keys
//! it writes to one in the `moved_keys` table of the source server, in the
//! same transaction ([`moved_key`]), whichever gateway it runs on. The move
//! copies the partition's rows to the new server page by page, then copies
//! the noted keys again, from the source, until few are left; takes the
//! collection's lock for the last round and switches the placement with a
//! catalog change, so every gateway writes the next batch on the new
//! server. The source keeps its rows for [`CLEANUP_DELAY`], for reads that
//! started before the switch, and then deletes them. Reads never see the
//! copies early or the leftovers late: each server is asked only for the
//! partitions placed on it ([`super::view`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::placement::{least_loaded, Placed, ServerId};
use super::sql::{MovedKey, ServerBatch};
use super::Fleet;
use crate::storage::{IndexEntryKey, RecordKey, StorageError, StorageResult, Usage, WriteOp};

/// How long a moved partition's rows stay on the server it left.
pub const CLEANUP_DELAY: Duration = Duration::from_secs(60);

/// Rows copied per transaction.
const COPY_PAGE: i64 = 1000;

/// How often the balancer looks at the placement.
pub const BALANCE_INTERVAL: Duration = Duration::from_secs(10);

/// Keys written to a partition while it moves.
#[derive(Debug, Default)]
struct Dirty {
    records: BTreeSet<(i64, Vec<u8>)>,
    entries: BTreeSet<(i64, Vec<u8>)>,
    usage: BTreeSet<i64>,
    total: bool,
}

impl Dirty {
    fn len(&self) -> usize {
        self.records.len() + self.entries.len() + self.usage.len() + usize::from(self.total)
    }

    fn from_keys(keys: Vec<(i16, i64, Vec<u8>)>) -> Dirty {
        let mut dirty = Dirty::default();
        for (kind, hash, key) in keys {
            match kind {
                MovedKey::RECORD => {
                    dirty.records.insert((hash, key));
                }
                MovedKey::ENTRY => {
                    dirty.entries.insert((hash, key));
                }
                MovedKey::USAGE => {
                    dirty.usage.insert(hash);
                }
                _ => dirty.total = true,
            }
        }
        dirty
    }
}

/// The key `op` writes to `placed`, a partition of `collection` being
/// moved, if it writes one.
pub fn moved_key(op: &WriteOp, collection: u64, placed: &Placed) -> Option<MovedKey> {
    let mine = |c: u64, hash: i64| c == collection && (placed.min..=placed.max).contains(&hash);
    let (kind, hash, key) = match op {
        WriteOp::PutRecord(k, _) | WriteOp::DeleteRecord(k) if mine(k.collection, k.hash) => {
            (MovedKey::RECORD, k.hash, k.id.clone())
        }
        WriteOp::PutIndexEntry(k, _) | WriteOp::DeleteIndexEntry(k)
            if k.collection == collection && k.partition == placed.min =>
        {
            (MovedKey::ENTRY, k.index as i64, k.entry.clone())
        }
        WriteOp::PutUsage {
            collection: c,
            hash,
            ..
        }
        | WriteOp::DeleteUsage {
            collection: c,
            hash,
        } if mine(*c, *hash) => (MovedKey::USAGE, *hash, Vec::new()),
        WriteOp::PutPartitionTotal {
            collection: c,
            partition,
            ..
        }
        | WriteOp::DeletePartitionTotal {
            collection: c,
            partition,
        } if *c == collection && *partition == placed.partition => (MovedKey::TOTAL, 0, Vec::new()),
        _ => return None,
    };
    Some(MovedKey {
        collection,
        partition: placed.partition,
        kind,
        hash,
        key,
    })
}

impl Fleet {
    /// Moves partition `partition` of `collection` to server `to`.
    pub async fn move_partition(
        self: &Arc<Self>,
        collection: u64,
        partition: u64,
        to: ServerId,
    ) -> StorageResult<()> {
        let _one_at_a_time = self.moving.lock().await;
        if !self.open().get(to).copied().unwrap_or(false) {
            return Err(StorageError::Format(format!(
                "server {to} takes no partitions: it is being removed"
            )));
        }
        let Some(placed) = self.placement().of_partition(collection, partition) else {
            return Err(StorageError::Format(format!(
                "collection {collection} has no partition {partition}"
            )));
        };
        if placed.server == to {
            return Ok(());
        }
        // Under the collection's lock no writer is between its reads and
        // its commit, and every later one sees the move and notes its keys.
        {
            let _locked = self.lock_collection(collection).await?;
            let meta = self.meta().client().await?;
            self.sql
                .set_moving(&meta, collection, partition, true)
                .await?;
        }
        let moved = self.copy_and_switch(collection, placed, to).await;
        if let Err(e) = moved {
            if let Ok(meta) = self.meta().client().await {
                let _ = self
                    .sql
                    .set_moving(&meta, collection, partition, false)
                    .await;
            }
            // The copies on `to` are not placed there: nothing reads them.
            if let Ok(client) = self.server(to)?.client().await {
                let _ = self.sql.clear_partition(&client, collection, placed).await;
            }
            if let Ok(client) = self.server(placed.server)?.client().await {
                let _ = self
                    .sql
                    .take_moved_keys(&client, collection, partition)
                    .await;
            }
            return Err(e);
        }
        tracing::info!(
            "moved partition p{partition} of collection {collection} from {} to {}",
            self.server(placed.server)?.name,
            self.server(to)?.name
        );
        let fleet = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(CLEANUP_DELAY).await;
            fleet.clean_moved(collection, placed).await;
        });
        Ok(())
    }

    /// The keys written to the moving partition since the last call.
    async fn take_dirty(&self, collection: u64, placed: Placed) -> StorageResult<Dirty> {
        let source = self.server(placed.server)?;
        let client = source.client().await?;
        let keys = self
            .sql
            .take_moved_keys(&client, collection, placed.partition)
            .await
            .map_err(|e| super::at(&source, e))?;
        Ok(Dirty::from_keys(keys))
    }

    async fn copy_and_switch(
        self: &Arc<Self>,
        collection: u64,
        placed: Placed,
        to: ServerId,
    ) -> StorageResult<()> {
        self.copy_all(collection, placed, to).await?;
        for _ in 0..5 {
            let dirty = self.take_dirty(collection, placed).await?;
            let left = dirty.len();
            self.catch_up(collection, placed, dirty, to).await?;
            if left < 64 {
                break;
            }
        }
        // Writers of the collection wait, on every gateway, for the last
        // round and the switch.
        let _writes_wait = self.lock_collection(collection).await?;
        let dirty = self.take_dirty(collection, placed).await?;
        self.catch_up(collection, placed, dirty, to).await?;
        let _placing = self.placing.lock().await;
        if self.placement().of_partition(collection, placed.partition) != Some(placed) {
            return Err(StorageError::Conflict(
                "the partition split or was dropped while it moved; move it again".into(),
            ));
        }
        let moved = Placed {
            server: to,
            ..placed
        };
        // A placement change is a catalog change: other gateways see the
        // version move and reload the placement.
        let mut shares: Vec<ServerBatch> = (0..self.servers().len())
            .map(|_| ServerBatch::default())
            .collect();
        shares[0].place(collection, placed.partition, Some(moved));
        shares[0].moved_away(collection, placed.partition);
        self.commit_shares(shares, true).await?;
        let mut next = (*self.placement()).clone();
        next.place(collection, moved);
        *self.placement.write() = Arc::new(next);
        Ok(())
    }

    /// Copies every row of the partition from its server to `to`.
    async fn copy_all(&self, collection: u64, placed: Placed, to: ServerId) -> StorageResult<()> {
        let source = self.server(placed.server)?;
        let from = source.client().await?;
        let mut after: Option<(i64, Vec<u8>)> = None;
        loop {
            let q = self.sql.records_page(
                collection, placed.min, placed.max, &None, &after, false, COPY_PAGE,
            );
            let rows = q.run(&from).await?;
            let mut share = ServerBatch::default();
            for r in &rows {
                let key = RecordKey::new(collection, r.get(0), r.get(1));
                after = Some((key.hash, key.id.clone()));
                share.push(WriteOp::PutRecord(key, r.get(2)));
            }
            if !share.is_empty() {
                self.write_one(to, share).await?;
            }
            if (rows.len() as i64) < COPY_PAGE {
                break;
            }
        }
        let mut after: Option<(i64, Vec<u8>)> = None;
        loop {
            let q = self
                .sql
                .partition_entries_page(collection, placed.min, &after, COPY_PAGE);
            let rows = q.run(&from).await?;
            let mut share = ServerBatch::default();
            for r in &rows {
                let (idx, entry): (i64, Vec<u8>) = (r.get(0), r.get(1));
                after = Some((idx, entry.clone()));
                let key = IndexEntryKey {
                    collection,
                    index: idx as u32,
                    partition: placed.min,
                    entry,
                };
                share.push(WriteOp::PutIndexEntry(key, r.get(2)));
            }
            if !share.is_empty() {
                self.write_one(to, share).await?;
            }
            if (rows.len() as i64) < COPY_PAGE {
                break;
            }
        }
        let mut after = None;
        loop {
            let q = self
                .sql
                .usage_page(collection, placed.min, placed.max, after, COPY_PAGE);
            let rows = q.run(&from).await?;
            let mut share = ServerBatch::default();
            for r in &rows {
                let hash: i64 = r.get(0);
                after = Some(hash);
                share.push(WriteOp::PutUsage {
                    collection,
                    hash,
                    usage: usage(r.get(1), r.get(2)),
                });
            }
            if !share.is_empty() {
                self.write_one(to, share).await?;
            }
            if (rows.len() as i64) < COPY_PAGE {
                break;
            }
        }
        let totals = Dirty {
            total: true,
            ..Dirty::default()
        };
        drop(from);
        self.catch_up(collection, placed, totals, to).await
    }

    /// Copies the keys in `dirty` again, as they are on the source now.
    async fn catch_up(
        &self,
        collection: u64,
        placed: Placed,
        dirty: Dirty,
        to: ServerId,
    ) -> StorageResult<()> {
        if dirty.len() == 0 {
            return Ok(());
        }
        let from = self.server(placed.server)?.client().await?;
        let sql = &self.sql;
        let mut share = ServerBatch::default();
        for (hash, id) in dirty.records {
            let key = RecordKey::new(collection, hash, id);
            share.push(match sql.record(&from, collection, hash, &key.id).await? {
                Some(doc) => WriteOp::PutRecord(key, doc),
                None => WriteOp::DeleteRecord(key),
            });
        }
        for (idx, entry) in dirty.entries {
            let found = sql
                .entry(&from, collection, idx, placed.min, &entry)
                .await?;
            let key = IndexEntryKey {
                collection,
                index: idx as u32,
                partition: placed.min,
                entry,
            };
            share.push(match found {
                Some(value) => WriteOp::PutIndexEntry(key, value),
                None => WriteOp::DeleteIndexEntry(key),
            });
        }
        for hash in dirty.usage {
            share.push(match sql.usage(&from, collection, hash).await? {
                Some(usage) => WriteOp::PutUsage {
                    collection,
                    hash,
                    usage,
                },
                None => WriteOp::DeleteUsage { collection, hash },
            });
        }
        if dirty.total {
            let partition = placed.partition;
            match sql.partition_total(&from, collection, partition).await? {
                Some(usage) => share.set_total(collection, partition, usage),
                None => share.push(WriteOp::DeletePartitionTotal {
                    collection,
                    partition,
                }),
            }
        }
        drop(from);
        self.write_one(to, share).await
    }

    /// Deletes what a moved partition left on its old server, unless a
    /// partition placed there now holds some of those hashes.
    async fn clean_moved(&self, collection: u64, left: Placed) {
        let placement = self.placement();
        if placement
            .overlapping(collection, left.min, left.max)
            .iter()
            .any(|p| p.server == left.server)
        {
            return;
        }
        let Ok(server) = self.server(left.server) else {
            return;
        };
        let cleaned = match server.client().await {
            Ok(client) => self.sql.clear_partition(&client, collection, left).await,
            Err(e) => Err(e),
        };
        if let Err(e) = cleaned {
            tracing::warn!(
                "the rows partition p{} of collection {collection} left on {} stay there: {e}",
                left.partition,
                server.name
            );
        }
    }

    /// One balancing step: a partition of a draining server moves to the
    /// least loaded open one; otherwise, when the most loaded open server
    /// holds at least two partitions more than the least loaded, one of
    /// them moves over.
    pub async fn balance_once(self: &Arc<Self>) -> StorageResult<bool> {
        let placement = self.placement();
        let open = self.open();
        let load = placement.load(open.len());
        let least = least_loaded(&load, &open);
        if !open.get(least).copied().unwrap_or(false) {
            return Ok(false);
        }
        let draining = (0..load.len()).find(|&i| !open[i] && load[i] > 0);
        let from = match draining {
            Some(server) => server,
            None => {
                let most = (0..load.len())
                    .filter(|&i| open[i])
                    .max_by_key(|&i| (load[i], std::cmp::Reverse(i)));
                match most {
                    Some(most) if load[most] >= load[least] + 2 => most,
                    _ => return Ok(false),
                }
            }
        };
        let Some((collection, placed)) = placement.on_server(from).into_iter().next() else {
            return Ok(false);
        };
        self.move_partition(collection, placed.partition, least)
            .await?;
        Ok(true)
    }
}

fn usage(count: i64, bytes: i64) -> Usage {
    Usage {
        count: count.max(0) as u64,
        bytes: bytes.max(0) as u64,
    }
}
