//! `meshlimit_rlqs_*`: the rate limit quota service's streams, buckets, reports and
//! assignments, and the requests Envoys reported.

use super::text::{family, sample};

/// The quota service's counts, as a scrape shows them: read at scrape time by the
/// [`super::Reporter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaReport {
    /// Quota streams open now.
    pub streams: usize,
    /// Quota buckets reported by the open streams.
    pub buckets: usize,
    /// Usage reports received.
    pub reports: u64,
    /// Bucket assignments sent (one per bucket and stream).
    pub assignments: u64,
    /// Requests Envoys reported they let through.
    pub allowed: u64,
    /// Requests Envoys reported they refused.
    pub denied: u64,
    /// Bucket reports refused because their stream had the most buckets a stream may.
    pub refused_buckets: u64,
    /// Assignment messages dropped because a stream had not read its earlier ones.
    pub dropped: u64,
    /// Buckets looked at again at once because another replica published them.
    pub nudges: u64,
}

/// Appends the quota service's metrics to `out`.
pub(super) fn render(out: &mut String, quotas: &QuotaReport) {
    let (streams, buckets) = (quotas.streams, quotas.buckets);
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
    for (name, help, counter) in [
        (
            "meshlimit_rlqs_reports_total",
            "Usage reports received.",
            quotas.reports,
        ),
        (
            "meshlimit_rlqs_assignments_total",
            "Bucket assignments sent (one per bucket and stream).",
            quotas.assignments,
        ),
        (
            "meshlimit_rlqs_allowed_total",
            "Requests Envoys reported they let through.",
            quotas.allowed,
        ),
        (
            "meshlimit_rlqs_denied_total",
            "Requests Envoys reported they refused.",
            quotas.denied,
        ),
        (
            "meshlimit_rlqs_refused_buckets_total",
            "Bucket reports refused because their stream already had the most buckets a stream may.",
            quotas.refused_buckets,
        ),
        (
            "meshlimit_rlqs_dropped_total",
            "Assignment messages dropped because a stream had not read its earlier ones.",
            quotas.dropped,
        ),
        (
            "meshlimit_rlqs_nudges_total",
            "Buckets looked at again at once because another replica published them (Redis store).",
            quotas.nudges,
        ),
    ] {
        family(out, name, "counter", help);
        sample(out, name, [], counter);
    }
}
