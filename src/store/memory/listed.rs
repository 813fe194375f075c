//! One descriptor with several limits (a `rate_limits` list) and nothing else in the
//! request: its buckets are placed by the descriptor's key (see `Inner::shard_of`), so one
//! lock covers them all, and their keys differ by the limits' parts, so no bucket repeats.
//! Decided without the general batch's bookkeeping (`check_many`), which would cost more
//! than the second limit itself.

use std::hash::BuildHasher;

use smallvec::SmallVec;

use super::Inner;
use crate::clock::Nanos;
use crate::limiter::{self, Step};
use crate::store::{Check, Reports};

impl Inner {
    /// Whether `checks` are the limits of one listed descriptor (see the module docs).
    pub(super) fn one_listed_descriptor(checks: &[Check<'_>]) -> bool {
        let descriptor = checks.first().map(|c| c.descriptor);
        checks
            .iter()
            .all(|c| c.key.is_listed() && Some(c.descriptor) == descriptor)
    }

    /// Decides the limits of one listed descriptor under its shard's lock.
    pub(super) fn check_listed(&self, checks: &[Check<'_>], now: Nanos) -> Reports {
        let hashes: SmallVec<[u64; 4]> = checks
            .iter()
            .map(|c| self.hasher.hash_one(c.key.as_str()))
            .collect();
        let shard = self.shard_of(&checks[0].key, hashes[0]);
        let mut buckets = self.shards[shard].0.lock();
        let mut slots: SmallVec<[u32; 4]> = SmallVec::with_capacity(checks.len());
        let (mut created, mut reordered) = (false, false);
        for (check, &hash) in checks.iter().zip(&hashes) {
            let touched = buckets.touch(check.key.as_str(), hash, self.usage.current(), |bytes| {
                self.usage.created(bytes)
            });
            created |= touched.created;
            reordered |= touched.reordered;
            slots.push(touched.slot);
        }
        let steps: SmallVec<[Step; 4]> = checks
            .iter()
            .zip(&slots)
            .map(|(check, &slot)| {
                let state = buckets.slot(slot).state;
                limiter::step(state.as_ref(), &check.limit, check.hits, now)
            })
            .collect();
        let denied = super::batch::denied(checks, &steps);
        let mut reports = Reports::with_capacity(checks.len());
        for ((check, &slot), step) in checks.iter().zip(&slots).zip(&steps) {
            // Each limit keeps its own verdict, which decided the request.
            let (state, report) = step.settle(denied);
            let bucket = buckets.slot_mut(slot);
            bucket.state = Some(state);
            bucket.requests_per_unit = check.limit.requests_per_unit;
            reports.push(report);
        }
        if reordered {
            self.publish(shard, &buckets);
        }
        drop(buckets);
        if created {
            self.enforce_bounds(now);
        }
        reports
    }
}
