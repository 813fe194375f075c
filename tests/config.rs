//! Loading descriptor files: one fixture per error class (each reported with its file,
//! line and descriptor path), the directory rules (extensions, dotfiles, symlinks, a
//! Kubernetes ConfigMap), what valid files may contain, and `meshlimit validate`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use meshlimit::bucket_key::KeyWriter;
use meshlimit::config::{self, Config, SharedDomains};
use meshlimit::error::{ConfigError, ConfigErrorKind as Kind};
use meshlimit::matcher::DomainTree;
use meshlimit::rules::{Algorithm, Mode, Rule, Unit};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

/// One expected problem: the file it names (file name only), line, descriptor path and
/// kind.
#[derive(Debug)]
struct Expected {
    file: &'static str,
    line: Option<u32>,
    descriptor: Option<&'static str>,
    kind: Kind,
}

const fn problem(
    file: &'static str,
    line: Option<u32>,
    descriptor: Option<&'static str>,
    kind: Kind,
) -> Expected {
    Expected {
        file,
        line,
        descriptor,
        kind,
    }
}

/// Every fixture under `invalid/` and exactly the problems loading it reports, in order
/// (§1.9 of the behaviour reference). The wording of messages is checked apart, in
/// `errors_display_file_line_and_descriptor`.
const INVALID: &[(&str, &[Expected])] = &[
    (
        "yaml_syntax.yaml",
        &[problem("yaml_syntax.yaml", Some(4), None, Kind::YamlSyntax)],
    ),
    (
        "unknown_key.yaml",
        &[problem("unknown_key.yaml", Some(2), None, Kind::UnknownKey)],
    ),
    (
        "unknown_key_in_rate_limit.yaml",
        &[problem(
            "unknown_key_in_rate_limit.yaml",
            Some(7),
            Some("test-domain.key1"),
            Kind::UnknownKey,
        )],
    ),
    (
        "unknown_key_nested.yaml",
        &[problem(
            "unknown_key_nested.yaml",
            Some(7),
            Some("test-domain.key1_value1.subkey1"),
            Kind::UnknownKey,
        )],
    ),
    (
        "descriptor_not_a_map.yaml",
        &[problem(
            "descriptor_not_a_map.yaml",
            Some(7),
            Some("test-domain"),
            Kind::DescriptorNotAMapping,
        )],
    ),
    (
        "negative_requests_per_unit.yaml",
        &[problem(
            "negative_requests_per_unit.yaml",
            Some(6),
            Some("test-domain.key1"),
            Kind::NotANumber,
        )],
    ),
    (
        "empty_domain.yaml",
        &[problem(
            "empty_domain.yaml",
            Some(1),
            None,
            Kind::EmptyDomain,
        )],
    ),
    (
        "missing_domain.yaml",
        &[problem(
            "missing_domain.yaml",
            Some(1),
            None,
            Kind::EmptyDomain,
        )],
    ),
    (
        "empty_key.yaml",
        &[problem(
            "empty_key.yaml",
            Some(7),
            Some("test-domain._value1"),
            Kind::EmptyKey,
        )],
    ),
    (
        "duplicate_key.yaml",
        &[problem(
            "duplicate_key.yaml",
            Some(13),
            Some("test-domain.key1_value1"),
            Kind::DuplicateDescriptor,
        )],
    ),
    (
        "duplicate_key_nested.yaml",
        &[problem(
            "duplicate_key_nested.yaml",
            Some(10),
            Some("test-domain.key1_value1.subkey1"),
            Kind::DuplicateDescriptor,
        )],
    ),
    (
        // The Go server's quirk: `key: a_b` and `key: a, value: b` are both `a_b`.
        "duplicate_composite_quirk.yaml",
        &[problem(
            "duplicate_composite_quirk.yaml",
            Some(7),
            Some("test-domain.a_b"),
            Kind::DuplicateDescriptor,
        )],
    ),
    (
        "bad_unit.yaml",
        &[problem(
            "bad_unit.yaml",
            Some(5),
            Some("test-domain.key1"),
            Kind::BadUnit,
        )],
    ),
    (
        "missing_unit.yaml",
        &[problem(
            "missing_unit.yaml",
            Some(8),
            Some("test-domain.key1.subkey1_subvalue1"),
            Kind::BadUnit,
        )],
    ),
    (
        "unlimited_with_unit.yaml",
        &[problem(
            "unlimited_with_unit.yaml",
            Some(6),
            Some("test-domain.key1"),
            Kind::LimitWhenUnlimited,
        )],
    ),
    (
        "empty_replaces_name.yaml",
        &[problem(
            "empty_replaces_name.yaml",
            Some(9),
            Some("test-domain.key1"),
            Kind::EmptyReplaces,
        )],
    ),
    (
        "replaces_own_name.yaml",
        &[problem(
            "replaces_own_name.yaml",
            Some(9),
            Some("test-domain.key1"),
            Kind::ReplacesSelf,
        )],
    ),
    (
        "share_threshold_without_wildcard.yaml",
        &[problem(
            "share_threshold_without_wildcard.yaml",
            Some(3),
            Some("test-domain.files_files/a.pdf"),
            Kind::ShareThresholdWithoutWildcard,
        )],
    ),
    (
        "burst_zero.yaml",
        &[problem(
            "burst_zero.yaml",
            Some(7),
            Some("test-domain.key1"),
            Kind::ZeroBurst,
        )],
    ),
    (
        "invalid_algorithm.yaml",
        &[problem(
            "invalid_algorithm.yaml",
            Some(7),
            Some("test-domain.key1"),
            Kind::BadAlgorithm,
        )],
    ),
    (
        "invalid_charge.yaml",
        &[problem(
            "invalid_charge.yaml",
            Some(7),
            Some("test-domain.key1"),
            Kind::BadCharge,
        )],
    ),
    (
        "charge_when_unlimited.yaml",
        &[problem(
            "charge_when_unlimited.yaml",
            Some(6),
            Some("test-domain.key1"),
            Kind::LimitWhenUnlimited,
        )],
    ),
    (
        "charge_without_limits.yaml",
        &[problem(
            "charge_without_limits.yaml",
            Some(4),
            Some("test-domain.key1"),
            Kind::BadCharge,
        )],
    ),
    (
        "burst_with_fixed_window.yaml",
        &[problem(
            "burst_with_fixed_window.yaml",
            Some(7),
            Some("test-domain.key1"),
            Kind::BurstWithoutBucket,
        )],
    ),
    (
        "burst_with_sliding_window.yaml",
        &[problem(
            "burst_with_sliding_window.yaml",
            Some(8),
            Some("test-domain.key1"),
            Kind::BurstWithoutBucket,
        )],
    ),
    (
        "both_limit_forms.yaml",
        &[problem(
            "both_limit_forms.yaml",
            Some(8),
            Some("test-domain.key1"),
            Kind::BothLimitForms,
        )],
    ),
    (
        "empty_limit_list.yaml",
        &[problem(
            "empty_limit_list.yaml",
            Some(4),
            Some("test-domain.key1"),
            Kind::EmptyLimitList,
        )],
    ),
    (
        "unlimited_in_list.yaml",
        &[problem(
            "unlimited_in_list.yaml",
            Some(6),
            Some("test-domain.key1"),
            Kind::UnlimitedInList,
        )],
    ),
    (
        "duplicate_limit.yaml",
        &[
            problem(
                "duplicate_limit.yaml",
                Some(6),
                Some("test-domain.key1"),
                Kind::DuplicateLimit,
            ),
            problem(
                "duplicate_limit.yaml",
                Some(8),
                Some("test-domain.key1"),
                Kind::DuplicateLimit,
            ),
        ],
    ),
    (
        "bad_multipliers.yaml",
        &[
            problem(
                "bad_multipliers.yaml",
                Some(6),
                Some("test-domain.zero"),
                Kind::BadMultiplier,
            ),
            problem(
                "bad_multipliers.yaml",
                Some(11),
                Some("test-domain.fraction"),
                Kind::NotANumber,
            ),
            problem(
                "bad_multipliers.yaml",
                Some(16),
                Some("test-domain.too_long"),
                Kind::BadMultiplier,
            ),
        ],
    ),
    (
        // The unit is then missing too: the rule is read as an empty mapping.
        "rate_limit_not_a_map.yaml",
        &[
            problem(
                "rate_limit_not_a_map.yaml",
                Some(4),
                Some("test-domain.key1"),
                Kind::NotAMapping,
            ),
            problem(
                "rate_limit_not_a_map.yaml",
                Some(4),
                Some("test-domain.key1"),
                Kind::BadUnit,
            ),
        ],
    ),
    (
        "non_string_key.yaml",
        &[problem(
            "non_string_key.yaml",
            Some(7),
            Some("test-domain.key1"),
            Kind::KeyNotAString,
        )],
    ),
    (
        // A key that is not a scalar is also no key at all.
        "key_not_a_string.yaml",
        &[
            problem(
                "key_not_a_string.yaml",
                Some(3),
                Some("test-domain"),
                Kind::NotAString,
            ),
            problem(
                "key_not_a_string.yaml",
                Some(3),
                Some("test-domain."),
                Kind::EmptyKey,
            ),
        ],
    ),
    (
        "descriptors_not_a_list.yaml",
        &[problem(
            "descriptors_not_a_list.yaml",
            Some(4),
            Some("test-domain.key1"),
            Kind::NotAList,
        )],
    ),
    (
        "flag_not_a_boolean.yaml",
        &[problem(
            "flag_not_a_boolean.yaml",
            Some(4),
            Some("test-domain.key1"),
            Kind::NotAFlag,
        )],
    ),
    (
        // A directory whose two files claim one domain: the second file is at fault.
        "duplicate_domain",
        &[problem("b.yaml", None, None, Kind::DuplicateDomain)],
    ),
    (
        // Every rule problem of a file, not just the first.
        "several_problems.yaml",
        &[
            problem(
                "several_problems.yaml",
                Some(5),
                Some("test-domain.key1"),
                Kind::BadUnit,
            ),
            problem(
                "several_problems.yaml",
                Some(9),
                Some("test-domain.key2."),
                Kind::EmptyKey,
            ),
            problem(
                "several_problems.yaml",
                Some(13),
                Some("test-domain.key2.sub_x"),
                Kind::ShareThresholdWithoutWildcard,
            ),
            problem(
                "several_problems.yaml",
                Some(19),
                Some("test-domain.key3"),
                Kind::LimitWhenUnlimited,
            ),
            problem(
                "several_problems.yaml",
                Some(20),
                Some("test-domain.key1"),
                Kind::DuplicateDescriptor,
            ),
        ],
    ),
];

fn load_err(path: &Path) -> Vec<ConfigError> {
    match config::load(path) {
        Ok(config) => panic!(
            "{} loaded, domains {:?}; expected errors",
            path.display(),
            config.domains()
        ),
        Err(errors) => errors,
    }
}

fn load_ok(path: &Path) -> Config {
    config::load(path).unwrap_or_else(|errors| {
        panic!(
            "{} failed to load:\n{}",
            path.display(),
            config::render_errors(&errors)
        )
    })
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

fn matches(error: &ConfigError, expected: &Expected) -> bool {
    file_name(&error.file) == expected.file
        && error.line == expected.line
        && error.descriptor.as_deref() == expected.descriptor
        && error.kind == expected.kind
}

#[test]
fn each_invalid_fixture_reports_exactly_its_problems() {
    let dir = fixtures().join("invalid");
    let mut failures = Vec::new();
    for (fixture, expected) in INVALID {
        let errors = load_err(&dir.join(fixture));
        let ok = errors.len() == expected.len()
            && errors
                .iter()
                .zip(expected.iter())
                .all(|(e, x)| matches(e, x));
        if !ok {
            failures.push(format!(
                "{fixture}:\n  expected {expected:#?}\n  got {errors:#?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_invalid_fixture_is_in_the_table() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(fixtures().join("invalid"))
        .expect("fixtures/config/invalid")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let in_table: BTreeSet<String> = INVALID.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(on_disk, in_table);
}

/// The wording is a contract of its own: the Go server's, which users grep their logs for.
#[test]
fn errors_display_file_line_and_descriptor() {
    let path = fixtures().join("invalid/bad_unit.yaml");
    let errors = load_err(&path);
    assert_eq!(
        errors[0].to_string(),
        format!(
            "{}:5: descriptor 'test-domain.key1': invalid rate limit unit 'foo'",
            path.display()
        )
    );
    let path = fixtures().join("invalid/empty_domain.yaml");
    assert_eq!(
        load_err(&path)[0].to_string(),
        format!("{}:1: config file cannot have empty domain", path.display())
    );
}

#[test]
fn a_directory_reports_the_problems_of_every_file() {
    // invalid/ as one config path: each top-level *.yaml fails on its own problems (the
    // duplicate_domain subdirectory is not a domain file).
    let errors = load_err(&fixtures().join("invalid"));
    let files: BTreeSet<&str> = errors.iter().map(|e| file_name(&e.file)).collect();
    let expected: BTreeSet<&str> = INVALID
        .iter()
        .map(|(f, _)| *f)
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    assert_eq!(files, expected);
    let several = errors
        .iter()
        .filter(|e| file_name(&e.file) == "several_problems.yaml")
        .count();
    assert_eq!(several, 5);
}

#[test]
fn one_bad_file_rejects_the_whole_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("good.yaml"),
        "domain: good\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .expect("write");
    std::fs::copy(
        fixtures().join("invalid/bad_unit.yaml"),
        dir.path().join("bad.yaml"),
    )
    .expect("copy");
    let errors = load_err(dir.path());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].file, dir.path().join("bad.yaml"));
    assert_eq!(errors[0].kind, Kind::BadUnit);
}

#[test]
fn a_missing_path_is_an_error_naming_it() {
    let path = fixtures().join("does-not-exist");
    let errors = load_err(&path);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].kind, Kind::Unreadable);
    assert_eq!(errors[0].file, path);
    assert_eq!(errors[0].line, None);
}

#[test]
fn a_file_that_is_not_utf8_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("latin1.yaml");
    std::fs::write(&path, b"domain: caf\xe9\n").expect("write");
    let errors = load_err(dir.path());
    let found: Vec<(Kind, &Path)> = errors.iter().map(|e| (e.kind, e.file.as_path())).collect();
    assert_eq!(found, [(Kind::NotUtf8, path.as_path())], "{errors:#?}");
}

/// Unknown keys and wrong types are found by validation, not by the YAML parser, so they
/// name their descriptor and are reported together.
#[test]
fn unknown_key_names_its_descriptor() {
    let errors = load_err(&fixtures().join("invalid/unknown_key_in_rate_limit.yaml"));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].kind, Kind::UnknownKey);
    assert_eq!(errors[0].descriptor.as_deref(), Some("test-domain.key1"));
}

#[test]
fn every_unknown_key_in_a_file_is_reported() {
    let text = "domain: test-domain
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 5
      foo: 1
  - key: key2
    bar: 2
";
    let errors = Config::from_sources(&[(PathBuf::from("two.yaml"), text.to_string())])
        .expect_err("two unknown keys");
    let found: Vec<(Kind, Option<u32>, Option<&str>)> = errors
        .iter()
        .map(|e| (e.kind, e.line, e.descriptor.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            (Kind::UnknownKey, Some(7), Some("test-domain.key1")),
            (Kind::UnknownKey, Some(9), Some("test-domain.key2")),
        ],
        "{errors:#?}"
    );
}

// ---------------------------------------------------------------------------------------
// Directories

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn domain_file(domain: &str, requests_per_unit: u32) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: {requests_per_unit}\n"
    )
}

/// The limit `(k, x)` gets in `domain`.
fn limit_of(config: &Config, domain: &str) -> u32 {
    let tree = config
        .domain(domain)
        .unwrap_or_else(|| panic!("domain {domain} missing"));
    let rule = tree
        .find(
            [("k", "x")],
            &mut KeyWriter::new(&mut String::new(), domain),
            &mut String::new(),
        )
        .expect("(k, x) has a rule");
    rule.limits
        .first()
        .cloned()
        .expect("limited")
        .requests_per_unit
}

#[test]
fn a_directory_loads_yaml_and_yml_and_skips_the_rest() {
    let dir = fixtures().join("valid/dir");
    let config = load_ok(&dir);
    assert_eq!(config.domains(), ["alpha", "beta"]);
    assert_eq!(limit_of(&config, "alpha"), 1);
    assert_eq!(limit_of(&config, "beta"), 2);
    // The skipped files would each have failed the load: a duplicate domain `alpha`
    // (.hidden.yaml, alpha.yaml.bak, nested/gamma.yaml) or not YAML (notes.txt).
    let files = config::list_files(&dir).expect("list");
    assert_eq!(files, [dir.join("alpha.yaml"), dir.join("beta.yml")]);
}

#[test]
fn a_single_file_path_is_loaded_whatever_its_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("limits.conf");
    write(&path, &domain_file("one", 3));
    let config = load_ok(&path);
    assert_eq!(config.domains(), ["one"]);
    assert_eq!(limit_of(&config, "one"), 3);
}

#[test]
fn an_empty_directory_loads_no_domains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = load_ok(dir.path());
    assert!(config.domains().is_empty());
}

#[cfg(unix)]
#[test]
fn symlinks_are_followed() {
    use std::os::unix::fs::symlink;
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        &elsewhere.path().join("real.yaml"),
        &domain_file("linked", 4),
    );
    write(
        &elsewhere.path().join("other.yml"),
        &domain_file("other", 5),
    );
    symlink(
        elsewhere.path().join("real.yaml"),
        dir.path().join("linked.yaml"),
    )
    .expect("symlink");
    // The link's name decides whether it is a domain file, not its target's.
    symlink(
        elsewhere.path().join("other.yml"),
        dir.path().join("other.yml"),
    )
    .expect("symlink");
    symlink(
        elsewhere.path().join("real.yaml"),
        dir.path().join("not-a-domain.txt"),
    )
    .expect("symlink");
    // A link to a directory is not a file.
    symlink(elsewhere.path(), dir.path().join("subdir.yaml")).expect("symlink");
    let config = load_ok(dir.path());
    assert_eq!(config.domains(), ["linked", "other"]);
    assert_eq!(limit_of(&config, "linked"), 4);

    // The config path itself may be a link to a directory.
    let link = elsewhere.path().join("current");
    symlink(dir.path(), &link).expect("symlink");
    assert_eq!(load_ok(&link).domains(), ["linked", "other"]);
}

/// What the kubelet makes of a ConfigMap volume: the files in a timestamped dot-directory,
/// `..data` pointing at it, and one top-level link per key through `..data`.
#[cfg(unix)]
fn configmap(root: &Path, version: &str, files: &[(&str, String)]) {
    use std::os::unix::fs::symlink;
    let data = root.join(version);
    std::fs::create_dir(&data).expect("mkdir");
    for (name, text) in files {
        write(&data.join(name), text);
    }
    // Swap `..data` as the kubelet does: a new link renamed over the old one.
    let tmp = root.join("..data_tmp");
    symlink(version, &tmp).expect("symlink");
    std::fs::rename(&tmp, root.join("..data")).expect("rename");
    for (name, _) in files {
        let top = root.join(name);
        if std::fs::symlink_metadata(&top).is_err() {
            symlink(Path::new("..data").join(name), &top).expect("symlink");
        }
    }
}

#[cfg(unix)]
#[test]
fn a_kubernetes_configmap_volume_loads_each_key_once() {
    let root = tempfile::tempdir().expect("tempdir");
    configmap(
        root.path(),
        "..2026_01_01",
        &[
            ("alpha.yaml", domain_file("alpha", 1)),
            ("beta.yml", domain_file("beta", 2)),
        ],
    );
    let config = load_ok(root.path());
    // Loaded through the top-level links only: reading `..data` or `..2026_01_01` as well
    // would define every domain twice.
    assert_eq!(config.domains(), ["alpha", "beta"]);
    assert_eq!(
        config::list_files(root.path()).expect("list"),
        [root.path().join("alpha.yaml"), root.path().join("beta.yml")]
    );
    assert_eq!(limit_of(&config, "alpha"), 1);

    // An update: a new version directory and `..data` swapped; the top links stay.
    configmap(
        root.path(),
        "..2026_01_02",
        &[
            ("alpha.yaml", domain_file("alpha", 10)),
            ("beta.yml", domain_file("beta", 20)),
        ],
    );
    let updated = load_ok(root.path());
    assert_eq!(limit_of(&updated, "alpha"), 10);
    assert_eq!(limit_of(&updated, "beta"), 20);
    assert_ne!(config.fingerprint(), updated.fingerprint());
}

#[test]
fn fingerprint_follows_contents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.yaml");
    write(&path, &domain_file("a", 1));
    let first = load_ok(dir.path()).fingerprint();
    assert_eq!(load_ok(dir.path()).fingerprint(), first);
    write(&path, &domain_file("a", 2));
    assert_ne!(load_ok(dir.path()).fingerprint(), first);
}

// ---------------------------------------------------------------------------------------
// What a valid file may contain

fn full() -> Config {
    load_ok(&fixtures().join("valid/full.yaml"))
}

fn rule<'c>(config: &'c Config, entries: &[(&str, &str)]) -> &'c Rule {
    config
        .domain("full")
        .expect("domain full")
        .find(
            entries.iter().copied(),
            &mut KeyWriter::new(&mut String::new(), ""),
            &mut String::new(),
        )
        .unwrap_or_else(|| panic!("{entries:?} has no rule"))
}

#[test]
fn every_rule_of_a_valid_file_is_loaded() {
    let config = full();
    let keys: Vec<&str> = config.rules().iter().map(|r| r.full_key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "full.code_007",
            "full.code_200",
            "full.flag_true",
            "full.ratio_1.50",
            "full.user.path_files/*",
            "full.user.plan",
            "full.user.plan_free",
            "full.user.plan_gold",
            "full.user.plan_silver",
        ]
    );
}

#[test]
fn numbers_and_booleans_load_as_the_strings_written() {
    let config = full();
    let expect = [
        (("code", "200"), 10, Unit::Second),
        (("code", "007"), 7, Unit::Second),
        (("flag", "true"), 1, Unit::Minute),
        (("ratio", "1.50"), 3, Unit::Hour),
    ];
    for ((key, value), requests_per_unit, unit) in expect {
        let limit = rule(&config, &[(key, value)])
            .limits
            .first()
            .cloned()
            .expect("limited");
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (requests_per_unit, unit),
            "({key}, {value})"
        );
    }
    // Not reformatted: `007` is not `7`, `1.50` is not `1.5`.
    let tree = config.domain("full").expect("domain");
    assert!(lookup(tree, [("code", "7")]).0.is_none());
    assert!(lookup(tree, [("ratio", "1.5")]).0.is_none());
}

#[test]
fn metadata_maps_are_accepted_and_flags_loaded() {
    let config = full();
    let gold = rule(&config, &[("user", "u"), ("plan", "gold")]);
    assert_eq!(gold.name, "gold");
    assert_eq!(gold.mode, Mode::Shadow);
    assert!(gold.detailed_metric);
    assert_eq!(gold.replaces, ["silver"]);
    let limit = gold.limits.first().cloned().expect("limited");
    assert_eq!(
        (
            limit.requests_per_unit,
            limit.unit,
            limit.burst,
            limit.algorithm
        ),
        (1000, Unit::Day, 50, None)
    );

    let silver = rule(&config, &[("user", "u"), ("plan", "silver")]);
    assert_eq!(silver.mode, Mode::Quota);
    let limit = silver.limits.first().cloned().expect("limited");
    // burst defaults to requests_per_unit.
    assert_eq!(
        (limit.unit, limit.burst, limit.algorithm),
        (Unit::Week, 100, Some(Algorithm::FixedWindow))
    );

    let path = rule(&config, &[("user", "u"), ("path", "files/x")]);
    let limit = path.limits.first().cloned().expect("limited");
    assert_eq!(
        (limit.unit, limit.algorithm),
        (Unit::Month, Some(Algorithm::TokenBucket))
    );
    assert_eq!(path.mode, Mode::Enforce);

    let other = rule(&config, &[("user", "u"), ("plan", "bronze")]);
    assert_eq!(
        other.limits.first().cloned().expect("limited").unit,
        Unit::Year
    );

    let free = rule(&config, &[("user", "u"), ("plan", "free")]);
    assert!(free.limits.is_empty(), "unlimited");

    // A whitelist entry matches but has no rule.
    let tree = config.domain("full").expect("domain");
    assert!(lookup(tree, [("internal", "x")]).0.is_none());
}

#[test]
fn share_threshold_puts_every_match_in_one_bucket() {
    let config = full();
    let tree = config.domain("full").expect("domain");
    let bucket = |value: &str| {
        let (rule, key) = lookup(tree, [("user", "u"), ("path", value)]);
        rule.expect("rule");
        key
    };
    assert_eq!(bucket("files/a.pdf"), bucket("files/b.csv"));
    // Other levels still count per value.
    let (rule, other_user) = lookup(tree, [("user", "v"), ("path", "files/a.pdf")]);
    rule.expect("rule");
    assert_ne!(bucket("files/a.pdf"), other_user);
}

#[test]
fn the_repository_config_is_valid() {
    let config = load_ok(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config"));
    assert!(!config.domains().is_empty());
}

// ---------------------------------------------------------------------------------------
// meshlimit validate

fn validate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_meshlimit"))
        .arg("validate")
        .args(args)
        .env_remove("MESHLIMIT_CONFIG")
        .output()
        .expect("run meshlimit")
}

#[test]
fn validate_accepts_the_repository_config() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let out = validate(&["--config", dir.to_str().expect("utf-8 path")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "status {:?}\nstdout {stdout}\nstderr {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let domains = load_ok(&dir).domains().len();
    assert!(
        stdout.contains(&format!("OK ({domains} domains")),
        "{stdout}"
    );
}

#[test]
fn validate_rejects_an_invalid_file_naming_file_line_and_descriptor() {
    let path = fixtures().join("invalid/bad_unit.yaml");
    let out = validate(&["--config", path.to_str().expect("utf-8 path")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "stderr {stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:5: descriptor 'test-domain.key1': invalid rate limit unit 'foo'",
            path.display()
        )),
        "{stderr}"
    );
}

#[test]
fn validate_lists_every_problem() {
    let path = fixtures().join("invalid/several_problems.yaml");
    let out = validate(&["--config", path.to_str().expect("utf-8 path")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for (line, descriptor) in [
        (5, "test-domain.key1"),
        (9, "test-domain.key2."),
        (13, "test-domain.key2.sub_x"),
        (19, "test-domain.key3"),
        (20, "test-domain.key1"),
    ] {
        let place = format!("{}:{line}: descriptor '{descriptor}': ", path.display());
        assert!(stderr.contains(&place), "missing {place} in\n{stderr}");
    }
    assert!(stderr.contains("5 problem(s)"), "{stderr}");
}

#[test]
fn validate_rejects_a_directory_with_a_duplicate_domain() {
    let dir = fixtures().join("invalid/duplicate_domain");
    let out = validate(&["--config", dir.to_str().expect("utf-8 path")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "{}: duplicate domain 'test-domain'",
            dir.join("b.yaml").display()
        )),
        "{stderr}"
    );
}

/// `domain: d` with the given descriptors (YAML list items, indented by two).
fn d_file(descriptors: &str) -> String {
    format!("domain: d\ndescriptors:\n{descriptors}")
}

/// A top-level descriptor `key[_value]` limited to `n` a second.
fn limited(key: &str, value: Option<&str>, n: u32) -> String {
    let value = value.map_or(String::new(), |v| format!("    value: \"{v}\"\n"));
    format!("  - key: {key}\n{value}    rate_limit: {{unit: second, requests_per_unit: {n}}}\n")
}

#[test]
fn merged_domain_files_serve_the_descriptors_of_every_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = limited("user", None, 1) + &limited("path", Some("/a*"), 2);
    let second = limited("ip", None, 3) + &limited("path", Some("/b*"), 4);
    write(&dir.path().join("a.yaml"), &d_file(&first));
    write(&dir.path().join("b.yaml"), &d_file(&second));
    write(&dir.path().join("c.yaml"), &domain_file("other", 5));

    let refused = config::load(dir.path()).expect_err("one domain in two files");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].kind, Kind::DuplicateDomain);

    let config = config::load_with(dir.path(), SharedDomains::Merged).expect("merged");
    assert_eq!(config.domains(), ["d", "other"]);
    let tree = config.domain("d").expect("d");
    let limit = |entries: &[(&str, &str)]| {
        let (rule, _) = lookup(tree, entries.iter().copied());
        rule.map(|r| r.limits[0].requests_per_unit)
    };
    assert_eq!(limit(&[("user", "u")]), Some(1));
    assert_eq!(limit(&[("path", "/a/x")]), Some(2));
    assert_eq!(limit(&[("ip", "10.0.0.1")]), Some(3));
    // The second file's wildcard matches as if both files were one.
    assert_eq!(limit(&[("path", "/b/x")]), Some(4));
    assert_eq!(limit(&[("path", "/c")]), None);
    assert_eq!(limit_of(&config, "other"), 5);
    // Every rule numbered once, across the merged files too (the statistics' index).
    let ordinals: BTreeSet<u32> = config.rules().iter().map(|r| r.ordinal).collect();
    assert_eq!(ordinals.len(), 5);
}

#[test]
fn a_descriptor_in_two_merged_files_names_both_places() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = limited("user", None, 1) + &limited("path", Some("/a*"), 2);
    let second = limited("ip", None, 3) + &limited("path", Some("/a*"), 4);
    let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    write(&a, &d_file(&first));
    write(&b, &d_file(&second));
    let errors = config::load_with(dir.path(), SharedDomains::Merged).expect_err("duplicate");
    assert_eq!(errors.len(), 1, "{errors:?}");
    let error = &errors[0];
    assert_eq!(error.kind, Kind::DuplicateDescriptor);
    assert_eq!(
        error.to_string(),
        format!(
            "{}:5: descriptor 'd.path_/a*': duplicate descriptor composite key 'd.path_/a*' (already defined in {}:5)",
            b.display(),
            a.display()
        )
    );
}

#[test]
fn validate_merges_a_domain_of_two_files_when_asked() {
    let dir = fixtures().join("invalid/duplicate_domain");
    let dir = dir.to_str().expect("utf-8 path");
    let out = validate(&["--config", dir, "--merge-domain-config"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("OK (1 domains, 2 rules)"), "{stdout}");
}

#[test]
fn validate_reads_the_path_from_the_environment() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let out = Command::new(env!("CARGO_BIN_EXE_meshlimit"))
        .arg("validate")
        .env("MESHLIMIT_CONFIG", &dir)
        .output()
        .expect("run meshlimit");
    assert!(out.status.success());
}

/// A link whose target is gone (a ConfigMap key being removed, between the kubelet's swap
/// of `..data` and its removal of the old top-level link) is a domain file that cannot be
/// read: the load fails (a reload keeps the running config) and the one problem names the
/// link.
#[cfg(unix)]
#[test]
fn a_dangling_link_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(&dir.path().join("a.yaml"), &domain_file("a", 1));
    let link = dir.path().join("gone.yaml");
    std::os::unix::fs::symlink(dir.path().join("..data/gone.yaml"), &link).expect("symlink");
    let errors = load_err(dir.path());
    let found: Vec<(Kind, &Path, Option<u32>)> = errors
        .iter()
        .map(|e| (e.kind, e.file.as_path(), e.line))
        .collect();
    assert_eq!(
        found,
        [(Kind::Unreadable, link.as_path(), None)],
        "{errors:#?}"
    );
}

/// The rule `entries` land on in `tree`, and their bucket key.
fn lookup<'t, 'e>(
    tree: &'t DomainTree,
    entries: impl IntoIterator<Item = (&'e str, &'e str)>,
) -> (Option<&'t Rule>, String) {
    let mut key = String::new();
    let rule = tree.find(
        entries,
        &mut KeyWriter::new(&mut key, "d"),
        &mut String::new(),
    );
    (rule, key)
}
