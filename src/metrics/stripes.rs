//! Counters that every request adds to, split into per-thread stripes.
//!
//! An atomic addition is cheap on a cache line the core already owns, and costs a transfer
//! of the line (about 100 ns on the 2-core benchmark machine) when another core wrote it
//! last. A histogram that every request observes would move between the worker threads on
//! nearly every request; with a stripe each, a worker keeps adding to lines of its own.
//! Readers (the metrics page, `/json`) sum the stripes.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// How many stripes a striped value has. Threads take stripes in the order they first
/// count, so the first eight worker threads (the first to count) never share one; more
/// threads share, which costs speed, never a count.
pub(super) const STRIPES: usize = 8;

/// The stripe the next thread to count takes.
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe.
    static MINE: usize = NEXT.fetch_add(1, Relaxed) % STRIPES;
}

/// One stripe, starting a pair of cache lines (x86 fetches lines in adjacent pairs) and
/// sharing none with another stripe.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe<T>(T);

/// A `T` per stripe: each thread writes its own, readers combine them all.
#[derive(Debug, Default)]
pub(super) struct Striped<T> {
    stripes: [Stripe<T>; STRIPES],
}

impl<T> Striped<T> {
    /// The calling thread's stripe.
    #[inline]
    pub(super) fn mine(&self) -> &T {
        // Only while the thread is being torn down is there no slot; stripe 0 is as good.
        let index = MINE.try_with(|mine| *mine).unwrap_or(0);
        &self.stripes[index].0
    }

    /// Every stripe.
    pub(super) fn all(&self) -> impl Iterator<Item = &T> {
        self.stripes.iter().map(|stripe| &stripe.0)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    use super::{STRIPES, Striped};

    fn total(striped: &Striped<AtomicU64>) -> u64 {
        striped.all().map(|n| n.load(Relaxed)).sum()
    }

    #[test]
    fn every_thread_counts_and_the_sum_sees_them_all() {
        let striped = Striped::<AtomicU64>::default();
        std::thread::scope(|s| {
            for _ in 0..2 * STRIPES {
                s.spawn(|| {
                    for _ in 0..1000 {
                        striped.mine().fetch_add(1, Relaxed);
                    }
                });
            }
        });
        assert_eq!(total(&striped), 2000 * STRIPES as u64);
    }

    #[test]
    fn stripes_do_not_share_cache_lines() {
        let striped = Striped::<AtomicU64>::default();
        let addresses: Vec<usize> = striped
            .all()
            .map(|n| std::ptr::from_ref(n) as usize)
            .collect();
        assert_eq!(addresses.len(), STRIPES);
        for pair in addresses.windows(2) {
            assert_eq!(pair[1] - pair[0], 128);
        }
        assert_eq!(addresses[0] % 128, 0);
    }
}
