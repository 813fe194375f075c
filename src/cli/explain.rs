//! `meshlimit explain`: how a request would be decided, without a running server.

use std::process::ExitCode;

use super::source::SourceArgs;
use super::values::AlgorithmArg;
use super::{fail, out};
use crate::app::{self, Settings};
use crate::defaults;
use crate::request::Request;
use crate::store::redis::RedisOptions;

/// The flags of `meshlimit explain`; each field's comment is its `--help` text.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// Where the config comes from.
    #[command(flatten)]
    source: SourceArgs,
    /// The request's domain.
    #[arg(long)]
    domain: String,
    /// One descriptor as `key=value,key2=value2`; repeat for several.
    #[arg(long, required_unless_present = "bucket")]
    descriptor: Vec<String>,
    /// Instead of descriptors, a quota bucket id (Envoy's rate limit quota service) as
    /// `key=value,key2=value2`, in any order: the rule it resolves to and the quota it
    /// hands out.
    #[arg(long, conflicts_with = "descriptor")]
    bucket: Option<String>,
    /// Algorithm for rules that do not set one (as `serve --algorithm`).
    #[arg(long, env = "MESHLIMIT_ALGORITHM", value_enum, default_value_t = AlgorithmArg::from(defaults::ALGORITHM))]
    algorithm: AlgorithmArg,
    /// Read the buckets' state from this Redis (as `serve --redis-url`).
    #[arg(long)]
    redis_url: Option<String>,
}

impl ExplainArgs {
    /// Prints the explanation; without `--redis-url`, says that the state shown is not
    /// the real one.
    pub async fn run(self) -> ExitCode {
        let Some(source) = self.source.source() else {
            return fail("explain needs --config PATH_OR_URL or --xds-server ADDRESS");
        };
        let config = match source.load().await {
            Ok(loaded) => loaded.config,
            Err(errors) => return fail(app::Error::Config(errors)),
        };
        let mut settings = Settings::from_source(source);
        settings.algorithm = self.algorithm.into();
        settings.redis = self.redis_url.map(RedisOptions::new);
        let service = match app::build_service(&settings, config) {
            Ok(service) => service,
            Err(e) => return fail(e),
        };
        if let Some(bucket) = &self.bucket {
            let id = crate::http::parse_descriptor(bucket).entries;
            return match crate::explain::explain_bucket(&service, &self.domain, &id) {
                Ok(text) => {
                    out(&text);
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            };
        }
        let descriptors: Vec<_> = self
            .descriptor
            .iter()
            .map(|d| crate::http::parse_descriptor(d))
            .collect();
        let request = Request::new(&self.domain, &descriptors, 0);
        match crate::explain::explain(&service, request).await {
            Ok(text) => {
                out(&text);
                if settings.redis.is_none() {
                    out(
                        "\n(state: read offline, so every bucket is full; GET /explain on a \
                         running server, or pass --redis-url, shows the real state)\n",
                    );
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        }
    }
}
