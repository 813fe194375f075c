//! Which of a descriptor's limits binds. A descriptor with several limits (a `rate_limits`
//! list) has one status, since the protocol has one: OVER_LIMIT when any limit refuses, its
//! numbers from the *binding* limit. That is, of the limits refusing, the one with the
//! longest wait (so its reset is a retry-after for the whole descriptor); when none refuses,
//! the one with the fewest requests left; the first in config order on a tie.
//!
//! It lives beside [`Report`] because the answer, the statistics and `/explain` all ask it
//! of the same reports and must agree.

use super::Report;

/// The index of the binding limit among a descriptor's `reports` (one per limit, in config
/// order); 0 when there are none.
pub fn binding(reports: &[Report]) -> usize {
    let refusing = reports
        .iter()
        .enumerate()
        .filter(|(_, r)| r.over)
        // The first of equal waits: `max_by_key` keeps the last, hence the reversal.
        .rev()
        .max_by_key(|(_, r)| r.reset);
    match refusing {
        Some((i, _)) => i,
        None => reports
            .iter()
            .enumerate()
            .min_by_key(|(_, r)| r.remaining)
            .map_or(0, |(i, _)| i),
    }
}
