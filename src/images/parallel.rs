//! CPU work on several items at once, within the CPUs this process may use: the four images of
//! a grid decoded, a backend's answers checked.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// `work` on each of `items` (with its position), the results in order; a panic in one is
/// resumed here. The calling thread works too, beside at most one scoped thread per further CPU
/// this process may use, each taking the next item left: a thread per item cost more to start
/// than a small image takes to check, and more threads than CPUs only take turns. CPU work:
/// call it from a blocking thread.
pub fn side_by_side<T: Sync, R: Send>(items: &[T], work: impl Fn(usize, &T) -> R + Sync) -> Vec<R> {
    let threads = cpus().min(items.len());
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
}
