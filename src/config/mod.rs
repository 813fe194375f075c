//! Loading descriptor files: the only file I/O of the config.
//!
//! A config path is one YAML file or a directory whose `*.yaml`/`*.yml` entries (symlinks
//! followed, dotfiles and dot-directories such as a ConfigMap's `..data` skipped) are
//! domain files. Loading is all-or-nothing: any problem in any file rejects the whole
//! set, and every problem is reported, each with its file, line and descriptor path.

mod budget;
mod fields;
mod holds;
mod metadata;
mod rate_limit;
mod validate;
pub(crate) mod yaml;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use arc_swap::ArcSwap;

use crate::error::{ConfigError, ConfigErrorKind};
use crate::matcher::DomainTree;
use crate::rules::Rule;
use validate::ParsedDomain;

/// The running config, swapped whole by reloads and read without locks by requests.
pub type SharedConfig = std::sync::Arc<ArcSwap<Config>>;

/// A loaded, valid set of domains.
#[derive(Debug, Default)]
pub struct Config {
    /// Domain name → its compiled descriptor tree, looked up by every request.
    domains: HashMap<String, DomainTree, foldhash::fast::RandomState>,
    /// Hash of every file's name and bytes: a reload that finds the same files changes nothing.
    fingerprint: u64,
}

impl Config {
    /// The tree of `domain`, if configured.
    pub fn domain(&self, domain: &str) -> Option<&DomainTree> {
        self.domains.get(domain)
    }

    /// Configured domain names, sorted.
    pub fn domains(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.domains.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Every rule with a limit or `unlimited`, sorted by its full key.
    pub fn rules(&self) -> Vec<&Rule> {
        let mut out = Vec::new();
        for name in self.domains() {
            let mut nodes = Vec::new();
            self.domains[name].root.walk(name, &mut nodes);
            out.extend(nodes.into_iter().filter_map(|(_, node)| node.rule.as_ref()));
        }
        out.sort_by(|a, b| a.full_key.cmp(&b.full_key));
        out
    }

    /// Identifies the files' contents; equal fingerprints mean nothing changed.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Parses descriptor files given as `(name, text)` pairs, as [`load`] does after reading.
    pub fn from_sources(sources: &[(PathBuf, String)]) -> Result<Config, Vec<ConfigError>> {
        Self::from_sources_checked(sources, SharedDomains::Refused, |_, _| None)
    }

    /// [`Config::from_sources`], a domain of several files taken as `shared` says, with
    /// `check` asked about each file that parses, given its name and its domain: a problem
    /// it returns is one of the config's (a PostgreSQL row whose `domain` column differs
    /// from its YAML's, say).
    pub fn from_sources_checked(
        sources: &[(PathBuf, String)],
        shared: SharedDomains,
        check: impl Fn(&Path, &str) -> Option<ConfigError>,
    ) -> Result<Config, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut domains: HashMap<String, Defined<'_>> = HashMap::new();
        let mut hasher = std::hash::DefaultHasher::new();
        for (file, text) in sources {
            (file, text).hash(&mut hasher);
            let parsed = match parse_on_own_stack(file, text) {
                Ok(parsed) => parsed,
                Err(mut found) => {
                    errors.append(&mut found);
                    continue;
                }
            };
            if let Some(problem) = check(file, &parsed.domain) {
                errors.push(problem);
                continue;
            }
            match domains.get_mut(&parsed.domain) {
                None => {
                    let origins = parsed.lines.iter().map(|&line| (&**file, line)).collect();
                    let defined = Defined {
                        file,
                        tree: parsed.tree,
                        origins,
                    };
                    domains.insert(parsed.domain, defined);
                }
                Some(first) if shared == SharedDomains::Refused => {
                    errors.push(ConfigError::new(
                        ConfigErrorKind::DuplicateDomain,
                        file,
                        None,
                        None,
                        format!(
                            "duplicate domain '{}' in config file (already defined in {})",
                            parsed.domain,
                            first.file.display()
                        ),
                    ));
                }
                Some(first) => first.merge(file, parsed, &mut errors),
            }
        }
        let mut domains: HashMap<String, DomainTree, foldhash::fast::RandomState> = domains
            .into_iter()
            .map(|(name, defined)| (name, defined.tree))
            .collect();
        // Numbers unique across the domains: the statistics index rules by them.
        let mut next = 0;
        for tree in domains.values_mut() {
            next = tree.number_rules(next);
        }
        if errors.is_empty() {
            Ok(Config {
                domains,
                fingerprint: hasher.finish(),
            })
        } else {
            Err(errors)
        }
    }
}

/// What a domain named by more than one file becomes: an error, or one domain with the
/// descriptors of every file (the Go server's `MERGE_DOMAIN_CONFIG`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SharedDomains {
    /// The second file naming a domain is an error.
    #[default]
    Refused,
    /// Each file's top-level descriptors join the domain's; one already there (the same
    /// key and value) is an error naming both places.
    Merged,
}

/// A domain as the files read so far define it.
struct Defined<'a> {
    /// The first file naming it.
    file: &'a Path,
    /// Its descriptors.
    tree: DomainTree,
    /// The file and line of each top-level descriptor, in the tree's order.
    origins: Vec<(&'a Path, u32)>,
}

impl<'a> Defined<'a> {
    /// Adds `parsed`'s top-level descriptors, read from `file`, after the domain's own; each
    /// whose composite key the domain already has is a problem in `errors` instead.
    fn merge(&mut self, file: &'a Path, parsed: ParsedDomain, errors: &mut Vec<ConfigError>) {
        let mut taken = self
            .tree
            .root
            .append(parsed.tree.root)
            .into_iter()
            .peekable();
        for (index, line) in parsed.lines.into_iter().enumerate() {
            let Some(duplicate) = taken.next_if(|d| d.index == index) else {
                self.origins.push((file, line));
                continue;
            };
            let (composite, (first_file, first_line)) =
                (duplicate.composite, self.origins[duplicate.existing]);
            errors.push(ConfigError::new(
                ConfigErrorKind::DuplicateDescriptor,
                file,
                Some(line),
                Some(format!("{}.{composite}", parsed.domain)),
                format!(
                    "duplicate descriptor composite key '{}.{composite}' (already defined in {}:{first_line})",
                    parsed.domain,
                    first_file.display()
                ),
            ));
        }
    }
}

/// Parses one domain file on a thread of its own with a stack of
/// [`budget::PARSE_STACK_BYTES`]: the parser recurses once per level of nesting, and the
/// stack of whatever thread asks for a load (a runtime worker, a blocking-pool thread:
/// 2 MiB) is not enough for [`budget::MAX_DEPTH`] levels in every build.
fn parse_on_own_stack(file: &Path, text: &str) -> Result<ParsedDomain, Vec<ConfigError>> {
    std::thread::scope(|scope| {
        let parser = std::thread::Builder::new()
            .name("config-parse".into())
            .stack_size(budget::PARSE_STACK_BYTES)
            .spawn_scoped(scope, || validate::parse_domain_file(file, text));
        match parser {
            Ok(parser) => parser
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(e) => Err(vec![ConfigError::new(
                ConfigErrorKind::NoParserThread,
                file,
                None,
                None,
                format!("cannot start a thread to parse the file: {e}"),
            )]),
        }
    })
}

/// Reads and validates every domain file under `path`.
///
/// # Errors
/// Every problem found: unreadable path or file, YAML errors, rule errors.
pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
    load_with(path, SharedDomains::Refused)
}

/// [`load`], a domain of several files taken as `shared` says.
///
/// # Errors
/// As [`load`].
pub fn load_with(path: &Path, shared: SharedDomains) -> Result<Config, Vec<ConfigError>> {
    let files = list_files(path).map_err(|e| vec![unreadable(path, e)])?;
    let mut sources = Vec::with_capacity(files.len());
    let mut errors = Vec::new();
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => sources.push((file, text)),
            // `read_to_string` says InvalidData for bytes that are not UTF-8, and only then.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => errors.push(ConfigError::new(
                ConfigErrorKind::NotUtf8,
                &file,
                None,
                None,
                e,
            )),
            Err(e) => errors.push(unreadable(&file, e)),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Config::from_sources_checked(&sources, shared, |_, _| None)
}

/// `file` (or the config path) cannot be read.
fn unreadable(file: &Path, e: std::io::Error) -> ConfigError {
    ConfigError::new(ConfigErrorKind::Unreadable, file, None, None, e)
}

/// The domain files a config path stands for, sorted by name.
///
/// # Errors
/// The path cannot be read.
pub fn list_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !std::fs::metadata(path)?.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        if !yaml || name.starts_with('.') {
            continue;
        }
        // `metadata` follows symlinks: ConfigMap files are links into `..data/`. A link
        // that leads nowhere is kept, so that reading it reports the problem by its name.
        let path = entry.path();
        if std::fs::metadata(&path).map_or(true, |m| m.is_file()) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Joins several errors, one per line, for logs and command output.
pub fn render_errors(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
