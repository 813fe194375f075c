//! `--ratelimit-headers draft`: the `RateLimit-Policy` and `RateLimit` fields of the IETF
//! httpapi draft "RateLimit header fields for HTTP" (draft-ietf-httpapi-ratelimit-headers-11),
//! describing every limit of every limited descriptor of a request, where the Go server's
//! `RateLimit-Limit/-Remaining/-Reset` describe one status only.
//!
//! Each field is a List of Items, one per limit, in request order and, within a
//! descriptor, in config order. An Item is the policy's name as a String with Integer
//! parameters: `q` (requests per unit) and `w` (the period in seconds, unit ×
//! `unit_multiplier`) in `RateLimit-Policy`; `r` (requests remaining) and `t` (whole
//! seconds until the limit's reset, rounded up) in `RateLimit`.
//!
//! A policy is named by the limit's `name`; an unnamed limit (or a request's override) by
//! `d<descriptor index>-<period>s`, e.g. `d0-60s`. A name already used earlier in the same
//! answer gets `-2`, `-3`, ... appended, because a client pairs the two fields' Items by
//! name.

use std::collections::HashSet;
use std::fmt::Write as _;

use super::sf;
use crate::clock::NANOS_PER_SEC;
use crate::service::{CurrentLimit, DescriptorStatus};

/// The draft's field naming the policies: quota and window of each.
pub const POLICY_FIELD: &str = "RateLimit-Policy";

/// The draft's field with each policy's current state: remaining and reset.
pub const LIMIT_FIELD: &str = "RateLimit";

/// The values of [`POLICY_FIELD`] and [`LIMIT_FIELD`] for a response's `statuses`, or
/// `None` when no descriptor had a limit (the draft's lists are never empty).
pub(super) fn values(statuses: &[DescriptorStatus]) -> Option<(String, String)> {
    let mut policies = String::new();
    let mut limits = String::new();
    let mut names = Names::default();
    for (descriptor, status) in statuses.iter().enumerate() {
        for limit in status.each_limit().iter() {
            let name = names.claim(policy_name(descriptor, &limit.limit));
            if !policies.is_empty() {
                policies.push_str(", ");
                limits.push_str(", ");
            }
            let window = sf::integer(limit.limit.period_seconds());
            let reset = sf::integer(limit.reset.div_ceil(NANOS_PER_SEC));
            sf::push_string(&mut policies, &name);
            // Writing to a String cannot fail.
            let _ = write!(policies, ";q={};w={window}", limit.limit.requests_per_unit);
            sf::push_string(&mut limits, &name);
            let _ = write!(limits, ";r={};t={reset}", limit.remaining);
        }
    }
    (!policies.is_empty()).then_some((policies, limits))
}

/// Longest policy name kept from a config `name`: every limit of up to 64 descriptors may
/// be in one answer, and Envoy refuses responses whose headers pass its limit (60 KiB by
/// default), so one long name must not multiply into that.
const MAX_NAME: usize = 64;

/// The name a limit of descriptor `descriptor` goes by before de-duplication: its own (at
/// most [`MAX_NAME`] characters), else one made of the descriptor's index and the period,
/// stable across requests of the same shape.
fn policy_name(descriptor: usize, limit: &CurrentLimit) -> String {
    if limit.name.is_empty() {
        format!("d{descriptor}-{}s", limit.period_seconds())
    } else {
        sf::printable(&limit.name).chars().take(MAX_NAME).collect()
    }
}

/// The policy names used so far in one answer.
#[derive(Default)]
struct Names(HashSet<String>);

impl Names {
    /// `name`, or the first of `name-2`, `name-3`, ... not used yet; now used.
    fn claim(&mut self, name: String) -> String {
        let mut unique = name.clone();
        let mut n = 1;
        while self.0.contains(&unique) {
            n += 1;
            unique = format!("{name}-{n}");
        }
        self.0.insert(unique.clone());
        unique
    }
}

#[cfg(test)]
mod tests;
