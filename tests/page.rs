//! The operator page in a real browser (Debian's Chromium, headless, through
//! chromedriver) against the real binary with traffic flowing: the example config's rules,
//! rates and the most refused descriptors changing as a client sends, a broken config edit
//! shown, the explain form, a caller's `<script>` shown as text, and the admin token asked
//! for. The screenshot is saved under `target/` (`CARGO_TARGET_TMPDIR`).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fantoccini::Locator;
use serde_json::Value;
use support::browser::Browser;
use support::process::Meshlimit;
use support::{http_get, http_request, rls_request};
use tempfile::TempDir;

/// A domain beside the example config's: two a day, so refusals do not depend on time.
const DEMO: &str = "\
domain: page_demo
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 2}
";

/// A token budget that charges: a day's refill, so a debt stays as charged while the test
/// runs (one token refills in 86.4 s).
const TOKENS: &str = "\
domain: page_tokens
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000, charge: always}
  - key: reserving_user
    rate_limit: {unit: day, requests_per_unit: 1000}
    reserve: {ttl: 5m}
  - key: in_flight
    concurrency: {max_in_flight: 3, ttl: 10m}
";

/// A descriptor value that would run if the page put it into the document as markup.
const SCRIPT_VALUE: &str =
    "<script>window.injected=1</script><img src=x onerror=\"window.injected=2\">";

/// The example config (`config/`) plus [`DEMO`], in a directory the test may edit.
fn config() -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    for file in std::fs::read_dir(&examples).expect("config/") {
        let path = file.expect("config entry").path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).expect("copying");
        }
    }
    std::fs::write(dir.path().join("page_demo.yaml"), DEMO).expect("writing the config");
    std::fs::write(dir.path().join("page_tokens.yaml"), TOKENS).expect("writing the config");
    dir
}

/// Sends requests until `stop` is set (at most 60 s): refused ones for two users of
/// [`DEMO`], allowed ones to the example's trading domain.
fn traffic(ml: &Meshlimit, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let grpc = ml.grpc;
    tokio::spawn(async move {
        let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
            .expect("uri")
            .connect()
            .await
            .expect("connecting");
        let mut client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel);
        for _ in 0..1200 {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            for user in ["mallory", "mallory", SCRIPT_VALUE] {
                let request = rls_request("page_demo", &[&[("user", user)]]);
                client.should_rate_limit(request).await.expect("answered");
            }
            let request = rls_request(
                "trading",
                &[&[("user_id", "42"), ("method", "/market.Data/Quotes")]],
            );
            client.should_rate_limit(request).await.expect("answered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

fn refusals_of(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find(|line| line.contains(key))
        .and_then(|line| line.split_whitespace().last())
        .and_then(|n| n.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_rules_rates_refusals_a_broken_edit_and_explanations() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &["--reload-debounce-ms", "50"]).await;
    let browser = Browser::start().await;
    let url = format!("http://{}/", ml.http);
    browser.client.goto(&url).await.expect("opening the page");

    // The rules tree: the example config as loaded.
    let trading = browser
        .text("#rules-tree details[data-domain='trading']")
        .await;
    assert!(
        trading.contains("method_/trading.TradingService/SubmitOrder"),
        "{trading}"
    );
    assert!(
        trading.contains("100 per second, burst 10, token_bucket"),
        "{trading}"
    );
    let dashboard = browser
        .text("#rules-tree details[data-domain='dashboard']")
        .await;
    assert!(dashboard.contains("tier_auth"), "{dashboard}");
    assert!(dashboard.contains("10 per minute, burst 10"), "{dashboard}");

    let stop = Arc::new(AtomicBool::new(false));
    let sender = traffic(&ml, stop.clone());

    // Rates appear per rule, refused and allowed.
    let rates = browser
        .text_until("#rule-rates tbody", "the demo rule's rates", |t| {
            t.contains("page_demo · page_demo.user") && t.contains("trading · trading.user_id")
        })
        .await;
    assert!(rates.contains("page_demo"), "{rates}");
    let total_points = browser
        .eval("return document.querySelectorAll('#total-chart polyline').length")
        .await;
    assert_eq!(total_points, Value::from(2));

    // Who is being limited: both users, the script shown as text, counts rising.
    let first = browser
        .text_until("#refused-table tbody", "both refused users", |t| {
            t.contains("user=mallory") && t.contains(SCRIPT_VALUE)
        })
        .await;
    let before = refusals_of(&first, "user=mallory").expect("a count");
    browser
        .text_until("#refused-table tbody", "the count to rise", |t| {
            refusals_of(t, "user=mallory").is_some_and(|n| n > before)
        })
        .await;
    let injected = browser
        .eval("return [window.injected === undefined, document.scripts.length, document.images.length]")
        .await;
    assert_eq!(
        injected,
        serde_json::json!([true, 1, 0]),
        "the value ran as markup"
    );
    let cells = browser
        .eval(
            "return [...document.querySelectorAll('#refused-table td')].map(td => td.textContent)",
        )
        .await;
    let wanted = Value::from(format!("user={SCRIPT_VALUE}"));
    assert!(cells.as_array().unwrap().contains(&wanted), "{cells}");

    // The store.
    let store = browser.text("#store-info").await;
    assert!(
        store.contains("memory") && store.contains("of 1000000"),
        "{store}"
    );

    // The explain form answers, consuming nothing.
    browser.type_into("explain-domain", "page_demo").await;
    browser
        .type_into("explain-descriptors", "user=mallory")
        .await;
    browser.click("explain-submit").await;
    let explained = browser
        .text_until("#explain-result", "an explanation", |t| {
            t.contains("rule: page_demo.user")
        })
        .await;
    assert!(explained.contains("OVER_LIMIT"), "{explained}");

    // A budget that charges: its rule says so, and a bucket in debt shows as such.
    let tokens = browser
        .text("#rules-tree details[data-domain='page_tokens']")
        .await;
    assert!(
        tokens.contains("1000 per day, burst 1000, token_bucket, charges always"),
        "{tokens}"
    );
    let mut charge = rls_request("page_tokens", &[&[("user", "carol")]]);
    charge.descriptors[0].hits_addend =
        Some(envoy_types::pb::google::protobuf::UInt64Value { value: 5_000 });
    ml.ask(charge).await;
    browser.clear("explain-domain").await;
    browser.type_into("explain-domain", "page_tokens").await;
    browser.clear("explain-descriptors").await;
    browser.type_into("explain-descriptors", "user=carol").await;
    browser.click("explain-submit").await;
    let explained = browser
        .text_until("#explain-result", "the debt explained", |t| {
            t.contains("rule: page_tokens.user")
        })
        .await;
    assert!(
        explained.contains("IN DEBT: 4000 owed by charges"),
        "{explained}"
    );

    // Holds: the rules say what they hold, the store counts the holds in force, and an
    // explanation shows the slots in use.
    assert!(tokens.contains("reserve, ttl 300s"), "{tokens}");
    assert!(
        tokens.contains("3 in flight") && tokens.contains("concurrency, ttl 600s"),
        "{tokens}"
    );
    let mut hold = rls_request(
        "page_tokens",
        &[&[("reserving_user", "dan"), ("hold", "req-1")]],
    );
    hold.descriptors[0].hits_addend =
        Some(envoy_types::pb::google::protobuf::UInt64Value { value: 400 });
    ml.ask(hold).await;
    ml.ask(rls_request(
        "page_tokens",
        &[&[("in_flight", "dan"), ("hold", "req-1")]],
    ))
    .await;
    browser
        .text_until("#store-info", "two holds in force", |t| {
            t.contains("2 in force")
        })
        .await;
    browser.clear("explain-descriptors").await;
    browser
        .type_into("explain-descriptors", "in_flight=dan")
        .await;
    browser.click("explain-submit").await;
    browser
        .text_until("#explain-result", "the slots in use", |t| {
            t.contains("holds: 1 of 3 slots in use")
        })
        .await;

    // A broken edit: shown with its file and line, the config before it in force.
    std::fs::write(
        dir.path().join("page_demo.yaml"),
        "domain: page_demo\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n",
    )
    .expect("breaking the config");
    let error = browser
        .text_until("#reload-error", "the reload error", |t| {
            t.contains("page_demo.yaml")
        })
        .await;
    assert!(error.contains("page_demo.yaml:4"), "{error}");
    assert!(error.contains("fortnight"), "{error}");
    let (_, still) = http_get(ml.http, "/rlconfig").await;
    assert!(
        still.contains("page_demo.user: unit=DAY requests_per_unit=2"),
        "{still}"
    );

    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("operator-page.png");
    browser.screenshot(&path).await;
    stop.store(true, Ordering::SeqCst);
    sender.await.expect("traffic");
    println!("screenshot: {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_page_asks_for_it() {
    let dir = config();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("writing the token");
    let token_arg = token.display().to_string();
    let ml = Meshlimit::start(dir.path(), &["--admin-token-file", &token_arg]).await;

    // Browsers get the Basic challenge; scripts still get the open list.
    let html = [("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")];
    let (status, headers, _) = http_request(ml.http, "/", &html).await.expect("GET /");
    assert_eq!(status, 401);
    assert!(
        headers
            .iter()
            .any(|h| h.starts_with("www-authenticate: basic")),
        "{headers:?}"
    );
    let (status, list) = http_get(ml.http, "/").await;
    assert_eq!(
        (status, list.contains("/healthcheck")),
        (200, true),
        "{list}"
    );
    for path in ["/page/state.json", "/page/config.json", "/page/app.js"] {
        let (status, _) = http_get(ml.http, path).await;
        assert_eq!(status, 401, "{path}");
    }

    let browser = Browser::start().await;
    browser
        .client
        .goto(&format!("http://{}/", ml.http))
        .await
        .expect("opening");
    // Headless, the Basic prompt is answered with nothing: the 401 stays, no page.
    let title = browser.client.title().await.expect("title");
    assert_ne!(title, "meshlimit");
    assert!(
        browser
            .client
            .find(Locator::Id("rules-tree"))
            .await
            .is_err()
    );

    // With the token as the Basic password (as the prompt would take it), the page and
    // its polls get through.
    let url = format!("http://operator:s3cret-token@{}/", ml.http);
    browser
        .client
        .goto(&url)
        .await
        .expect("opening with the token");
    let title = browser.client.title().await.expect("title");
    assert_eq!(title, "meshlimit");
    let tree = browser
        .text("#rules-tree details[data-domain='page_demo']")
        .await;
    assert!(tree.contains("2 per day"), "{tree}");
    browser
        .text_until("#updated", "a poll through the token", |t| {
            t.starts_with("updated")
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_responses_are_read_only_and_carry_a_strict_policy() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &[]).await;
    let html = [("Accept", "text/html")];
    for path in [
        "/",
        "/page/app.js",
        "/page/style.css",
        "/page/config.json",
        "/page/state.json",
    ] {
        let (status, headers, _) = http_request(ml.http, path, &html).await.expect("GET");
        assert_eq!(status, 200, "{path}");
        let policy = headers
            .iter()
            .find(|h| h.starts_with("content-security-policy:"))
            .unwrap_or_else(|| panic!("{path}: no policy in {headers:?}"));
        assert!(
            policy.contains("default-src 'none'") && policy.contains("script-src 'self'"),
            "{policy}"
        );
        assert!(!policy.contains("unsafe"), "{policy}");
        assert!(
            headers
                .iter()
                .any(|h| h == "x-content-type-options: nosniff"),
            "{path}"
        );
        let (status, _, _) = support::http_send(ml.http, "POST", path, &[], "{}")
            .await
            .expect("POST");
        assert_eq!(status, 405, "POST {path}");
    }
    let (_, headers, list) = http_request(ml.http, "/", &[]).await.expect("GET /");
    assert!(list.starts_with("meshlimit operator endpoints"), "{list}");
    assert!(headers.iter().any(|h| h == "vary: accept"), "{headers:?}");
    let (status, _) = http_get(ml.http, "/page/state.json?after=x").await;
    assert_eq!(status, 400);
    let (_, state) = http_get(ml.http, "/page/state.json").await;
    let state: Value = serde_json::from_str(&state).expect("JSON");
    assert_eq!(state["window"], Value::from(600));
    assert_eq!(state["store"]["kind"], Value::from("memory"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_each_redis_node_its_round_trip_and_the_caches() {
    let redis = support::redis::RedisServer::start();
    let dir = config();
    let ml = Meshlimit::start_on_redis(dir.path(), &redis.url(), "allow", 1000, &[]).await;
    let mut client = ml.client().await;
    for _ in 0..4 {
        let request = rls_request("page_demo", &[&[("user", "mallory")]]);
        client.should_rate_limit(request).await.expect("answered");
    }
    // Probes run once a second: at most 20 s.
    let mut state = Value::Null;
    for _ in 0..200 {
        let (_, body) = http_get(ml.http, "/page/state.json").await;
        state = serde_json::from_str(&body).expect("JSON");
        if state["store"]["redis"]["nodes"][0]["round_trip_us"].as_u64() > Some(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let redis_doc = &state["store"]["redis"];
    assert!(
        redis_doc["nodes"][0]["round_trip_us"].as_u64() > Some(0),
        "{redis_doc}"
    );
    assert_eq!(state["store"]["kind"], Value::from("redis"));
    assert_eq!(state["store"]["health"], Value::from("OK"));
    assert_eq!(redis_doc["failure_policy"], Value::from("allow"));
    assert_eq!(redis_doc["nodes"][0]["down"], Value::Null);
    assert!(
        redis_doc["nodes"][0]["name"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1"),
        "{redis_doc}"
    );
    // Two allowed, two refused: the second refusal at least from the over-limit cache.
    assert!(redis_doc["misses"].as_u64() >= Some(3), "{redis_doc}");
    // The script calls that decided them, the requests they carried, and their time.
    let calls = redis_doc["calls"].as_u64().expect("calls");
    let carried = redis_doc["call_requests"].as_u64().expect("call_requests");
    assert!(calls >= 1 && carried >= calls, "{redis_doc}");
    // Every request sent to Redis went in a call (lease top-ups, none here, would add).
    assert!(Some(carried) >= redis_doc["misses"].as_u64(), "{redis_doc}");
    assert!(
        redis_doc["call_seconds"].as_f64().is_some_and(|s| s > 0.0),
        "{redis_doc}"
    );
    assert!(
        redis_doc["over_limit_hits"].as_u64() >= Some(1),
        "{redis_doc}"
    );

    drop(redis);
    support::eventually_async(20, "the dead node on the page", || {
        let http = ml.http;
        async move {
            let (_, body) = http_get(http, "/page/state.json").await;
            let state: Value = serde_json::from_str(&body).expect("JSON");
            state["store"]["redis"]["nodes"][0]["down"].is_string()
                && state["store"]["health"]
                    .as_str()
                    .unwrap()
                    .starts_with("degraded: ")
        }
    })
    .await;
}
