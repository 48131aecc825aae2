//! What the router notes of its own work for a person watching it, beside
//! the request units every partition is charged ([`super::throttle`]):
//! the shard-key values operations target most (a sampled top-k sketch
//! per collection), how many times each collection split, and the recent
//! splits themselves. Shown on the HTTP side port's page and `/metrics`.
//!
//! It exists only when the side port does ([`super::Router::track_activity`]):
//! without it the router records nothing here and pays one branch. With
//! it, a targeted operation pays a thread-local random draw, and one in
//! [`SAMPLE_EVERY`] of them a short lock of its collection's sketch.
//! Memory is bounded: [`HOT_KEYS`] values per live collection, the last
//! [`RECENT_SPLITS`] splits.

use std::cell::Cell;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::Mutex;

use crate::partition::Partition;

/// One targeted operation in this many (per thread) has its shard-key
/// value sampled.
pub const SAMPLE_EVERY: u32 = 8;
/// Shard-key values a collection's sketch follows.
pub const HOT_KEYS: usize = 64;
/// Splits kept for the page.
pub const RECENT_SPLITS: usize = 50;
/// Longest text kept of a sampled key value.
const MAX_SHOWN: usize = 96;

thread_local! {
    /// The thread's xorshift state; 0 until first used.
    static DICE: Cell<u64> = const { Cell::new(0) };
}

/// Whether the calling thread's current targeted operation is one of the
/// sampled: one in [`SAMPLE_EVERY`], at random, so that a workload that
/// cycles through key values is not sampled at the same few each time.
/// A per-thread xorshift generator: no atomic, no shared cache line.
#[inline]
pub fn sampled() -> bool {
    DICE.with(|d| {
        let mut x = d.get();
        if x == 0 {
            use std::hash::BuildHasher;
            let seed = std::collections::hash_map::RandomState::new();
            x = seed.hash_one(std::thread::current().id()) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        d.set(x);
        // The high bits: xorshift's low bits are its weakest.
        (x >> 32).is_multiple_of(u64::from(SAMPLE_EVERY))
    })
}

/// Milliseconds since the Unix epoch (0 on a clock set before it).
pub fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A key value as the page shows it: its extended-JSON text, cut short.
pub fn show(value: Option<&bson::Bson>) -> String {
    let Some(value) = value else {
        return "(missing)".to_string();
    };
    let mut text = value.to_string();
    if text.len() > MAX_SHOWN {
        let mut end = MAX_SHOWN;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// One followed value of a [`HotKeys`] sketch.
#[derive(Debug, Clone, PartialEq)]
pub struct HotKey {
    /// The hash it is stored under, which places it in a partition.
    pub hash: i64,
    pub shown: String,
    /// Samples counted for it; over-counts by at most `error`.
    pub count: u64,
    /// What the value it replaced had counted (Space-Saving's bound).
    pub error: u64,
}

impl HotKey {
    /// Samples it certainly had.
    pub fn guaranteed(&self) -> u64 {
        self.count - self.error
    }
}

/// The most frequent shard-key values of a stream of samples, in bounded
/// memory: Metwally, Agrawal and El Abbadi's Space-Saving. Any value
/// sampled more than `total / capacity` times is among those followed,
/// and each count over-states its value's by at most its `error`.
#[derive(Debug, Clone)]
pub struct HotKeys {
    keys: Vec<HotKey>,
    capacity: usize,
    total: u64,
}

impl HotKeys {
    pub fn new(capacity: usize) -> HotKeys {
        HotKeys {
            keys: Vec::with_capacity(capacity),
            capacity: capacity.max(1),
            total: 0,
        }
    }

    /// Counts one sample of the value stored under `hash`; `shown` is
    /// asked only when the value is not followed yet.
    pub fn observe(&mut self, hash: i64, shown: impl FnOnce() -> String) {
        self.total += 1;
        if let Some(k) = self.keys.iter_mut().find(|k| k.hash == hash) {
            k.count += 1;
            return;
        }
        if self.keys.len() < self.capacity {
            self.keys.push(HotKey {
                hash,
                shown: shown(),
                count: 1,
                error: 0,
            });
            return;
        }
        // Full: the least counted value gives its place to this one,
        // which inherits its count as the error bound.
        if let Some(least) = self.keys.iter_mut().min_by_key(|k| k.count) {
            *least = HotKey {
                hash,
                shown: shown(),
                count: least.count + 1,
                error: least.count,
            };
        }
    }

    /// Samples counted (after decay).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The `n` values with the most samples they certainly had
    /// (`count - error`), most first. A value that took a full sketch's
    /// last place inherited that place's count, so its own count says
    /// little until it has earned more.
    pub fn top(&self, n: usize) -> Vec<HotKey> {
        let mut keys = self.keys.clone();
        keys.sort_by(|a, b| {
            b.guaranteed()
                .cmp(&a.guaranteed())
                .then(b.count.cmp(&a.count))
                .then(a.hash.cmp(&b.hash))
        });
        keys.truncate(n);
        keys
    }

    /// Halves every count, so that what was hot long ago fades: values
    /// that fall to nothing leave the sketch.
    pub fn decay(&mut self) {
        self.total /= 2;
        for k in &mut self.keys {
            k.count /= 2;
            k.error /= 2;
        }
        self.keys.retain(|k| k.count > 0);
    }
}

/// One half of a split partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitHalf {
    pub partition: Partition,
    pub documents: u64,
    pub bytes: u64,
}

/// A partition split in two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitEvent {
    /// Milliseconds since the Unix epoch.
    pub at_millis: u64,
    pub collection: u64,
    /// `db.coll` when it split.
    pub ns: String,
    pub parent: Partition,
    pub children: [SplitHalf; 2],
}

/// A collection's sketch and split count.
#[derive(Debug)]
pub struct CollectionActivity {
    hot: Mutex<HotKeys>,
    splits: AtomicU64,
}

impl Default for CollectionActivity {
    fn default() -> Self {
        CollectionActivity {
            hot: Mutex::new(HotKeys::new(HOT_KEYS)),
            splits: AtomicU64::new(0),
        }
    }
}

/// What the router notes for the side port; see the module's note.
#[derive(Debug, Default)]
pub struct Activity {
    collections: DashMap<u64, Arc<CollectionActivity>>,
    splits: Mutex<VecDeque<SplitEvent>>,
}

impl Activity {
    fn collection(&self, id: u64) -> Arc<CollectionActivity> {
        if let Some(c) = self.collections.get(&id) {
            return c.clone();
        }
        self.collections.entry(id).or_default().clone()
    }

    /// Counts a sampled operation on the value stored under `hash` in
    /// collection `collection`.
    pub fn observe_key(&self, collection: u64, hash: i64, shown: impl FnOnce() -> String) {
        // Under the map's read guard: no reference count to move.
        if let Some(c) = self.collections.get(&collection) {
            c.hot.lock().observe(hash, shown);
            return;
        }
        self.collection(collection).hot.lock().observe(hash, shown);
    }

    /// The `n` hottest values of `collection` and the samples counted.
    pub fn hot_keys(&self, collection: u64, n: usize) -> (Vec<HotKey>, u64) {
        match self.collections.get(&collection) {
            None => (Vec::new(), 0),
            Some(c) => {
                let hot = c.hot.lock();
                (hot.top(n), hot.total())
            }
        }
    }

    /// Notes a split.
    pub fn record_split(&self, event: SplitEvent) {
        self.collection(event.collection)
            .splits
            .fetch_add(1, Ordering::Relaxed);
        let mut recent = self.splits.lock();
        if recent.len() >= RECENT_SPLITS {
            recent.pop_front();
        }
        recent.push_back(event);
    }

    /// Splits of `collection` since start.
    pub fn splits_of(&self, collection: u64) -> u64 {
        self.collections
            .get(&collection)
            .map_or(0, |c| c.splits.load(Ordering::Relaxed))
    }

    /// The last [`RECENT_SPLITS`] splits, newest first.
    pub fn recent_splits(&self) -> Vec<SplitEvent> {
        self.splits.lock().iter().rev().cloned().collect()
    }

    /// Halves every sketch's counts (see [`HotKeys::decay`]) and forgets
    /// collections that no longer exist.
    pub fn age(&self, live: &HashSet<u64>) {
        self.collections.retain(|id, _| live.contains(id));
        for c in self.collections.iter() {
            c.hot.lock().decay();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(h: &HotKeys) -> Vec<(i64, u64)> {
        h.top(HOT_KEYS).iter().map(|k| (k.hash, k.count)).collect()
    }

    #[test]
    fn a_value_sampled_often_stays_on_top_of_a_full_sketch() {
        let mut h = HotKeys::new(8);
        // 1000 distinct cold values, one hot value every 4th sample.
        for i in 0..4000_i64 {
            if i % 4 == 0 {
                h.observe(-1, || "hot".into());
            } else {
                h.observe(i, || format!("{i}"));
            }
        }
        let top = h.top(3);
        assert_eq!(top[0].hash, -1);
        // The cold values' inherited counts do not rank them.
        assert!(top[1].guaranteed() <= 2, "{top:?}");
        assert_eq!(top[0].shown, "hot");
        // Never under-counted; over-counted by at most its error.
        assert!(top[0].count >= 1000 && top[0].count - top[0].error <= 1000);
        assert_eq!(h.total(), 4000);
        assert!(h.keys.len() <= 8);
    }

    #[test]
    fn counts_are_exact_while_the_sketch_has_room() {
        let mut h = HotKeys::new(4);
        for hash in [5, 5, 7, 5, 9, 7] {
            h.observe(hash, || hash.to_string());
        }
        assert_eq!(counts(&h), vec![(5, 3), (7, 2), (9, 1)]);
        assert!(h.top(10).iter().all(|k| k.error == 0));
    }

    #[test]
    fn the_label_is_made_only_for_a_value_not_followed_yet() {
        let mut h = HotKeys::new(2);
        h.observe(1, || "one".into());
        h.observe(1, || panic!("asked again"));
        assert_eq!(h.top(1)[0].shown, "one");
    }

    #[test]
    fn decay_halves_counts_and_drops_what_falls_to_nothing() {
        let mut h = HotKeys::new(4);
        for _ in 0..4 {
            h.observe(1, || "a".into());
        }
        h.observe(2, || "b".into());
        h.decay();
        assert_eq!(counts(&h), vec![(1, 2)]);
        assert_eq!(h.total(), 2);
    }

    #[test]
    fn recent_splits_are_bounded_and_newest_first() {
        let a = Activity::default();
        let half = |id| SplitHalf {
            partition: Partition { id, min: 0, max: 0 },
            documents: 0,
            bytes: 0,
        };
        for i in 0..(RECENT_SPLITS as u64 + 5) {
            a.record_split(SplitEvent {
                at_millis: i,
                collection: 7,
                ns: "db.c".into(),
                parent: Partition {
                    id: i,
                    min: 0,
                    max: 0,
                },
                children: [half(100 + i), half(200 + i)],
            });
        }
        let recent = a.recent_splits();
        assert_eq!(recent.len(), RECENT_SPLITS);
        assert_eq!(recent[0].at_millis, RECENT_SPLITS as u64 + 4);
        assert_eq!(a.splits_of(7), RECENT_SPLITS as u64 + 5);
        assert_eq!(a.splits_of(8), 0);
    }

    #[test]
    fn aging_forgets_dropped_collections() {
        let a = Activity::default();
        a.observe_key(1, 10, || "x".into());
        a.observe_key(2, 10, || "y".into());
        a.observe_key(2, 10, || "y".into());
        a.age(&HashSet::from([2]));
        assert_eq!(a.hot_keys(1, 10).1, 0);
        let (keys, total) = a.hot_keys(2, 10);
        assert_eq!((keys.len(), total), (1, 1));
    }

    #[test]
    fn about_one_operation_in_sample_every_is_sampled_whatever_its_period() {
        let calls = 80_000;
        let expected = calls / SAMPLE_EVERY as usize;
        let n = (0..calls).filter(|_| sampled()).count();
        assert!(n.abs_diff(expected) < expected / 10, "{n} of {calls}");
        // Operations cycling through SAMPLE_EVERY values: each is sampled.
        let mut seen = [0; SAMPLE_EVERY as usize];
        for i in 0..calls {
            if sampled() {
                seen[i % SAMPLE_EVERY as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&s| s > expected / 16), "{seen:?}");
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary() {
        let long = bson::Bson::String("é".repeat(200));
        let shown = show(Some(&long));
        assert!(shown.len() <= MAX_SHOWN + '…'.len_utf8());
        assert!(shown.ends_with('…'));
        assert_eq!(show(None), "(missing)");
        assert_eq!(show(Some(&bson::Bson::Int32(42))), "42");
    }
}
