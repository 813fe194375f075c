//! A descriptor's `reserve` or `concurrency` block → its [`HoldRule`]: hits held per
//! request until Envoy's stream-done call settles them, or at most `ttl`.
//!
//! `reserve: { ttl: 5m }` beside a rule's limits: a request-path descriptor ending in a
//! `hold` entry reserves its hits; one ending in `settle` settles them.
//! `concurrency: { max_in_flight: 5, ttl: 10m }` in place of limits: a `hold` entry takes
//! one of the slots, a `settle` entry gives it back.

use super::fields::{Fields, Reader};
use super::yaml::{YamlNode, line};
use crate::clock::{NANOS_PER_SEC, Nanos};
use crate::error::ConfigErrorKind;
use crate::gocompat::go_duration;
use crate::rules::{Algorithm, ConfigLimit, HOLD_KEY, HoldRule, Rule, SETTLE_KEY, Unit};

const RESERVE_KEYS: &[&str] = &["ttl"];
const CONCURRENCY_KEYS: &[&str] = &["max_in_flight", "ttl"];

/// The longest a hold may last unsettled: a day. Longer would let lost settles lock a
/// budget away for longer than any response takes.
pub(super) const MAX_HOLD_TTL: Nanos = 86_400 * NANOS_PER_SEC;

/// Reads `reserve` and `concurrency` of the descriptor at `path` into `rule` (the rule its
/// limits made, if any): the rule with its holds, a concurrency rule made from nothing,
/// or `None` (and a problem) for a block that cannot apply.
pub(super) fn read(
    reader: &mut Reader<'_>,
    fields: &Fields<'_>,
    rule: Option<Rule>,
    path: &str,
) -> Option<Rule> {
    match (fields.get("reserve"), fields.get("concurrency")) {
        (None, None) => rule,
        (Some(_), Some(second)) => {
            problem(
                reader,
                second,
                path,
                "a descriptor has reserve or concurrency, not both",
            );
            rule
        }
        (Some(node), None) => reserve(reader, node, rule, path),
        (None, Some(node)) => concurrency(reader, fields, node, rule, path),
    }
}

fn reserve(
    reader: &mut Reader<'_>,
    node: &YamlNode,
    rule: Option<Rule>,
    path: &str,
) -> Option<Rule> {
    let block = reader.mapping(node, Some(path), RESERVE_KEYS);
    let ttl = ttl(reader, &block, node, path);
    let Some(mut rule) = rule.filter(|rule| !rule.is_unlimited()) else {
        problem(
            reader,
            node,
            path,
            "reserve needs limits to hold hits on: a rate_limit or rate_limits that is not unlimited",
        );
        return None;
    };
    rule.holds = ttl.map(|ttl| HoldRule { ttl, slots: None });
    Some(rule)
}

fn concurrency(
    reader: &mut Reader<'_>,
    fields: &Fields<'_>,
    node: &YamlNode,
    rule: Option<Rule>,
    path: &str,
) -> Option<Rule> {
    let block = reader.mapping(node, Some(path), CONCURRENCY_KEYS);
    let ttl = ttl(reader, &block, node, path);
    let max = reader.number(&block, "max_in_flight", path);
    if block.get("max_in_flight").is_none() {
        problem(reader, node, path, "concurrency needs max_in_flight");
    }
    if let Some(limits) = fields.get("rate_limit").or(fields.get("rate_limits")) {
        problem(
            reader,
            limits,
            path,
            "a concurrency limit is a rule of its own: put rate_limit or rate_limits on another descriptor",
        );
        return None;
    }
    let (ttl, max) = (ttl?, max?);
    let mut rule = rule.unwrap_or_else(|| Rule {
        full_key: path.to_string(),
        name: String::new(),
        limits: Vec::new(),
        replaces: Vec::new(),
        mode: Default::default(),
        detailed_metric: false,
        value_to_metric: 0,
        ordinal: 0,
        metadata: None,
        holds: None,
    });
    // The slots as a limit, so that answers, metrics and explanations show `max_in_flight`
    // as the limit's count; the stores decide it by the slots alone, never as a bucket.
    rule.limits = vec![ConfigLimit {
        requests_per_unit: max,
        unit: Unit::Second,
        multiplier: 1,
        burst: max,
        algorithm: Some(Algorithm::TokenBucket),
        charge: false,
        name: String::new(),
        key_part: String::new(),
    }];
    rule.holds = Some(HoldRule {
        ttl,
        slots: Some(max),
    });
    Some(rule)
}

/// The block's `ttl`: a Go duration (`30s`, `5m`) above zero, at most [`MAX_HOLD_TTL`].
fn ttl(reader: &mut Reader<'_>, block: &Fields<'_>, node: &YamlNode, path: &str) -> Option<Nanos> {
    let Some(at) = block.get("ttl") else {
        problem(
            reader,
            node,
            path,
            "a hold needs a ttl, such as 5m: how long an unsettled hold lasts",
        );
        return None;
    };
    let text = reader.text(at, Some(path), "ttl")?;
    let ttl = go_duration::parse(&text)
        .map_err(|why| format!("invalid ttl: {why}"))
        .and_then(|d| u64::try_from(d.as_nanos()).map_err(|_| "ttl too long".to_string()))
        .and_then(|n| match n {
            0 => Err(format!(
                "invalid ttl '{text}': a hold must last longer than 0"
            )),
            n if n > MAX_HOLD_TTL => Err(format!("invalid ttl '{text}': at most 24h")),
            n => Ok(n),
        });
    ttl.map_err(|why| problem(reader, at, path, why)).ok()
}

/// A child descriptor of a rule that holds named like the entries that mark a hold
/// (`hold`, `settle`): the walk could not tell the two apart.
pub(super) fn check_children(
    reader: &mut Reader<'_>,
    rule: Option<&Rule>,
    children: &[YamlNode],
    path: &str,
) {
    if rule.is_none_or(|rule| rule.holds.is_none()) {
        return;
    }
    for child in children {
        let peek = Fields::peek(child, &["key"]);
        let Some(node) = peek.get("key") else {
            continue;
        };
        if let Some(key) = reader.text(node, Some(path), "key")
            && (key == HOLD_KEY || key == SETTLE_KEY)
        {
            problem(
                reader,
                node,
                path,
                format_args!(
                    "a descriptor that holds cannot have a child named {key}: its {HOLD_KEY} and {SETTLE_KEY} entries name requests"
                ),
            );
        }
    }
}

fn problem(reader: &mut Reader<'_>, node: &YamlNode, path: &str, message: impl std::fmt::Display) {
    reader.error(ConfigErrorKind::BadHold, line(node), Some(path), message);
}
