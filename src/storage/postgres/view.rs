//! Reads of the PostgreSQL fleet: each asks the servers that hold the
//! partitions it covers, in pages, and merges their answers in key order.
//!
//! A read sees each server's latest committed state when it reaches that
//! server (PostgreSQL's read committed), not one snapshot of the whole
//! fleet: a fan-out reads each partition at its own moment, as a mongos
//! with read concern `local` does. A batch within one server is seen
//! wholly or not at all.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use futures::future::join_all;
use futures::stream::{self, StreamExt};

use super::placement::ServerId;
use super::sql::Query;
use super::{spawn_on, Fleet};
use crate::storage::{
    IndexEntryKey, IndexScan, RecordKey, RecordScan, SharedView, StorageError, StorageResult,
    StoreFuture, StoreStream, Usage, View,
};

/// Rows a page asks for at first; pages double up to [`MAX_PAGE`].
const FIRST_PAGE: i64 = 64;
const MAX_PAGE: i64 = 4096;

pub struct PgView {
    fleet: Arc<Fleet>,
    handle: tokio::runtime::Handle,
}

impl PgView {
    pub fn shared(fleet: Arc<Fleet>, handle: tokio::runtime::Handle) -> SharedView {
        Arc::new(PgView { fleet, handle })
    }

    /// Pages of `make(after, n)` on `server`, decoded by `row`; `after`
    /// is the last row read, for the next page. Stops after `limit` rows.
    fn paged<T, F, R>(
        &self,
        server: ServerId,
        make: F,
        row: R,
        limit: Option<usize>,
    ) -> StoreStream<T>
    where
        T: Clone + Send + 'static,
        F: Fn(&Option<T>, i64) -> Query + Send + Sync + 'static,
        R: Fn(&tokio_postgres::Row) -> StorageResult<T> + Send + Sync + 'static,
    {
        struct State<T> {
            after: Option<T>,
            rows: VecDeque<T>,
            page: i64,
            left: Option<usize>,
            done: bool,
        }
        let fleet = self.fleet.clone();
        let handle = self.handle.clone();
        let make = Arc::new(make);
        let row = Arc::new(row);
        let start = State {
            after: None,
            rows: VecDeque::new(),
            page: FIRST_PAGE,
            left: limit,
            done: false,
        };
        stream::unfold(start, move |mut state| {
            let fleet = fleet.clone();
            let handle = handle.clone();
            let make = make.clone();
            let row = row.clone();
            async move {
                if state.left == Some(0) {
                    return None;
                }
                if state.rows.is_empty() && !state.done {
                    let n = match state.left {
                        Some(left) => state.page.min(left as i64),
                        None => state.page,
                    };
                    let query = make(&state.after, n);
                    let fetched = spawn_on(&handle, async move {
                        let s = fleet.server(server)?;
                        let client = s.client().await?;
                        let rows = query.run(&client).await.map_err(|e| super::at(&s, e))?;
                        rows.iter()
                            .map(|r| row(r))
                            .collect::<StorageResult<Vec<T>>>()
                    })
                    .await;
                    match fetched {
                        Ok(rows) => {
                            state.done = (rows.len() as i64) < n;
                            state.after = rows.last().cloned().or(state.after.take());
                            state.rows.extend(rows);
                            state.page = (state.page * 2).min(MAX_PAGE);
                        }
                        Err(e) => {
                            state.done = true;
                            state.left = Some(0);
                            return Some((Err(e), state));
                        }
                    }
                }
                let next = state.rows.pop_front()?;
                if let Some(left) = &mut state.left {
                    *left -= 1;
                }
                Some((Ok(next), state))
            }
        })
        .boxed()
    }

    /// Runs `read` with a connection to `server` (`None`: no partition
    /// holds what is asked, so there is nothing to find).
    fn one<T, F, Fut>(&self, server: Option<ServerId>, read: F) -> StoreFuture<Option<T>>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Fleet>, deadpool_postgres::Client) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = StorageResult<Option<T>>> + Send + 'static,
    {
        let Some(server) = server else {
            return Box::pin(async { Ok(None) });
        };
        let fleet = self.fleet.clone();
        spawn_on(&self.handle, async move {
            let s = fleet.server(server)?;
            let client = s.client().await?;
            read(fleet.clone(), client)
                .await
                .map_err(|e| super::at(&s, e))
        })
    }
}

/// Streams in key order merged into one (descending when `reverse`).
fn merged<T, K, F>(streams: Vec<StoreStream<T>>, key: F, reverse: bool) -> StoreStream<T>
where
    T: Send + 'static,
    K: Ord,
    F: Fn(&T) -> K + Send + 'static,
{
    if streams.len() == 1 {
        return streams
            .into_iter()
            .next()
            .unwrap_or_else(|| stream::empty().boxed());
    }
    struct State<T> {
        streams: Vec<StoreStream<T>>,
        heads: Vec<Option<T>>,
        primed: bool,
    }
    let heads = streams.iter().map(|_| None).collect();
    let start = State {
        streams,
        heads,
        primed: false,
    };
    stream::unfold((start, key), move |(mut state, key)| async move {
        if !state.primed {
            state.primed = true;
            for i in 0..state.streams.len() {
                match state.streams[i].next().await {
                    Some(Ok(item)) => state.heads[i] = Some(item),
                    Some(Err(e)) => return Some((Err(e), (state, key))),
                    None => {}
                }
            }
        }
        let mut best: Option<usize> = None;
        for (i, head) in state.heads.iter().enumerate() {
            let Some(item) = head else { continue };
            let better = match best.and_then(|b| state.heads[b].as_ref()) {
                None => true,
                Some(current) => {
                    let (a, b) = (key(item), key(current));
                    if reverse {
                        a > b
                    } else {
                        a < b
                    }
                }
            };
            if better {
                best = Some(i);
            }
        }
        let i = best?;
        let item = state.heads[i].take()?;
        match state.streams[i].next().await {
            Some(Ok(next)) => state.heads[i] = Some(next),
            Some(Err(e)) => return Some((Err(e), (state, key))),
            None => {}
        }
        Some((Ok(item), (state, key)))
    })
    .boxed()
}

fn bytes_err(what: &str) -> StorageError {
    StorageError::Corrupt(format!("unreadable {what} row"))
}

impl View for PgView {
    fn record(&self, key: &RecordKey) -> StoreFuture<Option<Vec<u8>>> {
        let server = self
            .fleet
            .placement()
            .of_hash(key.collection, key.hash)
            .map(|p| p.server);
        let key = key.clone();
        self.one(server, move |fleet, client| async move {
            fleet
                .sql
                .record(&client, key.collection, key.hash, &key.id)
                .await
        })
    }

    fn scan_records(&self, scan: RecordScan) -> StoreStream<(RecordKey, Vec<u8>)> {
        let placement = self.fleet.placement();
        // Each server is asked only for the partitions placed on it: rows
        // a move is copying in, or left behind, are never read.
        let parts = placement.overlapping(scan.collection, scan.min, scan.max);
        let ids = if scan.min == scan.max {
            scan.ids.clone()
        } else {
            None
        };
        // With a filter the gateway drops rows, so the server cannot stop
        // at the limit.
        let server_limit = if scan.filter.is_some() {
            None
        } else {
            scan.limit
        };
        let collection = scan.collection;
        let streams = parts
            .into_iter()
            .map(|part| {
                let sql = self.fleet.sql.clone();
                let ids = ids.clone();
                let (min, max, reverse) =
                    (scan.min.max(part.min), scan.max.min(part.max), scan.reverse);
                let filter = scan.filter.clone();
                let rows = self.paged(
                    part.server,
                    move |after: &Option<(RecordKey, Vec<u8>)>, n| {
                        let after = after.as_ref().map(|(k, _)| (k.hash, k.id.clone()));
                        sql.records_page(collection, min, max, &ids, &after, reverse, n)
                    },
                    move |r| {
                        let hash: i64 = r.try_get(0).map_err(|_| bytes_err("record"))?;
                        let id: Vec<u8> = r.try_get(1).map_err(|_| bytes_err("record"))?;
                        let doc: Vec<u8> = r.try_get(2).map_err(|_| bytes_err("record"))?;
                        Ok((RecordKey::new(collection, hash, id), doc))
                    },
                    server_limit,
                );
                match filter {
                    None => rows,
                    Some(f) => rows
                        .filter(move |item| {
                            let keep = match item {
                                Ok((_, v)) => {
                                    bson::RawDocument::from_bytes(v).map_or(true, |d| f(d))
                                }
                                Err(_) => true,
                            };
                            futures::future::ready(keep)
                        })
                        .boxed(),
                }
            })
            .collect();
        let rows = merged(
            streams,
            |(k, _): &(RecordKey, Vec<u8>)| (k.hash, k.id.clone()),
            scan.reverse,
        );
        match scan.limit {
            Some(n) => rows.take(n).boxed(),
            None => rows,
        }
    }

    fn id_entry(&self, collection: u64, id: &[u8]) -> StoreFuture<Option<i64>> {
        let servers = self.fleet.placement().servers_of(collection);
        let fleet = self.fleet.clone();
        let id = id.to_vec();
        spawn_on(&self.handle, async move {
            let found = join_all(servers.iter().map(|&server| {
                let fleet = fleet.clone();
                let id = id.clone();
                async move {
                    let s = fleet.server(server)?;
                    let client = s.client().await?;
                    fleet
                        .sql
                        .id_hash(&client, collection, &id)
                        .await
                        .map_err(|e| super::at(&s, e))
                }
            }))
            .await;
            // A row on a server its partition is not placed on is a move's
            // copy or leftover.
            let placement = fleet.placement();
            let mut hash = None;
            for (answer, server) in found.into_iter().zip(servers) {
                if let Some(h) = answer? {
                    if placement.of_hash(collection, h).map(|p| p.server) == Some(server) {
                        hash = Some(h);
                    }
                }
            }
            Ok(hash)
        })
    }

    fn id_taken(&self, collection: u64, id: &[u8], hash: i64) -> StoreFuture<bool> {
        let server = self
            .fleet
            .placement()
            .of_hash(collection, hash)
            .map(|p| p.server);
        let id = id.to_vec();
        let found = self.one(server, move |fleet, client| async move {
            fleet.sql.id_hash(&client, collection, &id).await
        });
        Box::pin(async move { Ok(found.await?.is_some()) })
    }

    fn scan_id_entries(
        &self,
        collection: u64,
        from: Bound<Vec<u8>>,
        to: Bound<Vec<u8>>,
        reverse: bool,
    ) -> StoreStream<(Vec<u8>, i64)> {
        let servers = self.fleet.placement().servers_of(collection);
        let streams = servers
            .into_iter()
            .map(|server| {
                let sql = self.fleet.sql.clone();
                let (from, to) = (from.clone(), to.clone());
                let rows = self.paged(
                    server,
                    move |after: &Option<(Vec<u8>, i64)>, n| {
                        let (from, to) = match after {
                            None => (from.clone(), to.clone()),
                            Some((id, _)) if reverse => (from.clone(), Bound::Excluded(id.clone())),
                            Some((id, _)) => (Bound::Excluded(id.clone()), to.clone()),
                        };
                        sql.ids_page(collection, from, to, reverse, n)
                    },
                    |r| {
                        let id: Vec<u8> = r.try_get(0).map_err(|_| bytes_err("_id"))?;
                        let hash: i64 = r.try_get(1).map_err(|_| bytes_err("_id"))?;
                        Ok((id, hash))
                    },
                    None,
                );
                let placement = self.fleet.placement();
                let owned = move |item: &StorageResult<(Vec<u8>, i64)>| {
                    let keep = match item {
                        Ok((_, hash)) => {
                            placement.of_hash(collection, *hash).map(|p| p.server) == Some(server)
                        }
                        Err(_) => true,
                    };
                    futures::future::ready(keep)
                };
                rows.filter(owned).boxed()
            })
            .collect();
        merged(streams, |(id, _): &(Vec<u8>, i64)| id.clone(), reverse)
    }

    fn scan_index(&self, scan: IndexScan) -> StoreStream<(IndexEntryKey, Vec<u8>)> {
        let placement = self.fleet.placement();
        let servers = match scan.partition {
            Some(start) => placement
                .of_hash(scan.collection, start)
                .map(|p| vec![p.server])
                .unwrap_or_default(),
            None => placement.servers_of(scan.collection),
        };
        let (collection, index) = (scan.collection, scan.index);
        let streams = servers
            .into_iter()
            .map(|server| {
                let sql = self.fleet.sql.clone();
                let scan = scan.clone();
                let rows = self.paged(
                    server,
                    move |after: &Option<(IndexEntryKey, Vec<u8>)>, n| {
                        let after = after.as_ref().map(|(k, _)| (k.partition, k.entry.clone()));
                        sql.entries_page(
                            collection,
                            index,
                            scan.partition,
                            scan.from.clone(),
                            scan.to.clone(),
                            &after,
                            scan.reverse,
                            n,
                        )
                    },
                    move |r| {
                        let part: i64 = r.try_get(0).map_err(|_| bytes_err("index"))?;
                        let entry: Vec<u8> = r.try_get(1).map_err(|_| bytes_err("index"))?;
                        let value: Vec<u8> = r.try_get(2).map_err(|_| bytes_err("index"))?;
                        Ok((
                            IndexEntryKey {
                                collection,
                                index,
                                partition: part,
                                entry,
                            },
                            value,
                        ))
                    },
                    None,
                );
                let placement = self.fleet.placement();
                let owned = move |item: &StorageResult<(IndexEntryKey, Vec<u8>)>| {
                    let keep = match item {
                        Ok((k, _)) => {
                            placement.of_hash(collection, k.partition).map(|p| p.server)
                                == Some(server)
                        }
                        Err(_) => true,
                    };
                    futures::future::ready(keep)
                };
                rows.filter(owned).boxed()
            })
            .collect();
        merged(
            streams,
            |(k, _): &(IndexEntryKey, Vec<u8>)| (k.partition, k.entry.clone()),
            scan.reverse,
        )
    }

    fn usage(&self, collection: u64, hash: i64) -> StoreFuture<Option<Usage>> {
        let server = self
            .fleet
            .placement()
            .of_hash(collection, hash)
            .map(|p| p.server);
        self.one(server, move |fleet, client| async move {
            fleet.sql.usage(&client, collection, hash).await
        })
    }

    fn scan_usage(&self, collection: u64, min: i64, max: i64) -> StoreStream<(i64, Usage)> {
        let parts = self.fleet.placement().overlapping(collection, min, max);
        let streams = parts
            .into_iter()
            .map(|part| {
                let sql = self.fleet.sql.clone();
                let (min, max) = (min.max(part.min), max.min(part.max));
                self.paged(
                    part.server,
                    move |after: &Option<(i64, Usage)>, n| {
                        sql.usage_page(collection, min, max, after.as_ref().map(|(h, _)| *h), n)
                    },
                    |r| {
                        let hash: i64 = r.try_get(0).map_err(|_| bytes_err("usage"))?;
                        let count: i64 = r.try_get(1).map_err(|_| bytes_err("usage"))?;
                        let bytes: i64 = r.try_get(2).map_err(|_| bytes_err("usage"))?;
                        Ok((
                            hash,
                            Usage {
                                count: count.max(0) as u64,
                                bytes: bytes.max(0) as u64,
                            },
                        ))
                    },
                    None,
                )
            })
            .collect();
        merged(streams, |(h, _): &(i64, Usage)| *h, false)
    }

    fn partition_total(&self, collection: u64, partition: u64) -> StoreFuture<Option<Usage>> {
        let server = self
            .fleet
            .placement()
            .of_partition(collection, partition)
            .map(|p| p.server);
        self.one(server, move |fleet, client| async move {
            fleet
                .sql
                .partition_total(&client, collection, partition)
                .await
        })
    }
}
