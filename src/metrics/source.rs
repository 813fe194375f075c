//! The config source's families: loads and rejections under the Go server's names, and
//! meshlimit's own about the source in force.
//!
//! - `meshlimit_config_source_info{source,version}` 1: the source's kind (`file`,
//!   `postgres`, `xds`) and the version in force (xDS `version_info`, else the config's
//!   fingerprint; empty before the first load);
//! - `meshlimit_config_loaded`: 1 once a config from the source is in force (0 only for a
//!   server started without one);
//! - `meshlimit_config_last_change_timestamp_seconds`: when the config in force was
//!   swapped in (absent before the first load);
//! - `meshlimit_config_last_load_failed`: 1 while the last attempt was rejected (the
//!   problems are in `/rlconfig`), 0 once one loads.

use super::text::{family, sample};
use crate::clock::{NANOS_PER_SEC, Nanos};

/// What the config source has done, as a scrape shows it: read from the source's
/// history at scrape time by the [`super::Reporter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceReport {
    /// `file`, `postgres` or `xds`.
    pub kind: &'static str,
    /// The version in force (xDS `version_info`, else the fingerprint); empty before the
    /// first load.
    pub version: String,
    /// Whether a config from the source is in force.
    pub loaded: bool,
    /// When the config in force was swapped in; `None` before the first load.
    pub changed_at: Option<Nanos>,
    /// Configs swapped in, the first included.
    pub applied: u64,
    /// Attempts rejected for problems in the snapshot or an unreadable source.
    pub rejected: u64,
    /// Whether the last attempt was rejected (its problems are in `/rlconfig`).
    pub failing: bool,
}

/// Configs loaded and rejected; without a `report`, one load and no error.
pub(super) fn loads(report: Option<&SourceReport>) -> (u64, u64) {
    report.map_or((1, 0), |r| (r.applied, r.rejected))
}

/// Writes the Go server's families, `ratelimit_service_config_load_*`; without a
/// `report` (a service built by hand), one load and no error, as for a config loaded once.
pub(super) fn render_loads(out: &mut String, report: Option<&SourceReport>) {
    let (applied, rejected) = loads(report);
    let name = "ratelimit_service_config_load_success";
    family(
        out,
        name,
        "counter",
        "Configs loaded: the initial one and every reload swapped in.",
    );
    sample(out, name, [], applied);
    let name = "ratelimit_service_config_load_error";
    family(
        out,
        name,
        "counter",
        "Reloads rejected for problems in the config or an unreadable source.",
    );
    sample(out, name, [], rejected);
}

/// Writes meshlimit's own families about the source, given a `report`.
pub(super) fn render(out: &mut String, report: Option<&SourceReport>) {
    let Some(report) = report else {
        return;
    };
    let name = "meshlimit_config_source_info";
    family(
        out,
        name,
        "gauge",
        "The config source and the version in force.",
    );
    sample(
        out,
        name,
        [
            ("source", report.kind),
            ("version", report.version.as_str()),
        ],
        1,
    );
    let name = "meshlimit_config_loaded";
    family(
        out,
        name,
        "gauge",
        "1 once a config from the source is in force.",
    );
    sample(out, name, [], u8::from(report.loaded));
    if let Some(at) = report.changed_at {
        let name = "meshlimit_config_last_change_timestamp_seconds";
        family(
            out,
            name,
            "gauge",
            "When the config in force was swapped in (Unix time).",
        );
        sample(out, name, [], at / NANOS_PER_SEC);
    }
    let name = "meshlimit_config_last_load_failed";
    family(
        out,
        name,
        "gauge",
        "1 while the last load attempt was rejected (see /rlconfig for why).",
    );
    sample(out, name, [], u8::from(report.failing));
}
