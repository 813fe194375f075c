//! A real PostgreSQL server for a test, from Debian's `postgresql` package: a cluster of
//! its own in a temporary directory (`initdb`, trust authentication, user `postgres`), on
//! a free loopback port and a unix socket in that directory; stopped when dropped.
//! `initdb` and the server refuse to run as root, so as root they run as the `postgres`
//! user (`runuser`). Missing binaries fail the test, saying what to install.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use super::pki::Pki;
use tokio_postgres::{Client, NoTls};

/// The server binaries: `MESHLIMIT_TEST_PG_BIN`, else the newest
/// `/usr/lib/postgresql/*/bin` holding `initdb`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MESHLIMIT_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb): \
             apt-get install postgresql (./scripts/test.sh installs it), or set \
             MESHLIMIT_TEST_PG_BIN to a directory holding initdb and pg_ctl"
        ),
    }
}

/// A PostgreSQL cluster of the test's own; the server stops when this is dropped.
pub struct Postgres {
    /// The loopback TCP port (kept across restarts).
    pub port: u16,
    bin: PathBuf,
    dir: TempDir,
}

impl Postgres {
    /// Creates a cluster and starts its server.
    pub fn start() -> Postgres {
        let pg = Postgres::create();
        pg.start_server(true);
        pg
    }

    /// Creates a cluster without starting it (see [`Postgres::start_server`]).
    pub fn create() -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("meshlimit-pg-")
            .tempdir()
            .expect("creating a temporary directory");
        let pg = Postgres {
            port: super::free_port(),
            bin,
            dir,
        };
        if is_root() {
            pg.run(
                Command::new("chown")
                    .args(["-R", "postgres"])
                    .arg(pg.dir.path()),
            );
        }
        let data = pg.data();
        pg.run(
            pg.as_owner("initdb")
                .arg("-D")
                .arg(&data)
                .args(["--auth=trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
                .args(["--locale=C", "--no-instructions"]),
        );
        pg
    }

    /// Creates a cluster that takes TCP connections over TLS only (`hostssl` in
    /// pg_hba.conf), its certificate for IP 127.0.0.1 signed by a CA of its own
    /// ([`Postgres::ca`]), and starts its server.
    pub fn start_tls_only() -> Postgres {
        let pg = Postgres::create();
        let pki = Pki::new();
        pki.issue("server", "IP:127.0.0.1", 2);
        // Copied next to the cluster, which the postgres user owns and can read.
        for name in ["ca.pem", "server.pem", "server.key"] {
            std::fs::copy(pki.path(name), pg.dir.path().join(name)).expect("copying the PKI");
        }
        std::fs::write(
            pg.data().join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        )
        .expect("writing pg_hba.conf");
        if is_root() {
            pg.run(
                Command::new("chown")
                    .args(["-R", "postgres"])
                    .arg(pg.dir.path()),
            );
        }
        pg.run(
            Command::new("chmod")
                .arg("600")
                .arg(pg.dir.path().join("server.key")),
        );
        let dir = pg.dir.path().display();
        pg.start_server_with(
            true,
            &format!(
                "-c ssl=on -c ssl_cert_file={dir}/server.pem -c ssl_key_file={dir}/server.key"
            ),
        );
        pg
    }

    /// The CA of [`Postgres::start_tls_only`]'s certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Starts the server (waiting until it accepts connections): on the loopback port
    /// when `tcp`, else on the unix socket only, where nothing that connects by TCP (as
    /// meshlimit does in these tests) can reach it.
    pub fn start_server(&self, tcp: bool) {
        self.start_server_with(tcp, "");
    }

    /// [`Postgres::start_server`] with more server options (`-c name=value ...`).
    fn start_server_with(&self, tcp: bool, more: &str) {
        let listen = if tcp { "127.0.0.1" } else { "''" };
        let options = format!(
            "-p {} -k {} -c listen_addresses={listen} -c fsync=off {more}",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log");
        let started = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output()
            .expect("running pg_ctl");
        assert!(
            started.status.success(),
            "pg_ctl start failed: {}{}\n{}",
            String::from_utf8_lossy(&started.stdout),
            String::from_utf8_lossy(&started.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Stops the server (fast: sessions are ended) and waits until it is down.
    pub fn stop(&self) {
        let stopped = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "fast", "-w", "stop"])
            .output()
            .expect("running pg_ctl");
        assert!(
            stopped.status.success(),
            "pg_ctl stop failed: {}",
            String::from_utf8_lossy(&stopped.stderr)
        );
    }

    /// Stops and starts the server again: same data, same port.
    pub fn restart(&self) {
        self.stop();
        self.start_server(true);
    }

    /// The URL of the server over TCP, database and user `postgres`, without TLS.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// The URL of the server over its unix socket.
    pub fn socket_url(&self) -> String {
        format!(
            "postgresql:///postgres?host={}&port={}&user=postgres",
            self.dir.path().display(),
            self.port
        )
    }

    /// The directory of the unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// A client over the unix socket (so it works while TCP is off), its connection
    /// driven by a task of its own.
    pub async fn client(&self) -> Client {
        let (client, connection) = tokio_postgres::connect(&self.socket_url(), NoTls)
            .await
            .unwrap_or_else(|e| panic!("connecting to the test PostgreSQL: {e}"));
        tokio::spawn(connection);
        client
    }

    /// Runs `sql` (any number of statements), as `psql -c` would; a failure fails the
    /// test.
    pub async fn sql(&self, sql: &str) {
        self.client()
            .await
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }

    /// Sets the row of `domain` in `table` to `config` (insert or update).
    pub async fn put(&self, table: &str, domain: &str, config: &str) {
        let statement = format!(
            "INSERT INTO {table} (domain, config) VALUES ($1, $2) \
             ON CONFLICT (domain) DO UPDATE SET config = EXCLUDED.config"
        );
        self.client()
            .await
            .execute(&statement, &[&domain, &config])
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e:?}"));
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `program` from the server binaries, run as the cluster's owner.
    fn as_owner(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    fn run(&self, command: &mut Command) {
        let out = command
            .output()
            .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
        assert!(
            out.status.success(),
            "{command:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}
