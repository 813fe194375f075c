//! The Prometheus name of a stat no mapping names, and of a mapped name: statsd_exporter's
//! `EscapeMetricName`.
//!
//! Every character but ASCII letters, digits and `_` becomes `_`, one `_` per character
//! (so `é` is one `_`, not two); the second of two dashes in a row is dropped instead; a
//! name starting with a digit gets a leading `_`.

/// `name` as statsd_exporter escapes it into a metric name.
pub(crate) fn escape_metric_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    let mut previous = None;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else if !(c == '-' && previous == Some('-')) {
            out.push('_');
        }
        previous = Some(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape_metric_name;

    #[test]
    fn names_are_escaped_as_statsd_exporter_escapes_them() {
        let cases = [
            ("", ""),
            (
                "ratelimit.service.config_load_success",
                "ratelimit_service_config_load_success",
            ),
            (
                "ratelimit.service.rate_limit.d.domain_not_found",
                "ratelimit_service_rate_limit_d_domain_not_found",
            ),
            ("1abc", "_1abc"),
            ("a-b", "a_b"),
            ("a--b", "a_b"),
            ("a---b", "a_b"),
            ("a-.-b", "a___b"),
            ("é.x", "__x"),
            ("a/b:c|d", "a_b_c_d"),
        ];
        for (raw, escaped) in cases {
            assert_eq!(escape_metric_name(raw), escaped, "{raw}");
        }
    }
}
