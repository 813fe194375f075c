//! The limits on one domain file (docs/configuration.md, "Config limits"): large configs load, alias bombs
//! and deep nesting are refused with the limit named, at the file and line.

use std::fmt::Write;

use meshlimit::bucket_key::KeyWriter;
use meshlimit::config;
use meshlimit::error::{ConfigError, ConfigErrorKind as Kind};
use tempfile::TempDir;

/// Writes `text` as `name` in a fresh directory and loads that file.
fn load(name: &str, text: &str) -> (TempDir, Result<config::Config, Vec<ConfigError>>) {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, text).unwrap();
    let loaded = config::load(&file);
    (dir, loaded)
}

/// The one problem of a refused file, which must be `name` and be one of `kinds`.
fn the_problem(dir: &TempDir, name: &str, errors: &[ConfigError], kinds: &[Kind]) -> ConfigError {
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let error = errors[0].clone();
    assert_eq!(error.file, dir.path().join(name), "{error:?}");
    assert!(
        kinds.contains(&error.kind),
        "{error:?}, expected one of {kinds:?}"
    );
    error
}

#[test]
fn two_hundred_thousand_rules_load_in_one_domain() {
    const RULES: usize = 200_000;
    let mut text = String::with_capacity(RULES * 100);
    text.push_str("domain: big\ndescriptors:\n");
    for i in 0..RULES {
        let _ = write!(
            text,
            "  - key: tenant\n    value: t{i}\n    rate_limit: {{unit: minute, requests_per_unit: {}}}\n",
            i % 1000 + 1
        );
    }
    let (_dir, loaded) = load("big.yaml", &text);
    let config = loaded.unwrap_or_else(|e| panic!("200,000 rules load: {e:#?}"));
    let tree = config.domain("big").expect("the domain");
    let mut key = String::new();
    let rule = tree
        .find(
            [("tenant", "t199999")],
            &mut KeyWriter::new(&mut key, "big"),
            &mut String::new(),
        )
        .expect("the last rule matches");
    assert_eq!(rule.limits.first().map(|l| l.requests_per_unit), Some(1000));
}

#[test]
fn an_alias_bomb_is_refused_naming_the_limit() {
    // Nine levels of ten aliases each: a few hundred bytes standing for 10^9 scalars.
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..10 {
        let prev = format!("*a{}", level - 1);
        let items = [prev.as_str(); 10].join(", ");
        let _ = writeln!(text, "a{level}: &a{level} [{items}]");
    }
    text.push_str("domain: bomb\ndescriptors:\n  - key: k\n    value: *a9\n");
    let (dir, loaded) = load("bomb.yaml", &text);
    let errors = loaded.expect_err("the bomb is refused");
    // Which of the two defences trips first is the parser's business.
    the_problem(
        &dir,
        "bomb.yaml",
        &errors,
        &[Kind::AnchorsTooLarge, Kind::AliasesTooLarge],
    );
}

/// `levels` descriptors nested in one another, a limit at the innermost.
fn nested(levels: usize) -> String {
    let mut text = String::from("domain: deep\ndescriptors:\n");
    for level in 0..levels {
        let indent = "    ".repeat(level);
        let _ = writeln!(text, "{indent}  - key: k{level}");
        if level + 1 < levels {
            let _ = writeln!(text, "{indent}    descriptors:");
        } else {
            let _ = writeln!(
                text,
                "{indent}    rate_limit: {{unit: second, requests_per_unit: 1}}"
            );
        }
    }
    text
}

#[test]
fn descriptors_nest_up_to_63_levels_and_no_deeper() {
    let (_dir, loaded) = load("deep.yaml", &nested(63));
    let config = loaded.unwrap_or_else(|e| panic!("63 levels load: {e:#?}"));
    let entries: Vec<(String, String)> = (0..63).map(|i| (format!("k{i}"), "v".into())).collect();
    let mut key = String::new();
    let found = config.domain("deep").unwrap().find(
        entries.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        &mut KeyWriter::new(&mut key, "deep"),
        &mut String::new(),
    );
    assert!(found.is_some(), "the innermost rule matches");

    let (dir, loaded) = load("deeper.yaml", &nested(64));
    let errors = loaded.expect_err("64 levels are refused");
    let error = the_problem(&dir, "deeper.yaml", &errors, &[Kind::NestedTooDeep]);
    assert!(error.line.is_some(), "{error:?}");
    // docs/configuration.md's "Config limits" quotes this message: the numbers are the contract.
    assert!(
        error.message.starts_with(
            "the file has lists and mappings nested more than 128 deep (descriptors more than 63 levels); meshlimit's limit for one domain file"
        ),
        "{error}"
    );
}
