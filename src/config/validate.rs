//! YAML tree → typed rules. Every rule of §1.9 of the reference is one check here, every
//! violation is collected (not just the first), each with its own line and descriptor path.

use std::path::Path;

use super::ConfigError;
use super::yaml::{self, Node, Yaml, line};
use crate::matcher::{DomainTree, Entry, Level};
use crate::rules::{Algorithm, ConfigLimit, Mode, Rule, Unit};

const FILE_KEYS: &[&str] = &["domain", "descriptors"];
const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];
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

/// Parses and validates one domain file.
pub(super) fn parse_domain_file(
    file: &Path,
    text: &str,
) -> Result<(String, DomainTree), Vec<ConfigError>> {
    let root = if text.trim().is_empty() {
        None
    } else {
        Some(yaml::parse(text).map_err(|e| {
            let line = e.location().map(|l| l.line() as u32);
            vec![ConfigError::new(file, line, None, parser_message(&e))]
        })?)
    };
    let mut builder = Builder {
        file,
        errors: Vec::new(),
    };
    let fields = match &root {
        Some(root) => builder.mapping(root, None, FILE_KEYS),
        None => Fields::default(),
    };
    let domain = fields
        .get("domain")
        .and_then(|n| builder.text(n, None, "domain"))
        .unwrap_or_default();
    if domain.is_empty() {
        let at = fields.get("domain").or(root.as_ref()).map(line);
        builder.errors.push(ConfigError::new(
            file,
            at,
            None,
            "config file cannot have empty domain",
        ));
        return Err(builder.errors);
    }
    let mut tree = DomainTree::default();
    if let Some(list) = fields.get("descriptors") {
        let items = builder.list(list, Some(&domain), "descriptors");
        builder.level(&mut tree.root, items, &domain);
    }
    if builder.errors.is_empty() {
        Ok((domain, tree))
    } else {
        builder.errors.sort_by_key(|e| e.line);
        Err(builder.errors)
    }
}

/// The parser's message without its location prefix and source snippet: the location is
/// reported in its own fields.
fn parser_message(e: &serde_saphyr::Error) -> String {
    if let Some(over) = super::budget::describe(e) {
        return over;
    }
    let text = e.without_snippet().to_string();
    let text = text.lines().next().unwrap_or_default();
    let text = text.strip_prefix("error: ").unwrap_or(text);
    let text = match text.split_once(": ") {
        Some((place, rest)) if place.starts_with("line ") => rest,
        _ => text,
    };
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_string(),
        None => text.to_string(),
    }
}

/// The known keys of one mapping, each with its value node; `null` values are left out.
#[derive(Default)]
struct Fields<'n>(Vec<(&'static str, &'n Node)>);

impl<'n> Fields<'n> {
    fn get(&self, name: &str) -> Option<&'n Node> {
        self.0
            .iter()
            .find(|(k, v)| *k == name && v.value != Yaml::Null)
            .map(|(_, v)| *v)
    }
}

struct Builder<'a> {
    file: &'a Path,
    errors: Vec<ConfigError>,
}

impl Builder<'_> {
    fn error(&mut self, line: u32, path: Option<&str>, message: impl std::fmt::Display) {
        self.errors.push(ConfigError::new(
            self.file,
            Some(line),
            path.map(str::to_string),
            message,
        ));
    }

    /// Reads a mapping, reporting keys that are not strings or not in `allowed`.
    fn mapping<'n>(
        &mut self,
        node: &'n Node,
        path: Option<&str>,
        allowed: &[&'static str],
    ) -> Fields<'n> {
        let mut fields = Fields::default();
        let entries = match &node.value {
            Yaml::Map(entries) => entries,
            Yaml::Null => return fields,
            other => {
                let kind = other.kind();
                self.error(
                    line(node),
                    path,
                    format_args!("expected a mapping, found {kind}"),
                );
                return fields;
            }
        };
        for (key, value) in entries {
            match &key.value {
                Yaml::Scalar { text, string: true } => match allowed.iter().find(|a| **a == text) {
                    Some(name) => fields.0.push((name, value)),
                    None => self.error(line(key), path, format_args!("unknown key '{text}'")),
                },
                Yaml::Scalar { text, .. } => {
                    self.error(
                        line(key),
                        path,
                        format_args!("key is not of type string: {text}"),
                    );
                }
                other => {
                    let kind = other.kind();
                    self.error(
                        line(key),
                        path,
                        format_args!("key is not of type string: {kind}"),
                    );
                }
            }
        }
        fields
    }

    fn text(&mut self, node: &Node, path: Option<&str>, what: &str) -> Option<String> {
        match &node.value {
            Yaml::Scalar { text, .. } => Some(text.clone()),
            other => {
                let kind = other.kind();
                self.error(
                    line(node),
                    path,
                    format_args!("{what} must be a string, found {kind}"),
                );
                None
            }
        }
    }

    fn list<'n>(&mut self, node: &'n Node, path: Option<&str>, what: &str) -> &'n [Node] {
        match &node.value {
            Yaml::Seq(items) => items,
            Yaml::Null => &[],
            other => {
                let kind = other.kind();
                self.error(
                    line(node),
                    path,
                    format_args!("{what} must be a list, found {kind}"),
                );
                &[]
            }
        }
    }

    fn flag(&mut self, fields: &Fields<'_>, name: &str, path: &str) -> bool {
        let Some(node) = fields.get(name) else {
            return false;
        };
        let text = self.text(node, Some(path), name).unwrap_or_default();
        match text.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" => true,
            "false" | "no" | "off" => false,
            _ => {
                self.error(
                    line(node),
                    Some(path),
                    format_args!("{name} must be true or false, got '{text}'"),
                );
                false
            }
        }
    }

    fn number(&mut self, fields: &Fields<'_>, name: &str, path: &str) -> Option<u32> {
        let node = fields.get(name)?;
        let text = self.text(node, Some(path), name)?;
        match text.parse() {
            Ok(n) => Some(n),
            Err(_) => {
                self.error(
                    line(node),
                    Some(path),
                    format_args!(
                        "{name} must be a whole number from 0 to 4294967295, got '{text}'"
                    ),
                );
                None
            }
        }
    }

    fn level(&mut self, level: &mut Level, items: &[Node], parent: &str) {
        for item in items {
            if !matches!(item.value, Yaml::Map(_)) {
                self.error(
                    line(item),
                    Some(parent),
                    "yaml file contains list of type other than map",
                );
                continue;
            }
            // Key and value first: they name the descriptor in every other message.
            let peek = Fields(match &item.value {
                Yaml::Map(entries) => entries
                    .iter()
                    .filter_map(|(k, v)| match &k.value {
                        Yaml::Scalar { text, string: true } if text == "key" => Some(("key", v)),
                        Yaml::Scalar { text, string: true } if text == "value" => {
                            Some(("value", v))
                        }
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            });
            let at = peek.get("key").map_or(line(item), line);
            let key = peek
                .get("key")
                .and_then(|n| self.text(n, Some(parent), "key"))
                .unwrap_or_default();
            let value = peek
                .get("value")
                .and_then(|n| self.text(n, Some(parent), "value"))
                .filter(|v| !v.is_empty());
            let composite = match &value {
                Some(v) => format!("{key}_{v}"),
                None => key.clone(),
            };
            let path = format!("{parent}.{composite}");
            let fields = self.mapping(item, Some(&path), DESCRIPTOR_KEYS);
            if key.is_empty() {
                self.error(at, Some(&path), "descriptor has empty key");
            }
            let wildcard = value.as_deref().is_some_and(|v| v.contains('*'));
            let share = self.flag(&fields, "share_threshold", &path);
            if share && !wildcard {
                self.error(
                    at,
                    Some(&path),
                    format_args!(
                        "share_threshold can only be used with wildcard values (containing '*'), but found key '{composite}'"
                    ),
                );
            }
            let mode = Mode::from_flags(
                self.flag(&fields, "shadow_mode", &path),
                self.flag(&fields, "quota_mode", &path),
            );
            let detailed_metric = self.flag(&fields, "detailed_metric", &path);
            self.flag(&fields, "value_to_metric", &path);
            let rule = fields.get("rate_limit").and_then(|rl| {
                let mut rule = self.rule(rl, &path)?;
                rule.mode = mode;
                rule.detailed_metric = detailed_metric;
                Some(rule)
            });
            let mut node = Entry {
                rule,
                shared_value: value.filter(|_| share && wildcard).map(Into::into),
                children: Level::default(),
            };
            if let Some(children) = fields.get("descriptors") {
                let children = self.list(children, Some(&path), "descriptors");
                self.level(&mut node.children, children, &path);
            }
            if !level.insert(&composite, wildcard, node) {
                self.error(
                    at,
                    Some(&path),
                    format_args!("duplicate descriptor composite key '{path}'"),
                );
            }
        }
    }

    fn rule(&mut self, node: &Node, path: &str) -> Option<Rule> {
        let before = self.errors.len();
        let fields = self.mapping(node, Some(path), RATE_LIMIT_KEYS);
        let name = fields
            .get("name")
            .and_then(|n| self.text(n, Some(path), "name"))
            .unwrap_or_default();
        let replaces = self.replaces(&fields, &name, path);
        let limit = if self.flag(&fields, "unlimited", path) {
            for what in ["unit", "burst", "algorithm"] {
                if let Some(set) = fields.get(what) {
                    self.error(
                        line(set),
                        Some(path),
                        format_args!("should not specify rate limit {what} when unlimited"),
                    );
                }
            }
            None
        } else {
            self.limit(&fields, node, path)
        };
        (self.errors.len() == before).then(|| Rule {
            full_key: path.to_string(),
            name,
            limit,
            replaces,
            mode: Mode::Enforce,
            detailed_metric: false,
        })
    }

    fn replaces(&mut self, fields: &Fields<'_>, own: &str, path: &str) -> Vec<String> {
        let Some(list) = fields.get("replaces") else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for entry in self.list(list, Some(path), "replaces") {
            let entry_fields = self.mapping(entry, Some(path), REPLACES_KEYS);
            let name = entry_fields
                .get("name")
                .and_then(|n| self.text(n, Some(path), "replaces name"))
                .unwrap_or_default();
            if name.is_empty() {
                self.error(
                    line(entry),
                    Some(path),
                    "should not have an empty replaces entry",
                );
            } else if name == own {
                self.error(
                    line(entry),
                    Some(path),
                    "replaces should not contain name of same descriptor",
                );
            }
            names.push(name);
        }
        names
    }

    fn limit(&mut self, fields: &Fields<'_>, node: &Node, path: &str) -> Option<ConfigLimit> {
        let unit_node = fields.get("unit");
        let unit_name = unit_node
            .and_then(|n| self.text(n, Some(path), "unit"))
            .unwrap_or_default();
        let unit = Unit::parse(&unit_name);
        if unit.is_none() {
            let at = unit_node.map_or(line(node), line);
            self.error(
                at,
                Some(path),
                format_args!("invalid rate limit unit '{unit_name}'"),
            );
        }
        let requests_per_unit = self.number(fields, "requests_per_unit", path).unwrap_or(0);
        let algorithm = match fields.get("algorithm") {
            None => None,
            Some(n) => {
                match self.text(n, Some(path), "algorithm").as_deref() {
                    Some("token_bucket") => Some(Algorithm::TokenBucket),
                    Some("fixed_window") => Some(Algorithm::FixedWindow),
                    Some(other) => {
                        self.error(
                        line(n),
                        Some(path),
                        format_args!("invalid algorithm '{other}' (expected token_bucket or fixed_window)"),
                    );
                        None
                    }
                    None => None,
                }
            }
        };
        let burst = self.number(fields, "burst", path);
        if let (Some(burst), Some(at)) = (burst, fields.get("burst").map(line)) {
            if burst == 0 && requests_per_unit > 0 {
                self.error(at, Some(path), "burst must be at least 1");
            } else if algorithm == Some(Algorithm::FixedWindow) {
                self.error(
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
}
