//! Servers joining and leaving the fleet while it serves.
//!
//! The metadata server's `shards` table lists every server by position:
//! the `--postgres` ones and those added since with `addShard`, each
//! `active`, `draining` or `removed`. A gateway starting reads it to find
//! the added servers; the others learn of a change through the catalog
//! version, which every change here moves.
//!
//! - Adding a server ([`Fleet::add_server`]) creates the fleet's tables
//!   there, stamps it with the fleet's id and its position, and records it;
//!   the placement then prefers it (it holds nothing) and the balancer
//!   moves partitions onto it.
//! - Removing one ([`Fleet::remove_server`]) marks it draining: no new
//!   partition is placed there and its partitions move to the other
//!   servers, one at a time. Once it holds none, it is marked removed and
//!   no longer written or read; it keeps its position, so the others keep
//!   their names.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::placement::{least_loaded, ServerId};
use super::sql::{ServerBatch, Sql};
use super::{connect, Fleet, Server};
use crate::storage::{Drain, ServerState, StorageError, StorageResult};

pub const ACTIVE: u8 = 0;
pub const DRAINING: u8 = 1;
pub const REMOVED: u8 = 2;

/// How a state is stored.
pub fn state_name(state: u8) -> &'static str {
    match state {
        DRAINING => "draining",
        REMOVED => "removed",
        _ => "active",
    }
}

fn state_of(name: &str) -> u8 {
    match name {
        "draining" => DRAINING,
        "removed" => REMOVED,
        _ => ACTIVE,
    }
}

/// The state as the seam names it.
pub fn server_state(state: u8) -> ServerState {
    match state {
        DRAINING => ServerState::Draining,
        REMOVED => ServerState::Removed,
        _ => ServerState::Active,
    }
}

/// The `--postgres` servers with their recorded states, followed by the
/// servers added since; records the `--postgres` ones not recorded yet.
pub async fn with_added(
    sql: &Sql,
    given: Vec<Server>,
    handle: &tokio::runtime::Handle,
) -> StorageResult<Vec<Arc<Server>>> {
    let meta = given[0].client().await?;
    let mut rows = sql.shards(&meta).await?;
    rows.sort_by_key(|r| r.0);
    let mut servers: Vec<Arc<Server>> = given.into_iter().map(Arc::new).collect();
    for (position, server) in servers.iter().enumerate() {
        if !rows.iter().any(|r| r.0 as usize == position) {
            sql.put_shard(&meta, position, &server.url, ACTIVE).await?;
        }
    }
    for (position, url, state) in rows {
        let position = position as usize;
        let state = state_of(&state);
        if let Some(server) = servers.get(position) {
            server.state.store(state, Ordering::Release);
        } else if position == servers.len() {
            let server = connect(position, &url, handle)?;
            server.state.store(state, Ordering::Release);
            servers.push(Arc::new(server));
        }
    }
    Ok(servers)
}

impl Fleet {
    /// Which servers take new partitions, by position.
    pub(super) fn open(&self) -> Vec<bool> {
        self.servers()
            .iter()
            .map(|s| s.state.load(Ordering::Acquire) == ACTIVE)
            .collect()
    }

    /// Brings the server list and states up to the metadata server's.
    pub(super) async fn reload_servers(
        &self,
        meta: &deadpool_postgres::Client,
    ) -> StorageResult<()> {
        let mut rows = self.sql.shards(meta).await?;
        rows.sort_by_key(|r| r.0);
        let current = self.servers();
        let mut next: Vec<Arc<Server>> = current.iter().cloned().collect();
        for (position, url, state) in rows {
            let position = position as usize;
            let state = state_of(&state);
            if let Some(server) = next.get(position) {
                server.state.store(state, Ordering::Release);
            } else if position == next.len() {
                let server = connect(position, &url, &self.handle)?;
                server.state.store(state, Ordering::Release);
                next.push(Arc::new(server));
            }
        }
        if next.len() != current.len() {
            *self.servers.write() = Arc::new(next);
        }
        Ok(())
    }

    /// Adds the server at `url` to the fleet; returns its position.
    pub async fn add_server(&self, url: &str) -> StorageResult<ServerId> {
        let _one_change = self.moving.lock().await;
        if let Some(s) = self.servers().iter().find(|s| s.url == url) {
            return Err(StorageError::Format(format!(
                "{} is in the fleet already",
                s.name
            )));
        }
        let position = self.servers().len();
        let server = Arc::new(connect(position, url, &self.handle)?);
        let client = server.client().await?;
        self.sql.create_tables(&client, false).await?;
        match self.sql.identity(&client).await? {
            Some((fleet, n)) if fleet == self.fleet_id && n as usize == position => {}
            Some((fleet, n)) => {
                return Err(StorageError::Format(format!(
                    "{} is server {n} of fleet {fleet} in schema {}; it cannot join another",
                    server.name,
                    self.sql.schema()
                )))
            }
            None => {
                self.sql
                    .set_identity(&client, &self.fleet_id, position as i32)
                    .await?
            }
        }
        if self.sql.max_prepared(&client).await? == 0 {
            return Err(StorageError::Format(format!(
                "PostgreSQL server {} has max_prepared_transactions = 0; a fleet commits across servers with two-phase commit: set it (e.g. 64) and restart that server",
                server.name
            )));
        }
        // It joins at this gateway's catalog version, which the change
        // recording it moves on every server, itself included.
        self.sql
            .set_version(&client, self.version.load(Ordering::Acquire))
            .await?;
        drop(client);
        let mut list: Vec<Arc<Server>> = self.servers().iter().cloned().collect();
        list.push(server.clone());
        *self.servers.write() = Arc::new(list);
        let mut shares: Vec<ServerBatch> = (0..=position).map(|_| ServerBatch::default()).collect();
        shares[0].put_shard(position, url, ACTIVE);
        if let Err(e) = self.commit_shares(shares, true).await {
            let mut list: Vec<Arc<Server>> = self.servers().iter().cloned().collect();
            list.retain(|s| !Arc::ptr_eq(s, &server));
            *self.servers.write() = Arc::new(list);
            return Err(e);
        }
        tracing::info!("server {} joined the fleet as shard{position}", server.name);
        Ok(position)
    }

    /// One step of removing server `position`: marks it draining (and
    /// starts moving its partitions away), reports how many it still
    /// holds, or, once it holds none, marks it removed.
    pub async fn remove_server(self: &Arc<Self>, position: ServerId) -> StorageResult<Drain> {
        let server = self.server(position)?;
        match server.state.load(Ordering::Acquire) {
            REMOVED => Ok(Drain::Completed),
            ACTIVE => {
                self.set_state(position, DRAINING).await?;
                self.drain_in_background(position);
                Ok(Drain::Started)
            }
            _ => {
                let left = self.placement().on_server(position).len();
                if left > 0 {
                    self.drain_in_background(position);
                    return Ok(Drain::Ongoing { partitions: left });
                }
                self.set_state(position, REMOVED).await?;
                tracing::info!("server {} left the fleet", server.name);
                Ok(Drain::Completed)
            }
        }
    }

    /// Records a server's new state with a catalog change.
    async fn set_state(&self, position: ServerId, state: u8) -> StorageResult<()> {
        let _one_change = self.moving.lock().await;
        let server = self.server(position)?;
        let mut shares: Vec<ServerBatch> = (0..self.servers().len())
            .map(|_| ServerBatch::default())
            .collect();
        shares[0].put_shard(position, &server.url, state);
        self.commit_shares(shares, true).await?;
        server.state.store(state, Ordering::Release);
        Ok(())
    }

    /// Moves the partitions of a draining server to the others, one at a
    /// time, on this gateway (unless it is doing so already).
    fn drain_in_background(self: &Arc<Self>, position: ServerId) {
        if self.draining.swap(true, Ordering::AcqRel) {
            return;
        }
        let fleet = self.clone();
        self.handle.spawn(async move {
            let mut failures = 0;
            while let Some((collection, placed)) =
                fleet.placement().on_server(position).into_iter().next()
            {
                let open = fleet.open();
                let to = least_loaded(&fleet.placement().load(open.len()), &open);
                if !open.get(to).copied().unwrap_or(false) {
                    break;
                }
                if let Err(e) = fleet.move_partition(collection, placed.partition, to).await {
                    tracing::info!("draining shard{position}: {e}");
                    failures += 1;
                    if failures > 20 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            fleet.draining.store(false, Ordering::Release);
        });
    }
}
