//! statsd_exporter's mapping format (`--metrics-mapping`, the Go server's
//! `PROMETHEUS_MAPPER_YAML`), applied to the Go server's stat names.
//!
//! The Go server with `USE_PROMETHEUS=true` hands every gostats stat to statsd_exporter's
//! mapper (v0.26.1) and serves what it makes. A mapping file turns a stat's name into a
//! Prometheus name and labels; this module does the same, as that version does:
//! - `mappings:` in file order, each a `match`, a `name` and `labels`. `match_type: glob`
//!   (the default, or `defaults.match_type`): dot-separated components, `*` one whole
//!   component, `$n` in `name` and labels the `n`th `*` (see [`glob`], [`template`]);
//!   `match_type: regex`: a regular expression found anywhere in the name (not anchored),
//!   `$n`, `${n}` and `$name` its groups, expanded as Go's `Regexp.Expand` does.
//! - Every glob is tried before any regex: the first glob in the file that matches wins
//!   (with `defaults.glob_disable_ordering`, the first found); then the first regex.
//! - `match_metric_type` (`counter`, `gauge`, `observer`, or `timer` for `observer`) limits
//!   a mapping to stats of that kind: the Go server's counters are counters, its
//!   `response_time` timer an observer.
//! - `action: drop` drops the stats it matches; `action: map` (the default) maps them.
//! - A stat no mapping matches keeps its name, escaped ([`escape`]), without labels; so
//!   does a mapped name (`name` after expansion); a mapping whose name expands to nothing
//!   drops the stat.
//! - `help` is the family's help text, `scale` multiplies the stat's values.
//!
//! Read and checked, without effect here: `observer_type`/`timer_type` (timers are
//! histograms over meshlimit's own buckets), `histogram_options`, `summary_options`,
//! `buckets`, `quantiles`, `ttl`, `honor_labels` (the Go server's stats have no labels of
//! their own). Unknown keys are ignored with a warning, as v0.26.1's lenient YAML reading
//! ignores them (later statsd_exporter versions refuse them, and `timer_type` with them).

mod escape;
mod glob;
mod parse;
mod template;
mod watch;

use std::collections::BTreeSet;

use parking_lot::Mutex;
use regex::Regex;

pub(crate) use escape::escape_metric_name;
use glob::Globs;
pub use parse::MappingError;
use template::Template;
pub use watch::MappingWatch;

/// What kind of stat a name is, for `match_metric_type` and the globs' trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatKind {
    /// A counter: every Go stat but the response time.
    Counter,
    /// A gauge: the Go server's gauges, none of which meshlimit has.
    Gauge,
    /// An observer: the `response_time` timer.
    Observer,
}

/// How a mapping names what it matches.
#[derive(Debug)]
enum Matcher {
    /// A glob (in [`Mapping::globs`]): `name` and labels over its `*` captures.
    Glob {
        /// The metric name.
        name: Template,
        /// The labels, by name.
        labels: Vec<(String, Template)>,
    },
    /// A regular expression: `name` and labels expanded over its groups.
    Regex {
        /// The compiled `match`.
        regex: Regex,
        /// The metric name, with `$` references.
        name: String,
        /// The labels, by name, with `$` references.
        labels: Vec<(String, String)>,
    },
}

/// One entry of `mappings:`.
#[derive(Debug)]
struct Rule {
    /// How it matches and names.
    matcher: Matcher,
    /// `action: drop`.
    drop: bool,
    /// `match_metric_type`: only stats of this kind.
    kind: Option<StatKind>,
    /// `help`: the family's help text.
    help: Option<String>,
    /// `scale`: what the stat's values are multiplied by.
    scale: Option<f64>,
}

/// A loaded mapping file.
#[derive(Debug)]
pub struct Mapping {
    /// `mappings:`, in file order.
    rules: Vec<Rule>,
    /// The glob mappings' trees, pointing into `rules`.
    globs: Globs,
    /// Keys the file has that the format does not, each as `line N: key`, for a warning.
    ignored: Vec<String>,
    /// The names whose conflicts were logged, so each is logged once (at most
    /// [`MAX_WARNED`] of them).
    pub(super) warned: Mutex<BTreeSet<String>>,
}

/// Most names whose conflicts a mapping logs: what a scrape finds is bounded, and so is
/// what it remembers of it.
const MAX_WARNED: usize = 256;

/// A mapping that matched a stat, with the name and labels it made, not yet escaped.
type Found<'m> = (&'m Rule, String, Vec<(String, String)>);

/// Where a stat goes: its Prometheus name and labels, and how its family is described.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series<'m> {
    /// The metric name, escaped.
    pub(crate) name: String,
    /// The labels, sorted by name.
    pub(crate) labels: Vec<(String, String)>,
    /// The mapping's `help`, if it has one.
    pub(crate) help: Option<&'m str>,
    /// The mapping's `scale`, if it has one.
    pub(crate) scale: Option<f64>,
}

impl Mapping {
    /// Reads and checks the mapping file at `path` (to follow it, see [`MappingWatch`]).
    ///
    /// # Errors
    /// The file cannot be read, is not YAML, or breaks a rule of the format; the error
    /// names the line where it has one.
    pub fn load(path: &std::path::Path) -> Result<Mapping, MappingError> {
        parse::from_bytes(path, &parse::read(path)?)
    }

    /// Where the stat `stat` of `kind` goes; `None` when it is dropped.
    pub(crate) fn apply(&self, stat: &str, kind: StatKind) -> Option<Series<'_>> {
        let found = self
            .globbed(stat, kind)
            .or_else(|| self.matched(stat, kind));
        let Some((rule, name, mut labels)) = found else {
            return Some(Series {
                name: escape_metric_name(stat),
                labels: Vec::new(),
                help: None,
                scale: None,
            });
        };
        if rule.drop || name.is_empty() {
            return None;
        }
        labels.sort();
        Some(Series {
            name: escape_metric_name(&name),
            labels,
            help: rule.help.as_deref(),
            scale: rule.scale,
        })
    }

    /// Keys of the file that the format does not have, each as `line N: key`.
    pub(crate) fn ignored(&self) -> &[String] {
        &self.ignored
    }

    /// Logs `why` about the metric `name`, the first time only.
    pub(crate) fn warn_once(&self, name: &str, why: &str) {
        let mut warned = self.warned.lock();
        if warned.len() < MAX_WARNED && warned.insert(name.to_string()) {
            tracing::warn!("metrics mapping: {why}");
        }
    }

    /// The glob mapping `stat` matches, with its name and labels.
    fn globbed(&self, stat: &str, kind: StatKind) -> Option<Found<'_>> {
        let (index, captures) = self.globs.find(stat, kind)?;
        let rule = &self.rules[index];
        let Matcher::Glob { name, labels } = &rule.matcher else {
            return None;
        };
        let labels = labels
            .iter()
            .map(|(label, value)| (label.clone(), value.format(&captures)))
            .collect();
        Some((rule, name.format(&captures), labels))
    }

    /// The first regex mapping that `stat` matches (and whose kind it is), with its name
    /// and labels.
    fn matched(&self, stat: &str, kind: StatKind) -> Option<Found<'_>> {
        self.rules.iter().find_map(|rule| {
            let Matcher::Regex {
                regex,
                name,
                labels,
            } = &rule.matcher
            else {
                return None;
            };
            let captures = regex.captures(stat)?;
            if rule.kind.is_some_and(|k| k != kind) {
                return None;
            }
            let expand = |template: &str| {
                let mut out = String::new();
                captures.expand(template, &mut out);
                out
            };
            let labels = labels
                .iter()
                .map(|(label, value)| (label.clone(), expand(value)))
                .collect();
            Some((rule, expand(name), labels))
        })
    }
}

/// A mapping of `text`, for tests; panics when the text is not a valid mapping.
#[cfg(test)]
pub(crate) fn parse_for_tests(text: &str) -> Mapping {
    parse::parse(text).unwrap_or_else(|e| panic!("{text}: {e:?}"))
}

#[cfg(test)]
mod tests;
