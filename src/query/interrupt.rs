//! Stopping a running operation: its time limit (`maxTimeMS`) passed, or
//! its client went away.
//!
//! Every layer that loops over what a client sent (expressions, pipeline
//! stages, sorts, groups, scans, array updates) calls [`check`] once per
//! step; it sits here, below all of them, so none needs a parameter
//! threaded through its signatures. The operation being served is an
//! [`Operation`] installed for the current thread by [`enter`] (or, around
//! a future, by [`scoped`]); work handed to a pool thread takes
//! [`current`] with it and enters it there.
//!
//! Nothing here does I/O: the connection layer hands in a [`Probe`] that
//! says whether the client is still connected, asked at most every
//! [`PROBE_INTERVAL`] while an operation runs, as MongoDB polls a client's
//! socket for `markKilledOnClientDisconnect`.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};

/// Says whether the client that sent an operation is still connected.
pub type Probe = Arc<dyn Fn() -> bool + Send + Sync>;

/// How often a running operation asks its [`Probe`].
pub const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// [`check`] reads the clock once in this many calls: a check costs a
/// thread-local read and an atomic load, not a system call.
const CLOCK_EVERY: u32 = 32;

const RUNNING: u8 = 0;
const EXPIRED: u8 = 1;
const DISCONNECTED: u8 = 2;
const INTERRUPTED: u8 = 3;

/// Deadlines are nanoseconds since this instant, so they fit an atomic.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX - 1)
}

/// One client request's control block, shared by every thread working
/// for it.
pub struct Operation {
    /// Nanoseconds since [`epoch`] at which `maxTimeMS` runs out;
    /// `u64::MAX` for none.
    deadline: AtomicU64,
    /// Why it stopped, or `RUNNING`.
    state: AtomicU8,
    probe: Option<Probe>,
    /// When the probe is next due, in the same clock as `deadline`; 0
    /// until the first full check (so a short request reads no clock).
    next_probe: AtomicU64,
    /// How far long work has come ([`report_progress`]).
    progress: parking_lot::Mutex<Option<Progress>>,
}

/// How far a long operation has come, as `currentOp` shows it: an index
/// build's documents, a redistribution's, a split's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// What the work is (`msg` in `currentOp`).
    pub message: &'static str,
    pub done: u64,
    pub total: u64,
}

impl Operation {
    pub fn new(deadline: Option<Instant>, probe: Option<Probe>) -> Arc<Operation> {
        Arc::new(Operation {
            deadline: AtomicU64::new(deadline.map_or(u64::MAX, nanos)),
            state: AtomicU8::new(RUNNING),
            probe,
            next_probe: AtomicU64::new(0),
            progress: parking_lot::Mutex::new(None),
        })
    }

    /// How far it has come, if it reported progress.
    pub fn progress(&self) -> Option<Progress> {
        *self.progress.lock()
    }

    /// Whether it was asked to stop (`killOp`), timed out or lost its
    /// client: `currentOp`'s `killPending`.
    pub fn is_stopping(&self) -> bool {
        self.state.load(Ordering::Relaxed) != RUNNING
    }

    /// Stops the operation at its next check (`killOp`, shutdown).
    pub fn kill(&self) {
        let _ =
            self.state
                .compare_exchange(RUNNING, INTERRUPTED, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Brings the deadline forward to `deadline` if that is sooner: a
    /// cursor's `maxTimeMS` still holds when a `getMore` continues it.
    pub fn limit_to(&self, deadline: Instant) {
        let deadline = nanos(deadline);
        // Usually already that soon: a load, not a write, per call.
        if self.deadline.load(Ordering::Relaxed) > deadline {
            self.deadline.fetch_min(deadline, Ordering::Relaxed);
        }
    }

    /// Whether it was stopped, without reading the clock.
    pub fn stopped(&self) -> Result<()> {
        match self.state.load(Ordering::Relaxed) {
            RUNNING => Ok(()),
            reason => Err(stop_error(reason)),
        }
    }

    /// Checks everything now: stopped, deadline passed, client gone.
    pub fn check_now(&self) -> Result<()> {
        self.stopped()?;
        let now = nanos(Instant::now());
        if now >= self.deadline.load(Ordering::Relaxed) {
            return Err(self.stop(EXPIRED));
        }
        if let Some(probe) = &self.probe {
            let due = self.next_probe.load(Ordering::Relaxed);
            if due == 0 {
                // First time: the client was there a moment ago.
                let first = now.saturating_add(PROBE_INTERVAL.as_nanos() as u64);
                let _ = self.next_probe.compare_exchange(
                    0,
                    first,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                return Ok(());
            }
            // One thread probes per interval; the others go on.
            if now >= due
                && self
                    .next_probe
                    .compare_exchange(
                        due,
                        now.saturating_add(PROBE_INTERVAL.as_nanos() as u64),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                && !probe()
            {
                return Err(self.stop(DISCONNECTED));
            }
        }
        Ok(())
    }

    /// Records why it stopped (the first reason wins) and returns the error.
    fn stop(&self, reason: u8) -> Error {
        match self
            .state
            .compare_exchange(RUNNING, reason, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => stop_error(reason),
            Err(earlier) => stop_error(earlier),
        }
    }
}

fn stop_error(reason: u8) -> Error {
    match reason {
        EXPIRED => Error::new(ErrorCode::MaxTimeMSExpired, "operation exceeded time limit"),
        DISCONNECTED => Error::new(
            ErrorCode::ClientDisconnect,
            "operation was interrupted because a client disconnected",
        ),
        _ => Error::new(ErrorCode::Interrupted, "operation was interrupted"),
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Operation>>> = const { RefCell::new(None) };
    static TICKS: Cell<u32> = const { Cell::new(0) };
}

/// Fails once the current operation should stop. Cheap enough for any
/// loop: call it once per element, document or iteration.
#[inline]
pub fn check() -> Result<()> {
    CURRENT.with(|current| {
        let current = current.borrow();
        let Some(op) = current.as_ref() else {
            return Ok(());
        };
        op.stopped()?;
        let ticks = TICKS.with(|t| {
            let n = t.get().wrapping_add(1);
            t.set(n);
            n
        });
        if ticks.is_multiple_of(CLOCK_EVERY) {
            op.check_now()
        } else {
            Ok(())
        }
    })
}

/// The operation the current thread works for, to take to another thread.
pub fn current() -> Option<Arc<Operation>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Brings the current operation's deadline forward (see
/// [`Operation::limit_to`]).
pub fn limit_to(deadline: Instant) {
    CURRENT.with(|c| {
        if let Some(op) = c.borrow().as_ref() {
            op.limit_to(deadline);
        }
    });
}

/// Records how far the current operation's long work has come, for
/// `currentOp`; nothing when no operation is current.
pub fn report_progress(message: &'static str, done: u64, total: u64) {
    CURRENT.with(|c| {
        if let Some(op) = c.borrow().as_ref() {
            *op.progress.lock() = Some(Progress {
                message,
                done,
                total,
            });
        }
    });
}

/// Makes `op` the current thread's operation until the guard drops.
pub fn enter(op: Option<Arc<Operation>>) -> Entered {
    let previous = CURRENT.with(|c| c.replace(op));
    Entered {
        previous,
        _not_send: std::marker::PhantomData,
    }
}

/// Restores the thread's previous operation when dropped.
pub struct Entered {
    previous: Option<Arc<Operation>>,
    /// The guard belongs to the thread that entered.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Runs `fut` with `op` current during each of its polls, whichever
/// thread polls it.
pub async fn scoped<F: Future>(op: &Arc<Operation>, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        let _entered = enter(Some(op.clone()));
        fut.as_mut().poll(cx)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn spin_until_stopped() -> Error {
        loop {
            if let Err(e) = check() {
                return e;
            }
        }
    }

    #[test]
    fn nothing_current_never_stops() {
        for _ in 0..1000 {
            assert!(check().is_ok());
        }
    }

    #[test]
    fn a_passed_deadline_fails_with_max_time_ms_expired() {
        let op = Operation::new(Some(Instant::now() + Duration::from_millis(20)), None);
        let _in = enter(Some(op.clone()));
        let started = Instant::now();
        let e = spin_until_stopped();
        assert_eq!(e.code, ErrorCode::MaxTimeMSExpired);
        assert!(started.elapsed() < Duration::from_secs(2));
        // Once stopped, every later check fails at once.
        assert_eq!(check().unwrap_err().code, ErrorCode::MaxTimeMSExpired);
    }

    #[test]
    fn a_gone_client_is_noticed_within_the_probe_interval() {
        let connected = Arc::new(AtomicBool::new(true));
        let flag = connected.clone();
        let probe: Probe = Arc::new(move || flag.load(Ordering::Relaxed));
        let op = Operation::new(None, Some(probe));
        let _in = enter(Some(op));
        for _ in 0..10_000 {
            assert!(check().is_ok());
        }
        connected.store(false, Ordering::Relaxed);
        let started = Instant::now();
        let e = spin_until_stopped();
        assert_eq!(e.code, ErrorCode::ClientDisconnect);
        assert!(started.elapsed() < PROBE_INTERVAL * 5);
    }

    #[test]
    fn killed_operations_stop_on_every_thread_that_entered_them() {
        let op = Operation::new(None, None);
        let worker = {
            let op = op.clone();
            std::thread::spawn(move || {
                let _in = enter(Some(op));
                spin_until_stopped()
            })
        };
        std::thread::sleep(Duration::from_millis(10));
        op.kill();
        assert_eq!(worker.join().unwrap().code, ErrorCode::Interrupted);
    }

    #[test]
    fn guards_restore_the_previous_operation() {
        let outer = Operation::new(None, None);
        let inner = Operation::new(None, None);
        let _a = enter(Some(outer.clone()));
        {
            let _b = enter(Some(inner.clone()));
            assert!(Arc::ptr_eq(&current().unwrap(), &inner));
        }
        assert!(Arc::ptr_eq(&current().unwrap(), &outer));
    }

    #[test]
    fn limit_to_only_brings_the_deadline_forward() {
        let far = Instant::now() + Duration::from_secs(3600);
        let op = Operation::new(Some(far), None);
        op.limit_to(Instant::now() + Duration::from_secs(7200));
        assert!(op.check_now().is_ok());
        op.limit_to(Instant::now());
        assert_eq!(
            op.check_now().unwrap_err().code,
            ErrorCode::MaxTimeMSExpired
        );
    }

    #[test]
    fn scoped_futures_see_their_operation() {
        let op = Operation::new(None, None);
        let seen = futures::executor::block_on(scoped(&op, async { current() }));
        assert!(Arc::ptr_eq(&seen.unwrap(), &op));
        assert!(current().is_none());
    }
}
