//! `meshlimit_rlqs_*`: the rate limit quota service's streams, buckets, reports and
//! assignments, and the requests Envoys reported.

use std::sync::atomic::Ordering::Relaxed;

use super::text::{family, sample};
use crate::rlqs::Registry;

/// Appends the quota service's metrics to `out`.
pub(super) fn render(out: &mut String, registry: &Registry) {
    let (streams, buckets) = registry.counts();
    for (name, help, value) in [
        (
            "meshlimit_rlqs_streams",
            "Quota streams (StreamRateLimitQuotas) open now.",
            streams as u64,
        ),
        (
            "meshlimit_rlqs_buckets",
            "Quota buckets reported by the open streams.",
            buckets as u64,
        ),
    ] {
        family(out, name, "gauge", help);
        sample(out, name, [], value);
    }
    let stats = registry.stats();
    for (name, help, counter) in [
        (
            "meshlimit_rlqs_reports_total",
            "Usage reports received.",
            &stats.reports,
        ),
        (
            "meshlimit_rlqs_assignments_total",
            "Bucket assignments sent (one per bucket and stream).",
            &stats.assignments,
        ),
        (
            "meshlimit_rlqs_allowed_total",
            "Requests Envoys reported they let through.",
            &stats.allowed,
        ),
        (
            "meshlimit_rlqs_denied_total",
            "Requests Envoys reported they refused.",
            &stats.denied,
        ),
        (
            "meshlimit_rlqs_refused_buckets_total",
            "Bucket reports refused because their stream already had the most buckets a stream may.",
            &stats.refused_buckets,
        ),
        (
            "meshlimit_rlqs_dropped_total",
            "Assignment messages dropped because a stream had not read its earlier ones.",
            &stats.dropped,
        ),
        (
            "meshlimit_rlqs_nudges_total",
            "Buckets looked at again at once because another replica published them (Redis store).",
            &stats.nudges,
        ),
    ] {
        family(out, name, "counter", help);
        sample(out, name, [], counter.load(Relaxed));
    }
}
