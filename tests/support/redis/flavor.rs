//! Which server the Redis tests run against: Redis (the default) or Valkey, the fork that
//! speaks the same protocol and runs the same Lua scripts. `MESHLIMIT_TEST_REDIS_SERVER=valkey`
//! chooses Valkey for a whole test binary; `scripts/test.sh` runs the Redis suites a second
//! time so, because a user may run either under meshlimit.
//!
//! The flavor names the binaries the harness (`support/redis.rs`) runs, and every process it
//! starts must say in `INFO server` that it is that flavor, so that a run asked to test
//! Valkey cannot quietly test Redis instead (a wrong variable, a `redis-server` that is a
//! symlink to the other's binary), nor the other way round.

use std::sync::OnceLock;

use super::info_field;

/// The environment variable that chooses the flavor: `redis` (also when unset) or `valkey`.
pub const VARIABLE: &str = "MESHLIMIT_TEST_REDIS_SERVER";

/// A server implementing the Redis protocol that the harness can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Redis (`redis-server`, `redis-cli`, `redis-sentinel`).
    Redis,
    /// Valkey (`valkey-server`, `valkey-cli`, `valkey-sentinel`).
    Valkey,
}

impl Flavor {
    /// The flavor this test binary was asked for ([`VARIABLE`]); panics on a value that
    /// names neither, rather than falling back to Redis.
    pub fn chosen() -> Flavor {
        static CHOSEN: OnceLock<Flavor> = OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let value = std::env::var(VARIABLE).unwrap_or_default();
            Flavor::named(&value).unwrap_or_else(|| {
                panic!("{VARIABLE}={value:?}: expected `redis` (the default) or `valkey`")
            })
        })
    }

    /// The flavor a value of [`VARIABLE`] names (empty: Redis).
    pub fn named(value: &str) -> Option<Flavor> {
        match value {
            "" | "redis" => Some(Flavor::Redis),
            "valkey" => Some(Flavor::Valkey),
            _ => None,
        }
    }

    /// The server binary.
    pub fn server(self) -> &'static str {
        match self {
            Flavor::Redis => "redis-server",
            Flavor::Valkey => "valkey-server",
        }
    }

    /// The command-line client, which also creates clusters (`--cluster create`).
    pub fn cli(self) -> &'static str {
        match self {
            Flavor::Redis => "redis-cli",
            Flavor::Valkey => "valkey-cli",
        }
    }

    /// The sentinel binary.
    pub fn sentinel(self) -> &'static str {
        match self {
            Flavor::Redis => "redis-sentinel",
            Flavor::Valkey => "valkey-sentinel",
        }
    }

    /// How to install the three binaries on Debian 12 (bookworm), as `scripts/test.sh`
    /// does.
    pub fn install(self) -> &'static str {
        match self {
            Flavor::Redis => "apt-get install -y redis-server redis-tools redis-sentinel",
            // Valkey is not in bookworm itself, only in its backports.
            Flavor::Valkey => {
                "echo 'deb http://deb.debian.org/debian bookworm-backports main' \
                 > /etc/apt/sources.list.d/backports.list && apt-get update && \
                 apt-get install -y -t bookworm-backports valkey-server valkey-tools valkey-sentinel"
            }
        }
    }

    /// Which flavor and version answered, from its `INFO server` text: Valkey names itself
    /// (`server_name:valkey`, `valkey_version:8.0.1`, beside a `redis_version` it keeps
    /// for clients that check it); Redis has `redis_version` alone.
    pub fn of_info(info: &str) -> Result<(Flavor, String), String> {
        let field = |key| info_field(info, key);
        match (field("server_name"), field("valkey_version")) {
            (Some("valkey"), Some(version)) => Ok((Flavor::Valkey, version.to_string())),
            (None | Some("redis"), None) => field("redis_version")
                .map(|version| (Flavor::Redis, version.to_string()))
                .ok_or_else(|| format!("INFO server without a version:\n{info}")),
            (name, version) => Err(format!(
                "INFO server names neither Redis nor Valkey (server_name {name:?}, \
                 valkey_version {version:?}):\n{info}"
            )),
        }
    }

    /// `Ok` when `info` (`INFO server`) comes from this flavor; otherwise what answered.
    pub fn check(self, info: &str) -> Result<(), String> {
        let (answered, version) = Flavor::of_info(info)?;
        if answered == self {
            Ok(())
        } else {
            Err(format!(
                "asked for {self:?} ({VARIABLE}), but {answered:?} {version} answered: \
                 `{}` runs the other server",
                self.server()
            ))
        }
    }
}
