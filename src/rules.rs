//! The typed model of one rate-limit rule, shared by config, matching and limiting.
//!
//! Nothing here knows YAML or protobuf: a [`Limit`] that exists is valid.

use std::fmt;
use std::sync::Arc;

use crate::clock::{NANOS_PER_SEC, Nanos};

/// The unit a limit is counted in. MONTH and YEAR are fixed 30- and 365-day blocks, as in
/// the Go server, not calendar months.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3600 seconds.
    Hour,
    /// 86400 seconds; fixed windows reset at 00:00 UTC.
    Day,
    /// 7 days; fixed windows start Thursday 00:00 UTC (the epoch's weekday).
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's length in seconds.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The unit's length in nanoseconds.
    pub const fn nanos(self) -> u64 {
        self.seconds() * NANOS_PER_SEC
    }

    /// Parses a config unit name, case-insensitively as the Go server does.
    pub fn parse(name: &str) -> Option<Unit> {
        Some(match name.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// The upper-case name used in config dumps and the Go server's output.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a limit is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Capacity `burst`, refilled continuously at `requests_per_unit` per unit; a denied
    /// request consumes nothing.
    #[default]
    TokenBucket,
    /// The Go server's epoch-aligned counters: every hit counts, even a denied one.
    FixedWindow,
    /// A rolling window: at most `requests_per_unit` admitted in any interval of one
    /// period, counted in [`SLIDING_SUBWINDOWS`] sub-windows; a denied request consumes
    /// nothing.
    SlidingWindow,
}

/// How many sub-windows a sliding window's period is counted in. A window keeps one
/// counter more than this (the current sub-window and the last `SLIDING_SUBWINDOWS`
/// whole ones), so it may refuse up to one sub-window, a tenth of the period, earlier
/// than an exact log of every request would.
pub const SLIDING_SUBWINDOWS: usize = 10;

/// The longest period a limit may have (`unit` × `unit_multiplier`): 100 years of 365
/// days, so that a period in nanoseconds fits in 64 bits with room to spare.
pub const MAX_PERIOD_SECONDS: u64 = 100 * 31_536_000;

impl Algorithm {
    /// The config spelling (`token_bucket`, `fixed_window`, `sliding_window`).
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
        }
    }

    /// Parses a config spelling.
    pub fn parse(name: &str) -> Option<Algorithm> {
        [
            Algorithm::TokenBucket,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
        ]
        .into_iter()
        .find(|a| a.name() == name)
    }

    /// Whether `burst` means anything: only a token bucket has a capacity apart from its
    /// rate.
    pub const fn has_burst(self) -> bool {
        matches!(self, Algorithm::TokenBucket)
    }
}

/// A limit as enforced by a store: the numbers, nothing about matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    /// Requests allowed per unit; 0 denies every hit, as in the Go server.
    pub requests_per_unit: u32,
    /// The unit the period is counted in.
    pub unit: Unit,
    /// The period is this many units (`unit_multiplier`, at least 1).
    pub multiplier: u32,
    /// Token-bucket capacity; ignored by windows.
    pub burst: u32,
    /// The algorithm that enforces it.
    pub algorithm: Algorithm,
    /// `charge: always`: hits are charges, recorded in full whatever the answer (a token
    /// bucket goes into debt, at most [`DEBT_PERIODS`] periods' refill below empty), and
    /// refunds are allowed. False: a denied request consumes nothing.
    pub charge: bool,
}

/// How far below empty a charge may take a token bucket, in periods of refill: a charge
/// of any size leaves its caller refused for at most this many periods (plus the time
/// the burst takes to refill), so a runaway value cannot lock a caller out for good.
pub const DEBT_PERIODS: u32 = 10;

impl Limit {
    /// The period in seconds: `multiplier` units.
    pub const fn period_seconds(&self) -> u64 {
        self.unit.seconds() * self.multiplier as u64
    }

    /// The period in nanoseconds.
    pub const fn period_nanos(&self) -> u64 {
        self.period_seconds() * NANOS_PER_SEC
    }
}

/// Which way a descriptor's verdict counts towards the overall answer (§1.5 of the reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Over limit denies the request.
    #[default]
    Enforce,
    /// Counted, but never denies: the status is turned to OK.
    Shadow,
    /// Denies only when every quota-mode descriptor of the request is over.
    Quota,
    /// Both flags: a quota descriptor whose status shadow mode always turns to OK, so it
    /// counts among the quota descriptors as one that is not over.
    ShadowQuota,
}

impl Mode {
    /// The mode of a descriptor with these flags.
    pub const fn from_flags(shadow: bool, quota: bool) -> Mode {
        match (shadow, quota) {
            (false, false) => Mode::Enforce,
            (true, false) => Mode::Shadow,
            (false, true) => Mode::Quota,
            (true, true) => Mode::ShadowQuota,
        }
    }

    /// Shadow mode: an over-limit verdict is reported as OK.
    pub const fn is_shadow(self) -> bool {
        matches!(self, Mode::Shadow | Mode::ShadowQuota)
    }

    /// Quota mode: denies only together with every other quota descriptor.
    pub const fn is_quota(self) -> bool {
        matches!(self, Mode::Quota | Mode::ShadowQuota)
    }
}

/// A rule from the config: the limit plus everything the service layer needs to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The rule's path in its domain, as the Go server names it in stats and `/rlconfig`
    /// (`domain.key_value.subkey`).
    pub full_key: String,
    /// `rate_limit.name`; empty when unset and in the `rate_limits` form, whose limits
    /// carry their own names.
    pub name: String,
    /// The limits a request must have room in, all of them: one from `rate_limit`, one or
    /// more from `rate_limits`, none for `unlimited: true`.
    pub limits: Vec<ConfigLimit>,
    /// Names of rules this one replaces when both match one request.
    pub replaces: Vec<String>,
    /// `shadow_mode` / `quota_mode` of the descriptor.
    pub mode: Mode,
    /// `detailed_metric` of the descriptor (kept for metrics).
    pub detailed_metric: bool,
    /// The levels, bit 0 the first, whose request value names this rule in metrics
    /// instead of the config's entry: those with `value_to_metric` whose entry has no value
    /// or a wildcard without `share_threshold` (see `crate::metrics`). 0 for most rules.
    pub value_to_metric: u64,
    /// The rule's number in its config, from 0, unique across its domains: where per-rule
    /// tables (the statistics') keep its entry, found by indexing instead of hashing.
    /// Given when the config is assembled; 0 until then, so a table checks that the
    /// entry it finds is this rule's.
    pub ordinal: u32,
    /// The descriptor's `metadata`, a JSON object: merged into the answer's dynamic
    /// metadata when the descriptor passes (`--response-dynamic-metadata`). `None` when
    /// the descriptor has none.
    pub metadata: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
    /// `reserve` or `concurrency`: the rule's hits are held per request until Envoy's
    /// stream-done call settles them (see [`HoldRule`]); `None` for most rules.
    pub holds: Option<HoldRule>,
}

/// The descriptor-entry key whose value names a hold (a request id) on the request path:
/// the last entry of a descriptor on a rule with [`Rule::holds`].
pub const HOLD_KEY: &str = "hold";

/// The descriptor-entry key whose value names the hold a stream-done call settles.
pub const SETTLE_KEY: &str = "settle";

/// What a rule holds for a request in flight, and for how long at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRule {
    /// How long a hold lasts unsettled; then it is released (see `docs/holds.md`).
    pub ttl: Nanos,
    /// `Some(n)`: a concurrency limit of `n` requests in flight, each holding a slot;
    /// `None`: a reservation, each request holding its hits on the rule's limits.
    pub slots: Option<u32>,
}

impl Rule {
    /// The names `replaces` can refer to this rule by: its own, or any of its limits'.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.name.as_str())
            .chain(self.limits.iter().map(|limit| limit.name.as_str()))
            .filter(|name| !name.is_empty())
    }

    /// Whether the rule is unlimited: matched and counted, never limited.
    pub fn is_unlimited(&self) -> bool {
        self.limits.is_empty()
    }

    /// Whether the rule takes refunds (`is_negative_hits`): it has limits, and every one
    /// of them charges.
    pub fn takes_refunds(&self) -> bool {
        !self.limits.is_empty() && self.limits.iter().all(|limit| limit.charge)
    }
}

/// The numbers of a configured limit; the algorithm may be left to the server default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigLimit {
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unit`.
    pub unit: Unit,
    /// `unit_multiplier`, 1 when unset.
    pub multiplier: u32,
    /// `burst`, defaulting to `requests_per_unit`.
    pub burst: u32,
    /// `algorithm`, or `None` for the server's `--algorithm`.
    pub algorithm: Option<Algorithm>,
    /// `charge: always` (on the limit or its descriptor): see [`Limit::charge`].
    pub charge: bool,
    /// The limit's `name` (the rule's, in the `rate_limit` form), echoed in
    /// `current_limit.name`; empty when unset.
    pub name: String,
    /// In the `rate_limits` form, the part appended to the descriptor's bucket key that
    /// gives this limit a bucket of its own (its name, or else its period), already
    /// length-prefixed; empty in the `rate_limit` form, whose bucket key is the Go
    /// server's.
    pub key_part: String,
}

impl ConfigLimit {
    /// The limit as enforced, with `default` filling an unset algorithm.
    pub fn resolve(&self, default: Algorithm) -> Limit {
        Limit {
            requests_per_unit: self.requests_per_unit,
            unit: self.unit,
            multiplier: self.multiplier,
            burst: self.burst,
            algorithm: self.algorithm.unwrap_or(default),
            charge: self.charge,
        }
    }

    /// What this limit is called in explanations, headers and metrics: its name, or else
    /// its period (`1s`, `5m`, `1d`...).
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            period_label(self.unit, self.multiplier)
        } else {
            self.name.clone()
        }
    }
}

/// A period as `<multiplier><unit letter>`: `1s`, `5m`, `1h`, `1d`, `1w`, `1mo`, `1y`.
pub fn period_label(unit: Unit, multiplier: u32) -> String {
    let letter = match unit {
        Unit::Second => "s",
        Unit::Minute => "m",
        Unit::Hour => "h",
        Unit::Day => "d",
        Unit::Week => "w",
        Unit::Month => "mo",
        Unit::Year => "y",
    };
    format!("{multiplier}{letter}")
}
