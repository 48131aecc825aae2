//! Which server holds each physical partition: the fleet's placement,
//! kept in memory and in the metadata schema's `placement` table.
//!
//! Pure: it answers "which server holds this hash (or partition id)" and
//! turns a batch's [`WriteOp::PutPartition`] / [`WriteOp::DeletePartition`]
//! into a new placement. A new partition inside one that the batch removes
//! (the halves of a split) stays on that partition's server, so a split
//! moves no data; any other new partition goes to the server holding the
//! fewest partitions.

use std::collections::{BTreeMap, HashMap};

use crate::storage::WriteOp;

/// A server's position in the fleet (`--postgres` order).
pub type ServerId = usize;

/// One placed partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub partition: u64,
    pub min: i64,
    pub max: i64,
    pub server: ServerId,
}

/// Every placed partition, by collection and then by start hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    collections: HashMap<u64, BTreeMap<i64, Placed>>,
}

/// A row of the `placement` table to write or delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowChange {
    Put(u64, Placed),
    Delete(u64, u64),
}

impl Placement {
    pub fn from_rows(rows: impl IntoIterator<Item = (u64, Placed)>) -> Placement {
        let mut placement = Placement::default();
        for (collection, placed) in rows {
            placement.insert(collection, placed);
        }
        placement
    }

    /// Places (or re-places) one partition.
    pub fn place(&mut self, collection: u64, placed: Placed) {
        self.insert(collection, placed);
    }

    /// The partitions on `server`, by collection and start hash.
    pub fn on_server(&self, server: ServerId) -> Vec<(u64, Placed)> {
        let mut out: Vec<(u64, Placed)> = self
            .collections
            .iter()
            .flat_map(|(&c, parts)| parts.values().map(move |p| (c, *p)))
            .filter(|(_, p)| p.server == server)
            .collect();
        out.sort_by_key(|(c, p)| (*c, p.min));
        out
    }

    fn insert(&mut self, collection: u64, placed: Placed) {
        self.collections
            .entry(collection)
            .or_default()
            .insert(placed.min, placed);
    }

    /// The partition holding `hash`.
    pub fn of_hash(&self, collection: u64, hash: i64) -> Option<Placed> {
        let parts = self.collections.get(&collection)?;
        let (_, placed) = parts.range(..=hash).next_back()?;
        (hash <= placed.max).then_some(*placed)
    }

    /// The partition with id `partition`.
    pub fn of_partition(&self, collection: u64, partition: u64) -> Option<Placed> {
        self.collections
            .get(&collection)?
            .values()
            .find(|p| p.partition == partition)
            .copied()
    }

    /// The partitions of `collection` that overlap `min..=max`, in hash
    /// order.
    pub fn overlapping(&self, collection: u64, min: i64, max: i64) -> Vec<Placed> {
        let Some(parts) = self.collections.get(&collection) else {
            return Vec::new();
        };
        let first = parts
            .range(..=min)
            .next_back()
            .map_or(min, |(&start, _)| start);
        parts
            .range(first..=max)
            .map(|(_, p)| *p)
            .filter(|p| p.max >= min)
            .collect()
    }

    /// The servers holding any partition of `collection`, in order.
    pub fn servers_of(&self, collection: u64) -> Vec<ServerId> {
        let mut servers: Vec<ServerId> = self
            .collections
            .get(&collection)
            .map(|parts| parts.values().map(|p| p.server).collect())
            .unwrap_or_default();
        servers.sort_unstable();
        servers.dedup();
        servers
    }

    /// Partitions per server, over `servers` servers.
    pub fn load(&self, servers: usize) -> Vec<usize> {
        let mut load = vec![0; servers];
        for placed in self.collections.values().flat_map(|p| p.values()) {
            if let Some(n) = load.get_mut(placed.server) {
                *n += 1;
            }
        }
        load
    }

    /// Forgets every partition of a dropped collection.
    pub fn remove_collection(&mut self, collection: u64) {
        self.collections.remove(&collection);
    }

    /// The placement after the partition changes in `ops`, and the rows
    /// to write for it; `None` when `ops` changes no placement. A new
    /// partition goes to the least loaded server whose `open` is true
    /// (not draining or removed).
    pub fn apply(&self, ops: &[WriteOp], open: &[bool]) -> Option<(Placement, Vec<RowChange>)> {
        let changes = ops.iter().any(|op| {
            matches!(
                op,
                WriteOp::PutPartition { .. } | WriteOp::DeletePartition { .. }
            )
        });
        if !changes {
            return None;
        }
        let mut next = self.clone();
        let mut rows = Vec::new();
        let mut load = self.load(open.len());
        for op in ops {
            match *op {
                WriteOp::PutPartition {
                    collection,
                    partition,
                    min,
                    max,
                } => {
                    let existing = self.of_partition(collection, partition);
                    let server = match existing {
                        Some(placed) => placed.server,
                        None => match self.of_hash(collection, min) {
                            // Inside a partition this batch splits.
                            Some(parent) if max <= parent.max => parent.server,
                            _ => least_loaded(&load, open),
                        },
                    };
                    if let Some(old) = existing {
                        next.remove(collection, old);
                    } else if let Some(n) = load.get_mut(server) {
                        *n += 1;
                    }
                    let placed = Placed {
                        partition,
                        min,
                        max,
                        server,
                    };
                    next.insert(collection, placed);
                    rows.push(RowChange::Put(collection, placed));
                }
                WriteOp::DeletePartition {
                    collection,
                    partition,
                } => {
                    // A half that starts where it did has replaced it already.
                    if let Some(old) = next.of_partition(collection, partition) {
                        next.remove(collection, old);
                    }
                    if let Some(old) = self.of_partition(collection, partition) {
                        if let Some(n) = load.get_mut(old.server) {
                            *n = n.saturating_sub(1);
                        }
                    }
                    rows.push(RowChange::Delete(collection, partition));
                }
                _ => {}
            }
        }
        Some((next, rows))
    }

    fn remove(&mut self, collection: u64, placed: Placed) {
        if let Some(parts) = self.collections.get_mut(&collection) {
            if parts.get(&placed.min) == Some(&placed) {
                parts.remove(&placed.min);
            }
        }
    }
}

/// The open server with the fewest partitions (the first of equals).
pub fn least_loaded(load: &[usize], open: &[bool]) -> ServerId {
    load.iter()
        .enumerate()
        .filter(|&(i, _)| open.get(i).copied().unwrap_or(false))
        .min_by_key(|&(i, n)| (*n, i))
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(collection: u64, partition: u64, min: i64, max: i64) -> WriteOp {
        WriteOp::PutPartition {
            collection,
            partition,
            min,
            max,
        }
    }

    #[test]
    fn new_partitions_spread_over_the_least_loaded_servers() {
        let ops: Vec<WriteOp> = (0..4)
            .map(|i| put(7, i, i as i64 * 100, i as i64 * 100 + 99))
            .collect();
        let (placement, rows) = Placement::default().apply(&ops, &[true; 3]).unwrap();
        let servers: Vec<_> = (0..4)
            .map(|i| placement.of_partition(7, i).unwrap().server)
            .collect();
        assert_eq!(servers, vec![0, 1, 2, 0]);
        assert_eq!(rows.len(), 4);
        assert_eq!(placement.load(3), vec![2, 1, 1]);
        assert_eq!(placement.of_hash(7, 150).unwrap().partition, 1);
        assert_eq!(placement.of_hash(7, 400), None);
        assert_eq!(placement.servers_of(7), vec![0, 1, 2]);
    }

    #[test]
    fn the_halves_of_a_split_stay_on_their_server() {
        let start = [put(1, 0, i64::MIN, -1), put(1, 1, 0, i64::MAX)];
        let (placement, _) = Placement::default().apply(&start, &[true; 2]).unwrap();
        assert_eq!(placement.of_partition(1, 1).unwrap().server, 1);
        let split = [
            put(1, 2, 0, 999),
            put(1, 3, 1000, i64::MAX),
            WriteOp::DeletePartition {
                collection: 1,
                partition: 1,
            },
        ];
        let (after, rows) = placement.apply(&split, &[true; 2]).unwrap();
        assert_eq!(after.of_hash(1, 5).unwrap(), {
            Placed {
                partition: 2,
                min: 0,
                max: 999,
                server: 1,
            }
        });
        assert_eq!(after.of_hash(1, 5000).unwrap().server, 1);
        assert_eq!(after.of_partition(1, 1), None);
        assert_eq!(rows.last(), Some(&RowChange::Delete(1, 1)));
        assert_eq!(after.overlapping(1, -5, 2000).len(), 3);
        assert_eq!(after.overlapping(1, 1000, 1000).len(), 1);
    }

    #[test]
    fn a_batch_without_partition_changes_changes_nothing() {
        let ops = [WriteOp::DeleteMeta(
            crate::storage::CatalogKey::FormatVersion,
        )];
        assert!(Placement::default().apply(&ops, &[true; 3]).is_none());
    }
}
