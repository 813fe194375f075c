//! Quota bucket ids (Envoy's rate limit quota service) resolved against the config:
//! `meshlimit explain --bucket` and `GET /explain?bucket=`, on the repository's own config.

mod support;

use std::path::PathBuf;

use support::http_get;
use support::process::{self, Meshlimit};

fn config_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config")
}

/// `meshlimit explain --config config/ --domain <domain> --bucket <bucket>`: exit status
/// and standard output, or standard error when it failed.
async fn explain(domain: &str, bucket: &str) -> (bool, String) {
    let config = config_dir().display().to_string();
    let out = process::run(&[
        "explain", "--config", &config, "--domain", domain, "--bucket", bucket,
    ])
    .await;
    let text = if out.status.success() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    (out.status.success(), text)
}

#[tokio::test]
async fn a_bucket_in_any_order_resolves_to_its_rule_and_quota() {
    for bucket in [
        "user_id=alice,method=/trading.TradingService/SubmitOrder",
        "method=/trading.TradingService/SubmitOrder,user_id=alice",
    ] {
        let (ok, text) = explain("trading", bucket).await;
        assert!(ok, "{text}");
        assert!(
            text.contains("1. user_id=alice: matched value-less entry \"user_id\""),
            "{text}"
        );
        assert!(
            text.contains("2. method=/trading.TradingService/SubmitOrder: matched exact entry"),
            "{text}"
        );
        assert!(
            text.contains("rule: trading.user_id.method_/trading.TradingService/SubmitOrder"),
            "{text}"
        );
        // 100/s burst 10: 100 tokens a second, 10 at most.
        assert!(
            text.contains(
                "quota: token_bucket max_tokens 10, tokens_per_fill 100, fill_interval 1s"
            ),
            "{text}"
        );
    }
    // backtesting.run, 5/min burst 1: one token every 12 s.
    let (_, text) = explain(
        "trading",
        "user_id=bob,method=/backtesting.BacktestingService/Run",
    )
    .await;
    assert!(
        text.contains("quota: token_bucket max_tokens 1, tokens_per_fill 1, fill_interval 12s"),
        "{text}"
    );
    // The two-limit rule hands out its tightest limit: the daily cap (20,000 a day is
    // 25 every 108 s), not the per-second bucket.
    let (_, text) = explain(
        "trading_caps",
        "user_id=carol,method=/trading.TradingService/SubmitOrder",
    )
    .await;
    assert!(
        text.contains("100 per SECOND, burst 10, token_bucket; 20000 per DAY"),
        "{text}"
    );
    assert!(
        text.contains(
            "quota: token_bucket max_tokens 20000, tokens_per_fill 25, fill_interval 108s"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_bucket_matches_only_when_every_entry_is_used_at_a_rule() {
    let (ok, text) = explain(
        "trading",
        "user_id=alice,method=/trading.TradingService/SubmitOrder,region=eu",
    )
    .await;
    assert!(ok, "{text}");
    assert!(
        text.contains("then region=eu: nothing at this level matches"),
        "{text}"
    );
    assert!(text.contains("result: unmatched"), "{text}");
    assert!(!text.contains("quota:"), "{text}");

    let (_, text) = explain("trading", "user_id=alice").await;
    assert!(
        text.contains("ends at an entry without a rate_limit"),
        "{text}"
    );
    let (_, text) = explain("nowhere", "user_id=alice").await;
    assert!(text.contains("no such domain"), "{text}");

    // A bucket id is a map: a key twice is refused, as is an id over the entry caps.
    let (ok, text) = explain("trading", "user_id=a,user_id=b").await;
    assert!(!ok && text.contains("given twice"), "{text}");
    let many: String = (0..65).map(|i| format!("k{i}=v,")).collect();
    let (ok, text) = explain("trading", many.trim_end_matches(',')).await;
    assert!(!ok && text.contains("--max-entries"), "{text}");
}

#[tokio::test]
async fn the_operator_endpoint_explains_buckets_too() {
    let server = Meshlimit::start(&config_dir(), &[]).await;
    let (status, text) = http_get(
        server.http,
        "/explain?domain=trading&bucket=method%3D%2Fconfig.ConfigService%2FUpdate%2Cuser_id%3Dd",
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("rule: trading.user_id.method_/config.ConfigService/Update"),
        "{text}"
    );
    // 10/s burst 2: 10 every second, 2 at most.
    assert!(
        text.contains("max_tokens 2, tokens_per_fill 10, fill_interval 1s"),
        "{text}"
    );
    for bad in [
        "/explain?domain=trading&bucket=a%3D1&descriptor=a%3D1",
        "/explain?domain=trading&bucket=a%3D1&bucket=b%3D2",
        "/explain?domain=trading&bucket=a%3D1%2Ca%3D2",
        "/explain?bucket=a%3D1",
    ] {
        let (status, text) = http_get(server.http, bad).await;
        assert_eq!(status, 400, "{bad}: {text}");
    }
    assert!(server.terminate().await.success());
}

/// The walk itself, through the library (`DomainTree::walk_quota_bucket`), on a config of its own.
mod walk {
    use meshlimit::config::Config;

    fn config(yaml: &str) -> Config {
        Config::from_sources(&[("edge.yaml".into(), yaml.to_string())]).expect("a valid config")
    }

    /// The rule's path the bucket `id` resolves to in `yaml`'s domain `edge`, if any.
    fn rule_of(yaml: &str, id: &[(&str, &str)]) -> Option<String> {
        let config = config(yaml);
        let walk = config.domain("edge").unwrap().walk_quota_bucket(id, 4);
        walk.rule.map(|r| r.full_key.clone())
    }

    const NESTED: &str = "
domain: edge
descriptors:
  - key: user_id
    descriptors:
      - key: method
        value: /a
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: method
        rate_limit: {unit: second, requests_per_unit: 50}
  - key: name
    value: per_user
    descriptors:
      - key: user_id
        rate_limit: {unit: minute, requests_per_unit: 10}
";

    #[test]
    fn an_id_in_any_order_walks_the_file_order() {
        for id in [
            [("user_id", "alice"), ("method", "/a")],
            [("method", "/a"), ("user_id", "alice")],
        ] {
            assert_eq!(
                rule_of(NESTED, &id).as_deref(),
                Some("edge.user_id.method_/a")
            );
        }
        assert_eq!(
            rule_of(NESTED, &[("method", "/b"), ("user_id", "bob")]).as_deref(),
            Some("edge.user_id.method")
        );
        // Both `user_id` (first in the file) and `name_per_user` match at the top: the
        // earlier entry is taken, and the walk goes on under it, where nothing matches
        // `name`.
        assert_eq!(
            rule_of(NESTED, &[("name", "per_user"), ("user_id", "alice")]),
            None
        );
    }

    #[test]
    fn every_entry_must_be_used_and_end_at_a_rule() {
        // A left-over entry: no match, not a fallback to a shorter rule.
        assert_eq!(
            rule_of(NESTED, &[("user_id", "a"), ("method", "/a"), ("x", "1")]),
            None
        );
        // Used up at an entry without a rate_limit.
        assert_eq!(rule_of(NESTED, &[("user_id", "a")]), None);
        assert_eq!(rule_of(NESTED, &[]), None);
    }

    #[test]
    fn the_walk_says_what_it_used_and_what_was_left() {
        let config = config(NESTED);
        let walk = config
            .domain("edge")
            .unwrap()
            .walk_quota_bucket(&[("x", "1"), ("user_id", "a")], 4);
        assert_eq!(walk.steps.len(), 1);
        assert_eq!(walk.steps[0].key, "user_id");
        assert_eq!(walk.unused, [("x".to_string(), "1".to_string())]);
        assert_eq!(walk.offered.first, ["method", "method_/a"]);
        assert!(walk.rule.is_none());
    }
}
