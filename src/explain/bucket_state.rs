//! An operator's hand on one descriptor's buckets (envoyproxy/ratelimit issue #191):
//! what each limit's bucket holds now, and resetting them. Served by `GET /bucket` and
//! `POST /bucket/reset`, used by `meshlimit bucket`.
//!
//! Both start from the same [`Plan`] a request would get, so that the keys shown and
//! reset are exactly the ones `ShouldRateLimit` decides on.

use serde_json::{Value, json};

use crate::bucket_key::BucketKey;
use crate::clock::Nanos;
use crate::error::{RequestError, StoreError};
use crate::limiter::Report;
use crate::plan::{Limits, Plan, Resolved};
use crate::request::{Descriptor, Request};
use crate::rules::{Algorithm, Limit, Rule};
use crate::service::Service;
use crate::store::{Held, Store};

/// Why an operator's request about a bucket has no answer.
#[derive(Debug, thiserror::Error)]
pub enum BucketStateError {
    /// The request itself is wrong (no domain, entries over the caps, …).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The descriptor has no bucket: no rule matches it, or its rule never limits.
    #[error("{0}")]
    NoBucket(String),
    /// The store could not answer or reset (its error names the store).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a reset did: each key of the matched rule's limits, and whether it held anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetDone {
    /// The rule the descriptor matched (its full key).
    pub rule: String,
    /// Each bucket key reset, in config order, and whether the store had it.
    pub keys: Vec<(String, bool)>,
}

/// The descriptor's limited rule in `plan` (one descriptor), or why it has none.
fn limited<'p, 'c>(
    plan: &'p Plan<'c>,
    domain: &str,
) -> Result<(&'c Rule, &'p Limits<'c>, &'p std::ops::Range<usize>), BucketStateError> {
    let no_bucket = |why: String| Err(BucketStateError::NoBucket(why));
    if !plan.knows_domain() {
        return no_bucket(format!("no domain {domain:?} in the config"));
    }
    match plan.resolved().first() {
        Some(Resolved::Limited {
            limits,
            rule: Some(rule),
            key,
            ..
        }) => Ok((rule, limits, key)),
        Some(Resolved::Unlimited { rule, .. }) => no_bucket(format!(
            "rule {} is unlimited: it has no bucket",
            rule.full_key
        )),
        _ => no_bucket(format!(
            "no rule of domain {domain:?} matches this descriptor (GET /explain says where the walk stops)"
        )),
    }
}

/// The plan of a request of `descriptor` alone in `domain`, one hit.
fn plan_of<'c>(
    service: &Service,
    config: &'c crate::config::Config,
    domain: &str,
    descriptor: &Descriptor,
) -> Result<Plan<'c>, BucketStateError> {
    let descriptors = std::slice::from_ref(descriptor);
    let request = Request::new(domain, descriptors, 1);
    Ok(Plan::build(config, &request, service.plan_defaults())?)
}

/// The state of every bucket of the rule `descriptor` matches in `domain`, as JSON (see
/// `docs/operations.md`, "Inspecting and resetting a bucket"). Consumes nothing.
///
/// # Errors
/// A bad request, a descriptor without a bucket, or a store that cannot answer.
pub async fn inspect(
    service: &Service,
    domain: &str,
    descriptor: &Descriptor,
) -> Result<Value, BucketStateError> {
    let config = service.config().load();
    let plan = plan_of(service, &config, domain, descriptor)?;
    let (rule, limits, key) = limited(&plan, domain)?;
    let store = service.store();
    let now = service.clock().now();
    // The peek sees each bucket as a check of 0 hits: the level, without taking any; it
    // releases expired holds, counted on their rules as a decision's would be.
    let request = Request::new(domain, std::slice::from_ref(descriptor), 1);
    let expiries = service.hold_expiries(&config, &request, &plan, false);
    let mut checks = plan.checks();
    crate::service::count_expiries(&mut checks, &expiries);
    let reports = store.peek(&checks, now).await?;
    let redis = match store {
        Store::Redis(redis) => Some(redis.key_prefix()),
        Store::Memory(_) => None,
    };
    let mut buckets = Vec::with_capacity(reports.len());
    for ((limit, config, bucket), report) in plan.limit_keys(limits, key).zip(&reports) {
        let held = store.held(&bucket, now).await?;
        // A list's limits are told apart by name, or by period when unnamed.
        let name = match config {
            Some(c) if limits.len() > 1 => c.label(),
            Some(c) => c.name.clone(),
            None => String::new(),
        };
        let slots = rule.holds.and_then(|h| h.slots);
        let mut entry = bucket_json(&bucket, &name, &limit, report, &held, slots.is_some(), now);
        if let Some(prefix) = redis {
            entry["redis_key"] = Value::from(bucket.redis_key(prefix));
        }
        if let Some(max) = slots {
            entry["slots"] = json!({ "in_use": held.holds, "max": max });
        }
        buckets.push(entry);
    }
    Ok(json!({
        "domain": domain,
        "descriptor": descriptor_text(descriptor),
        "store": store.kind(),
        "rule": rule_json(rule),
        "limits": buckets,
    }))
}

/// Resets every bucket of the rule `descriptor` matches in `domain` (see
/// [`Store::reset`]): full again, holds and slots dropped.
///
/// # Errors
/// A bad request, a descriptor without a bucket, or a store that cannot reset; keys
/// reset before the store failed stay reset.
pub async fn reset(
    service: &Service,
    domain: &str,
    descriptor: &Descriptor,
) -> Result<ResetDone, BucketStateError> {
    let config = service.config().load();
    let plan = plan_of(service, &config, domain, descriptor)?;
    let (rule, limits, key) = limited(&plan, domain)?;
    let mut keys = Vec::with_capacity(limits.len());
    for (_, _, bucket) in plan.limit_keys(limits, key) {
        let existed = service.store().reset(&bucket).await?;
        keys.push((bucket.to_string(), existed));
    }
    Ok(ResetDone {
        rule: rule.full_key.clone(),
        keys,
    })
}

/// `k=v,k2=v2`, as the descriptor was given.
pub fn descriptor_text(descriptor: &Descriptor) -> String {
    let entries: Vec<String> = descriptor
        .entries
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    entries.join(",")
}

fn rule_json(rule: &Rule) -> Value {
    let holds = rule.holds.map(|h| {
        json!({
            "kind": if h.slots.is_some() { "concurrency" } else { "reserve" },
            "ttl_ms": ms(h.ttl),
            "slots": h.slots,
        })
    });
    json!({
        "key": rule.full_key,
        "name": rule.name,
        "shadow_mode": rule.mode.is_shadow(),
        "quota_mode": rule.mode.is_quota(),
        "holds": holds,
    })
}

/// One limit's bucket: the limit, its level as the peek saw it (slots, on a
/// `concurrency` rule), and what it holds.
fn bucket_json(
    bucket: &BucketKey<'_>,
    name: &str,
    limit: &Limit,
    report: &Report,
    held: &Held,
    concurrency: bool,
    now: Nanos,
) -> Value {
    let (owed, full_in) = if concurrency {
        // A concurrency rule's peek reports slots: `remaining` free, `count` in use (no
        // debt), `reset` until the soonest slot is released; all free only when none is
        // taken.
        (0, (held.holds == 0).then_some(0))
    } else {
        let owed = report.owed(limit);
        // `reset` is the time until full (empty, for a window) while the bucket is OK,
        // and until a hit could pass while it is over or in debt; a fixed window's is its
        // end either way.
        let refusing = report.over || owed > 0;
        let full_in =
            (!refusing || limit.algorithm == Algorithm::FixedWindow).then(|| ms(report.reset));
        (owed, full_in)
    };
    let soonest = (held.holds > 0).then(|| ms(held.soonest_expiry.saturating_sub(now)));
    json!({
        "key": bucket.to_string(),
        "name": name,
        "limit": {
            "requests_per_unit": limit.requests_per_unit,
            "unit": limit.unit.name(),
            "unit_multiplier": limit.multiplier,
            "burst": limit.burst,
            "algorithm": limit.algorithm.name(),
            "charge": limit.charge,
        },
        "level": {
            "remaining": report.remaining,
            "over": report.over,
            "owed": owed,
            "reset_ms": ms(report.reset),
            "full_in_ms": full_in,
        },
        "held": {
            "holds": held.holds,
            "hits": held.hits,
            "soonest_expiry_ms": soonest,
        },
    })
}

/// Nanoseconds as whole milliseconds, rounded up: "in 0 ms" only when it is now.
fn ms(nanos: Nanos) -> u64 {
    nanos.div_ceil(1_000_000)
}
