//! CPU work on several items at once, within the CPUs this process may use: the four images of
//! a grid decoded, a backend's answers checked.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Input per thread below which [`side_by_side_by_size`] adds no thread for light work (base64
/// decoded, a file's chunks or markers read): a helper started on an idle CPU took longer to
/// come up than it saved on less (docs/benchmarks.md, "A task's own time, step by step").
pub const LIGHT_BYTES_PER_THREAD: usize = 1024 * 1024;

/// `work` on each of `items` (with its position), the results in order; a panic in one is
/// resumed here. The calling thread works too, beside at most one scoped thread per further CPU
/// this process may use, each taking the next item left: a thread per item cost more to start
/// than a small image takes to check, and more threads than CPUs only take turns. CPU work:
/// call it from a blocking thread.
pub fn side_by_side<T: Sync, R: Send>(items: &[T], work: impl Fn(usize, &T) -> R + Sync) -> Vec<R> {
    on_threads(items, cpus(), work)
}

/// [`side_by_side`] for light work on items of `size` bytes each: a thread for each
/// [`LIGHT_BYTES_PER_THREAD`] of their total begun, so that a few small files are worked
/// through by the calling thread alone, with no thread to start and wait for.
pub fn side_by_side_by_size<T: Sync, R: Send>(
    items: &[T],
    size: impl Fn(&T) -> usize,
    work: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let total: usize = items.iter().map(size).sum();
    on_threads(items, threads_for(total, cpus()), work)
}

/// Threads for light work on `total` bytes: one per [`LIGHT_BYTES_PER_THREAD`] begun, at least
/// one and at most `cpus`.
fn threads_for(total: usize, cpus: usize) -> usize {
    total.div_ceil(LIGHT_BYTES_PER_THREAD).clamp(1, cpus.max(1))
}

/// `work` on `items` by the calling thread and at most `threads - 1` scoped helpers.
fn on_threads<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    work: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let threads = threads.min(items.len());
    let next = AtomicUsize::new(0);
    let run = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, work(i, item)));
        }
    };
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(run)).collect();
        let mut done = run();
        for helper in helpers {
            done.extend(
                helper
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e)),
            );
        }
        done
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, result)| result).collect()
}

/// The CPUs this process may use, read once (it reads the cgroup's quota from files).
fn cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_by_side_answers_in_order_on_no_more_threads_than_cpus() {
        let items: Vec<u32> = (0..37).collect();
        let threads = std::sync::Mutex::new(std::collections::HashSet::new());
        let out = side_by_side(&items, |i, &v| {
            threads.lock().unwrap().insert(std::thread::current().id());
            (i, v * 3)
        });
        assert_eq!(
            out,
            (0..37).map(|v| (v as usize, v * 3)).collect::<Vec<_>>()
        );
        let used = threads.lock().unwrap().len();
        assert!(
            (1..=cpus()).contains(&used),
            "{used} threads, {} CPUs",
            cpus()
        );
        assert!(side_by_side(&[] as &[u32], |_, &v| v).is_empty());
        let panicked = std::panic::catch_unwind(|| {
            side_by_side(&items, |i, _| assert!(i != 30, "item 30"));
        });
        assert!(panicked.is_err());
    }

    #[test]
    fn light_work_on_few_bytes_stays_on_the_calling_thread() {
        assert_eq!(threads_for(0, 2), 1);
        assert_eq!(threads_for(54 * 1024, 2), 1);
        assert_eq!(threads_for(LIGHT_BYTES_PER_THREAD, 2), 1);
        assert_eq!(threads_for(LIGHT_BYTES_PER_THREAD + 1, 2), 2);
        assert_eq!(threads_for(13 * LIGHT_BYTES_PER_THREAD, 2), 2);
        assert_eq!(threads_for(13 * LIGHT_BYTES_PER_THREAD, 8), 8);
        assert_eq!(threads_for(5, 0), 1);

        let caller = std::thread::current().id();
        let small: Vec<Vec<u8>> = (0..4).map(|i| vec![i; 16 * 1024]).collect();
        let out = side_by_side_by_size(&small, Vec::len, |i, file| {
            assert_eq!(
                std::thread::current().id(),
                caller,
                "item {i} on another thread"
            );
            file[0]
        });
        assert_eq!(out, vec![0, 1, 2, 3]);

        // Enough bytes for a helper on every CPU: each item still answered once, in order.
        let large: Vec<Vec<u8>> = (0..6)
            .map(|i| vec![i; LIGHT_BYTES_PER_THREAD / 2 + 1])
            .collect();
        let threads = std::sync::Mutex::new(std::collections::HashSet::new());
        let out = side_by_side_by_size(&large, Vec::len, |_, file| {
            threads.lock().unwrap().insert(std::thread::current().id());
            file[0]
        });
        assert_eq!(out, vec![0, 1, 2, 3, 4, 5]);
        assert!((1..=cpus()).contains(&threads.lock().unwrap().len()));
    }
}
