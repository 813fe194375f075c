//! What a scrape shows about the config source, the connections and the quota service:
//! read from them for the metrics, which know none of them.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::metrics::{ConnectionReport, QuotaReport, Reporter, SourceReport};
use crate::net::Connections;
use crate::rlqs::Registry;
use crate::source::History;

/// The things a running server's metrics report on, read at each scrape.
#[derive(Debug)]
pub(super) struct ServerReporter {
    /// What the config source has done.
    pub(super) history: Arc<History>,
    /// Every port's connection counters.
    pub(super) connections: Arc<Connections>,
    /// The quota service.
    pub(super) quotas: Arc<Registry>,
}

impl Reporter for ServerReporter {
    fn source(&self) -> SourceReport {
        let history = &self.history;
        SourceReport {
            kind: history.kind(),
            version: history.version(),
            loaded: history.loaded(),
            changed_at: history.changed_at(),
            applied: history.applied.load(Relaxed),
            rejected: history.rejected.load(Relaxed),
            failing: history.last_error.lock().is_some(),
        }
    }

    fn connections(&self) -> ConnectionReport {
        let connections = &self.connections;
        ConnectionReport {
            open: connections.open(),
            max: connections.max(),
            refused: connections.refused(),
            idle_closed: connections.idle_closed(),
            aged_out: connections.aged_out(),
            descriptor_shortages: connections.descriptor_shortages(),
            tls_failures: connections.tls_failures(),
        }
    }

    fn quotas(&self) -> QuotaReport {
        let (streams, buckets) = self.quotas.counts();
        let stats = self.quotas.stats();
        QuotaReport {
            streams,
            buckets,
            reports: stats.reports.load(Relaxed),
            assignments: stats.assignments.load(Relaxed),
            allowed: stats.allowed.load(Relaxed),
            denied: stats.denied.load(Relaxed),
            refused_buckets: stats.refused_buckets.load(Relaxed),
            dropped: stats.dropped.load(Relaxed),
            nudges: stats.nudges.load(Relaxed),
        }
    }
}
