//! Requests of two descriptors on two different one-limit buckets, a gateway's most common
//! shape (a user and method, a client address): decided as [`super::batch`] decides them,
//! without its bookkeeping for repeated keys and any number of shards.
//!
//! With two different buckets, each bucket's state is stepped once: the request's fate
//! follows from both verdicts, and each step then settles as consumed or not (as a
//! one-descriptor decision does). `check_many` steps again from the stored state for a
//! denied request, which for different buckets is the same step. The locks are the
//! buckets' shards', taken in ascending order like everywhere else.

use parking_lot::MutexGuard;
use smallvec::SmallVec;

use super::batch::denied;
use super::shard::{Buckets, Place};
use super::{Inner, shard_index};
use crate::clock::Nanos;
use crate::limiter;
use crate::store::{Check, Reports};

impl Inner {
    /// The reports of `pair`, two checks, or `None` when they are not of that shape (a
    /// repeated key, a limit of a `rate_limits` list), which [`Inner::check_many`] decides
    /// instead.
    pub(super) fn check_pair(&self, pair: &[Check<'_>], now: Nanos) -> Option<Reports> {
        let [a, b] = pair else {
            return None;
        };
        if a.key.is_listed() || b.key.is_listed() {
            return None;
        }
        let ids = [a, b].map(|check| self.id(&check.key));
        if ids[0] == ids[1] {
            return None;
        }
        let shards = ids.map(shard_index);
        let (low, high) = (shards[0].min(shards[1]), shards[0].max(shards[1]));
        let mut guards: SmallVec<[MutexGuard<'_, Buckets>; 2]> = SmallVec::new();
        guards.push(self.shards[low].0.lock());
        if high != low {
            guards.push(self.shards[high].0.lock());
        }
        // Which of `guards` holds each check's bucket.
        let guard_of = shards.map(|shard| usize::from(shard != low));

        let (mut created, mut reordered) = (false, [false; 2]);
        let mut places = [Place { slot: 0, limit: 0 }; 2];
        let mut steps = SmallVec::<[limiter::Step; 2]>::new();
        for (i, check) in pair.iter().enumerate() {
            let buckets = &mut guards[guard_of[i]];
            let touched = buckets.touch(&check.key, ids[i], self.usage.current(), |bytes| {
                self.usage.created(bytes)
            });
            created |= touched.created;
            reordered[guard_of[i]] |= touched.reordered;
            places[i] = touched.place;
            let state = buckets.kept_mut(touched.place).state.as_ref();
            steps.push(limiter::step(state, &check.limit, check.hits, now));
        }
        let denied = denied(pair, |i| steps[i].over());
        let mut reports = Reports::new();
        for (i, (check, step)) in pair.iter().zip(&steps).enumerate() {
            let (state, report) = step.settle(denied);
            guards[guard_of[i]]
                .kept_mut(places[i])
                .keep(Some(state), &check.limit);
            reports.push(report);
        }
        for (guard, buckets) in guards.iter().enumerate() {
            if reordered[guard] {
                self.publish([low, high][guard], buckets);
            }
        }
        drop(guards);
        self.grown(created, 0, now);
        Some(reports)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::bucket_key::BucketKey;
    use crate::clock::{Clock, ManualClock, NANOS_PER_SEC};
    use crate::rules::{Algorithm, Limit, Mode, Unit};
    use crate::store::Check;
    use crate::store::memory::{MemoryStore, shard_index};

    fn limit(requests_per_unit: u32, algorithm: Algorithm) -> Limit {
        Limit {
            requests_per_unit,
            unit: Unit::Second,
            multiplier: 1,
            burst: requests_per_unit,
            algorithm,
        }
    }

    /// Two keys whose buckets `store` keeps in one shard, and two it keeps in two.
    fn key_pairs(store: &MemoryStore) -> [(String, String); 2] {
        let keys: Vec<String> = (0..2_000).map(|i| format!("5:k{i:04}")).collect();
        let shard = |key: &String| shard_index(store.inner.id(&BucketKey::from(key.as_str())));
        let one_shard = (0..keys.len())
            .flat_map(|i| (0..i).map(move |j| (j, i)))
            .find(|&(j, i)| shard(&keys[j]) == shard(&keys[i]))
            .expect("2,000 keys in 256 shards share one");
        let two_shards = (1..keys.len())
            .find(|&i| shard(&keys[0]) != shard(&keys[i]))
            .expect("keys in other shards");
        [
            (keys[one_shard.0].clone(), keys[one_shard.1].clone()),
            (keys[0].clone(), keys[two_shards].clone()),
        ]
    }

    /// The same requests through the pair path (`MemoryStore::check`) on one store and
    /// through `check_many` on another: every report agrees, and so does every later
    /// decision, whatever the modes, algorithms and hits, the two buckets in one shard or
    /// in two.
    #[test]
    fn pairs_decide_exactly_as_the_general_path() {
        let clock = Arc::new(ManualClock::new(1_000 * NANOS_PER_SEC));
        let pairs = MemoryStore::new(1_000, clock.clone());
        let general = MemoryStore::new(1_000, clock.clone());
        let modes = [Mode::Enforce, Mode::Shadow, Mode::Quota, Mode::ShadowQuota];
        let algorithms = [
            Algorithm::TokenBucket,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
        ];
        let mut decided = 0;
        for (a_key, b_key) in key_pairs(&pairs) {
            for algorithm in algorithms {
                for a_mode in modes {
                    for b_mode in modes {
                        let check = |key, rpu, mode, hits, descriptor| Check {
                            key: BucketKey::from(key),
                            limit: limit(rpu, algorithm),
                            hits,
                            mode,
                            descriptor,
                        };
                        for step in 0..8u64 {
                            let request = [
                                check(a_key.as_str(), 3, a_mode, step % 3, 0),
                                check(b_key.as_str(), 5, b_mode, 1 + step % 2, 1),
                            ];
                            let now = clock.now();
                            assert_eq!(
                                pairs.check(&request, now),
                                general.inner.check_many(&request, now),
                                "{a_key} {b_key} {a_mode:?}/{b_mode:?} {algorithm:?} step {step}"
                            );
                            decided += 1;
                            clock.advance(Duration::from_millis(150));
                        }
                        // The next combination starts from full buckets.
                        clock.advance(Duration::from_secs(10));
                    }
                }
            }
        }
        assert_eq!(decided, 2 * 3 * 4 * 4 * 8);
    }
}
