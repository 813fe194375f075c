//! `value_to_metric`: rules named in metrics by the request's value at some levels.
//!
//! The Go server names a rule's statistics by its config path (`domain.key.key_value`), so
//! a value-less entry counts every value under `key` and a wildcard under its pattern
//! (`tier_gold*`). A descriptor with `value_to_metric: true` puts the request's value at
//! its own level instead (`key_value`, or `key` for an empty value): `shop.route_cart.user`
//! for a request `route=cart, user=u1` to a rule `route` (flagged) → `user`. Levels with a
//! value in the config keep it (the request's is the same), and a `share_threshold`
//! wildcard keeps its pattern. A rule with `detailed_metric` ignores the flags: every
//! level is the request's already.
//!
//! Only `key1` and `key2`, the first two levels, are Prometheus labels: a rule flagged
//! deeper has series per request value there too (they name its statsd stats, see
//! [`super::gostats`]), which Prometheus sums under the labels of its first two levels.
//! Request values are the caller's choice, so such rules share the cap of detailed ones
//! ([`super::detailed`]): at most `--max-metric-values` series each, the rest on an
//! overflow series whose flagged levels read `key__other_`.

use std::borrow::Cow;
use std::sync::Arc;

use smallvec::SmallVec;

use super::Metrics;
use super::detailed::{Detailed, Find, OVERFLOW_VALUE};
use super::labels::Labels;
use super::rule_stats::RuleStats;

/// Whether a rule whose `value_to_metric` bits are `levels` names series by request values.
pub(super) fn names_values(levels: u64) -> bool {
    levels != 0
}

/// How the hits of one `value_to_metric` rule find their series.
#[derive(Debug)]
pub(super) struct Valued {
    /// The rule's cap on series, kept under the labels of its config path.
    cap: Arc<Detailed>,
    /// The rule's config levels (composite keys), unsanitised.
    config: SmallVec<[Box<str>; 2]>,
    /// `Rule::value_to_metric`.
    levels: u64,
}

impl Valued {
    /// A rule whose config levels are `config` and `value_to_metric` bits `levels`.
    pub(super) fn new(cap: Arc<Detailed>, config: &[&str], levels: u64) -> Self {
        Self {
            cap,
            config: config.iter().map(|&l| l.into()).collect(),
            levels,
        }
    }
}

/// The levels of the Go server's stat name for a rule whose config levels are `config`,
/// reached by a request whose entries are `entries`: at each level whose bit is set in
/// `levels`, the request's `key_value` (`key` when the value is empty); elsewhere the
/// config's.
pub(super) fn stat_levels<'a, S: AsRef<str>>(
    config: &'a [S],
    entries: &'a [(&'a str, &'a str)],
    levels: u64,
) -> impl Iterator<Item = Cow<'a, str>> {
    config
        .iter()
        .zip(entries)
        .enumerate()
        .map(move |(at, (level, &(key, value)))| {
            let flagged = u32::try_from(at)
                .ok()
                .and_then(|at| levels.checked_shr(at))
                .is_some_and(|bits| bits & 1 == 1);
            match (flagged, value.is_empty()) {
                (false, _) => Cow::Borrowed(level.as_ref()),
                (true, true) => Cow::Borrowed(key),
                (true, false) => Cow::Owned(format!("{key}_{value}")),
            }
        })
}

impl Metrics {
    /// The series of a request with `entries` to the `value_to_metric` rule `rule`, or the
    /// rule's overflow series once it has as many as the cap allows (see [`Find`]).
    pub(super) fn valued_series(
        &self,
        domain: &str,
        rule: &Valued,
        entries: &[(&str, &str)],
        find: Find,
    ) -> Option<Arc<RuleStats>> {
        let labels = Labels::of_names(domain, stat_levels(&rule.config, entries, rule.levels));
        let overflow = || {
            let others: SmallVec<[(&str, &str); 2]> = entries
                .iter()
                .map(|&(key, _)| (key, OVERFLOW_VALUE))
                .collect();
            Labels::of_names(domain, stat_levels(&rule.config, &others, rule.levels))
        };
        self.detailed_series(&rule.cap, labels, overflow, find)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Go server's stat name: the domain and the levels, joined by dots.
    fn stat_name(domain: &str, config: &[&str], entries: &[(&str, &str)], levels: u64) -> String {
        let mut name = domain.to_string();
        for level in stat_levels(config, entries, levels) {
            name.push('.');
            name.push_str(&level);
        }
        name
    }

    #[test]
    fn flagged_levels_take_the_request_value() {
        let config = ["route", "method", "user"];
        let entries = [("route", "cart"), ("method", "PUT"), ("user", "u7")];
        let cases = [
            (0b000, "shop.route.method.user"),
            (0b001, "shop.route_cart.method.user"),
            (0b010, "shop.route.method_PUT.user"),
            (0b011, "shop.route_cart.method_PUT.user"),
            (0b111, "shop.route_cart.method_PUT.user_u7"),
        ];
        for (levels, name) in cases {
            assert_eq!(stat_name("shop", &config, &entries, levels), name);
        }
    }

    #[test]
    fn wildcards_keep_their_pattern_unless_flagged() {
        let config = ["tier_gold*"];
        let entries = [("tier", "gold42")];
        assert_eq!(stat_name("d", &config, &entries, 0), "d.tier_gold*");
        assert_eq!(stat_name("d", &config, &entries, 1), "d.tier_gold42");
    }

    #[test]
    fn an_empty_value_names_the_level_by_its_key() {
        let config = ["route", "user"];
        let entries = [("route", ""), ("user", "u1")];
        assert_eq!(stat_name("d", &config, &entries, 0b11), "d.route.user_u1");
    }

    #[test]
    fn any_flagged_level_names_series_by_values() {
        assert!(!names_values(0));
        assert!(names_values(0b01));
        assert!(names_values(0b10));
        assert!(names_values(0b100));
        assert!(names_values(1 << 63));
    }
}
