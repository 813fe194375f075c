//! The Redis test harness itself (`tests/support/redis.rs`): servers, a cluster and a
//! sentinel setup come up as real processes on their own loopback ports, answer, restart,
//! fail over, and go away when dropped; a shared server is started once and emptied for
//! each turn; and they are the server (Redis or Valkey) the run asked for.

mod support;

use std::collections::BTreeSet;
use std::net::TcpStream;
use std::process::Command;

use support::redis::flavor::{Flavor, VARIABLE};
use support::redis::{RedisCluster, RedisSentinel, RedisServer, Shared};

#[test]
fn server_answers_restarts_empty_on_the_same_port_and_dies_on_drop() {
    let mut server = RedisServer::start();
    assert_eq!(server.addr(), format!("127.0.0.1:{}", server.port()));
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert!(server.dir().is_dir());
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(server.cli(&["SET", "greeting", "hello"]), "OK");
    assert_eq!(server.cli(&["GET", "greeting"]), "hello");

    let port = server.port();
    server.kill();
    assert!(!server.is_running());
    assert!(
        server.try_cli(&["PING"]).is_err(),
        "a killed server answers"
    );
    server.kill(); // idempotent

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(server.cli(&["EXISTS", "greeting"]), "0", "no persistence");

    // Restarting a running server works too.
    server.restart();
    assert_eq!(server.cli(&["PING"]), "PONG");

    let (addr, dir) = (server.addr(), server.dir().to_path_buf());
    drop(server);
    assert!(TcpStream::connect(&addr).is_err(), "{addr} still accepts");
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

#[test]
fn password_protected_server_requires_auth() {
    let mut server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    assert_eq!(server.password(), Some("s3cret"));
    assert!(
        server.cli_as(None, &["PING"]).starts_with("NOAUTH"),
        "PING without AUTH was accepted"
    );
    assert!(server.cli_as(None, &["GET", "k"]).starts_with("NOAUTH"));
    // `cli` authenticates with the server's password, before and after a restart.
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(server.cli_as(Some("s3cret"), &["SET", "k", "v"]), "OK");
    server.restart();
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert!(server.cli_as(None, &["PING"]).starts_with("NOAUTH"));
}

#[test]
fn unix_socket_server_answers_on_its_socket() {
    let server = RedisServer::start_unix();
    let socket = server.unix_socket().expect("started with a unix socket");
    assert_eq!(socket, server.dir().join("redis.sock"));
    let output = Command::new(Flavor::chosen().cli())
        .arg("-s")
        .arg(&socket)
        .arg("PING")
        .output()
        .expect("the command-line client runs");
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "PONG");
    assert_eq!(server.cli(&["PING"]), "PONG", "TCP still works");
    assert_eq!(RedisServer::start().unix_socket(), None);
}

#[test]
fn parallel_starts_get_distinct_ports_and_dirs() {
    let servers: Vec<RedisServer> = std::thread::scope(|scope| {
        let starts: Vec<_> = (0..6).map(|_| scope.spawn(RedisServer::start)).collect();
        starts.into_iter().map(|s| s.join().unwrap()).collect()
    });
    let ports: BTreeSet<u16> = servers.iter().map(RedisServer::port).collect();
    let dirs: BTreeSet<_> = servers.iter().map(|s| s.dir().to_path_buf()).collect();
    assert_eq!(ports.len(), servers.len());
    assert_eq!(dirs.len(), servers.len());
    for (i, server) in servers.iter().enumerate() {
        // Each server is its own: a key set in one is absent from the others.
        assert_eq!(server.cli(&["SET", "who", &i.to_string()]), "OK");
    }
    for (i, server) in servers.iter().enumerate() {
        assert_eq!(server.cli(&["GET", "who"]), i.to_string());
    }
}

#[test]
fn cluster_of_three_masters_is_ok_and_spreads_keys() {
    let cluster = RedisCluster::start(3);
    assert_eq!(cluster.nodes.len(), 3);
    let addrs: Vec<String> = cluster.nodes.iter().map(RedisServer::addr).collect();
    assert_eq!(
        cluster.url(),
        format!("redis+cluster://{}", addrs.join(","))
    );
    for node in &cluster.nodes {
        let info = node.cli(&["CLUSTER", "INFO"]);
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
    }

    let mut per_node = [0usize; 3];
    for i in 0..100 {
        per_node[cluster.node_for_key(&format!("key:{i}"))] += 1;
    }
    assert!(
        per_node.iter().all(|&n| n > 0),
        "keys per node: {per_node:?}"
    );

    // node_for_key names the node that accepts the key (others answer MOVED), and hash
    // tags keep related keys together.
    for key in ["alpha", "beta", "gamma", "{user:1}:a", "{user:1}:b"] {
        let owner = cluster.node_for_key(key);
        assert_eq!(cluster.nodes[owner].cli(&["SET", key, "1"]), "OK", "{key}");
        let other = &cluster.nodes[(owner + 1) % 3];
        assert!(other.cli(&["SET", key, "1"]).starts_with("MOVED"), "{key}");
    }
    assert_eq!(
        cluster.node_for_key("{user:1}:a"),
        cluster.node_for_key("{user:1}:b")
    );
}

#[test]
fn sentinel_setup_fails_over_to_the_replica_and_back() {
    let mut setup = RedisSentinel::start();
    let addrs: Vec<String> = setup.sentinels.iter().map(RedisServer::addr).collect();
    assert_eq!(
        setup.url(),
        format!("redis+sentinel://{}/{}", addrs.join(","), setup.name)
    );
    assert_eq!(setup.master_addr(), setup.master.addr());
    assert_eq!(setup.current_master().port(), setup.master.port());
    assert_eq!(setup.master.cli(&["SET", "k", "v"]), "OK");
    assert_eq!(setup.master.cli(&["WAIT", "1", "5000"]), "1");
    assert_eq!(setup.replica.cli(&["GET", "k"]), "v");

    setup.fail_over();
    assert_eq!(setup.master_addr(), setup.replica.addr());
    assert_eq!(setup.current_master().port(), setup.replica.port());
    assert!(!setup.master.is_running(), "the old master stays down");
    assert!(setup.replica.cli(&["ROLE"]).starts_with("master"));
    assert_eq!(
        setup.replica.cli(&["GET", "k"]),
        "v",
        "the replica had the data"
    );

    setup.restart_old_master();
    assert!(setup.master.cli(&["ROLE"]).starts_with("slave"));
    assert_eq!(
        setup.master.cli(&["GET", "k"]),
        "v",
        "resynced from the new master"
    );

    setup.fail_over();
    assert_eq!(setup.master_addr(), setup.master.addr());
    assert_eq!(setup.current_master().port(), setup.master.port());
}

/// The server of `a_shared_server_is_started_once_and_emptied_for_each_turn`.
static SHARED: Shared<RedisServer> = Shared::new();

#[test]
fn a_shared_server_is_started_once_and_emptied_for_each_turn() {
    let port = {
        let turn = SHARED.take();
        assert_eq!(turn.deployment.cli(&["SET", "left", "behind"]), "OK");
        turn.deployment.port()
    };
    let turn = SHARED.take();
    assert_eq!(turn.deployment.port(), port, "the same server");
    assert_eq!(turn.deployment.cli(&["EXISTS", "left"]), "0", "emptied");
    // A second turn on the same thread would wait for itself: it fails instead.
    let nested = std::panic::catch_unwind(|| SHARED.take().deployment.port());
    assert!(nested.is_err(), "a nested turn was handed out");
    drop(turn);
    assert_eq!(SHARED.take().deployment.port(), port);
}

#[test]
fn every_server_is_the_flavor_the_run_asked_for() {
    let server = RedisServer::start();
    let info = server.cli(&["INFO", "server"]);
    let (answered, version) = Flavor::of_info(&info).unwrap();
    assert_eq!(answered, Flavor::chosen(), "{info}");
    assert!(!version.is_empty());
    // The check tells the two apart on a real server's answer, not only on the texts below.
    let other = match answered {
        Flavor::Redis => Flavor::Valkey,
        Flavor::Valkey => Flavor::Redis,
    };
    let refused = other.check(&info).unwrap_err();
    assert!(
        refused.contains(&format!("{answered:?} {version} answered")),
        "{refused}"
    );
}

/// `INFO server` as each flavor answers it (Redis 7.0.15 from Debian 12, Valkey 8.0.1 from
/// its backports), cut to the fields that tell them apart.
#[test]
fn info_server_tells_redis_and_valkey_apart() {
    let redis = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nprocess_id:7\r\n";
    let valkey = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
                  valkey_version:8.0.1\r\nprocess_id:7\r\n";
    assert_eq!(
        Flavor::of_info(redis),
        Ok((Flavor::Redis, "7.0.15".to_string()))
    );
    assert_eq!(
        Flavor::of_info(valkey),
        Ok((Flavor::Valkey, "8.0.1".to_string()))
    );
    assert!(Flavor::Redis.check(redis).is_ok());
    assert!(Flavor::Valkey.check(valkey).is_ok());
    assert!(Flavor::Valkey.check(redis).is_err());
    assert!(Flavor::Redis.check(valkey).is_err());
    // Something else that speaks the protocol is neither.
    assert!(Flavor::of_info("# Server\r\nserver_name:other\r\nredis_version:7.2.4\r\n").is_err());
    assert!(Flavor::of_info("# Server\r\n").is_err());
}

#[test]
fn the_variable_names_redis_or_valkey_and_nothing_else() {
    assert_eq!(Flavor::named(""), Some(Flavor::Redis));
    assert_eq!(Flavor::named("redis"), Some(Flavor::Redis));
    assert_eq!(Flavor::named("valkey"), Some(Flavor::Valkey));
    assert_eq!(Flavor::named("valkey-server"), None);
    assert_eq!(Flavor::named("Valkey"), None);
    assert_eq!(Flavor::Valkey.server(), "valkey-server");
    assert_eq!(Flavor::Valkey.cli(), "valkey-cli");
    assert_eq!(Flavor::Valkey.sentinel(), "valkey-sentinel");
}

/// CI (`scripts/test.sh`) runs the Redis suites a second time on Valkey under the variable
/// this harness reads: renamed on one side only, that run would test Redis twice.
#[test]
fn the_test_script_runs_the_redis_suites_on_valkey_too() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/test.sh");
    let script = std::fs::read_to_string(path).unwrap();
    let setting = format!("{VARIABLE}=valkey");
    assert!(script.contains(&setting), "{path} never sets {setting}");
}
