//! A YAML document as a tree of located nodes, so that validation can report every
//! problem (not only the parser's first) with its own line and descriptor path.
//!
//! Scalars keep their text as written: `value: 200` and `value: true` are the strings
//! `200` and `true`, as the Go server's yaml.v2 reads them into string fields.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// One YAML node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Yaml {
    /// `~`, `null` or nothing.
    Null,
    /// A scalar and whether YAML typed it as a string.
    Scalar {
        /// The scalar's text; numbers and booleans too (`200`, `true`), as yaml.v2 reads
        /// them into string fields.
        text: String,
        /// Whether YAML read it as a string rather than a number or boolean.
        string: bool,
    },
    /// A sequence.
    Seq(Vec<YamlNode>),
    /// A mapping, in file order.
    Map(Vec<(YamlNode, YamlNode)>),
}

/// A node with its place in the file.
pub(crate) type YamlNode = Spanned<Yaml>;

/// The 1-based line a node starts on.
pub(crate) fn line(node: &YamlNode) -> u32 {
    node.referenced.line() as u32
}

impl Yaml {
    /// What the node is, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Yaml::Null => "nothing",
            Yaml::Scalar { .. } => "a scalar",
            Yaml::Seq(_) => "a list",
            Yaml::Map(_) => "a mapping",
        }
    }
}

/// Parses one document, within the limits of [`super::budget`].
pub(crate) fn parse(text: &str) -> Result<YamlNode, serde_saphyr::Error> {
    parse_with(text, super::budget::options())
}

/// Parses one small document (another file than a domain file: a metrics mapping) within
/// the limits of [`super::budget`], but nested `max_depth` levels at most, so that it
/// needs no more than an ordinary thread's stack.
pub(crate) fn parse_shallow(text: &str, max_depth: usize) -> Result<YamlNode, serde_saphyr::Error> {
    let mut options = super::budget::options();
    if let Some(budget) = options.budget.as_mut() {
        budget.max_depth = max_depth;
    }
    parse_with(text, options)
}

fn parse_with(text: &str, options: serde_saphyr::Options) -> Result<YamlNode, serde_saphyr::Error> {
    let mut root = serde_saphyr::from_str_with_options(text, options)?;
    restore_written_text(&mut root, text);
    Ok(root)
}

/// The parser's message for `e`, without the location prefix and source snippet (the
/// location is reported on its own: `e.location()`).
pub(crate) fn parser_message(e: &serde_saphyr::Error) -> String {
    let text = e.without_snippet().to_string();
    let text = text.lines().next().unwrap_or_default();
    let text = text.strip_prefix("error: ").unwrap_or(text);
    let text = match text.split_once(": ") {
        Some((place, rest)) if place.starts_with("line ") => rest,
        _ => text,
    };
    let message = match text.rfind(" at line ") {
        Some(at) => &text[..at],
        None => text,
    };
    message.to_string()
}

/// The parser hands numbers and booleans over typed (`007` as 7); put back the text as
/// written, taken from the source at the scalar's span.
fn restore_written_text(node: &mut YamlNode, source: &str) {
    let span = node.defined.span();
    match &mut node.value {
        Yaml::Scalar {
            text,
            string: false,
        } => {
            let written = span
                .byte_offset()
                .zip(span.byte_len())
                .and_then(|(at, len)| {
                    let (at, len) = (usize::try_from(at).ok()?, usize::try_from(len).ok()?);
                    source.get(at..at.checked_add(len)?)
                });
            if let Some(written) = written.filter(|w| !w.is_empty()) {
                *text = written.trim().to_string();
            }
        }
        Yaml::Seq(items) => items
            .iter_mut()
            .for_each(|n| restore_written_text(n, source)),
        Yaml::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
            restore_written_text(k, source);
            restore_written_text(v, source);
        }),
        Yaml::Null | Yaml::Scalar { .. } => {}
    }
}

impl<'de> Deserialize<'de> for Yaml {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(YamlVisitor)
    }
}

struct YamlVisitor;

impl YamlVisitor {
    fn scalar(text: impl ToString) -> Yaml {
        Yaml::Scalar {
            text: text.to_string(),
            string: false,
        }
    }
}

impl<'de> Visitor<'de> for YamlVisitor {
    type Value = Yaml;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Yaml, E> {
        Ok(Self::scalar(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Yaml, E> {
        Ok(Self::scalar(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Yaml, E> {
        Ok(Self::scalar(v))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Yaml, E> {
        Ok(Self::scalar(v))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Yaml, E> {
        Ok(Self::scalar(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Yaml, E> {
        Ok(Self::scalar(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Yaml, E> {
        Ok(Yaml::Scalar {
            text: v.to_string(),
            string: true,
        })
    }
    fn visit_unit<E>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }
    fn visit_none<E>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Yaml, D::Error> {
        Yaml::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Yaml, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<YamlNode>()? {
            items.push(item);
        }
        Ok(Yaml::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Yaml, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<YamlNode, YamlNode>()? {
            entries.push(entry);
        }
        Ok(Yaml::Map(entries))
    }
}
