//! A Redis that forgot its buckets is noticed: the `meshlimit` binary on a real Redis
//! restarted under it says so once per restart, in its log and in
//! `meshlimit_redis_restarts_total`; a reconnect to the same server says nothing, and a
//! restart that kept the keys (AOF), or a Sentinel failover to a synced replica, says only
//! that; a Cluster master restarted in place is counted on its own node.

mod support;

use support::process::Meshlimit;
use support::redis::{RedisCluster, RedisSentinel, RedisServer};
use tempfile::TempDir;

const LIMITS: &str = "
domain: restarts
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 5}
";

/// The marker meshlimit keeps on a single server (no `--redis-key-prefix`).
const MARKER: &str = "ml1:alive{0}";

/// What the warning of a restart that lost the keys says.
const LOST_LINE: &str = "Redis restarted without its keys";

/// What the line of a restart that kept them says.
const KEPT_LINE: &str = "Redis is another server now";

/// Bound on meshlimit noticing anything: its checks run once a second.
const NOTICE_SECS: u64 = 20;

fn config() -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("restarts.yaml"), LIMITS).expect("writing the config");
    dir
}

/// meshlimit on `redis`, once it has read the server for the first time (its marker is
/// written then).
async fn serve_on(redis: &RedisServer) -> Meshlimit {
    serve_at(&redis.url(), redis).await
}

/// meshlimit on the Redis at `url`, once it has read `server` (the one `url` leads to)
/// for the first time.
async fn serve_at(url: &str, redis: &RedisServer) -> Meshlimit {
    let config = config();
    let process = Meshlimit::start_on_redis(config.path(), url, "error", 1000, &[]).await;
    support::eventually(NOTICE_SECS, "the marker written", || {
        redis.cli(&["EXISTS", MARKER]) == "1"
    })
    .await;
    process
}

/// `meshlimit_redis_restarts_total` of the node at `url`: (lost, kept).
async fn restarts(process: &Meshlimit, url: &str) -> (f64, f64) {
    let (status, metrics) = support::http_get(process.http, "/metrics").await;
    assert_eq!(status, 200, "{metrics}");
    let count = |buckets: &str| {
        let name =
            format!("meshlimit_redis_restarts_total{{node=\"{url}\",buckets=\"{buckets}\"}}");
        support::sample(&metrics, &name)
            .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
            .parse::<f64>()
            .expect("a number")
    };
    (count("lost"), count("kept"))
}

/// Lines of the process' log containing `text`.
fn lines(process: &Meshlimit, text: &str) -> usize {
    process.log().lines().filter(|l| l.contains(text)).count()
}

/// Waits until meshlimit has read the server again (deleting its marker, which only that
/// reading writes back): every reading before has been counted.
async fn read_again(redis: &RedisServer) {
    read_again_by(redis, MARKER).await;
}

/// [`read_again`] for a server whose marker is `key`.
async fn read_again_by(redis: &RedisServer, key: &str) {
    // The reading that counted a restart writes the marker just after.
    support::eventually(NOTICE_SECS, "the marker written", || {
        redis.cli(&["EXISTS", key]) == "1"
    })
    .await;
    assert_eq!(redis.cli(&["DEL", key]), "1");
    support::eventually(NOTICE_SECS, "the marker written again", || {
        redis.cli(&["EXISTS", key]) == "1"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_without_persistence_is_logged_and_counted_once_per_restart() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let process = serve_on(&redis).await;
    assert_eq!(restarts(&process, &url).await, (0.0, 0.0));

    // A reconnect to the same server is no restart.
    let killed = redis.cli(&["CLIENT", "KILL", "TYPE", "normal"]);
    assert_ne!(killed, "0", "meshlimit had no connection to kill");
    read_again(&redis).await;
    assert_eq!(restarts(&process, &url).await, (0.0, 0.0));
    assert_eq!(lines(&process, LOST_LINE), 0, "{}", process.log());

    for n in 1..=2 {
        redis.restart();
        support::eventually_async(NOTICE_SECS, "the restart counted", || async {
            restarts(&process, &url).await.0 >= f64::from(n)
        })
        .await;
        // Once: later readings of the same server add nothing.
        read_again(&redis).await;
        assert_eq!(restarts(&process, &url).await, (f64::from(n), 0.0));
        let log = process.log();
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains(LOST_LINE)).collect();
        assert_eq!(warnings.len(), n as usize, "{log}");
        let last = warnings[warnings.len() - 1];
        for said in [
            "WARN",
            url.as_str(),
            "old_run_id=",
            "new_run_id=",
            "every limit on this node restarted from full",
        ] {
            assert!(last.contains(said), "{said:?} missing from {last}");
        }
    }
    assert_eq!(lines(&process, KEPT_LINE), 0, "{}", process.log());
    assert!(process.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_with_its_append_only_file_kept_its_keys_and_says_only_that() {
    let mut redis = RedisServer::start_with(&["--appendonly", "yes"]);
    let url = redis.url();
    let process = serve_on(&redis).await;
    // The marker is in the append-only file once Redis wrote it there (it does before
    // its next reply); a bounded wait rather than a guess of when.
    support::eventually(NOTICE_SECS, "the marker in the AOF", || {
        aof_holds(&redis, MARKER)
    })
    .await;
    redis.restart();
    assert_eq!(
        redis.cli(&["EXISTS", MARKER]),
        "1",
        "the AOF was not loaded"
    );
    support::eventually_async(NOTICE_SECS, "the restart counted", || async {
        restarts(&process, &url).await.1 >= 1.0
    })
    .await;
    read_again(&redis).await;
    assert_eq!(restarts(&process, &url).await, (0.0, 1.0));
    assert_eq!(lines(&process, KEPT_LINE), 1, "{}", process.log());
    assert_eq!(lines(&process, LOST_LINE), 0, "{}", process.log());
    assert!(process.terminate().await.success());
}

/// Whether a file of `redis`' append-only files (Redis 7 keeps them in a directory, older
/// ones in one file) names `key`.
fn aof_holds(redis: &RedisServer, key: &str) -> bool {
    let mut files = vec![redis.dir().join("appendonly.aof")];
    if let Ok(dir) = std::fs::read_dir(redis.dir().join("appendonlydir")) {
        files.extend(dir.flatten().map(|e| e.path()));
    }
    files.iter().any(|f| {
        std::fs::read(f).is_ok_and(|bytes| bytes.windows(key.len()).any(|w| w == key.as_bytes()))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_to_a_synced_replica_kept_the_keys_and_says_only_that() {
    let mut setup = RedisSentinel::start();
    let url = setup.url();
    let process = serve_at(&url, setup.current_master()).await;
    support::eventually(NOTICE_SECS, "the marker replicated", || {
        setup.current_replica().cli(&["EXISTS", MARKER]) == "1"
    })
    .await;
    // Blocks this test's thread only: meshlimit runs in its own process.
    setup.fail_over();
    support::eventually_async(NOTICE_SECS, "the failover counted", || async {
        restarts(&process, &url).await.1 >= 1.0
    })
    .await;
    read_again(setup.current_master()).await;
    assert_eq!(restarts(&process, &url).await, (0.0, 1.0));
    let log = process.log();
    let kept: Vec<&str> = log.lines().filter(|l| l.contains(KEPT_LINE)).collect();
    assert_eq!(kept.len(), 1, "{log}");
    assert!(kept[0].contains(&url), "{}", kept[0]);
    assert_eq!(lines(&process, LOST_LINE), 0, "{log}");
    assert!(process.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_restarted_without_persistence_is_counted_on_its_node_alone() {
    let mut cluster = RedisCluster::start(3);
    let config = config();
    let process =
        Meshlimit::start_on_redis(config.path(), &cluster.url(), "error", 1000, &[]).await;
    // Each master's marker, in one of its own slots.
    let mut markers = Vec::new();
    for node in &cluster.nodes {
        let mut found = Vec::new();
        support::eventually(NOTICE_SECS, "a marker on every master", || {
            found = node
                .cli(&["--scan", "--pattern", "ml1:alive*"])
                .lines()
                .map(str::to_string)
                .collect();
            !found.is_empty()
        })
        .await;
        assert_eq!(found.len(), 1, "{found:?} on {}", node.addr());
        markers.push(found.remove(0));
    }

    cluster.nodes[0].restart();
    let restarted = cluster.nodes[0].addr();
    support::eventually_async(NOTICE_SECS, "the restart counted", || async {
        restarts(&process, &restarted).await.0 >= 1.0
    })
    .await;
    read_again_by(&cluster.nodes[0], &markers[0]).await;
    for (i, node) in cluster.nodes.iter().enumerate() {
        let lost = if i == 0 { 1.0 } else { 0.0 };
        assert_eq!(
            restarts(&process, &node.addr()).await,
            (lost, 0.0),
            "node {i}"
        );
    }
    let log = process.log();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(LOST_LINE)).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(warnings[0].contains(&restarted), "{}", warnings[0]);
    assert!(process.terminate().await.success());
}
