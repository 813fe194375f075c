//! YAML tree → typed rules. Every rule of §1.9 of the reference is one check, here (the
//! file and its descriptor tree) or in [`super::rate_limit`] (a descriptor's limit); every
//! violation is collected (not just the first), each with its own line and descriptor path.

use std::path::Path;

use super::fields::{Fields, Reader};
use super::yaml::{self, Yaml, YamlNode, line};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::matcher::{DomainTree, Entry, Level};
use crate::rules::{Mode, Rule};

const FILE_KEYS: &[&str] = &["domain", "descriptors"];
const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "rate_limits",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "charge",
    "reserve",
    "concurrency",
];

/// One valid domain file.
pub(super) struct ParsedDomain {
    /// Its `domain`.
    pub(super) domain: String,
    /// Its descriptors.
    pub(super) tree: DomainTree,
    /// The line of each top-level descriptor, in the tree's order: where a merge of the
    /// domain's files says a duplicate is.
    pub(super) lines: Vec<u32>,
}

/// Parses and validates one domain file.
pub(super) fn parse_domain_file(file: &Path, text: &str) -> Result<ParsedDomain, Vec<ConfigError>> {
    let root = if text.trim().is_empty() {
        None
    } else {
        Some(yaml::parse(text).map_err(|e| {
            let line = e.location().map(|l| l.line() as u32);
            let (kind, message) = parser_problem(&e);
            vec![ConfigError::new(kind, file, line, None, message)]
        })?)
    };
    let mut reader = Reader::new(file);
    let fields = match &root {
        Some(root) => reader.mapping(root, None, FILE_KEYS),
        None => Fields::default(),
    };
    let domain = fields
        .get("domain")
        .and_then(|n| reader.text(n, None, "domain"))
        .unwrap_or_default();
    if domain.is_empty() {
        let at = fields.get("domain").or(root.as_ref()).map_or(0, line);
        reader.error(
            ConfigErrorKind::EmptyDomain,
            at,
            None,
            "config file cannot have empty domain",
        );
        return Err(reader.into_errors());
    }
    let mut tree = DomainTree::default();
    let mut lines = Vec::new();
    if let Some(list) = fields.get("descriptors") {
        let items = reader.list(list, Some(&domain), "descriptors");
        lines = descriptors(
            &mut reader,
            &mut tree.root,
            items,
            &domain,
            Depth::default(),
        );
    }
    let mut errors = reader.into_errors();
    if errors.is_empty() {
        Ok(ParsedDomain {
            domain,
            tree,
            lines,
        })
    } else {
        errors.sort_by_key(|e| e.line);
        Err(errors)
    }
}

/// The parser's problem: its kind, and its message without the location prefix and
/// source snippet (the location is reported in its own fields).
fn parser_problem(e: &serde_saphyr::Error) -> (ConfigErrorKind, String) {
    if let Some(over) = super::budget::describe(e) {
        return over;
    }
    (ConfigErrorKind::YamlSyntax, yaml::parser_message(e))
}

/// Where a descriptor sits: how deep, and which levels above it name metrics by the
/// request's value (`value_to_metric`).
#[derive(Debug, Clone, Copy, Default)]
struct Depth {
    /// Levels above: 0 for the domain's own descriptors.
    level: u32,
    /// [`crate::rules::Rule::value_to_metric`] of the levels above.
    value_to_metric: u64,
}

impl Depth {
    /// The depth of the descriptors below one at this depth, which names metrics by the
    /// request's value when `by_value`. Past the 64th level the bit is dropped: the config
    /// limits allow 63, and metrics show only the first two.
    fn below(self, by_value: bool) -> Depth {
        let bit = u64::from(by_value).checked_shl(self.level).unwrap_or(0);
        Depth {
            level: self.level + 1,
            value_to_metric: self.value_to_metric | bit,
        }
    }
}

/// Reads the descriptors `items` of the descriptor at `parent` (or of the domain), which
/// sit at `depth`, into `level`, and their children below them. Returns the line of each
/// descriptor added to `level`, in its order.
fn descriptors(
    reader: &mut Reader<'_>,
    level: &mut Level,
    items: &[YamlNode],
    parent: &str,
    depth: Depth,
) -> Vec<u32> {
    let mut lines = Vec::with_capacity(items.len());
    for item in items {
        let Some(read) = descriptor(reader, item, parent, depth) else {
            continue;
        };
        if level.insert(&read.composite, read.wildcard, read.entry) {
            lines.push(read.at);
        } else {
            let path = read.path;
            reader.error(
                ConfigErrorKind::DuplicateDescriptor,
                read.at,
                Some(&path),
                format_args!("duplicate descriptor composite key '{path}'"),
            );
        }
    }
    lines
}

/// One descriptor of a level, read with its children, for [`descriptors`] to add.
struct Descriptor {
    /// Its composite key (`key_value`, or `key`), unique in its level.
    composite: String,
    /// Its value holds a `*`.
    wildcard: bool,
    /// Its line: its key's, or its own.
    at: u32,
    /// Its path (`domain.key_value…`), for messages.
    path: String,
    /// Its rule and children.
    entry: Entry,
}

/// Reads the descriptor `item` of the descriptor at `parent` (or of the domain), which
/// sits at `depth`, and its children; `None` when it is not a mapping.
fn descriptor(
    reader: &mut Reader<'_>,
    item: &YamlNode,
    parent: &str,
    depth: Depth,
) -> Option<Descriptor> {
    if !matches!(item.value, Yaml::Map(_)) {
        reader.error(
            ConfigErrorKind::DescriptorNotAMapping,
            line(item),
            Some(parent),
            "yaml file contains list of type other than map",
        );
        return None;
    }
    // Key and value first: they name the descriptor in every other message.
    let peek = Fields::peek(item, &["key", "value"]);
    let at = peek.get("key").map_or(line(item), line);
    let key = peek
        .get("key")
        .and_then(|n| reader.text(n, Some(parent), "key"))
        .unwrap_or_default();
    let value = peek
        .get("value")
        .and_then(|n| reader.text(n, Some(parent), "value"))
        .filter(|v| !v.is_empty());
    let composite = match &value {
        Some(v) => format!("{key}_{v}"),
        None => key.clone(),
    };
    let path = format!("{parent}.{composite}");
    let fields = reader.mapping(item, Some(&path), DESCRIPTOR_KEYS);
    if key.is_empty() {
        reader.error(
            ConfigErrorKind::EmptyKey,
            at,
            Some(&path),
            "descriptor has empty key",
        );
    }
    let wildcard = value.as_deref().is_some_and(|v| v.contains('*'));
    let share = reader.flag(&fields, "share_threshold", &path);
    if share && !wildcard {
        reader.error(
            ConfigErrorKind::ShareThresholdWithoutWildcard,
            at,
            Some(&path),
            format_args!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{composite}'"
            ),
        );
    }
    let mode = Mode::from_flags(
        reader.flag(&fields, "shadow_mode", &path),
        reader.flag(&fields, "quota_mode", &path),
    );
    let detailed_metric = reader.flag(&fields, "detailed_metric", &path);
    // As in the Go server, the request's value replaces only what the config leaves
    // open: a value-less entry's value, a wildcard's pattern (unless share_threshold,
    // whose pattern names the one bucket all its values share).
    let by_value =
        reader.flag(&fields, "value_to_metric", &path) && (value.is_none() || (wildcard && !share));
    let depth = depth.below(by_value);
    let rule = descriptor_rule(reader, &fields, &path).map(|mut rule| {
        rule.mode = mode;
        rule.detailed_metric = detailed_metric;
        rule.value_to_metric = depth.value_to_metric;
        rule
    });
    let mut entry = Entry {
        rule,
        shared_value: value.filter(|_| share && wildcard).map(Into::into),
        children: Level::default(),
    };
    if let Some(children) = fields.get("descriptors") {
        let children = reader.list(children, Some(&path), "descriptors");
        super::holds::check_children(reader, entry.rule.as_ref(), children, &path);
        descriptors(reader, &mut entry.children, children, &path, depth);
    }
    Some(Descriptor {
        composite,
        wildcard,
        at,
        path,
        entry,
    })
}

/// The rule of the descriptor at `path` with these `fields`: its limits (`rate_limit` or
/// `rate_limits`), its metadata, its `charge` and its holds (`reserve`, `concurrency`);
/// `None` when it has no limits.
fn descriptor_rule(reader: &mut Reader<'_>, fields: &Fields<'_>, path: &str) -> Option<Rule> {
    let rule = match (fields.get("rate_limit"), fields.get("rate_limits")) {
        (Some(_), Some(list)) => {
            reader.error(
                ConfigErrorKind::BothLimitForms,
                line(list),
                Some(path),
                "a descriptor has rate_limit or rate_limits, not both",
            );
            None
        }
        (Some(single), None) => super::rate_limit::rule(reader, single, path),
        (None, Some(list)) => super::rate_limit::listed_rule(reader, list, path),
        (None, None) => None,
    };
    let metadata = fields
        .get("metadata")
        .and_then(|node| super::metadata::read(reader, node, path))
        .filter(|map| !map.is_empty())
        .map(std::sync::Arc::new);
    let charge = super::rate_limit::charge(reader, fields, path);
    if let (Some(_), Some(node)) = (charge, fields.get("charge"))
        && rule.as_ref().is_none_or(|rule| rule.is_unlimited())
    {
        reader.error(
            ConfigErrorKind::BadCharge,
            line(node),
            Some(path),
            "charge needs limits to charge: a rate_limit or rate_limits that is not unlimited",
        );
    }
    let rule = rule.map(|mut rule| {
        if charge == Some(true) {
            rule.limits.iter_mut().for_each(|limit| limit.charge = true);
        }
        rule
    });
    super::holds::read(reader, fields, rule, path).map(|mut rule| {
        rule.metadata = metadata;
        rule
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const FLAGGED: &str = "
domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value: GET
        value_to_metric: true
        descriptors:
          - key: user
            value_to_metric: true
            rate_limit: {unit: second, requests_per_unit: 1}
      - key: tier
        value: gold*
        value_to_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: pool
        value: p*
        share_threshold: true
        value_to_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1}
";

    /// Each rule's full key and its `value_to_metric` bits.
    fn bits(text: &str) -> Vec<(String, u64)> {
        let config =
            Config::from_sources(&[("d.yaml".into(), text.to_string())]).expect("a valid config");
        config
            .rules()
            .into_iter()
            .map(|r| (r.full_key.clone(), r.value_to_metric))
            .collect()
    }

    #[test]
    fn value_to_metric_marks_the_levels_whose_value_the_config_leaves_open() {
        let got = bits(FLAGGED);
        let expected = [
            // A configured value is the request's already: no bit at level 1.
            ("d.plain", 0),
            ("d.route.method_GET.user", 0b101),
            // share_threshold: the pattern names the shared bucket, whatever the flag.
            ("d.route.pool_p*", 0b01),
            ("d.route.tier_gold*", 0b11),
        ];
        let expected: Vec<(String, u64)> = expected
            .iter()
            .map(|&(key, bits)| (key.to_string(), bits))
            .collect();
        assert_eq!(got, expected);
    }
}
