//! YAML → typed rules: every rule of §1.9 of the reference is one check here, and every
//! violation is collected (not just the first) with its line and descriptor path.

use std::path::Path;

use serde_saphyr::Spanned;

use super::ConfigError;
use super::yaml::{Descriptor, DomainFile, RateLimit};
use crate::matcher::{DomainTree, Level, Node};
use crate::rules::{Algorithm, ConfigLimit, Mode, Rule, Unit};

/// Parses and validates one domain file.
pub(super) fn parse_domain_file(
    file: &Path,
    text: &str,
) -> Result<(String, DomainTree), Vec<ConfigError>> {
    let parsed: DomainFile = if text.trim().is_empty() {
        DomainFile {
            domain: None,
            descriptors: Vec::new(),
        }
    } else {
        serde_saphyr::from_str(text).map_err(|e| {
            let line = e.location().map(|l| l.line() as u32);
            vec![ConfigError::new(file, line, None, yaml_message(&e))]
        })?
    };
    let Some(domain) = parsed.domain.filter(|d| !d.value.is_empty()) else {
        return Err(vec![ConfigError::new(
            file,
            None,
            None,
            "config file cannot have empty domain",
        )]);
    };
    let mut builder = Builder {
        file,
        errors: Vec::new(),
    };
    let mut tree = DomainTree::default();
    builder.level(&mut tree.root, &parsed.descriptors, &domain.value);
    if builder.errors.is_empty() {
        Ok((domain.value, tree))
    } else {
        Err(builder.errors)
    }
}

/// The parser's message without its location prefix and source snippet: the location is
/// reported in its own fields.
fn yaml_message(e: &serde_saphyr::Error) -> String {
    let text = e.without_snippet().to_string();
    let text = text.lines().next().unwrap_or_default();
    let text = text.strip_prefix("error: ").unwrap_or(text);
    // "line 4 column 5: unknown field ..." → "unknown field ..."
    let text = match text.split_once(": ") {
        Some((place, rest)) if place.starts_with("line ") => rest,
        _ => text,
    };
    // "... at line 6, column 5" repeats what `ConfigError::line` says.
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_string(),
        None => text.to_string(),
    }
}

struct Builder<'a> {
    file: &'a Path,
    errors: Vec<ConfigError>,
}

impl Builder<'_> {
    fn error(&mut self, line: u32, path: &str, message: impl std::fmt::Display) {
        self.errors.push(ConfigError::new(
            self.file,
            Some(line),
            Some(path.to_string()),
            message,
        ));
    }

    fn level(&mut self, level: &mut Level, items: &[Spanned<Descriptor>], parent: &str) {
        for item in items {
            let line = item.referenced.line() as u32;
            let d = &item.value;
            let value = d.value.as_deref().filter(|v| !v.is_empty());
            let composite = match value {
                Some(v) => format!("{}_{v}", d.key),
                None => d.key.clone(),
            };
            let path = format!("{parent}.{composite}");
            if d.key.is_empty() {
                self.error(line, &path, "descriptor has empty key");
            }
            let wildcard = value.is_some_and(|v| v.contains('*'));
            if d.share_threshold && !wildcard {
                self.error(
                    line,
                    &path,
                    format_args!(
                        "share_threshold can only be used with wildcard values (containing '*'), but found key '{composite}'"
                    ),
                );
            }
            let rule = d.rate_limit.as_ref().and_then(|rl| self.rule(rl, d, &path));
            let mut node = Node {
                rule,
                shared_value: value
                    .filter(|_| d.share_threshold && wildcard)
                    .map(Into::into),
                children: Level::default(),
            };
            self.level(&mut node.children, &d.descriptors, &path);
            if !level.insert(&composite, wildcard, node) {
                self.error(
                    line,
                    &path,
                    format_args!("duplicate descriptor composite key '{path}'"),
                );
            }
        }
    }

    fn rule(&mut self, spanned: &Spanned<RateLimit>, d: &Descriptor, path: &str) -> Option<Rule> {
        let line = spanned.referenced.line() as u32;
        let rl = &spanned.value;
        let before = self.errors.len();
        let name = rl.name.clone().unwrap_or_default();
        for replaced in &rl.replaces {
            if replaced.name.is_empty() {
                self.error(line, path, "should not have an empty replaces entry");
            } else if replaced.name == name {
                self.error(
                    line,
                    path,
                    "replaces should not contain name of same descriptor",
                );
            }
        }
        let limit = if rl.unlimited {
            for (set, what) in [
                (rl.unit.is_some(), "unit"),
                (rl.burst.is_some(), "burst"),
                (rl.algorithm.is_some(), "algorithm"),
            ] {
                if set {
                    self.error(
                        line,
                        path,
                        format_args!("should not specify rate limit {what} when unlimited"),
                    );
                }
            }
            None
        } else {
            self.limit(rl, line, path)
        };
        if self.errors.len() > before {
            return None;
        }
        Some(Rule {
            full_key: path.to_string(),
            name,
            limit,
            replaces: rl.replaces.iter().map(|r| r.name.clone()).collect(),
            mode: Mode::from_flags(d.shadow_mode, d.quota_mode),
            detailed_metric: d.detailed_metric,
        })
    }

    fn limit(&mut self, rl: &RateLimit, line: u32, path: &str) -> Option<ConfigLimit> {
        let unit_name = rl.unit.as_deref().unwrap_or_default();
        let unit = Unit::parse(unit_name);
        if unit.is_none() {
            self.error(
                line,
                path,
                format_args!("invalid rate limit unit '{unit_name}'"),
            );
        }
        let algorithm = match rl.algorithm.as_deref() {
            None => None,
            Some("token_bucket") => Some(Algorithm::TokenBucket),
            Some("fixed_window") => Some(Algorithm::FixedWindow),
            Some(other) => {
                self.error(
                    line,
                    path,
                    format_args!(
                        "invalid algorithm '{other}' (expected token_bucket or fixed_window)"
                    ),
                );
                None
            }
        };
        match rl.burst {
            Some(0) if rl.requests_per_unit > 0 => {
                self.error(line, path, "burst must be at least 1");
            }
            Some(_) if algorithm == Some(Algorithm::FixedWindow) => {
                self.error(
                    line,
                    path,
                    "burst has no meaning with algorithm fixed_window",
                );
            }
            _ => {}
        }
        Some(ConfigLimit {
            requests_per_unit: rl.requests_per_unit,
            unit: unit?,
            burst: rl.burst.unwrap_or(rl.requests_per_unit),
            algorithm,
        })
    }
}
