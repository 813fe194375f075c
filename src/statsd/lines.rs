//! One flush's lines: each counter's change since the last flush, the response time as
//! timer samples, the tags as gostats or DogStatsD writes them.
//!
//! # The response time timer
//! The Go server sends one `response_time:<ms>|ms` line per request. Here requests are
//! observed in the latency histogram `/metrics` serves (10 µs to 1 s buckets), and a
//! flush sends one line per bucket that moved: the bucket's upper bound in milliseconds,
//! with the sample rate `@1/n` for its `n` requests, so that a statsd server counts `n`
//! samples of that value. The count is exact, percentiles are as fine as the buckets, a
//! flush has at most 17 timer lines whatever the traffic; requests above 1 s count as 1000.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::metrics::Metrics;

/// Most bytes one flush writes: counters that would go past it keep their change for the
/// next flush, so the buffer (and a datagram burst) stays bounded whatever the config.
pub(super) const MAX_FLUSH_BYTES: usize = 1 << 20;

/// The tags of every line, written once.
#[derive(Debug, Clone, Default)]
pub(super) struct Tags {
    /// Appended to every name (gostats: `.__k=v`, by key), or empty.
    in_name: String,
    /// Appended to every line (DogStatsD: `|#k:v,…`), or empty.
    suffix: String,
}

impl Tags {
    /// `tags` as gostats serialises them into names, or as DogStatsD tags. Values have
    /// `.`, `:` and `|` replaced by `_`, as gostats does (its `ReplaceChars`).
    pub(super) fn new(tags: &[(String, String)], dogstatsd: bool) -> Self {
        let mut sorted: Vec<(&str, String)> = tags
            .iter()
            .map(|(k, v)| (k.as_str(), v.replace(['.', ':', '|'], "_")))
            .collect();
        sorted.sort();
        sorted.dedup_by(|a, b| a.0 == b.0);
        let mut out = Tags::default();
        if sorted.is_empty() {
            return out;
        }
        if dogstatsd {
            let pairs: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            out.suffix = format!("|#{}", pairs.join(","));
        } else {
            for (key, value) in sorted {
                let _ = write!(out.in_name, ".__{key}={value}");
            }
        }
        out
    }
}

/// The state of the flushes: what each counter and bucket had at the last one.
#[derive(Debug)]
pub(super) struct Flusher {
    /// How tags are written.
    tags: Tags,
    /// Each counter's value at the last flush that sent it, by Go name: as many entries
    /// as series, which the config and `--max-metric-values` bound.
    last: HashMap<String, u64>,
    /// Each response time bucket's count at the last flush.
    last_buckets: Vec<u64>,
    /// Most bytes a flush writes.
    max_bytes: usize,
}

impl Flusher {
    /// A flusher writing `tags`, every counter counted from zero.
    pub(super) fn new(tags: Tags) -> Self {
        Self {
            tags,
            last: HashMap::new(),
            last_buckets: Vec::new(),
            max_bytes: MAX_FLUSH_BYTES,
        }
    }

    /// Appends the lines of one flush of `metrics` to `out`: counters that moved since the
    /// last flush (as long as they fit), then the timer.
    pub(super) fn flush(&mut self, metrics: &Metrics, out: &mut Vec<u8>) {
        let mut now: HashMap<String, u64> = HashMap::with_capacity(self.last.len());
        metrics.go_counters(&mut |name, value| {
            let sum = now.entry(name.to_string()).or_default();
            *sum = sum.wrapping_add(value); // counters wrap at 2^64
        });
        self.timer(metrics, out);
        let mut line = String::with_capacity(160);
        for (name, value) in now {
            let last = self.last.get(&name).copied().unwrap_or(0);
            // Counters only grow, modulo 2^64 (callers choose their hits): the change is
            // exact across a wrap.
            let delta = value.wrapping_sub(last);
            if delta == 0 {
                continue;
            }
            line.clear();
            let _ = writeln!(
                line,
                "{name}{}:{delta}|c{}",
                self.tags.in_name, self.tags.suffix
            );
            if out.len() + line.len() > self.max_bytes {
                continue; // its change waits for the next flush
            }
            out.extend_from_slice(line.as_bytes());
            self.last.insert(name, value);
        }
    }

    /// The response time's lines: one per bucket that moved, first in the flush so that
    /// the byte bound never holds them back.
    fn timer(&mut self, metrics: &Metrics, out: &mut Vec<u8>) {
        let (name, buckets) = metrics.go_response_time();
        self.last_buckets.resize(buckets.len(), 0);
        for ((bound_ms, count), last) in buckets.into_iter().zip(&mut self.last_buckets) {
            let n = count.saturating_sub(*last);
            *last = count;
            if n == 0 {
                continue;
            }
            let mut line = format!("{name}{}:{bound_ms}|ms", self.tags.in_name);
            if n > 1 {
                // The shortest text that reads back as this f64: 1/rate gives n back.
                let _ = write!(line, "|@{}", 1.0 / n as f64);
            }
            let _ = writeln!(line, "{}", self.tags.suffix);
            out.extend_from_slice(line.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::store::{MemoryStore, Store};
    use arc_swap::ArcSwap;
    use std::sync::Arc;
    use std::time::Duration;

    fn metrics() -> Metrics {
        let store = Store::Memory(MemoryStore::new(1000, Arc::new(SystemClock)));
        Metrics::new(Arc::new(ArcSwap::from_pointee(Default::default())), store)
    }

    /// Every flush's counter lines, until one has none, summed by name.
    fn flush_all(flusher: &mut Flusher, metrics: &Metrics) -> (HashMap<String, u64>, usize) {
        let (mut sums, mut flushes) = (HashMap::new(), 0);
        loop {
            let mut out = Vec::new();
            flusher.flush(metrics, &mut out);
            assert!(out.len() <= flusher.max_bytes, "{} bytes", out.len());
            if out.is_empty() {
                return (sums, flushes);
            }
            flushes += 1;
            for line in String::from_utf8(out).unwrap().lines() {
                let (name, rest) = line.split_once(':').unwrap();
                let value = rest.strip_suffix("|c").unwrap().parse::<u64>().unwrap();
                *sums.entry(name.to_string()).or_default() += value;
            }
        }
    }

    #[test]
    fn counters_past_the_bound_wait_for_the_next_flush_and_only_changes_go() {
        let metrics = metrics();
        for i in 0..40 {
            metrics.domain_not_found(&format!("ghost{i}"), i + 1);
        }
        let mut flusher = Flusher::new(Tags::default());
        flusher.max_bytes = 300;
        let (sums, flushes) = flush_all(&mut flusher, &metrics);
        assert!(flushes > 5, "{flushes} flushes");
        assert_eq!(sums.len(), 41, "40 domains and config_load_success");
        for i in 0..40 {
            let name = format!("ratelimit.service.rate_limit.ghost{i}.domain_not_found");
            assert_eq!(sums[&name], i as u64 + 1, "{name}");
        }
        metrics.domain_not_found("ghost3", 5);
        let (sums, _) = flush_all(&mut flusher, &metrics);
        let name = "ratelimit.service.rate_limit.ghost3.domain_not_found".to_string();
        assert_eq!(sums, HashMap::from([(name, 5)]));
    }

    #[test]
    fn the_timer_sends_each_bucket_once_with_its_count_as_sample_rate() {
        let metrics = metrics();
        for micros in [5, 6, 7, 20, 2_000_000] {
            metrics.answered(Duration::from_micros(micros), None);
        }
        let mut flusher = Flusher::new(Tags::new(&[("a".into(), "b".into())], true));
        let mut out = Vec::new();
        flusher.flush(&metrics, &mut out);
        let text = String::from_utf8(out).unwrap();
        let timer: Vec<&str> = text.lines().filter(|l| l.contains("|ms")).collect();
        let name = "ratelimit_server.ShouldRateLimit.response_time";
        assert_eq!(
            timer,
            [
                format!("{name}:0.01|ms|@0.3333333333333333|#a:b"),
                format!("{name}:0.025|ms|#a:b"),
                format!("{name}:1000|ms|#a:b"),
            ]
        );
        let mut again = Vec::new();
        flusher.flush(&metrics, &mut again);
        assert!(again.is_empty(), "nothing moved");
    }

    fn tags(pairs: &[(&str, &str)], dog: bool) -> Tags {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Tags::new(&pairs, dog)
    }

    #[test]
    fn gostats_puts_sorted_sanitised_tags_in_the_name() {
        let t = tags(&[("z", "1.2"), ("a", "x:y|w")], false);
        assert_eq!(t.in_name, ".__a=x_y_w.__z=1_2");
        assert_eq!(t.suffix, "");
    }

    #[test]
    fn dogstatsd_appends_the_tags() {
        let t = tags(&[("z", "1"), ("a", "b")], true);
        assert_eq!(t.in_name, "");
        assert_eq!(t.suffix, "|#a:b,z:1");
        assert_eq!(tags(&[], true).suffix, "");
    }
}
