//! meshlimit: a global rate-limit service for Envoy and Istio.
//!
//! # Layout
//! - [`config`]: descriptor files (the envoyproxy/ratelimit format) → a valid [`config::Config`].
//! - [`matcher`]: the compiled descriptor tree and the Go server's matching walk.
//! - [`rules`]: units, limits and rules, free of YAML and protobuf.
//! - [`limiter`]: the token bucket, fixed window and sliding window (a file each) as pure
//!   functions of `now`, and the two-phase step a store runs them in.
//! - [`bucket_key`]: a bucket's identity and its one text format, for both stores.
//! - [`store`]: where bucket state lives: the embedded store and Redis.
//! - [`request`]: the one request value every step reads, and a descriptor as the service
//!   reads it; [`request_caps`]: caps on descriptors, entries and bytes per request.
//! - [`plan`]: a request's plan (validation, matching, `replaces`, hits, store checks), the
//!   one path `ShouldRateLimit`, `/json` and `/explain` share.
//! - [`service`]: plan → store → statistics → answer (shadow, quota, overall code).
//! - [`error`]: the errors below the edges, each with a kind.
//! - [`grpc`]: `envoy.service.ratelimit.v3.RateLimitService` and gRPC health over tonic.
//! - [`http`]: the operator's HTTP endpoints; [`json`]: their JSON form of requests;
//!   [`admin_token`]: the token guarding them.
//! - [`explain`]: why a request gets its answer (`/explain`, `meshlimit explain`).
//! - [`metrics`]: Prometheus statistics under the Go server's names, served at `/metrics`.
//! - [`net`]: connections: accept within limits, TLS, idle and age timeouts, drain.
//! - [`source`]: where the config comes from (files, PostgreSQL, xDS), the one pipeline
//!   every snapshot goes through, and the followers that swap in later snapshots.
//! - [`gocompat`]: envoyproxy/ratelimit's environment variables as `serve` flags.
//! - [`app`]: wires it all together for the `meshlimit` binary and the tests.
//! - [`cli`]: the `meshlimit` command line (`serve`, `validate`, `explain`, `db init`);
//!   [`defaults`]: every default of the command line and of [`app::Settings`].
//! - [`file_watch`]: debounced directory watches that tell changes from reads (the config
//!   path, TLS files).
//! - [`clock`]: the one source of time; `throttle`: at most one log line per interval.
//! - [`traces`]: OpenTelemetry spans of sampled requests, exported over OTLP.

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

pub mod admin_token;
pub mod app;
pub mod bucket_key;
pub mod cli;
pub mod clock;
pub mod config;
pub mod defaults;
pub mod error;
pub mod explain;
pub mod file_watch;
pub mod gocompat;
pub mod grpc;
pub mod http;
pub mod json;
pub mod limiter;
pub mod matcher;
pub mod metrics;
pub mod net;
pub mod page;
pub mod plan;
pub mod request;
pub mod request_caps;
pub mod rlqs;
pub mod rules;
pub mod service;
mod short_eq;
pub mod source;
pub mod statsd;
pub mod store;
mod throttle;
pub mod traces;
