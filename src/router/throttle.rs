//! Provisioned throughput and its enforcement: each physical partition of
//! a collection with provisioned RU/s gets an even share of them (at most
//! [`PARTITION_MAX_RUS`]) as a token [`Bucket`] holding one second of its
//! share. Sits in the router beside the charge model ([`super::charge`]):
//! an operation is admitted ([`Router::admit`]) before it touches a
//! partition whose bucket is not empty, and pays what it was charged
//! after its work ([`Router::settle`]), so an expensive operation drives
//! its bucket below zero and the next one is told truthfully how long to
//! wait (`RetryAfterMs`).
//!
//! Every partition also counts what it consumed and how often it was
//! throttled, for `collStats` and `serverStatus`, provisioned or not. A
//! collection without provisioned throughput is never throttled: its
//! operations pay one shared-map read and an atomic add, no lock. With
//! the HTTP side port ([`Router::track_activity`]) each partition also
//! counts the reads and writes that touched it and how many of them
//! touched other partitions of its collection too (fan-outs): two more
//! atomic adds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use parking_lot::Mutex;

use super::catalog::Collection;
use super::charge::{PartitionCharge, MICRO};
use super::Router;
use crate::error::{Error, ErrorCode, Result};
use crate::partition::throughput::PARTITION_MAX_RUS;

/// Seconds of unused share an idle partition banks with burst capacity.
pub const BURST_SECONDS: u64 = 300;
/// Fastest rate (RU/s) a partition spends banked burst capacity at.
pub const BURST_RUS: u64 = 3_000;
/// How long server-side retry keeps a throttled request waiting before it
/// fails with `ExceededTimeLimit`.
pub const SERVER_SIDE_RETRY_LIMIT: Duration = Duration::from_secs(60);

const NANOS: u64 = 1_000_000_000;

/// Throughput settings that hold for every collection.
#[derive(Debug, Clone, Default)]
pub struct ThroughputOptions {
    /// RU/s of a collection with no throughput of its own; `None`: such
    /// collections are not throttled.
    pub default_rus: Option<u32>,
    /// Idle partitions bank unused share ([`BURST_SECONDS`]) and spend it
    /// at up to [`BURST_RUS`].
    pub burst_capacity: bool,
    /// A throttled request waits and retries, for up to
    /// [`SERVER_SIDE_RETRY_LIMIT`], instead of failing with 16500.
    pub server_side_retry: bool,
}

/// One partition's budget: tokens in micro-RU, refilled at its share.
/// Times are nanoseconds of a monotonic clock the caller passes in (tests
/// pass their own).
#[derive(Debug, Clone)]
pub struct Bucket {
    /// The share, in RU/s.
    rate: u64,
    /// Micro-RU available; below zero after an operation that cost more
    /// than was left.
    tokens: i64,
    /// Banked unused share (burst capacity), in micro-RU.
    bank: i64,
    /// How much of the bank may be spent now: refilled at
    /// `BURST_RUS - rate`, so a bursting partition serves at most
    /// `BURST_RUS` in all.
    burst_tokens: i64,
    burst: bool,
    at: u64,
}

/// Micro-RU refilled at `rate` RU/s over `nanos`.
fn refill_amount(rate: u64, nanos: u64) -> i64 {
    let micro = (rate as u128) * (nanos as u128) * (MICRO as u128) / (NANOS as u128);
    i64::try_from(micro).unwrap_or(i64::MAX)
}

impl Bucket {
    /// A full bucket (one second of `rate`) at time `now`.
    pub fn new(rate: u32, burst: bool, now: u64) -> Bucket {
        let rate = rate as u64;
        Bucket {
            rate,
            tokens: (rate * MICRO) as i64,
            bank: 0,
            burst_tokens: 0,
            burst,
            at: now,
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate
    }

    fn capacity(&self) -> i64 {
        (self.rate * MICRO) as i64
    }

    fn burst_rate(&self) -> u64 {
        BURST_RUS.saturating_sub(self.rate)
    }

    fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.at);
        self.at = self.at.max(now);
        if elapsed == 0 {
            return;
        }
        let filled = self
            .tokens
            .saturating_add(refill_amount(self.rate, elapsed));
        let cap = self.capacity();
        if filled > cap {
            if self.burst {
                let most = (self.rate * BURST_SECONDS * MICRO) as i64;
                self.bank = self.bank.saturating_add(filled - cap).min(most);
            }
            self.tokens = cap;
        } else {
            self.tokens = filled;
        }
        if self.burst {
            let rate = self.burst_rate();
            self.burst_tokens = self
                .burst_tokens
                .saturating_add(refill_amount(rate, elapsed))
                .min((rate * MICRO) as i64);
        }
    }

    /// Changes the share, keeping the fraction of a second held.
    pub fn rescale(&mut self, rate: u32, now: u64) {
        self.refill(now);
        let old = self.rate.max(1) as i128;
        let new = rate as i128;
        self.tokens = i64::try_from(self.tokens as i128 * new / old).unwrap_or(0);
        self.bank = self.bank.min((rate as u64 * BURST_SECONDS * MICRO) as i64);
        self.rate = rate as u64;
    }

    fn can_burst(&self, pending: i64) -> bool {
        self.burst && self.bank > pending && self.burst_tokens > 0
    }

    /// Whether an operation may start now, with `pending` micro-RU already
    /// charged to this partition by the same operation; if not, the
    /// milliseconds until it could.
    pub fn admit(&mut self, now: u64, pending: u64) -> std::result::Result<(), u64> {
        self.refill(now);
        let pending = i64::try_from(pending).unwrap_or(i64::MAX);
        if self.tokens > pending || self.can_burst(pending) {
            return Ok(());
        }
        Err(self.wait_millis(pending))
    }

    /// Milliseconds until the tokens pass `pending`.
    fn wait_millis(&self, pending: i64) -> u64 {
        if self.rate == 0 {
            return 1000;
        }
        let missing = (pending as i128 - self.tokens as i128 + 1).max(1) as u128;
        // missing micro-RU / (rate RU/s) in ms, rounded up.
        let per_ms = self.rate as u128 * MICRO as u128;
        let ms = (missing * 1000).div_ceil(per_ms);
        u64::try_from(ms).unwrap_or(u64::MAX).max(1)
    }

    /// Pays `micro` at `now`: from the share while it lasts, then from
    /// the burst bank.
    pub fn pay(&mut self, now: u64, micro: u64) {
        self.refill(now);
        let micro = i64::try_from(micro).unwrap_or(i64::MAX);
        if self.tokens <= 0 && self.can_burst(0) {
            self.bank = self.bank.saturating_sub(micro);
            self.burst_tokens = self.burst_tokens.saturating_sub(micro);
        } else {
            self.tokens = self.tokens.saturating_sub(micro);
        }
    }

    /// Micro-RU available now (may be negative).
    pub fn tokens(&self) -> i64 {
        self.tokens
    }
}

/// One partition's figures and, when provisioned, its bucket.
#[derive(Debug, Default)]
pub struct PartitionBudget {
    consumed: AtomicU64,
    throttled: AtomicU64,
    /// Commands that read (or wrote) it, with activity tracked.
    reads: AtomicU64,
    writes: AtomicU64,
    /// Those of them that touched another partition of its collection.
    fanouts: AtomicU64,
    /// Set once the bucket exists: an unprovisioned partition's
    /// operations never take its lock.
    has_bucket: AtomicBool,
    bucket: Mutex<Option<Bucket>>,
}

impl PartitionBudget {
    fn activity(&self, (collection, partition): (u64, u64)) -> PartitionActivity {
        PartitionActivity {
            collection,
            partition,
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            fanouts: self.fanouts.load(Ordering::Relaxed),
            consumed_micro: self.consumed.load(Ordering::Relaxed),
            throttled: self.throttled.load(Ordering::Relaxed),
        }
    }
}

/// What `collStats` shows of one partition.
#[derive(Debug, Clone, Copy, Default)]
pub struct PartitionUnits {
    /// Its share of the provisioned RU/s; 0 when not provisioned.
    pub provisioned: u64,
    /// RU charged to it so far.
    pub consumed: f64,
    /// Requests refused (16500) for it.
    pub throttled: u64,
}

/// What one partition took part in since start, for the side port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionActivity {
    pub collection: u64,
    pub partition: u64,
    /// Commands that read it, and that wrote it (insert, update, delete,
    /// findAndModify), each counted once however much it did there.
    pub reads: u64,
    pub writes: u64,
    /// Those reads and writes that touched another partition of the same
    /// collection too.
    pub fanouts: u64,
    /// Micro-RU charged to it.
    pub consumed_micro: u64,
    pub throttled: u64,
}

/// Totals for `serverStatus`.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitTotals {
    pub consumed: f64,
    pub throttled: u64,
    pub operations: u64,
}

/// Every partition's budget, by (collection id, partition id).
#[derive(Default)]
pub struct Budgets {
    parts: DashMap<(u64, u64), Arc<PartitionBudget>>,
    operations: AtomicU64,
    throttled: AtomicU64,
}

/// Nanoseconds of the process's monotonic clock.
pub fn now_nanos() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The error a throttled request gets, in Cosmos DB's shape.
pub fn too_many_requests(retry_after_ms: u64) -> Error {
    let activity = bson::Uuid::new();
    Error::new(
        ErrorCode::TooManyRequests,
        format!(
            "Error=16500, RetryAfterMs={retry_after_ms}, Details='Response status code does not indicate success: TooManyRequests (429); Substatus: 3200; ActivityId: {activity}; Reason: (Message: Request rate is large. More Request Units may be needed, so no changes were made. Please retry this request later. Learn more: http://aka.ms/cosmosdb-error-429)'"
        ),
    )
}

impl Budgets {
    fn get(&self, collection: u64, partition: u64) -> Arc<PartitionBudget> {
        if let Some(b) = self.parts.get(&(collection, partition)) {
            return b.clone();
        }
        self.parts
            .entry((collection, partition))
            .or_default()
            .clone()
    }
}

impl Router {
    /// Each partition's share of `coll`'s throughput; `None` when it has
    /// none.
    fn share(&self, coll: &Collection) -> Option<u32> {
        let rus = self.provisioned_rus(coll)?;
        let partitions = match &coll.sharding {
            Some(s) => s.map().partitions.len().max(1),
            None => 1,
        };
        let partitions = u32::try_from(partitions).unwrap_or(u32::MAX);
        Some((rus / partitions).clamp(1, PARTITION_MAX_RUS))
    }

    /// Checks that every partition in `parts` may take an operation now,
    /// given what this operation already owes each (`pending`); fails
    /// with 16500 and the longest wait otherwise.
    pub fn admit_now(
        &self,
        coll: &Collection,
        parts: &[u64],
        pending: impl Fn(u64) -> u64,
    ) -> Result<()> {
        let Some(share) = self.share(coll) else {
            return Ok(());
        };
        let burst = self.options.throughput.burst_capacity;
        let now = now_nanos();
        let mut wait = None::<u64>;
        for &p in parts {
            let budget = self.budgets.get(coll.id, p);
            let mut bucket = budget.bucket.lock();
            let bucket = bucket.get_or_insert_with(|| {
                budget.has_bucket.store(true, Ordering::Release);
                Bucket::new(share, burst, now)
            });
            if bucket.rate() != share as u64 {
                bucket.rescale(share, now);
            }
            if let Err(ms) = bucket.admit(now, pending(p)) {
                wait = Some(wait.map_or(ms, |w| w.max(ms)));
                budget.throttled.fetch_add(1, Ordering::Relaxed);
            }
        }
        match wait {
            None => Ok(()),
            Some(ms) => {
                self.budgets.throttled.fetch_add(1, Ordering::Relaxed);
                Err(too_many_requests(ms))
            }
        }
    }

    /// Admits an operation on `parts` of `coll`: with server-side retry,
    /// waits (without holding a thread) while they are throttled, for up
    /// to [`SERVER_SIDE_RETRY_LIMIT`], then fails with 50
    /// (`ExceededTimeLimit` in Cosmos DB's words).
    pub async fn admit(&self, coll: &Collection, parts: &[u64]) -> Result<()> {
        if self.provisioned_rus(coll).is_none() {
            return Ok(());
        }
        // What this operation already owes each partition counts.
        let meter = super::charge::current();
        let owed = |p: u64| meter.as_ref().map_or(0, |m| m.of(coll.id, p));
        let err = match self.admit_now(coll, parts, owed) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if !self.options.throughput.server_side_retry {
            return Err(err);
        }
        let started = Instant::now();
        let mut err = err;
        loop {
            let wait = Duration::from_millis(retry_after_ms(&err.message).unwrap_or(10));
            if started.elapsed() + wait > SERVER_SIDE_RETRY_LIMIT {
                // Code 50, which Cosmos DB calls ExceededTimeLimit and
                // MongoDB 7.0 MaxTimeMSExpired.
                return Err(Error::new(
                    ErrorCode::MaxTimeMSExpired,
                    format!(
                        "Request timed out: it was throttled (16500) and retried on the server for {} seconds.",
                        SERVER_SIDE_RETRY_LIMIT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(wait).await;
            err = match self.admit_now(coll, parts, owed) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
        }
    }

    /// Admits an operation that reads every partition of `ns` (when it
    /// names a collection with provisioned throughput).
    pub async fn admit_namespace(&self, ns: &super::Namespace) -> Result<()> {
        let Some(coll) = self.catalog.get(ns) else {
            return Ok(());
        };
        if self.provisioned_rus(&coll).is_none() {
            return Ok(());
        }
        let parts: Vec<u64> = match &coll.sharding {
            Some(s) => s.map().partitions.iter().map(|p| p.id).collect(),
            None => vec![0],
        };
        self.admit(&coll, &parts).await
    }

    /// The partitions a plan of `filter` on `coll` reads, when `coll` is
    /// provisioned (an unprovisioned one is not planned twice).
    pub(crate) fn throttled_targets(
        &self,
        coll: &Collection,
        filter: &crate::query::filter::Filter,
    ) -> Result<Option<Vec<u64>>> {
        if self.provisioned_rus(coll).is_none() {
            return Ok(None);
        }
        let spec = super::FindSpec {
            filter: Some(filter.clone()),
            ..super::FindSpec::default()
        };
        let reader = super::Reader::live(self, coll);
        // Not `Router::plan`: the operation plans again when it runs,
        // and samples its key then.
        let plan = super::plan::plan(coll, &spec, &reader)?;
        Ok(Some(plan.parts.iter().map(|p| p.partition.id).collect()))
    }

    /// Whether a throttled request waits on the server instead of failing.
    pub fn retries_on_server(&self) -> bool {
        self.options.throughput.server_side_retry
    }

    /// The partition of `coll` that holds `hash`.
    pub fn partition_of(coll: &Collection, hash: i64) -> u64 {
        match &coll.sharding {
            Some(s) => s.map().locate(hash).id,
            None => 0,
        }
    }

    /// Books what an operation was charged: each partition's consumption
    /// and, when its collection is provisioned, its bucket; with activity
    /// tracked, a read or (when `writes`) a write of each partition, and
    /// a fan-out of each that shared the operation with another partition
    /// of its collection.
    pub fn settle(&self, charges: &[PartitionCharge], writes: bool) {
        self.budgets.operations.fetch_add(1, Ordering::Relaxed);
        let now = now_nanos();
        let fanned = self.activity.is_some().then(|| FanOut::of(charges));
        for c in charges {
            let budget = self.budgets.get(c.collection, c.partition);
            budget.consumed.fetch_add(c.micro, Ordering::Relaxed);
            if let Some(fanned) = &fanned {
                let kind = if writes {
                    &budget.writes
                } else {
                    &budget.reads
                };
                kind.fetch_add(1, Ordering::Relaxed);
                if fanned.touched_many(c.collection) {
                    budget.fanouts.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Only a provisioned partition has a bucket (made on admit).
            if !budget.has_bucket.load(Ordering::Acquire) {
                continue;
            }
            let mut bucket = budget.bucket.lock();
            if let Some(bucket) = bucket.as_mut() {
                bucket.pay(now, c.micro);
            }
        }
    }

    /// Each partition's share, consumption and throttles, in the order of
    /// `partitions`.
    pub fn partition_units(&self, coll: &Collection, partitions: &[u64]) -> Vec<PartitionUnits> {
        let share = self.share(coll).map_or(0, u64::from);
        partitions
            .iter()
            .map(|&p| match self.budgets.parts.get(&(coll.id, p)) {
                None => PartitionUnits {
                    provisioned: share,
                    ..PartitionUnits::default()
                },
                Some(b) => PartitionUnits {
                    provisioned: share,
                    consumed: super::charge::request_charge(b.consumed.load(Ordering::Relaxed)),
                    throttled: b.throttled.load(Ordering::Relaxed),
                },
            })
            .collect()
    }

    /// What every partition that was ever charged took part in, in no
    /// particular order (partitions a split retired included).
    pub fn partition_activity(&self) -> Vec<PartitionActivity> {
        self.budgets
            .parts
            .iter()
            .map(|e| e.value().activity(*e.key()))
            .collect()
    }

    /// What each of `partitions` of `coll` took part in, in their order.
    pub fn partition_activity_of(
        &self,
        coll: &Collection,
        partitions: &[u64],
    ) -> Vec<PartitionActivity> {
        partitions
            .iter()
            .map(|&p| match self.budgets.parts.get(&(coll.id, p)) {
                Some(b) => b.activity((coll.id, p)),
                None => PartitionActivity {
                    collection: coll.id,
                    partition: p,
                    ..PartitionActivity::default()
                },
            })
            .collect()
    }

    /// The whole server's consumption and throttles.
    pub fn unit_totals(&self) -> UnitTotals {
        let consumed: u64 = self
            .budgets
            .parts
            .iter()
            .map(|e| e.value().consumed.load(Ordering::Relaxed))
            .sum();
        UnitTotals {
            consumed: super::charge::request_charge(consumed),
            throttled: self.budgets.throttled.load(Ordering::Relaxed),
            operations: self.budgets.operations.load(Ordering::Relaxed),
        }
    }
}

/// Which collections an operation charged more than one partition of.
/// An operation's charges are one per partition, nearly always of one
/// collection: that case is answered without a count.
enum FanOut {
    /// Every charge is of one collection.
    One(bool),
    /// Partitions charged per collection.
    Several(Vec<(u64, usize)>),
}

impl FanOut {
    fn of(charges: &[PartitionCharge]) -> FanOut {
        let first = charges.first().map(|c| c.collection);
        if charges.iter().all(|c| Some(c.collection) == first) {
            return FanOut::One(charges.len() > 1);
        }
        let mut counts: Vec<(u64, usize)> = Vec::new();
        for c in charges {
            match counts.iter_mut().find(|(coll, _)| *coll == c.collection) {
                Some((_, n)) => *n += 1,
                None => counts.push((c.collection, 1)),
            }
        }
        FanOut::Several(counts)
    }

    fn touched_many(&self, collection: u64) -> bool {
        match self {
            FanOut::One(many) => *many,
            FanOut::Several(counts) => counts.iter().any(|&(coll, n)| coll == collection && n > 1),
        }
    }
}

/// The `RetryAfterMs` a 16500 message carries.
pub fn retry_after_ms(message: &str) -> Option<u64> {
    let rest = message.split("RetryAfterMs=").nth(1)?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_full_bucket_admits_and_an_empty_one_says_how_long_to_wait() {
        let mut b = Bucket::new(100, false, 0);
        assert!(b.admit(0, 0).is_ok());
        b.pay(0, 150 * MICRO); // an expensive operation: -50 RU
        assert_eq!(b.admit(0, 0), Err(501));
        // 500 ms later it is at 0: still throttled; 1 ms later, fine.
        assert_eq!(b.admit(500 * MS, 0), Err(1));
        assert!(b.admit(501 * MS, 0).is_ok());
    }

    #[test]
    fn a_bucket_holds_one_second_of_its_share() {
        let mut b = Bucket::new(100, false, 0);
        b.refill(10_000 * MS);
        assert_eq!(b.tokens(), (100 * MICRO) as i64);
    }

    #[test]
    fn pending_charges_of_the_same_operation_count() {
        let mut b = Bucket::new(10, false, 0);
        assert!(b.admit(0, 9 * MICRO).is_ok());
        assert!(b.admit(0, 10 * MICRO).is_err());
    }

    #[test]
    fn rescaling_keeps_the_fraction_held() {
        let mut b = Bucket::new(100, false, 0);
        b.pay(0, 50 * MICRO);
        b.rescale(200, 0);
        assert_eq!(b.tokens(), (100 * MICRO) as i64);
        assert_eq!(b.rate(), 200);
    }

    #[test]
    fn burst_capacity_banks_idle_share_and_spends_it_at_most_3000_a_second() {
        let mut b = Bucket::new(100, true, 0);
        // Idle for 10 s, full from the start: 10 s of share banked.
        b.refill(10_000 * MS);
        assert_eq!(b.bank, (1000 * MICRO) as i64);
        b.pay(10_000 * MS, 100 * MICRO); // the share is spent
        assert!(b.admit(10_000 * MS, 0).is_ok(), "banked share is spent");
        b.pay(10_000 * MS, 1000 * MICRO);
        assert_eq!(b.bank, 0);
        assert!(b.admit(10_000 * MS, 0).is_err(), "the bank is spent");
        // Without burst capacity nothing is banked.
        let mut plain = Bucket::new(100, false, 0);
        plain.refill(10_000 * MS);
        plain.pay(10_000 * MS, 100 * MICRO);
        assert!(plain.admit(10_000 * MS, 0).is_err());
    }

    #[test]
    fn the_bank_holds_at_most_300_seconds() {
        let mut b = Bucket::new(100, true, 0);
        b.refill(10_000 * 1000 * MS);
        assert_eq!(b.bank, (100 * BURST_SECONDS * MICRO) as i64);
    }

    #[test]
    fn a_fan_out_is_counted_per_collection() {
        let charge = |collection, partition| PartitionCharge {
            collection,
            partition,
            micro: 1,
        };
        assert!(!FanOut::of(&[]).touched_many(1));
        assert!(!FanOut::of(&[charge(1, 3)]).touched_many(1));
        assert!(FanOut::of(&[charge(1, 3), charge(1, 4)]).touched_many(1));
        // A $lookup from one partition of 1 into two of 2.
        let mixed = FanOut::of(&[charge(1, 3), charge(2, 5), charge(2, 6)]);
        assert!(!mixed.touched_many(1));
        assert!(mixed.touched_many(2));
    }

    #[test]
    fn the_message_carries_retry_after_ms() {
        let e = too_many_requests(42);
        assert_eq!(e.code.number(), 16500);
        assert_eq!(retry_after_ms(&e.message), Some(42));
        assert!(e.message.starts_with("Error=16500, RetryAfterMs=42,"));
    }
}
