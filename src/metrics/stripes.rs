//! Counters that every request of a busy rule adds to, split into per-CPU stripes once busy.
//!
//! An atomic addition is cheap on a cache line the core already owns, and costs a transfer
//! of the line (about 100 ns on the 2-core benchmark machine) when another core wrote it
//! last. A counter that every request of a busy rule adds to would move between the cores
//! on nearly every request; with a stripe each, a core keeps adding to lines of its own.
//! Readers (the metrics page, `/json`, the operator page) sum everything.
//!
//! Stripes cost memory (128 bytes each, one per CPU the process may run on, rounded up to
//! a power of two, at most [`MAX_STRIPES`]), and most rules of a large config see little
//! traffic. So a counter set starts as one plain set of counters, and takes its stripes
//! the [`BUSY`]th time it is counted on: a config of 200,000 rules pays for the stripes of
//! the rules that are busy, not for all of them. A CPU adds in the stripe its number
//! selects (`getcpu`, which the C library answers from the kernel's rseq area; each thread
//! asks again every few hundred counts).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{LazyLock, OnceLock};

use crossbeam_utils::CachePadded;

/// Most stripes a counter set has, whatever the machine.
const MAX_STRIPES: usize = 8;

/// How many times a counter set is counted on before it takes its stripes: a few seconds of
/// a rule's traffic at the rates where sharing lines shows.
const BUSY: u64 = 10_000;

/// How many stripes a busy counter set has: the CPUs this process may use, rounded up to a
/// power of two (so a CPU's stripe is a mask, not a division), at most [`MAX_STRIPES`].
/// With one, a set never stripes.
static STRIPES: LazyLock<usize> = LazyLock::new(|| {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .next_power_of_two()
        .min(MAX_STRIPES)
});

/// How many counts a thread makes on the CPU it last asked for before asking again.
const CPU_REUSE: u32 = 256;

thread_local! {
    /// The CPU this thread last found itself on, and how many more counts may use it.
    static CPU: Cell<(usize, u32)> = const { Cell::new((0, 0)) };
}

/// The CPU the calling thread runs on, or ran on a few counts ago. By CPU, not by thread:
/// cores are what contend, and threads numbered as they come could put two busy workers
/// on one stripe. Asked again every [`CPU_REUSE`] counts, so that a thread the scheduler
/// moved soon counts on its new CPU's stripe; until then it costs speed, never a count.
/// (Asking is cheap from the rseq area, a system call under valgrind.)
#[inline]
fn current_cpu() -> usize {
    CPU.with(|cached| {
        let (cpu, left) = cached.get();
        if left > 0 {
            cached.set((cpu, left - 1));
            return cpu;
        }
        let cpu = rustix::thread::sched_getcpu();
        cached.set((cpu, CPU_REUSE));
        cpu
    })
}

/// `N` counters: what one series, rule, limit or histogram counts per request. Counts go
/// to `first` until the set is busy, then each CPU's to its own stripe; readers sum both.
#[derive(Debug)]
pub(crate) struct Counters<const N: usize> {
    /// The counters of a set that is not busy; after, only read, so that the lines they
    /// share with `uses` and `stripes`' pointer stay in every core's cache.
    first: [AtomicU64; N],
    /// How many times `first` was handed out to count on, until [`BUSY`].
    uses: AtomicU64,
    /// [`STRIPES`] of them, once busy, each on cache lines of its own (on x86, a pair of
    /// lines, which it fetches together).
    stripes: OnceLock<Box<[CachePadded<[AtomicU64; N]>]>>,
}

impl<const N: usize> Default for Counters<N> {
    fn default() -> Self {
        Self {
            first: std::array::from_fn(|_| AtomicU64::new(0)),
            uses: AtomicU64::new(0),
            stripes: OnceLock::new(),
        }
    }
}

impl<const N: usize> Counters<N> {
    /// The counters to add this count to (see [`add`]): the stripe of the CPU the caller
    /// runs on, or the plain ones of a set that is not busy yet.
    #[inline]
    pub(super) fn mine(&self) -> &[AtomicU64; N] {
        if let Some(stripes) = self.stripes.get() {
            return &stripes[current_cpu() & (stripes.len() - 1)];
        }
        // Exactly one caller sees `BUSY` go by.
        if self.uses.fetch_add(1, Relaxed) == BUSY && *STRIPES > 1 {
            self.stripes.get_or_init(|| {
                (0..*STRIPES)
                    .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                    .collect()
            });
        }
        &self.first
    }

    /// Counter `index`: the plain counter plus its stripes.
    pub(super) fn get(&self, index: usize) -> u64 {
        let striped: u64 = self.stripes.get().map_or(0, |stripes| {
            stripes.iter().map(|s| s[index].load(Relaxed)).sum()
        });
        self.first[index].load(Relaxed) + striped
    }

    /// Whether the set has taken its stripes.
    #[cfg(test)]
    fn is_striped(&self) -> bool {
        self.stripes.get().is_some()
    }
}

/// Adds `n` to `counter` (from [`Counters::mine`]); nothing for 0, so that an unused
/// counter's line is not written.
#[inline]
pub(super) fn add(counter: &AtomicU64, n: u64) {
    if n > 0 {
        counter.fetch_add(n, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use crossbeam_utils::CachePadded;

    use super::{BUSY, CPU_REUSE, Counters, MAX_STRIPES, STRIPES, add, current_cpu};

    #[test]
    fn every_thread_counts_and_the_sum_sees_them_all() {
        let counters = Counters::<3>::default();
        let threads = 2 * MAX_STRIPES as u64;
        let each = BUSY;
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..each {
                        let mine = counters.mine();
                        add(&mine[1], 2);
                        add(&mine[2], 0);
                    }
                });
            }
        });
        let totals: Vec<u64> = (0..3).map(|i| counters.get(i)).collect();
        assert_eq!(totals, [0, 2 * each * threads, 0]);
        assert_eq!(counters.is_striped(), *STRIPES > 1);
    }

    #[test]
    fn a_set_stripes_only_once_busy_and_keeps_its_earlier_counts() {
        let counters = Counters::<1>::default();
        for _ in 0..BUSY {
            add(&counters.mine()[0], 1);
        }
        assert!(!counters.is_striped());
        assert_eq!(counters.get(0), BUSY);
        for _ in 0..10 {
            add(&counters.mine()[0], 1);
        }
        assert_eq!(counters.is_striped(), *STRIPES > 1);
        assert_eq!(counters.get(0), BUSY + 10);
    }

    #[test]
    fn a_thread_moved_to_another_cpu_counts_there_soon() {
        use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
        let allowed = sched_getaffinity(None).expect("this thread's CPUs");
        let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
            .filter(|&c| allowed.is_set(c))
            .collect();
        // In a thread of its own, whose CPUs the test may change.
        std::thread::spawn(move || {
            for &cpu in cpus.iter().chain(cpus.iter().rev()) {
                let mut only = CpuSet::new();
                only.set(cpu);
                sched_setaffinity(None, &only).expect("moving the thread");
                let seen: Vec<usize> = (0..=CPU_REUSE).map(|_| current_cpu()).collect();
                assert_eq!(seen.last(), Some(&cpu), "moved to CPU {cpu}");
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn there_is_a_stripe_per_cpu_up_to_the_cap() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert!(STRIPES.is_power_of_two());
        assert!(*STRIPES <= MAX_STRIPES);
        assert!(*STRIPES >= cpus.min(MAX_STRIPES));
    }

    #[test]
    fn stripes_do_not_share_cache_lines() {
        let counters = Counters::<1>::default();
        for _ in 0..=BUSY {
            counters.mine();
        }
        let Some(stripes) = counters.stripes.get() else {
            assert_eq!(*STRIPES, 1, "a busy set on several CPUs has stripes");
            return;
        };
        let addresses: Vec<usize> = stripes
            .iter()
            .map(|stripe| std::ptr::from_ref(stripe) as usize)
            .collect();
        assert_eq!(addresses.len(), *STRIPES);
        let line = align_of::<CachePadded<u8>>();
        assert!(line >= 64);
        for pair in addresses.windows(2) {
            assert_eq!(pair[1] - pair[0], line);
        }
        assert_eq!(addresses[0] % line, 0);
    }
}
