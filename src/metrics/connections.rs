//! `meshlimit_connections_*`: what happened to connections on every port (the counters
//! of the servers' connection layer).

use super::text::{family, sample};

/// The connection counters of every port together, as a scrape shows them: read at
/// scrape time by the [`super::Reporter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionReport {
    /// Connections open now.
    pub open: usize,
    /// The cap on open connections (`--max-connections`).
    pub max: usize,
    /// Connections closed as soon as accepted because the cap was reached.
    pub refused: u64,
    /// Connections closed after the idle timeout.
    pub idle_closed: u64,
    /// gRPC connections asked to close at their maximum age.
    pub aged_out: u64,
    /// Accepts that failed for want of file descriptors.
    pub descriptor_shortages: u64,
    /// TLS handshakes that failed.
    pub tls_failures: u64,
}

/// Appends the connection metrics to `out`.
pub(super) fn render(out: &mut String, connections: &ConnectionReport) {
    let gauges = [
        (
            "meshlimit_connections_open",
            "Connections open now, all ports together.",
            connections.open as u64,
        ),
        (
            "meshlimit_connections_max",
            "The cap on open connections (--max-connections).",
            connections.max as u64,
        ),
    ];
    for (name, help, value) in gauges {
        family(out, name, "gauge", help);
        sample(out, name, [], value);
    }
    let counters = [
        (
            "meshlimit_connections_refused_total",
            "Connections closed as soon as accepted because --max-connections were open.",
            connections.refused,
        ),
        (
            "meshlimit_connections_idle_closed_total",
            "Connections closed after --idle-timeout-ms without traffic or requests in flight.",
            connections.idle_closed,
        ),
        (
            "meshlimit_connections_aged_out_total",
            "gRPC connections asked to close at --grpc-max-connection-age-ms.",
            connections.aged_out,
        ),
        (
            "meshlimit_connections_accept_descriptor_errors_total",
            "Accepts that failed because the process or system was out of file descriptors.",
            connections.descriptor_shortages,
        ),
        (
            "meshlimit_connections_tls_handshake_errors_total",
            "TLS handshakes that failed (no or a refused client certificate, bad input, timeout).",
            connections.tls_failures,
        ),
    ];
    for (name, help, value) in counters {
        family(out, name, "counter", help);
        sample(out, name, [], value);
    }
}
