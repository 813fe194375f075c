//! An operator's hand on a bucket (envoyproxy/ratelimit issue #191), against the real
//! binary: `GET /bucket` shows a bucket fresh, after hits and in debt; `POST
//! /bucket/reset` makes it full again and is logged with who asked; both need the admin
//! token when there is one; `meshlimit bucket inspect|reset` call them.

mod support;

use serde_json::Value;
use support::process::{self, Meshlimit};
use support::{http_get, http_post, http_send};
use tempfile::TempDir;

/// Day limits: nothing refills noticeably within a test.
const LIMITS: &str = "\
domain: ops
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: llm
    rate_limit: {unit: day, requests_per_unit: 100, charge: always}
  - key: multi
    rate_limits:
      - {unit: day, requests_per_unit: 10, name: daily}
      - {unit: hour, requests_per_unit: 3, name: hourly, algorithm: fixed_window}
  - key: free
    rate_limit: {unlimited: true}
";

const TOKEN: &str = "bucket-s3cret";

async fn start(args: &[&str]) -> (Meshlimit, TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("ops.yaml"), LIMITS).expect("writing the config");
    (Meshlimit::start(dir.path(), args).await, dir)
}

/// A server guarded by [`TOKEN`], its directories (kept while it runs: both are
/// watched), and the token file's path.
async fn start_guarded() -> (Meshlimit, [TempDir; 2], String) {
    let tokens = tempfile::tempdir().expect("tempdir");
    let file = tokens.path().join("token").display().to_string();
    std::fs::write(&file, format!("{TOKEN}\n")).expect("writing the token");
    let (ml, config) = start(&["--admin-token-file", &file]).await;
    (ml, [config, tokens], file)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// `/json` with `hits` hits of `key=value`; the status code.
async fn hit(ml: &Meshlimit, key: &str, value: &str, hits: u64) -> u16 {
    let body = serde_json::json!({
        "domain": "ops",
        "descriptors": [{"entries": [{"key": key, "value": value}]}],
        "hits_addend": hits,
    });
    http_post(ml.http, "/json", &body.to_string()).await.0
}

async fn inspect(ml: &Meshlimit, descriptor: &str) -> Value {
    let (status, body) = http_get(
        ml.http,
        &format!("/bucket?domain=ops&descriptor={descriptor}"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    json(&body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_a_fresh_bucket_its_hits_and_its_debt() {
    let (ml, _dir) = start(&[]).await;

    let fresh = inspect(&ml, "user=ann").await;
    assert_eq!(fresh["domain"], "ops");
    assert_eq!(fresh["rule"]["key"], "ops.user");
    assert_eq!(fresh["store"], "memory");
    let limit = &fresh["limits"][0];
    assert_eq!(limit["limit"]["requests_per_unit"], 5);
    assert_eq!(limit["limit"]["unit"], "DAY");
    assert_eq!(limit["limit"]["algorithm"], "token_bucket");
    assert_eq!(limit["limit"]["charge"], false);
    assert_eq!(limit["level"]["remaining"], 5, "{fresh}");
    assert_eq!(limit["level"]["over"], false);
    assert_eq!(limit["level"]["owed"], 0);
    assert_eq!(limit["level"]["full_in_ms"], 0);
    assert_eq!(limit["held"]["holds"], 0);
    assert!(limit["held"]["soonest_expiry_ms"].is_null());
    assert!(limit.get("slots").is_none(), "{limit}");

    assert_eq!(hit(&ml, "user", "ann", 2).await, 200);
    let after = inspect(&ml, "user=ann").await;
    let level = &after["limits"][0]["level"];
    assert_eq!(level["remaining"], 3, "{after}");
    // Two tokens refill at 5 a day: about 9.6 hours.
    let full_in = level["full_in_ms"].as_u64().expect("full_in_ms while OK");
    assert!((34_000_000..=34_560_000).contains(&full_in), "{after}");
    // A peek takes nothing: asking again sees the same level.
    assert_eq!(
        inspect(&ml, "user=ann").await["limits"][0]["level"]["remaining"],
        3
    );

    // A charge of 150 on 100 a day: 50 owed below empty.
    assert_eq!(hit(&ml, "llm", "bob", 150).await, 429);
    let debt = inspect(&ml, "llm=bob").await;
    let level = &debt["limits"][0]["level"];
    assert_eq!(debt["limits"][0]["limit"]["charge"], true);
    assert_eq!(level["owed"], 50, "{debt}");
    assert_eq!(level["over"], true);
    assert_eq!(level["remaining"], 0);
    assert!(level["full_in_ms"].is_null(), "{debt}");
    assert!(level["reset_ms"].as_u64().unwrap() > 0, "{debt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_of_a_list_has_its_bucket_and_bad_requests_are_refused() {
    let (ml, _dir) = start(&[]).await;
    assert_eq!(hit(&ml, "multi", "x", 1).await, 200);
    let both = inspect(&ml, "multi=x").await;
    let limits = both["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 2, "{both}");
    assert_eq!(limits[0]["name"], "daily");
    assert_eq!(limits[0]["level"]["remaining"], 9);
    assert_eq!(limits[1]["name"], "hourly");
    assert_eq!(limits[1]["limit"]["algorithm"], "fixed_window");
    assert_ne!(limits[0]["key"], limits[1]["key"]);

    for (path, status, why) in [
        ("/bucket?domain=ops&descriptor=nobody=x", 404, "no rule"),
        (
            "/bucket?domain=elsewhere&descriptor=user=a",
            404,
            "no domain",
        ),
        ("/bucket?domain=ops&descriptor=free=a", 404, "unlimited"),
        ("/bucket?domain=ops", 400, "descriptor"),
        (
            "/bucket?domain=ops&descriptor=a=b&descriptor=c=d",
            400,
            "one descriptor",
        ),
        (
            "/bucket?domain=ops&descriptor=user=a&hits=2",
            400,
            "unknown parameter",
        ),
    ] {
        let (got, body) = http_get(ml.http, path).await;
        assert_eq!(got, status, "{path}: {body}");
        let error = json(&body)["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(error.contains(why), "{path}: {body}");
    }
    // A reset consumes and changes state: never on a GET.
    let (got, _) = http_get(ml.http, "/bucket/reset?domain=ops&descriptor=user=a").await;
    assert_eq!(got, 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_makes_the_bucket_full_and_is_logged_with_who_and_what() {
    let (ml, _dir) = start(&[]).await;
    assert_eq!(hit(&ml, "user", "cid", 5).await, 200);
    assert_eq!(hit(&ml, "user", "cid", 1).await, 429);

    let path = "/bucket/reset?domain=ops&descriptor=user=cid";
    let headers = [("X-Meshlimit-Operator", "ann")];
    let (status, _, body) = http_send(ml.http, "POST", path, &headers, "")
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let done = json(&body);
    let key = inspect(&ml, "user=cid").await["limits"][0]["key"].clone();
    assert_eq!(done["reset"], serde_json::json!([key]), "{done}");
    assert_eq!(done["existed"], serde_json::json!([true]), "{done}");
    assert_eq!(
        inspect(&ml, "user=cid").await["limits"][0]["level"]["remaining"],
        5
    );
    assert_eq!(hit(&ml, "user", "cid", 1).await, 200);

    // Who: the peer and the person; what: the domain, the descriptor and the keys.
    let log = ml.log();
    let line = log
        .lines()
        .find(|l| l.contains("bucket reset by an operator"))
        .unwrap_or_else(|| panic!("no reset line in the log:\n{log}"));
    for part in [
        "INFO",
        "peer=127.0.0.1:",
        "by=ann",
        "domain=ops",
        "descriptor=user=cid",
    ] {
        assert!(line.contains(part), "{part} missing: {line}");
    }
    assert!(line.contains(key.as_str().unwrap()), "{line}");

    // `by=` names the person when the header does not; a bucket never used had nothing.
    let path = "/bucket/reset?domain=ops&descriptor=user=new&by=bob";
    let (status, body) = http_post(ml.http, path, "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["existed"], serde_json::json!([false]));
    support::eventually(5, "the second reset's line", || ml.log().contains("by=bob")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_guards_both_endpoints() {
    let (ml, _dirs, _file) = start_guarded().await;
    let inspect = "/bucket?domain=ops&descriptor=user=a";
    let reset = "/bucket/reset?domain=ops&descriptor=user=a";
    let bearer = format!("Bearer {TOKEN}");
    for (method, path) in [("GET", inspect), ("POST", reset)] {
        let (status, _, body) = http_send(ml.http, method, path, &[], "").await.unwrap();
        assert_eq!(status, 401, "{method} {path}: {body}");
        let wrong = [("Authorization", "Bearer nope")];
        let (status, _, _) = http_send(ml.http, method, path, &wrong, "").await.unwrap();
        assert_eq!(status, 401, "{method} {path} with a wrong token");
        let right = [("Authorization", bearer.as_str())];
        let (status, _, body) = http_send(ml.http, method, path, &right, "").await.unwrap();
        assert_eq!(status, 200, "{method} {path}: {body}");
    }
    let resets = ml.log().matches("bucket reset by an operator").count();
    assert_eq!(
        resets,
        1,
        "only the authorised reset is done:\n{}",
        ml.log()
    );
}

/// `meshlimit bucket …` against `ml`; (success, stdout, stderr).
async fn cli(ml: &Meshlimit, command: &str, extra: &[&str]) -> (bool, String, String) {
    let server = format!("http://{}", ml.http);
    let mut args = vec!["bucket", command, "--server", &server, "--domain", "ops"];
    args.extend_from_slice(extra);
    let output = process::run(&args).await;
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_inspects_and_resets_and_fails_with_the_servers_reason() {
    let (ml, _dirs, file) = start_guarded().await;
    let token = ["--admin-token-file", file.as_str()];
    let with = |extra: &[&'static str]| -> Vec<String> {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        args.extend(token.iter().map(|s| s.to_string()));
        args
    };
    let body = serde_json::json!({
        "domain": "ops",
        "descriptors": [{"entries": [{"key": "user", "value": "dee"}]}],
        "hits_addend": 4,
    });
    let auth = [("Authorization", format!("Bearer {TOKEN}"))];
    let auth: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, _, _) = http_send(ml.http, "POST", "/json", &auth, &body.to_string())
        .await
        .unwrap();
    assert_eq!(status, 200);

    let args = with(&["--descriptor", "user=dee"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out, err) = cli(&ml, "inspect", &args).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("\n  \"limits\""),
        "pretty JSON expected: {out}"
    );
    assert_eq!(json(&out)["limits"][0]["level"]["remaining"], 1, "{out}");

    let mut reset_args = args.clone();
    reset_args.extend(["--by", "erin"]);
    let (ok, out, err) = cli(&ml, "reset", &reset_args).await;
    assert!(ok, "{err}");
    assert!(
        out.starts_with("reset 1 bucket(s) of rule ops.user: ") && out.contains("(reset)"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(ml.log().contains("by=erin"), "{}", ml.log());
    let (_, out, _) = cli(&ml, "inspect", &args).await;
    assert_eq!(json(&out)["limits"][0]["level"]["remaining"], 5, "{out}");

    // Refusals: the server's reason, and a non-zero exit.
    let args = with(&["--descriptor", "nobody=x"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out, err) = cli(&ml, "inspect", &args).await;
    assert!(!ok && out.is_empty(), "{out}");
    assert!(err.contains("404") && err.contains("no rule"), "{err}");
    let (ok, _, err) = cli(&ml, "reset", &["--descriptor", "user=dee"]).await;
    assert!(!ok && err.contains("401"), "{err}");
}

/// A reservation and a concurrency rule: their holds show in `/bucket`, and a reset drops
/// them.
const HOLDS: &str = "\
domain: llm
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
    reserve: {ttl: 5m}
  - key: in_flight
    concurrency: {max_in_flight: 2, ttl: 10m}
";

/// `/json` in domain `llm` of one descriptor of `entries` with `hits` hits; the status.
async fn llm(ml: &Meshlimit, entries: &[(&str, &str)], hits: u64) -> u16 {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(k, v)| serde_json::json!({"key": k, "value": v}))
        .collect();
    let body = serde_json::json!({
        "domain": "llm",
        "descriptors": [{"entries": entries}],
        "hits_addend": hits,
    });
    http_post(ml.http, "/json", &body.to_string()).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_and_slots_show_in_inspect_and_a_reset_drops_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("llm.yaml"), HOLDS).expect("writing the config");
    let ml = Meshlimit::start(dir.path(), &[]).await;
    let get = |descriptor: &'static str| {
        let path = format!("/bucket?domain=llm&descriptor={descriptor}");
        async move {
            let (status, body) = http_get(ml.http, &path).await;
            assert_eq!(status, 200, "{body}");
            json(&body)
        }
    };

    // A reservation of 300 holds its estimate.
    assert_eq!(
        llm(&ml, &[("user", "a"), ("hold", "req-1")], 300).await,
        200
    );
    let reserved = get("user=a").await;
    assert_eq!(reserved["rule"]["holds"]["kind"], "reserve", "{reserved}");
    assert_eq!(reserved["rule"]["holds"]["ttl_ms"], 300_000);
    let bucket = &reserved["limits"][0];
    assert_eq!(bucket["held"]["holds"], 1, "{reserved}");
    assert_eq!(bucket["held"]["hits"], 300);
    let expiry = bucket["held"]["soonest_expiry_ms"]
        .as_u64()
        .expect("an expiry");
    assert!((290_000..=300_000).contains(&expiry), "{reserved}");
    assert_eq!(bucket["level"]["remaining"], 700, "{reserved}");
    assert!(bucket.get("slots").is_none());

    // Two requests in flight take both slots.
    for id in ["s1", "s2"] {
        assert_eq!(llm(&ml, &[("in_flight", "a"), ("hold", id)], 1).await, 200);
    }
    let slots = get("in_flight=a").await;
    assert_eq!(slots["rule"]["holds"]["kind"], "concurrency", "{slots}");
    assert_eq!(
        slots["limits"][0]["slots"],
        serde_json::json!({"in_use": 2, "max": 2})
    );
    assert_eq!(slots["limits"][0]["held"]["holds"], 2);
    // The level of a concurrency rule counts slots: none free, no debt.
    let level = &slots["limits"][0]["level"];
    assert_eq!(level["remaining"], 0, "{slots}");
    assert_eq!(level["over"], true, "{slots}");
    assert_eq!(level["owed"], 0, "{slots}");
    assert!(level["full_in_ms"].is_null(), "{slots}");
    assert_eq!(
        llm(&ml, &[("in_flight", "a"), ("hold", "s3")], 1).await,
        429
    );

    // Reset: the reservation's bucket full and its hold gone; the slots free.
    for descriptor in ["user=a", "in_flight=a"] {
        let path = format!("/bucket/reset?domain=llm&descriptor={descriptor}");
        let (status, body) = http_post(ml.http, &path, "").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(json(&body)["existed"], serde_json::json!([true]), "{body}");
    }
    let reserved = get("user=a").await;
    assert_eq!(reserved["limits"][0]["held"]["holds"], 0, "{reserved}");
    assert!(reserved["limits"][0]["held"]["soonest_expiry_ms"].is_null());
    assert_eq!(
        reserved["limits"][0]["level"]["remaining"], 1000,
        "{reserved}"
    );
    let slots = get("in_flight=a").await;
    assert_eq!(slots["limits"][0]["slots"]["in_use"], 0, "{slots}");
    assert_eq!(slots["limits"][0]["level"]["remaining"], 2, "{slots}");
    assert_eq!(slots["limits"][0]["level"]["full_in_ms"], 0, "{slots}");
    assert_eq!(
        llm(&ml, &[("in_flight", "a"), ("hold", "s3")], 1).await,
        200
    );
}

/// Two replicas on one Redis: either shows the bucket the other filled, with its Redis
/// key; with Redis gone, both endpoints' store errors are 503 with the store's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_every_replica_sees_the_shared_bucket_and_store_errors_are_503() {
    let redis = support::redis::RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("ops.yaml"), LIMITS).expect("writing the config");
    let url = redis.url();
    let a = Meshlimit::start_on_redis(dir.path(), &url, "error", 500, &[]).await;
    let b = Meshlimit::start_on_redis(dir.path(), &url, "error", 500, &[]).await;
    assert_eq!(hit(&a, "user", "fay", 2).await, 200);
    let seen = inspect(&b, "user=fay").await;
    assert_eq!(seen["store"], "redis");
    assert_eq!(seen["limits"][0]["level"]["remaining"], 3, "{seen}");
    let redis_key = seen["limits"][0]["redis_key"]
        .as_str()
        .expect("a Redis key");
    assert!(redis_key.contains("fay"), "{seen}");

    drop(redis);
    let (status, body) = http_get(b.http, "/bucket?domain=ops&descriptor=user=fay").await;
    assert_eq!(status, 503, "{body}");
    let error = json(&body)["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(error.contains("Redis"), "{body}");
}
