//! The Go server's `TRACING_*` variables as `--tracing*` flags.
//!
//! The Go server exports over HTTP unless `TRACING_EXPORTER_PROTOCOL` says `grpc`, whatever
//! `OTEL_EXPORTER_OTLP_PROTOCOL` says; so with `TRACING_ENABLED` and no protocol variable,
//! `--tracing-protocol http` is given too. The `OTEL_EXPORTER_OTLP_*` endpoint, headers and
//! timeout variables need no flag: the exporter reads them, as the Go server's does.

/// Each Go variable that is a value of one flag, with the flag's `MESHLIMIT_*` variable.
const VALUES: &[(&str, &str, &str)] = &[
    (
        "TRACING_EXPORTER_PROTOCOL",
        "MESHLIMIT_TRACING_PROTOCOL",
        "--tracing-protocol",
    ),
    (
        "TRACING_SERVICE_NAME",
        "MESHLIMIT_TRACING_SERVICE_NAME",
        "--tracing-service-name",
    ),
    (
        "TRACING_SERVICE_NAMESPACE",
        "MESHLIMIT_TRACING_SERVICE_NAMESPACE",
        "--tracing-service-namespace",
    ),
    (
        "TRACING_SERVICE_INSTANCE_ID",
        "MESHLIMIT_TRACING_SERVICE_INSTANCE_ID",
        "--tracing-service-instance-id",
    ),
    (
        "TRACING_SAMPLING_RATE",
        "MESHLIMIT_TRACING_SAMPLING_RATE",
        "--tracing-sampling-rate",
    ),
];

/// The flags the tracing variables ask for; `set` reads a variable's non-empty value,
/// `ours` whether a `MESHLIMIT_*` variable is set, `enabled` is `TRACING_ENABLED`.
pub(super) fn translate(
    set: &impl Fn(&str) -> Option<String>,
    ours: &impl Fn(&str) -> bool,
    enabled: bool,
) -> Vec<String> {
    let mut args = Vec::new();
    if enabled && !ours("MESHLIMIT_TRACING") {
        args.push("--tracing".to_string());
    }
    for &(go, our, flag) in VALUES {
        if ours(our) {
            continue;
        }
        if let Some(value) = set(go) {
            args.extend([flag.to_string(), value]);
        } else if go == "TRACING_EXPORTER_PROTOCOL" && enabled {
            args.extend([flag.to_string(), "http".to_string()]);
        }
    }
    args
}
