//! One descriptor with a few limits (a `rate_limits` list) and nothing else in the
//! request: its limits share one bucket (see [`super::cell`]), so one lookup under one lock
//! finds them all, and their keys differ by the limits' parts, so no limit repeats.
//! Decided without the general batch's bookkeeping (`check_many`), which would cost more
//! than the second limit itself.

use super::{Inner, shard_index};
use crate::clock::Nanos;
use crate::limiter::{self, Report};
use crate::store::{Check, Reports};

/// Most limits decided here; a longer list goes through `check_many`.
const MOST_LIMITS: usize = 4;

impl Inner {
    /// Whether `checks` are the limits of one listed descriptor (see the module docs), at
    /// most [`MOST_LIMITS`]. Its limits' keys share the descriptor's key (the contract of
    /// [`Check::descriptor`]), so the lengths are compared, not the text.
    pub(super) fn one_listed_descriptor(checks: &[Check<'_>]) -> bool {
        let Some(first) = checks.first() else {
            return false;
        };
        let descriptor_len = first.key.descriptor_part().len();
        checks.len() <= MOST_LIMITS
            && checks.iter().all(|c| {
                c.key.is_listed()
                    && c.descriptor == first.descriptor
                    && c.key.descriptor_part().len() == descriptor_len
            })
    }

    /// Decides the limits of one listed descriptor under its shard's lock. Optimistic, as
    /// most requests pass: each limit keeps its consumed state as soon as it is stepped,
    /// and a denied request puts back what it found and keeps the unconsumed states
    /// instead (a second step per limit, only then). The lock makes the two passes one
    /// decision.
    pub(super) fn check_listed(&self, checks: &[Check<'_>], now: Nanos) -> Reports {
        debug_assert!(
            checks
                .iter()
                .all(|c| c.key.descriptor_part() == checks[0].key.descriptor_part())
        );
        let hash = self.hash(&checks[0].key);
        let shard = shard_index(hash);
        let mut buckets = self.shards[shard].0.lock();
        let touched = buckets.touch(&checks[0].key, hash, self.usage.current(), |bytes| {
            self.usage.created(bytes)
        });
        let mut grown = touched.grown;
        let slot = touched.place.slot;
        let mut places = [touched.place; MOST_LIMITS];
        let mut found = [None; MOST_LIMITS];
        let mut reports = Reports::new();
        for (i, check) in checks.iter().enumerate() {
            if i > 0 {
                let added;
                (places[i], added) = buckets.place_in(slot, &check.key, i);
                grown += added;
            }
            let kept = buckets.kept_mut(places[i]);
            found[i] = *kept.state;
            let (state, report) =
                limiter::step(kept.state.as_ref(), &check.limit, check.hits, now).consumed();
            kept.keep(Some(state), &check.limit);
            reports.push(report);
        }
        let denied = limiter::request_denied(
            checks
                .iter()
                .zip(&reports)
                .map(|(c, r)| (c.descriptor, c.mode, r.over)),
        );
        if denied {
            for (((check, place), state), report) in
                checks.iter().zip(places).zip(found).zip(&mut reports)
            {
                let step = limiter::step(state.as_ref(), &check.limit, check.hits, now);
                let (state, unconsumed) = step.unconsumed();
                buckets.kept_mut(place).keep(Some(state), &check.limit);
                // Each limit keeps its own verdict, which decided the request.
                *report = Report {
                    over: report.over,
                    ..unconsumed
                };
            }
        }
        if touched.reordered {
            self.publish(shard, &buckets);
        }
        drop(buckets);
        self.grown(touched.created, grown, now);
        reports
    }
}
