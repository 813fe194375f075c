//! The Prometheus text format 0.0.4: families, samples, fixed-bucket histograms.

use std::fmt::{Display, Write as _};
use std::time::Duration;

use super::stripes::{Counters, wrapping_sum};

/// Upper bounds of the latency buckets, in nanoseconds: 10 µs to 1 s.
const BUCKETS: [u64; 16] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

/// A latency histogram with fixed [`BUCKETS`]: one bucket and the sum move per observation,
/// in the observing thread's stripe (every request observes the same histograms).
#[derive(Debug, Default)]
pub(super) struct Histogram(
    /// Observations per bucket (not cumulative; the last is above every bound), then the
    /// sum of observations in nanoseconds at [`SUM`].
    Counters<{ BUCKETS.len() + 2 }>,
);

/// Where a [`Histogram`] keeps the sum of its observations.
const SUM: usize = BUCKETS.len() + 1;

impl Histogram {
    pub(super) fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        // Nearly every observation falls in the first bucket: no search for it.
        let bucket = if nanos <= BUCKETS[0] {
            0
        } else {
            BUCKETS.partition_point(|&bound| bound < nanos)
        };
        let mine = self.0.mine();
        mine.add(bucket, 1);
        mine.add(SUM, nanos);
    }

    /// Observations in bucket `index` (not cumulative), over every stripe.
    fn bucket(&self, index: usize) -> u64 {
        self.0.get(index)
    }

    pub(super) fn count(&self) -> u64 {
        wrapping_sum((0..=BUCKETS.len()).map(|i| self.bucket(i)))
    }

    /// Observations in each bucket (not cumulative), each with its upper bound in
    /// milliseconds; the last bucket, above every bound, with the highest bound.
    pub(super) fn buckets_ms(&self) -> Vec<(f64, u64)> {
        let bounds = BUCKETS.into_iter().chain([BUCKETS[BUCKETS.len() - 1]]);
        bounds
            .enumerate()
            .map(|(index, bound)| (bound as f64 / 1e6, self.bucket(index)))
            .collect()
    }

    pub(super) fn render(&self, out: &mut String, name: &str, label: (&str, &str)) {
        self.render_in(out, name, &[label], seconds);
    }

    /// The histogram's samples with `labels`, its bounds and sum given in the unit
    /// `unit` makes of nanoseconds.
    pub(super) fn render_in(
        &self,
        out: &mut String,
        name: &str,
        labels: &[(&str, &str)],
        unit: impl Fn(u64) -> f64,
    ) {
        let bucket = format!("{name}_bucket");
        let mut seen = 0;
        for (index, bound) in BUCKETS.into_iter().enumerate() {
            seen += self.bucket(index);
            let le = unit(bound).to_string();
            let with_le = labels.iter().copied().chain([("le", le.as_str())]);
            sample(out, &bucket, with_le, seen);
        }
        seen += self.bucket(BUCKETS.len());
        let with_le = labels.iter().copied().chain([("le", "+Inf")]);
        sample(out, &bucket, with_le, seen);
        let sum = self.0.get(SUM);
        sample(
            out,
            &format!("{name}_sum"),
            labels.iter().copied(),
            unit(sum),
        );
        sample(out, &format!("{name}_count"), labels.iter().copied(), seen);
    }
}

/// Nanoseconds as seconds.
pub(super) fn seconds(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

/// `# HELP` and `# TYPE` of a family.
pub(super) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// One sample line: `name{label="value",...} value`.
pub(super) fn sample<'a>(
    out: &mut String,
    name: &str,
    labels: impl IntoIterator<Item = (&'a str, &'a str)>,
    value: impl Display,
) {
    out.push_str(name);
    let mut first = true;
    for (key, text) in labels {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(key);
        out.push_str("=\"");
        for c in text.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    if !first {
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_escape_label_values() {
        let mut out = String::new();
        sample(&mut out, "m", [("a", "x\"y\\z\nw")], 3);
        sample(&mut out, "n", [], 1.5);
        assert_eq!(out, "m{a=\"x\\\"y\\\\z\\nw\"} 3\nn 1.5\n");
    }

    #[test]
    fn histograms_are_cumulative_and_count_every_observation() {
        let h = Histogram::default();
        for micros in [5, 10, 11, 2_000_000] {
            h.observe(Duration::from_micros(micros));
        }
        let mut out = String::new();
        h.render(&mut out, "t", ("x", "y"));
        assert!(
            out.contains("t_bucket{x=\"y\",le=\"0.00001\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("t_bucket{x=\"y\",le=\"0.000025\"} 3\n"),
            "{out}"
        );
        assert!(out.contains("t_bucket{x=\"y\",le=\"1\"} 3\n"), "{out}");
        assert!(out.contains("t_bucket{x=\"y\",le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("t_sum{x=\"y\"} 2.000026\n"), "{out}");
        assert!(out.contains("t_count{x=\"y\"} 4\n"), "{out}");
    }
}
