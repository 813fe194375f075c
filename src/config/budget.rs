//! How much YAML one domain file may make the parser build: generous for real configs
//! (hundreds of thousands of rules), bounded against files crafted to exhaust memory, time
//! or stack (alias bombs, deep nesting). "Config limits" in docs/configuration.md states
//! these numbers; a file over one is rejected with a message that names it.

use serde_saphyr::Error;
use serde_saphyr::budget::BudgetBreach;

use crate::error::ConfigErrorKind;

/// Most YAML nodes (scalars, lists, mappings) in one file, aliases expanded. A rule is
/// 11 nodes (key, value, unit, requests per unit) to about 20 (a name, burst, algorithm,
/// flags): room for 250,000 to 450,000 rules. Parsing takes about 200 bytes a node while
/// it lasts, so this also bounds a load's memory near 1 GiB.
pub(crate) const MAX_NODES: usize = 5_000_000;

/// Most parser events in one file (nodes plus the ends of lists and mappings).
pub(crate) const MAX_EVENTS: usize = 2 * MAX_NODES;

/// Deepest nesting of lists and mappings. The file's top mapping takes one level and each
/// level of `descriptors` two (the list and the entry's mapping).
pub(crate) const MAX_DEPTH: usize = 128;

/// Deepest nesting of descriptors that [`MAX_DEPTH`] allows: more than a request may have
/// entries by default.
pub(crate) const MAX_DESCRIPTOR_LEVELS: usize = (MAX_DEPTH - 1) / 2;

/// Stack of the thread that parses one file. The parser recurses once per level of
/// nesting, some tens of kilobytes a level in a debug build; reserved, not all used.
pub(crate) const PARSE_STACK_BYTES: usize = 32 * 1024 * 1024;

/// Most events that aliases (`*name`) may replay in one file: what stops an alias bomb,
/// whose few lines expand to billions of nodes. Plain files replay nothing.
pub(crate) const MAX_ALIAS_EVENTS: usize = 1_000_000;

/// Most events that anchors (`&name`) may hold in one file, counted once for every anchor
/// an event is inside: the other half of the alias bomb's defence, against anchors built
/// from aliases of anchors.
pub(crate) const MAX_ANCHOR_EVENTS: usize = 1_000_000;

/// Most bytes of scalar text in one file.
pub(crate) const MAX_SCALAR_BYTES: usize = 256 * 1024 * 1024;

/// Parser options carrying the limits above.
pub(crate) fn options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = MAX_NODES;
    budget.max_events = MAX_EVENTS;
    budget.max_depth = MAX_DEPTH;
    budget.max_total_scalar_bytes = MAX_SCALAR_BYTES;
    budget.max_recorded_anchor_events = MAX_ANCHOR_EVENTS;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = MAX_ALIAS_EVENTS;
    options
}

/// The problem in meshlimit's words, and its kind, when `e` is a breach of one of these
/// limits.
pub(crate) fn describe(e: &Error) -> Option<(ConfigErrorKind, String)> {
    let (kind, limit) = match original(e) {
        Error::Budget { breach, .. } => match breach {
            BudgetBreach::Nodes { .. } => (
                ConfigErrorKind::TooManyNodes,
                format!("more than {MAX_NODES} YAML nodes (aliases expanded)"),
            ),
            BudgetBreach::Events { .. } => (
                ConfigErrorKind::TooManyEvents,
                format!("more than {MAX_EVENTS} YAML parser events"),
            ),
            BudgetBreach::Depth { .. } => (
                ConfigErrorKind::NestedTooDeep,
                format!(
                    "lists and mappings nested more than {MAX_DEPTH} deep (descriptors more than \
                     {MAX_DESCRIPTOR_LEVELS} levels)"
                ),
            ),
            BudgetBreach::RecordedAnchorEvents { .. } => (
                ConfigErrorKind::AnchorsTooLarge,
                format!("anchors that hold more than {MAX_ANCHOR_EVENTS} YAML events"),
            ),
            BudgetBreach::ScalarBytes { .. } => (
                ConfigErrorKind::TooMuchText,
                format!("more than {MAX_SCALAR_BYTES} bytes of scalar text"),
            ),
            other => (
                ConfigErrorKind::OverParserLimit,
                format!("more than a YAML parser limit allows ({other:?})"),
            ),
        },
        Error::AliasReplayLimitExceeded { .. } => (
            ConfigErrorKind::AliasesTooLarge,
            format!("aliases that expand to more than {MAX_ALIAS_EVENTS} YAML events"),
        ),
        Error::AliasReplayStackDepthExceeded { max_depth, .. } => (
            ConfigErrorKind::AliasesTooDeep,
            format!("aliases nested more than {max_depth} deep"),
        ),
        _ => return None,
    };
    Some((
        kind,
        format!(
            "the file has {limit}; meshlimit's limit for one domain file (see \"Config limits\" in docs/configuration.md)"
        ),
    ))
}

/// The parser's own error under the alias and snippet wrappers it adds.
fn original(mut e: &Error) -> &Error {
    loop {
        match e {
            Error::AliasError { error, .. } | Error::WithSnippet { error, .. } => e = error,
            other => return other,
        }
    }
}
