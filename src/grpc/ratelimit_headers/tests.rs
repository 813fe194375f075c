use super::*;
use crate::rules::Unit;
use crate::service::LimitStatus;

/// An Item as a strict RFC 9651 parser of the subset the draft's fields use reads it: a
/// String and Integer parameters.
type Item = (String, Vec<(String, u64)>);

/// Parses `field` as a List of Items whose bare items are Strings and whose parameters
/// are Integers, refusing anything RFC 9651 would refuse in that subset.
fn parse_list(field: &str) -> Result<Vec<Item>, String> {
    let mut rest = field.trim_start_matches(' ');
    let mut items = Vec::new();
    loop {
        let (item, after) = parse_item(rest)?;
        items.push(item);
        rest = after.trim_start_matches([' ', '\t']);
        if rest.is_empty() {
            return Ok(items);
        }
        rest = rest
            .strip_prefix(',')
            .ok_or_else(|| format!("expected a comma at {rest:?}"))?
            .trim_start_matches([' ', '\t']);
        if rest.is_empty() {
            return Err("trailing comma".into());
        }
    }
}

fn parse_item(text: &str) -> Result<(Item, &str), String> {
    let mut chars = text.strip_prefix('"').ok_or("not a String")?.chars();
    let mut name = String::new();
    loop {
        match chars.next().ok_or("unterminated String")? {
            '"' => break,
            '\\' => match chars.next() {
                Some(c @ ('"' | '\\')) => name.push(c),
                other => return Err(format!("bad escape {other:?}")),
            },
            c if (' '..='~').contains(&c) => name.push(c),
            c => return Err(format!("{c:?} in a String")),
        }
    }
    let mut rest = chars.as_str();
    let mut params = Vec::new();
    while let Some(after) = rest.strip_prefix(';') {
        let after = after.trim_start_matches(' ');
        let key_len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.*".contains(c)))
            .unwrap_or(after.len());
        let key = &after[..key_len];
        if !key.starts_with(|c: char| c.is_ascii_lowercase() || c == '*') {
            return Err(format!("bad key {key:?}"));
        }
        let value = after[key_len..]
            .strip_prefix('=')
            .ok_or("a parameter without =")?;
        let digits = value
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(value.len());
        if digits == 0 || digits > 15 {
            return Err(format!("bad Integer in {value:?}"));
        }
        params.push((key.to_string(), value[..digits].parse().expect("digits")));
        rest = &value[digits..];
    }
    Ok(((name, params), rest))
}

fn limit(name: &str, requests_per_unit: u32, unit: Unit, multiplier: u32) -> CurrentLimit {
    CurrentLimit {
        requests_per_unit,
        unit,
        multiplier,
        name: name.into(),
    }
}

/// A descriptor with one limit.
fn single(limit: CurrentLimit, remaining: u32, reset_ns: u64, over: bool) -> DescriptorStatus {
    DescriptorStatus {
        over_limit: over,
        current_limit: Some(limit),
        remaining,
        reset: Some(reset_ns),
        all_limits: Vec::new(),
    }
}

/// A descriptor with several limits, `(limit, remaining, reset_ns, over)` each; the first
/// refusing one (else the first) binds, which these fields do not look at.
fn several(limits: Vec<(CurrentLimit, u32, u64, bool)>) -> DescriptorStatus {
    let bound = limits.iter().position(|l| l.3).unwrap_or(0);
    let all: Vec<LimitStatus> = limits
        .into_iter()
        .enumerate()
        .map(|(i, (limit, remaining, reset, over))| LimitStatus {
            limit,
            over,
            remaining,
            reset,
            binding: i == bound,
        })
        .collect();
    let binding = all[bound].clone();
    DescriptorStatus {
        over_limit: all.iter().any(|l| l.over),
        current_limit: Some(binding.limit),
        remaining: binding.remaining,
        reset: Some(binding.reset),
        all_limits: all,
    }
}

const SECOND: u64 = NANOS_PER_SEC;

#[test]
fn no_limit_no_fields() {
    assert_eq!(values(&[]), None);
    let unlimited = DescriptorStatus {
        remaining: u32::MAX,
        ..DescriptorStatus::default()
    };
    assert_eq!(values(&[DescriptorStatus::default(), unlimited]), None);
}

#[test]
fn one_policy_per_limit_of_every_limited_descriptor() {
    let statuses = [
        several(vec![
            (
                limit("per_second", 10, Unit::Second, 1),
                19,
                SECOND / 10,
                false,
            ),
            (
                limit("daily_cap", 1000, Unit::Day, 1),
                999,
                86_400 * SECOND,
                false,
            ),
        ]),
        DescriptorStatus::default(),
        single(limit("", 3, Unit::Minute, 5), 2, 250 * SECOND + 1, false),
    ];
    let (policy, current) = values(&statuses).expect("limits applied");
    assert_eq!(
        policy,
        r#""per_second";q=10;w=1, "daily_cap";q=1000;w=86400, "d2-300s";q=3;w=300"#
    );
    assert_eq!(
        current,
        r#""per_second";r=19;t=1, "daily_cap";r=999;t=86400, "d2-300s";r=2;t=251"#
    );
}

#[test]
fn over_limit_answers_have_both_fields_too() {
    let statuses = [several(vec![
        (limit("burst", 2, Unit::Second, 1), 1, 0, false),
        (limit("hourly", 5, Unit::Hour, 1), 0, 1_800 * SECOND, true),
    ])];
    let (policy, current) = values(&statuses).expect("limits applied");
    assert_eq!(policy, r#""burst";q=2;w=1, "hourly";q=5;w=3600"#);
    assert_eq!(current, r#""burst";r=1;t=0, "hourly";r=0;t=1800"#);
}

#[test]
fn unnamed_limits_get_stable_distinct_names() {
    let statuses = [
        several(vec![
            (limit("", 10, Unit::Second, 1), 9, SECOND, false),
            (limit("", 20, Unit::Second, 1), 19, SECOND, false),
        ]),
        single(limit("", 1, Unit::Second, 1), 0, SECOND, false),
        // A configured name equal to a generated one does not share its Item.
        single(limit("d0-1s", 7, Unit::Second, 1), 6, SECOND, false),
    ];
    let (policy, current) = values(&statuses).expect("limits applied");
    let names: Vec<String> = parse_list(&policy)
        .expect("a valid List")
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, ["d0-1s", "d0-1s-2", "d1-1s", "d0-1s-3"]);
    let again = values(&statuses).expect("limits applied");
    assert_eq!(again, (policy, current), "the same answer, the same names");
}

#[test]
fn odd_names_make_valid_fields_and_no_header_injection() {
    let odd = [
        "a\"b",
        "back\\slash",
        "comma, semi;q=1",
        "line\r\nSet-Cookie: x=y",
        "caf\u{e9} \u{1f680}",
        "",
        " ",
    ];
    let statuses: Vec<DescriptorStatus> = odd
        .iter()
        .map(|name| single(limit(name, 4, Unit::Minute, 1), 3, 30 * SECOND, false))
        .collect();
    let (policy, current) = values(&statuses).expect("limits applied");
    for field in [&policy, &current] {
        assert!(
            field.chars().all(|c| (' '..='~').contains(&c)),
            "only visible ASCII and spaces: {field:?}"
        );
    }
    let policies = parse_list(&policy).unwrap_or_else(|e| panic!("{e}: {policy}"));
    let limits = parse_list(&current).unwrap_or_else(|e| panic!("{e}: {current}"));
    let names: Vec<&str> = policies.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "a\"b",
            "back\\slash",
            "comma, semi;q=1",
            "line__Set-Cookie: x=y",
            "caf_ _",
            "d5-60s",
            " ",
        ]
    );
    for ((policy_name, policy_params), (limit_name, limit_params)) in policies.iter().zip(&limits) {
        assert_eq!(policy_name, limit_name, "the fields pair up by name");
        assert_eq!(policy_params, &[("q".into(), 4), ("w".into(), 60)]);
        assert_eq!(limit_params, &[("r".into(), 3), ("t".into(), 30)]);
    }
}

#[test]
fn names_that_sanitise_alike_are_told_apart() {
    let statuses = [
        single(limit("caf\u{e9}", 1, Unit::Second, 1), 0, SECOND, false),
        single(limit("caf\u{e8}", 1, Unit::Second, 1), 0, SECOND, false),
    ];
    let (policy, _) = values(&statuses).expect("limits applied");
    assert_eq!(policy, r#""caf_";q=1;w=1, "caf_-2";q=1;w=1"#);
}

#[test]
fn long_names_are_cut_and_still_told_apart() {
    let long = "n".repeat(500);
    let statuses = [
        single(limit(&long, 1, Unit::Second, 1), 0, 0, false),
        single(limit(&format!("{long}x"), 1, Unit::Second, 1), 0, 0, false),
    ];
    let (policies, _) = values(&statuses).expect("limited");
    let cut = "n".repeat(64);
    assert_eq!(policies, format!("\"{cut}\";q=1;w=1, \"{cut}-2\";q=1;w=1"));
}

#[test]
fn huge_windows_stay_valid_integers() {
    let statuses = [single(
        limit("forever", u32::MAX, Unit::Year, u32::MAX),
        u32::MAX,
        u64::MAX,
        false,
    )];
    let (policy, current) = values(&statuses).expect("limits applied");
    assert_eq!(
        policy,
        format!(r#""forever";q={};w={}"#, u32::MAX, sf::MAX_INTEGER)
    );
    parse_list(&policy).expect("a valid List");
    parse_list(&current).expect("a valid List");
}

#[test]
fn the_parser_refuses_what_rfc_9651_refuses() {
    for bad in [
        "",
        "daily;q=1",
        r#""a";q=1,"#,
        r#""a";Q=1"#,
        r#""a";q=1234567890123456"#,
        "\"a\nb\";q=1",
        r#""a\x";q=1"#,
        r#""a" "b""#,
    ] {
        assert!(parse_list(bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        parse_list(r#""a";q=1;w=2,"b";r=0"#),
        Ok(vec![
            ("a".into(), vec![("q".into(), 1), ("w".into(), 2)]),
            ("b".into(), vec![("r".into(), 0)]),
        ])
    );
}
