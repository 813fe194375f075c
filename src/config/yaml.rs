//! Serde mirror of the Go server's descriptor file, plus meshlimit's two additions
//! (`rate_limit.burst`, `rate_limit.algorithm`). Unknown keys are rejected at every level.
//!
//! Scalars that YAML would type as numbers or booleans (`value: 200`, `value: true`) are
//! read as strings, as the Go server's yaml.v2 does for string fields.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_saphyr::Spanned;

/// One domain file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DomainFile {
    /// `domain`; required, non-empty.
    #[serde(default)]
    pub(crate) domain: Option<Spanned<String>>,
    /// Top-level descriptors.
    #[serde(default)]
    pub(crate) descriptors: Vec<Spanned<Descriptor>>,
}

/// One descriptor entry, possibly with nested descriptors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Descriptor {
    /// `key`; required, non-empty.
    #[serde(default)]
    pub(crate) key: String,
    /// `value`; may contain `*` wildcards.
    #[serde(default)]
    pub(crate) value: Option<String>,
    /// The limit at this level, if any.
    #[serde(default)]
    pub(crate) rate_limit: Option<Spanned<RateLimit>>,
    /// Nested descriptors.
    #[serde(default)]
    pub(crate) descriptors: Vec<Spanned<Descriptor>>,
    /// Count but never deny.
    #[serde(default)]
    pub(crate) shadow_mode: bool,
    /// Deny only when all quota descriptors of the request are over.
    #[serde(default)]
    pub(crate) quota_mode: bool,
    /// Per-value metrics.
    #[serde(default)]
    pub(crate) detailed_metric: bool,
    /// Runtime value in metric names at this level (metrics only; read by a later release).
    #[serde(default)]
    #[allow(dead_code)]
    pub(crate) value_to_metric: bool,
    /// All values matching a wildcard share one bucket.
    #[serde(default)]
    pub(crate) share_threshold: bool,
    /// Accepted for compatibility; not interpreted.
    #[serde(default)]
    #[allow(dead_code)]
    pub(crate) metadata: Option<IgnoredAny>,
}

/// `rate_limit` of a descriptor.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateLimit {
    /// `second` … `year`, case-insensitive.
    #[serde(default)]
    pub(crate) unit: Option<String>,
    /// Missing means 0, which denies every hit (as the Go server).
    #[serde(default)]
    pub(crate) requests_per_unit: u32,
    /// No limit at all; must not have a unit.
    #[serde(default)]
    pub(crate) unlimited: bool,
    /// Echoed in `current_limit.name`; target of `replaces`.
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// Rules this one replaces within one request.
    #[serde(default)]
    pub(crate) replaces: Vec<Replaces>,
    /// meshlimit: token-bucket capacity (default `requests_per_unit`).
    #[serde(default)]
    pub(crate) burst: Option<u32>,
    /// meshlimit: `token_bucket` or `fixed_window`, overriding `--algorithm`.
    #[serde(default)]
    pub(crate) algorithm: Option<String>,
}

/// One `replaces` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Replaces {
    /// Name of the replaced rule.
    #[serde(default)]
    pub(crate) name: String,
}
