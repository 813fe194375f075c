//! Config from PostgreSQL (`--config postgres://...`), against a real server of its own
//! per test (tests/support/postgres.rs) and the real binary: `db init`, rows going live
//! on NOTIFY, invalid rows kept out, PostgreSQL going away and coming back, the trading
//! gateway's limits as rows, `validate` and `explain`, and startup without PostgreSQL.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::postgres::Postgres;
use support::process::{self, Meshlimit};
use support::{eventually_async, http_get, rls_request};

/// The default table.
const TABLE: &str = "meshlimit_config";

/// Day limits: nothing refills within a test.
const ONE_A_DAY: &str = "\
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1}
";

/// `shop` with its `user` rule unlimited.
const UNLIMITED: &str = "\
domain: shop
descriptors:
  - key: user
    rate_limit: {unlimited: true}
";

/// `shop` with a key the format does not have, on line 4.
const BAD_KEY: &str = "\
domain: shop
descriptors:
  - key: user
    x: 1
    rate_limit: {unit: day, requests_per_unit: 1}
";

/// Where the error of [`BAD_KEY`] is reported.
const BAD_KEY_ERROR: &str = "postgres:meshlimit_config/shop:4: descriptor 'shop.user'";

/// Bound on a change reaching a server whose PostgreSQL was away (backoff up to 5 s).
const RECONNECTED: u64 = 30;

/// A table made by `db init`, with `rows` (domain, YAML).
async fn table(pg: &Postgres, rows: &[(&str, &str)]) {
    db_init(pg).await;
    for (domain, config) in rows {
        pg.put(TABLE, domain, config).await;
    }
}

/// `meshlimit db init --config <pg>`, which must succeed.
async fn db_init(pg: &Postgres) {
    let out = process::run(&["db", "init", "--config", &pg.url()]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(
            "table meshlimit_config and its NOTIFY trigger on channel meshlimit_config are ready"
        ),
        "{text}"
    );
}

/// A PostgreSQL whose table holds `shop` at [`ONE_A_DAY`], and a server on it, `user=a`'s
/// one request of the day taken.
async fn shop_served() -> (Postgres, Meshlimit) {
    let pg = Postgres::start();
    table(&pg, &[("shop", ONE_A_DAY)]).await;
    let ml = serve(&pg.url(), &[]).await;
    assert!(one_a_day(&ml, "a").await);
    (pg, ml)
}

/// `meshlimit serve --config <url> --log info args...`, serving.
async fn serve(url: &str, args: &[&str]) -> Meshlimit {
    let mut argv = process::serve_on_loopback(url, &["--log", "info"]);
    argv.extend_from_slice(args);
    Meshlimit::start_with(&argv, &[]).await
}

/// `n` hits of `shop` for `user=<user>` in one request.
fn shop(user: &str, n: u32) -> RateLimitRequest {
    RateLimitRequest {
        hits_addend: n,
        ..rls_request("shop", &[&[("user", user)]])
    }
}

/// Whether `request` is answered OK.
async fn allowed(ml: &Meshlimit, request: RateLimitRequest) -> bool {
    ml.ask(request).await.overall_code == Code::Ok as i32
}

/// Whether `user` has a limit of one a day in `shop`: the first request passes, the
/// second does not (each call takes a fresh user, so polling can call it again).
async fn one_a_day(ml: &Meshlimit, user: &str) -> bool {
    allowed(ml, shop(user, 1)).await && !allowed(ml, shop(user, 1)).await
}

/// Polls until `shop` limits a fresh user to one a day (a user per attempt, named
/// `<prefix><n>`), failing after `seconds`; the user that showed it.
async fn until_one_a_day(ml: &Meshlimit, prefix: &str, seconds: u64) -> String {
    let mut n = 0;
    let mut user = String::new();
    eventually_async(seconds, &format!("one a day ({prefix})"), || {
        n += 1;
        user = format!("{prefix}{n}");
        let user = user.clone();
        async move { one_a_day(ml, &user).await }
    })
    .await;
    user
}

/// Polls `/metrics` until `meshlimit_config_last_load_failed` is `failed` (0 or 1).
async fn last_load_failed(ml: &Meshlimit, failed: u8, seconds: u64) {
    let line = format!("\nmeshlimit_config_last_load_failed {failed}\n");
    eventually_async(seconds, &format!("last_load_failed {failed}"), || async {
        http_get(ml.http, "/metrics").await.1.contains(&line)
    })
    .await;
}

/// `/rlconfig`'s text.
async fn rlconfig(ml: &Meshlimit) -> String {
    let (status, text) = http_get(ml.http, "/rlconfig").await;
    assert_eq!(status, 200, "{text}");
    text
}

/// Stdout and stderr of a finished command, for messages.
fn output(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn db_init_twice_then_a_row_goes_live_within_two_seconds() {
    let pg = Postgres::start();
    db_init(&pg).await;
    db_init(&pg).await;
    let ml = serve(&pg.url(), &[]).await;
    assert!(
        allowed(&ml, shop("a", 1)).await && allowed(&ml, shop("a", 1)).await,
        "no limit before the row"
    );

    // A plain INSERT: the trigger notifies.
    pg.sql(&format!(
        "INSERT INTO {TABLE} (domain, config) VALUES ('shop', $${ONE_A_DAY}$$)"
    ))
    .await;
    let limited = until_one_a_day(&ml, "insert", 2).await;

    // A plain UPDATE too.
    pg.sql(&format!(
        "UPDATE {TABLE} SET config = $${UNLIMITED}$$ WHERE domain = 'shop'"
    ))
    .await;
    eventually_async(2, "the updated row in force", || {
        allowed(&ml, shop(&limited, 1))
    })
    .await;
    assert!(rlconfig(&ml).await.contains("# source postgres version"));

    // DELETE: the domain goes, its limits with it.
    pg.sql(&format!("UPDATE {TABLE} SET config = $${ONE_A_DAY}$$"))
        .await;
    let limited = until_one_a_day(&ml, "back", 2).await;
    pg.sql(&format!("DELETE FROM {TABLE} WHERE domain = 'shop'"))
        .await;
    eventually_async(2, "the row deleted", || allowed(&ml, shop(&limited, 1))).await;
    ml.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_row_keeps_the_last_good_config_and_says_why() {
    let (pg, ml) = shop_served().await;
    assert!(rlconfig(&ml).await.contains("# last reload error: none"));

    pg.put(TABLE, "shop", BAD_KEY).await;
    last_load_failed(&ml, 1, 10).await;
    let text = rlconfig(&ml).await;
    assert!(
        text.contains("# last reload error (the config above stays in force):"),
        "{text}"
    );
    assert!(text.contains(BAD_KEY_ERROR), "{text}");
    assert!(text.contains("unknown key 'x'"), "{text}");
    // The last good config is still enforced.
    assert!(one_a_day(&ml, "b").await);

    // Fixed: in force, the error gone.
    pg.put(TABLE, "shop", UNLIMITED).await;
    last_load_failed(&ml, 0, 10).await;
    assert!(allowed(&ml, shop("a", 1)).await);
    let text = rlconfig(&ml).await;
    assert!(text.contains("# last reload error: none"), "{text}");
    assert!(!text.contains(BAD_KEY_ERROR), "{text}");
    ml.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_changes_made_while_away_are_picked_up() {
    let (pg, ml) = shop_served().await;

    // PostgreSQL goes away: the outage is noticed and shown, serving goes on.
    pg.stop();
    last_load_failed(&ml, 1, RECONNECTED).await;
    let text = rlconfig(&ml).await;
    assert!(text.contains("PostgreSQL:"), "{text}");
    assert!(one_a_day(&ml, "b").await);

    // Back on the unix socket only, which meshlimit (on TCP) cannot reach: a change with
    // the triggers off, so that no NOTIFY is ever sent for it.
    pg.start_server(false);
    pg.sql(&format!(
        "BEGIN; ALTER TABLE {TABLE} DISABLE TRIGGER USER;
         UPDATE {TABLE} SET config = $${UNLIMITED}$$ WHERE domain = 'shop';
         ALTER TABLE {TABLE} ENABLE TRIGGER USER; COMMIT;"
    ))
    .await;
    assert!(
        one_a_day(&ml, "c").await,
        "the old config stays until it reconnects"
    );

    // Reachable again: the reload after reconnecting finds the change.
    pg.restart();
    eventually_async(RECONNECTED, "the change made while away", || {
        allowed(&ml, shop("a", 1))
    })
    .await;
    last_load_failed(&ml, 0, 10).await;
    assert!(
        ml.log().contains("PostgreSQL reachable again"),
        "{}",
        ml.log()
    );

    // And it listens again: a notified change after the reconnection.
    pg.put(TABLE, "shop", ONE_A_DAY).await;
    until_one_a_day(&ml, "after", 10).await;
    // The outage was logged once, not once per attempt.
    assert_eq!(
        ml.log().matches("PostgreSQL unreachable").count(),
        1,
        "{}",
        ml.log()
    );
    ml.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trading_gateway_limits_as_rows() {
    let pg = Postgres::start();
    db_init(&pg).await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut domains = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("config/") {
        let path = entry.expect("config/ entry").path();
        let domain = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).expect("reading the example");
        pg.put(TABLE, &domain, &text).await;
        domains.push(domain);
    }
    domains.sort();
    assert_eq!(domains, ["dashboard", "trading", "trading_caps"]);
    let ml = serve(&pg.url(), &[]).await;

    let order = |user: &str, method: &str, n: u32| RateLimitRequest {
        hits_addend: n,
        ..rls_request("trading", &[&[("user_id", user), ("method", method)]])
    };
    // trading.submit_order: bursts of at most 10 (refilled at 100/s, so the check is
    // on one request's hits: 10 pass at once, 11 never can).
    let submit = "/trading.TradingService/SubmitOrder";
    assert!(allowed(&ml, order("u1", submit, 10)).await);
    assert!(!allowed(&ml, order("u2", submit, 11)).await);
    // backtesting.run: 5 a minute, burst 1 (12 s to the next token).
    let run = "/backtesting.BacktestingService/Run";
    assert!(allowed(&ml, order("u1", run, 1)).await);
    assert!(!allowed(&ml, order("u1", run, 1)).await);
    assert!(
        allowed(&ml, order("u2", run, 1)).await,
        "one bucket per user"
    );
    // dashboard auth tier: 10 a minute per user.
    let auth = |user: &str| rls_request("dashboard", &[&[("user_id", user), ("tier", "auth")]]);
    for i in 0..10 {
        assert!(allowed(&ml, auth("d1")).await, "request {i}");
    }
    assert!(!allowed(&ml, auth("d1")).await);
    // trading_caps: the daily cap beside the burst.
    let text = rlconfig(&ml).await;
    assert!(text.contains("submit_order_daily"), "{text}");
    assert!(
        text.contains("trading.user_id.method_/backtesting"),
        "{text}"
    );
    ml.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_and_explain_read_the_rows() {
    let pg = Postgres::start();
    table(&pg, &[("shop", ONE_A_DAY), ("empty", "domain: empty\n")]).await;

    // A password is never printed; the unix socket forms work too.
    let with_password = pg.url().replace("postgres@", "postgres:s3cret@");
    let encoded = format!(
        "postgresql://postgres@{}:{}/postgres",
        pg.socket_dir().display().to_string().replace('/', "%2F"),
        pg.port
    );
    for url in [with_password.as_str(), &pg.socket_url(), &encoded] {
        let out = process::run(&["validate", "--config", url]).await;
        let (stdout, stderr) = output(&out);
        assert!(out.status.success(), "{url}: {stdout}{stderr}");
        assert!(stdout.contains("OK (2 domains, 1 rules)"), "{stdout}");
        assert!(stdout.contains("table meshlimit_config"), "{stdout}");
        assert!(!stdout.contains("s3cret"), "{stdout}");
    }

    let out = process::run(&[
        "explain",
        "--config",
        &pg.url(),
        "--domain",
        "shop",
        "--descriptor",
        "user=a",
    ])
    .await;
    let (stdout, stderr) = output(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("shop.user"), "{stdout}");
    assert!(
        stdout.contains("rule: shop.user: 1 per DAY, burst 1"),
        "{stdout}"
    );

    pg.put(TABLE, "shop", BAD_KEY).await;
    let out = process::run(&["validate", "--config", &pg.url()]).await;
    let (stdout, stderr) = output(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(stderr.contains(BAD_KEY_ERROR), "{stderr}");
    assert!(stderr.contains("1 problem(s)"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_postgres_refuses_or_starts_without_config() {
    let pg = Postgres::create();
    let out = process::run_serve(&pg.url(), &[]).await;
    let (stdout, stderr) = output(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("cannot read the config"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable table meshlimit_config: \
             PostgreSQL: cannot connect",
            pg.port
        )),
        "{stderr}"
    );

    let ml = serve(&pg.url(), &["--start-without-config"]).await;
    for _ in 0..3 {
        assert!(
            allowed(&ml, shop("a", 1)).await,
            "no config: everything allowed"
        );
    }
    assert!(rlconfig(&ml).await.contains("no config loaded yet"));
    last_load_failed(&ml, 1, 10).await;

    pg.start_server(true);
    // Up, but no table yet: still no config, and `validate` says what to do.
    let out = process::run(&["validate", "--config", &pg.url()]).await;
    let (stdout, stderr) = output(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains(
            "PostgreSQL: cannot read the table: db error: ERROR: relation \"meshlimit_config\" \
             does not exist (create it with `meshlimit db init --config <URL>`)"
        ),
        "{stderr}"
    );
    assert!(allowed(&ml, shop("a", 1)).await);
    table(&pg, &[("shop", ONE_A_DAY)]).await;
    until_one_a_day(&ml, "late", RECONNECTED).await;
    last_load_failed(&ml, 0, 10).await;
    ml.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_must_hold_the_domain_it_is_filed_under() {
    let pg = Postgres::start();
    table(&pg, &[("orders", ONE_A_DAY)]).await;
    let expected = "postgres:meshlimit_config/orders: the row's domain column is 'orders' but \
                    its YAML says domain: shop; they must be the same";

    let out = process::run(&["validate", "--config", &pg.url()]).await;
    let (stdout, stderr) = output(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(stderr.contains(expected), "{stderr}");

    // At startup, refused like an invalid file.
    let out = process::run_serve(&pg.url(), &[]).await;
    let (stdout, stderr) = output(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains(expected), "{stderr}");

    // While serving, rejected like any invalid row.
    pg.put(TABLE, "orders", "domain: orders\n").await;
    let ml = serve(&pg.url(), &[]).await;
    pg.put(TABLE, "orders", ONE_A_DAY).await;
    last_load_failed(&ml, 1, 10).await;
    assert!(rlconfig(&ml).await.contains(expected));
    ml.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_by_sslmode() {
    let pg = Postgres::start_tls_only();
    pg.sql(&format!(
        "CREATE TABLE {TABLE} (domain text PRIMARY KEY, config text NOT NULL)"
    ))
    .await;
    pg.put(TABLE, "shop", ONE_A_DAY).await;
    let url = |mode: &str| {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode={mode}",
            pg.port
        )
    };
    let validate = |mode: &str, ca: Option<&std::path::Path>| {
        let mut command = process::command(&["validate", "--config", &url(mode)]);
        if let Some(ca) = ca {
            command.env("SSL_CERT_FILE", ca);
        }
        async move {
            let out = command.output().await.expect("running meshlimit");
            let (stdout, stderr) = output(&out);
            (out.status.success(), format!("{stdout}{stderr}"))
        }
    };
    // The server takes TLS only: without it, refused.
    let (ok, text) = validate("disable", None).await;
    assert!(!ok && text.contains("no encryption"), "{text}");
    // prefer: TLS, the certificate not verified (libpq's prefer).
    let (ok, text) = validate("prefer", None).await;
    assert!(ok && text.contains("OK (1 domains, 1 rules)"), "{text}");
    // require: the certificate must chain to a trusted root.
    let (ok, text) = validate("require", None).await;
    assert!(
        !ok && text.contains("invalid peer certificate: UnknownIssuer"),
        "{text}"
    );
    let (ok, text) = validate("require", Some(&pg.ca())).await;
    assert!(ok && text.contains("OK (1 domains, 1 rules)"), "{text}");
}
