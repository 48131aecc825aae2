//! Request charges: what each operation costs in request units (RU), as
//! Cosmos DB charges them. Sits in the router, where the work happens:
//! the executor and the write batches report each document they load,
//! return or write, for the partition that did it, to the [`Meter`] of
//! the operation being served; `commands` installs one meter per command
//! ([`scoped`]) and reads the charge back when the command is done.
//!
//! The model is a set of pure functions of the work done (documents and
//! their bytes, index entries, partitions touched), never of time, so the
//! same operation on the same data is charged the same. It is calibrated
//! to Cosmos DB's published figures (a point read of a 1 KB document costs
//! 1 RU, of 100 KB 10 RU; an insert of 1 KB about 5.5 RU) and documented
//! in `docs/REQUEST_UNITS.md`. Charges add up in micro-RU (integers), so
//! a sum does not depend on the order the partitions reported in.
//!
//! The meter is found like the operation's interrupt check
//! ([`crate::query::interrupt`]): a thread-local installed around the
//! command's future and taken along to pool threads by the fan-out
//! ([`super::merge::run_parallel`]). A cursor's stream records into the
//! meter of whichever command pulls it (the `find` or a `getMore`), so
//! each page is charged for the work done for it, and the pages sum to
//! the charge of one page holding everything.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;

/// Micro-RU in one RU: charges are integers of these.
pub const MICRO: u64 = 1_000_000;

/// Bytes in the "KB" of Cosmos DB's figures.
const KB: u64 = 1024;

/// Per physical partition a query (anything but a point read) reads: 2.5
/// RU, so each partition a query fans out to beyond the first adds 2.5.
pub const PARTITION_QUERY: u64 = 2_500_000;
/// Per document a query loads: 0.1 RU plus [`DOC_LOAD_PER_KB`].
pub const DOC_LOAD: u64 = 100_000;
/// Per KB of documents a query loads.
pub const DOC_LOAD_PER_KB: u64 = 100_000;
/// Per document reached through a secondary index (the index lookup).
pub const INDEX_LOOKUP: u64 = 50_000;
/// Per KB of documents returned to the client by a query.
pub const RETURNED_PER_KB: u64 = 100_000;
/// Writing a document of up to 1 KB (scaled by [`size_factor`]).
pub const WRITE: u64 = 5_000_000;
/// Per index entry a write puts or removes (the `_id` entry is one).
pub const INDEX_ENTRY_WRITE: u64 = 500_000;

/// How a document's cost grows with its size, in micro-units: 1 up to
/// 1 KB, then linearly so that 100 KB is 10 (Cosmos DB's point reads).
pub fn size_factor(bytes: usize) -> u64 {
    let bytes = bytes as u64;
    if bytes <= KB {
        return MICRO;
    }
    // (bytes - 1 KB) / 99 KB * 9, in micro-units; exact at 100 KB.
    MICRO + (bytes - KB).saturating_mul(9 * MICRO) / (99 * KB)
}

/// A point read (a document fetched by `_id` and shard key): 1 RU for
/// 1 KB, 10 for 100 KB; a miss costs what a 1 KB read does.
pub fn point_read(bytes: Option<usize>) -> u64 {
    size_factor(bytes.unwrap_or(0))
}

/// A document a query loads (or a write's filter examines).
pub fn doc_loaded(bytes: usize) -> u64 {
    DOC_LOAD + (bytes as u64).saturating_mul(DOC_LOAD_PER_KB) / KB
}

/// Bytes a query returns.
pub fn returned(bytes: usize) -> u64 {
    (bytes as u64).saturating_mul(RETURNED_PER_KB) / KB
}

/// Inserting (or deleting) a document of `bytes` that has `entries` index
/// entries (the `_id` entry included): 5.5 RU for 1 KB with only `_id`.
pub fn insert(bytes: usize, entries: usize) -> u64 {
    WRITE * size_factor(bytes) / MICRO + INDEX_ENTRY_WRITE * entries as u64
}

/// Replacing (updating) a document: twice the write of the new version,
/// plus the index entries that changed and the `_id` entry.
pub fn replace(bytes: usize, entries_changed: usize) -> u64 {
    2 * WRITE * size_factor(bytes) / MICRO + INDEX_ENTRY_WRITE * (1 + entries_changed as u64)
}

/// A charge as clients see it (`RequestCharge`): RU rounded half up to
/// two decimals, from integers, so equal work always shows equal.
pub fn request_charge(micro: u64) -> f64 {
    (micro.saturating_add(5_000) / 10_000) as f64 / 100.0
}

/// What one partition of one collection was charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionCharge {
    pub collection: u64,
    /// The partition's id (0 for an unsharded collection's one partition).
    pub partition: u64,
    pub micro: u64,
}

/// The charges of one operation (one command), per partition, and what
/// it examined and returned, for the profiler and `currentOp`.
#[derive(Debug, Default)]
pub struct Meter {
    /// Few entries (the partitions one operation touches): a list.
    parts: Mutex<Vec<PartitionCharge>>,
    work: Mutex<Work>,
    /// Set when the plan's summary is wanted (the profiler is on): it
    /// costs a string per query otherwise spared.
    wants_plan: std::sync::atomic::AtomicBool,
    plan: std::sync::OnceLock<String>,
}

/// What an operation examined and returned, as MongoDB's profiler and
/// slow-query log report it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Index entries read (`keysExamined`).
    pub keys_examined: u64,
    /// Documents loaded to test against the filter (`docsExamined`).
    pub docs_examined: u64,
    /// Documents put in reply batches (`nreturned`).
    pub returned: u64,
}

impl Work {
    fn add(&mut self, other: Work) {
        self.keys_examined += other.keys_examined;
        self.docs_examined += other.docs_examined;
        self.returned += other.returned;
    }

    fn is_empty(&self) -> bool {
        *self == Work::default()
    }
}

impl Meter {
    pub fn new() -> Arc<Meter> {
        Arc::new(Meter::default())
    }

    /// Adds `micro` to what `partition` of `collection` is charged.
    pub fn add(&self, collection: u64, partition: u64, micro: u64) {
        let mut parts = self.parts.lock();
        match parts
            .iter_mut()
            .find(|p| p.partition == partition && p.collection == collection)
        {
            Some(p) => p.micro = p.micro.saturating_add(micro),
            None => parts.push(PartitionCharge {
                collection,
                partition,
                micro,
            }),
        }
    }

    /// Asks the planner for the plan's summary ([`note_plan`]).
    pub fn want_plan_summary(&self) {
        self.wants_plan
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The summary of the first plan this operation ran, when asked for.
    pub fn plan_summary(&self) -> Option<&str> {
        self.plan.get().map(String::as_str)
    }

    /// What the operation examined and returned so far.
    pub fn work(&self) -> Work {
        *self.work.lock()
    }

    /// The charges so far, per partition.
    pub fn charges(&self) -> Vec<PartitionCharge> {
        self.parts.lock().clone()
    }

    /// The total so far, in micro-RU.
    pub fn total(&self) -> u64 {
        self.parts.lock().iter().map(|p| p.micro).sum()
    }

    /// What `partition` of `collection` was charged so far.
    pub fn of(&self, collection: u64, partition: u64) -> u64 {
        self.parts
            .lock()
            .iter()
            .filter(|p| p.collection == collection && p.partition == partition)
            .map(|p| p.micro)
            .sum()
    }

    /// Moves everything charged here onto `other`.
    pub fn forward_to(&self, other: &Meter) {
        for p in std::mem::take(&mut *self.parts.lock()) {
            other.add(p.collection, p.partition, p.micro);
        }
        let work = std::mem::take(&mut *self.work.lock());
        other.work.lock().add(work);
    }
}

/// The thread's current meter, and the charge it has not yet handed to
/// it: a scan charges every record it reads, so charges to the same
/// partition add up here, without the meter's lock, until the partition
/// changes, the meter is read on this thread, or it stops being current.
#[derive(Default)]
struct Current {
    meter: Option<Arc<Meter>>,
    pending: Option<PartitionCharge>,
    work: Work,
}

impl Current {
    fn flush(&mut self) {
        if let (Some(p), Some(m)) = (self.pending.take(), &self.meter) {
            m.add(p.collection, p.partition, p.micro);
        }
        if !self.work.is_empty() {
            let work = std::mem::take(&mut self.work);
            if let Some(m) = &self.meter {
                m.work.lock().add(work);
            }
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Current> = RefCell::new(Current::default());
}

/// Charges `micro` to `partition` of `collection` on the current
/// operation's meter; nothing when no operation is metered.
#[inline]
pub fn charge(collection: u64, partition: u64, micro: u64) {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.meter.is_none() {
            return;
        }
        match &mut c.pending {
            Some(p) if p.partition == partition && p.collection == collection => {
                p.micro = p.micro.saturating_add(micro);
            }
            _ => {
                c.flush();
                c.pending = Some(PartitionCharge {
                    collection,
                    partition,
                    micro,
                });
            }
        }
    });
}

/// Counts what the current operation examined or returned (see
/// [`Work`]); nothing when no operation is metered.
#[inline]
pub fn count(f: impl FnOnce(&mut Work)) {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.meter.is_some() {
            f(&mut c.work);
        }
    });
}

/// Records the summary of the plan the current operation runs
/// (`planSummary`): the first one, and only when the meter asks.
pub fn note_plan(summary: impl FnOnce() -> String) {
    CURRENT.with(|c| {
        let c = c.borrow();
        if let Some(m) = &c.meter {
            if m.wants_plan.load(std::sync::atomic::Ordering::Relaxed) && m.plan.get().is_none() {
                let _ = m.plan.set(summary());
            }
        }
    });
}

/// The meter the current thread charges, with everything charged on
/// this thread so far, to read or to take to another thread.
pub fn current() -> Option<Arc<Meter>> {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        c.flush();
        c.meter.clone()
    })
}

/// Makes `meter` the current thread's meter until the guard drops.
pub fn enter(meter: Option<Arc<Meter>>) -> Entered {
    let previous = CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        c.flush();
        std::mem::replace(&mut c.meter, meter)
    });
    Entered {
        previous,
        _not_send: std::marker::PhantomData,
    }
}

/// Hands the thread's pending charge to its meter and restores the
/// previous meter when dropped.
pub struct Entered {
    previous: Option<Arc<Meter>>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            c.flush();
            c.meter = previous;
        });
    }
}

/// Runs `fut` with `meter` current during each of its polls, whichever
/// thread polls it.
pub async fn scoped<F: Future>(meter: &Arc<Meter>, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        let _entered = enter(Some(meter.clone()));
        fut.as_mut().poll(cx)
    })
    .await
}

/// Runs `f` with a meter of its own and returns what it charged with its
/// result; the charges then go on to the meter that was current.
pub fn measured<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let outer = current();
    let own = Meter::new();
    if let Some(outer) = &outer {
        let wants = outer.wants_plan.load(std::sync::atomic::Ordering::Relaxed);
        own.wants_plan
            .store(wants, std::sync::atomic::Ordering::Relaxed);
    }
    let value = {
        let _entered = enter(Some(own.clone()));
        f()
    };
    let total = own.total();
    if let Some(outer) = outer {
        own.forward_to(&outer);
        if let Some(plan) = own.plan.get() {
            let _ = outer.plan.set(plan.clone());
        }
    }
    (value, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_reads_cost_one_ru_per_kb_up_to_ten_at_100_kb() {
        assert_eq!(request_charge(point_read(Some(1024))), 1.0);
        assert_eq!(request_charge(point_read(Some(200))), 1.0);
        assert_eq!(request_charge(point_read(None)), 1.0);
        assert_eq!(request_charge(point_read(Some(100 * 1024))), 10.0);
        let mid = request_charge(point_read(Some(50 * 1024)));
        assert!(mid > 1.0 && mid < 10.0, "{mid}");
    }

    #[test]
    fn an_insert_of_1_kb_costs_5_5_and_each_index_entry_more() {
        assert_eq!(request_charge(insert(1024, 1)), 5.5);
        assert_eq!(request_charge(insert(1024, 2)), 6.0);
        assert!(insert(10 * 1024, 1) > insert(1024, 1));
    }

    #[test]
    fn a_replace_costs_about_twice_an_insert() {
        let ratio = replace(1024, 0) as f64 / insert(1024, 1) as f64;
        assert!((1.8..=2.1).contains(&ratio), "{ratio}");
        assert_eq!(request_charge(replace(1024, 0)), 10.5);
    }

    #[test]
    fn charges_round_half_up_to_two_decimals() {
        assert_eq!(request_charge(0), 0.0);
        assert_eq!(request_charge(4_999), 0.0);
        assert_eq!(request_charge(5_000), 0.01);
        assert_eq!(request_charge(1_234_567), 1.23);
        assert_eq!(request_charge(2_995_000), 3.0);
    }

    #[test]
    fn the_meter_sums_per_partition_in_any_order() {
        let a = Meter::new();
        a.add(1, 2, 10);
        a.add(1, 3, 5);
        a.add(1, 2, 7);
        let b = Meter::new();
        b.add(1, 3, 5);
        b.add(1, 2, 7);
        b.add(1, 2, 10);
        assert_eq!(a.total(), b.total());
        assert_eq!(a.of(1, 2), 17);
        assert_eq!(b.of(1, 3), 5);
    }

    #[test]
    fn charges_go_to_the_current_meter_and_measured_forwards_them() {
        charge(1, 0, 5); // no meter: dropped
        let outer = Meter::new();
        let _in = enter(Some(outer.clone()));
        charge(1, 0, 5);
        let ((), inner) = measured(|| charge(1, 1, 7));
        assert_eq!(inner, 7);
        assert_eq!(outer.total(), 12);
    }
}
