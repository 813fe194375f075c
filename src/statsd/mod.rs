//! The statsd and DogStatsD sink: the Go server's stats ([`crate::metrics::Metrics::go_counters`])
//! sent every flush interval to a statsd server, as envoyproxy/ratelimit does with lyft/gostats.
//!
//! # Off the request path
//! Requests count in the atomics `/metrics` reads, and nothing else: a task of its own
//! ([`spawn`]) reads them every `--statsd-flush-ms`, sends each counter's change since the
//! last flush (`name:N|c`, only counters that moved, as gostats does), and the response
//! time as timer samples ([`lines`]). A statsd server that is down, slow or refusing costs
//! requests nothing: the flush that cannot be written within the interval is dropped (its
//! stats lost), counted in `meshlimit_statsd_flushes_missed_total` and logged at most once
//! a minute, and the next flush connects again ([`sink`]). One flush's text is bounded
//! ([`lines::MAX_FLUSH_BYTES`]): counters past it wait for the next flush.
//!
//! # Why no statsd crate
//! `cadence`, the well-kept Rust client, formats one metric a call into sinks for UDP and
//! Unix sockets; it has no TCP sink (the protocol of the Go server's gostats), so the
//! connection, its reconnection and the per-flush batch would be written here anyway, and
//! the Go names need gostats' tag serialisation (`.__k=v`) that it does not do. The line
//! format itself is a few lines ([`lines`]).

mod lines;
mod sink;

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::throttle::Throttle;
use lines::{Flusher, Tags};
use sink::Sink;

/// The transport to the statsd server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// One connection, reconnected when it fails (gostats' TCP sink).
    Tcp,
    /// Datagrams of whole lines (DogStatsD's default, and most statsd servers').
    Udp,
}

/// Where and how stats are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsdSettings {
    /// `host:port` of the statsd server; the host is resolved at each connection.
    pub addr: String,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// Time between two flushes.
    pub flush: Duration,
    /// Tags on every stat (`--statsd-tags`, the Go server's `EXTRA_TAGS`), as `key:value`.
    pub tags: Vec<(String, String)>,
    /// DogStatsD: tags as `|#k:v` instead of gostats' `.__k=v` in the name.
    pub dogstatsd: bool,
}

/// Parses `k:v,k2:v2` (the Go server's `EXTRA_TAGS`).
///
/// # Errors
/// A pair without `:` or with an empty key or value.
pub fn parse_tags(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| match pair.split_once(':') {
            Some((key, value)) if !key.trim().is_empty() && !value.trim().is_empty() => {
                Ok((key.trim().to_string(), value.trim().to_string()))
            }
            _ => Err(format!("`{pair}` is not key:value")),
        })
        .collect()
}

/// Starts the sink: every `settings.flush`, the stats of `metrics` go to the server until
/// the task is aborted.
pub fn spawn(metrics: Arc<Metrics>, settings: StatsdSettings) -> JoinHandle<()> {
    info!(
        addr = %settings.addr,
        protocol = ?settings.protocol,
        flush = ?settings.flush,
        dogstatsd = settings.dogstatsd,
        "sending stats to statsd"
    );
    let tags = Tags::new(&settings.tags, settings.dogstatsd);
    let mut flusher = Flusher::new(tags);
    let mut sink = Sink::new(settings.addr.clone(), settings.protocol);
    let throttle = Throttle::new(Duration::from_secs(60));
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(settings.flush);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is now: nothing counted yet
        let mut batch = Vec::new();
        loop {
            ticks.tick().await;
            batch.clear();
            flusher.flush(&metrics, &mut batch);
            if batch.is_empty() {
                continue;
            }
            // A slow server holds this task, never a request; within the interval, so
            // that flushes do not pile up behind it.
            let sent = tokio::time::timeout(settings.flush, sink.send(&batch)).await;
            let failure = match sent {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {:?}", settings.flush)),
            };
            if failure.is_some() {
                sink.disconnect();
            }
            metrics.statsd_flushed(failure.is_none());
            if let Some(e) = failure
                && let Some(left_out) = throttle.allow()
            {
                warn!(
                    addr = %settings.addr,
                    error = %e,
                    missed_before = left_out,
                    missed_total = metrics.statsd_missed(),
                    "statsd flush missed: its stats are lost"
                );
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_key_colon_value_pairs() {
        let tags = parse_tags("env:prod, team:edge,").unwrap();
        assert_eq!(
            tags,
            [
                ("env".into(), "prod".into()),
                ("team".into(), "edge".into())
            ]
        );
        assert_eq!(parse_tags("").unwrap(), []);
        assert!(parse_tags("env").is_err());
        assert!(parse_tags("env:").is_err());
        assert!(parse_tags(":x").is_err());
    }
}
