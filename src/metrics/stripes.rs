//! Counters that every request of a busy rule adds to, split into per-thread stripes once
//! busy.
//!
//! Two costs hide in a shared atomic counter. A locked addition (`lock xadd`) waits for the
//! core's earlier stores to drain, tens of cycles even on a line the core owns: with a
//! dozen of them a request, the statistics took a quarter of a three-descriptor decision.
//! And a line another core wrote last has to move first. So each thread that counts on a
//! busy set owns a stripe of its own, on cache lines of its own, and adds to it with a
//! plain load and store: it is the stripe's only writer, so no count is lost, and readers
//! (the metrics page, `/json`, the operator page) load each stripe atomically and sum them.
//!
//! Stripes are handed out to the first threads that count on a busy set, one each, and
//! given back when a thread exits; the server counts on its runtime's workers, one per
//! CPU. There are as many as the process has CPUs, at most [`MAX_STRIPES`]: a thread that
//! finds none left (a machine with more cores, or other threads that took them) adds to the
//! plain counters with locked additions, as every thread does before a set is busy, and
//! asks again every [`ASK_AGAIN`] counts.
//!
//! Stripes cost memory (128 bytes each), and most rules of a large config see little
//! traffic. So a counter set starts as one plain set of counters, and takes its stripes
//! the [`BUSY`]th time it is counted on: a config of 200,000 rules pays for the stripes of
//! the rules that are busy, not for all of them.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{LazyLock, OnceLock};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// Most stripes a counter set has, whatever the machine.
const MAX_STRIPES: usize = 16;

/// How many times a counter set is counted on before it takes its stripes: a few seconds of
/// a rule's traffic at the rates where sharing lines shows.
const BUSY: u64 = 10_000;

/// How many stripes a busy counter set has: the CPUs this process may use, at most
/// [`MAX_STRIPES`].
static STRIPES: LazyLock<usize> = LazyLock::new(|| {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(MAX_STRIPES)
});

/// The stripes' owners: which stripe numbers are free.
struct Owners {
    /// Stripe numbers never handed out start here.
    next: usize,
    /// Numbers given back by threads that exited, handed out again first.
    returned: Vec<usize>,
}

impl Owners {
    const fn new() -> Self {
        Self {
            next: 0,
            returned: Vec::new(),
        }
    }

    /// A stripe number below `stripes` that no other thread holds, if one is left.
    fn claim(&mut self, stripes: usize) -> Option<usize> {
        if let Some(stripe) = self.returned.pop() {
            return Some(stripe);
        }
        (self.next < stripes).then(|| {
            self.next += 1;
            self.next - 1
        })
    }

    /// Takes back a stripe number from a thread that no longer counts.
    fn give_back(&mut self, stripe: usize) {
        self.returned.push(stripe);
    }
}

/// The process' stripe numbers. The lock also orders an exited owner's last additions
/// before the next owner's first.
static OWNERS: Mutex<Owners> = Mutex::new(Owners::new());

/// How many counts a thread without a stripe makes before asking for one again: a stripe
/// may have been given back since by a thread that exited.
const ASK_AGAIN: u32 = 4096;

/// A thread's claim on a stripe number, given back when the thread exits.
struct Owned {
    /// The stripe number, once one was free.
    stripe: Cell<Option<usize>>,
    /// Counts left before a thread without a stripe asks again.
    wait: Cell<u32>,
}

impl Owned {
    /// The stripe number; without one, `claim`'s answer now and then.
    fn stripe(&self, claim: impl FnOnce() -> Option<usize>) -> Option<usize> {
        if let Some(stripe) = self.stripe.get() {
            return Some(stripe);
        }
        let wait = self.wait.get();
        if wait > 0 {
            self.wait.set(wait - 1);
            return None;
        }
        self.wait.set(ASK_AGAIN);
        let stripe = claim();
        self.stripe.set(stripe);
        stripe
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(stripe) = self.stripe.get() {
            OWNERS.lock().give_back(stripe);
        }
    }
}

thread_local! {
    /// The stripe number this thread owns, claimed the first time it counts on a busy set.
    static OWNED: Owned = const {
        Owned {
            stripe: Cell::new(None),
            wait: Cell::new(0),
        }
    };
}

/// The stripe number the calling thread owns; `None` if none was left for it (or while it
/// exits).
#[inline]
fn owned_stripe() -> Option<usize> {
    OWNED
        .try_with(|owned| owned.stripe(|| OWNERS.lock().claim(*STRIPES)))
        .ok()
        .flatten()
}

/// `N` counters: what one series, rule, limit or histogram counts per request. Counts go
/// to `first` until the set is busy, then each thread's to its own stripe; readers sum all.
#[derive(Debug)]
pub(crate) struct Counters<const N: usize> {
    /// The counters of a set that is not busy, and of threads without a stripe after.
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

/// The counters one count goes to (from [`Counters::mine`]).
pub(super) struct Mine<'a, const N: usize> {
    /// A stripe, or the plain counters.
    counters: &'a [AtomicU64; N],
    /// Whether the calling thread is the only one that writes `counters`.
    owned: bool,
    /// Not `Send`: an owned stripe is written by its thread alone, so a `Mine` must not be
    /// held across an `.await` that could resume on another thread.
    _here: PhantomData<*const ()>,
}

impl<const N: usize> Mine<'_, N> {
    /// Adds `n` to counter `index`; nothing for 0, so that an unused counter's line is not
    /// written.
    #[inline]
    pub(super) fn add(&self, index: usize, n: u64) {
        if n == 0 {
            return;
        }
        let counter = &self.counters[index];
        if self.owned {
            // No other thread writes this stripe: a plain load and store, no lock.
            counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
        } else {
            counter.fetch_add(n, Relaxed);
        }
    }
}

impl<const N: usize> Counters<N> {
    /// The counters to add this count to: the calling thread's stripe of a busy set, or the
    /// plain ones.
    #[inline]
    pub(super) fn mine(&self) -> Mine<'_, N> {
        if let Some(stripes) = self.stripes.get() {
            if let Some(stripe) = owned_stripe() {
                return Mine {
                    counters: &stripes[stripe],
                    owned: true,
                    _here: PhantomData,
                };
            }
        } else if self.uses.fetch_add(1, Relaxed) == BUSY {
            // Exactly one caller sees `BUSY` go by.
            self.stripes.get_or_init(|| {
                (0..*STRIPES)
                    .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                    .collect()
            });
        }
        Mine {
            counters: &self.first,
            owned: false,
            _here: PhantomData,
        }
    }

    /// Counter `index`: the plain counter plus its stripes, modulo 2^64 as each of them
    /// counts (callers choose their hits: a few hits_addend near 2^64 wrap a counter).
    pub(super) fn get(&self, index: usize) -> u64 {
        let striped = self.stripes.get().map_or(0, |stripes| {
            wrapping_sum(stripes.iter().map(|s| s[index].load(Relaxed)))
        });
        self.first[index].load(Relaxed).wrapping_add(striped)
    }

    /// Whether the set has taken its stripes.
    #[cfg(test)]
    fn is_striped(&self) -> bool {
        self.stripes.get().is_some()
    }
}

/// The sum of counters that wrap at 2^64, wrapping as they do.
pub(super) fn wrapping_sum(counts: impl IntoIterator<Item = u64>) -> u64 {
    counts.into_iter().fold(0, u64::wrapping_add)
}

#[cfg(test)]
mod tests {
    use crossbeam_utils::CachePadded;

    use std::cell::Cell;

    use super::{ASK_AGAIN, BUSY, Counters, MAX_STRIPES, Owned, Owners, STRIPES};

    #[test]
    fn every_thread_counts_and_the_sum_sees_them_all() {
        let counters = Counters::<3>::default();
        // More threads than stripes: some count on the plain counters beside the owners.
        let threads = 2 * *STRIPES as u64 + 1;
        let each = BUSY;
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..each {
                        let mine = counters.mine();
                        mine.add(1, 2);
                        mine.add(2, 0);
                    }
                });
            }
        });
        let totals: Vec<u64> = (0..3).map(|i| counters.get(i)).collect();
        assert_eq!(totals, [0, 2 * each * threads, 0]);
        assert!(counters.is_striped());
    }

    #[test]
    fn threads_that_come_and_go_hand_their_stripes_on_without_losing_counts() {
        let counters = Counters::<1>::default();
        for _ in 0..=BUSY {
            counters.mine().add(0, 1);
        }
        assert!(counters.is_striped());
        // One after another: each next thread may own the stripe the last one gave back.
        for _ in 0..3 * MAX_STRIPES {
            std::thread::scope(|s| {
                s.spawn(|| {
                    for _ in 0..1000 {
                        counters.mine().add(0, 1);
                    }
                });
            });
        }
        assert_eq!(counters.get(0), BUSY + 1 + 3 * MAX_STRIPES as u64 * 1000);
    }

    #[test]
    fn a_stripe_has_one_owner_at_a_time_and_is_reused_once_given_back() {
        let mut owners = Owners::new();
        assert_eq!(owners.claim(2), Some(0));
        assert_eq!(owners.claim(2), Some(1));
        assert_eq!(owners.claim(2), None, "two stripes, both held");
        owners.give_back(0);
        assert_eq!(owners.claim(2), Some(0));
        assert_eq!(owners.claim(2), None);
    }

    #[test]
    fn a_thread_without_a_stripe_asks_again_now_and_then() {
        let owned = Owned {
            stripe: Cell::new(None),
            wait: Cell::new(0),
        };
        let mut asked = 0;
        let mut free = None;
        for _ in 0..=ASK_AGAIN {
            assert_eq!(
                owned.stripe(|| {
                    asked += 1;
                    free
                }),
                None
            );
        }
        assert_eq!(asked, 1, "asked on the first count only");
        // A stripe was given back meanwhile: the next time it asks, it gets it.
        free = Some(1);
        let got: Vec<Option<usize>> = (0..=ASK_AGAIN)
            .map(|_| {
                owned.stripe(|| {
                    asked += 1;
                    free
                })
            })
            .collect();
        assert_eq!(asked, 2);
        assert_eq!(got.last(), Some(&Some(1)));
        assert_eq!(
            owned.stripe(|| unreachable!("kept, not asked again")),
            Some(1)
        );
        // Not given back to the process' owners: the stripe was never theirs here.
        std::mem::forget(owned);
    }

    #[test]
    fn a_set_stripes_only_once_busy_and_keeps_its_earlier_counts() {
        let counters = Counters::<1>::default();
        for _ in 0..BUSY {
            counters.mine().add(0, 1);
        }
        assert!(!counters.is_striped());
        assert_eq!(counters.get(0), BUSY);
        for _ in 0..10 {
            counters.mine().add(0, 1);
        }
        assert!(counters.is_striped());
        assert_eq!(counters.get(0), BUSY + 10);
    }

    #[test]
    fn there_is_a_stripe_per_cpu_up_to_the_cap() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(*STRIPES, cpus.min(MAX_STRIPES));
    }

    #[test]
    fn stripes_do_not_share_cache_lines() {
        let counters = Counters::<1>::default();
        for _ in 0..=BUSY {
            counters.mine();
        }
        let stripes = counters.stripes.get().expect("a busy set has stripes");
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
