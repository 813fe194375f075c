//! Reading typed values (mappings, strings, lists, flags, counts) out of YAML nodes. A
//! value of the wrong type is a problem collected with its line and descriptor path, not a
//! stop: validation goes on and reports every problem of the file.

use std::path::Path;

use super::yaml::{Yaml, YamlNode, line};
use crate::error::{ConfigError, ConfigErrorKind};

/// The known keys of one mapping, each with its value node; `null` values are left out.
#[derive(Default)]
pub(super) struct Fields<'n>(
    /// `(key, value)` in file order, the key as the format spells it.
    Vec<(&'static str, &'n YamlNode)>,
);

impl<'n> Fields<'n> {
    /// The value of `name`, unless it is missing or `null`.
    pub(super) fn get(&self, name: &str) -> Option<&'n YamlNode> {
        self.0
            .iter()
            .find(|(k, v)| *k == name && v.value != Yaml::Null)
            .map(|(_, v)| *v)
    }

    /// The keys of `node` (a mapping) named in `names`, reporting nothing: for the fields
    /// needed before the mapping is read in full, such as a descriptor's key and value,
    /// which name the descriptor in every other message.
    pub(super) fn peek(node: &'n YamlNode, names: &[&'static str]) -> Self {
        let Yaml::Map(entries) = &node.value else {
            return Fields::default();
        };
        Fields(
            entries
                .iter()
                .filter_map(|(k, v)| match &k.value {
                    Yaml::Scalar { text, string: true } => {
                        names.iter().find(|n| **n == text).map(|n| (*n, v))
                    }
                    _ => None,
                })
                .collect(),
        )
    }
}

/// Reads the nodes of one file, collecting every problem found on the way.
pub(super) struct Reader<'a> {
    /// The file the problems are reported against.
    file: &'a Path,
    /// The problems found so far, in the order found.
    errors: Vec<ConfigError>,
}

impl<'a> Reader<'a> {
    /// A reader of `file` that has found nothing yet.
    pub(super) fn new(file: &'a Path) -> Self {
        Reader {
            file,
            errors: Vec::new(),
        }
    }

    /// Records a problem of `kind` at `line` (0: unknown) of the descriptor at `path`.
    pub(super) fn error(
        &mut self,
        kind: ConfigErrorKind,
        line: u32,
        path: Option<&str>,
        message: impl std::fmt::Display,
    ) {
        self.errors.push(ConfigError::new(
            kind,
            self.file,
            Some(line),
            path.map(str::to_string),
            message,
        ));
    }

    /// How many problems were found so far: a part is valid when reading it adds none.
    pub(super) fn problems(&self) -> usize {
        self.errors.len()
    }

    /// The problems found, in the order found.
    pub(super) fn into_errors(self) -> Vec<ConfigError> {
        self.errors
    }

    /// Reads a mapping, reporting keys that are not strings or not in `allowed`.
    pub(super) fn mapping<'n>(
        &mut self,
        node: &'n YamlNode,
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
                    ConfigErrorKind::NotAMapping,
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
                    None => self.error(
                        ConfigErrorKind::UnknownKey,
                        line(key),
                        path,
                        format_args!("unknown key '{text}'"),
                    ),
                },
                Yaml::Scalar { text, .. } => {
                    self.error(
                        ConfigErrorKind::KeyNotAString,
                        line(key),
                        path,
                        format_args!("key is not of type string: {text}"),
                    );
                }
                other => {
                    let kind = other.kind();
                    self.error(
                        ConfigErrorKind::KeyNotAString,
                        line(key),
                        path,
                        format_args!("key is not of type string: {kind}"),
                    );
                }
            }
        }
        fields
    }

    /// The text of a scalar `what`, as written.
    pub(super) fn text(
        &mut self,
        node: &YamlNode,
        path: Option<&str>,
        what: &str,
    ) -> Option<String> {
        match &node.value {
            Yaml::Scalar { text, .. } => Some(text.clone()),
            other => {
                let kind = other.kind();
                self.error(
                    ConfigErrorKind::NotAString,
                    line(node),
                    path,
                    format_args!("{what} must be a string, found {kind}"),
                );
                None
            }
        }
    }

    /// The items of a list `what`; `null` is an empty list.
    pub(super) fn list<'n>(
        &mut self,
        node: &'n YamlNode,
        path: Option<&str>,
        what: &str,
    ) -> &'n [YamlNode] {
        match &node.value {
            Yaml::Seq(items) => items,
            Yaml::Null => &[],
            other => {
                let kind = other.kind();
                self.error(
                    ConfigErrorKind::NotAList,
                    line(node),
                    path,
                    format_args!("{what} must be a list, found {kind}"),
                );
                &[]
            }
        }
    }

    /// The flag `name` of `fields`, false when missing; YAML 1.1's spellings, as yaml.v2
    /// reads them.
    pub(super) fn flag(&mut self, fields: &Fields<'_>, name: &str, path: &str) -> bool {
        let Some(node) = fields.get(name) else {
            return false;
        };
        let text = self.text(node, Some(path), name).unwrap_or_default();
        match text.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" => true,
            "false" | "no" | "off" => false,
            _ => {
                self.error(
                    ConfigErrorKind::NotAFlag,
                    line(node),
                    Some(path),
                    format_args!("{name} must be true or false, got '{text}'"),
                );
                false
            }
        }
    }

    /// The count `name` of `fields`, if set and valid.
    pub(super) fn number(&mut self, fields: &Fields<'_>, name: &str, path: &str) -> Option<u32> {
        let node = fields.get(name)?;
        let text = self.text(node, Some(path), name)?;
        match text.parse() {
            Ok(n) => Some(n),
            Err(_) => {
                self.error(
                    ConfigErrorKind::NotANumber,
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
}
