//! Requests of two to [`FEW`] descriptors on as many different one-limit buckets, a
//! gateway's most common shapes (a user and method, a client address, a route): decided
//! as [`super::many`] decides them, without its bookkeeping for repeated keys and any
//! number of shards.
//!
//! With every bucket different, each bucket's state is stepped once: the request's fate
//! follows from the verdicts, and each step then settles as consumed or not (as a
//! one-descriptor decision does). `check_many` steps again from the stored state for a
//! denied request, which for different buckets is the same step. The locks are the
//! buckets' shards', each taken once, in ascending order like everywhere else.

use parking_lot::MutexGuard;
use smallvec::SmallVec;

use super::bucket_id::BucketId;
use super::many::denied;
use super::shard::{Buckets, Place};
use super::{Inner, shard_index};
use crate::clock::Nanos;
use crate::limiter;
use crate::store::{Check, Reports};

/// Most descriptors a request may have to be decided here.
const FEW: usize = 4;

impl Inner {
    /// The reports of `checks`, or `None` when they are not of this shape (one check or
    /// more than [`FEW`], a repeated key, a limit of a `rate_limits` list), which
    /// [`Inner::check_many`] decides instead.
    pub(super) fn check_few(&self, checks: &[Check<'_>], now: Nanos) -> Option<Reports> {
        let n = checks.len();
        if !(2..=FEW).contains(&n) || checks.iter().any(|c| c.key.is_listed()) {
            return None;
        }
        let mut ids = [BucketId::default(); FEW];
        for (i, check) in checks.iter().enumerate() {
            ids[i] = self.id(&check.key);
            if ids[..i].contains(&ids[i]) {
                return None;
            }
        }
        let mut shards = [0; FEW];
        for (shard, &id) in shards.iter_mut().zip(&ids[..n]) {
            *shard = shard_index(id);
        }
        // The shards to lock, ascending, each once. Not `many::ShardSet`: walking its 256
        // bits and ranking in them cost about 110 instructions more a three-descriptor
        // request (callgrind on `service/three_descriptors`, 9,347 against 9,227).
        let mut locked: SmallVec<[usize; FEW]> = shards[..n].iter().copied().collect();
        locked.sort_unstable();
        locked.dedup();
        let mut guards: SmallVec<[MutexGuard<'_, Buckets>; FEW]> =
            locked.iter().map(|&s| self.shards[s].0.lock()).collect();
        // Which of `guards` holds each check's bucket.
        let mut guard_of = [0; FEW];
        for (guard, &shard) in guard_of.iter_mut().zip(&shards[..n]) {
            *guard = locked.iter().position(|&s| s == shard).unwrap_or_default();
        }

        let (mut created, mut reordered) = (false, [false; FEW]);
        let mut places = [Place { slot: 0, limit: 0 }; FEW];
        let mut steps = SmallVec::<[limiter::Step; FEW]>::new();
        for (i, check) in checks.iter().enumerate() {
            let buckets = &mut guards[guard_of[i]];
            let touched = buckets.touch(&check.key, ids[i], self.usage.current(), |bytes| {
                self.usage.created(bytes)
            });
            created |= touched.created;
            reordered[guard_of[i]] |= touched.reordered;
            places[i] = touched.place;
            let state = buckets.kept_mut(touched.place).state.as_ref();
            steps.push(check.step(state, now));
        }
        let denied = denied(checks, |i| steps[i].over());
        let mut reports = Reports::new();
        for (i, (check, step)) in checks.iter().zip(&steps).enumerate() {
            let (state, report) = step.settle(denied);
            guards[guard_of[i]]
                .kept_mut(places[i])
                .keep(Some(state), &check.limit);
            reports.push(report);
        }
        for (guard, buckets) in guards.iter().enumerate() {
            if reordered[guard] {
                self.publish(locked[guard], buckets);
            }
        }
        drop(guards);
        self.grown(created, 0, now);
        Some(reports)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::bucket_key::BucketKey;
    use crate::clock::{Clock, ManualClock, NANOS_PER_SEC};
    use crate::rules::{Algorithm, Limit, Mode, Unit};
    use crate::store::Check;
    use crate::store::memory::{MemoryStore, shard_index};

    fn limit(requests_per_unit: u32, algorithm: Algorithm) -> Limit {
        Limit {
            charge: false,
            requests_per_unit,
            unit: Unit::Second,
            multiplier: 1,
            burst: requests_per_unit,
            algorithm,
        }
    }

    /// Sets of two to four keys whose buckets `store` keeps in one shard, in as many shards
    /// as keys, and in between.
    fn key_sets(store: &MemoryStore) -> Vec<Vec<String>> {
        let shard = |key: &str| shard_index(store.inner.id(&BucketKey::from(key)));
        let mut by_shard: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for i in 0..2_000 {
            let key = format!("5:k{i:04}");
            by_shard.entry(shard(&key)).or_default().push(key);
        }
        // 2,000 keys in 256 shards: several to a shard.
        let shared: Vec<&Vec<String>> = by_shard.values().filter(|k| k.len() >= 2).collect();
        let (a, b) = (shared[0], shared[1]);
        let alone: Vec<&String> = by_shard.values().skip(2).map(|k| &k[0]).collect();
        let set = |keys: &[&String]| keys.iter().map(|k| k.to_string()).collect();
        vec![
            set(&[&a[0], &a[1]]),
            set(&[&a[0], alone[0]]),
            set(&[&a[0], alone[0], &a[1]]),
            set(&[&a[0], &b[0], &a[1], &b[1]]),
            set(&[alone[0], alone[1], alone[2], alone[3]]),
        ]
    }

    /// The same requests through this path (`MemoryStore::check`) on one store and through
    /// `check_many` on another: every report agrees, and so does every later decision,
    /// whatever the modes, algorithms and hits, the buckets in one shard, in as many as
    /// there are buckets, or in between.
    #[test]
    fn few_buckets_decide_exactly_as_the_general_path() {
        let clock = Arc::new(ManualClock::new(1_000 * NANOS_PER_SEC));
        let few = MemoryStore::new(1_000, clock.clone());
        let general = MemoryStore::new(1_000, clock.clone());
        let modes = [Mode::Enforce, Mode::Shadow, Mode::Quota, Mode::ShadowQuota];
        let algorithms = [
            Algorithm::TokenBucket,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
        ];
        let (mut decided, mut expected) = (0, 0);
        for keys in key_sets(&few) {
            let n = keys.len() as u32;
            expected += algorithms.len() * 4usize.pow(n) * 8;
            for algorithm in algorithms {
                // Every assignment of the four modes to the keys.
                for combination in 0..4usize.pow(n) {
                    let mode_of = |k: usize| modes[combination / 4usize.pow(k as u32) % 4];
                    let request = |step: u64| -> Vec<Check<'_>> {
                        keys.iter()
                            .enumerate()
                            .map(|(k, key)| Check {
                                refund: false,
                                key: BucketKey::from(key.as_str()),
                                limit: limit(if k % 2 == 0 { 3 } else { 5 }, algorithm),
                                hits: if k == 0 { step % 3 } else { 1 + step % 2 },
                                mode: mode_of(k),
                                descriptor: k,
                                hold: None,
                            })
                            .collect()
                    };
                    for step in 0..8u64 {
                        let request = request(step);
                        let now = clock.now();
                        assert_eq!(
                            few.check(&request, now),
                            general.inner.check_many(&request, now),
                            "{keys:?} combination {combination} {algorithm:?} step {step}"
                        );
                        decided += 1;
                        clock.advance(Duration::from_millis(150));
                    }
                    // Each bucket is where a one-descriptor request finds it.
                    for check in request(0) {
                        let now = clock.now();
                        assert_eq!(few.peek(&check, now), general.peek(&check, now));
                    }
                    // The next combination starts from full buckets.
                    clock.advance(Duration::from_secs(10));
                }
            }
        }
        assert_eq!(decided, expected);
    }
}
