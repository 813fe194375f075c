//! The Go server's Redis TLS files: `REDIS_TLS_CACERT`, `REDIS_TLS_CLIENT_CERT` and
//! `REDIS_TLS_CLIENT_KEY`, used, as there, only with `REDIS_TLS=true`, and the client
//! certificate only with its key.

/// What the variables say: flags, and set variables that are ignored, with why.
#[derive(Debug, Default)]
pub(crate) struct RedisTlsArgs {
    /// Flags for `serve` with their values.
    pub(crate) args: Vec<String>,
    /// Variables that are set but have no effect, each with why.
    pub(crate) ignored: Vec<String>,
}

/// Reads the variables through `set` (non-empty values) and `ours` (whether a
/// `MESHLIMIT_*` variable is set, which then wins); `tls` is `REDIS_TLS`.
pub(crate) fn translate(
    set: &impl Fn(&str) -> Option<String>,
    ours: &impl Fn(&str) -> bool,
    tls: bool,
) -> RedisTlsArgs {
    let mut out = RedisTlsArgs::default();
    let names = [
        "REDIS_TLS_CACERT",
        "REDIS_TLS_CLIENT_CERT",
        "REDIS_TLS_CLIENT_KEY",
    ];
    if !tls {
        for name in names {
            if set(name).is_some() {
                out.ignored
                    .push(format!("{name} (ignored: REDIS_TLS is not true)"));
            }
        }
        return out;
    }
    if let Some(ca) = set("REDIS_TLS_CACERT")
        && !ours("MESHLIMIT_REDIS_TLS_CA")
    {
        out.args.extend(["--redis-tls-ca".into(), ca]);
    }
    match (set("REDIS_TLS_CLIENT_CERT"), set("REDIS_TLS_CLIENT_KEY")) {
        _ if ours("MESHLIMIT_REDIS_TLS_CERT") => {}
        (Some(cert), Some(key)) => out.args.extend([
            "--redis-tls-cert".into(),
            cert,
            "--redis-tls-key".into(),
            key,
        ]),
        (Some(_), None) => out
            .ignored
            .push("REDIS_TLS_CLIENT_CERT (ignored: REDIS_TLS_CLIENT_KEY is not set)".into()),
        (None, Some(_)) => out
            .ignored
            .push("REDIS_TLS_CLIENT_KEY (ignored: REDIS_TLS_CLIENT_CERT is not set)".into()),
        (None, None) => {}
    }
    out
}
