//! `meshlimit explain --bucket` and `GET /explain?bucket=`: the rule a quota bucket id
//! (Envoy's RLQS `BucketId`) resolves to, step by step, and the quota that rule hands out.

use std::fmt::Write;

use super::{LISTED, describe, flags, has_rule, listed, matched, name};
use crate::error::RequestError;
use crate::rlqs::{Quota, quota_of};
use crate::service::Service;

/// Why a bucket id cannot be explained.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// No entry.
    #[error("a bucket id needs at least one entry")]
    Empty,
    /// A key given twice: a bucket id is a map.
    #[error("bucket id key {0:?} is given twice: a bucket id is a map")]
    DuplicateKey(String),
    /// Over the request caps, as a descriptor would be.
    #[error(transparent)]
    Request(#[from] RequestError),
}

/// Explains, as text, which rule of `domain` the bucket `id` resolves to in `service`'s
/// config, and what quota that rule hands out.
///
/// # Errors
/// An empty id, a key given twice, or an id over the request caps (`--max-entries`,
/// `--max-value-bytes`), as a descriptor would be.
pub fn explain_bucket(
    service: &Service,
    domain: &str,
    id: &[(String, String)],
) -> Result<String, BucketError> {
    if domain.is_empty() {
        return Err(RequestError::EmptyDomain.into());
    }
    if id.is_empty() {
        return Err(BucketError::Empty);
    }
    let entries: Vec<(&str, &str)> = id.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let defaults = service.plan_defaults();
    defaults
        .caps
        .check_descriptor(0, entries.iter().copied())
        .map_err(RequestError::from)?;
    for (i, (key, _)) in entries.iter().enumerate() {
        if entries[..i].iter().any(|(k, _)| k == key) {
            return Err(BucketError::DuplicateKey(key.to_string()));
        }
    }

    let config = service.config().load();
    let mut out = String::new();
    let mut sorted = entries.clone();
    sorted.sort_unstable();
    let shown: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(
        out,
        "domain {domain:?}, quota bucket {} (default algorithm: {})",
        shown.join(", "),
        defaults.algorithm.name()
    );
    let Some(tree) = config.domain(domain) else {
        let _ = writeln!(out, "no such domain in the config: the bucket is unmatched");
        return Ok(out);
    };
    let walk = tree.walk_quota_bucket(&entries, LISTED);
    let _ = writeln!(
        out,
        "  walk (a bucket id is unordered: at each level, of the entries not used yet, the \
         one matching the earliest entry in file order goes first):"
    );
    for (i, step) in walk.steps.iter().enumerate() {
        if let Some(how) = step.matched {
            let _ = writeln!(
                out,
                "    {}. {}={}: matched {}{}",
                i + 1,
                step.key,
                step.value,
                matched(step, how),
                has_rule(step)
            );
        }
    }
    if !walk.unused.is_empty() {
        let left: Vec<String> = walk
            .unused
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            out,
            "    then {}: nothing at this level matches; it offers {}",
            left.join(", "),
            listed(&walk.offered)
        );
        let _ = writeln!(
            out,
            "  result: unmatched: a bucket matches a rule only if the walk uses every entry \
             of its id"
        );
        return Ok(out);
    }
    let Some(rule) = walk.rule else {
        let _ = writeln!(
            out,
            "  result: unmatched: the walk used every entry but ends at an entry without a \
             rate_limit"
        );
        return Ok(out);
    };
    let limits: Vec<String> = rule
        .limits
        .iter()
        .map(|l| describe(&l.resolve(defaults.algorithm)))
        .collect();
    let _ = writeln!(
        out,
        "  rule: {}{}: {}{}",
        rule.full_key,
        name(rule),
        if limits.is_empty() {
            "unlimited".to_string()
        } else {
            limits.join("; ")
        },
        flags(rule, rule.mode)
    );
    let quota = match quota_of(rule, defaults.algorithm) {
        Quota::AllowAll => "blanket_rule ALLOW_ALL".to_string(),
        Quota::DenyAll => "blanket_rule DENY_ALL".to_string(),
        Quota::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_seconds,
        } => format!(
            "token_bucket max_tokens {max_tokens}, tokens_per_fill {tokens_per_fill}, \
             fill_interval {fill_interval_seconds}s (the rule's whole quota, for all the \
             Envoys reporting this bucket together)"
        ),
    };
    let _ = writeln!(out, "  quota: {quota}");
    Ok(out)
}
