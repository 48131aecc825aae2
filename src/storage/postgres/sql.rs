//! Every SQL statement the PostgreSQL backend sends: the schema, the
//! batched writes of one server's share of a batch, the paged reads, and
//! the two-phase commit's statements.
//!
//! Tables live in one schema (`--postgres-schema`, default `shardgate`)
//! on every server; the first server's schema also holds the metadata.
//! Keys are typed columns: a collection id and a hash are `bigint`
//! (signed, so hash order is the partition order), `_id`s and index
//! entries are their key strings as `bytea`, which PostgreSQL orders
//! byte by byte like the embedded engine does.
//!
//! | table | on | key | value |
//! |---|---|---|---|
//! | `records` | each server | `coll, hash, id` (and unique `coll, id`) | `doc`: the BSON document |
//! | `index_entries` | each server | `coll, idx, part, entry` | `value` |
//! | `usage` | each server | `coll, hash` | `count, bytes` of one logical partition |
//! | `partition_totals` | each server | `coll, part` | `count, bytes` of one partition |
//! | `identity` | each server | — | the fleet's id and this server's number |
//! | `version` | each server | — | the catalog version (one row) |
//! | `moved_keys` | each server | `coll, part` | keys written to a partition while it moves |
//! | `moving` | first | `coll, part` | partitions being moved |
//! | `shards` | first | `position` | each server's URL and state (active, draining, removed) |
//! | `catalog` | first | `key` (a catalog key) | `value` |
//! | `placement` | first | `coll, part` | `min, max, server` |
//! | `decisions` | first | `gid` | the outcome of a two-phase commit |

use std::collections::BTreeMap;
use std::ops::Bound;

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::placement::Placed;
use crate::storage::layout::KeyRange;
use crate::storage::{CatalogKey, StorageError, StorageResult, Usage, WriteOp};

/// The SQLSTATE `expect_version` and `bump_version` fail with.
const STALE: &str = "SG001";

/// A statement's parameters.
pub type Params = Vec<Box<dyn ToSql + Sync + Send>>;

/// The statements of one fleet, with its schema name in them.
#[derive(Debug, Clone)]
pub struct Sql {
    /// The quoted schema name.
    s: String,
    schema: String,
}

/// Whether a schema name needs no quoting: a lower-case identifier.
pub fn valid_schema(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 48
}

impl Sql {
    /// Statements over `schema`, which [`valid_schema`] accepts.
    pub fn new(schema: &str) -> Sql {
        Sql {
            s: format!("\"{schema}\""),
            schema: schema.to_string(),
        }
    }

    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Creates the data tables (and, on the first server, the metadata
    /// tables) unless they exist. Gateways starting together take turns.
    pub async fn create_tables(&self, c: &impl GenericClient, metadata: bool) -> StorageResult<()> {
        // The tables are made in one transaction, the last one last: when
        // it is there, all are. Asking first matters: `CREATE INDEX IF NOT
        // EXISTS` locks its table, and would wait for a prepared
        // transaction that only this gateway's recovery will finish.
        let last = if metadata { "decisions" } else { "version" };
        let found = c
            .query_one(
                "SELECT to_regclass(format('%I.%I', $1::text, $2::text)) IS NOT NULL",
                &[&self.schema, &last],
            )
            .await
            .map_err(engine)?;
        if found.get::<_, bool>(0) {
            return Ok(());
        }
        let s = &self.s;
        let mut ddl = format!(
            "BEGIN;
             SET LOCAL client_min_messages = warning;
             SELECT pg_advisory_xact_lock(hashtext('shardgate schema {schema}'));
             CREATE SCHEMA IF NOT EXISTS {s};
             CREATE TABLE IF NOT EXISTS {s}.identity (fleet text NOT NULL, server integer NOT NULL);
             CREATE TABLE IF NOT EXISTS {s}.records (
                 coll bigint NOT NULL, hash bigint NOT NULL, id bytea NOT NULL, doc bytea NOT NULL,
                 PRIMARY KEY (coll, hash, id));
             CREATE UNIQUE INDEX IF NOT EXISTS records_by_id ON {s}.records (coll, id);
             CREATE TABLE IF NOT EXISTS {s}.index_entries (
                 coll bigint NOT NULL, idx bigint NOT NULL, part bigint NOT NULL,
                 entry bytea NOT NULL, value bytea NOT NULL,
                 PRIMARY KEY (coll, idx, part, entry));
             CREATE TABLE IF NOT EXISTS {s}.usage (
                 coll bigint NOT NULL, hash bigint NOT NULL, count bigint NOT NULL, bytes bigint NOT NULL,
                 PRIMARY KEY (coll, hash));
             CREATE TABLE IF NOT EXISTS {s}.partition_totals (
                 coll bigint NOT NULL, part bigint NOT NULL, count bigint NOT NULL, bytes bigint NOT NULL,
                 PRIMARY KEY (coll, part));
             CREATE OR REPLACE FUNCTION {s}.expect_version(want bigint) RETURNS void
             LANGUAGE plpgsql AS $f$
             DECLARE have bigint;
             BEGIN
                 SELECT v INTO have FROM {s}.version FOR KEY SHARE NOWAIT;
                 IF have IS DISTINCT FROM want THEN
                     RAISE EXCEPTION 'the catalog is at version %, not %: another gateway changed it', have, want
                         USING ERRCODE = '{STALE}';
                 END IF;
             END $f$;
             CREATE OR REPLACE FUNCTION {s}.bump_version(want bigint) RETURNS void
             LANGUAGE plpgsql AS $f$
             BEGIN
                 PERFORM 1 FROM {s}.version WHERE v = want FOR UPDATE;
                 IF NOT FOUND THEN
                     RAISE EXCEPTION 'the catalog moved past version %: another gateway changed it', want
                         USING ERRCODE = '{STALE}';
                 END IF;
                 UPDATE {s}.version SET v = v + 1;
             END $f$;
             CREATE TABLE IF NOT EXISTS {s}.moved_keys (
                 coll bigint NOT NULL, part bigint NOT NULL, kind smallint NOT NULL,
                 hash bigint NOT NULL, key bytea NOT NULL);
             CREATE INDEX IF NOT EXISTS moved_keys_by_part ON {s}.moved_keys (coll, part);
             CREATE TABLE IF NOT EXISTS {s}.version (v bigint NOT NULL);
             INSERT INTO {s}.version SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM {s}.version);",
            schema = self.schema
        );
        if metadata {
            ddl.push_str(&format!(
                "CREATE TABLE IF NOT EXISTS {s}.catalog (key bytea PRIMARY KEY, value bytea NOT NULL);
                 CREATE TABLE IF NOT EXISTS {s}.placement (
                     coll bigint NOT NULL, part bigint NOT NULL, min bigint NOT NULL, max bigint NOT NULL,
                     server integer NOT NULL, PRIMARY KEY (coll, part));
                 CREATE TABLE IF NOT EXISTS {s}.shards (
                     position integer PRIMARY KEY, url text NOT NULL, state text NOT NULL);
                 CREATE TABLE IF NOT EXISTS {s}.moving (
                     coll bigint NOT NULL, part bigint NOT NULL, PRIMARY KEY (coll, part));
                 CREATE TABLE IF NOT EXISTS {s}.decisions (
                     gid text PRIMARY KEY, outcome text NOT NULL,
                     decided timestamptz NOT NULL DEFAULT now());"
            ));
        }
        ddl.push_str("COMMIT;");
        c.batch_execute(&ddl).await.map_err(engine)
    }

    /// The fleet id and server number a server was given, if any.
    pub async fn identity(&self, c: &impl GenericClient) -> StorageResult<Option<(String, i32)>> {
        let row = c
            .query_opt(
                &format!("SELECT fleet, server FROM {}.identity", self.s),
                &[],
            )
            .await
            .map_err(engine)?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    pub async fn set_identity(
        &self,
        c: &impl GenericClient,
        fleet: &str,
        server: i32,
    ) -> StorageResult<()> {
        c.execute(
            &format!(
                "INSERT INTO {}.identity (fleet, server) VALUES ($1, $2)",
                self.s
            ),
            &[&fleet, &server],
        )
        .await
        .map_err(engine)?;
        Ok(())
    }

    /// Makes this session the fleet's leader (the one gateway that runs
    /// the balancer) for as long as it lives; false when another
    /// gateway's session is.
    pub async fn take_leadership(&self, c: &impl GenericClient) -> StorageResult<bool> {
        let row = c
            .query_one(
                "SELECT pg_try_advisory_lock(hashtext('shardgate leader ' || $1))",
                &[&self.schema],
            )
            .await
            .map_err(engine)?;
        Ok(row.get(0))
    }

    /// Every server of the fleet: `(position, url, state)`.
    pub async fn shards(
        &self,
        c: &impl GenericClient,
    ) -> StorageResult<Vec<(i32, String, String)>> {
        let statement = c
            .prepare_cached(&format!(
                "SELECT position, url, state FROM {}.shards",
                self.s
            ))
            .await
            .map_err(engine)?;
        let rows = c.query(&statement, &[]).await.map_err(engine)?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    /// Records a server of the fleet (outside any catalog change: the
    /// `--postgres` servers at start).
    pub async fn put_shard(
        &self,
        c: &impl GenericClient,
        position: usize,
        url: &str,
        state: u8,
    ) -> StorageResult<()> {
        let mut share = ServerBatch::default();
        share.put_shard(position, url, state);
        run(c, self.statements(share), false).await
    }

    /// Sets the catalog version of a server joining the fleet.
    pub async fn set_version(&self, c: &impl GenericClient, version: u64) -> StorageResult<()> {
        execute(
            c,
            &format!("UPDATE {}.version SET v = $1", self.s),
            &[&(version as i64)],
        )
        .await
    }

    /// The catalog version a server is at.
    pub async fn version(&self, c: &impl GenericClient) -> StorageResult<u64> {
        let row = query_opt(c, &format!("SELECT v FROM {}.version", self.s), &[]).await?;
        let v: i64 = row.map_or(0, |r| r.get(0));
        Ok(v.max(0) as u64)
    }

    /// Waits for collection `coll`'s write lock among the gateways, held
    /// by this session until [`Sql::unlock_collection`]; returns the
    /// collection's partitions being moved, whose writes note their keys.
    pub async fn lock_collection(
        &self,
        c: &impl GenericClient,
        coll: u64,
    ) -> StorageResult<Vec<u64>> {
        let lock = c
            .prepare_cached(
                "SELECT pg_advisory_lock(hashtext('shardgate collection ' || $1), $2::integer)",
            )
            .await
            .map_err(engine)?;
        let moving = c
            .prepare_cached(&format!(
                "SELECT part FROM {}.moving WHERE coll = $1",
                self.s
            ))
            .await
            .map_err(engine)?;
        let (schema, key, coll) = (self.schema.as_str(), coll as i32, coll as i64);
        let lock_params: [&(dyn ToSql + Sync); 2] = [&schema, &key];
        let moving_params: [&(dyn ToSql + Sync); 1] = [&coll];
        let (locked, parts) = futures::join!(
            c.execute(&lock, &lock_params),
            c.query(&moving, &moving_params)
        );
        locked.map_err(engine)?;
        Ok(parts
            .map_err(engine)?
            .iter()
            .map(|r| r.get::<_, i64>(0) as u64)
            .collect())
    }

    /// Marks a partition as moving (or no longer) on the metadata server.
    pub async fn set_moving(
        &self,
        c: &impl GenericClient,
        coll: u64,
        part: u64,
        moving: bool,
    ) -> StorageResult<()> {
        let sql = if moving {
            format!("INSERT INTO {}.moving (coll, part) VALUES ($1, $2)", self.s)
        } else {
            format!(
                "DELETE FROM {}.moving WHERE coll = $1 AND part = $2",
                self.s
            )
        };
        execute(c, &sql, &[&(coll as i64), &(part as i64)]).await
    }

    /// Takes the keys written to a moving partition since the last call:
    /// `(kind, hash, key)`.
    pub async fn take_moved_keys(
        &self,
        c: &impl GenericClient,
        coll: u64,
        part: u64,
    ) -> StorageResult<Vec<(i16, i64, Vec<u8>)>> {
        let sql = format!(
            "DELETE FROM {}.moved_keys WHERE coll = $1 AND part = $2 RETURNING kind, hash, key",
            self.s
        );
        let statement = c.prepare_cached(&sql).await.map_err(engine)?;
        let rows = c
            .query(&statement, &[&(coll as i64), &(part as i64)])
            .await
            .map_err(engine)?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    pub async fn unlock_collection(&self, c: &impl GenericClient, coll: u64) -> StorageResult<()> {
        execute(
            c,
            "SELECT pg_advisory_unlock(hashtext('shardgate collection ' || $1), $2::integer)",
            &[&self.schema, &(coll as i32)],
        )
        .await
    }

    /// `max_prepared_transactions` of a server: 0 means no two-phase
    /// commit there.
    pub async fn max_prepared(&self, c: &impl GenericClient) -> StorageResult<i64> {
        let row = c
            .query_one(
                "SELECT current_setting('max_prepared_transactions')::bigint",
                &[],
            )
            .await
            .map_err(engine)?;
        Ok(row.get(0))
    }

    /// Bytes the fleet's tables take on one server.
    pub async fn size(&self, c: &impl GenericClient) -> StorageResult<i64> {
        let row = c
            .query_one(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 AND c.relkind = 'r'",
                &[&self.schema],
            )
            .await
            .map_err(engine)?;
        Ok(row.get(0))
    }

    pub async fn placement(&self, c: &impl GenericClient) -> StorageResult<Vec<(u64, Placed)>> {
        let rows = c
            .query(
                &format!(
                    "SELECT coll, part, min, max, server FROM {}.placement",
                    self.s
                ),
                &[],
            )
            .await
            .map_err(engine)?;
        Ok(rows
            .iter()
            .map(|r| {
                let coll: i64 = r.get(0);
                let part: i64 = r.get(1);
                let server: i32 = r.get(4);
                (
                    coll as u64,
                    Placed {
                        partition: part as u64,
                        min: r.get(2),
                        max: r.get(3),
                        server: server.max(0) as usize,
                    },
                )
            })
            .collect())
    }

    // --- reads ------------------------------------------------------------

    pub async fn record(
        &self,
        c: &impl GenericClient,
        coll: u64,
        hash: i64,
        id: &[u8],
    ) -> StorageResult<Option<Vec<u8>>> {
        let sql = format!(
            "SELECT doc FROM {}.records WHERE coll = $1 AND hash = $2 AND id = $3",
            self.s
        );
        let row = query_opt(c, &sql, &[&(coll as i64), &hash, &id]).await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// The hash the record with this `_id` is stored under here.
    pub async fn id_hash(
        &self,
        c: &impl GenericClient,
        coll: u64,
        id: &[u8],
    ) -> StorageResult<Option<i64>> {
        let sql = format!(
            "SELECT hash FROM {}.records WHERE coll = $1 AND id = $2",
            self.s
        );
        let row = query_opt(c, &sql, &[&(coll as i64), &id]).await?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn usage(
        &self,
        c: &impl GenericClient,
        coll: u64,
        hash: i64,
    ) -> StorageResult<Option<Usage>> {
        let sql = format!(
            "SELECT count, bytes FROM {}.usage WHERE coll = $1 AND hash = $2",
            self.s
        );
        let row = query_opt(c, &sql, &[&(coll as i64), &hash]).await?;
        Ok(row.map(|r| usage_of(r.get(0), r.get(1))))
    }

    pub async fn partition_total(
        &self,
        c: &impl GenericClient,
        coll: u64,
        part: u64,
    ) -> StorageResult<Option<Usage>> {
        let sql = format!(
            "SELECT count, bytes FROM {}.partition_totals WHERE coll = $1 AND part = $2",
            self.s
        );
        let row = query_opt(c, &sql, &[&(coll as i64), &(part as i64)]).await?;
        Ok(row.map(|r| usage_of(r.get(0), r.get(1))))
    }

    pub async fn catalog_get(
        &self,
        c: &impl GenericClient,
        key: &CatalogKey,
    ) -> StorageResult<Option<Vec<u8>>> {
        let sql = format!("SELECT value FROM {}.catalog WHERE key = $1", self.s);
        let row = query_opt(c, &sql, &[&key.encode()]).await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Catalog entries with keys in `range`, in key order.
    pub async fn catalog_range(
        &self,
        c: &impl GenericClient,
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    ) -> StorageResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut q = Query::new(format!(
            "SELECT key, value FROM {}.catalog WHERE true",
            self.s
        ));
        q.bounds("key", range.0, range.1);
        q.sql.push_str(" ORDER BY key");
        let rows = q.run(c).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// One page of a collection's records: hashes `min..=max` (and `_id`
    /// bounds when given), after `after` (a `(hash, id)` already read).
    #[allow(clippy::too_many_arguments)]
    pub fn records_page(
        &self,
        coll: u64,
        min: i64,
        max: i64,
        ids: &Option<KeyRange>,
        after: &Option<(i64, Vec<u8>)>,
        reverse: bool,
        limit: i64,
    ) -> Query {
        let mut q = Query::new(format!(
            "SELECT hash, id, doc FROM {}.records WHERE coll = ",
            self.s
        ));
        q.param(coll as i64);
        q.sql.push_str(" AND hash >= ");
        q.param(min);
        q.sql.push_str(" AND hash <= ");
        q.param(max);
        if let Some((from, to)) = ids {
            q.bounds("id", from.clone(), to.clone());
        }
        if let Some((hash, id)) = after {
            q.sql.push_str(if reverse {
                " AND (hash, id) < ("
            } else {
                " AND (hash, id) > ("
            });
            q.param(*hash);
            q.sql.push_str(", ");
            q.param(id.clone());
            q.sql.push(')');
        }
        q.sql.push_str(if reverse {
            " ORDER BY hash DESC, id DESC LIMIT "
        } else {
            " ORDER BY hash, id LIMIT "
        });
        q.param(limit);
        q
    }

    /// One page of a collection's `_id`s with their hashes.
    pub fn ids_page(
        &self,
        coll: u64,
        from: Bound<Vec<u8>>,
        to: Bound<Vec<u8>>,
        reverse: bool,
        limit: i64,
    ) -> Query {
        let mut q = Query::new(format!(
            "SELECT id, hash FROM {}.records WHERE coll = ",
            self.s
        ));
        q.param(coll as i64);
        q.bounds("id", from, to);
        q.sql.push_str(if reverse {
            " ORDER BY id DESC LIMIT "
        } else {
            " ORDER BY id LIMIT "
        });
        q.param(limit);
        q
    }

    /// One page of an index's entries: of one partition within bounds,
    /// or of every partition here (bounds ignored), after `after` (a
    /// `(part, entry)` already read).
    #[allow(clippy::too_many_arguments)]
    pub fn entries_page(
        &self,
        coll: u64,
        idx: u32,
        part: Option<i64>,
        from: Bound<Vec<u8>>,
        to: Bound<Vec<u8>>,
        after: &Option<(i64, Vec<u8>)>,
        reverse: bool,
        limit: i64,
    ) -> Query {
        let mut q = Query::new(format!(
            "SELECT part, entry, value FROM {}.index_entries WHERE coll = ",
            self.s
        ));
        q.param(coll as i64);
        q.sql.push_str(" AND idx = ");
        q.param(idx as i64);
        if let Some(part) = part {
            q.sql.push_str(" AND part = ");
            q.param(part);
            q.bounds("entry", from, to);
        }
        if let Some((part, entry)) = after {
            q.sql.push_str(if reverse {
                " AND (part, entry) < ("
            } else {
                " AND (part, entry) > ("
            });
            q.param(*part);
            q.sql.push_str(", ");
            q.param(entry.clone());
            q.sql.push(')');
        }
        q.sql.push_str(if reverse {
            " ORDER BY part DESC, entry DESC LIMIT "
        } else {
            " ORDER BY part, entry LIMIT "
        });
        q.param(limit);
        q
    }

    /// One page of every index entry of one partition, in `(idx,
    /// entry)` order, after `after`.
    pub fn partition_entries_page(
        &self,
        coll: u64,
        part: i64,
        after: &Option<(i64, Vec<u8>)>,
        limit: i64,
    ) -> Query {
        let mut q = Query::new(format!(
            "SELECT idx, entry, value FROM {}.index_entries WHERE coll = ",
            self.s
        ));
        q.param(coll as i64);
        q.sql.push_str(" AND part = ");
        q.param(part);
        if let Some((idx, entry)) = after {
            q.sql.push_str(" AND (idx, entry) > (");
            q.param(*idx);
            q.sql.push_str(", ");
            q.param(entry.clone());
            q.sql.push(')');
        }
        q.sql.push_str(" ORDER BY idx, entry LIMIT ");
        q.param(limit);
        q
    }

    pub async fn entry(
        &self,
        c: &impl GenericClient,
        coll: u64,
        idx: i64,
        part: i64,
        entry: &[u8],
    ) -> StorageResult<Option<Vec<u8>>> {
        let sql = format!(
            "SELECT value FROM {}.index_entries WHERE coll = $1 AND idx = $2 AND part = $3 AND entry = $4",
            self.s
        );
        let row = query_opt(c, &sql, &[&(coll as i64), &idx, &part, &entry]).await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Removes what one partition left on a server it moved from.
    pub async fn clear_partition(
        &self,
        c: &impl GenericClient,
        coll: u64,
        placed: Placed,
    ) -> StorageResult<()> {
        let s = &self.s;
        let coll = coll as i64;
        for table in ["records", "usage"] {
            execute(
                c,
                &format!("DELETE FROM {s}.{table} WHERE coll = $1 AND hash >= $2 AND hash <= $3"),
                &[&coll, &placed.min, &placed.max],
            )
            .await?;
        }
        execute(
            c,
            &format!("DELETE FROM {s}.index_entries WHERE coll = $1 AND part = $2"),
            &[&coll, &placed.min],
        )
        .await?;
        execute(
            c,
            &format!("DELETE FROM {s}.partition_totals WHERE coll = $1 AND part = $2"),
            &[&coll, &(placed.partition as i64)],
        )
        .await
    }

    /// One page of the usage of hashes `min..=max`, after hash `after`.
    pub fn usage_page(
        &self,
        coll: u64,
        min: i64,
        max: i64,
        after: Option<i64>,
        limit: i64,
    ) -> Query {
        let mut q = Query::new(format!(
            "SELECT hash, count, bytes FROM {}.usage WHERE coll = ",
            self.s
        ));
        q.param(coll as i64);
        q.sql.push_str(" AND hash >= ");
        q.param(after.map_or(min, |h| h.saturating_add(1)));
        q.sql.push_str(" AND hash <= ");
        q.param(max);
        q.sql.push_str(" ORDER BY hash LIMIT ");
        q.param(limit);
        q
    }

    // --- writes -----------------------------------------------------------

    /// Applies one server's share of a batch inside the caller's
    /// transaction: each table's deletes, then its upserts, each one
    /// statement however many rows.
    pub async fn write(&self, c: &impl GenericClient, batch: ServerBatch) -> StorageResult<()> {
        run(c, self.statements(batch), false).await
    }

    /// Applies one server's share of a batch as one transaction, sent in
    /// one round trip: `BEGIN`, the statements and `COMMIT` go together,
    /// and PostgreSQL answers them in order (a failed statement turns
    /// the `COMMIT` into a rollback).
    pub async fn write_transaction(
        &self,
        c: &impl GenericClient,
        batch: ServerBatch,
    ) -> StorageResult<()> {
        run(c, self.statements(batch), true).await
    }

    /// The statements of one server's share: each table's deletes, then
    /// its upserts, each one statement however many rows.
    fn statements(&self, batch: ServerBatch) -> Vec<(String, Params)> {
        let mut steps: Vec<(String, Params)> = Vec::new();
        let s = &self.s;
        match batch.version {
            Some(Version::Expect(v)) => steps.push((
                format!("SELECT {s}.expect_version($1)"),
                vec![Box::new(v as i64)],
            )),
            Some(Version::Bump(v)) => steps.push((
                format!("SELECT {s}.bump_version($1)"),
                vec![Box::new(v as i64)],
            )),
            None => {}
        }
        let (dels, puts) = split(batch.records);
        if !dels.is_empty() {
            let (coll, hash, id) = unzip3(dels);
            steps.push((format!(
                    "DELETE FROM {s}.records t USING unnest($1::bigint[], $2::bigint[], $3::bytea[]) AS d(coll, hash, id)
                     WHERE t.coll = d.coll AND t.hash = d.hash AND t.id = d.id"
                ), vec![Box::new(coll), Box::new(hash), Box::new(id)]));
        }
        if !puts.is_empty() {
            let (keys, docs): (Vec<_>, Vec<Vec<u8>>) = puts.into_iter().unzip();
            let (coll, hash, id) = unzip3(keys);
            steps.push((
                format!(
                    "INSERT INTO {s}.records (coll, hash, id, doc)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bytea[])
                     ON CONFLICT (coll, hash, id) DO UPDATE SET doc = EXCLUDED.doc"
                ),
                vec![Box::new(coll), Box::new(hash), Box::new(id), Box::new(docs)],
            ));
        }
        let (dels, puts) = split(batch.entries);
        if !dels.is_empty() {
            let (coll, idx, part, entry) = unzip4(dels);
            steps.push((format!(
                    "DELETE FROM {s}.index_entries t
                     USING unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bytea[]) AS d(coll, idx, part, entry)
                     WHERE t.coll = d.coll AND t.idx = d.idx AND t.part = d.part AND t.entry = d.entry"
                ), vec![Box::new(coll), Box::new(idx), Box::new(part), Box::new(entry)]));
        }
        if !puts.is_empty() {
            let (keys, values): (Vec<_>, Vec<Vec<u8>>) = puts.into_iter().unzip();
            let (coll, idx, part, entry) = unzip4(keys);
            steps.push((format!(
                    "INSERT INTO {s}.index_entries (coll, idx, part, entry, value)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bytea[], $5::bytea[])
                     ON CONFLICT (coll, idx, part, entry) DO UPDATE SET value = EXCLUDED.value"
                ), vec![Box::new(coll), Box::new(idx), Box::new(part), Box::new(entry), Box::new(values)]));
        }
        let (dels, puts) = split(batch.usage);
        if !dels.is_empty() {
            let (coll, hash): (Vec<i64>, Vec<i64>) = dels.into_iter().unzip();
            steps.push((format!(
                    "DELETE FROM {s}.usage t USING unnest($1::bigint[], $2::bigint[]) AS d(coll, hash)
                     WHERE t.coll = d.coll AND t.hash = d.hash"
                ), vec![Box::new(coll), Box::new(hash)]));
        }
        if !puts.is_empty() {
            let (coll, hash, count, bytes) = unzip4(
                puts.into_iter()
                    .map(|((c, h), u)| (c, h, u.count as i64, u.bytes as i64))
                    .collect(),
            );
            steps.push((format!(
                    "INSERT INTO {s}.usage (coll, hash, count, bytes)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[])
                     ON CONFLICT (coll, hash) DO UPDATE SET count = EXCLUDED.count, bytes = EXCLUDED.bytes"
                ), vec![Box::new(coll), Box::new(hash), Box::new(count), Box::new(bytes)]));
        }
        let (dels, changes) = split(batch.totals);
        if !dels.is_empty() {
            let (coll, part): (Vec<i64>, Vec<i64>) = dels.into_iter().unzip();
            steps.push((format!(
                    "DELETE FROM {s}.partition_totals t USING unnest($1::bigint[], $2::bigint[]) AS d(coll, part)
                     WHERE t.coll = d.coll AND t.part = d.part"
                ), vec![Box::new(coll), Box::new(part)]));
        }
        // Totals a writer changed are added to (other gateways change
        // them too); totals a move copies are set.
        for add in [true, false] {
            let rows: Vec<_> = changes
                .iter()
                .filter(|(_, t)| matches!(t, Total::Add { .. }) == add)
                .map(|&((c, p), t)| match t {
                    Total::Add { count, bytes } => (c, p, count, bytes),
                    Total::Set(u) => (c, p, u.count as i64, u.bytes as i64),
                })
                .collect();
            if rows.is_empty() {
                continue;
            }
            let (coll, part, count, bytes) = unzip4(rows);
            let set = if add {
                "count = t.count + EXCLUDED.count, bytes = t.bytes + EXCLUDED.bytes"
            } else {
                "count = EXCLUDED.count, bytes = EXCLUDED.bytes"
            };
            steps.push((
                format!(
                    "INSERT INTO {s}.partition_totals AS t (coll, part, count, bytes)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[])
                     ON CONFLICT (coll, part) DO UPDATE SET {set}"
                ),
                vec![
                    Box::new(coll),
                    Box::new(part),
                    Box::new(count),
                    Box::new(bytes),
                ],
            ));
        }
        if !batch.moved.is_empty() {
            let mut kinds: Vec<i16> = Vec::new();
            let mut keys: Vec<(i64, i64, i64, Vec<u8>)> = Vec::new();
            for k in batch.moved {
                kinds.push(k.kind);
                keys.push((k.collection as i64, k.partition as i64, k.hash, k.key));
            }
            let (coll, part, hash, key) = unzip4(keys);
            steps.push((format!(
                    "INSERT INTO {s}.moved_keys (coll, part, kind, hash, key)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::smallint[], $4::bigint[], $5::bytea[])"
                ), vec![Box::new(coll), Box::new(part), Box::new(kinds), Box::new(hash), Box::new(key)]));
        }
        if !batch.shards.is_empty() {
            let (position, url, state) = unzip3(batch.shards);
            steps.push((format!(
                    "INSERT INTO {s}.shards (position, url, state)
                     SELECT * FROM unnest($1::integer[], $2::text[], $3::text[])
                     ON CONFLICT (position) DO UPDATE SET url = EXCLUDED.url, state = EXCLUDED.state"
                ), vec![Box::new(position), Box::new(url), Box::new(state)]));
        }
        if !batch.moves_done.is_empty() {
            let (coll, part): (Vec<i64>, Vec<i64>) = batch.moves_done.into_iter().unzip();
            steps.push((format!(
                    "DELETE FROM {s}.moving t USING unnest($1::bigint[], $2::bigint[]) AS d(coll, part)
                     WHERE t.coll = d.coll AND t.part = d.part"
                ), vec![Box::new(coll), Box::new(part)]));
        }
        let (dels, puts) = split(batch.catalog);
        if !dels.is_empty() {
            steps.push((
                format!("DELETE FROM {s}.catalog WHERE key = ANY($1::bytea[])"),
                vec![Box::new(dels)],
            ));
        }
        if !puts.is_empty() {
            let (keys, values): (Vec<Vec<u8>>, Vec<Vec<u8>>) = puts.into_iter().unzip();
            steps.push((format!(
                    "INSERT INTO {s}.catalog (key, value) SELECT * FROM unnest($1::bytea[], $2::bytea[])
                     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                ), vec![Box::new(keys), Box::new(values)]));
        }
        let (dels, puts) = split(batch.placement);
        if !dels.is_empty() {
            let (coll, part): (Vec<i64>, Vec<i64>) = dels.into_iter().unzip();
            steps.push((format!(
                    "DELETE FROM {s}.placement t USING unnest($1::bigint[], $2::bigint[]) AS d(coll, part)
                     WHERE t.coll = d.coll AND t.part = d.part"
                ), vec![Box::new(coll), Box::new(part)]));
        }
        if !puts.is_empty() {
            let mut cols = (
                Vec::new(),
                Vec::new(),
                Vec::new(),
                Vec::new(),
                Vec::<i32>::new(),
            );
            for ((coll, part), p) in puts {
                cols.0.push(coll);
                cols.1.push(part);
                cols.2.push(p.min);
                cols.3.push(p.max);
                cols.4.push(p.server as i32);
            }
            steps.push((format!(
                    "INSERT INTO {s}.placement (coll, part, min, max, server)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::integer[])
                     ON CONFLICT (coll, part) DO UPDATE SET min = EXCLUDED.min, max = EXCLUDED.max, server = EXCLUDED.server"
                ), vec![Box::new(cols.0), Box::new(cols.1), Box::new(cols.2), Box::new(cols.3), Box::new(cols.4)]));
        }
        steps
    }

    /// Removes a collection's rows on one server.
    pub async fn clear_collection(&self, c: &impl GenericClient, coll: u64) -> StorageResult<()> {
        let s = &self.s;
        for table in ["records", "index_entries", "usage", "partition_totals"] {
            execute(
                c,
                &format!("DELETE FROM {s}.{table} WHERE coll = $1"),
                &[&(coll as i64)],
            )
            .await?;
        }
        Ok(())
    }

    pub async fn clear_placement(&self, c: &impl GenericClient, coll: u64) -> StorageResult<()> {
        execute(
            c,
            &format!("DELETE FROM {}.placement WHERE coll = $1", self.s),
            &[&(coll as i64)],
        )
        .await
    }

    pub async fn clear_index(
        &self,
        c: &impl GenericClient,
        coll: u64,
        idx: u32,
    ) -> StorageResult<()> {
        execute(
            c,
            &format!(
                "DELETE FROM {}.index_entries WHERE coll = $1 AND idx = $2",
                self.s
            ),
            &[&(coll as i64), &(idx as i64)],
        )
        .await
    }

    // --- two-phase commit -------------------------------------------------

    /// Ends the caller's transaction by preparing it as `gid`.
    pub async fn prepare(&self, c: &impl GenericClient, gid: &str) -> StorageResult<()> {
        c.batch_execute(&format!("PREPARE TRANSACTION {}", literal(gid)))
            .await
            .map_err(engine)
    }

    pub async fn commit_prepared(&self, c: &impl GenericClient, gid: &str) -> StorageResult<()> {
        c.batch_execute(&format!("COMMIT PREPARED {}", literal(gid)))
            .await
            .map_err(engine)
    }

    pub async fn rollback_prepared(&self, c: &impl GenericClient, gid: &str) -> StorageResult<()> {
        c.batch_execute(&format!("ROLLBACK PREPARED {}", literal(gid)))
            .await
            .map_err(engine)
    }

    /// Records the outcome of `gid` unless one is recorded; returns the
    /// outcome that holds.
    pub async fn decide(
        &self,
        c: &impl GenericClient,
        gid: &str,
        outcome: &str,
    ) -> StorageResult<String> {
        let sql = format!(
            "WITH ins AS (INSERT INTO {s}.decisions (gid, outcome) VALUES ($1, $2)
                          ON CONFLICT (gid) DO NOTHING RETURNING outcome)
             SELECT outcome FROM ins UNION ALL SELECT outcome FROM {s}.decisions WHERE gid = $1",
            s = self.s
        );
        let row = c.query_one(&sql, &[&gid, &outcome]).await.map_err(engine)?;
        Ok(row.get(0))
    }

    pub async fn decision(
        &self,
        c: &impl GenericClient,
        gid: &str,
    ) -> StorageResult<Option<String>> {
        let sql = format!("SELECT outcome FROM {}.decisions WHERE gid = $1", self.s);
        let row = c.query_opt(&sql, &[&gid]).await.map_err(engine)?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn forget_decision(&self, c: &impl GenericClient, gid: &str) -> StorageResult<()> {
        execute(
            c,
            &format!("DELETE FROM {}.decisions WHERE gid = $1", self.s),
            &[&gid],
        )
        .await
    }

    /// Prepared transactions of this fleet on a server older than
    /// `age_secs`: `gid`s.
    pub async fn prepared(
        &self,
        c: &impl GenericClient,
        prefix: &str,
        age_secs: f64,
    ) -> StorageResult<Vec<String>> {
        let rows = c
            .query(
                "SELECT gid FROM pg_prepared_xacts
                 WHERE database = current_database() AND starts_with(gid, $1)
                   AND prepared < now() - make_interval(secs => $2)",
                &[&prefix, &age_secs],
            )
            .await
            .map_err(engine)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

/// A statement built from parts, with its parameters.
pub struct Query {
    pub sql: String,
    pub params: Params,
}

impl Query {
    fn new(sql: String) -> Query {
        Query {
            sql,
            params: Vec::new(),
        }
    }

    fn param(&mut self, value: impl ToSql + Sync + Send + 'static) {
        self.params.push(Box::new(value));
        self.sql.push_str(&format!("${}", self.params.len()));
    }

    fn bounds(&mut self, column: &str, from: Bound<Vec<u8>>, to: Bound<Vec<u8>>) {
        for (bound, inclusive, exclusive) in [(from, ">=", ">"), (to, "<=", "<")] {
            let (op, value) = match bound {
                Bound::Included(v) => (inclusive, v),
                Bound::Excluded(v) => (exclusive, v),
                Bound::Unbounded => continue,
            };
            self.sql.push_str(&format!(" AND {column} {op} "));
            self.param(value);
        }
    }

    pub async fn run(&self, c: &impl GenericClient) -> StorageResult<Vec<tokio_postgres::Row>> {
        let params: Vec<&(dyn ToSql + Sync)> = self
            .params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        c.query(&self.sql, &params).await.map_err(engine)
    }
}

/// `coll, idx, part, entry` of an index entry.
type EntryKey = (i64, i64, i64, Vec<u8>);

/// One server's share of a batch, reduced to the last change of each key
/// (a batch is atomic, so only its final state matters).
#[derive(Debug, Default)]
pub struct ServerBatch {
    records: BTreeMap<(i64, i64, Vec<u8>), Option<Vec<u8>>>,
    entries: BTreeMap<EntryKey, Option<Vec<u8>>>,
    usage: BTreeMap<(i64, i64), Option<Usage>>,
    totals: BTreeMap<(i64, i64), Option<Total>>,
    catalog: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    placement: BTreeMap<(i64, i64), Option<Placed>>,
    /// The catalog version the share is checked against, or moves on.
    pub version: Option<Version>,
    /// Keys written to partitions being moved, noted for the move.
    pub moved: Vec<MovedKey>,
    /// Partitions whose move ends with this share (metadata server).
    moves_done: Vec<(i64, i64)>,
    /// Servers recorded (metadata server): `(position, url, state)`.
    shards: Vec<(i32, String, String)>,
}

/// A key written to a partition while it moves (see [`super::moves`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MovedKey {
    pub collection: u64,
    pub partition: u64,
    /// What the key is of: [`MovedKey::RECORD`] and so on.
    pub kind: i16,
    /// The record's or usage counter's hash; an index entry's index.
    pub hash: i64,
    /// The record's `_id` key or the index entry; empty otherwise.
    pub key: Vec<u8>,
}

impl MovedKey {
    pub const RECORD: i16 = 0;
    pub const ENTRY: i16 = 1;
    pub const USAGE: i16 = 2;
    pub const TOTAL: i16 = 3;
}

/// What a share does with the catalog version of its server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Version {
    /// Fails ([`StorageError::Stale`]) unless the server is at it, and
    /// keeps it there until the transaction ends.
    Expect(u64),
    /// Moves the server from it to the next (a catalog change).
    Bump(u64),
}

/// A change of a partition's total.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Total {
    Set(Usage),
    Add { count: i64, bytes: i64 },
}

impl ServerBatch {
    /// Adds a change. `_id` entries are not stored: the records table's
    /// `(coll, id)` index answers them, so they are dropped here.
    pub fn push(&mut self, op: WriteOp) {
        match op {
            WriteOp::PutRecord(k, v) => {
                self.records
                    .insert((k.collection as i64, k.hash, k.id), Some(v));
            }
            WriteOp::DeleteRecord(k) => {
                self.records
                    .insert((k.collection as i64, k.hash, k.id), None);
            }
            WriteOp::PutIdEntry { .. } | WriteOp::DeleteIdEntry { .. } => {}
            WriteOp::PutIndexEntry(k, v) => {
                self.entries.insert(
                    (k.collection as i64, k.index as i64, k.partition, k.entry),
                    Some(v),
                );
            }
            WriteOp::DeleteIndexEntry(k) => {
                self.entries.insert(
                    (k.collection as i64, k.index as i64, k.partition, k.entry),
                    None,
                );
            }
            WriteOp::PutUsage {
                collection,
                hash,
                usage,
            } => {
                self.usage.insert((collection as i64, hash), Some(usage));
            }
            WriteOp::DeleteUsage { collection, hash } => {
                self.usage.insert((collection as i64, hash), None);
            }
            WriteOp::PutPartitionTotal {
                collection,
                partition,
                added,
                ..
            } => {
                let add = Total::Add {
                    count: added.count,
                    bytes: added.bytes,
                };
                self.totals
                    .insert((collection as i64, partition as i64), Some(add));
            }
            WriteOp::DeletePartitionTotal {
                collection,
                partition,
            } => {
                self.totals
                    .insert((collection as i64, partition as i64), None);
            }
            WriteOp::PutMeta(k, v) => {
                self.catalog.insert(k.encode(), Some(v));
            }
            WriteOp::DeleteMeta(k) => {
                self.catalog.insert(k.encode(), None);
            }
            WriteOp::PutPartition { .. }
            | WriteOp::DeletePartition { .. }
            | WriteOp::PutChange(_) => {}
        }
    }

    /// Sets a partition's total to a copied value.
    pub fn set_total(&mut self, collection: u64, partition: u64, usage: Usage) {
        self.totals.insert(
            (collection as i64, partition as i64),
            Some(Total::Set(usage)),
        );
    }

    /// Records server `position` of the fleet with its URL and state.
    pub fn put_shard(&mut self, position: usize, url: &str, state: u8) {
        self.shards.push((
            position as i32,
            url.to_string(),
            super::shards::state_name(state).to_string(),
        ));
    }

    /// Ends the move of a partition (its row in `moving`).
    pub fn moved_away(&mut self, collection: u64, partition: u64) {
        self.moves_done.push((collection as i64, partition as i64));
    }

    /// Adds a change of the `placement` table.
    pub fn place(&mut self, collection: u64, partition: u64, placed: Option<Placed>) {
        self.placement
            .insert((collection as i64, partition as i64), placed);
    }

    /// Whether the share changes no row (a version check alone is no
    /// change).
    pub fn is_empty(&self) -> bool {
        self.moved.is_empty()
            && self.moves_done.is_empty()
            && self.shards.is_empty()
            && self.records.is_empty()
            && self.entries.is_empty()
            && self.usage.is_empty()
            && self.totals.is_empty()
            && self.catalog.is_empty()
            && self.placement.is_empty()
    }
}

fn split<K, V>(changes: BTreeMap<K, Option<V>>) -> (Vec<K>, Vec<(K, V)>) {
    let mut dels = Vec::new();
    let mut puts = Vec::new();
    for (k, v) in changes {
        match v {
            Some(v) => puts.push((k, v)),
            None => dels.push(k),
        }
    }
    (dels, puts)
}

fn unzip3<A, B, C>(rows: Vec<(A, B, C)>) -> (Vec<A>, Vec<B>, Vec<C>) {
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    for (a, b, c) in rows {
        out.0.push(a);
        out.1.push(b);
        out.2.push(c);
    }
    out
}

fn unzip4<A, B, C, D>(rows: Vec<(A, B, C, D)>) -> (Vec<A>, Vec<B>, Vec<C>, Vec<D>) {
    let mut out = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (a, b, c, d) in rows {
        out.0.push(a);
        out.1.push(b);
        out.2.push(c);
        out.3.push(d);
    }
    out
}

fn usage_of(count: i64, bytes: i64) -> Usage {
    Usage {
        count: count.max(0) as u64,
        bytes: bytes.max(0) as u64,
    }
}

/// A string as an SQL literal (a gid is ours: letters, digits, `:-_`).
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Runs `steps` in order, all sent before the first answer is awaited;
/// inside `BEGIN`/`COMMIT` when `transaction`. In a transaction a lost
/// connection leaves the outcome unknown.
async fn run(
    c: &impl GenericClient,
    steps: Vec<(String, Params)>,
    transaction: bool,
) -> StorageResult<()> {
    if steps.is_empty() {
        return Ok(());
    }
    let mut statements = Vec::with_capacity(steps.len() + 2);
    if transaction {
        statements.push((c.prepare_cached("BEGIN").await.map_err(engine)?, Vec::new()));
    }
    for (sql, params) in &steps {
        let statement = c.prepare_cached(sql).await.map_err(engine)?;
        let params: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        statements.push((statement, params));
    }
    if transaction {
        statements.push((
            c.prepare_cached("COMMIT").await.map_err(engine)?,
            Vec::new(),
        ));
    }
    let answers = futures::future::join_all(
        statements
            .iter()
            .map(|(statement, params)| c.execute(statement, params)),
    )
    .await;
    for answer in answers {
        if let Err(e) = answer {
            return Err(match engine(e) {
                StorageError::Unavailable(why) if transaction => StorageError::OutcomeUnknown(
                    format!("{why} while committing: the write may have been applied"),
                ),
                other => other,
            });
        }
    }
    Ok(())
}

async fn execute(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> StorageResult<()> {
    let statement = c.prepare_cached(sql).await.map_err(engine)?;
    c.execute(&statement, params).await.map_err(engine)?;
    Ok(())
}

async fn query_opt(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> StorageResult<Option<tokio_postgres::Row>> {
    let statement = c.prepare_cached(sql).await.map_err(engine)?;
    c.query_opt(&statement, params).await.map_err(engine)
}

/// A PostgreSQL error as a storage error: a lost or refused connection,
/// a server shutting down or one that turned read-only (a standby after
/// failover) is [`StorageError::Unavailable`]; a serialization failure,
/// a deadlock or a unique key written meanwhile is
/// [`StorageError::Conflict`].
pub fn engine(e: tokio_postgres::Error) -> StorageError {
    use tokio_postgres::error::SqlState;
    let Some(db) = e.as_db_error() else {
        return StorageError::Unavailable(format!("PostgreSQL server unreachable: {e}"));
    };
    let code = db.code();
    if code.code() == STALE || *code == SqlState::LOCK_NOT_AVAILABLE {
        return StorageError::Stale(db.message().to_string());
    }
    if [
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::UNIQUE_VIOLATION,
    ]
    .contains(code)
    {
        StorageError::Conflict(db.message().to_string())
    } else if [
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::READ_ONLY_SQL_TRANSACTION,
        SqlState::TOO_MANY_CONNECTIONS,
    ]
    .contains(code)
    {
        StorageError::Unavailable(format!("PostgreSQL server unavailable: {}", db.message()))
    } else {
        StorageError::Engine(format!("PostgreSQL: {} ({})", db.message(), code.code()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_need_no_quoting() {
        assert!(valid_schema("shardgate"));
        assert!(valid_schema("sgt_0a9f"));
        assert!(!valid_schema("Shardgate"));
        assert!(!valid_schema("9lives"));
        assert!(!valid_schema("a\"b"));
        assert!(!valid_schema(""));
    }

    #[test]
    fn a_batch_keeps_the_last_change_of_each_key() {
        use crate::storage::RecordKey;
        let mut batch = ServerBatch::default();
        let key = RecordKey::new(3, 7, b"id".to_vec());
        batch.push(WriteOp::PutRecord(key.clone(), b"one".to_vec()));
        batch.push(WriteOp::DeleteRecord(key.clone()));
        batch.push(WriteOp::PutRecord(key, b"two".to_vec()));
        batch.push(WriteOp::PutIdEntry {
            collection: 3,
            id: b"id".to_vec(),
            hash: 7,
        });
        let (dels, puts) = split(batch.records);
        assert!(dels.is_empty());
        assert_eq!(puts, vec![((3, 7, b"id".to_vec()), b"two".to_vec())]);
    }

    #[test]
    fn pages_resume_after_the_last_key_read() {
        let sql = Sql::new("sg");
        let q = sql.records_page(1, -5, 5, &None, &Some((2, b"k".to_vec())), false, 100);
        assert!(q.sql.contains("(hash, id) > ($4, $5)"), "{}", q.sql);
        assert!(q.sql.ends_with("ORDER BY hash, id LIMIT $6"), "{}", q.sql);
        let q = sql.ids_page(
            1,
            Bound::Excluded(b"a".to_vec()),
            Bound::Unbounded,
            true,
            10,
        );
        assert!(q.sql.contains("id > $2"), "{}", q.sql);
        assert!(q.sql.contains("ORDER BY id DESC"), "{}", q.sql);
    }
}
