//! An allocator that turns unbounded allocation into a reported failure.
//!
//! The server must size everything a client controls before reserving
//! it; a target that asks for more than the limits here has found a way
//! to make the server allocate without bound. Instead of letting the
//! machine swap (or the allocation fail and abort far from the cause),
//! the guard says how much was asked for and aborts at once; the runner
//! then keeps the input that did it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes live now.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Largest single allocation allowed.
static MAX_SINGLE: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Most bytes live at once.
static MAX_LIVE: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Largest single allocation seen.
static LARGEST: AtomicUsize = AtomicUsize::new(0);

pub struct Guard;

/// Sets the limits (bytes); `usize::MAX` for none.
pub fn set_limits(single: usize, live: usize) {
    MAX_SINGLE.store(single, Ordering::Relaxed);
    MAX_LIVE.store(live, Ordering::Relaxed);
}

/// The largest single allocation seen so far.
pub fn largest_allocation() -> usize {
    LARGEST.load(Ordering::Relaxed)
}

fn check(size: usize) {
    LARGEST.fetch_max(size, Ordering::Relaxed);
    let live = LIVE.load(Ordering::Relaxed);
    if size > MAX_SINGLE.load(Ordering::Relaxed)
        || live.saturating_add(size) > MAX_LIVE.load(Ordering::Relaxed)
    {
        trip(size, live);
    }
}

#[cold]
fn trip(size: usize, live: usize) -> ! {
    // Lift the limits so that reporting may allocate.
    set_limits(usize::MAX, usize::MAX);
    let _ = writeln!(
        std::io::stderr(),
        "allocation bound: asked for {size} bytes with {live} bytes live, at\n{}",
        our_frames(&std::backtrace::Backtrace::force_capture().to_string())
    );
    std::process::abort()
}

/// The frames of a backtrace in this workspace's sources, one a line.
fn our_frames(trace: &str) -> String {
    let lines: Vec<&str> = trace.lines().collect();
    let mut out = String::new();
    for pair in lines.windows(2) {
        let (name, at) = (pair[0].trim(), pair[1].trim());
        if at.starts_with("at ./src/") && !name.starts_with("at ") {
            let name = name.split_once(": ").map_or(name, |(_, n)| n);
            out.push_str(&format!("  {name} {at}\n"));
        }
    }
    out
}

unsafe impl GlobalAlloc for Guard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            LARGEST.fetch_max(new_size, Ordering::Relaxed);
            let live = LIVE.load(Ordering::Relaxed);
            if new_size > MAX_SINGLE.load(Ordering::Relaxed)
                || live.saturating_add(new_size - layout.size()) > MAX_LIVE.load(Ordering::Relaxed)
            {
                trip(new_size, live);
            }
        }
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}
