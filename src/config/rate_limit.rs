//! A descriptor's `rate_limit` block → a [`Rule`]: unit, counts, algorithm, `unlimited`,
//! `name` and `replaces`, each rule of §1.9 of the reference one check.

use super::fields::{Fields, Reader};
use super::yaml::{YamlNode, line};
use crate::error::ConfigErrorKind;
use crate::rules::{Algorithm, ConfigLimit, Mode, Rule, Unit};

const RATE_LIMIT_KEYS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "burst",
    "algorithm",
];
const REPLACES_KEYS: &[&str] = &["name"];

/// The rule of the descriptor at `path`, if its `rate_limit` block is valid. The
/// descriptor's own flags (mode, detailed metric) are left to the caller.
pub(super) fn rule(reader: &mut Reader<'_>, node: &YamlNode, path: &str) -> Option<Rule> {
    let before = reader.problems();
    let fields = reader.mapping(node, Some(path), RATE_LIMIT_KEYS);
    let name = fields
        .get("name")
        .and_then(|n| reader.text(n, Some(path), "name"))
        .unwrap_or_default();
    let replaces = replaces(reader, &fields, &name, path);
    let limit = if reader.flag(&fields, "unlimited", path) {
        for what in ["unit", "burst", "algorithm"] {
            if let Some(set) = fields.get(what) {
                reader.error(
                    ConfigErrorKind::LimitWhenUnlimited,
                    line(set),
                    Some(path),
                    format_args!("should not specify rate limit {what} when unlimited"),
                );
            }
        }
        None
    } else {
        limit(reader, &fields, node, path)
    };
    (reader.problems() == before).then(|| Rule {
        full_key: path.to_string(),
        name,
        limit,
        replaces,
        mode: Mode::Enforce,
        detailed_metric: false,
        value_to_metric: 0,
    })
}

/// The names in `replaces`; none may be empty or the rule's `own` name.
fn replaces(reader: &mut Reader<'_>, fields: &Fields<'_>, own: &str, path: &str) -> Vec<String> {
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
        } else if name == own {
            reader.error(
                ConfigErrorKind::ReplacesSelf,
                line(entry),
                Some(path),
                "replaces should not contain name of same descriptor",
            );
        }
        names.push(name);
    }
    names
}

/// The limit of a rule that is not `unlimited`; `None` when its unit is unusable.
fn limit(
    reader: &mut Reader<'_>,
    fields: &Fields<'_>,
    node: &YamlNode,
    path: &str,
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
        } else if algorithm == Some(Algorithm::FixedWindow) {
            reader.error(
                ConfigErrorKind::BurstWithFixedWindow,
                at,
                Some(path),
                "burst has no meaning with algorithm fixed_window",
            );
        }
    }
    Some(ConfigLimit {
        requests_per_unit,
        unit: unit?,
        burst: burst.unwrap_or(requests_per_unit),
        algorithm,
    })
}

/// The rule's own algorithm, if it names a valid one.
fn algorithm(reader: &mut Reader<'_>, fields: &Fields<'_>, path: &str) -> Option<Algorithm> {
    let node = fields.get("algorithm")?;
    match reader.text(node, Some(path), "algorithm").as_deref() {
        Some("token_bucket") => Some(Algorithm::TokenBucket),
        Some("fixed_window") => Some(Algorithm::FixedWindow),
        Some(other) => {
            reader.error(
                ConfigErrorKind::BadAlgorithm,
                line(node),
                Some(path),
                format_args!("invalid algorithm '{other}' (expected token_bucket or fixed_window)"),
            );
            None
        }
        None => None,
    }
}
