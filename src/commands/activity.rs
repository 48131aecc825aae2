//! What the commands layer keeps about operations as they finish, below
//! the handlers and the shared state that holds it: each command's kind
//! (`query`, `insert` …, as `currentOp`, the profiler and `top` name
//! it), the profiler's settings, and `top`'s time per collection.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Document};
use dashmap::DashMap;

use crate::query::filter::Filter;

/// The kind of operation a command is, as `currentOp`, the profiler and
/// `top` name it.
pub fn op_kind(command: &str) -> &'static str {
    match command {
        "find" => "query",
        "insert" => "insert",
        "update" => "update",
        "delete" => "remove",
        "getMore" => "getmore",
        _ => "command",
    }
}

/// The profiler's settings.
pub struct Profiler {
    /// Databases whose level is above 0: while none is, a request's check
    /// is this one load.
    active: AtomicUsize,
    databases: DashMap<String, DbProfile>,
    slow_ms: AtomicU64,
    /// The bits of an `f64` in 0..=1.
    sample_rate: AtomicU64,
}

/// One database's profiling level and filter.
#[derive(Clone)]
pub(super) struct DbProfile {
    pub level: i32,
    /// The filter as given, and parsed.
    pub filter: Option<(Document, Arc<Filter>)>,
}

impl Profiler {
    pub fn new(slow_ms: u64) -> Profiler {
        Profiler {
            active: AtomicUsize::new(0),
            databases: DashMap::new(),
            slow_ms: AtomicU64::new(slow_ms),
            sample_rate: AtomicU64::new(1.0f64.to_bits()),
        }
    }

    /// Operations at least this slow are slow (logged, and profiled at
    /// level 1).
    pub fn slow_ms(&self) -> u64 {
        self.slow_ms.load(Ordering::Relaxed)
    }

    pub fn sample_rate(&self) -> f64 {
        f64::from_bits(self.sample_rate.load(Ordering::Relaxed))
    }

    /// Whether operations on `db` may be profiled (its level is above 0).
    pub fn watches(&self, db: &str) -> bool {
        self.active.load(Ordering::Relaxed) > 0 && self.level(db) > 0
    }

    fn level(&self, db: &str) -> i32 {
        self.databases.get(db).map_or(0, |p| p.level)
    }

    /// `db`'s settings (level 0 and no filter until set).
    pub(super) fn of(&self, db: &str) -> DbProfile {
        self.databases
            .get(db)
            .map(|p| p.clone())
            .unwrap_or(DbProfile {
                level: 0,
                filter: None,
            })
    }

    pub(super) fn set_slow_ms(&self, ms: u64) {
        self.slow_ms.store(ms, Ordering::Relaxed);
    }

    pub(super) fn set_sample_rate(&self, rate: f64) {
        self.sample_rate.store(rate.to_bits(), Ordering::Relaxed);
    }

    /// Whether an operation on `db` that took `elapsed` is recorded;
    /// `entry` is its profile document, which a filter is matched to.
    pub(super) fn keeps(&self, db: &str, elapsed: Duration, entry: &Document) -> bool {
        let Some(profile) = self.databases.get(db).map(|p| p.clone()) else {
            return false;
        };
        match (profile.level, &profile.filter) {
            (2, _) => true,
            (1, Some((_, filter))) => filter.matches(entry),
            (1, None) => {
                elapsed.as_millis() >= u128::from(self.slow_ms())
                    && rand::random::<f64>() < self.sample_rate()
            }
            _ => false,
        }
    }

    pub(super) fn set(&self, db: &str, profile: DbProfile) {
        let was = self.level(db);
        match (was > 0, profile.level > 0) {
            (false, true) => {
                self.active.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                self.active.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        self.databases.insert(db.to_string(), profile);
    }
}

/// Time and count per collection and kind of operation, for `top`.
#[derive(Default)]
pub struct Top {
    namespaces: DashMap<String, TopEntry>,
}

/// Namespaces `top` keeps at most: a client naming endless collections
/// that do not exist cannot grow it without bound.
const TOP_NAMESPACES: usize = 10_000;

/// `top`'s fields, in its order.
const TOP_FIELDS: [&str; 9] = [
    "total",
    "readLock",
    "writeLock",
    "queries",
    "getmore",
    "insert",
    "update",
    "remove",
    "commands",
];

#[derive(Default)]
struct TopEntry {
    /// `(microseconds, count)` per field of [`TOP_FIELDS`].
    fields: [(AtomicU64, AtomicU64); 9],
}

impl TopEntry {
    fn add(&self, field: usize, elapsed: Duration) {
        let (time, count) = &self.fields[field];
        time.fetch_add(
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        count.fetch_add(1, Ordering::Relaxed);
    }
}

impl Top {
    /// Counts one command `name` on collection namespace `ns`.
    pub fn record(&self, ns: &str, name: &str, elapsed: Duration) {
        let kind = match op_kind(name) {
            "query" => 3,
            "getmore" => 4,
            "insert" => 5,
            "update" => 6,
            "remove" => 7,
            _ => 8,
        };
        let lock = match name {
            "insert" | "update" | "delete" | "findAndModify" | "findandmodify" => 2,
            _ => 1,
        };
        let record = |entry: &TopEntry| {
            entry.add(0, elapsed);
            entry.add(lock, elapsed);
            entry.add(kind, elapsed);
        };
        if let Some(entry) = self.namespaces.get(ns) {
            record(&entry);
            return;
        }
        if self.namespaces.len() >= TOP_NAMESPACES {
            return;
        }
        record(&self.namespaces.entry(ns.to_string()).or_default());
    }

    /// Forgets the namespaces `keep` refuses (dropped collections).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.namespaces.retain(|ns, _| keep(ns));
    }

    /// `top`'s `totals`.
    pub(super) fn totals(&self) -> Document {
        let mut names: Vec<String> = self.namespaces.iter().map(|e| e.key().clone()).collect();
        names.sort();
        let mut totals = doc! {"note": "all times in microseconds"};
        for ns in names {
            let Some(entry) = self.namespaces.get(&ns) else {
                continue;
            };
            let mut fields = Document::new();
            for (name, (time, count)) in TOP_FIELDS.iter().zip(&entry.fields) {
                fields.insert(
                    *name,
                    doc! {
                        "time": time.load(Ordering::Relaxed) as i64,
                        "count": count.load(Ordering::Relaxed) as i64,
                    },
                );
            }
            totals.insert(ns, fields);
        }
        totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_one_keeps_slow_operations_and_a_filter_replaces_slowms() {
        let p = Profiler::new(100);
        assert!(!p.watches("db"));
        p.set(
            "db",
            DbProfile {
                level: 1,
                filter: None,
            },
        );
        assert!(p.watches("db"));
        assert!(!p.watches("other"));
        let entry = doc! {"op": "query", "millis": 5};
        assert!(!p.keeps("db", Duration::from_millis(5), &entry));
        assert!(p.keeps("db", Duration::from_millis(150), &entry));
        let filter = doc! {"op": "query"};
        p.set(
            "db",
            DbProfile {
                level: 1,
                filter: Some((filter.clone(), Arc::new(Filter::parse(&filter).unwrap()))),
            },
        );
        assert!(p.keeps("db", Duration::from_millis(5), &entry));
        assert!(!p.keeps("db", Duration::from_millis(500), &doc! {"op": "insert"}));
        p.set(
            "db",
            DbProfile {
                level: 0,
                filter: None,
            },
        );
        assert!(!p.watches("db"));
        assert_eq!(p.active.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn top_counts_time_by_lock_and_kind() {
        let top = Top::default();
        top.record("db.c", "find", Duration::from_micros(10));
        top.record("db.c", "insert", Duration::from_micros(30));
        top.record("db.c", "count", Duration::from_micros(5));
        let totals = top.totals();
        let c = totals.get_document("db.c").unwrap();
        let field = |name: &str| {
            let f = c.get_document(name).unwrap();
            (f.get_i64("time").unwrap(), f.get_i64("count").unwrap())
        };
        assert_eq!(field("total"), (45, 3));
        assert_eq!(field("readLock"), (15, 2));
        assert_eq!(field("writeLock"), (30, 1));
        assert_eq!(field("queries"), (10, 1));
        assert_eq!(field("insert"), (30, 1));
        assert_eq!(field("commands"), (5, 1));
        assert_eq!(field("remove"), (0, 0));
        top.retain(|ns| ns != "db.c");
        assert!(top.totals().get("db.c").is_none());
    }

    #[test]
    fn commands_are_named_as_mongodb_names_their_operations() {
        assert_eq!(op_kind("find"), "query");
        assert_eq!(op_kind("delete"), "remove");
        assert_eq!(op_kind("getMore"), "getmore");
        assert_eq!(op_kind("aggregate"), "command");
    }
}
