//! The Go server's gRPC server variables: TLS and mTLS (`GRPC_SERVER_USE_TLS`,
//! `GRPC_SERVER_TLS_CERT`, `GRPC_SERVER_TLS_KEY`, `GRPC_CLIENT_TLS_CACERT`,
//! `GRPC_CLIENT_TLS_SAN`) and connection ages (`GRPC_MAX_CONNECTION_AGE`,
//! `GRPC_MAX_CONNECTION_AGE_GRACE`, Go durations).
//!
//! As in the Go server, the TLS files are used only with `GRPC_SERVER_USE_TLS=true`, a
//! CA makes client certificates mandatory, and the SAN is checked only with a CA. Its
//! default ages (24 h, grace 1 h) are not imposed when the variables are not set:
//! meshlimit keeps connections until they are idle; an age set without its grace gets
//! the Go default grace of 1 h.

use super::go_duration;

/// What the variables say: flags, and set variables that are ignored, with why.
#[derive(Debug, Default)]
pub(crate) struct GrpcServerArgs {
    /// Flags for `serve` with their values, appended after those of the other variables.
    pub(crate) args: Vec<String>,
    /// Variables that are set but have no effect, each with why; reported with the
    /// unsupported ones.
    pub(crate) ignored: Vec<String>,
}

/// The Go server's grace when only the age is set.
const GO_DEFAULT_GRACE_MS: u64 = 3_600_000;

/// Reads the variables through `set` (non-empty values) and `ours` (whether a
/// `MESHLIMIT_*` variable is set, which then wins), `use_tls` (the boolean).
pub(crate) fn translate(
    set: &impl Fn(&str) -> Option<String>,
    ours: &impl Fn(&str) -> bool,
    use_tls: bool,
) -> Result<GrpcServerArgs, String> {
    let mut out = GrpcServerArgs::default();
    let mut push = |flag: &str, value: String| out.args.extend([flag.to_string(), value]);

    let age = set("GRPC_MAX_CONNECTION_AGE")
        .map(|v| millis("GRPC_MAX_CONNECTION_AGE", &v))
        .transpose()?;
    let grace = set("GRPC_MAX_CONNECTION_AGE_GRACE")
        .map(|v| millis("GRPC_MAX_CONNECTION_AGE_GRACE", &v))
        .transpose()?;
    if let Some(age) = age
        && !ours("MESHLIMIT_GRPC_MAX_CONNECTION_AGE_MS")
    {
        push("--grpc-max-connection-age-ms", age.to_string());
    }
    let grace = grace.or(age.map(|_| GO_DEFAULT_GRACE_MS));
    if let Some(grace) = grace
        && !ours("MESHLIMIT_GRPC_MAX_CONNECTION_AGE_GRACE_MS")
    {
        push("--grpc-max-connection-age-grace-ms", grace.to_string());
    }

    let files = [
        (
            "GRPC_SERVER_TLS_CERT",
            "MESHLIMIT_GRPC_TLS_CERT",
            "--grpc-tls-cert",
        ),
        (
            "GRPC_SERVER_TLS_KEY",
            "MESHLIMIT_GRPC_TLS_KEY",
            "--grpc-tls-key",
        ),
        (
            "GRPC_CLIENT_TLS_CACERT",
            "MESHLIMIT_GRPC_CLIENT_CA",
            "--grpc-client-ca",
        ),
        (
            "GRPC_CLIENT_TLS_SAN",
            "MESHLIMIT_GRPC_CLIENT_SAN",
            "--grpc-client-san",
        ),
    ];
    if !use_tls {
        for (go, ..) in files {
            if set(go).is_some() {
                out.ignored
                    .push(format!("{go} (ignored: GRPC_SERVER_USE_TLS is not true)"));
            }
        }
        return Ok(out);
    }
    if ours("MESHLIMIT_GRPC_TLS_CERT") {
        return Ok(out); // meshlimit's own TLS settings replace the Go ones as a whole
    }
    if set("GRPC_SERVER_TLS_CERT").is_none() || set("GRPC_SERVER_TLS_KEY").is_none() {
        return Err(
            "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY".into(),
        );
    }
    if set("GRPC_CLIENT_TLS_SAN").is_some() && set("GRPC_CLIENT_TLS_CACERT").is_none() {
        out.ignored.push(
            "GRPC_CLIENT_TLS_SAN (ignored: client certificates need GRPC_CLIENT_TLS_CACERT)".into(),
        );
    }
    for (go, _, flag) in files {
        if go == "GRPC_CLIENT_TLS_SAN" && set("GRPC_CLIENT_TLS_CACERT").is_none() {
            continue;
        }
        if let Some(value) = set(go) {
            push(flag, value);
        }
    }
    Ok(out)
}

/// `value`, a Go duration, in milliseconds; the error names the variable `name`.
pub(super) fn millis(name: &str, value: &str) -> Result<u64, String> {
    let duration = go_duration::parse(value).map_err(|e| format!("{name}: {e}"))?;
    Ok(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}
