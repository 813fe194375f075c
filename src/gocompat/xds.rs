//! The Go server's xDS variables (`CONFIG_TYPE=GRPC_XDS_SOTW`) and its startup switches
//! (`FORCE_START_WITHOUT_INITIAL_CONFIG`, `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
//!
//! - `CONFIG_GRPC_XDS_SERVER_URL` (default `localhost:18000`) → `--xds-server`;
//!   `CONFIG_GRPC_XDS_NODE_ID` → `--xds-node-id`; `CONFIG_GRPC_XDS_NODE_METADATA`
//!   (`k=v,k2=v2`, entries without `=` skipped as Go does) → `--xds-node-metadata`;
//!   `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS` (envconfig's map form `k:v,k2:v2`) →
//!   `--xds-headers k=v,k2=v2`.
//! - TLS, as the Go server, only with `CONFIG_GRPC_XDS_SERVER_USE_TLS=true`: `--xds-tls`,
//!   `CONFIG_GRPC_XDS_SERVER_TLS_CACERT` → `--xds-tls-ca`, `CONFIG_GRPC_XDS_CLIENT_TLS_CERT`
//!   and `_KEY` → `--xds-tls-cert`, `--xds-tls-key` (both or neither),
//!   `CONFIG_GRPC_XDS_SERVER_TLS_SAN` → `--xds-tls-san`.
//! - `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`, `_MAX_INTERVAL` (Go durations),
//!   `_RANDOM_FACTOR`, `_JITTER`, `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES` → the `--xds-backoff-*`
//!   flags and `--xds-max-msg-bytes`. `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`
//!   (the Go server's wait between dial attempts) is the first wait when
//!   `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL` is not set.
//!
//! With another `CONFIG_TYPE` the xDS variables are reported as ignored, as the Go server
//! ignores them. A `MESHLIMIT_*` twin wins over each; `MESHLIMIT_CONFIG` wins over the
//! whole xDS source.

use super::grpc_server::millis;
use super::parse_bool;

/// The Go server's default control plane.
const GO_SERVER_URL: &str = "localhost:18000";

/// Prefixes of the xDS variables, reported as ignored without `CONFIG_TYPE=GRPC_XDS_SOTW`.
const PREFIXES: &[&str] = &["CONFIG_GRPC_XDS_", "XDS_CLIENT_"];

/// What the variables say: flags, and set variables that are ignored, with why.
#[derive(Debug, Default)]
pub(crate) struct XdsArgs {
    /// Flags for `serve` with their values.
    pub(crate) args: Vec<String>,
    /// Variables that are set but have no effect, each with why.
    pub(crate) ignored: Vec<String>,
}

/// Whether `CONFIG_TYPE` (read through `set`) names the xDS source.
pub(crate) fn is_xds(set: &impl Fn(&str) -> Option<String>) -> bool {
    set("CONFIG_TYPE").is_some_and(|kind| kind.eq_ignore_ascii_case("GRPC_XDS_SOTW"))
}

/// Reads the variables through `set` (non-empty values), `ours` (whether a `MESHLIMIT_*`
/// variable is set, which then wins) and `names` (every variable set).
pub(crate) fn translate(
    set: &impl Fn(&str) -> Option<String>,
    ours: &impl Fn(&str) -> bool,
    names: &[String],
) -> Result<XdsArgs, String> {
    let vars = Vars { set, ours };
    let mut out = XdsArgs::default();
    vars.startup_switches(&mut out.args)?;
    if !is_xds(set) {
        out.ignored = names
            .iter()
            .filter(|n| PREFIXES.iter().any(|p| n.starts_with(p)) && set(n).is_some())
            .map(|n| format!("{n} (read only with CONFIG_TYPE=GRPC_XDS_SOTW)"))
            .collect();
        return Ok(out);
    }
    vars.control_plane(&mut out.args)?;
    vars.tls(&mut out)?;
    vars.backoff(&mut out.args)?;
    Ok(out)
}

/// The variables as [`translate`] reads them: `set` and `ours`.
struct Vars<'a, S, O> {
    /// A variable's value, when set and not empty.
    set: &'a S,
    /// Whether a `MESHLIMIT_*` variable is set, which then wins over its Go twin.
    ours: &'a O,
}

impl<S, O> Vars<'_, S, O>
where
    S: Fn(&str) -> Option<String>,
    O: Fn(&str) -> bool,
{
    /// The boolean variable `name`, when set.
    fn flag(&self, name: &str) -> Result<Option<bool>, String> {
        (self.set)(name)
            .map(|v| parse_bool(&v).ok_or_else(|| format!("{name}={v:?} is not a boolean")))
            .transpose()
    }

    /// `flag value` onto `args`, unless the `MESHLIMIT_*` variable `twin` is set.
    fn push(&self, args: &mut Vec<String>, twin: &str, flag: &str, value: String) {
        if !(self.ours)(twin) {
            args.extend([flag.to_string(), value]);
        }
    }

    /// `FORCE_START_WITHOUT_INITIAL_CONFIG` and `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`,
    /// read whatever the source.
    fn startup_switches(&self, args: &mut Vec<String>) -> Result<(), String> {
        for (go, twin, meshlimit) in [
            (
                "FORCE_START_WITHOUT_INITIAL_CONFIG",
                "MESHLIMIT_START_WITHOUT_CONFIG",
                "--start-without-config",
            ),
            (
                "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
                "MESHLIMIT_UNHEALTHY_WITHOUT_CONFIG",
                "--unhealthy-without-config",
            ),
        ] {
            if self.flag(go)? == Some(true) && !(self.ours)(twin) {
                args.push(meshlimit.into());
            }
        }
        Ok(())
    }

    /// The control plane: its URL, the node's id and metadata, the headers sent to it.
    fn control_plane(&self, args: &mut Vec<String>) -> Result<(), String> {
        let set = self.set;
        if !(self.ours)("MESHLIMIT_CONFIG") {
            let url = set("CONFIG_GRPC_XDS_SERVER_URL").unwrap_or_else(|| GO_SERVER_URL.into());
            self.push(args, "MESHLIMIT_XDS_SERVER", "--xds-server", url);
        }
        if let Some(id) = set("CONFIG_GRPC_XDS_NODE_ID") {
            self.push(args, "MESHLIMIT_XDS_NODE_ID", "--xds-node-id", id);
        }
        if let Some(metadata) = set("CONFIG_GRPC_XDS_NODE_METADATA") {
            let pairs: Vec<&str> = metadata.split(',').filter(|e| e.contains('=')).collect();
            self.push(
                args,
                "MESHLIMIT_XDS_NODE_METADATA",
                "--xds-node-metadata",
                pairs.join(","),
            );
        }
        if let Some(headers) = set("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
            self.push(
                args,
                "MESHLIMIT_XDS_HEADERS",
                "--xds-headers",
                headers_as_pairs(&headers)?,
            );
        }
        Ok(())
    }

    /// TLS to the control plane, only with `CONFIG_GRPC_XDS_SERVER_USE_TLS=true`; its
    /// files and SAN are reported as ignored otherwise.
    fn tls(&self, out: &mut XdsArgs) -> Result<(), String> {
        let set = self.set;
        if self.flag("CONFIG_GRPC_XDS_SERVER_USE_TLS")? != Some(true) {
            for name in [
                "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
                "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
            ] {
                if set(name).is_some() {
                    out.ignored.push(format!(
                        "{name} (used only with CONFIG_GRPC_XDS_SERVER_USE_TLS=true)"
                    ));
                }
            }
            return Ok(());
        }
        if !(self.ours)("MESHLIMIT_XDS_TLS") {
            out.args.push("--xds-tls".into());
        }
        let (cert, key) = (
            set("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
            set("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
        );
        if cert.is_some() != key.is_some() {
            return Err(
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY \
                        go together: set both or neither"
                    .into(),
            );
        }
        for (go, twin, flag) in [
            (
                "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
                "MESHLIMIT_XDS_TLS_CA",
                "--xds-tls-ca",
            ),
            (
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                "MESHLIMIT_XDS_TLS_CERT",
                "--xds-tls-cert",
            ),
            (
                "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
                "MESHLIMIT_XDS_TLS_KEY",
                "--xds-tls-key",
            ),
            (
                "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
                "MESHLIMIT_XDS_TLS_SAN",
                "--xds-tls-san",
            ),
        ] {
            if let Some(value) = set(go) {
                self.push(&mut out.args, twin, flag, value);
            }
        }
        Ok(())
    }

    /// The client's reconnection backoff and its largest message.
    fn backoff(&self, args: &mut Vec<String>) -> Result<(), String> {
        let set = self.set;
        let initial = set("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")
            .map(|v| ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", v))
            .or_else(|| {
                set("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL")
                    .map(|v| ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", v))
            });
        if let Some((name, value)) = initial {
            let ms = millis(name, &value)?;
            self.push(
                args,
                "MESHLIMIT_XDS_BACKOFF_INITIAL_MS",
                "--xds-backoff-initial-ms",
                ms.to_string(),
            );
        }
        if let Some(value) = set("XDS_CLIENT_BACKOFF_MAX_INTERVAL") {
            let ms = millis("XDS_CLIENT_BACKOFF_MAX_INTERVAL", &value)?;
            self.push(
                args,
                "MESHLIMIT_XDS_BACKOFF_MAX_MS",
                "--xds-backoff-max-ms",
                ms.to_string(),
            );
        }
        if let Some(value) = set("XDS_CLIENT_BACKOFF_RANDOM_FACTOR") {
            let factor: f64 = value
                .parse()
                .ok()
                .filter(|f: &f64| (0.0..=1.0).contains(f))
                .ok_or_else(|| {
                    format!(
                        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR={value:?} is not a number from 0 to 1"
                    )
                })?;
            self.push(
                args,
                "MESHLIMIT_XDS_BACKOFF_RANDOM_FACTOR",
                "--xds-backoff-random-factor",
                factor.to_string(),
            );
        }
        if let Some(jitter) = self.flag("XDS_CLIENT_BACKOFF_JITTER")? {
            self.push(
                args,
                "MESHLIMIT_XDS_BACKOFF_JITTER",
                "--xds-backoff-jitter",
                jitter.to_string(),
            );
        }
        if let Some(value) = set("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
            let bytes: usize = value.parse().map_err(|_| {
                format!("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES={value:?} is not a number of bytes")
            })?;
            self.push(
                args,
                "MESHLIMIT_XDS_MAX_MSG_BYTES",
                "--xds-max-msg-bytes",
                bytes.to_string(),
            );
        }
        Ok(())
    }
}

/// envconfig's map form `k:v,k2:v2` as `k=v,k2=v2`; an entry without `:` is refused, as
/// envconfig refuses it.
fn headers_as_pairs(headers: &str) -> Result<String, String> {
    let pairs: Result<Vec<String>, String> = headers
        .split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|entry| match entry.split_once(':') {
            Some((k, v)) if !k.trim().is_empty() => Ok(format!("{}={}", k.trim(), v.trim())),
            _ => Err(format!(
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: {entry:?} is not key:value"
            )),
        })
        .collect();
    Ok(pairs?.join(","))
}
