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
                    && c.mode == first.mode
                    && c.key.descriptor_part().len() == descriptor_len
            })
    }

    /// Decides the limits of one listed descriptor under its shard's lock. Optimistic, as
    /// most requests pass: each limit keeps its consumed state as soon as it is stepped,
    /// and a denied request takes the hits back out of the limits that passed
    /// ([`limiter::unconsumed_from`], a second step per limit, only then). The lock makes
    /// the two passes one decision.
    pub(super) fn check_listed(&self, checks: &[Check<'_>], now: Nanos) -> Reports {
        debug_assert!(
            checks
                .iter()
                .all(|c| c.key.descriptor_part() == checks[0].key.descriptor_part())
        );
        let first = &checks[0];
        let id = self.id(&first.key);
        let shard = shard_index(id);
        let mut buckets = self.shards[shard].0.lock();
        let touched = buckets.touch(&first.key, id, self.usage.current(), |bytes| {
            self.usage.created(bytes)
        });
        let (slot, mut grown) = (touched.place.slot, touched.grown);
        // Each check's limit in the bucket: at the check's own position, nearly always.
        let mut at = [touched.place.limit; MOST_LIMITS];
        // Filled in place: pushing checks the inline capacity on every limit.
        let mut reports = Reports::from_buf_and_len([Report::default(); MOST_LIMITS], checks.len());
        let mut over = false;
        for (i, check) in checks.iter().enumerate() {
            if i > 0 {
                let (place, added) = buckets.place_in(slot, &check.key, i);
                at[i] = place.limit;
                grown += added;
            }
            let limit = &mut buckets.listed_mut(slot)[at[i] as usize];
            let step = check.step(limit.state(), now);
            let (state, report) = step.consumed();
            limit.keep(state, &check.limit);
            over |= report.over;
            reports[i] = report;
        }
        // One descriptor: its mode decides whether one limit over denies the request.
        if limiter::request_denied([(first.descriptor, first.mode, over)]) {
            for (i, (check, report)) in checks.iter().zip(&mut reports).enumerate() {
                // A limit over took nothing, and a charge or refund lands: its consumed
                // outcome stands.
                if report.over || check.lands() {
                    continue;
                }
                let limit = &mut buckets.listed_mut(slot)[at[i] as usize];
                let Some(consumed) = limit.state() else {
                    continue; // kept just above
                };
                let (state, unconsumed) =
                    limiter::unconsumed_from(consumed, &check.limit, check.hits, now);
                limit.keep(state, &check.limit);
                *report = unconsumed;
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
