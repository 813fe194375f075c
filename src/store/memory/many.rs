//! Requests with several descriptors: decided together, in time linear in their number.
//!
//! # Locking
//! A request locks the shards of all its keys, in ascending shard order (so two requests
//! never deadlock), and holds them while it looks up or creates its buckets, steps each
//! descriptor (twice at most) and writes the outcome back. That is what exactness needs:
//! the request's fate depends on every bucket, and no other decision may change one of them
//! in between. Everything else happens outside the locks: the ids, finding repeated keys
//! (one hash-table pass beyond a few descriptors), the lock order (a bitmap of the 256
//! shards, so no sort), and the evictions that buckets it created may cause. The time
//! under the locks is linear in the descriptors, a few microseconds at the service's
//! 64-descriptor cap, and an unrelated request waits only when it needs one of those shards.
//!
//! An optimistic scheme (read without locks, then lock, validate and write) would still
//! have to hold every lock while validating and writing, which is most of the work here,
//! and would retry under contention.

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use parking_lot::MutexGuard;
use smallvec::SmallVec;

use super::bucket_id::BucketId;
use super::shard::{Buckets, Place};
use super::{Inner, SHARDS, shard_index};
use crate::clock::Nanos;
use crate::limiter::{self, Report, State};
use crate::store::{Check, Reports};

/// Up to this many descriptors, repeated keys are found by comparing each with those before
/// it (cheaper than building a table).
const LINEAR_DEDUP: usize = 16;

impl Inner {
    /// Several descriptors: all their shards locked in shard order, then two passes.
    /// Never inlined: its large stack frame would otherwise be set up for every
    /// one-descriptor decision too.
    #[inline(never)]
    pub(super) fn check_many(&self, checks: &[Check<'_>], now: Nanos) -> Reports {
        self.check_many_fixed(checks, now, &[])
    }

    /// [`Inner::check_many`], but for the checks whose report `fixed` gives (a
    /// concurrency slot's, decided by the ledger): their verdicts count, their buckets
    /// are never touched.
    pub(super) fn check_many_fixed(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        fixed: &[Option<Report>],
    ) -> Reports {
        let fixed_at = |i: usize| fixed.get(i).copied().flatten();
        // Extended, not collected: a collected vector is built elsewhere and copied in.
        let mut pending: SmallVec<[Pending; 4]> = SmallVec::new();
        pending.extend(checks.iter().map(|c| {
            let id = self.id(&c.key);
            Pending {
                id,
                shard: shard_index(id),
                first: 0,
                place: Place { slot: 0, limit: 0 },
                state: None,
            }
        }));
        // The same key twice in one request is one bucket: `first` of check i is the first
        // check with its key, whose `state` is the bucket's evolving state.
        first_of_each_key(checks, &mut pending);
        let mut shards = ShardSet::default();
        for (i, p) in pending.iter_mut().enumerate() {
            if fixed_at(i).is_some() {
                p.first = usize::MAX;
            } else {
                shards.insert(p.shard);
            }
        }
        let mut guards: SmallVec<[MutexGuard<'_, Buckets>; 4]> =
            shards.iter().map(|s| self.shards[s].0.lock()).collect();

        let (mut created, mut grown) = (false, 0);
        for (i, check) in checks.iter().enumerate() {
            let p = &mut pending[i];
            if p.first != i {
                continue;
            }
            let buckets = &mut guards[shards.rank(p.shard)];
            let touched = buckets.touch(&check.key, p.id, self.usage.current(), |bytes| {
                self.usage.created(bytes)
            });
            created |= touched.created;
            grown += touched.grown;
            p.place = touched.place;
            p.state = *buckets.kept_mut(touched.place).state;
        }

        // Pass 1: as if the request passes, each check seeing the hits of earlier checks on
        // the same bucket. Its reports are the answer unless the request is denied; each
        // keeps its verdict either way, which is what decides the request.
        let mut reports = Reports::new();
        for (i, check) in checks.iter().enumerate() {
            if let Some(report) = fixed_at(i) {
                reports.push(report);
                continue;
            }
            let first = pending[i].first;
            let bucket = &mut pending[first].state;
            let step = check.step(bucket.as_ref(), now);
            let (state, report) = step.consumed();
            *bucket = Some(state);
            reports.push(report);
        }
        let denied = denied(checks, |i| reports[i].over);

        // Pass 2, only for a denied request: replay from the stored states (still in the
        // buckets) without consumption, which matters only when a bucket repeats.
        if denied {
            for (i, p) in pending.iter_mut().enumerate() {
                if p.first == i {
                    p.state = *guards[shards.rank(p.shard)].kept_mut(p.place).state;
                }
            }
            for (i, check) in checks.iter().enumerate() {
                if fixed_at(i).is_some() {
                    continue;
                }
                let first = pending[i].first;
                let bucket = &mut pending[first].state;
                let step = check.step(bucket.as_ref(), now);
                let (state, unconsumed) = step.unconsumed();
                *bucket = Some(state);
                reports[i] = Report {
                    over: reports[i].over,
                    ..unconsumed
                };
            }
        }
        for (i, (check, p)) in checks.iter().zip(&pending).enumerate() {
            if p.first == i {
                guards[shards.rank(p.shard)]
                    .kept_mut(p.place)
                    .keep(p.state, &check.limit);
            }
        }
        for (index, buckets) in shards.iter().zip(&guards) {
            self.publish(index, buckets);
        }
        drop(guards);
        self.grown(created, grown, now);
        reports
    }
}

/// Whether a request of `checks`, check `i` over its limit when `over(i)`, is denied (see
/// [`limiter::request_denied`]).
pub(super) fn denied(checks: &[Check<'_>], over: impl Fn(usize) -> bool) -> bool {
    // Nearly every request: nothing over, which no mode turns into a denial.
    (0..checks.len()).any(&over)
        && limiter::request_denied(
            checks
                .iter()
                .enumerate()
                .map(|(i, c)| (c.descriptor, c.mode, over(i))),
        )
}

/// What a request keeps of each of its checks while deciding.
#[derive(Debug)]
struct Pending {
    /// The id of the check's bucket.
    id: BucketId,
    /// The shard of its bucket.
    shard: usize,
    /// The index of the first check with the same key (its own, for most).
    first: usize,
    /// For a first check: where its bucket's state lives.
    place: Place,
    /// For a first check: its bucket's state as the request's checks use it.
    state: Option<State>,
}

/// Sets each check's `first`: the index of the first check with the same key.
fn first_of_each_key(checks: &[Check<'_>], pending: &mut [Pending]) {
    let same = |p: &[Pending], i: usize, j: usize| {
        // The bucket, and in it the limit: what `Buckets::touch` tells apart.
        p[i].id == p[j].id && checks[i].key.limit_part() == checks[j].key.limit_part()
    };
    if checks.len() <= LINEAR_DEDUP {
        for i in 0..checks.len() {
            pending[i].first = (0..i).find(|&j| same(pending, i, j)).unwrap_or(i);
        }
        return;
    }
    let mut seen: HashTable<usize> = HashTable::with_capacity(checks.len());
    for i in 0..checks.len() {
        let first = match seen.entry(
            pending[i].id.low,
            |&j| same(pending, i, j),
            |&j| pending[j].id.low,
        ) {
            Entry::Occupied(found) => *found.get(),
            Entry::Vacant(absent) => {
                absent.insert(i);
                i
            }
        };
        pending[i].first = first;
    }
}

/// A set of shard indices, iterated in ascending order: the lock order.
#[derive(Debug, Default)]
struct ShardSet(
    /// One bit per shard, shard `i` at bit `i % 64` of word `i / 64`.
    [u64; SHARDS / 64],
);

impl ShardSet {
    fn insert(&mut self, shard: usize) {
        self.0[shard / 64] |= 1 << (shard % 64);
    }

    /// The members, ascending.
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(word, &bits)| {
            let mut bits = bits;
            std::iter::from_fn(move || {
                let bit = (bits != 0).then(|| bits.trailing_zeros() as usize)?;
                bits &= bits - 1;
                Some(word * 64 + bit)
            })
        })
    }

    /// The position of member `shard` in [`ShardSet::iter`]'s order.
    fn rank(&self, shard: usize) -> usize {
        let (word, bit) = (shard / 64, shard % 64);
        let below: u32 = self.0[..word].iter().map(|w| w.count_ones()).sum();
        (below + (self.0[word] & ((1 << bit) - 1)).count_ones()) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_set_orders_and_ranks() {
        let mut set = ShardSet::default();
        for shard in [200, 3, 64, 3, 255, 0] {
            set.insert(shard);
        }
        let members: Vec<usize> = set.iter().collect();
        assert_eq!(members, [0, 3, 64, 200, 255]);
        for (rank, &shard) in members.iter().enumerate() {
            assert_eq!(set.rank(shard), rank);
        }
    }
}
