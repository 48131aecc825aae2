//! The PostgreSQL backend: physical partitions on a fleet of PostgreSQL
//! servers (`--backend postgres`, one `--postgres URL` per server).
//!
//! Each partition lives on one server ([`placement`]): its records, its
//! index entries and its usage counters are rows there. The first server
//! also holds the metadata: the catalog, the placement and the outcomes
//! of two-phase commits. A batch is split by server; the share of one
//! server is one PostgreSQL transaction, and a batch that touches
//! several servers commits with two-phase commit:
//!
//! 1. every server's share is written and `PREPARE TRANSACTION`d under
//!    one gid (`<schema>:<fleet>:<n>`);
//! 2. the outcome `commit` is recorded on the first server;
//! 3. every prepared transaction is committed.
//!
//! A gateway that dies between the steps leaves prepared transactions;
//! the recovery pass ([`PgFleet::recover`], at start and every few
//! seconds) finishes them by the recorded outcome, recording `abort` for
//! one that has none, so each batch ends wholly applied or wholly absent.
//!
//! Every statement is in [`sql`]. Connections come from one pool per
//! server (`deadpool-postgres`); a URL naming several hosts with
//! `target_session_attrs=read-write` follows a replicated server's
//! primary through failover, since each new connection looks for it. A
//! server that cannot be reached fails only the operations that need it,
//! with [`StorageError::Unavailable`].
//!
//! The futures of the seam run on the backend's own runtime, so a router
//! thread can wait on them without a runtime of its own.

mod moves;
pub mod placement;
mod shards;
pub mod sql;
mod view;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use futures::future::join_all;
use parking_lot::RwLock;
use tokio_postgres::NoTls;

use self::placement::{Placed, Placement, RowChange, ServerId};
use self::sql::{ServerBatch, Sql, Version};
use super::layout::{self, FORMAT_VERSION};
use super::{
    CatalogKey, CommitSeq, Drain, MetaStore, PartitionOf, ServerInfo, SharedView, StorageError,
    StorageResult, Store, StoreFuture, StoreLock, WriteBatch, WriteOp,
};

/// Connections per server a gateway keeps at most.
const POOL_SIZE: usize = 32;

/// How long an operation waits for a connection, or to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the recovery pass looks for unfinished two-phase commits.
const RECOVERY_INTERVAL: Duration = Duration::from_secs(5);

/// A prepared transaction younger than this may still be finishing on a
/// live gateway; the recovery pass leaves it alone.
const RECOVERY_AGE_SECS: f64 = 10.0;

/// What `--backend postgres` is opened with.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// One connection string per server, the metadata server first.
    pub urls: Vec<String>,
    /// The schema the fleet's tables live in, on every server.
    pub schema: String,
    /// A step of two-phase commit at which to end the process (crash
    /// tests): `2pc-after-prepare` or `2pc-after-decision`.
    pub failpoint: Option<String>,
    /// Whether partitions move by themselves to even the servers' loads.
    pub balancer: bool,
}

/// One server of the fleet.
struct Server {
    /// `host:port` (several for a replicated server), for messages.
    name: String,
    /// The connection string it was given.
    url: String,
    pool: Pool,
    /// [`shards::ACTIVE`], [`shards::DRAINING`] or [`shards::REMOVED`].
    state: AtomicU8,
}

struct Fleet {
    sql: Sql,
    /// The servers by position: the `--postgres` ones, then those added
    /// with `addShard` (read from the metadata server). A removed one
    /// keeps its position.
    servers: RwLock<Arc<Vec<Arc<Server>>>>,
    /// The fleet's id, stamped on each of its servers.
    fleet_id: String,
    handle: tokio::runtime::Handle,
    /// Sessions on the metadata server that hold collection locks
    /// ([`Store::lock_collection`]), apart from the pool writes use, so
    /// a writer holding a lock always finds a connection to write with.
    locks: Pool,
    /// The catalog version this gateway's catalog is at: every batch is
    /// checked against it on each server it writes, and a catalog change
    /// moves it on every server.
    version: AtomicU64,
    /// Which server holds each partition. Changed only by a batch that
    /// carries partition changes, under `placing`.
    placement: RwLock<Arc<Placement>>,
    placing: tokio::sync::Mutex<()>,
    /// Names this fleet's prepared transactions.
    gid_prefix: String,
    next_gid: AtomicU64,
    seq: AtomicU64,
    failpoint: Option<String>,
    /// The partitions being moved of each collection this gateway holds
    /// the lock of, as the lock said: a batch notes the keys it writes
    /// to them.
    moving_parts: parking_lot::Mutex<HashMap<u64, Vec<u64>>>,
    /// One move (or change of the servers) at a time.
    moving: tokio::sync::Mutex<()>,
    /// Set while this gateway drains a server.
    draining: AtomicBool,
}

/// The [`Store`] over a fleet of PostgreSQL servers.
pub struct PgFleet {
    fleet: Arc<Fleet>,
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl PgFleet {
    /// Connects to every server, creates the schema where it is missing,
    /// checks that the servers are this fleet's, loads the placement and
    /// finishes any two-phase commit a previous gateway left.
    pub fn open(options: &PgOptions) -> StorageResult<Arc<PgFleet>> {
        if options.urls.is_empty() {
            return Err(StorageError::Format(
                "--backend postgres needs at least one --postgres URL".into(),
            ));
        }
        if !sql::valid_schema(&options.schema) {
            return Err(StorageError::Format(format!(
                "--postgres-schema {:?} is not a plain lower-case identifier",
                options.schema
            )));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("shardgate-pg")
            .enable_all()
            .build()
            .map_err(|e| {
                StorageError::Engine(format!("cannot start the PostgreSQL runtime: {e}"))
            })?;
        let handle = runtime.handle().clone();
        let mut servers = Vec::new();
        for (i, url) in options.urls.iter().enumerate() {
            servers.push(connect(i, url, &handle)?);
        }
        let locks = connect(0, &options.urls[0], &handle)?.pool;
        let sql = Sql::new(&options.schema);
        let mut fleet = runtime.block_on(init(sql, servers, locks, handle.clone()))?;
        fleet.failpoint = options.failpoint.clone();
        let fleet = Arc::new(fleet);
        let store = Arc::new(PgFleet {
            fleet: fleet.clone(),
            runtime: Some(runtime),
            handle: handle.clone(),
        });
        if options.balancer {
            let fleet = fleet.clone();
            handle.spawn(async move {
                // The balancer runs on one gateway at a time: the one
                // whose session holds the fleet's leadership.
                let mut leader = None;
                loop {
                    tokio::time::sleep(moves::BALANCE_INTERVAL).await;
                    if leader.is_none() {
                        leader = fleet.take_leadership().await;
                        if leader.is_none() {
                            continue;
                        }
                    }
                    if let Err(e) = fleet.balance_once().await {
                        tracing::info!("balancer: {e}");
                        if matches!(e, StorageError::Unavailable(_)) {
                            leader = None;
                        }
                    }
                }
            });
        }
        handle.spawn(async move {
            loop {
                tokio::time::sleep(RECOVERY_INTERVAL).await;
                if let Err(e) = fleet.recover().await {
                    tracing::debug!("two-phase commit recovery pass: {e}");
                }
            }
        });
        Ok(store)
    }

    fn spawn<T: Send + 'static>(
        &self,
        work: impl Future<Output = StorageResult<T>> + Send + 'static,
    ) -> StoreFuture<T> {
        spawn_on(&self.handle, work)
    }

    /// The servers, in `--postgres` order, by name.
    pub fn server_names(&self) -> Vec<String> {
        self.fleet
            .servers()
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }
}

/// Runs `work` on the backend's runtime; the answer can be awaited
/// anywhere.
fn spawn_on<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    work: impl Future<Output = StorageResult<T>> + Send + 'static,
) -> StoreFuture<T> {
    let task = handle.spawn(work);
    Box::pin(async move {
        task.await
            .map_err(|e| StorageError::Engine(format!("PostgreSQL task failed: {e}")))?
    })
}

impl Drop for PgFleet {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A pool for server `i`.
fn connect(i: usize, url: &str, handle: &tokio::runtime::Handle) -> StorageResult<Server> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
        StorageError::Format(format!(
            "--postgres number {} is not a connection string: {e}",
            i + 1
        ))
    })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("shardgate");
    }
    let ports = config.get_ports();
    let name = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(n, host)| {
            let host = match host {
                tokio_postgres::config::Host::Tcp(h) => h.clone(),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
            };
            let port = ports.get(n).or(ports.first()).copied().unwrap_or(5432);
            format!("{host}:{port}")
        })
        .collect::<Vec<_>>()
        .join(",");
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let _runtime = handle.enter();
    let pool = Pool::builder(manager)
        .max_size(POOL_SIZE)
        .wait_timeout(Some(CONNECT_TIMEOUT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| StorageError::Engine(format!("cannot build the pool of {url}: {e}")))?;
    Ok(Server {
        name: if name.is_empty() {
            format!("server {i}")
        } else {
            name
        },
        url: url.to_string(),
        pool,
        state: AtomicU8::new(shards::ACTIVE),
    })
}

/// Opens the fleet: tables, identities, the two-phase commit setting,
/// the placement and a first recovery pass.
async fn init(
    sql: Sql,
    servers: Vec<Server>,
    locks: Pool,
    handle: tokio::runtime::Handle,
) -> StorageResult<Fleet> {
    let meta = servers[0].client().await?;
    sql.create_tables(&meta, true).await?;
    let fleet_id = match sql.identity(&meta).await? {
        Some((fleet, 0)) => fleet,
        Some((_, n)) => {
            return Err(StorageError::Format(format!(
                "the first --postgres ({}) is server {n} of its fleet, not its metadata server; list the servers in their original order",
                servers[0].name
            )))
        }
        None => {
            let fleet = format!("{:016x}", rand::random::<u64>());
            sql.set_identity(&meta, &fleet, 0).await?;
            fleet
        }
    };
    for (i, server) in servers.iter().enumerate().skip(1) {
        let client = match server.client().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(
                    "PostgreSQL server {} ({}) is unreachable at start: {e}",
                    i,
                    server.name
                );
                continue;
            }
        };
        sql.create_tables(&client, false).await?;
        match sql.identity(&client).await? {
            Some((fleet, n)) if fleet == fleet_id && n as usize == i => {}
            Some((fleet, n)) => {
                return Err(StorageError::Format(format!(
                    "--postgres number {} ({}) is server {n} of fleet {fleet}, not server {i} of fleet {fleet_id}; list the servers in their original order",
                    i + 1,
                    server.name
                )))
            }
            None => sql.set_identity(&client, &fleet_id, i as i32).await?,
        }
    }
    if servers.len() > 1 {
        for server in &servers {
            let Ok(client) = server.client().await else {
                continue;
            };
            if sql.max_prepared(&client).await? == 0 {
                return Err(StorageError::Format(format!(
                    "PostgreSQL server {} has max_prepared_transactions = 0; a fleet of several servers commits across them with two-phase commit: set it (e.g. 64) and restart that server",
                    server.name
                )));
            }
        }
    }
    let servers = shards::with_added(&sql, servers, &handle).await?;
    let meta = servers[0].client().await?;
    let version = sql.version(&meta).await?;
    let placement = Placement::from_rows(sql.placement(&meta).await?);
    drop(meta);
    let fleet = Fleet {
        fleet_id: fleet_id.clone(),
        handle,
        locks,
        version: AtomicU64::new(version),
        gid_prefix: format!("{}:{fleet_id}:", sql.schema()),
        sql,
        servers: RwLock::new(Arc::new(servers)),
        placement: RwLock::new(Arc::new(placement)),
        placing: tokio::sync::Mutex::new(()),
        next_gid: AtomicU64::new(0),
        seq: AtomicU64::new(0),
        failpoint: None,
        moving_parts: parking_lot::Mutex::new(HashMap::new()),
        moving: tokio::sync::Mutex::new(()),
        draining: AtomicBool::new(false),
    };
    tracing::info!(
        "PostgreSQL fleet {fleet_id}: {} server(s), schema {}",
        fleet.servers().len(),
        fleet.sql.schema()
    );
    if let Err(e) = fleet.recover().await {
        tracing::warn!("two-phase commit recovery at start: {e}");
    }
    Ok(fleet)
}

impl Server {
    async fn client(&self) -> StorageResult<deadpool_postgres::Client> {
        self.pool.get().await.map_err(|e| {
            StorageError::Unavailable(format!(
                "PostgreSQL server {} is unreachable: {e}",
                self.name
            ))
        })
    }
}

/// Names the server in an error about it.
fn at(server: &Server, e: StorageError) -> StorageError {
    match e {
        StorageError::Unavailable(why) if !why.contains(&server.name) => {
            StorageError::Unavailable(format!("{why} (server {})", server.name))
        }
        other => other,
    }
}

impl Fleet {
    fn placement(&self) -> Arc<Placement> {
        self.placement.read().clone()
    }

    /// Every server, by position.
    fn servers(&self) -> Arc<Vec<Arc<Server>>> {
        self.servers.read().clone()
    }

    /// The servers not removed from the fleet.
    fn in_use(&self) -> Vec<Arc<Server>> {
        self.servers()
            .iter()
            .filter(|s| s.state.load(Ordering::Acquire) != shards::REMOVED)
            .cloned()
            .collect()
    }

    /// The metadata server (the first `--postgres`).
    fn meta(&self) -> Arc<Server> {
        self.servers.read()[0].clone()
    }

    fn server(&self, id: ServerId) -> StorageResult<Arc<Server>> {
        let servers = self.servers();
        servers.get(id).cloned().ok_or_else(|| {
            StorageError::Format(format!(
                "a partition is placed on server {id}, but the fleet has {} servers",
                servers.len()
            ))
        })
    }

    /// Applies a batch: one transaction on one server, two-phase commit
    /// across several.
    async fn apply(&self, batch: WriteBatch) -> StorageResult<CommitSeq> {
        let placing = batch.ops.iter().any(|op| {
            matches!(
                op,
                WriteOp::PutPartition { .. } | WriteOp::DeletePartition { .. }
            )
        });
        let catalog_change = placing
            || batch
                .ops
                .iter()
                .any(|op| matches!(op, WriteOp::PutMeta(..) | WriteOp::DeleteMeta(..)));
        let _placing = if placing {
            Some(self.placing.lock().await)
        } else {
            None
        };
        let current = self.placement();
        let changed = current.apply(&batch.ops, &self.open());
        let placement = changed.as_ref().map_or(&*current, |(p, _)| p);
        let mut shares: Vec<ServerBatch> = (0..self.servers().len())
            .map(|_| ServerBatch::default())
            .collect();
        if let Some((_, rows)) = &changed {
            for row in rows {
                match *row {
                    RowChange::Put(coll, placed) => {
                        shares[0].place(coll, placed.partition, Some(placed))
                    }
                    RowChange::Delete(coll, part) => shares[0].place(coll, part, None),
                }
            }
        }
        let moving = self.moving_of(&current);
        for op in batch.ops {
            // A row of a partition the batch removes is where it was.
            let server = route(placement, &op).or_else(|_| route(&current, &op))?;
            let Some(server) = server else {
                continue;
            };
            self.server(server)?;
            if let Some(share) = shares.get_mut(server) {
                for (collection, placed) in &moving {
                    if let Some(key) = moves::moved_key(&op, *collection, placed) {
                        share.moved.push(key);
                    }
                }
                share.push(op);
            }
        }
        self.commit_shares(shares, catalog_change).await?;
        if let Some((next, _)) = changed {
            *self.placement.write() = Arc::new(next);
        }
        Ok(self.seq.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// Commits one share per server (indexed by server). A catalog change
    /// moves the version of every server, the metadata server's first (so
    /// two changes never wait on each other across servers); any other
    /// batch is checked against this gateway's version on each server it
    /// writes, and fails with [`StorageError::Stale`] when another
    /// gateway changed the catalog meanwhile.
    async fn commit_shares(
        &self,
        shares: Vec<ServerBatch>,
        catalog_change: bool,
    ) -> StorageResult<()> {
        let version = self.version.load(Ordering::Acquire);
        let servers = self.servers();
        let mut shares = shares;
        if catalog_change {
            shares.resize_with(servers.len().max(shares.len()), ServerBatch::default);
        }
        let removed = |i: usize| {
            servers
                .get(i)
                .is_some_and(|s| s.state.load(Ordering::Acquire) == shards::REMOVED)
        };
        let shares: Vec<(ServerId, ServerBatch)> = shares
            .into_iter()
            .enumerate()
            .filter(|(i, share)| !share.is_empty() || catalog_change && !removed(*i))
            .map(|(server, mut share)| {
                share.version = Some(if catalog_change {
                    Version::Bump(version)
                } else {
                    Version::Expect(version)
                });
                (server, share)
            })
            .collect();
        match shares.len() {
            0 => return Ok(()),
            1 => {
                let (server, share) = shares
                    .into_iter()
                    .next()
                    .ok_or_else(|| StorageError::Engine("empty batch".into()))?;
                self.write_one(server, share).await?;
            }
            _ => self.two_phase(shares, catalog_change).await?,
        }
        if catalog_change {
            self.version.fetch_max(version + 1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// The partitions being moved that a batch notes the keys of.
    fn moving_of(&self, placement: &Placement) -> Vec<(u64, Placed)> {
        let parts = self.moving_parts.lock();
        parts
            .iter()
            .flat_map(|(&collection, parts)| {
                parts.iter().filter_map(move |&part| {
                    placement
                        .of_partition(collection, part)
                        .map(|p| (collection, p))
                })
            })
            .collect()
    }

    /// Takes collection `collection`'s lock among the gateways (see
    /// [`Store::lock_collection`]) and learns which of its partitions move.
    async fn lock_collection(self: &Arc<Self>, collection: u64) -> StorageResult<CollectionLock> {
        let client = self.locks.get().await.map_err(|e| {
            StorageError::Unavailable(format!(
                "PostgreSQL server {} is unreachable: {e}",
                self.meta().name
            ))
        })?;
        let moving = self.sql.lock_collection(&client, collection).await?;
        let mut parts = self.moving_parts.lock();
        if moving.is_empty() {
            parts.remove(&collection);
        } else {
            parts.insert(collection, moving);
        }
        drop(parts);
        Ok(CollectionLock {
            client: Some(client),
            fleet: self.clone(),
            collection,
        })
    }

    /// Whether another gateway changed the catalog since this one loaded it.
    async fn catalog_moved(&self) -> StorageResult<bool> {
        let meta = self.meta().client().await?;
        let now = self
            .sql
            .version(&meta)
            .await
            .map_err(|e| at(&self.meta(), e))?;
        Ok(now != self.version.load(Ordering::Acquire))
    }

    /// Reloads the placement; returns the catalog version it was read at.
    async fn refresh(&self) -> StorageResult<u64> {
        let meta = self.meta().client().await?;
        let version = self.sql.version(&meta).await?;
        self.reload_servers(&meta).await?;
        let placement = Placement::from_rows(self.sql.placement(&meta).await?);
        drop(meta);
        let _placing = self.placing.lock().await;
        *self.placement.write() = Arc::new(placement);
        Ok(version)
    }

    /// A session holding the fleet's leadership, if no other has it.
    async fn take_leadership(&self) -> Option<deadpool_postgres::Client> {
        let client = self.locks.get().await.ok()?;
        match self.sql.take_leadership(&client).await {
            Ok(true) => Some(client),
            _ => None,
        }
    }

    async fn write_one(&self, server: ServerId, share: ServerBatch) -> StorageResult<()> {
        let s = self.server(server)?;
        let client = s.client().await?;
        self.sql
            .write_transaction(&client, share)
            .await
            .map_err(|e| at(&s, e))
    }

    /// Writes and prepares one server's share under `gid`.
    async fn prepare(&self, server: ServerId, share: ServerBatch, gid: &str) -> StorageResult<()> {
        let s = self.server(server)?;
        let client = s.client().await?;
        client
            .batch_execute("BEGIN")
            .await
            .map_err(sql::engine)
            .map_err(|e| at(&s, e))?;
        let written = match self.sql.write(&client, share).await {
            Ok(()) => self.sql.prepare(&client, gid).await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            // Leave the pooled connection outside any transaction.
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(at(&s, e));
        }
        Ok(())
    }

    /// Commits shares on several servers with two-phase commit; with
    /// `metadata_first`, the metadata server's share is prepared before
    /// the others are begun.
    async fn two_phase(
        &self,
        mut shares: Vec<(ServerId, ServerBatch)>,
        metadata_first: bool,
    ) -> StorageResult<()> {
        let gid = format!(
            "{}{:x}-{}",
            self.gid_prefix,
            rand::random::<u32>(),
            self.next_gid.fetch_add(1, Ordering::Relaxed)
        );
        let servers: Vec<ServerId> = shares.iter().map(|(s, _)| *s).collect();
        let mut prepared = Vec::new();
        if metadata_first && shares.first().is_some_and(|(s, _)| *s == 0) {
            let (server, share) = shares.remove(0);
            prepared.push(self.prepare(server, share, &gid).await);
        }
        if prepared.iter().all(|r| r.is_ok()) {
            prepared.extend(
                join_all(
                    shares
                        .into_iter()
                        .map(|(server, share)| self.prepare(server, share, &gid)),
                )
                .await,
            );
        }
        let failed = prepared.iter().find_map(|r| r.as_ref().err());
        if let Some(e) = failed {
            let e = e.clone();
            self.settle(&gid, &servers, false).await;
            return Err(e);
        }
        // The crash tests end the process in a write of documents, not
        // in a catalog change.
        if !metadata_first {
            self.fail_at("2pc-after-prepare");
        }
        let meta = self.meta().client().await?;
        let outcome = self.sql.decide(&meta, &gid, "commit").await;
        drop(meta);
        if !metadata_first {
            self.fail_at("2pc-after-decision");
        }
        match outcome.as_deref() {
            Ok("commit") => {
                if self.settle(&gid, &servers, true).await {
                    if let Ok(meta) = self.meta().client().await {
                        let _ = self.sql.forget_decision(&meta, &gid).await;
                    }
                }
                Ok(())
            }
            Ok(_) => {
                self.settle(&gid, &servers, false).await;
                Err(StorageError::Conflict(
                    "a cross-server write was rolled back by recovery before it committed".into(),
                ))
            }
            // Whether the outcome was recorded is unknown: recovery
            // finishes the batch either way.
            Err(e) => Err(StorageError::OutcomeUnknown(format!(
                "the outcome of a cross-server write could not be recorded ({e}); recovery finishes it one way or the other"
            ))),
        }
    }

    /// Ends the process here when the crash tests ask for it.
    fn fail_at(&self, step: &str) {
        if self.failpoint.as_deref() == Some(step) {
            tracing::error!("failpoint {step}: ending the process");
            std::process::abort();
        }
    }

    /// Commits (or rolls back) `gid` on `servers`; true when every one
    /// answered. One that did not is finished by recovery.
    async fn settle(&self, gid: &str, servers: &[ServerId], commit: bool) -> bool {
        let done = join_all(servers.iter().map(|&server| async move {
            let s = self.server(server)?;
            let client = s.client().await?;
            if commit {
                self.sql.commit_prepared(&client, gid).await
            } else {
                self.sql.rollback_prepared(&client, gid).await
            }
        }))
        .await;
        let mut all = true;
        for result in done {
            if let Err(e) = result {
                // A share that failed before PREPARE has nothing to roll back.
                if commit {
                    tracing::warn!("two-phase commit {gid}: {e}; recovery will finish it");
                }
                all = false;
            }
        }
        all
    }

    /// Finishes this fleet's prepared transactions that no live gateway
    /// is finishing: by the recorded outcome, or rolled back when none
    /// was recorded (recording that first, so a late coordinator cannot
    /// commit it).
    async fn recover(&self) -> StorageResult<()> {
        for server in self.in_use() {
            let Ok(client) = server.client().await else {
                continue;
            };
            let gids = self
                .sql
                .prepared(&client, &self.gid_prefix, RECOVERY_AGE_SECS)
                .await?;
            for gid in gids {
                let meta = self.meta().client().await?;
                let outcome = self.sql.decide(&meta, &gid, "abort").await?;
                drop(meta);
                if outcome == "commit" {
                    self.sql.commit_prepared(&client, &gid).await?;
                } else {
                    self.sql.rollback_prepared(&client, &gid).await?;
                }
                tracing::info!(
                    "recovery: {outcome} of prepared transaction {gid} on {}",
                    server.name
                );
            }
        }
        Ok(())
    }
}

/// The server an op is written on; `None` for an op this backend keeps
/// no row for.
fn route(placement: &Placement, op: &WriteOp) -> StorageResult<Option<ServerId>> {
    let hash = |collection: u64, hash: i64| {
        placement
            .of_hash(collection, hash)
            .map(|p| Some(p.server))
            .ok_or_else(|| unplaced(collection))
    };
    match op {
        WriteOp::PutRecord(k, _) | WriteOp::DeleteRecord(k) => hash(k.collection, k.hash),
        WriteOp::PutIndexEntry(k, _) | WriteOp::DeleteIndexEntry(k) => {
            hash(k.collection, k.partition)
        }
        WriteOp::PutUsage {
            collection,
            hash: h,
            ..
        }
        | WriteOp::DeleteUsage {
            collection,
            hash: h,
        } => hash(*collection, *h),
        WriteOp::PutPartitionTotal {
            collection,
            partition,
            ..
        }
        | WriteOp::DeletePartitionTotal {
            collection,
            partition,
        } => placement
            .of_partition(*collection, *partition)
            .map(|p| Some(p.server))
            .ok_or_else(|| unplaced(*collection)),
        WriteOp::PutMeta(..) | WriteOp::DeleteMeta(..) => Ok(Some(0)),
        WriteOp::PutIdEntry { .. }
        | WriteOp::DeleteIdEntry { .. }
        | WriteOp::PutPartition { .. }
        | WriteOp::DeletePartition { .. }
        // The fleet keeps no change log (it offers none), so the router
        // writes no entries for it.
        | WriteOp::PutChange(_) => Ok(None),
    }
}

/// A write to a partition this gateway's placement does not hold: another
/// gateway split or moved it since this one read the catalog, so the
/// router reloads it and tries again.
fn unplaced(collection: u64) -> StorageError {
    StorageError::Stale(format!(
        "collection {collection} has a write outside every partition this gateway has placed"
    ))
}

impl Store for PgFleet {
    fn view(&self) -> SharedView {
        view::PgView::shared(self.fleet.clone(), self.handle.clone())
    }

    fn live(&self) -> SharedView {
        self.view()
    }

    fn meta(&self) -> &dyn MetaStore {
        self
    }

    fn apply(&self, batch: WriteBatch) -> StoreFuture<CommitSeq> {
        let fleet = self.fleet.clone();
        self.spawn(async move { fleet.apply(batch).await })
    }

    /// A commit is durable once PostgreSQL acknowledged it.
    fn durable(&self, _seq: CommitSeq) -> StoreFuture<()> {
        Box::pin(async { Ok(()) })
    }

    fn clear_collection(&self, collection: u64) -> StoreFuture<CommitSeq> {
        let fleet = self.fleet.clone();
        self.spawn(async move {
            for server in fleet.in_use() {
                let client = server.client().await?;
                fleet.sql.clear_collection(&client, collection).await?;
            }
            let _placing = fleet.placing.lock().await;
            let meta = fleet.meta().client().await?;
            fleet.sql.clear_placement(&meta, collection).await?;
            let mut next = (*fleet.placement()).clone();
            next.remove_collection(collection);
            *fleet.placement.write() = Arc::new(next);
            Ok(fleet.seq.fetch_add(1, Ordering::AcqRel) + 1)
        })
    }

    fn clear_index(&self, collection: u64, index: u32) -> StoreFuture<CommitSeq> {
        let fleet = self.fleet.clone();
        self.spawn(async move {
            for server in fleet.placement().servers_of(collection) {
                let s = fleet.server(server)?;
                let client = s.client().await?;
                fleet.sql.clear_index(&client, collection, index).await?;
            }
            Ok(fleet.seq.fetch_add(1, Ordering::AcqRel) + 1)
        })
    }

    fn ensure_format(&self, _partition_of: PartitionOf<'_>) -> StorageResult<()> {
        let fleet = self.fleet.clone();
        super::blocking::wait(self.spawn(async move {
            let meta = fleet.meta().client().await?;
            let found = fleet.sql.catalog_get(&meta, &CatalogKey::FormatVersion).await?;
            match found.as_deref().map(layout::decode_counter) {
                Some(Some(v)) if v == FORMAT_VERSION as u64 => Ok(()),
                Some(_) => Err(StorageError::Format(format!(
                    "the fleet's storage format is not version {FORMAT_VERSION}, which this build reads"
                ))),
                None => {
                    let mut share = ServerBatch::default();
                    share.push(WriteOp::PutMeta(
                        CatalogKey::FormatVersion,
                        layout::encode_counter(FORMAT_VERSION as u64),
                    ));
                    fleet.sql.write(&meta, share).await
                }
            }
        }))
    }

    fn disk_bytes(&self) -> u64 {
        let fleet = self.fleet.clone();
        let sizes = self.spawn(async move {
            let mut total = 0i64;
            for server in fleet.in_use() {
                if let Ok(client) = server.client().await {
                    total += fleet.sql.size(&client).await.unwrap_or(0);
                }
            }
            Ok(total)
        });
        super::blocking::wait(sizes).unwrap_or(0).max(0) as u64
    }

    fn move_partition(&self, collection: u64, partition: u64, to: usize) -> StoreFuture<()> {
        let fleet = self.fleet.clone();
        self.spawn(async move { fleet.move_partition(collection, partition, to).await })
    }

    fn answers_at_once(&self) -> bool {
        false
    }

    fn servers(&self) -> Option<Vec<ServerInfo>> {
        Some(
            self.fleet
                .servers()
                .iter()
                .map(|s| ServerInfo {
                    name: s.name.clone(),
                    state: shards::server_state(s.state.load(Ordering::Acquire)),
                })
                .collect(),
        )
    }

    fn add_server(&self, url: &str) -> StoreFuture<usize> {
        let fleet = self.fleet.clone();
        let url = url.to_string();
        self.spawn(async move { fleet.add_server(&url).await })
    }

    fn remove_server(&self, position: usize) -> StoreFuture<Drain> {
        let fleet = self.fleet.clone();
        self.spawn(async move { fleet.remove_server(position).await })
    }

    fn server_of(&self, collection: u64, partition: u64) -> Option<usize> {
        self.fleet
            .placement()
            .of_partition(collection, partition)
            .map(|p| p.server)
    }

    fn catalog_moved(&self) -> StoreFuture<bool> {
        let fleet = self.fleet.clone();
        self.spawn(async move { fleet.catalog_moved().await })
    }

    fn refresh(&self) -> StoreFuture<Option<u64>> {
        let fleet = self.fleet.clone();
        self.spawn(async move { Ok(Some(fleet.refresh().await?)) })
    }

    fn catalog_loaded(&self, version: u64) {
        self.fleet.version.store(version, Ordering::Release);
    }

    fn lock_collection(&self, collection: u64) -> StoreFuture<Option<StoreLock>> {
        let fleet = self.fleet.clone();
        self.spawn(async move {
            let lock = fleet.lock_collection(collection).await?;
            Ok(Some(StoreLock(Box::new(lock))))
        })
    }

    fn close(&self) -> StorageResult<()> {
        for server in self.fleet.servers().iter() {
            server.pool.close();
        }
        Ok(())
    }
}

/// A collection's lock among the gateways: a session on the metadata
/// server holding an advisory lock, given back to its pool once unlocked.
struct CollectionLock {
    client: Option<deadpool_postgres::Client>,
    fleet: Arc<Fleet>,
    collection: u64,
}

impl Drop for CollectionLock {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let fleet = self.fleet.clone();
        let collection = self.collection;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime left (shutting down): the session is not reused.
            let _ = deadpool_postgres::Object::take(client);
            return;
        };
        runtime.spawn(async move {
            if fleet
                .sql
                .unlock_collection(&client, collection)
                .await
                .is_err()
            {
                // A session that may still hold the lock is not reused.
                let _ = deadpool_postgres::Object::take(client);
            }
        });
    }
}

impl MetaStore for PgFleet {
    fn get(&self, key: &CatalogKey) -> StoreFuture<Option<Vec<u8>>> {
        let fleet = self.fleet.clone();
        let key = key.clone();
        self.spawn(async move {
            let meta = fleet.meta().client().await?;
            fleet.sql.catalog_get(&meta, &key).await
        })
    }

    fn namespaces(&self) -> StoreFuture<Vec<(String, Vec<u8>)>> {
        let fleet = self.fleet.clone();
        self.spawn(async move {
            let meta = fleet.meta().client().await?;
            let rows = fleet
                .sql
                .catalog_range(&meta, layout::namespace_range())
                .await?;
            rows.into_iter()
                .map(|(k, v)| match CatalogKey::decode(&k)? {
                    CatalogKey::Namespace(ns) => Ok((ns, v)),
                    _ => Err(StorageError::Corrupt("catalog key out of place".into())),
                })
                .collect()
        })
    }

    fn databases(&self) -> StoreFuture<Vec<(String, Vec<u8>)>> {
        let fleet = self.fleet.clone();
        self.spawn(async move {
            let meta = fleet.meta().client().await?;
            let rows = fleet
                .sql
                .catalog_range(&meta, layout::database_range())
                .await?;
            rows.into_iter()
                .map(|(k, v)| match CatalogKey::decode(&k)? {
                    CatalogKey::Database(db) => Ok((db, v)),
                    _ => Err(StorageError::Corrupt("catalog key out of place".into())),
                })
                .collect()
        })
    }
}
