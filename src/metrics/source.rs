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

use std::sync::atomic::Ordering::Relaxed;

use super::text::{family, sample};
use crate::clock::NANOS_PER_SEC;
use crate::source::History;

/// Configs loaded and rejected; without a `history`, one load and no error.
pub(super) fn loads(history: Option<&History>) -> (u64, u64) {
    history.map_or((1, 0), |h| {
        (h.applied.load(Relaxed), h.rejected.load(Relaxed))
    })
}

/// Writes the families; without a `history` (a service built by hand), one load and no
/// error, as for a config loaded once.
pub(super) fn render(out: &mut String, history: Option<&History>) {
    let (applied, rejected) = loads(history);
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
    let Some(history) = history else {
        return;
    };
    let name = "meshlimit_config_source_info";
    family(
        out,
        name,
        "gauge",
        "The config source and the version in force.",
    );
    let version = history.version();
    sample(
        out,
        name,
        [("source", history.kind()), ("version", version.as_str())],
        1,
    );
    let name = "meshlimit_config_loaded";
    family(
        out,
        name,
        "gauge",
        "1 once a config from the source is in force.",
    );
    sample(out, name, [], u8::from(history.loaded()));
    if let Some(at) = history.changed_at() {
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
    sample(out, name, [], u8::from(history.last_error.lock().is_some()));
}
