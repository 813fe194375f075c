//! docs/architecture.md stays true of `src/`: every `crate::…` path between top-level
//! modules is read from the sources, and
//! - there is no cycle between top-level modules;
//! - a module uses only modules of its own layer or of the layers below it, as the page's
//!   "Layers" table orders them;
//! - every top-level module is in that table and on the page's module map, and the table
//!   names no module that does not exist;
//! - every file of `src/` (the Rust files, the Lua scripts, the page's assets: everything
//!   below `src/` is compiled into the crate) has exactly one line on the module map, and
//!   every line of the map names a file (or folder) that exists;
//! - no sibling files use each other in a circle: for child modules of one parent
//!   (`a/b.rs`, `a/c.rs`, `a/d/mod.rs`), b → c when code in b (or below it) names a path
//!   (`super::c::…`, `crate::a::c::…`, `self::c` from `a/mod.rs`, `use super::{c, …}`)
//!   that resolves into c or below it; the uses of tests (`#[cfg(test)]` items and test
//!   modules) do not count, and neither does a child's use of its parent's own items;
//! - every test the page's "Deliberate twins" tables name exists;
//! - no function outside tests is longer than [`LONGEST_FUNCTION`] lines.
//!
//! The reader resolves paths by module name only: a path through a re-export of the
//! parent (`super::Thing` where the parent has `pub use c::Thing`) counts as a use of
//! the parent, not of c.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules of the crate: `src/<name>.rs` and `src/<name>/`, without the
/// crate roots.
fn top_level_modules() -> BTreeSet<String> {
    std::fs::read_dir(src())
        .expect("src/ exists")
        .map(|entry| entry.expect("an entry of src/").path())
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_string();
            if path.is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs").map(str::to_string)
            }
        })
        .filter(|name| name != "lib" && name != "main")
        .collect()
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `code` without its comments (`//` to the end of the line, nested `/* … */`), string,
/// raw string and character literals kept as they are.
fn without_comments(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && matches!(next, Some('#' | '"')) && !ident_before(&chars, i) {
            // A raw string: r"…", r#"…"#, …; ends at a quote and as many hashes.
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let start = i;
            i += 2 + hashes;
            while i < chars.len() {
                if chars[i] == '"'
                    && chars[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&c| c == '#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.extend(&chars[start..i.min(chars.len())]);
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.extend(&chars[start..i.min(chars.len())]);
        } else if c == '\'' && (next == Some('"') || next == Some('\\')) {
            // '"' or an escaped character such as '\'': never the start of a string.
            let end = chars[i + 1..]
                .iter()
                .skip(1)
                .position(|&c| c == '\'')
                .map_or(chars.len(), |p| i + 3 + p);
            out.extend(&chars[i..end.min(chars.len())]);
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether an identifier character stands just before `at` (so an `r` there is part of a
/// name, not a raw string's prefix).
fn ident_before(chars: &[char], at: usize) -> bool {
    at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_')
}

/// The top-level modules `code` names through `crate::`: `crate::a::…`, and each item of
/// `crate::{a::…, b}`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::` in a macro, or `my_crate::`
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                    _ if depth == 0 => item.push(c),
                    _ => {}
                }
            }
            items.push(item);
            out.extend(
                items
                    .iter()
                    .filter_map(|item| first_ident(item.trim_start())),
            );
        } else {
            out.extend(first_ident(rest));
        }
    }
    out
}

fn first_ident(text: &str) -> Option<String> {
    let ident: String = text
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!ident.is_empty()).then_some(ident)
}

/// module → (module it uses → the files that do).
type Uses = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn uses() -> Uses {
    let modules = top_level_modules();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut uses = Uses::new();
    for file in files {
        let relative = file.strip_prefix(src()).expect("below src/");
        let first = relative
            .components()
            .next()
            .expect("a path")
            .as_os_str()
            .to_string_lossy();
        let module = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        if !modules.contains(&module) {
            continue; // lib.rs, main.rs
        }
        let code = without_comments(&std::fs::read_to_string(&file).expect("readable"));
        for used in crate_paths(&code) {
            if used != module && modules.contains(&used) {
                uses.entry(module.clone())
                    .or_default()
                    .entry(used)
                    .or_default()
                    .insert(relative.display().to_string());
            }
        }
    }
    uses
}

/// A cycle through `start`, if any, as the modules on it.
fn cycle_from(uses: &Uses, start: &str) -> Option<Vec<String>> {
    fn walk(
        uses: &Uses,
        at: &str,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in uses.get(at).into_iter().flat_map(|m| m.keys()) {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(uses, next, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    walk(uses, start, start, &mut path, &mut BTreeSet::new()).then_some(path)
}

fn architecture_page() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
        .expect("docs/architecture.md exists")
}

/// The "Layers" table: each layer's modules, the top layer first.
fn layers(page: &str) -> Vec<(String, Vec<String>)> {
    let section = page
        .split("\n## Layers\n")
        .nth(1)
        .expect("a Layers section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    section
        .lines()
        .filter(|line| {
            line.starts_with('|') && !line.starts_with("|---") && !line.starts_with("| layer")
        })
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let modules = cells[2]
                .split(',')
                .map(|m| m.trim().trim_matches('`').to_string())
                .filter(|m| !m.is_empty())
                .collect();
            (cells[1].to_string(), modules)
        })
        .collect()
}

#[test]
fn no_module_cycle_in_src() {
    let uses = uses();
    assert!(
        uses.len() > 20,
        "only {} modules use others: is the reader right?",
        uses.len()
    );
    for module in uses.keys() {
        if let Some(cycle) = cycle_from(&uses, module) {
            let steps: Vec<String> = cycle
                .iter()
                .zip(cycle.iter().cycle().skip(1))
                .map(|(a, b)| {
                    format!(
                        "{a} → {b} ({})",
                        uses[a][b].iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                })
                .collect();
            panic!("a module cycle:\n  {}", steps.join("\n  "));
        }
    }
}

#[test]
fn modules_use_only_their_own_layer_and_those_below() {
    let page = architecture_page();
    let layers = layers(&page);
    assert!(layers.len() >= 5, "the Layers table: {layers:?}");
    let mut rank = BTreeMap::new();
    for (i, (layer, modules)) in layers.iter().enumerate() {
        for module in modules {
            assert!(
                rank.insert(module.clone(), (i, layer.clone())).is_none(),
                "docs/architecture.md puts `{module}` in two layers"
            );
        }
    }
    let modules = top_level_modules();
    let map = module_map(&page);
    let mut problems = Vec::new();
    for module in &modules {
        if !rank.contains_key(module) {
            problems.push(format!("`{module}` is in no layer of docs/architecture.md"));
        }
        let on_map = map
            .iter()
            .any(|l| l.path == format!("{module}.rs") || l.path.starts_with(&format!("{module}/")));
        if !on_map {
            problems.push(format!(
                "`{module}` is not on the module map of docs/architecture.md"
            ));
        }
    }
    for module in rank.keys() {
        if !modules.contains(module) {
            problems.push(format!(
                "docs/architecture.md names `{module}`, which src/ does not have"
            ));
        }
    }
    for (module, used) in uses() {
        let Some((mine, my_layer)) = rank.get(&module) else {
            continue;
        };
        for (other, files) in used {
            let Some((theirs, their_layer)) = rank.get(&other) else {
                continue;
            };
            if theirs < mine {
                problems.push(format!(
                    "`{module}` ({my_layer}) uses `{other}` ({their_layer}), a layer above it, in {}",
                    files.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_reader_sees_uses_and_not_comments() {
    let code = "use crate::{config::Config, store::{A, B}};\n// crate::page\n/* crate::http /* nested */ crate::net */\nlet x = crate::rules::Unit::Second; let s = \"// crate::grpc\";\n$crate::json; let q = '\"'; // crate::app\nlet r = r#\"a \" // crate::cli\"#; // crate::explain\nlet e = '\\''; // crate::page";
    let found: Vec<_> = crate_paths(&without_comments(code)).into_iter().collect();
    assert_eq!(found, ["cli", "config", "grpc", "rules", "store"]);
    let mut uses = Uses::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a")] {
        uses.entry(a.into())
            .or_default()
            .entry(b.into())
            .or_default()
            .insert("f.rs".into());
    }
    assert_eq!(
        cycle_from(&uses, "a"),
        Some(vec!["a".into(), "b".into(), "c".into()])
    );
}

// ---------------------------------------------------------------------------------------
// The module map: every file of `src/` on one line of the page, and nothing else.
// ---------------------------------------------------------------------------------------

/// Every file below `src/` (hidden ones, an editor's, left out), as paths relative to
/// `src/` with `/` between folders: the Rust files and the files compiled into the binary
/// with them (the Lua scripts, the operator page's assets). Everything under `src/` is
/// code, so every file of it is on the map.
fn src_files() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).expect("a readable directory") {
            let path = entry.expect("an entry").path();
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.insert(relative_to_src(&path));
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(&src(), &mut out);
    out
}

/// `path` relative to `src/`, with `/` between its parts.
fn relative_to_src(path: &Path) -> String {
    path.strip_prefix(src())
        .expect("below src/")
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// One line of the module map: a path relative to `src/` (a folder when it ends in `/`)
/// and what is there.
#[derive(Debug, PartialEq)]
struct MapLine {
    /// 1-based line of the page.
    line: usize,
    path: String,
    description: String,
}

/// The module map: the first fenced block of the page's "Module map" section, one
/// `path  description` per line (a path relative to `src/`, whitespace, one line saying
/// what the file is); blank lines between groups.
fn module_map(page: &str) -> Vec<MapLine> {
    let start = page
        .find("\n## Module map\n")
        .expect("docs/architecture.md has a `## Module map` section")
        + 1;
    let first_line = page[..start].matches('\n').count() + 1;
    let mut in_block = false;
    let mut out = Vec::new();
    for (n, line) in page[start..].lines().enumerate().skip(1) {
        if line.starts_with("```") {
            if in_block {
                return out;
            }
            in_block = true;
        } else if !in_block {
            assert!(
                !line.starts_with("## "),
                "the Module map section has no fenced block of `path  description` lines"
            );
        } else if !line.trim().is_empty() {
            let text = line.trim();
            let (path, description) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
            out.push(MapLine {
                line: first_line + n,
                path: path.to_string(),
                description: description.trim().to_string(),
            });
        }
    }
    panic!("the Module map's fenced block is not closed");
}

/// What is wrong between the map and the files of `src/` (`folders` answers whether a
/// folder exists), each as one line saying how to fix it.
fn map_problems(
    map: &[MapLine],
    files: &BTreeSet<String>,
    folders: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in map {
        let at = format!("docs/architecture.md:{}", entry.line);
        if entry.description.is_empty() {
            problems.push(format!(
                "{at}: `{}` has no description: write what it is after the path",
                entry.path
            ));
        }
        if let Some(folder) = entry.path.strip_suffix('/') {
            if !folders(folder) {
                problems.push(format!(
                    "{at}: the map names the folder src/{}/, which does not exist: rename or remove that line",
                    folder
                ));
            }
            continue;
        }
        if let Some(first) = seen.insert(&entry.path, entry.line) {
            problems.push(format!(
                "{at}: `{}` is on the map twice (also line {first}): keep one line",
                entry.path
            ));
        }
        if !files.contains(&entry.path) {
            problems.push(format!(
                "{at}: the map names src/{}, which does not exist: rename the line to the file's new path, or remove it",
                entry.path
            ));
        }
    }
    for file in files {
        if !seen.contains_key(file.as_str()) {
            problems.push(format!(
                "src/{file} is not on the module map: add a line `{file}  <what it is>` to the fenced block of docs/architecture.md's \"Module map\", with its folder's files"
            ));
        }
    }
    problems
}

#[test]
fn every_file_of_src_is_on_the_module_map_once() {
    let page = architecture_page();
    let map = module_map(&page);
    let files = src_files();
    assert!(
        files.len() > 100,
        "only {} files in src/: is the reader right?",
        files.len()
    );
    let problems = map_problems(&map, &files, |folder| src().join(folder).is_dir());
    assert!(
        problems.is_empty(),
        "docs/architecture.md's module map and src/ disagree ({} problems):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_map_reader_finds_missing_extra_and_twice_named_files() {
    let page = "# A\n\n## Module map\n\nText.\n\n```text\nlib.rs      the crate\n\na/          a folder\na/mod.rs    its root\na/old.rs    gone\na/mod.rs    again\nb.rs\n```\n\n## Next\n";
    let map = module_map(page);
    assert_eq!(
        map[0],
        MapLine {
            line: 8,
            path: "lib.rs".into(),
            description: "the crate".into()
        }
    );
    assert_eq!(map.len(), 6);
    let files: BTreeSet<String> = ["lib.rs", "a/mod.rs", "a/new.rs", "b.rs"]
        .map(String::from)
        .into();
    let problems = map_problems(&map, &files, |folder| folder == "a");
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(
        problems[0].starts_with(
            "docs/architecture.md:12: the map names src/a/old.rs, which does not exist"
        )
    );
    assert!(
        problems[1]
            .starts_with("docs/architecture.md:13: `a/mod.rs` is on the map twice (also line 11)")
    );
    assert!(problems[2].starts_with("docs/architecture.md:14: `b.rs` has no description"));
    assert!(problems[3].starts_with("src/a/new.rs is not on the module map"));
    let problems = map_problems(&map[..1], &["lib.rs".to_string()].into(), |_| false);
    assert!(problems.is_empty(), "{problems:?}");
}

// ---------------------------------------------------------------------------------------
// Sibling files: no two child modules of one parent use each other, directly or around a
// longer circle.
// ---------------------------------------------------------------------------------------

/// `code` (already without comments) with every string and character literal emptied, so
/// that neither a brace nor a `super::` inside one is read as code.
fn without_literals(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == 'r' && matches!(chars.get(i + 1), Some('#' | '"')) && !ident_before(&chars, i) {
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            if chars.get(i + 1 + hashes) == Some(&'"') {
                i += 2 + hashes;
                while i < chars.len() {
                    let closes = chars[i] == '"'
                        && chars[i + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&c| c == '#')
                            .count()
                            == hashes;
                    i += 1;
                    if closes {
                        i += hashes;
                        break;
                    }
                }
                out.push_str("\"\"");
                continue;
            }
        }
        if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && chars.get(i + 1) == Some(&'\\') {
            // '\n', '\'', '\u{7f}'
            i += 3;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` (without comments and literals) without the items under `#[cfg(test)]`: test
/// modules, inline or in files of their own, and test-only helpers.
fn without_test_items(code: &str) -> String {
    const ATTRIBUTE: &str = "#[cfg(test)]";
    let bytes = code.as_bytes();
    let mut out = String::with_capacity(code.len());
    let mut from = 0;
    while let Some(found) = code[from..].find(ATTRIBUTE) {
        let start = from + found;
        out.push_str(&code[from..start]);
        let mut i = start + ATTRIBUTE.len();
        let mut depth = 0usize;
        while i < bytes.len() {
            match bytes[i] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth = depth.saturating_sub(1),
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    let mut braces = 0usize;
                    while i < bytes.len() {
                        match bytes[i] {
                            b'{' => braces += 1,
                            b'}' => {
                                braces -= 1;
                                if braces == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        from = (i + 1).min(code.len());
        // Keep the line count, for readers of the output.
        out.extend(code[start..from].chars().filter(|&c| c == '\n'));
    }
    out.push_str(&code[from..]);
    out
}

/// The code of a Rust file as the circle check reads it.
fn code_of(text: &str) -> String {
    without_test_items(&without_literals(&without_comments(text)))
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other(char),
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token::PathSep);
            i += 2;
            continue;
        }
        match c {
            '{' => out.push(Token::Open),
            '}' => out.push(Token::Close),
            ',' => out.push(Token::Comma),
            ';' => out.push(Token::Semi),
            '*' => out.push(Token::Star),
            c if c.is_whitespace() => {}
            c => out.push(Token::Other(c)),
        }
        i += 1;
    }
    out
}

/// The paths `code` names, each as its segments, `use` groups expanded
/// (`super::{a, b::C}` is `super::a` and `super::b::C`; `self` in a group is the group's
/// prefix; a glob is its prefix). A path starts at a name followed by `::` that is not
/// itself after `::` or `$` (`$crate::` is a macro's).
fn paths(code: &str) -> Vec<Vec<String>> {
    let tokens = tokens(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let starts = matches!(tokens[i], Token::Ident(_))
            && tokens.get(i + 1) == Some(&Token::PathSep)
            && !(i > 0 && matches!(tokens[i - 1], Token::PathSep | Token::Other('$')));
        if starts {
            i = path_at(&tokens, i, &[], &mut out);
        } else {
            i += 1;
        }
    }
    out
}

/// Reads one path (or group item) at `at` below `prefix` into `out`; returns the index
/// after it.
fn path_at(
    tokens: &[Token],
    mut at: usize,
    prefix: &[String],
    out: &mut Vec<Vec<String>>,
) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(at) {
            Some(Token::Ident(name)) => {
                if name != "self" || path.is_empty() {
                    path.push(name.clone());
                }
                at += 1;
            }
            Some(Token::Star) => {
                at += 1;
                break;
            }
            Some(Token::Open) => {
                at += 1;
                loop {
                    match tokens.get(at) {
                        None => return at,
                        Some(Token::Close) => return at + 1,
                        Some(Token::Comma) => at += 1,
                        Some(_) => {
                            let next = path_at(tokens, at, &path, out);
                            at = if next == at { at + 1 } else { next };
                        }
                    }
                }
            }
            _ => break,
        }
        if tokens.get(at) == Some(&Token::PathSep) {
            at += 1;
        } else {
            break;
        }
    }
    if tokens.get(at) == Some(&Token::Ident("as".into())) {
        at += 2;
    }
    if path.len() > prefix.len() || !prefix.is_empty() {
        out.push(path);
    }
    at
}

/// A module's path from the crate root (`[]` is `lib.rs`).
type ModulePath = Vec<String>;

/// The library's modules that are files (`lib.rs`, `a.rs`, `a/mod.rs`, `a/b.rs`), test
/// modules left out, each with its file relative to `src/` and its code.
#[derive(Default)]
struct Tree {
    files: BTreeMap<ModulePath, (String, String)>,
}

impl Tree {
    /// The module of a file at `relative` (to `src/`), or `None` for the binary's root.
    fn module_of(relative: &str) -> Option<ModulePath> {
        let mut parts: Vec<String> = relative.split('/').map(str::to_string).collect();
        let last = parts.pop()?;
        match last.as_str() {
            "main.rs" if parts.is_empty() => None,
            "lib.rs" if parts.is_empty() => Some(parts),
            "mod.rs" => Some(parts),
            _ => {
                parts.push(last.strip_suffix(".rs")?.to_string());
                Some(parts)
            }
        }
    }

    /// The tree of `files` ((path relative to `src/`, text) of every Rust file): the
    /// modules that the crate root declares, and those they declare, outside tests.
    fn new(files: &[(String, String)]) -> Tree {
        let by_module: BTreeMap<ModulePath, (String, String)> = files
            .iter()
            .filter_map(|(path, text)| {
                Some((Tree::module_of(path)?, (path.clone(), code_of(text))))
            })
            .collect();
        let mut tree = Tree::default();
        let mut todo = vec![ModulePath::new()];
        while let Some(module) = todo.pop() {
            let Some((path, code)) = by_module.get(&module) else {
                continue;
            };
            let tokens = tokens(code);
            for w in tokens.windows(3) {
                if let [Token::Ident(m), Token::Ident(name), Token::Semi] = w
                    && m == "mod"
                {
                    let mut child = module.clone();
                    child.push(name.clone());
                    todo.push(child);
                }
            }
            tree.files.insert(module, (path.clone(), code.clone()));
        }
        tree
    }

    /// The module a path named in `from` resolves into (the longest of its prefixes that
    /// is a module of the tree), if it is in the crate: `crate::…`, `super::…`, `self::…`,
    /// or a child module of `from` by name.
    fn resolve(&self, from: &[String], path: &[String]) -> Option<ModulePath> {
        let (mut at, rest): (ModulePath, &[String]) = match path.first()?.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (from.to_vec(), &path[1..]),
            "super" => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                (from[..from.len().checked_sub(ups)?].to_vec(), &path[ups..])
            }
            first => {
                let mut child = from.to_vec();
                child.push(first.to_string());
                if !self.files.contains_key(&child) {
                    return None;
                }
                (from.to_vec(), path)
            }
        };
        for segment in rest {
            at.push(segment.clone());
            if !self.files.contains_key(&at) {
                at.pop();
                break;
            }
        }
        Some(at)
    }

    /// Every use between siblings: parent → (user → (used → the files and paths that
    /// make it)). A file in module `f` naming a path into module `t` makes the children
    /// of their deepest common module on the ways to `f` and to `t` use each other; a
    /// module using its ancestor or its descendant uses no sibling.
    fn sibling_uses(&self) -> BTreeMap<ModulePath, Uses> {
        let mut out: BTreeMap<ModulePath, Uses> = BTreeMap::new();
        for (from, (file, code)) in &self.files {
            for path in paths(code) {
                let Some(to) = self.resolve(from, &path) else {
                    continue;
                };
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    continue;
                }
                out.entry(from[..common].to_vec())
                    .or_default()
                    .entry(from[common].clone())
                    .or_default()
                    .entry(to[common].clone())
                    .or_default()
                    .insert(format!("{file} names {}", path.join("::")));
            }
        }
        out
    }

    /// The file of `parent`'s child `name`, relative to `src/`.
    fn file_of(&self, parent: &[String], name: &str) -> String {
        let mut module = parent.to_vec();
        module.push(name.to_string());
        self.files
            .get(&module)
            .map_or_else(|| module.join("/"), |(file, _)| file.clone())
    }
}

/// The circles of `uses`: its strongly connected parts of more than one node (Tarjan's),
/// each sorted, in order.
fn circles(uses: &Uses) -> Vec<Vec<String>> {
    struct Walk<'a> {
        uses: &'a Uses,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.uses.get(node).into_iter().flat_map(|m| m.keys()) {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut part = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    part.push(top.to_string());
                    if top == node {
                        break;
                    }
                }
                if part.len() > 1 {
                    part.sort();
                    self.out.push(part);
                }
            }
        }
    }
    let mut walk = Walk {
        uses,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for node in uses.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.out.sort();
    walk.out
}

/// Every circle between sibling modules of `tree`, each as a paragraph naming its files
/// and the uses that close it.
fn sibling_circles(tree: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for (parent, uses) in tree.sibling_uses() {
        for circle in circles(&uses) {
            let files: Vec<String> = circle.iter().map(|m| tree.file_of(&parent, m)).collect();
            let mut text = format!("{}:", files.join(" ↔ "));
            for a in &circle {
                for (b, why) in uses.get(a).into_iter().flatten() {
                    if circle.contains(b) {
                        text.push_str(&format!(
                            "\n    {a} → {b}: {}",
                            why.iter().cloned().collect::<Vec<_>>().join("; ")
                        ));
                    }
                }
            }
            out.push(text);
        }
    }
    out
}

#[test]
fn no_import_circle_between_sibling_files() {
    let mut paths = Vec::new();
    rust_files(&src(), &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            (
                relative_to_src(p),
                std::fs::read_to_string(p).expect("readable"),
            )
        })
        .collect();
    let tree = Tree::new(&files);
    assert!(
        tree.files.len() > 100,
        "only {} modules found: is the reader right?",
        tree.files.len()
    );
    let circles = sibling_circles(&tree);
    assert!(
        circles.is_empty(),
        "sibling files (child modules of one parent) use each other in a circle: move what \
         they share into their parent or a file of its own, or make one side stop naming the \
         other.\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_path_reader_expands_groups_and_skips_literals_comments_and_tests() {
    let code = code_of(
        "use super::{a, b::{C, self}, *};\nuse crate::x::Y as Z;\nfn f() { self::c::g(); \
         d::h(); $crate::k::m; std::mem::take(v); let s = \"super::q\"; let t = '{'; }\n\
         // super::comment\n#[cfg(test)]\nmod tests { use super::hidden; }\n#[cfg(test)]\nmod t2;\n",
    );
    let found: Vec<String> = paths(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        found,
        [
            "super::a",
            "super::b::C",
            "super::b",
            "super",
            "crate::x::Y",
            "self::c::g",
            "d::h",
            "std::mem::take"
        ]
    );
}

#[test]
fn the_circle_finder_sees_siblings_only() {
    let file = |path: &str, text: &str| (path.to_string(), text.to_string());
    let files = [
        file("lib.rs", "mod m; mod solo;"),
        // m/: a → b → c → a is a circle; d uses a, and its parent; mod.rs uses its children.
        file(
            "m/mod.rs",
            "mod a; mod b; mod c; mod d;\n#[cfg(test)]\nmod tests;\nuse self::a::X; pub struct P;",
        ),
        file("m/a.rs", "use super::{b, P};"),
        file("m/b.rs", "fn f() { crate::m::c::g(); }"),
        file("m/c.rs", "use super::super::m::a::X; mod deep;"),
        file("m/c/deep.rs", "use crate::m::P; use super::super::d;"),
        file("m/d.rs", "use super::a::X; use super::P;"),
        // A test module's uses do not count.
        file("m/tests.rs", "use super::{a, b, c, d};"),
        file("solo.rs", "use crate::m::a::X;"),
    ];
    let tree = Tree::new(&files);
    assert_eq!(tree.files.len(), 8, "{:?}", tree.files.keys());
    let uses = tree.sibling_uses();
    let m = &uses[&vec!["m".to_string()]];
    let edges: Vec<String> = m
        .iter()
        .flat_map(|(a, used)| used.keys().map(move |b| format!("{a}→{b}")))
        .collect();
    assert_eq!(edges, ["a→b", "b→c", "c→a", "c→d", "d→a"]);
    assert_eq!(circles(m), [["a", "b", "c", "d"]]);
    let root = &uses[&Vec::new()];
    assert_eq!(root.keys().collect::<Vec<_>>(), ["solo"]);
    assert!(circles(root).is_empty());
    let found = sibling_circles(&tree);
    assert_eq!(found.len(), 1);
    assert!(
        found[0]
            .starts_with("m/a.rs ↔ m/b.rs ↔ m/c.rs ↔ m/d.rs:\n    a → b: m/a.rs names super::b"),
        "{}",
        found[0]
    );
    assert!(found[0].contains("c → d: m/c/deep.rs names super::super::d"));

    // Two circles under two parents, and a chain that is none.
    let mut two = Uses::new();
    for (a, b) in [
        ("x", "y"),
        ("y", "x"),
        ("p", "q"),
        ("q", "r"),
        ("r", "p"),
        ("s", "x"),
    ] {
        two.entry(a.into())
            .or_default()
            .entry(b.into())
            .or_default();
    }
    assert_eq!(circles(&two), [vec!["p", "q", "r"], vec!["x", "y"]]);
}

// ---------------------------------------------------------------------------------------
// The twins: every test the page names as keeping a pair equal exists.
// ---------------------------------------------------------------------------------------

/// The tests the page's "Deliberate twins" section names, as (file relative to the
/// repository, test function): every `` `path.rs::name` `` in it.
fn twin_tests(page: &str) -> Vec<(String, String)> {
    let section = page
        .split("\n## Deliberate twins\n")
        .nth(1)
        .expect("docs/architecture.md has a `## Deliberate twins` section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| code.split_once(".rs::"))
        .map(|(file, name)| (format!("{file}.rs"), name.to_string()))
        .collect()
}

#[test]
fn every_test_the_twins_table_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let named = twin_tests(&architecture_page());
    assert!(
        named.len() >= 10,
        "only {} tests named in the Deliberate twins section: is the reader right?",
        named.len()
    );
    let mut problems = Vec::new();
    for (file, name) in &named {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            problems.push(format!("`{file}::{name}`: there is no file {file}"));
            continue;
        };
        let code = without_comments(&text);
        if !code.contains(&format!("fn {name}(")) {
            problems.push(format!(
                "`{file}::{name}`: {file} has no test `{name}`; name the test that keeps the pair equal now"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md's Deliberate twins name tests that do not exist:\n{}",
        problems.join("\n")
    );
    assert_eq!(
        twin_tests(
            "\n## Deliberate twins\n| a | b | `tests/x.rs::a_test`, `limiter/mod.rs` |\n## Next `tests/y.rs::no`"
        ),
        [("tests/x.rs".to_string(), "a_test".to_string())]
    );
}

/// The most lines a function outside tests may take, from `fn` to its closing brace: a
/// longer one is split into steps a reader can name.
const LONGEST_FUNCTION: usize = 120;

/// Each function with a body in `code` (as [`code_of`] leaves it, so that a brace in a
/// comment or a literal does not count): its name, its first line and its length in
/// lines. A nested function is counted on its own, and inside its parent.
fn function_lengths(code: &str) -> Vec<(String, usize, usize)> {
    let bytes = code.as_bytes();
    let line_of = |at: usize| 1 + code[..at].matches('\n').count();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("fn ") {
        let start = from + found;
        from = start + 3;
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let name: String = code[from..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first brace outside the signature's parentheses; a `;`
        // first means a declaration without one (in a trait).
        let mut depth = 0usize;
        let mut open = None;
        for (i, &b) in bytes.iter().enumerate().skip(from) {
            match b {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth = depth.saturating_sub(1),
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut braces = 0usize;
        for (i, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => braces += 1,
                b'}' => {
                    braces -= 1;
                    if braces == 0 {
                        out.push((
                            name.clone(),
                            line_of(start),
                            line_of(i) - line_of(start) + 1,
                        ));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[test]
fn no_function_outside_tests_is_longer_than_the_limit() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut long = Vec::new();
    for file in files {
        let name = relative_to_src(&file);
        // Test modules in files of their own.
        if name.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for (function, line, lines) in function_lengths(&code_of(&text)) {
            if lines > LONGEST_FUNCTION {
                long.push(format!("src/{name}:{line}: fn {function} is {lines} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions longer than {LONGEST_FUNCTION} lines; split each into steps with names:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_length_reader_counts_from_fn_to_its_closing_brace() {
    let code = "trait T { fn declared(&self); }\n\
                pub(crate) async fn outer(x: [u8; 2]) -> impl Fn() {\n\
                    fn inner() {}\n\
                    let f = |a: u8| { a };\n\
                }\n\
                fn define() {}";
    let lengths = function_lengths(&code_of(code));
    assert_eq!(
        lengths,
        [
            ("outer".to_string(), 2, 4),
            ("inner".to_string(), 3, 1),
            ("define".to_string(), 6, 1),
        ]
    );
    // A brace in a literal or a comment is no brace of the body.
    let literal = "fn a() {\n let s = \"}\"; // }\n}\nfn b() {}";
    assert_eq!(
        function_lengths(&code_of(literal)),
        [("a".to_string(), 1, 3), ("b".to_string(), 4, 1)]
    );
}
