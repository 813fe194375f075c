//! The `serve` flags as [`Settings`]: milliseconds as durations, 0 as "never", the store
//! and TLS flags as their option structs.

use std::time::Duration;

use super::serve::Serve;
use super::values::{RateLimitHeadersArg, StoreKind};
use crate::app::Settings;
use crate::grpc::{HeaderNames, LIMIT_FIELD, POLICY_FIELD};
use crate::net::{GiveBack, TlsFiles};
use crate::request_caps::RequestCaps;
use crate::source::ConfigSource;
use crate::statsd::StatsdSettings;
use crate::store::redis::{RedisOptions, RedisTlsFiles};

impl Serve {
    /// The settings these flags ask for, serving `config`.
    pub(super) fn into_settings(self, config: ConfigSource) -> Settings {
        Settings {
            start_without_config: self.start_without_config,
            unhealthy_without_config: self.unhealthy_without_config,
            algorithm: self.algorithm.into(),
            max_buckets: self.max_buckets,
            reload_debounce: Duration::from_millis(self.reload_debounce_ms),
            redis: self.redis_options(),
            global_shadow: self.shadow_mode,
            global_quota: self.quota_mode,
            dynamic_metadata: self.response_dynamic_metadata,
            response_headers: self.response_headers.then_some(HeaderNames {
                limit: self.limit_header,
                remaining: self.remaining_header,
                reset: self.reset_header,
            }),
            draft_headers: self.ratelimit_headers == RateLimitHeadersArg::Draft,
            drain_delay: Duration::from_millis(self.drain_delay_ms),
            drain_timeout: Duration::from_millis(self.drain_timeout_ms),
            metrics_path: self.metrics_path,
            metrics_mapping: self.metrics_mapping,
            near_limit_ratio: self.near_limit_ratio,
            max_store_bytes: self.max_store_bytes,
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            max_connections: self
                .max_connections
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            grpc_max_connection_age: (self.grpc_max_connection_age_ms > 0)
                .then(|| Duration::from_millis(self.grpc_max_connection_age_ms)),
            grpc_max_connection_age_grace: Duration::from_millis(
                self.grpc_max_connection_age_grace_ms,
            ),
            grpc_tls: self
                .grpc_tls_cert
                .zip(self.grpc_tls_key)
                .map(|(cert, key)| TlsFiles {
                    client_ca: self.grpc_client_ca,
                    client_sans: self.grpc_client_san,
                    ..TlsFiles::server(cert, key)
                }),
            http_tls: self
                .http_tls_cert
                .zip(self.http_tls_key)
                .map(|(cert, key)| TlsFiles::server(cert, key)),
            request_caps: RequestCaps {
                max_descriptors: self.max_descriptors,
                max_entries: self.max_entries,
                max_value_bytes: self.max_value_bytes,
            },
            admin_token_file: self.admin_token_file,
            // Each value was checked by its parser.
            give_back: GiveBack::parse(&self.give_back_from).unwrap_or_default(),
            max_metric_values: self.max_metric_values,
            rlqs_unmatched: self.rlqs_unmatched.into(),
            rlqs_assignment_ttl: Duration::from_millis(self.rlqs_assignment_ttl_ms),
            statsd: self.statsd_addr.map(|addr| StatsdSettings {
                addr,
                protocol: self.statsd_protocol.into(),
                flush: Duration::from_millis(self.statsd_flush_ms),
                tags: self.statsd_tags.map(|t| t.0).unwrap_or_default(),
                dogstatsd: self.dogstatsd,
            }),
            tracing: self.tracing.options(),
            ..Settings::from_source(config)
        }
    }

    /// Refuses a Go-style header renamed to one of the draft's field names while both
    /// kinds are on: Envoy would send two fields of one name, which a client reads as one
    /// malformed List.
    pub(super) fn check_header_names(&self) -> Result<(), String> {
        if !self.response_headers || self.ratelimit_headers == RateLimitHeadersArg::Off {
            return Ok(());
        }
        let names = [
            &self.limit_header,
            &self.remaining_header,
            &self.reset_header,
        ];
        for name in names {
            for field in [POLICY_FIELD, LIMIT_FIELD] {
                if name.eq_ignore_ascii_case(field) {
                    return Err(format!(
                        "--response-headers would send {name:?}, a field --ratelimit-headers \
                         draft sends too: rename it"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The Redis store's options with `--store redis`; `None` for the embedded store. The
    /// local fallback gets the embedded store's bounds.
    fn redis_options(&self) -> Option<RedisOptions> {
        match self.store {
            StoreKind::Memory => None,
            StoreKind::Redis => Some(RedisOptions {
                timeout: Duration::from_millis(self.redis_timeout_ms.max(1)),
                failure: self.redis_failure.into(),
                lease: self.redis_lease,
                lease_ttl: Duration::from_millis(self.redis_lease_ttl_ms.max(1)),
                cache_size: self.redis_cache_size,
                cache_ttl: Duration::from_millis(self.redis_cache_ttl_ms),
                // At most 64: the flag's range.
                calls_in_flight: self.redis_calls_in_flight as usize,
                expiry_jitter: Duration::from_millis(self.redis_expiry_jitter_ms),
                key_prefix: self.redis_key_prefix.clone(),
                tls: RedisTlsFiles {
                    ca: self.redis_tls_ca.clone(),
                    client: self.redis_tls_cert.clone().zip(self.redis_tls_key.clone()),
                },
                fallback_buckets: self.max_buckets,
                fallback_bytes: self.max_store_bytes,
                ..RedisOptions::new(self.redis_url.clone().unwrap_or_default())
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn serve(args: &[&str]) -> Serve {
        let argv = ["meshlimit", "serve"].iter().chain(args);
        match Cli::try_parse_from(argv).expect("valid flags").command {
            Command::Serve(serve) => *serve,
            _ => unreachable!("parsed serve"),
        }
    }

    // Settings has no PartialEq (TLS sources, Redis options); Debug shows every field.
    #[test]
    fn the_flags_defaults_are_the_settings_defaults() {
        let from_flags = serve(&[]).into_settings(ConfigSource::parse("c.yaml"));
        assert_eq!(
            format!("{from_flags:?}"),
            format!("{:?}", Settings::new("c.yaml"))
        );
    }

    #[test]
    fn ratelimit_headers_draft_turns_the_draft_fields_on() {
        let settings = |args: &[&str]| serve(args).into_settings(ConfigSource::parse("c.yaml"));
        assert!(!settings(&[]).draft_headers);
        assert!(!settings(&["--ratelimit-headers", "off"]).draft_headers);
        let both = settings(&["--ratelimit-headers", "draft", "--response-headers"]);
        assert!(both.draft_headers && both.response_headers.is_some());
        let argv = ["meshlimit", "serve", "--ratelimit-headers", "rfc"];
        assert!(Cli::try_parse_from(argv).is_err());
    }

    #[test]
    fn a_go_style_header_may_not_take_a_draft_fields_name() {
        let check = |args: &[&str]| serve(args).check_header_names();
        let clash = ["--response-headers", "--ratelimit-headers", "draft"];
        assert!(check(&clash).is_ok());
        let renamed = |flag: &str, name: &str| {
            let mut args = clash.to_vec();
            args.extend([flag, name]);
            check(&args)
        };
        assert!(renamed("--limit-header", "ratelimit").is_err());
        assert!(renamed("--reset-header", "RateLimit-Policy").is_err());
        assert!(renamed("--reset-header", "RateLimit-Policies").is_ok());
        // One kind alone may use any name.
        assert!(check(&["--response-headers", "--limit-header", "RateLimit"]).is_ok());
    }

    #[test]
    fn the_tracing_flags_reach_the_options() {
        let settings = |args: &[&str]| serve(args).into_settings(ConfigSource::parse("c.yaml"));
        assert!(
            settings(&["--tracing-sampling-rate", "0.5"])
                .tracing
                .is_none()
        );
        let on = settings(&["--tracing"]).tracing.expect("on");
        assert_eq!(on.protocol, None);
        assert_eq!(on.service_name, "RateLimit");
        assert_eq!(on.sampling_rate, 1.0);
        let all = settings(&[
            "--tracing",
            "--tracing-protocol",
            "grpc",
            "--tracing-endpoint",
            "http://collector:4317",
            "--tracing-service-name",
            "rl",
            "--tracing-service-namespace",
            "edge",
            "--tracing-service-instance-id",
            "pod-1",
            "--tracing-sampling-rate",
            "0.25",
        ])
        .tracing
        .expect("on");
        assert_eq!(all.protocol, Some(crate::traces::ExportProtocol::Grpc));
        assert_eq!(all.endpoint.as_deref(), Some("http://collector:4317"));
        assert_eq!(all.service_name, "rl");
        assert_eq!(all.service_namespace.as_deref(), Some("edge"));
        assert_eq!(all.service_instance_id.as_deref(), Some("pod-1"));
        assert_eq!(all.sampling_rate, 0.25);
        for bad in ["NaN", "inf", "half"] {
            let argv = ["meshlimit", "serve", "--tracing-sampling-rate", bad];
            assert!(Cli::try_parse_from(argv).is_err(), "{bad}");
        }
    }

    #[test]
    fn redis_calls_in_flight_reach_the_store_and_stay_in_range() {
        let redis = ["--store", "redis", "--redis-url", "redis://h:1"];
        let flags = |n: &'static str| [&redis[..], &["--redis-calls-in-flight", n]].concat();
        for n in ["1", "4", "64"] {
            let options = serve(&flags(n)).redis_options().expect("redis");
            assert_eq!(options.calls_in_flight.to_string(), n);
        }
        for n in ["0", "65", "two"] {
            let argv = ["meshlimit", "serve"].into_iter().chain(flags(n));
            assert!(Cli::try_parse_from(argv).is_err(), "{n}");
        }
    }

    #[test]
    fn redis_tls_files_and_expiry_jitter_reach_the_store() {
        let redis = ["--store", "redis", "--redis-url", "rediss://h:1"];
        let options = |more: &[&'static str]| {
            serve(&[&redis[..], more].concat())
                .redis_options()
                .expect("redis")
        };
        let all = options(&[
            "--redis-tls-ca",
            "ca.pem",
            "--redis-tls-cert",
            "c.pem",
            "--redis-tls-key",
            "c.key",
            "--redis-expiry-jitter-ms",
            "300000",
            "--redis-key-prefix",
            "staging:",
        ]);
        assert_eq!(all.key_prefix, "staging:");
        assert_eq!(all.tls.ca, Some("ca.pem".into()));
        assert_eq!(all.tls.client, Some(("c.pem".into(), "c.key".into())));
        assert_eq!(all.expiry_jitter, Duration::from_secs(300));
        let argv = ["meshlimit", "serve"]
            .into_iter()
            .chain(redis)
            .chain(["--redis-tls-cert", "c.pem"]);
        assert!(
            Cli::try_parse_from(argv).is_err(),
            "a certificate needs its key"
        );
    }

    #[test]
    fn the_redis_flags_defaults_are_the_redis_options_defaults() {
        let url = "redis://127.0.0.1:6379";
        let from_flags = serve(&["--store", "redis", "--redis-url", url]).redis_options();
        assert_eq!(
            format!("{from_flags:?}"),
            format!("{:?}", Some(RedisOptions::new(url)))
        );
    }
}
