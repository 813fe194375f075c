//! A descriptor's `rate_limit` block, or its `rate_limits` list → a [`Rule`]: unit,
//! multiplier, counts, algorithm, `unlimited`, `name` and `replaces`, each rule of §1.9 of
//! the reference one check.
//!
//! In a list, `replaces` on any entry acts for the whole descriptor, and a rule is
//! replaced by naming any of its limits; `unlimited` has no meaning there (a descriptor
//! that should not be limited says so in `rate_limit`).

use super::fields::{Fields, Reader};
use super::yaml::{YamlNode, line};
use crate::bucket_key::KeyWriter;
use crate::error::ConfigErrorKind;
use crate::rules::{Algorithm, ConfigLimit, MAX_PERIOD_SECONDS, Mode, Rule, Unit, period_label};

const RATE_LIMIT_KEYS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unit_multiplier",
    "unlimited",
    "name",
    "replaces",
    "burst",
    "algorithm",
    "charge",
];
const REPLACES_KEYS: &[&str] = &["name"];

/// The rule of the descriptor at `path`, if its `rate_limit` block is valid. The
/// descriptor's own flags (mode, detailed metric) are left to the caller.
pub(super) fn rule(reader: &mut Reader<'_>, node: &YamlNode, path: &str) -> Option<Rule> {
    let before = reader.problems();
    let fields = reader.mapping(node, Some(path), RATE_LIMIT_KEYS);
    let name = name(reader, &fields, path);
    let replaces = replaces(reader, &fields, path);
    refuse_own_names(reader, &replaces, &[name.as_str()], path);
    let limits = if reader.flag(&fields, "unlimited", path) {
        for what in ["unit", "unit_multiplier", "burst", "algorithm", "charge"] {
            if let Some(set) = fields.get(what) {
                reader.error(
                    ConfigErrorKind::LimitWhenUnlimited,
                    line(set),
                    Some(path),
                    format_args!("should not specify rate limit {what} when unlimited"),
                );
            }
        }
        Vec::new()
    } else {
        limit(reader, &fields, node, path, name.clone())
            .into_iter()
            .collect()
    };
    (reader.problems() == before).then(|| Rule {
        full_key: path.to_string(),
        name,
        limits,
        replaces: replaces.into_iter().map(|(name, _)| name).collect(),
        mode: Mode::Enforce,
        detailed_metric: false,
        value_to_metric: 0,
        ordinal: 0,
        metadata: None,
        holds: None,
    })
}

/// The rule of the descriptor at `path` from its `rate_limits` list, if valid: one limit
/// per entry, each with a bucket of its own.
pub(super) fn listed_rule(reader: &mut Reader<'_>, list: &YamlNode, path: &str) -> Option<Rule> {
    let before = reader.problems();
    let entries = reader.list(list, Some(path), "rate_limits");
    if entries.is_empty() {
        reader.error(
            ConfigErrorKind::EmptyLimitList,
            line(list),
            Some(path),
            "rate_limits should have at least one limit",
        );
    }
    let mut limits: Vec<ConfigLimit> = Vec::with_capacity(entries.len());
    let mut replaces_all = Vec::new();
    for entry in entries {
        let fields = reader.mapping(entry, Some(path), RATE_LIMIT_KEYS);
        let name = name(reader, &fields, path);
        replaces_all.extend(replaces(reader, &fields, path));
        if let Some(set) = fields.get("unlimited") {
            reader.error(
                ConfigErrorKind::UnlimitedInList,
                line(set),
                Some(path),
                "unlimited has no meaning in rate_limits (use rate_limit: {unlimited: true})",
            );
            continue;
        }
        let Some(mut limit) = limit(reader, &fields, entry, path, name) else {
            continue;
        };
        limit.key_part = key_part(&limit);
        if let Some(twin) = limits.iter().find(|l| l.key_part == limit.key_part) {
            let problem = if limit.name.is_empty() {
                format!(
                    "rate_limits has two unnamed limits of period {}: name them, so that each has its own bucket",
                    twin.label()
                )
            } else {
                format!(
                    "rate_limits has two limits named '{}': each needs its own name",
                    limit.name
                )
            };
            reader.error(
                ConfigErrorKind::DuplicateLimit,
                line(entry),
                Some(path),
                problem,
            );
        }
        limits.push(limit);
    }
    let names: Vec<&str> = limits.iter().map(|l| l.name.as_str()).collect();
    refuse_own_names(reader, &replaces_all, &names, path);
    let replaces = replaces_all.into_iter().map(|(name, _)| name).collect();
    (reader.problems() == before).then(|| Rule {
        full_key: path.to_string(),
        name: String::new(),
        limits,
        replaces,
        mode: Mode::Enforce,
        detailed_metric: false,
        value_to_metric: 0,
        ordinal: 0,
        metadata: None,
        holds: None,
    })
}

/// What a listed limit appends to its descriptor's bucket key: `n=<name>`, or `p=<period>`
/// when unnamed, as one more length-prefixed part. A descriptor's own key always has an
/// odd number of parts (the domain, then key and value pairs), so this even-numbered one
/// can never make it equal to another descriptor's.
fn key_part(limit: &ConfigLimit) -> String {
    let identity = if limit.name.is_empty() {
        format!("p={}", period_label(limit.unit, limit.multiplier))
    } else {
        format!("n={}", limit.name)
    };
    let mut part = String::new();
    KeyWriter::part(&mut part, &identity);
    part
}

/// The `name` field, empty when unset.
fn name(reader: &mut Reader<'_>, fields: &Fields<'_>, path: &str) -> String {
    fields
        .get("name")
        .and_then(|n| reader.text(n, Some(path), "name"))
        .unwrap_or_default()
}

/// Refuses a `replaces` entry naming the rule itself (one of its `own` names).
fn refuse_own_names(reader: &mut Reader<'_>, replaces: &[(String, u32)], own: &[&str], path: &str) {
    for (name, at) in replaces {
        if !name.is_empty() && own.contains(&name.as_str()) {
            reader.error(
                ConfigErrorKind::ReplacesSelf,
                *at,
                Some(path),
                "replaces should not contain name of same descriptor",
            );
        }
    }
}

/// The names in `replaces`, each with its line; none may be empty.
fn replaces(reader: &mut Reader<'_>, fields: &Fields<'_>, path: &str) -> Vec<(String, u32)> {
    let Some(list) = fields.get("replaces") else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for entry in reader.list(list, Some(path), "replaces") {
        let entry_fields = reader.mapping(entry, Some(path), REPLACES_KEYS);
        let name = entry_fields
            .get("name")
            .and_then(|n| reader.text(n, Some(path), "replaces name"))
            .unwrap_or_default();
        if name.is_empty() {
            reader.error(
                ConfigErrorKind::EmptyReplaces,
                line(entry),
                Some(path),
                "should not have an empty replaces entry",
            );
        }
        names.push((name, line(entry)));
    }
    names
}

/// The limit of a rule that is not `unlimited`, called `name`; `None` when its unit is
/// unusable.
fn limit(
    reader: &mut Reader<'_>,
    fields: &Fields<'_>,
    node: &YamlNode,
    path: &str,
    name: String,
) -> Option<ConfigLimit> {
    let unit_node = fields.get("unit");
    let unit_name = unit_node
        .and_then(|n| reader.text(n, Some(path), "unit"))
        .unwrap_or_default();
    let unit = Unit::parse(&unit_name);
    if unit.is_none() {
        let at = unit_node.map_or(line(node), line);
        reader.error(
            ConfigErrorKind::BadUnit,
            at,
            Some(path),
            format_args!("invalid rate limit unit '{unit_name}'"),
        );
    }
    let requests_per_unit = reader
        .number(fields, "requests_per_unit", path)
        .unwrap_or(0);
    let algorithm = algorithm(reader, fields, path);
    let burst = reader.number(fields, "burst", path);
    if let (Some(burst), Some(at)) = (burst, fields.get("burst").map(line)) {
        if burst == 0 && requests_per_unit > 0 {
            reader.error(
                ConfigErrorKind::ZeroBurst,
                at,
                Some(path),
                "burst must be at least 1",
            );
        } else if let Some(window) = algorithm.filter(|a| !a.has_burst()) {
            reader.error(
                ConfigErrorKind::BurstWithoutBucket,
                at,
                Some(path),
                format_args!("burst has no meaning with algorithm {}", window.name()),
            );
        }
    }
    let multiplier = multiplier(reader, fields, unit, path);
    Some(ConfigLimit {
        charge: charge(reader, fields, path).unwrap_or(false),
        requests_per_unit,
        unit: unit?,
        multiplier,
        burst: burst.unwrap_or(requests_per_unit),
        algorithm,
        name,
        key_part: String::new(),
    })
}

/// `unit_multiplier`: 1 when unset; at least 1, and the period no longer than 100 years.
fn multiplier(reader: &mut Reader<'_>, fields: &Fields<'_>, unit: Option<Unit>, path: &str) -> u32 {
    let (Some(n), Some(at)) = (
        reader.number(fields, "unit_multiplier", path),
        fields.get("unit_multiplier").map(line),
    ) else {
        return 1;
    };
    let period = unit.map_or(0, |u| u.seconds().saturating_mul(u64::from(n)));
    if n == 0 {
        reader.error(
            ConfigErrorKind::BadMultiplier,
            at,
            Some(path),
            "unit_multiplier must be at least 1",
        );
    } else if period > MAX_PERIOD_SECONDS {
        reader.error(
            ConfigErrorKind::BadMultiplier,
            at,
            Some(path),
            format_args!("unit_multiplier {n} makes a period longer than 100 years"),
        );
    }
    n.max(1)
}

/// `charge` in `fields`, if set and valid: `always` (true: hits are charges, recorded
/// whatever the answer) or `admitted` (false: only an admitted request's hits count, the
/// default). Also read on a descriptor, for all of its limits.
pub(super) fn charge(reader: &mut Reader<'_>, fields: &Fields<'_>, path: &str) -> Option<bool> {
    let node = fields.get("charge")?;
    let value = reader.text(node, Some(path), "charge")?;
    match value.as_str() {
        "always" => Some(true),
        "admitted" => Some(false),
        _ => {
            reader.error(
                ConfigErrorKind::BadCharge,
                line(node),
                Some(path),
                format_args!("invalid charge '{value}' (expected always or admitted)"),
            );
            None
        }
    }
}

/// The rule's own algorithm, if it names a valid one.
fn algorithm(reader: &mut Reader<'_>, fields: &Fields<'_>, path: &str) -> Option<Algorithm> {
    let node = fields.get("algorithm")?;
    let name = reader.text(node, Some(path), "algorithm")?;
    let algorithm = Algorithm::parse(&name);
    if algorithm.is_none() {
        reader.error(
            ConfigErrorKind::BadAlgorithm,
            line(node),
            Some(path),
            format_args!(
                "invalid algorithm '{name}' (expected token_bucket, fixed_window or sliding_window)"
            ),
        );
    }
    algorithm
}
