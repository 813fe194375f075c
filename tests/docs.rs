//! The documentation stays true: README.md and every page of docs/ are read as Markdown
//! (pulldown-cmark), and
//! - every relative link (and image) names a file of the repository, and every `#anchor`
//!   a heading of the page it points into, as GitHub spells heading anchors (the
//!   examples' READMEs are followed too);
//! - every YAML example that is a descriptor file (a top-level `domain:`) passes
//!   `meshlimit validate`, and no YAML example is half a descriptor file;
//! - every flag the docs name is one of meshlimit's (or of a tool the docs show, listed
//!   below with the tool), and every flag and variable of `meshlimit serve --help` is
//!   documented.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{CodeBlockKind, Event, LinkType, Options, Parser, Tag, TagEnd};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and docs/*.md, as (path relative to the root, text).
fn pages() -> Vec<(PathBuf, String)> {
    let mut paths = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .map(|path| Path::new("docs").join(path.file_name().expect("a file name")))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root().join(&path))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, text)
        })
        .collect()
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// What one page holds for these checks.
#[derive(Default)]
struct Page {
    /// (line, destination) of every link and image, reference links resolved.
    links: Vec<(usize, String)>,
    /// Reference links whose reference is not defined, with their line.
    broken: Vec<(usize, String)>,
    /// Heading anchors as GitHub makes them, duplicates numbered.
    anchors: BTreeSet<String>,
    /// (line of the fence, info string, text) of every fenced code block.
    code: Vec<(usize, String, String)>,
}

/// GitHub's anchor for a heading's text: lower case, every character but letters,
/// digits, spaces, hyphens and underscores dropped, spaces made hyphens.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn read(text: &str) -> Page {
    let mut page = Page::default();
    let mut broken = Vec::new();
    // `[text][ref]` and `[text][]` without a definition are broken links; a lone
    // `[text]` is plain bracketed text to GitHub too.
    let callback = |link: pulldown_cmark::BrokenLink<'_>| {
        if link.link_type != LinkType::Shortcut {
            broken.push((link.span.start, link.reference.to_string()));
        }
        None
    };
    let parser = Parser::new_with_broken_link_callback(text, Options::all(), Some(callback));
    let mut heading: Option<String> = None;
    let mut block: Option<(usize, String, String)> = None;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (event, range) in parser.into_offset_iter() {
        match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links
                    .push((line_of(text, range.start), dest_url.to_string()));
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                page.anchors.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let info = match kind {
                    CodeBlockKind::Fenced(info) => info.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                block = Some((line_of(text, range.start), info, String::new()));
            }
            Event::End(TagEnd::CodeBlock) => page.code.extend(block.take()),
            Event::Text(t) => {
                if let Some((_, _, code)) = block.as_mut() {
                    code.push_str(&t);
                } else {
                    if let Some(h) = heading.as_mut() {
                        h.push_str(&t);
                    }
                }
            }
            Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            _ => {}
        }
    }
    page.broken = broken
        .into_iter()
        .map(|(offset, reference)| (line_of(text, offset), reference))
        .collect();
    page
}

/// The examples' own READMEs, whose links the link check follows too.
fn example_pages() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root().join("examples")).expect("examples/ exists") {
        let readme = entry.expect("an entry").path().join("README.md");
        if let Ok(text) = std::fs::read_to_string(&readme) {
            let relative = readme
                .strip_prefix(root())
                .expect("below the root")
                .to_path_buf();
            out.push((relative, text));
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut pages = pages();
    pages.extend(example_pages());
    let parsed: BTreeMap<PathBuf, Page> = pages
        .iter()
        .map(|(path, text)| (path.clone(), read(text)))
        .collect();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (path, page) in &parsed {
        for (line, reference) in &page.broken {
            problems.push(format!(
                "{}:{line}: [{reference}] has no link definition",
                path.display()
            ));
        }
        for (line, dest) in &page.links {
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = dest.split_once('#').unwrap_or((dest, ""));
            let target = if file.is_empty() {
                path.clone()
            } else {
                normalise(&path.parent().unwrap_or(Path::new("")).join(file))
            };
            let at = format!("{}:{line}: link `{dest}`", path.display());
            if target.starts_with("..") || !root().join(&target).exists() {
                problems.push(format!("{at}: no file {}", target.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let anchors = match parsed.get(&target) {
                Some(page) => page.anchors.clone(),
                None if target.extension().is_some_and(|e| e == "md") => {
                    let text = std::fs::read_to_string(root().join(&target)).expect("readable");
                    read(&text).anchors
                }
                None => {
                    problems.push(format!("{at}: an anchor into a file that is not Markdown"));
                    continue;
                }
            };
            if !anchors.contains(anchor) {
                problems.push(format!(
                    "{at}: {} has no heading with anchor #{anchor}",
                    target.display()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
    assert!(
        checked > 100,
        "only {checked} relative links found: is the reader right?"
    );
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug("Quota service (RLQS)"), "quota-service-rlqs");
    assert_eq!(
        slug("Leased tokens (opt-in, --redis-lease N)"),
        "leased-tokens-opt-in---redis-lease-n"
    );
    assert_eq!(slug("Envoy 1.40's own limits"), "envoy-140s-own-limits");
    assert_eq!(slug("xDS (Envoy Gateway)"), "xds-envoy-gateway");
    let page = read("# A\n\n## A\n\n## `--flag` here\n");
    let anchors: Vec<_> = page.anchors.into_iter().collect();
    assert_eq!(anchors, ["--flag-here", "a", "a-1"]);
}

/// Whether a YAML example is a descriptor file: a top-level `domain:` key.
fn is_descriptor_file(yaml: &str) -> bool {
    yaml.lines().any(|l| l.starts_with("domain:"))
}

/// Whether a YAML example holds descriptor rules without being a whole file: the docs
/// show whole files, so that every one can be checked.
fn is_part_of_a_descriptor_file(yaml: &str) -> bool {
    yaml.lines()
        .any(|l| l.starts_with("descriptors:") || l.starts_with("- key:"))
}

#[test]
fn every_descriptor_file_example_passes_validate() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut problems = Vec::new();
    let mut validated = 0;
    for (path, text) in pages() {
        for (line, info, code) in read(&text).code {
            let language = info.split_whitespace().next().unwrap_or("");
            if !matches!(language, "yaml" | "yml") {
                continue;
            }
            let at = format!("{}:{line}", path.display());
            if !is_descriptor_file(&code) {
                if is_part_of_a_descriptor_file(&code) {
                    problems.push(format!(
                        "{at}: descriptor rules without `domain:`; show a whole file"
                    ));
                }
                continue;
            }
            validated += 1;
            let file = dir.path().join(format!("example{validated}.yaml"));
            std::fs::write(&file, &code).expect("written");
            let out = Command::new(env!("CARGO_BIN_EXE_meshlimit"))
                .arg("validate")
                .arg("--config")
                .arg(&file)
                .output()
                .expect("meshlimit runs");
            if !out.status.success() {
                problems.push(format!(
                    "{at}: meshlimit validate refuses the example:\n{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        validated >= 3,
        "only {validated} descriptor examples found: is the reader right?"
    );
}

#[test]
fn a_broken_descriptor_example_is_refused() {
    // The check above must be able to fail: validate refuses what the docs must not show.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    )
    .expect("written");
    let out = Command::new(env!("CARGO_BIN_EXE_meshlimit"))
        .args(["validate", "--config"])
        .arg(&file)
        .output()
        .expect("meshlimit runs");
    assert!(!out.status.success());
    assert!(is_descriptor_file("domain: d\ndescriptors: []\n"));
    assert!(!is_descriptor_file("  domain: trading\n"));
    assert!(is_part_of_a_descriptor_file("descriptors:\n  - key: k\n"));
}

/// Flags of other programs that the docs show in their commands, by program. A flag
/// named in the docs must be meshlimit's or one of these.
const OTHER_PROGRAMS_FLAGS: &[(&str, &[&str])] = &[
    (
        "cargo",
        &["--release", "--bench", "--all-targets", "--check", "--test"],
    ),
    ("envoy", &["--mode"]),
    (
        "helm and kubernetes-validate, in docs/kubernetes.md",
        &["--create-namespace", "--set-file", "--install", "--strict"],
    ),
    ("h2load", &["--rps"]),
    ("podman, in docs/kubernetes.md", &["--format"]),
    (
        "Envoy AI Gateway's controller (its flag, which the Go binary ignores), in docs/kubernetes.md",
        &["--quota"],
    ),
    ("examples/envoy/run.sh", &["--demo"]),
    ("valgrind", &["--tool"]),
    ("benches/connection_flood.py", &["--nofile"]),
    ("benches/redis_script.py", &["--holds", "--per-call"]),
    (
        "limitador-server, in the README's comparison",
        &["--rate-limit-headers"],
    ),
];

/// Every `--flag` token in `text`.
fn flags_in(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i + 2 < bytes.len() {
        let starts = bytes[i] == b'-'
            && bytes[i + 1] == b'-'
            && bytes[i + 2].is_ascii_lowercase()
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'-'));
        if starts {
            let end = (i + 2..bytes.len())
                .find(|&j| {
                    !(bytes[j].is_ascii_lowercase()
                        || bytes[j].is_ascii_digit()
                        || bytes[j] == b'-')
                })
                .unwrap_or(bytes.len());
            out.insert(text[i..end].trim_end_matches('-').to_string());
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// The `--flags` and `[env: VARIABLE=…]` names `meshlimit <args> --help` prints.
fn help(args: &[&str]) -> (BTreeSet<String>, BTreeSet<String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_meshlimit"))
        .args(args)
        .arg("--help")
        .output()
        .expect("meshlimit runs");
    assert!(out.status.success(), "meshlimit {args:?} --help failed");
    let text = String::from_utf8(out.stdout).expect("UTF-8 help");
    let envs = text
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split(['=', ']']).next())
        .map(str::to_string)
        .collect();
    (flags_in(&text), envs)
}

#[test]
fn every_flag_of_serve_is_documented_and_every_documented_flag_exists() {
    let (serve, serve_envs) = help(&["serve"]);
    assert!(serve.len() > 60, "serve --help listed only {serve:?}");
    let mut meshlimit = serve.clone();
    for command in [
        &["validate"][..],
        &["explain"],
        &["bucket", "inspect"],
        &["db", "init"],
    ] {
        meshlimit.extend(help(command).0);
    }
    let others: BTreeSet<&str> = OTHER_PROGRAMS_FLAGS
        .iter()
        .flat_map(|(_, flags)| flags.iter().copied())
        .collect();

    let pages = pages();
    let all: String = pages.iter().map(|(_, text)| text.as_str()).collect();
    let mut problems = Vec::new();
    for (path, text) in &pages {
        for flag in flags_in(text) {
            if !meshlimit.contains(&flag) && !others.contains(flag.as_str()) {
                problems.push(format!(
                    "{}: names {flag}, which no meshlimit command has (nor a program listed in OTHER_PROGRAMS_FLAGS)",
                    path.display()
                ));
            }
        }
    }
    let documented = flags_in(&all);
    for flag in &serve {
        if !documented.contains(flag) {
            problems.push(format!("serve's {flag} is in no page of the docs"));
        }
    }
    for env in &serve_envs {
        if !all.contains(env.as_str()) {
            problems.push(format!("serve's variable {env} is in no page of the docs"));
        }
    }
    for (program, flags) in OTHER_PROGRAMS_FLAGS {
        for flag in *flags {
            if !documented.contains(*flag) {
                problems.push(format!(
                    "OTHER_PROGRAMS_FLAGS lists {program}'s {flag}, which no page names any more"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_flag_reader_finds_flags_and_nothing_else() {
    let found = flags_in("`--grpc-addr 0.0.0.0` and --max-buckets=5, |---|---|, a--b, --x-, ---");
    let found: Vec<_> = found.into_iter().collect();
    assert_eq!(found, ["--grpc-addr", "--max-buckets", "--x"]);
}
