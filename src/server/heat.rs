//! The heat history the side port's page draws: every [`INTERVAL`] a
//! sampler reads each partition's running counts from the router (reads,
//! writes, request units; see `router::throttle`) and keeps what changed
//! since the last reading, for the last [`FRAMES`] intervals.
//!
//! The sampler runs only beside the side port (`http::serve` starts it),
//! on one task: with `--http-bind off` nothing here exists. Its work is
//! one pass over the router's per-partition counters a second, off the
//! request path. Memory is bounded: at most [`MAX_CELLS`] partitions per
//! frame (the busiest), [`FRAMES`] frames.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::router::activity::unix_millis;
use crate::router::throttle::PartitionActivity;
use crate::router::SharedRouter;

/// How often the counters are read: one column of the heat map.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Columns kept: five minutes.
pub const FRAMES: usize = 300;
/// Most partitions one frame keeps, the busiest; the quieter rest of an
/// interval's activity is not kept.
pub const MAX_CELLS: usize = 1024;
/// Readings between two halvings of the hot-key sketches, so that they
/// show what is hot now (a half-life of half a minute).
const AGE_EVERY: u64 = 30;

/// What one partition did during one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    pub collection: u64,
    pub partition: u64,
    pub reads: u32,
    pub writes: u32,
    /// Micro-RU charged.
    pub micro: u64,
}

impl Cell {
    pub fn operations(&self) -> u64 {
        u64::from(self.reads) + u64::from(self.writes)
    }
}

/// One interval: the partitions that did anything in it.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    /// When it ended, in milliseconds since the Unix epoch.
    pub at_millis: u64,
    /// Sorted by collection, then partition.
    pub cells: Vec<Cell>,
}

/// One partition's row of a collection's heat map.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// Operations (reads and writes) per frame.
    pub operations: Vec<u64>,
    /// Micro-RU per frame.
    pub micro: Vec<u64>,
}

impl Row {
    fn total(&self) -> (u64, u64) {
        (self.operations.iter().sum(), self.micro.iter().sum())
    }
}

/// A collection's heat map: one column per frame, one row per partition
/// that was active in any of them.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub times: Vec<u64>,
    pub rows: BTreeMap<u64, Row>,
}

impl Series {
    /// Each partition's operations and micro-RU over the last `frames`.
    pub fn recent(&self, frames: usize) -> HashMap<u64, (u64, u64)> {
        let from = self.times.len().saturating_sub(frames);
        self.rows
            .iter()
            .map(|(&p, row)| {
                let ops = row.operations.get(from..).unwrap_or_default().iter().sum();
                let micro = row.micro.get(from..).unwrap_or_default().iter().sum();
                (p, (ops, micro))
            })
            .collect()
    }

    /// The partition with the most operations over the last `frames`
    /// (request units break a tie), if any did something.
    pub fn hottest(&self, frames: usize) -> Option<u64> {
        self.recent(frames)
            .into_iter()
            .filter(|(_, (ops, micro))| *ops > 0 || *micro > 0)
            .max_by(|(pa, a), (pb, b)| a.cmp(b).then(pb.cmp(pa)))
            .map(|(p, _)| p)
    }

    /// Each partition's totals over the whole series.
    pub fn totals(&self) -> HashMap<u64, (u64, u64)> {
        self.rows.iter().map(|(&p, row)| (p, row.total())).collect()
    }
}

/// The frames, and the last reading they are measured from.
#[derive(Debug, Default)]
pub struct History {
    frames: Mutex<VecDeque<Frame>>,
    /// The counters at the last reading; `None` before the first.
    last: Mutex<Option<HashMap<(u64, u64), PartitionActivity>>>,
}

fn narrow(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl History {
    /// Takes a reading of every partition's counters at `at_millis`: what
    /// changed since the last one becomes a frame. The first reading is
    /// only the baseline.
    pub fn record(&self, at_millis: u64, now: &[PartitionActivity]) {
        let current: HashMap<(u64, u64), PartitionActivity> = now
            .iter()
            .map(|a| ((a.collection, a.partition), *a))
            .collect();
        let Some(previous) = self.last.lock().replace(current) else {
            return;
        };
        let mut cells: Vec<Cell> = now
            .iter()
            .filter_map(|a| {
                let before = previous
                    .get(&(a.collection, a.partition))
                    .copied()
                    .unwrap_or_default();
                let cell = Cell {
                    collection: a.collection,
                    partition: a.partition,
                    reads: narrow(a.reads.saturating_sub(before.reads)),
                    writes: narrow(a.writes.saturating_sub(before.writes)),
                    micro: a.consumed_micro.saturating_sub(before.consumed_micro),
                };
                (cell.operations() > 0 || cell.micro > 0).then_some(cell)
            })
            .collect();
        if cells.len() > MAX_CELLS {
            cells.sort_unstable_by_key(|c| std::cmp::Reverse((c.operations(), c.micro)));
            cells.truncate(MAX_CELLS);
        }
        cells.sort_unstable_by_key(|c| (c.collection, c.partition));
        let mut frames = self.frames.lock();
        if frames.len() >= FRAMES {
            frames.pop_front();
        }
        frames.push_back(Frame { at_millis, cells });
    }

    /// Collection `collection`'s heat map over every frame kept.
    pub fn series(&self, collection: u64) -> Series {
        let frames = self.frames.lock();
        let n = frames.len();
        let mut series = Series {
            times: frames.iter().map(|f| f.at_millis).collect(),
            rows: BTreeMap::new(),
        };
        for (i, frame) in frames.iter().enumerate() {
            let from = frame.cells.partition_point(|c| c.collection < collection);
            for cell in frame.cells[from..]
                .iter()
                .take_while(|c| c.collection == collection)
            {
                let row = series.rows.entry(cell.partition).or_insert_with(|| Row {
                    operations: vec![0; n],
                    micro: vec![0; n],
                });
                row.operations[i] = cell.operations();
                row.micro[i] = cell.micro;
            }
        }
        series
    }

    /// Each collection's operations and micro-RU over the last `frames`,
    /// and how many frames that was.
    pub fn collection_totals(&self, frames: usize) -> (HashMap<u64, (u64, u64)>, usize) {
        let kept = self.frames.lock();
        let from = kept.len().saturating_sub(frames);
        let mut totals: HashMap<u64, (u64, u64)> = HashMap::new();
        for frame in kept.iter().skip(from) {
            for cell in &frame.cells {
                let t = totals.entry(cell.collection).or_default();
                t.0 += cell.operations();
                t.1 += cell.micro;
            }
        }
        (totals, kept.len() - from)
    }
}

/// Reads the router's counters into `history` every [`INTERVAL`], and
/// ages the hot-key sketches, for as long as the side port serves.
pub async fn sample(router: SharedRouter, history: Arc<History>) {
    let mut ticker = tokio::time::interval(INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut readings = 0u64;
    loop {
        ticker.tick().await;
        history.record(unix_millis(), &router.partition_activity());
        readings += 1;
        if readings.is_multiple_of(AGE_EVERY) {
            if let Some(activity) = router.activity() {
                let live: HashSet<u64> = router.collections().iter().map(|c| c.id).collect();
                activity.age(&live);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(
        collection: u64,
        partition: u64,
        reads: u64,
        writes: u64,
        micro: u64,
    ) -> PartitionActivity {
        PartitionActivity {
            collection,
            partition,
            reads,
            writes,
            consumed_micro: micro,
            ..PartitionActivity::default()
        }
    }

    #[test]
    fn frames_hold_what_changed_between_readings() {
        let h = History::default();
        h.record(1000, &[at(1, 10, 5, 0, 50)]);
        assert!(
            h.series(1).times.is_empty(),
            "the first reading is a baseline"
        );
        h.record(
            2000,
            &[at(1, 10, 8, 1, 90), at(1, 11, 2, 0, 20), at(2, 20, 7, 0, 0)],
        );
        h.record(
            3000,
            &[at(1, 10, 8, 1, 90), at(1, 11, 4, 0, 30), at(2, 20, 7, 0, 0)],
        );
        let s = h.series(1);
        assert_eq!(s.times, vec![2000, 3000]);
        assert_eq!(s.rows[&10].operations, vec![4, 0]);
        assert_eq!(s.rows[&10].micro, vec![40, 0]);
        // A partition first seen after the baseline counts from zero.
        assert_eq!(s.rows[&11].operations, vec![2, 2]);
        assert_eq!(s.rows.len(), 2);
        assert_eq!(h.series(2).rows[&20].operations, vec![7, 0]);
        assert!(h.series(3).rows.is_empty());
    }

    #[test]
    fn the_history_keeps_the_last_frames_only() {
        let h = History::default();
        for i in 0..(FRAMES as u64 + 20) {
            h.record(i, &[at(1, 1, i, 0, 0)]);
        }
        let s = h.series(1);
        assert_eq!(s.times.len(), FRAMES);
        assert_eq!(s.times.last(), Some(&(FRAMES as u64 + 19)));
        assert_eq!(s.rows[&1].operations.len(), FRAMES);
    }

    #[test]
    fn a_frame_keeps_the_busiest_partitions() {
        let h = History::default();
        let partitions = MAX_CELLS as u64 + 10;
        let zero: Vec<_> = (0..partitions).map(|p| at(1, p, 0, 0, 0)).collect();
        h.record(0, &zero);
        let busy: Vec<_> = (0..partitions).map(|p| at(1, p, p + 1, 0, 0)).collect();
        h.record(1, &busy);
        let frames = h.frames.lock();
        let frame = frames.back().unwrap();
        assert_eq!(frame.cells.len(), MAX_CELLS);
        assert_eq!(
            frame.cells[0].partition, 10,
            "the 10 quietest were left out"
        );
    }

    #[test]
    fn the_hottest_partition_is_the_busiest_of_the_last_frames() {
        let h = History::default();
        h.record(0, &[at(1, 1, 0, 0, 0), at(1, 2, 0, 0, 0)]);
        h.record(1, &[at(1, 1, 100, 0, 0), at(1, 2, 0, 0, 0)]);
        h.record(2, &[at(1, 1, 100, 0, 0), at(1, 2, 3, 0, 0)]);
        let s = h.series(1);
        assert_eq!(s.hottest(FRAMES), Some(1));
        assert_eq!(s.hottest(1), Some(2));
        assert_eq!(s.totals()[&1], (100, 0));
        assert_eq!(History::default().series(1).hottest(FRAMES), None);
        let (totals, frames) = h.collection_totals(1);
        assert_eq!((totals[&1], frames), ((3, 0), 1));
    }
}
