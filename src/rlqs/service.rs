//! `StreamRateLimitQuotas` over gRPC: each stream's reports read, checked and handed to
//! the [`Registry`]; its assignments written back as `RateLimitQuotaResponse`s.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    self, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt32Value};
use tokio::sync::{mpsc, watch};
use tonic::codegen::tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use super::registry::{Assignment, Assignments, Registry, Usage};
use crate::error::QuotaError;
use crate::request_caps::RequestCaps;

/// Where the server's drain is, for the quota streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Not draining.
    Serving,
    /// Draining (health failing): new streams are refused, open ones go on.
    Refusing,
    /// The end of the drain's delay: open streams end, so that the server's drain of
    /// calls in flight does not wait for them.
    Closing,
}

/// The tonic server of [`QuotaService`].
pub type Server = RateLimitQuotaServiceServer<QuotaService>;

/// Assignment messages a stream may have queued before more are dropped.
const OUTBOX: usize = 64;

/// Longest `time_elapsed` taken at face value: a day. Envoy reports every few seconds; a
/// larger value only lowers the demand it implies.
const MAX_ELAPSED_SECONDS: u64 = 86_400;

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct QuotaService {
    registry: Arc<Registry>,
    caps: RequestCaps,
    ttl: Duration,
    /// The drain's stage: new streams are refused from [`Drain::Refusing`], open ones end
    /// at [`Drain::Closing`].
    drain: watch::Receiver<Drain>,
}

impl QuotaService {
    /// Serves `registry`, refusing bucket ids over `caps` (as descriptors), assigning
    /// for `ttl` at a time, following the drain's stages on `drain`.
    pub fn new(
        registry: Arc<Registry>,
        caps: RequestCaps,
        ttl: Duration,
        drain: watch::Receiver<Drain>,
    ) -> Self {
        Self {
            registry,
            caps,
            ttl,
            drain,
        }
    }

    /// The tonic server for the gRPC routes.
    pub fn into_server(self) -> Server {
        RateLimitQuotaServiceServer::new(self)
    }
}

/// A stream of responses fed by a channel.
#[derive(Debug)]
pub struct Outgoing(mpsc::Receiver<Result<RateLimitQuotaResponse, Status>>);

impl Stream for Outgoing {
    type Item = Result<RateLimitQuotaResponse, Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[tonic::async_trait]
impl RateLimitQuotaService for QuotaService {
    type StreamRateLimitQuotasStream = Outgoing;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Outgoing>, Status> {
        let mut drain = self.drain.clone();
        if *drain.borrow_and_update() != Drain::Serving {
            return Err(QuotaError::ShuttingDown.into());
        }
        let mut reports = request.into_inner();
        let (responses, outgoing) = mpsc::channel(OUTBOX);
        let (assignments, mut queued) = mpsc::channel::<Assignments>(OUTBOX);
        let (registry, caps, ttl) = (self.registry.clone(), self.caps, self.ttl);
        let stream = registry.open(assignments);
        // Assignments to responses, until the stream ends.
        let writer = {
            let responses = responses.clone();
            tokio::spawn(async move {
                while let Some(assignments) = queued.recv().await {
                    if responses
                        .send(Ok(response(&assignments, ttl)))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            })
        };
        tokio::spawn(async move {
            let mut domain: Option<String> = None;
            loop {
                let report = tokio::select! {
                    report = reports.message() => match report {
                        Ok(Some(report)) => report,
                        Ok(None) | Err(_) => break,
                    },
                    // The drain: the stream ends (OK), Envoy reconnects elsewhere and its
                    // assignments run out their time to live meanwhile.
                    _ = drain.wait_for(|stage| *stage == Drain::Closing) => break,
                };
                let read = stream_domain(&mut domain, &report)
                    .and_then(|domain| usages(report, &caps).map(|usages| (domain, usages)));
                match read {
                    Ok((domain, usages)) => registry.report(stream, &domain, usages).await,
                    Err(error) => {
                        let _ = responses.send(Err(Status::from(error))).await;
                        break;
                    }
                }
            }
            registry.close(stream).await;
            writer.abort();
        });
        Ok(Response::new(Outgoing(outgoing)))
    }
}

/// The stream's domain: the one its first report names (kept in `domain`), which every
/// later report is counted in.
fn stream_domain(
    domain: &mut Option<String>,
    report: &RateLimitQuotaUsageReports,
) -> Result<String, QuotaError> {
    match domain {
        Some(domain) => Ok(domain.clone()),
        None if report.domain.is_empty() => Err(QuotaError::NoDomain),
        None => Ok(domain.insert(report.domain.clone()).clone()),
    }
}

/// A report's usages, checked: every bucket id has entries, no more (and no longer) than
/// a descriptor may.
fn usages(
    report: RateLimitQuotaUsageReports,
    caps: &RequestCaps,
) -> Result<Vec<Usage>, QuotaError> {
    report
        .bucket_quota_usages
        .into_iter()
        .enumerate()
        .map(|(i, usage)| {
            let id: Vec<(String, String)> = usage
                .bucket_id
                .map(|id| id.bucket.into_iter().collect())
                .unwrap_or_default();
            if id.is_empty() {
                return Err(QuotaError::EmptyBucketId(i));
            }
            caps.check_descriptor(i, id.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(QuotaError::TooLarge)?;
            let seconds = usage
                .time_elapsed
                .map_or(0, |d| u64::try_from(d.seconds).unwrap_or(0))
                .min(MAX_ELAPSED_SECONDS);
            Ok(Usage {
                id,
                seconds,
                allowed: usage.num_requests_allowed,
                denied: usage.num_requests_denied,
            })
        })
        .collect()
}

/// The response carrying `assignments`, each for `ttl`.
fn response(assignments: &Assignments, ttl: Duration) -> RateLimitQuotaResponse {
    let ttl = ProtoDuration {
        seconds: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX),
        nanos: ttl.subsec_nanos() as i32,
    };
    RateLimitQuotaResponse {
        bucket_action: assignments
            .iter()
            .map(|(key, assignment)| BucketAction {
                bucket_id: Some(BucketId {
                    bucket: key.id.iter().cloned().collect(),
                }),
                bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(
                    QuotaAssignmentAction {
                        assignment_time_to_live: Some(ttl),
                        rate_limit_strategy: Some(strategy(*assignment)),
                    },
                )),
            })
            .collect(),
    }
}

/// Envoy's strategy for `assignment`.
fn strategy(assignment: Assignment) -> RateLimitStrategy {
    let strategy = match assignment {
        Assignment::Blanket(allow) => Strategy::BlanketRule(if allow {
            BlanketRule::AllowAll
        } else {
            BlanketRule::DenyAll
        } as i32),
        Assignment::TokenBucket(share) => Strategy::TokenBucket(TokenBucket {
            max_tokens: share.max_tokens,
            tokens_per_fill: Some(UInt32Value {
                value: share.tokens_per_fill,
            }),
            fill_interval: Some(ProtoDuration {
                seconds: i64::try_from(share.fill_interval_seconds).unwrap_or(i64::MAX),
                nanos: 0,
            }),
        }),
    };
    RateLimitStrategy {
        strategy: Some(strategy),
    }
}
