//! A mapping file → a [`Mapping`], checked as statsd_exporter v0.26.1 checks it when it
//! loads one, each problem with its line.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

use super::glob::Globs;
use super::template::Template;
use super::{Mapping, Matcher, Rule, StatKind};
use crate::config::yaml::{self, Yaml, YamlNode, line};

/// The largest mapping file read: far above any real one (the Go server's is 3 KiB).
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Deepest nesting of lists and mappings a mapping file needs (the top mapping, the list,
/// an entry, its `histogram_options`, their `buckets`), with room to spare.
const MAX_DEPTH: usize = 16;

/// A glob `match`: components of letters, digits, `_` and `-`, or `*` (statsd_exporter's
/// `metricLineRE`; the first cannot start with a digit).
static GLOB: LazyLock<Regex> = LazyLock::new(|| {
    let first = r"[a-zA-Z_][a-zA-Z0-9_\-]*";
    let next = r"[a-zA-Z0-9_][a-zA-Z0-9_\-]*";
    Regex::new(&format!(r"^(\*|{first})(\.\*|\.{next})*$")).expect("a valid regex")
});

/// A `name`: letters, digits, `_` and `$n` references, not starting with a digit
/// (statsd_exporter's `metricNameRE`).
static NAME: LazyLock<Regex> = LazyLock::new(|| {
    let reference = r"\$\{?[0-9]+\}?";
    Regex::new(&format!(
        r"^([a-zA-Z_]|{reference})([a-zA-Z0-9_]|{reference})*$"
    ))
    .expect("a valid regex")
});

/// A label name: statsd_exporter's `labelNameRE`, which asks for two characters at least.
static LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z_][a-zA-Z0-9_]+$").expect("a valid regex"));

/// Why a mapping file cannot be used: the file, the line, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--metrics-mapping {}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct MappingError {
    /// The mapping file.
    pub path: PathBuf,
    /// The line of the problem, when it has one (not for a file that cannot be read).
    pub line: Option<u32>,
    /// What is wrong.
    pub message: String,
}

/// A problem in the text: its line, if known, and what is wrong.
type Problem = (Option<u32>, String);

/// Keys the format does not have, each with its line.
type Ignored = Vec<(u32, String)>;

/// Reads the mapping file at `path`: at most [`MAX_FILE_BYTES`].
///
/// # Errors
/// The file cannot be read, or is longer.
pub(super) fn read(path: &Path) -> Result<Vec<u8>, MappingError> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes));
    let message = match read {
        Err(e) => format!("cannot read it: {e}"),
        Ok(_) if bytes.len() as u64 > MAX_FILE_BYTES => {
            format!("longer than {MAX_FILE_BYTES} bytes")
        }
        Ok(_) => return Ok(bytes),
    };
    Err(MappingError {
        path: path.to_path_buf(),
        line: None,
        message,
    })
}

/// Checks the mapping file `path` whose bytes are `bytes`.
///
/// # Errors
/// The bytes are not UTF-8 or not YAML, or break a rule of the format.
pub(super) fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Mapping, MappingError> {
    let error = |line, message| MappingError {
        path: path.to_path_buf(),
        line,
        message,
    };
    let text = std::str::from_utf8(bytes).map_err(|_| error(None, "not UTF-8 text".into()))?;
    parse(text).map_err(|(line, message)| error(line, message))
}

/// The file's `defaults:` that change what mappings do.
#[derive(Debug, Default)]
struct Defaults {
    /// `match_type: regex`: mappings are regexes unless they say otherwise.
    regex: bool,
    /// `observer_type` (or `timer_type`).
    observer: Option<Observer>,
    /// `glob_disable_ordering`.
    unordered: bool,
}

/// An observer type, read only to refuse the options of the other type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Observer {
    /// `histogram`.
    Histogram,
    /// `summary`, or empty.
    Summary,
}

/// Parses and checks a mapping file's text.
pub(crate) fn parse(text: &str) -> Result<Mapping, Problem> {
    let root = if text.trim().is_empty() {
        None
    } else {
        let root = yaml::parse_shallow(text, MAX_DEPTH).map_err(|e| {
            let line = e.location().map(|l| l.line() as u32);
            (line, yaml::parser_message(&e))
        })?;
        Some(root)
    };
    let mut ignored = Vec::new();
    let top = match &root {
        Some(root) => entries(root)?,
        None => &[],
    };
    let mut defaults = Defaults::default();
    let mut list: &[YamlNode] = &[];
    for (key, value) in checked(top)? {
        match key.as_str() {
            "defaults" => defaults = read_defaults(value, &mut ignored)?,
            "mappings" => list = items(value)?,
            _ => ignored.push((line(value), key)),
        }
    }
    let mut rules = Vec::with_capacity(list.len());
    let mut globs = Globs::new(defaults.unordered);
    for item in list {
        let rule = read_rule(item, &defaults, &mut globs, rules.len(), &mut ignored)?;
        rules.push(rule);
    }
    ignored.sort();
    let ignored = ignored
        .into_iter()
        .map(|(at, key)| format!("line {at}: {key}"))
        .collect();
    Ok(Mapping {
        rules,
        globs,
        ignored,
        warned: Default::default(),
    })
}

fn read_defaults(node: &YamlNode, ignored: &mut Ignored) -> Result<Defaults, Problem> {
    let mut defaults = Defaults::default();
    let mut timer_type = None;
    for (key, value) in checked(entries(node)?)? {
        match key.as_str() {
            "match_type" => defaults.regex = match_type(value)?,
            "observer_type" => defaults.observer = Some(observer(value)?),
            "timer_type" => timer_type = Some(observer(value)?),
            "glob_disable_ordering" => defaults.unordered = flag(value)?,
            "ttl" | "buckets" | "quantiles" | "summary_options" | "histogram_options" => {}
            _ => ignored.push((line(value), format!("defaults.{key}"))),
        }
    }
    // v0.26.1 reads the older `timer_type` where `observer_type` is not given.
    defaults.observer = defaults.observer.or(timer_type);
    Ok(defaults)
}

/// What one entry of `mappings:` says, before it is checked as a whole.
#[derive(Debug, Default)]
struct Entry {
    /// `match`.
    matched: String,
    /// `name`.
    name: String,
    /// `labels`, by name.
    labels: Vec<(String, String)>,
    /// `match_type`: `Some(true)` for `regex`.
    regex: Option<bool>,
    /// `action: drop`.
    drop: bool,
    /// `match_metric_type`.
    kind: Option<StatKind>,
    /// `observer_type`.
    observer: Option<Observer>,
    /// `timer_type`, the older name, used where `observer_type` is not given.
    timer_type: Option<Observer>,
    /// `help`.
    help: Option<String>,
    /// `scale`.
    scale: Option<f64>,
    /// Whether `histogram_options` is given.
    histogram_options: bool,
    /// Whether `summary_options` is given.
    summary_options: bool,
}

fn read_entry(node: &YamlNode, ignored: &mut Ignored) -> Result<Entry, Problem> {
    let mut entry = Entry::default();
    for (key, value) in checked(entries(node)?)? {
        match key.as_str() {
            "match" => entry.matched = text(value)?,
            "name" => entry.name = text(value)?,
            "labels" => entry.labels = labels(value)?,
            "match_type" => entry.regex = Some(match_type(value)?),
            "action" => entry.drop = action(value)?,
            "match_metric_type" => entry.kind = Some(metric_type(value)?),
            "observer_type" => entry.observer = Some(observer(value)?),
            "timer_type" => entry.timer_type = Some(observer(value)?),
            "help" => entry.help = Some(text(value)?),
            "scale" => entry.scale = Some(number(value)?),
            "histogram_options" => entry.histogram_options = true,
            "summary_options" => entry.summary_options = true,
            "ttl" | "honor_labels" | "buckets" | "quantiles" => {}
            _ => ignored.push((line(value), key)),
        }
    }
    Ok(entry)
}

/// One entry of `mappings:`, checked, its glob added to `globs` as mapping `index`.
fn read_rule(
    node: &YamlNode,
    defaults: &Defaults,
    globs: &mut Globs,
    index: usize,
    ignored: &mut Ignored,
) -> Result<Rule, Problem> {
    let at = Some(line(node));
    let entry = read_entry(node, ignored)?;
    for (label, _) in &entry.labels {
        if !LABEL.is_match(label) {
            return Err((at, format!("invalid label name {label:?}")));
        }
    }
    if entry.name.is_empty() {
        return Err((at, "the mapping has no name".into()));
    }
    if !NAME.is_match(&entry.name) {
        return Err((at, format!("invalid metric name {:?}", entry.name)));
    }
    let observer = entry.observer.or(entry.timer_type).or(defaults.observer);
    if observer == Some(Observer::Histogram) && entry.summary_options {
        return Err((at, "histogram observer with summary_options".into()));
    }
    if observer == Some(Observer::Summary) && entry.histogram_options {
        return Err((at, "summary observer with histogram_options".into()));
    }
    let matcher = if entry.regex.unwrap_or(defaults.regex) {
        let regex = Regex::new(&entry.matched)
            .map_err(|e| (at, format!("invalid regex {:?}: {e}", entry.matched)))?;
        Matcher::Regex {
            regex,
            name: entry.name,
            labels: entry.labels,
        }
    } else {
        if !GLOB.is_match(&entry.matched) {
            return Err((at, format!("invalid glob match {:?}", entry.matched)));
        }
        let captures = globs.add(&entry.matched, entry.kind, index);
        Matcher::Glob {
            name: Template::parse(&entry.name, captures),
            labels: entry
                .labels
                .iter()
                .map(|(label, value)| (label.clone(), Template::parse(value, captures)))
                .collect(),
        }
    };
    Ok(Rule {
        matcher,
        drop: entry.drop,
        kind: entry.kind,
        help: entry.help.filter(|h| !h.is_empty()),
        scale: entry.scale,
    })
}

/// A mapping's entries (nothing for `~`).
fn entries(node: &YamlNode) -> Result<&[(YamlNode, YamlNode)], Problem> {
    match &node.value {
        Yaml::Map(entries) => Ok(entries),
        Yaml::Null => Ok(&[]),
        other => Err(expected(node, "a mapping", other)),
    }
}

/// A mapping's entries by key, refusing a key given twice (as yaml.v2 does).
fn checked(entries: &[(YamlNode, YamlNode)]) -> Result<Vec<(String, &YamlNode)>, Problem> {
    let mut out: Vec<(String, &YamlNode)> = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let key_text = text(key)?;
        if out.iter().any(|(k, _)| *k == key_text) {
            return Err((Some(line(key)), format!("key {key_text:?} given twice")));
        }
        out.push((key_text, value));
    }
    Ok(out)
}

/// A list's items (nothing for `~`).
fn items(node: &YamlNode) -> Result<&[YamlNode], Problem> {
    match &node.value {
        Yaml::Seq(items) => Ok(items),
        Yaml::Null => Ok(&[]),
        other => Err(expected(node, "a list", other)),
    }
}

/// A scalar's text, as yaml.v2 reads any scalar into a string (`~` is empty).
fn text(node: &YamlNode) -> Result<String, Problem> {
    match &node.value {
        Yaml::Scalar { text, .. } => Ok(text.clone()),
        Yaml::Null => Ok(String::new()),
        other => Err(expected(node, "text", other)),
    }
}

fn expected(node: &YamlNode, what: &str, found: &Yaml) -> Problem {
    (
        Some(line(node)),
        format!("expected {what}, found {}", found.kind()),
    )
}

/// `labels:`, by name.
fn labels(node: &YamlNode) -> Result<Vec<(String, String)>, Problem> {
    checked(entries(node)?)?
        .into_iter()
        .map(|(label, value)| Ok((label, text(value)?)))
        .collect()
}

/// `match_type`: true for `regex`.
fn match_type(node: &YamlNode) -> Result<bool, Problem> {
    match text(node)?.as_str() {
        "regex" => Ok(true),
        "glob" | "" => Ok(false),
        other => Err((Some(line(node)), format!("invalid match type {other:?}"))),
    }
}

/// `action`: true for `drop`.
fn action(node: &YamlNode) -> Result<bool, Problem> {
    match text(node)?.as_str() {
        "drop" => Ok(true),
        "map" | "" => Ok(false),
        other => Err((Some(line(node)), format!("invalid action type {other:?}"))),
    }
}

/// `match_metric_type` (v0.26.1 still reads `timer` as `observer`).
fn metric_type(node: &YamlNode) -> Result<StatKind, Problem> {
    match text(node)?.as_str() {
        "counter" => Ok(StatKind::Counter),
        "gauge" => Ok(StatKind::Gauge),
        "observer" | "timer" => Ok(StatKind::Observer),
        other => Err((Some(line(node)), format!("invalid metric type {other:?}"))),
    }
}

/// `observer_type` or `timer_type`; empty is a summary, as there.
fn observer(node: &YamlNode) -> Result<Observer, Problem> {
    match text(node)?.as_str() {
        "histogram" => Ok(Observer::Histogram),
        "summary" | "" => Ok(Observer::Summary),
        other => Err((Some(line(node)), format!("invalid observer type {other:?}"))),
    }
}

/// A YAML boolean, as yaml.v2 reads one.
fn flag(node: &YamlNode) -> Result<bool, Problem> {
    match text(node)?.to_ascii_lowercase().as_str() {
        "true" | "yes" | "y" | "on" => Ok(true),
        "false" | "no" | "n" | "off" | "" => Ok(false),
        other => Err((
            Some(line(node)),
            format!("expected true or false, found {other:?}"),
        )),
    }
}

/// A number (`scale`).
fn number(node: &YamlNode) -> Result<f64, Problem> {
    let text = text(node)?;
    text.trim().parse().map_err(|_| {
        (
            Some(line(node)),
            format!("expected a number, found {text:?}"),
        )
    })
}
