//! `GET /rlqs`: the quota service's open streams, buckets and current assignments, as text.

use std::fmt::Write;

use super::quota::Quota;
use super::registry::{Assignment, Registry};

/// Most buckets the page lists.
pub const LISTED: usize = 1000;

/// The page.
pub fn page(registry: &Registry) -> String {
    listing(registry, LISTED)
}

/// The page, listing at most `most` buckets.
pub fn listing(registry: &Registry, most: usize) -> String {
    let snapshot = registry.snapshot(most);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "quota service (StreamRateLimitQuotas): {} open streams, {} buckets",
        snapshot.streams.len(),
        snapshot.total_buckets
    );
    for (id, domain, buckets) in &snapshot.streams {
        let _ = writeln!(out, "stream #{id}: domain {domain:?}, {buckets} buckets");
    }
    for bucket in &snapshot.buckets {
        let id: Vec<String> = bucket
            .key
            .id
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let quota = match bucket.quota {
            None => "no rule matches".to_string(),
            Some(Quota::AllowAll) => "rule quota ALLOW_ALL".to_string(),
            Some(Quota::DenyAll) => "rule quota DENY_ALL".to_string(),
            Some(Quota::TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval_seconds,
            }) => format!(
                "rule quota token_bucket max_tokens {max_tokens}, {tokens_per_fill} per {fill_interval_seconds}s"
            ),
        };
        let _ = writeln!(
            out,
            "bucket {} {{{}}}: {quota}",
            bucket.key.domain,
            id.join(", ")
        );
        for (stream, demand, assigned) in &bucket.reporters {
            let demand = demand.map_or_else(|| "unknown".to_string(), |d| format!("{d:.1}/s"));
            let _ = writeln!(
                out,
                "  stream #{stream}: demand {demand}, assigned {}",
                describe(*assigned)
            );
        }
    }
    if snapshot.total_buckets > snapshot.buckets.len() {
        let _ = writeln!(
            out,
            "(and {} more buckets)",
            snapshot.total_buckets - snapshot.buckets.len()
        );
    }
    out
}

fn describe(assigned: Option<Assignment>) -> String {
    match assigned {
        None => "nothing yet".into(),
        Some(Assignment::Blanket(true)) => "ALLOW_ALL".into(),
        Some(Assignment::Blanket(false)) => "DENY_ALL".into(),
        Some(Assignment::TokenBucket(share)) => format!(
            "token_bucket max_tokens {}, {} per {}s ({:.2}/s)",
            share.max_tokens,
            share.tokens_per_fill,
            share.fill_interval_seconds,
            share.per_second()
        ),
    }
}
