//! Real Redis processes for the integration tests: standalone servers, clusters and
//! sentinel setups. Every process belongs to the test that started it, listens on its own
//! free loopback port (127.0.0.1 only), works in its own temporary directory and is
//! killed (SIGKILL) when its guard is dropped.
//!
//! Everything is blocking (`std::process`) and bounded in time: a wait that does not
//! finish panics with what it last saw. The helpers are safe to call from parallel tests
//! and from inside `#[tokio::test]` functions, where they block that test's thread while
//! the processes come up (milliseconds for a server, seconds for a cluster or a sentinel
//! setup). A missing Redis installation fails the test; it is never skipped.
//!
//! Redis or Valkey: the binaries are those of the [`Flavor`] the test run chose
//! (`MESHLIMIT_TEST_REDIS_SERVER`), and every process must prove in `INFO server` that it is
//! that flavor (see `redis/flavor.rs`).

pub mod flavor;

use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use self::flavor::Flavor;

/// Bound on a process answering PING after it was spawned.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on one `redis-cli` run (including `--cluster create`).
const CLI_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on a cluster or a sentinel setup converging, and on a failover.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Poll interval for a single process coming up.
const FAST_POLL: Duration = Duration::from_millis(10);
/// Poll interval for multi-process states, each poll running several `redis-cli`.
const SLOW_POLL: Duration = Duration::from_millis(50);
/// What [`RedisServer::start_with_little_memory`] lets a server use beyond its own start:
/// room for the clients and the scripts, filled by a thousand keys.
const MEMORY_ROOM: u64 = 1 << 20;
/// Log file (stdout and stderr) of every process, in its directory.
const LOG_FILE: &str = "redis.log";
/// Arguments of a cluster node, on top of the standalone ones.
const CLUSTER_ARGS: [&str; 6] = [
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "2000",
];

/// A `redis-server` (or sentinel, or their Valkey twins) process of this test, on its own
/// loopback port and in its own temporary working directory (which also holds its log,
/// `redis.log`). Killed when dropped.
pub struct RedisServer {
    program: &'static str,
    /// Everything after the program name; `restart` runs exactly this again.
    argv: Vec<String>,
    port: u16,
    /// The `--requirepass` value, which [`RedisServer::cli`] authenticates with.
    cli_auth: Option<String>,
    child: Option<Child>,
    dir: TempDir,
}

impl RedisServer {
    /// A standalone server without persistence
    /// (`--save '' --appendonly no --bind 127.0.0.1 --port P`), answering PING.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// [`RedisServer::start`] with extra arguments appended (later ones win), e.g.
    /// `["--requirepass", "s3cret"]` or `["--unixsocket", path]`.
    pub fn start_with(args: &[&str]) -> RedisServer {
        Self::launch(Flavor::chosen().server(), |port, _dir| {
            let mut argv = standalone_argv(port);
            argv.extend(args.iter().map(|a| a.to_string()));
            argv
        })
    }

    /// A standalone server that refuses writes (`OOM`, `--maxmemory-policy noeviction`)
    /// once it holds [`MEMORY_ROOM`] more than when it started, for
    /// [`RedisServer::fill_memory`]. The cap is set from what the server itself reports
    /// using, not a fixed figure: Valkey 8 starts at about 0.93 MB, Redis 7.0 at 0.88 MB,
    /// and a fixed `maxmemory 1mb` leaves Valkey too little to load the scripts.
    pub fn start_with_little_memory() -> RedisServer {
        let server = Self::start_with(&["--maxmemory-policy", "noeviction"]);
        let password = server.cli_auth.as_deref();
        let info = query(server.port, password, &[&["INFO", "memory"]])
            .unwrap_or_else(|e| panic!("INFO memory on {}: {e}", server.addr()));
        let used: u64 = info_field(&info[0], "used_memory")
            .and_then(|bytes| bytes.parse().ok())
            .unwrap_or_else(|| panic!("INFO memory without used_memory: {}", info[0]));
        let cap = (used + MEMORY_ROOM).to_string();
        query(
            server.port,
            password,
            &[&["CONFIG", "SET", "maxmemory", &cap]],
        )
        .unwrap_or_else(|e| panic!("CONFIG SET maxmemory on {}: {e}", server.addr()));
        server
    }

    /// A standalone server that also listens on `<dir>/redis.sock` (mode 700); see
    /// [`RedisServer::unix_socket`].
    pub fn start_unix() -> RedisServer {
        Self::launch(Flavor::chosen().server(), |port, dir| {
            let mut argv = standalone_argv(port);
            let socket = dir.join("redis.sock").display().to_string();
            argv.extend(strings(&[
                "--unixsocket",
                &socket,
                "--unixsocketperm",
                "700",
            ]));
            argv
        })
    }

    /// A sentinel on its own port watching `name` at `127.0.0.1:master_port` with quorum 2,
    /// its config file (which it rewrites) in its own directory.
    fn start_sentinel(name: &str, master_port: u16) -> RedisServer {
        Self::launch(Flavor::chosen().sentinel(), |port, dir| {
            let conf = dir.join("sentinel.conf");
            let text = format!(
                "port {port}\n\
                 bind 127.0.0.1\n\
                 dir {dir}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 5000\n",
                dir = dir.display(),
            );
            fs::write(&conf, text).unwrap_or_else(|e| panic!("writing {}: {e}", conf.display()));
            vec![conf.display().to_string()]
        })
    }

    /// Starts `program` with the arguments `make_argv(port, dir)` for a fresh port and
    /// directory, and waits until it answers PING. Tries again elsewhere if another
    /// process took the port between our probe and the server's bind.
    fn launch(program: &'static str, make_argv: impl Fn(u16, &Path) -> Vec<String>) -> RedisServer {
        require(Flavor::chosen().server());
        require(Flavor::chosen().cli());
        require(program);
        const ATTEMPTS: usize = 5;
        for _ in 0..ATTEMPTS {
            if let Ok(server) = Self::launch_at(reserve_port(), program, &make_argv) {
                return server;
            }
        }
        panic!("{program}: the port was taken by another process {ATTEMPTS} times in a row");
    }

    /// [`RedisServer::start`] on `port`, which must be free: the port a manifest names,
    /// in a network namespace of the test's own (`support::netns`).
    pub fn start_on(port: u16) -> RedisServer {
        let server = require(Flavor::chosen().server());
        require(Flavor::chosen().cli());
        Self::launch_at(port, server, &|port, _: &Path| standalone_argv(port))
            .unwrap_or_else(|_| panic!("redis-server: port {port} is taken"))
    }

    /// Starts `program` with the arguments `make_argv(port, dir)` for `port` and a fresh
    /// directory, and waits until it answers PING; `Err` when the port was taken.
    fn launch_at(
        port: u16,
        program: &'static str,
        make_argv: &impl Fn(u16, &Path) -> Vec<String>,
    ) -> Result<RedisServer, PortTaken> {
        let dir = tempfile::Builder::new()
            .prefix("meshlimit-redis-")
            .tempdir()
            .expect("creating a temporary directory for a Redis process");
        let argv = make_argv(port, dir.path());
        let mut server = RedisServer {
            program,
            cli_auth: flag_value(&argv, "--requirepass").map(str::to_string),
            argv,
            port,
            child: None,
            dir,
        };
        server.spawn()?;
        Ok(server)
    }

    /// Spawns the process on `self.port` and waits until it, and not some other process,
    /// answers PING there. `Err` when the port turned out to be in use.
    fn spawn(&mut self) -> Result<(), PortTaken> {
        let log_path = self.dir.path().join(LOG_FILE);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", log_path.display()));
        let log_start = log.metadata().map_or(0, |m| m.len() as usize);
        let child = Command::new(self.program)
            .args(&self.argv)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("duplicating the log file handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {}: {e}; install it: `{}`",
                    self.program,
                    Flavor::chosen().install()
                )
            });
        let pid = child.id();
        self.child = Some(child);
        let started = now();
        loop {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                let log = self.log();
                let new = log.get(log_start..).unwrap_or(&log);
                if new.contains("Address already in use") {
                    return Err(PortTaken);
                }
                panic!(
                    "{} on port {} exited with {status} while starting; its log:\n{}",
                    self.program,
                    self.port,
                    tail(new),
                );
            }
            let last = match ping(self.port, self.cli_auth.as_deref()) {
                Ok((answered, info)) if answered == pid => {
                    // Ours; and it must be the server this run asked for, or a Valkey run
                    // would pass on Redis alone.
                    if let Err(e) = Flavor::chosen().check(&info) {
                        panic!("{} on port {}: {e}", self.program, self.port);
                    }
                    return Ok(());
                }
                Ok((other, _)) => format!(
                    "port {} is answered by another process ({other})",
                    self.port
                ),
                Err(e) => e,
            };
            if started.elapsed() > START_TIMEOUT {
                panic!(
                    "{} on port {} did not answer PING within {START_TIMEOUT:?} ({last}); its log:\n{}",
                    self.program,
                    self.port,
                    tail(&self.log()),
                );
            }
            thread::sleep(FAST_POLL);
        }
    }

    /// Its TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:P"`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `"redis://127.0.0.1:P"` (without the password, see [`RedisServer::password`]).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its working directory (a temporary directory removed on drop).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The `--requirepass` it was started with.
    pub fn password(&self) -> Option<&str> {
        self.cli_auth.as_deref()
    }

    /// The `--unixsocket` it was started with (see [`RedisServer::start_unix`]).
    pub fn unix_socket(&self) -> Option<PathBuf> {
        flag_value(&self.argv, "--unixsocket").map(|path| self.dir.path().join(path))
    }

    /// Everything the process (and its earlier incarnations) wrote to stdout and stderr.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default()
    }

    /// Runs `redis-cli -h 127.0.0.1 -p P [-a password] args...` (`valkey-cli` on Valkey)
    /// and returns its trimmed stdout. Panics when the client fails (e.g. cannot connect);
    /// note that error replies such as `ERR ...` or `NOAUTH ...` are printed, not failures.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`RedisServer::cli`] returning the failure instead of panicking (for polling, or a
    /// server that is meant to be down).
    pub fn try_cli(&self, args: &[&str]) -> Result<String, String> {
        run(
            &mut self.cli_command(self.cli_auth.as_deref(), args),
            CLI_TIMEOUT,
        )
    }

    /// [`RedisServer::cli`] authenticating with `password` (`None`: not at all) instead of
    /// the server's own password.
    pub fn cli_as(&self, password: Option<&str>, args: &[&str]) -> String {
        run(&mut self.cli_command(password, args), CLI_TIMEOUT).unwrap_or_else(|e| panic!("{e}"))
    }

    fn cli_command(&self, password: Option<&str>, args: &[&str]) -> Command {
        let mut command = Command::new(require(Flavor::chosen().cli()));
        command.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(password) = password {
            command.args(["--no-auth-warning", "-a", password]);
        }
        command.args(args);
        command
    }

    /// Deletes every key in every database (`FLUSHALL`), over a plain connection.
    pub fn flush(&self) {
        query(self.port, self.cli_auth.as_deref(), &[&["FLUSHALL"]])
            .unwrap_or_else(|e| panic!("FLUSHALL on {}: {e}", self.addr()));
    }

    /// Writes 1 KiB keys (`fill:N`) over one connection until the server refuses one with
    /// `OOM` (it must run with a `--maxmemory` and `--maxmemory-policy noeviction`, as
    /// [`RedisServer::start_with_little_memory`] does), then lowers `maxmemory` to what the
    /// server used before the keys: refused at the cap, a server is over it by a few
    /// KiB only, which the buffers it frees on its own (a client's, a second later) can
    /// take back, letting writes in again; a full cap of keys over it cannot. Returns the
    /// connection, for the caller to keep open while Redis must stay full. Panics after
    /// 100,000 keys or on any other failure.
    pub fn fill_memory(&self) -> TcpStream {
        let fill = || -> io::Result<TcpStream> {
            let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
            let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            let mut reader = BufReader::new(stream.try_clone()?);
            let mut writer = stream.try_clone()?;
            let mut ask = |args: &[&str]| -> io::Result<String> {
                let mut request = format!("*{}\r\n", args.len());
                for arg in args {
                    request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
                }
                writer.write_all(request.as_bytes())?;
                read_reply(&mut reader)
            };
            if let Some(password) = &self.cli_auth {
                ask(&["AUTH", password])?;
            }
            let memory = ask(&["INFO", "memory"])?;
            let before = info_field(&memory, "used_memory")
                .ok_or_else(|| io::Error::other(format!("INFO memory: {memory}")))?
                .to_string();
            let value = "x".repeat(1024);
            for n in 0..100_000 {
                match ask(&["SET", &format!("fill:{n}"), &value]) {
                    Ok(_) => {}
                    Err(e) if e.to_string().contains("OOM") => {
                        ask(&["CONFIG", "SET", "maxmemory", &before])?;
                        return Ok(stream);
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(io::Error::other("100,000 keys of 1 KiB and no OOM"))
        };
        fill().unwrap_or_else(|e| panic!("filling {}: {e}", self.addr()))
    }

    /// Stops the process (SIGSTOP) without killing it: its port stays open but nothing
    /// answers, as with a host that hangs; callers time out instead of being refused.
    pub fn freeze(&mut self) {
        let pid = self.child.as_ref().expect("a running process").id();
        // The shell's own `kill`: no package to install for it.
        let status = Command::new("sh")
            .args(["-c", &format!("kill -STOP {pid}")])
            .status()
            .expect("running sh -c 'kill -STOP'");
        assert!(status.success(), "kill -STOP {pid}: {status}");
    }

    /// Lets a frozen process ([`RedisServer::freeze`]) run again (SIGCONT).
    pub fn thaw(&mut self) {
        let pid = self.child.as_ref().expect("a running process").id();
        let status = Command::new("sh")
            .args(["-c", &format!("kill -CONT {pid}")])
            .status()
            .expect("running sh -c 'kill -CONT'");
        assert!(status.success(), "kill -CONT {pid}: {status}");
    }

    /// Kills the process (SIGKILL) and reaps it; does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the process if it runs, then starts it again with the same arguments, on the
    /// same port and in the same directory, and waits until it answers PING. Without
    /// persistence the data is gone; a cluster node keeps its identity (`nodes.conf`).
    pub fn restart(&mut self) {
        self.kill();
        // Another process may hold the port for a moment; not for long.
        const PORT_WAIT: Duration = Duration::from_secs(5);
        let started = now();
        while self.spawn().is_err() {
            if started.elapsed() > PORT_WAIT {
                panic!(
                    "cannot restart {} on port {}: another process has held the port for {PORT_WAIT:?}",
                    self.program, self.port
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the process is alive (not killed, not exited).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Makes the next [`RedisServer::restart`] start it as a replica of `127.0.0.1:port`
    /// (`None`: as a master).
    fn set_replicaof(&mut self, port: Option<u16>) {
        if let Some(i) = self.argv.iter().position(|a| a == "--replicaof") {
            self.argv.drain(i..(i + 3).min(self.argv.len()));
        }
        if let Some(port) = port {
            self.argv
                .extend(strings(&["--replicaof", "127.0.0.1", &port.to_string()]));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster, one [`RedisServer`] per node (masters, and replicas if asked for).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `masters` (at least 3) cluster nodes joined by `redis-cli --cluster create`; returns
    /// once every node reports `cluster_state:ok`, all 16384 slots assigned and all nodes
    /// known.
    pub fn start(masters: usize) -> RedisCluster {
        Self::start_with_replicas(masters, 0)
    }

    /// [`RedisCluster::start`] with `replicas` replicas per master (`--cluster-replicas`),
    /// a 1 s `cluster-node-timeout` so that a dead master is failed over within seconds,
    /// and `cluster-require-full-coverage no`, so that the other masters keep serving
    /// their slots while a dead master's are uncovered (with `yes`, Redis itself answers
    /// CLUSTERDOWN for every slot until the failover); returns once the cluster is ok and
    /// every replica is synced with its master.
    pub fn start_with_replicas(masters: usize, replicas: usize) -> RedisCluster {
        assert!(
            masters >= 3,
            "redis-cli --cluster create needs at least 3 masters, asked for {masters}"
        );
        let started = now();
        let total = masters * (1 + replicas);
        let mut args = CLUSTER_ARGS.to_vec();
        if replicas > 0 {
            args.extend([
                "--cluster-node-timeout",
                "1000",
                "--cluster-require-full-coverage",
                "no",
                "--repl-diskless-sync-delay",
                "0",
            ]);
        }
        let nodes: Vec<RedisServer> = (0..total).map(|_| RedisServer::start_with(&args)).collect();
        let cluster = RedisCluster { nodes };
        let mut create = Command::new(require(Flavor::chosen().cli()));
        create.arg("--cluster").arg("create");
        create.args(cluster.nodes.iter().map(RedisServer::addr));
        create.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
        if let Err(e) = run(&mut create, CLI_TIMEOUT) {
            panic!("creating the cluster failed: {e}");
        }
        let known = total.to_string();
        wait_for(
            "every cluster node to report a full, ok cluster",
            SLOW_POLL,
            || {
                for node in &cluster.nodes {
                    let info = node.try_cli(&["CLUSTER", "INFO"])?;
                    let ok = info_field(&info, "cluster_state") == Some("ok")
                        && info_field(&info, "cluster_slots_assigned") == Some("16384")
                        && info_field(&info, "cluster_known_nodes") == Some(known.as_str());
                    if !ok {
                        return Err(format!("node {}: {info}", node.addr()));
                    }
                }
                Ok(())
            },
        );
        wait_for("every replica to sync with its master", SLOW_POLL, || {
            let mut synced = 0;
            for node in &cluster.nodes {
                let info = node.try_cli(&["INFO", "replication"])?;
                if info_field(&info, "role") == Some("slave") {
                    if info_field(&info, "master_link_status") != Some("up") {
                        return Err(format!("replica {}: {info}", node.addr()));
                    }
                    synced += 1;
                }
            }
            if synced == masters * replicas {
                Ok(())
            } else {
                Err(format!("{synced} replicas synced"))
            }
        });
        eprintln!(
            "redis harness: {masters}-master cluster with {replicas} replica(s) each up in {:?}",
            started.elapsed()
        );
        cluster
    }

    /// Indexes in `nodes` of the running nodes whose `ROLE` is master.
    pub fn masters(&mut self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i].is_running()
                    && self.nodes[i]
                        .try_cli(&["ROLE"])
                        .is_ok_and(|role| role.lines().next() == Some("master"))
            })
            .collect()
    }

    /// Waits (bounded) until a running node other than `dead` is the master of `key`'s
    /// slot, as that node and the cluster see it (`cluster_state:ok`), after `dead` was
    /// killed; returns its index.
    pub fn wait_for_promotion(&self, key: &str, dead: usize) -> usize {
        let started = now();
        let promoted = wait_for(
            "a replica to take over the dead master's slots",
            SLOW_POLL,
            || {
                let (slot, nodes) = self
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != dead)
                    .find_map(|(_, node)| {
                        let commands: [&[&str]; 2] =
                            [&["CLUSTER", "KEYSLOT", key], &["CLUSTER", "NODES"]];
                        query(node.port, node.cli_auth.as_deref(), &commands).ok()
                    })
                    .map(|replies| (replies[0].clone(), replies[1].clone()))
                    .ok_or("no live node answers")?;
                let slot: u16 = slot.parse().map_err(|_| format!("KEYSLOT {slot:?}"))?;
                // A failed master still lists its slots (flags `master,fail`): not it.
                let port = master_port_for_slot(&nodes, slot)
                    .ok_or_else(|| format!("no master for slot {slot}: {nodes}"))?;
                let index = self
                    .nodes
                    .iter()
                    .position(|n| n.port == port)
                    .ok_or_else(|| format!("port {port} is not ours"))?;
                if index == dead {
                    return Err(format!("slot {slot} is still the dead master's: {nodes}"));
                }
                let info = self.nodes[index].try_cli(&["CLUSTER", "INFO"])?;
                if info_field(&info, "cluster_state") != Some("ok") {
                    return Err(format!("new master {}: {info}", self.nodes[index].addr()));
                }
                Ok(index)
            },
        );
        eprintln!(
            "redis harness: cluster failover took {:?}",
            started.elapsed()
        );
        promoted
    }

    /// Deletes every key on every running master (`FLUSHALL`; replicas follow).
    pub fn flush(&self) {
        for node in &self.nodes {
            let info = query(
                node.port,
                node.cli_auth.as_deref(),
                &[&["INFO", "replication"]],
            )
            .unwrap_or_else(|e| panic!("INFO replication on {}: {e}", node.addr()));
            if info_field(&info[0], "role") == Some("master") {
                node.flush();
            }
        }
    }

    /// `"redis+cluster://127.0.0.1:P1,127.0.0.1:P2,..."`.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(RedisServer::addr).collect();
        format!("redis+cluster://{}", addrs.join(","))
    }

    /// Index in `nodes` of the master serving `key`'s slot, as the first node that answers
    /// sees it (`CLUSTER KEYSLOT`, `CLUSTER NODES`, sent over a plain connection: cheap
    /// enough to call for every key of a test).
    pub fn node_for_key(&self, key: &str) -> usize {
        let mut failures = Vec::new();
        let replies = self
            .nodes
            .iter()
            .find_map(|node| {
                let commands: [&[&str]; 2] = [&["CLUSTER", "KEYSLOT", key], &["CLUSTER", "NODES"]];
                query(node.port, node.cli_auth.as_deref(), &commands)
                    .map_err(|e| failures.push(e))
                    .ok()
            })
            .unwrap_or_else(|| panic!("no cluster node answers: {failures:?}"));
        let slot: u16 = replies[0]
            .parse()
            .unwrap_or_else(|_| panic!("CLUSTER KEYSLOT {key:?} answered {:?}", replies[0]));
        let port = master_port_for_slot(&replies[1], slot)
            .unwrap_or_else(|| panic!("no master serves slot {slot} in:\n{}", replies[1]));
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .unwrap_or_else(|| panic!("slot {slot} is served by port {port}, not one of ours"))
    }
}

/// A deployment (a server, a cluster) that the tests of one binary share instead of each
/// starting its own: the first test that asks starts it, and it runs until the test binary
/// exits (a `static` is never dropped, so a watchdog process kills it then, see
/// [`kill_after_exit`]). Tests take turns: each gets it emptied and for itself
/// alone, until it drops its [`Turn`]. Declare one per deployment as a `static`.
pub struct Shared<T: Deployment> {
    /// The deployment, once a test started it.
    deployment: OnceLock<T>,
    /// Whose turn it is: one test at a time, so that no test sees another's keys.
    turn: Mutex<()>,
    /// The thread holding the turn, to fail a test that asks twice instead of deadlocking.
    holder: Mutex<Option<ThreadId>>,
}

/// Real Redis processes that a [`Shared`] can hold.
pub trait Deployment: Send + Sync + 'static {
    /// Starts it (blocking until it answers).
    fn start() -> Self;
    /// Deletes every key.
    fn empty(&self);
    /// Its processes.
    fn servers(&self) -> Vec<&RedisServer>;
}

impl Deployment for RedisServer {
    fn start() -> Self {
        RedisServer::start()
    }
    fn empty(&self) {
        self.flush();
    }
    fn servers(&self) -> Vec<&RedisServer> {
        vec![self]
    }
}

/// Three masters, no replicas.
impl Deployment for RedisCluster {
    fn start() -> Self {
        RedisCluster::start(3)
    }
    fn empty(&self) {
        self.flush();
    }
    fn servers(&self) -> Vec<&RedisServer> {
        self.nodes.iter().collect()
    }
}

impl<T: Deployment> Shared<T> {
    /// No deployment yet.
    pub const fn new() -> Self {
        Self {
            deployment: OnceLock::new(),
            turn: Mutex::new(()),
            holder: Mutex::new(None),
        }
    }

    /// Waits for this test's turn, then hands out the deployment (starting it if it is the
    /// first turn) after emptying it. Panics if this thread holds a turn already: a test
    /// must drop its first turn (its first service) before asking for another.
    pub fn take(&'static self) -> Turn<T> {
        let me = thread::current().id();
        assert!(
            *lock(&self.holder) != Some(me),
            "this test holds a turn on the shared deployment already: drop it (the service \
             built on it) before asking for another"
        );
        let turn = lock(&self.turn);
        *lock(&self.holder) = Some(me);
        let deployment = self.deployment.get_or_init(|| {
            let deployment = T::start();
            kill_after_exit(&deployment.servers());
            deployment
        });
        deployment.empty();
        Turn {
            deployment,
            holder: &self.holder,
            _turn: turn,
        }
    }
}

impl<T: Deployment> Default for Shared<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// A test's turn on a [`Shared`] deployment; the next test's turn begins when it is dropped.
pub struct Turn<T: 'static> {
    /// The deployment, for this test alone while the turn lasts.
    pub deployment: &'static T,
    /// Cleared on drop (before the turn ends).
    holder: &'static Mutex<Option<ThreadId>>,
    /// The turn itself: the next one begins when this is released.
    _turn: MutexGuard<'static, ()>,
}

impl<T: 'static> Drop for Turn<T> {
    fn drop(&mut self) {
        *lock(self.holder) = None;
    }
}

/// Starts a watchdog (`sh`) that, once this test process is gone, kills `servers` (SIGKILL)
/// and removes their directories: for processes whose guards are never dropped.
fn kill_after_exit(servers: &[&RedisServer]) {
    let pids: Vec<String> = servers
        .iter()
        .map(|s| {
            s.child
                .as_ref()
                .expect("a running process")
                .id()
                .to_string()
        })
        .collect();
    let dirs: Vec<String> = servers
        .iter()
        .map(|s| format!("'{}'", s.dir().display()))
        .collect();
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 1; done; kill -9 {pids} 2>/dev/null; rm -rf {dirs}",
        me = std::process::id(),
        pids = pids.join(" "),
        dirs = dirs.join(" "),
    );
    // Never waited for: it outlives this process by design (init reaps it).
    #[allow(clippy::zombie_processes)]
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("running sh for a watchdog");
}

/// Locks `mutex`, ignoring poisoning: a test that panicked while holding it leaves nothing
/// half-done behind for the next one.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A master, one replica and three sentinels (quorum 2, down after 1 s).
pub struct RedisSentinel {
    /// The server started as master (it stays in this field after a failover).
    pub master: RedisServer,
    /// The server started as its replica.
    pub replica: RedisServer,
    pub sentinels: Vec<RedisServer>,
    /// The monitored master's name.
    pub name: String,
    /// Whether `replica` is the current master (after an odd number of failovers).
    swapped: bool,
}

impl RedisSentinel {
    /// Starts the master, the replica (synced) and the sentinels, and returns once every
    /// sentinel knows the master, the replica and the two other sentinels.
    pub fn start() -> RedisSentinel {
        let started = now();
        let name = "meshlimit".to_string();
        // No 5 s wait for more replicas before a (diskless) full sync, on either server:
        // either may be the master of the other.
        let sync_now = ["--repl-diskless-sync-delay", "0"];
        let master = RedisServer::start_with(&sync_now);
        let master_port = master.port.to_string();
        let mut replica_args = sync_now.to_vec();
        replica_args.extend(["--replicaof", "127.0.0.1", &master_port]);
        let replica = RedisServer::start_with(&replica_args);
        wait_for("the replica to sync with the master", FAST_POLL, || {
            replica_link_up(&replica, master.port)
        });
        // Started after the sync, so that their first INFO of the master lists the replica
        // (the next one would be 10 s later).
        let sentinels = (0..3)
            .map(|_| RedisServer::start_sentinel(&name, master.port))
            .collect();
        let setup = RedisSentinel {
            master,
            replica,
            sentinels,
            name,
            swapped: false,
        };
        wait_for(
            "every sentinel to know the master, the replica and the other sentinels",
            SLOW_POLL,
            || {
                for sentinel in &setup.sentinels {
                    let addr = sentinel_master_addr(sentinel, &setup.name)?;
                    if addr != setup.master.addr() {
                        return Err(format!("sentinel {} names {addr}", sentinel.addr()));
                    }
                    sentinel_knows_replica(sentinel, &setup.name, &setup.replica)?;
                    let others = sentinel.try_cli(&["SENTINEL", "SENTINELS", &setup.name])?;
                    let count = entries(&others).len();
                    if count != setup.sentinels.len() - 1 {
                        return Err(format!(
                            "sentinel {} knows {count} other sentinels",
                            sentinel.addr()
                        ));
                    }
                }
                Ok(())
            },
        );
        eprintln!(
            "redis harness: sentinel setup up in {:?}",
            started.elapsed()
        );
        setup
    }

    /// `"redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/NAME"`.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self.sentinels.iter().map(RedisServer::addr).collect();
        format!("redis+sentinel://{}/{}", addrs.join(","), self.name)
    }

    /// The master's address according to the first sentinel that answers
    /// (`SENTINEL get-master-addr-by-name`), `"127.0.0.1:P"`.
    pub fn master_addr(&self) -> String {
        let mut failures = Vec::new();
        for sentinel in &self.sentinels {
            match sentinel_master_addr(sentinel, &self.name) {
                Ok(addr) => return addr,
                Err(e) => failures.push(e),
            }
        }
        panic!("no sentinel names the master: {failures:?}");
    }

    /// The server that is master now.
    pub fn current_master(&self) -> &RedisServer {
        if self.swapped {
            &self.replica
        } else {
            &self.master
        }
    }

    /// The server that is (or, once restarted, will be) the replica now.
    pub fn current_replica(&self) -> &RedisServer {
        if self.swapped {
            &self.master
        } else {
            &self.replica
        }
    }

    /// Kills the current master and waits until every running sentinel names the other
    /// server as master, in its own record too (the failover over), and that server's ROLE
    /// says `master`. The killed server stays down (see
    /// [`RedisSentinel::restart_old_master`]).
    pub fn fail_over(&mut self) {
        let started = now();
        let (old, new) = if self.swapped {
            (&mut self.replica, &mut self.master)
        } else {
            (&mut self.master, &mut self.replica)
        };
        assert!(
            new.is_running(),
            "fail_over: the replica on port {} is down (call restart_old_master first)",
            new.port
        );
        old.kill();
        let (sentinels, name) = (&self.sentinels, &self.name);
        wait_for("the sentinels to promote the replica", SLOW_POLL, || {
            for sentinel in sentinels.iter() {
                let addr = sentinel_master_addr(sentinel, name)?;
                if addr != new.addr() {
                    return Err(format!("sentinel {} still names {addr}", sentinel.addr()));
                }
                // The address above is already the promoted one while the failover is in
                // progress; a sentinel has switched once its own record of the master has.
                sentinel_switched(sentinel, name, new)?;
            }
            let role = new.try_cli(&["ROLE"])?;
            match role.lines().next() {
                Some("master") => Ok(()),
                _ => Err(format!("{} answers ROLE with {role:?}", new.addr())),
            }
        });
        // Sentinels rewrite their config; do the same for the promoted server's argv, so a
        // restart keeps it master.
        new.set_replicaof(None);
        self.swapped = !self.swapped;
        eprintln!(
            "redis harness: sentinel failover took {:?}",
            started.elapsed()
        );
    }

    /// Restarts the master killed by [`RedisSentinel::fail_over`] as a replica of the
    /// current master (what the sentinels would otherwise reconfigure it to, seconds
    /// later), and waits until it is synced and every sentinel sees it as a healthy
    /// replica, so that another failover can promote it.
    pub fn restart_old_master(&mut self) {
        let started = now();
        let (old, current) = if self.swapped {
            (&mut self.master, &self.replica)
        } else {
            (&mut self.replica, &self.master)
        };
        assert!(
            !old.is_running(),
            "restart_old_master: port {} is running (call fail_over first)",
            old.port
        );
        old.set_replicaof(Some(current.port));
        old.restart();
        let old = &*old;
        wait_for("the old master to sync as a replica", FAST_POLL, || {
            replica_link_up(old, current.port)
        });
        wait_for(
            "every sentinel to see the old master as a replica",
            SLOW_POLL,
            || {
                for sentinel in &self.sentinels {
                    sentinel_knows_replica(sentinel, &self.name, old)?;
                }
                Ok(())
            },
        );
        eprintln!(
            "redis harness: old master back as a replica in {:?}",
            started.elapsed()
        );
    }
}

/// The process refused to start because its port was in use.
struct PortTaken;

/// The arguments of a standalone server on `port`.
fn standalone_argv(port: u16) -> Vec<String> {
    strings(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--bind",
        "127.0.0.1",
        "--port",
        &port.to_string(),
    ])
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// The value after the last `flag` in `argv`.
fn flag_value<'a>(argv: &'a [String], flag: &str) -> Option<&'a str> {
    let i = argv.iter().rposition(|a| a == flag)?;
    argv.get(i + 1).map(String::as_str)
}

/// The wall clock, for deadlines on real processes (the crate's code takes time from its
/// `Clock` instead, hence the lint).
#[allow(clippy::disallowed_methods)]
fn now() -> Instant {
    Instant::now()
}

/// Returns `program`, after checking once per test binary that it runs; panics with how
/// to install Redis otherwise.
fn require(program: &'static str) -> &'static str {
    static FOUND: Mutex<BTreeSet<&str>> = Mutex::new(BTreeSet::new());
    if FOUND
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(program)
    {
        return program;
    }
    let runs = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        runs,
        "`{program}` is missing (or does not run); these tests need real Redis processes: `{}`",
        Flavor::chosen().install()
    );
    FOUND
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(program);
    program
}

/// A loopback port P that is free, with P + 10000 (its cluster bus port) free too, and
/// neither handed out before by this test binary: ports are never reused, so parallel
/// tests cannot pick the same one between the probe and the server's bind.
fn reserve_port() -> u16 {
    static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    for _ in 0..1000 {
        let port = super::free_port();
        let Some(bus) = port.checked_add(10_000) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", bus)).is_err() {
            continue;
        }
        let mut taken = TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
        if taken.contains(&port) || taken.contains(&bus) {
            continue;
        }
        taken.insert(port);
        taken.insert(bus);
        return port;
    }
    panic!("found no free loopback port P with P + 10000 free in 1000 tries");
}

/// Polls `probe` every `every` until it returns `Ok`, panicking after
/// [`CONVERGE_TIMEOUT`] with `what` and the probe's last `Err`.
fn wait_for<T>(what: &str, every: Duration, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let started = now();
    loop {
        match probe() {
            Ok(value) => return value,
            Err(last) if started.elapsed() > CONVERGE_TIMEOUT => {
                panic!("timed out after {CONVERGE_TIMEOUT:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => thread::sleep(every),
        }
    }
}

/// Runs `command` within `timeout` (killing it after); its trimmed stdout, or a description
/// of the failure (cannot spawn, non-zero exit, timeout) with its output.
fn run(command: &mut Command, timeout: Duration) -> Result<String, String> {
    let what = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            let install = Flavor::chosen().install();
            format!("cannot run {what}: {e}; install it: `{install}`")
        })?;
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    thread::scope(|scope| {
        // Drained concurrently so that a chatty command cannot block on a full pipe.
        let out = scope.spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            text
        });
        let err = scope.spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let started = now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() < timeout => thread::sleep(Duration::from_millis(2)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let (out, err) = (out.join().unwrap(), err.join().unwrap());
        match status {
            Some(status) if status.success() => Ok(out.trim().to_string()),
            Some(status) => Err(format!(
                "{what} exited with {status}: {}\n{}",
                err.trim(),
                out.trim()
            )),
            None => Err(format!(
                "{what} timed out after {timeout:?}: {}\n{}",
                err.trim(),
                out.trim()
            )),
        }
    })
}

/// Over a fresh connection to `127.0.0.1:port`: AUTH (if `password`), PING (which must
/// answer PONG) and `INFO server`; returns the answering process's id and that INFO text.
fn ping(port: u16, password: Option<&str>) -> Result<(u32, String), String> {
    let mut replies = query(port, password, &[&["PING"], &["INFO", "server"]])?;
    if replies[0] != "PONG" {
        return Err(format!("127.0.0.1:{port}: PING answered {:?}", replies[0]));
    }
    let info = replies.swap_remove(1);
    let pid = info_field(&info, "process_id")
        .and_then(|pid| pid.parse().ok())
        .ok_or_else(|| format!("127.0.0.1:{port}: INFO server without process_id"))?;
    Ok((pid, info))
}

/// Sends `commands` over a fresh connection to `127.0.0.1:port` (after AUTH if
/// `password`) and returns their replies, which must be simple strings, integers or bulk
/// strings. Much faster than a `redis-cli` process per command.
fn query(port: u16, password: Option<&str>, commands: &[&[&str]]) -> Result<Vec<String>, String> {
    let talk = || -> io::Result<Vec<String>> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        // Short: a local server answers in microseconds, and callers poll again.
        let timeout = Duration::from_millis(500);
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut writer = stream;
        let mut ask = |args: &[&str]| -> io::Result<String> {
            let mut request = format!("*{}\r\n", args.len());
            for arg in args {
                request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
            }
            writer.write_all(request.as_bytes())?;
            read_reply(&mut reader)
        };
        if let Some(password) = password {
            ask(&["AUTH", password])?;
        }
        commands.iter().map(|args| ask(args)).collect()
    };
    talk().map_err(|e| format!("127.0.0.1:{port}: {e}"))
}

/// One RESP reply: a simple string, integer or bulk string as text; an error reply as
/// `Err`.
fn read_reply(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::other("connection closed"));
    }
    let line = line.trim_end();
    match line.split_at_checked(1) {
        Some(("+" | ":", text)) => Ok(text.to_string()),
        Some(("-", error)) => Err(io::Error::other(error.to_string())),
        Some(("$", len)) => {
            let len: usize = len
                .parse()
                .map_err(|_| io::Error::other(format!("bulk reply {line:?}")))?;
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body)?;
            body.truncate(len);
            Ok(String::from_utf8_lossy(&body).into_owned())
        }
        _ => Err(io::Error::other(format!("unexpected reply {line:?}"))),
    }
}

/// The value of `key:value` in INFO-style text.
fn info_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .filter_map(|line| line.trim().split_once(':'))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// `Ok` once `replica` reports itself a replica of `127.0.0.1:master_port` with its link
/// up.
fn replica_link_up(replica: &RedisServer, master_port: u16) -> Result<(), String> {
    let info = replica.try_cli(&["INFO", "replication"])?;
    let port = master_port.to_string();
    let up = info_field(&info, "role") == Some("slave")
        && info_field(&info, "master_port") == Some(port.as_str())
        && info_field(&info, "master_link_status") == Some("up");
    if up {
        Ok(())
    } else {
        Err(format!("{}: {info}", replica.addr()))
    }
}

/// `Ok` when `sentinel` lists `replica` as a replica of master `name`, neither down nor
/// disconnected.
fn sentinel_knows_replica(
    sentinel: &RedisServer,
    name: &str,
    replica: &RedisServer,
) -> Result<(), String> {
    let text = sentinel.try_cli(&["SENTINEL", "REPLICAS", name])?;
    let port = replica.port.to_string();
    let healthy = entries(&text).iter().any(|entry| {
        field(entry, "port") == Some(port.as_str())
            && field(entry, "flags")
                .is_some_and(|f| !f.contains("down") && !f.contains("disconnected"))
    });
    if healthy {
        Ok(())
    } else {
        Err(format!(
            "sentinel {} does not list {} as a healthy replica: {text}",
            sentinel.addr(),
            replica.addr()
        ))
    }
}

/// Ok once `sentinel`'s record of master `name` (`SENTINEL MASTER`) is `master` at its
/// port and flags nothing else: no failover in progress, not down.
fn sentinel_switched(
    sentinel: &RedisServer,
    name: &str,
    master: &RedisServer,
) -> Result<(), String> {
    let text = sentinel.try_cli(&["SENTINEL", "MASTER", name])?;
    let record = entries(&text).into_iter().next().unwrap_or_default();
    let (port, flags) = (field(&record, "port"), field(&record, "flags"));
    if port == Some(master.port.to_string().as_str()) && flags == Some("master") {
        Ok(())
    } else {
        Err(format!(
            "sentinel {} has not switched to {}: port {port:?}, flags {flags:?}",
            sentinel.addr(),
            master.addr(),
        ))
    }
}

/// What `sentinel` answers to `SENTINEL get-master-addr-by-name name`, as `"ip:port"`.
fn sentinel_master_addr(sentinel: &RedisServer, name: &str) -> Result<String, String> {
    let text = sentinel.try_cli(&["SENTINEL", "get-master-addr-by-name", name])?;
    match text.lines().collect::<Vec<_>>()[..] {
        [ip, port] => Ok(format!("{ip}:{port}")),
        _ => Err(format!("sentinel {} answered {text:?}", sentinel.addr())),
    }
}

/// The entries of a reply listing instances (`SENTINEL replicas`, `SENTINEL sentinels`),
/// which redis-cli prints flattened, one line per field name and value: each entry is the
/// run of pairs starting at a `name` field.
fn entries(text: &str) -> Vec<Vec<(&str, &str)>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut entries: Vec<Vec<(&str, &str)>> = Vec::new();
    for pair in lines.chunks_exact(2) {
        let (key, value) = (pair[0], pair[1]);
        if key == "name" {
            entries.push(Vec::new());
        }
        if let Some(entry) = entries.last_mut() {
            entry.push((key, value));
        }
    }
    entries
}

/// The value of field `key` in one of [`entries`]' entries.
fn field<'a>(entry: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
    entry.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// The port of the master that `CLUSTER NODES` text says serves `slot`.
fn master_port_for_slot(nodes: &str, slot: u16) -> Option<u16> {
    nodes.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // <id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
        let flags = fields.get(2)?;
        if !flags.split(',').any(|f| f == "master") {
            return None;
        }
        let serves = fields.iter().skip(8).any(|range| {
            // Migrating and importing slots look like `[slot->-id]`: not served here yet.
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            match (start.parse::<u16>(), end.parse::<u16>()) {
                (Ok(start), Ok(end)) => (start..=end).contains(&slot),
                _ => false,
            }
        });
        if !serves {
            return None;
        }
        let addr = fields[1].split(['@', ',']).next()?;
        addr.rsplit_once(':')?.1.parse().ok()
    })
}

/// The last 4000 bytes of a log, for panic messages.
fn tail(log: &str) -> &str {
    let mut start = log.len().saturating_sub(4000);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    &log[start..]
}
