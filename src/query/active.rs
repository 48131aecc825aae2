//! The operations running now, as `currentOp` lists them and `killOp`
//! stops them: every client command while it runs, and the server's own
//! long work (partition splits, TTL passes).
//!
//! An operation is listed by [`ActiveOps::register`] and stays listed
//! until the returned guard drops. What it is (kind, namespace, command,
//! client) is fixed when it is listed; how far it has come is read from
//! its [`Operation`] (see [`super::interrupt::report_progress`]), which
//! is also what `killOp` stops.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bson::Document;
use dashmap::DashMap;

use super::interrupt::Operation;

/// The operations running now, by operation id.
#[derive(Default)]
pub struct ActiveOps {
    next: AtomicU32,
    ops: DashMap<u32, Arc<ActiveOp>>,
}

/// One running operation, as `currentOp` shows it.
pub struct ActiveOp {
    /// `opid`: what `killOp` takes.
    pub opid: u32,
    /// `op`: `query`, `insert`, `update`, `remove`, `getmore`,
    /// `command`, or `none` for the server's own work.
    pub op: &'static str,
    /// `ns`: `db.collection`, or `db.$cmd`.
    pub ns: String,
    pub command: Document,
    /// `desc`: `conn12`, or the name of the server's task.
    pub desc: String,
    pub client: Option<Client>,
    pub started: Instant,
    pub started_at: bson::DateTime,
    pub operation: Arc<Operation>,
}

/// The connection an operation came on.
#[derive(Debug, Clone)]
pub struct Client {
    pub connection_id: u64,
    /// `host:port` of the peer.
    pub address: String,
    pub app_name: Option<String>,
}

/// What to list: see [`ActiveOps::register`].
pub struct Listing {
    pub op: &'static str,
    pub ns: String,
    pub command: Document,
    pub desc: String,
    pub client: Option<Client>,
}

impl ActiveOps {
    /// Lists `operation` until the guard drops.
    pub fn register(self: &Arc<Self>, listing: Listing, operation: Arc<Operation>) -> Registered {
        // Ids wrap after 4 billion operations; 0 is never given.
        let opid = loop {
            let id = self.next.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            if id != 0 && !self.ops.contains_key(&id) {
                break id;
            }
        };
        let op = Arc::new(ActiveOp {
            opid,
            op: listing.op,
            ns: listing.ns,
            command: listing.command,
            desc: listing.desc,
            client: listing.client,
            started: Instant::now(),
            started_at: bson::DateTime::now(),
            operation,
        });
        self.ops.insert(opid, op);
        Registered {
            ops: self.clone(),
            opid,
        }
    }

    /// Every operation running now, oldest first.
    pub fn list(&self) -> Vec<Arc<ActiveOp>> {
        let mut all: Vec<Arc<ActiveOp>> = self.ops.iter().map(|e| e.value().clone()).collect();
        all.sort_by_key(|op| (op.started, op.opid));
        all
    }

    /// Asks operation `opid` to stop at its next check; false when no
    /// such operation runs.
    pub fn kill(&self, opid: u32) -> bool {
        match self.ops.get(&opid) {
            Some(op) => {
                op.operation.kill();
                true
            }
            None => false,
        }
    }

    /// How many operations run now.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Keeps an operation listed; unlists it when dropped.
pub struct Registered {
    ops: Arc<ActiveOps>,
    opid: u32,
}

impl Registered {
    pub fn opid(&self) -> u32 {
        self.opid
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.ops.ops.remove(&self.opid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn listing(ns: &str) -> Listing {
        Listing {
            op: "query",
            ns: ns.to_string(),
            command: doc! {"find": "c"},
            desc: "conn1".to_string(),
            client: None,
        }
    }

    #[test]
    fn an_operation_is_listed_while_its_guard_lives() {
        let ops = Arc::new(ActiveOps::default());
        let first = ops.register(listing("db.a"), Operation::new(None, None));
        let second = ops.register(listing("db.b"), Operation::new(None, None));
        assert_ne!(first.opid(), second.opid());
        let listed: Vec<String> = ops.list().iter().map(|op| op.ns.clone()).collect();
        assert_eq!(listed, ["db.a", "db.b"]);
        drop(first);
        assert_eq!(ops.len(), 1);
        assert_eq!(ops.list()[0].opid, second.opid());
        drop(second);
        assert!(ops.is_empty());
    }

    #[test]
    fn kill_stops_the_operation_and_an_unknown_id_is_reported() {
        let ops = Arc::new(ActiveOps::default());
        let operation = Operation::new(None, None);
        let listed = ops.register(listing("db.a"), operation.clone());
        assert!(ops.kill(listed.opid()));
        assert!(operation.is_stopping());
        assert_eq!(
            operation.stopped().unwrap_err().code,
            crate::error::ErrorCode::Interrupted
        );
        assert!(!ops.kill(listed.opid() + 1000));
    }
}
