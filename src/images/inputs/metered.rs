//! Tests only: a global allocator that counts, per thread, the bytes allocated and not yet freed
//! and their high-water mark, so that a test can hold a decoder's real peak against the estimate
//! the budget reserves. Per thread, because the other tests run beside it; the crates that
//! meter allocations count for the whole process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Metered;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn count(delta: i64) {
    // `try_with`: a thread's last frees come after its locals are gone.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is passed to the system allocator unchanged; counting touches only
// const-initialised thread-locals, which allocate nothing.
unsafe impl GlobalAlloc for Metered {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            count(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            count(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        System.dealloc(p, layout);
        count(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        let q = System.realloc(p, layout, size);
        if !q.is_null() {
            count(size as i64 - layout.size() as i64);
        }
        q
    }
}

#[global_allocator]
static METERED: Metered = Metered;

/// Run `work` on this thread: what it returns, and the most bytes it had allocated at once
/// (what it returns included).
pub fn peak_of<T>(work: impl FnOnce() -> T) -> (T, u64) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(base));
    let out = work();
    let peak = PEAK.with(Cell::get) - base;
    (out, peak.max(0) as u64)
}
