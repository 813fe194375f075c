//! What the registry is told and tells: buckets, usages, assignments, and what the
//! operator page and the metrics read.

use std::sync::atomic::AtomicU64;

use super::super::quota::Quota;
use super::super::share::Share;
use super::StreamId;

/// A quota bucket's key: its domain and its id's entries, sorted by key (not a
/// [`crate::bucket_key::BucketKey`], which names a rate-limit bucket of the stores).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QuotaKey {
    /// The stream's domain.
    pub domain: String,
    /// The id's entries, sorted.
    pub id: Vec<(String, String)>,
}

/// One bucket's usage in a report.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    /// Which bucket.
    pub id: Vec<(String, String)>,
    /// Seconds the counts cover (0 for a bucket's first report).
    pub seconds: u64,
    /// Requests Envoy let through.
    pub allowed: u64,
    /// Requests Envoy refused.
    pub denied: u64,
}

/// What a bucket is assigned for one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// `blanket_rule`: `ALLOW_ALL` (true) or `DENY_ALL`.
    Blanket(bool),
    /// A token bucket.
    TokenBucket(Share),
}

/// How buckets that match no rule are answered (`--rlqs-unmatched`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    /// `ALLOW_ALL`.
    Allow,
    /// `DENY_ALL`.
    Deny,
}

/// What the quota service counted since it started (`meshlimit_rlqs_*`).
#[derive(Debug, Default)]
pub struct Stats {
    /// Usage reports received (messages).
    pub reports: AtomicU64,
    /// Assignments queued on streams (one per bucket and stream).
    pub assignments: AtomicU64,
    /// Requests Envoys reported they let through.
    pub allowed: AtomicU64,
    /// Requests Envoys reported they refused.
    pub denied: AtomicU64,
    /// Buckets refused because their stream had [`super::MAX_BUCKETS_PER_STREAM`].
    pub refused_buckets: AtomicU64,
    /// Assignment messages dropped because a stream did not read its earlier ones.
    pub dropped: AtomicU64,
    /// Buckets looked at again at once because another replica published them.
    pub nudges: AtomicU64,
}

/// One bucket as the operator page shows it.
#[derive(Debug, Clone)]
pub struct BucketView {
    /// Which bucket.
    pub key: QuotaKey,
    /// The matching rule's whole quota, `None` when unmatched.
    pub quota: Option<Quota>,
    /// Each reporting stream: its demand (requests per second) and assignment.
    pub reporters: Vec<(StreamId, Option<f64>, Option<Assignment>)>,
}

/// The registry as the operator page shows it: every stream (id, domain, buckets) and
/// the first buckets in key order.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Open streams: id, domain (empty before its first report), buckets reported.
    pub streams: Vec<(StreamId, String, usize)>,
    /// The first buckets, sorted.
    pub buckets: Vec<BucketView>,
    /// Buckets in all.
    pub total_buckets: usize,
}
