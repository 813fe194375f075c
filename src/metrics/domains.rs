//! `domain_not_found`: descriptors of requests to a domain the config does not have.
//!
//! The Go server counts them in `ratelimit.service.rate_limit.<domain>.domain_not_found`,
//! one counter per domain. Its Prometheus mapping has no entry for that name, so
//! statsd_exporter would make a metric name per domain
//! (`ratelimit_service_rate_limit_<domain>_domain_not_found`); here it is one family,
//! `ratelimit_service_rate_limit_domain_not_found{domain}`, as the per-rule ones are.
//!
//! The domain is the caller's choice, so the series are capped: at most
//! `--max-metric-values` domains get one of their own, and a domain longer than
//! [`MAX_DOMAIN_BYTES`] none; the rest count on the series labelled
//! [`OVERFLOW_VALUE`]. Domains that have a series keep it, through reloads too.

use std::collections::{BTreeMap, HashMap};

use foldhash::fast::RandomState;

use super::Metrics;
use super::detailed::OVERFLOW_VALUE;
use super::labels::sanitize;
use super::text::{family, sample};

/// The longest domain with a series of its own: far above real domain names, short enough
/// that the capped number of series stays small in memory and in every scrape.
const MAX_DOMAIN_BYTES: usize = 256;

const NAME: &str = "ratelimit_service_rate_limit_domain_not_found";

/// Descriptors per unknown domain, within the cap.
#[derive(Debug, Default)]
pub(super) struct UnknownDomains {
    /// Domain as requested → descriptors.
    counts: HashMap<Box<str>, u64, RandomState>,
    /// Descriptors of domains past the cap or too long.
    overflow: u64,
}

impl UnknownDomains {
    /// Counts `descriptors` of a request to `domain`, allowing `cap` domains a series.
    fn count(&mut self, domain: &str, descriptors: u64, cap: usize) {
        if let Some(count) = self.counts.get_mut(domain) {
            *count += descriptors;
        } else if self.counts.len() < cap && domain.len() <= MAX_DOMAIN_BYTES {
            self.counts.insert(domain.into(), descriptors);
        } else {
            self.overflow += descriptors;
        }
    }

    /// Descriptors by `domain` label, sorted; domains that sanitise alike add up.
    pub(super) fn by_label(&self) -> BTreeMap<String, u64> {
        let mut labels = BTreeMap::new();
        for (domain, count) in &self.counts {
            *labels.entry(sanitize(domain)).or_default() += count;
        }
        if self.overflow > 0 {
            *labels.entry(OVERFLOW_VALUE.to_string()).or_default() += self.overflow;
        }
        labels
    }
}

impl Metrics {
    /// A request with `descriptors` descriptors to a domain the config does not have.
    pub(crate) fn domain_not_found(&self, domain: &str, descriptors: usize) {
        let cap = self.max_metric_values();
        let descriptors = u64::try_from(descriptors).unwrap_or(u64::MAX);
        self.unknown_domains.lock().count(domain, descriptors, cap);
    }

    /// `ratelimit_service_rate_limit_domain_not_found`, one sample per domain.
    pub(super) fn render_domains_not_found(&self, out: &mut String) {
        let labels = self.unknown_domains.lock().by_label();
        family(
            out,
            NAME,
            "counter",
            "Descriptors of requests to domains the config does not have, per domain; past --max-metric-values domains (or 256 bytes), domain=\"_other_\".",
        );
        for (domain, count) in &labels {
            sample(out, NAME, [("domain", domain.as_str())], count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(requests: &[(&str, u64)], cap: usize) -> Vec<(String, u64)> {
        let mut domains = UnknownDomains::default();
        for &(domain, descriptors) in requests {
            domains.count(domain, descriptors, cap);
        }
        domains.by_label().into_iter().collect()
    }

    fn pairs(expected: &[(&str, u64)]) -> Vec<(String, u64)> {
        expected.iter().map(|&(d, n)| (d.to_string(), n)).collect()
    }

    #[test]
    fn each_descriptor_counts_under_its_domain() {
        let got = counted(&[("a", 2), ("b", 1), ("a", 3)], 10);
        assert_eq!(got, pairs(&[("a", 5), ("b", 1)]));
    }

    #[test]
    fn domains_past_the_cap_share_the_overflow_series() {
        let got = counted(&[("a", 1), ("b", 1), ("c", 2), ("d", 1), ("a", 1)], 2);
        assert_eq!(got, pairs(&[("_other_", 3), ("a", 2), ("b", 1)]));
    }

    #[test]
    fn overlong_domains_never_get_a_series() {
        let long = "x".repeat(MAX_DOMAIN_BYTES + 1);
        let fits = "y".repeat(MAX_DOMAIN_BYTES);
        let got = counted(&[(&long, 1), (&fits, 1)], 10);
        assert_eq!(got, pairs(&[("_other_", 1), (&fits, 1)]));
    }

    #[test]
    fn labels_are_sanitised_like_the_go_stat_names() {
        let got = counted(&[("a:b", 1), ("a|b", 1), ("10.0.0.1", 1)], 10);
        assert_eq!(got, pairs(&[("10_0_0_1", 1), ("a_b", 2)]));
    }
}
