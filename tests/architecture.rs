//! docs/architecture.md stays true of `src/`: every `crate::…` path between top-level
//! modules is read from the sources, and
//! - there is no cycle between top-level modules;
//! - a module uses only modules of its own layer or of the layers below it, as the page's
//!   "Layers" table orders them;
//! - every top-level module is in that table and on the page's module map, and the table
//!   names no module that does not exist.

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
    let mut problems = Vec::new();
    for module in &modules {
        if !rank.contains_key(module) {
            problems.push(format!("`{module}` is in no layer of docs/architecture.md"));
        }
        let on_map = page.lines().any(|l| {
            l.starts_with(&format!("  {module}/")) || l.starts_with(&format!("  {module}.rs"))
        });
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
