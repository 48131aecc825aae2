//! The cluster clock: MongoDB's `Timestamp` (wall-clock seconds and an
//! increment) as one `u64`, one per process, that never goes backwards.
//!
//! Every reply's `$clusterTime`/`operationTime` and every change-log entry
//! take their time from it, so a change stream opened at a reply's
//! `operationTime` sees exactly the changes committed after that reply was
//! made. The store moves it past the newest logged change when it opens,
//! so times keep growing across restarts even if the wall clock stepped
//! back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static CLOCK: AtomicU64 = AtomicU64::new(0);

/// A `Timestamp` packed as MongoDB orders them: seconds in the high
/// half, the increment in the low half.
pub fn pack(time: bson::Timestamp) -> u64 {
    (u64::from(time.time) << 32) | u64::from(time.increment)
}

pub fn unpack(packed: u64) -> bson::Timestamp {
    bson::Timestamp {
        time: (packed >> 32) as u32,
        increment: packed as u32,
    }
}

/// A new time, later than every time handed out before.
pub fn tick() -> u64 {
    let floor = wall_seconds() << 32;
    let mut prev = CLOCK.load(Ordering::Relaxed);
    loop {
        let next = (prev + 1).max(floor | 1);
        match CLOCK.compare_exchange_weak(prev, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(actual) => prev = actual,
        }
    }
}

/// The latest time handed out (0 before the first).
pub fn latest() -> u64 {
    CLOCK.load(Ordering::Acquire)
}

/// Makes every later [`tick`] greater than `time`.
pub fn advance_past(time: u64) {
    CLOCK.fetch_max(time, Ordering::AcqRel);
}

fn wall_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_grow_and_follow_the_wall_clock() {
        let a = tick();
        let b = tick();
        assert!(b > a);
        assert!(unpack(b).time as u64 >= wall_seconds() - 1);
        advance_past(b + 1000);
        assert!(tick() > b + 1000);
        assert_eq!(pack(unpack(b)), b);
    }
}
