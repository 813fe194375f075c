//! The operator's HTTP endpoints (axum, on the server's runtime):
//!
//! | path | what |
//! |---|---|
//! | `/healthcheck` | 200 `OK`; 500 while draining or while the store cannot answer |
//! | `/json` | `ShouldRateLimit` as JSON: 200 OK, 429 over limit, 400 bad request |
//! | `/rlconfig` | the loaded rules, one per line, the config version and last reload error |
//! | `/explain` | how a request would be decided, consuming nothing |
//! | `/bucket`, `/bucket/reset` | one descriptor's buckets, and resetting them ([`bucket`]) |
//! | `/` | the operator page for browsers ([`crate::page`]), this list for others |
//! | `/page/…` | the page's script, style and JSON documents |
//!
//! With `--admin-token-file`, every request but those to `/healthcheck`, the metrics
//! paths and the plain-text `/` must carry the token ([`crate::admin_token`]), else 401. The
//! `--metrics-addr` address serves [`metrics_router`]: metrics and health only.

mod bucket;

pub use bucket::OPERATOR_HEADER;

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Bytes;
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};

use crate::admin_token::AdminToken;
use crate::clock::rfc3339;
use crate::error::RequestError;
use crate::explain;
use crate::json;
use crate::metrics::{self, Metrics};
use crate::net::{Caller, GiveBack};
use crate::page::{self, Page};
use crate::request::{self, Descriptor};
use crate::rules::Rule;
use crate::service::Service;
use crate::source::History;
use crate::store::StoreHealth;
use crate::traces::{JSON_SPAN, RequestSpan, Traces};

/// Whether the server answers as healthy; cleared while draining.
#[derive(Debug, Clone, Default)]
pub struct Health(
    /// `true` while healthy; shared by all clones, so that the drain's clearing reaches
    /// every endpoint.
    Arc<AtomicBool>,
);

impl Health {
    /// A health flag, initially healthy.
    pub fn new() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }

    /// Marks the server healthy or not.
    pub fn set(&self, healthy: bool) {
        self.0.store(healthy, Ordering::SeqCst);
    }

    /// The current state.
    pub fn healthy(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What the endpoints read.
#[derive(Debug, Clone)]
pub struct Operator {
    /// Cleared when draining.
    pub health: Health,
    /// The service answering requests.
    pub service: Service,
    /// What the config source has done.
    pub history: Arc<History>,
    /// Health checks fail while no config from the source is in force
    /// (`--unhealthy-without-config`).
    pub unhealthy_without_config: bool,
    /// The service's statistics, for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// A second path for the metrics text, besides `/metrics`.
    pub metrics_path: String,
    /// The token guarding every endpoint but health, metrics and `/`; `None`: no guard.
    pub admin_token: Option<Arc<AdminToken>>,
    /// The rate limit quota service's state, for `/rlqs`.
    pub quotas: Arc<crate::rlqs::Registry>,
    /// The operator page and its sampled rates.
    pub page: Arc<Page>,
    /// Traces sampled `/json` requests (`--tracing`); `None`: off.
    pub traces: Option<Traces>,
    /// Who may give budget back through `/json` (`--give-back-from`), as over gRPC.
    pub give_back: GiveBack,
}

const INDEX: &str = "meshlimit operator endpoints:
  /             in a browser: the operator page (rules, rates, who is limited, store, explain)
  /healthcheck  200 OK, or 500 while draining or while the store cannot answer
  /json         POST a RateLimitRequest as JSON: 200 OK, 429 over limit, 400 bad request
  /rlconfig     the loaded rules, the config version and the last reload error
  /explain      ?domain=D&descriptor=k=v,k2=v2 (repeatable), or POST a /json body:
                how that request would be decided, consuming nothing;
                ?domain=D&bucket=k=v,k2=v2: the rule a quota bucket id resolves to
  /bucket       ?domain=D&descriptor=k=v,k2=v2: the matched rule's buckets as JSON
                (level, debt, holds), consuming nothing
  /bucket/reset POST ?domain=D&descriptor=k=v,k2=v2[&by=NAME]: those buckets reset
                (full, holds dropped), logged with who asked
  /rlqs         the quota service's open streams, buckets and assignments
";

/// The router for every operator endpoint, guarded by the admin token if there is one.
pub fn router(operator: Operator) -> Router {
    let token = operator.admin_token.clone();
    let open = open_paths(&operator.metrics_path);
    let router = endpoints(operator);
    match token {
        None => router,
        Some(token) => router.layer(middleware::from_fn(move |request, next| {
            require_token(token.clone(), open.clone(), request, next)
        })),
    }
}

/// The router of `--metrics-addr`: `/metrics`, the metrics path and `/healthcheck`, with
/// no token (a scraper's address); everything else is 404.
pub fn metrics_router(operator: Operator) -> Router {
    let router = Router::new()
        .route("/healthcheck", get(healthcheck))
        .route("/metrics", get(scrape));
    let router = with_metrics_path(router, &["/healthcheck", "/metrics"], &operator);
    router.with_state(operator)
}

/// `router`, whose routes are `routed`, with the metrics also at `--metrics-path` unless
/// a route already has that path (as the default, `/metrics`, does).
fn with_metrics_path(
    router: Router<Operator>,
    routed: &[&str],
    operator: &Operator,
) -> Router<Operator> {
    if routed.contains(&operator.metrics_path.as_str()) {
        router
    } else {
        router.route(&operator.metrics_path, get(scrape))
    }
}

/// The paths served without the token: health, metrics and the plain-text index.
fn open_paths(metrics_path: &str) -> Arc<[String]> {
    ["/", "/healthcheck", "/metrics", metrics_path]
        .map(String::from)
        .into()
}

/// Lets a request through if its path is open or it carries the admin token; 401 with a
/// Basic challenge otherwise (paths are compared as routed: exactly, undecoded).
async fn require_token(
    token: Arc<AdminToken>,
    open: Arc<[String]>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    let headers = request.headers();
    let authorization = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
    // `/` is open as the plain-text list only: the page shows what the token guards.
    let open =
        open.iter().any(|p| p == path) && !(path == "/" && page::routes::wants_html(headers));
    if open || token.accepts(authorization) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, r#"Basic realm="meshlimit""#)],
        "Unauthorized: this endpoint needs the admin token (Authorization: Bearer <token>)\n",
    )
        .into_response()
}

/// Every operator endpoint, unguarded.
fn endpoints(operator: Operator) -> Router {
    let router = Router::new()
        .route("/", get(index))
        .route("/healthcheck", get(healthcheck))
        .route("/json", post(json_endpoint))
        .route("/rlconfig", get(rlconfig))
        .route("/explain", get(explain_query).post(explain_json))
        .route("/bucket", get(bucket::inspect))
        .route("/bucket/reset", post(bucket::reset))
        .route("/rlqs", get(rlqs_page))
        .route("/metrics", get(scrape));
    let routed = [
        "/",
        "/healthcheck",
        "/json",
        "/rlconfig",
        "/explain",
        "/bucket",
        "/bucket/reset",
        "/rlqs",
        "/metrics",
    ];
    let router = with_metrics_path(router, &routed, &operator);
    let page = page::routes::router(operator.page.clone());
    router.with_state(operator).merge(page)
}

/// `GET /`: the page for a browser, the list of endpoints for anything else.
/// Both answers say they vary by `Accept`, so that no cache hands one to the other.
async fn index(headers: HeaderMap) -> Response {
    let mut response = if page::routes::wants_html(&headers) {
        page::routes::index()
    } else {
        INDEX.into_response()
    };
    let vary = header::HeaderValue::from_static("accept");
    response.headers_mut().insert(header::VARY, vary);
    response
}

/// `GET /rlqs`: the quota service's streams, buckets and assignments.
async fn rlqs_page(State(op): State<Operator>) -> String {
    crate::rlqs::page::page(&op.quotas)
}

/// `GET /metrics`: the service's statistics for Prometheus (see [`crate::metrics`]).
async fn scrape(State(op): State<Operator>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        op.metrics.render(),
    )
        .into_response()
}

/// `GET /healthcheck`: 200 `OK` when serving, 500 otherwise (the Go server's contract).
/// While part of Redis, or all of it under `--redis-failure allow` or `local`, cannot
/// decide: 200 `OK (degraded: <why>)`; while nothing can answer: 500 with why.
async fn healthcheck(State(op): State<Operator>) -> (StatusCode, String) {
    if !op.health.healthy() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "draining".into());
    }
    if op.unhealthy_without_config && !op.history.loaded() {
        let why = format!("no config loaded yet from {}", op.history.described());
        return (StatusCode::INTERNAL_SERVER_ERROR, why);
    }
    match op.service.store().health() {
        StoreHealth::Healthy => (StatusCode::OK, "OK".into()),
        StoreHealth::Degraded(why) => (StatusCode::OK, format!("OK (degraded: {why})")),
        StoreHealth::Down(why) => (StatusCode::INTERNAL_SERVER_ERROR, why),
    }
}

fn bad_request(why: impl std::fmt::Display) -> Response {
    (StatusCode::BAD_REQUEST, format!("Bad Request: {why}\n")).into_response()
}

/// `POST /json`: see [`json_answer`]. Other methods get 405 with `Allow: POST` (from the
/// router): a `GET` must not consume quota, as links, crawlers and prefetches send them.
async fn json_endpoint(
    State(op): State<Operator>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let span = match &op.traces {
        None => None,
        Some(traces) => traces.server_span(&headers, JSON_SPAN),
    };
    let may_give_back = op.give_back.allows(caller.as_ref().map(|c| &c.0));
    json_answer_in(&op.service, &body, span.as_ref(), may_give_back).await
}

/// What `/json` answers for `body`, a `RateLimitRequest` in JSON: 200 with the response
/// when OK, 429 when over the limit, 400 for a body that is not a request or any service
/// error (the Go server's codes). Public for the `/json` fuzz target.
pub async fn json_answer(service: &Service, body: &[u8]) -> Response {
    json_answer_in(service, body, None, true).await
}

/// [`json_answer`], recorded in `span` when the request is sampled.
async fn json_answer_in(
    service: &Service,
    body: &[u8],
    span: Option<&RequestSpan>,
    may_give_back: bool,
) -> Response {
    let request = match json::parse_request(body) {
        Ok(request) => request,
        Err(e) => {
            if let Some(span) = span {
                span.failed(e.to_string());
            }
            return bad_request(e);
        }
    };
    let request = request.as_request().giving_back(may_give_back);
    if let Some(span) = span {
        span.request(request.domain, request.descriptors.len());
    }
    let decided = service.should_rate_limit_traced(request, span).await;
    if let Some(span) = span {
        match &decided {
            Ok(answer) => span.answered(answer.over_limit),
            Err(e) => span.failed(e.to_string()),
        }
    }
    match decided {
        Ok(answer) => {
            let status = if answer.over_limit {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            let body = json::response_body(&answer);
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Err(e @ RequestError::GiveBackNotAllowed) => {
            (StatusCode::FORBIDDEN, format!("Forbidden: {e}\n")).into_response()
        }
        Err(e) => bad_request(e),
    }
}

/// `/rlconfig`: a header with the config's source, versions (meshlimit's count of loads,
/// and the source's own), last change and last error, then one line per rule, sorted, in
/// the Go server's form followed by meshlimit's own fields.
async fn rlconfig(State(op): State<Operator>) -> String {
    let config = op.service.config().load();
    let history = &op.history;
    let loads = history.applied.load(Ordering::SeqCst);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# config {} version {loads} (fingerprint {:016x}), {} domain(s)",
        history.described(),
        config.fingerprint(),
        config.domains().len()
    );
    match history.changed_at() {
        Some(at) => {
            let _ = writeln!(
                out,
                "# source {} version {}, last changed {}",
                history.kind(),
                history.version(),
                rfc3339(at)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "# source {}: no config loaded yet, every request is allowed",
                history.kind()
            );
        }
    }
    match &*history.last_error.lock() {
        None => out.push_str("# last reload error: none\n"),
        Some(error) => {
            out.push_str("# last reload error (the config above stays in force):\n");
            for line in error.lines() {
                let _ = writeln!(out, "#   {line}");
            }
        }
    }
    if op.service.global_shadow() {
        out.push_str("# global shadow mode: over-limit requests are answered OK\n");
    }
    if op.service.global_quota() {
        out.push_str("# global quota mode: every descriptor counts as a quota-mode one\n");
    }
    for rule in config.rules() {
        rule_line(&mut out, rule, &op.service);
    }
    out
}

fn rule_line(out: &mut String, rule: &Rule, service: &Service) {
    let _ = write!(out, "{}: ", rule.full_key);
    if rule.limits.is_empty() {
        let _ = write!(
            out,
            "unlimited, shadow_mode: {}, quota_mode: {}",
            rule.mode.is_shadow(),
            rule.mode.is_quota()
        );
    }
    for (i, limit) in rule.limits.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        let algorithm = limit.algorithm.unwrap_or(service.default_algorithm());
        let _ = write!(
            out,
            "unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}, burst: {}, algorithm: {}",
            limit.unit,
            limit.requests_per_unit,
            rule.mode.is_shadow(),
            rule.mode.is_quota(),
            limit.burst,
            algorithm.name()
        );
        if limit.multiplier != 1 {
            let _ = write!(out, ", unit_multiplier: {}", limit.multiplier);
        }
        if rule.limits.len() > 1 && !limit.name.is_empty() {
            let _ = write!(out, ", name: {}", limit.name);
        }
        if limit.charge {
            out.push_str(", charge: always");
        }
    }
    if !rule.name.is_empty() {
        let _ = write!(out, ", name: {}", rule.name);
    }
    if !rule.replaces.is_empty() {
        let _ = write!(out, ", replaces: {}", rule.replaces.join(" "));
    }
    if rule.detailed_metric {
        out.push_str(", detailed_metric: true");
    }
    out.push('\n');
}

/// `GET /explain?domain=D&descriptor=k=v,k2=v2[&descriptor=...]`, or
/// `?domain=D&bucket=k=v,k2=v2` for a quota bucket id.
async fn explain_query(State(op): State<Operator>, RawQuery(query): RawQuery) -> Response {
    let pairs: Vec<(String, String)> =
        match serde_urlencoded::from_str(query.as_deref().unwrap_or("")) {
            Ok(pairs) => pairs,
            Err(e) => return bad_request(e),
        };
    let mut domain = String::new();
    let mut descriptors = Vec::new();
    let mut bucket = None;
    for (name, value) in pairs {
        match name.as_str() {
            "domain" => domain = value,
            "descriptor" => descriptors.push(parse_descriptor(&value)),
            "bucket" if bucket.is_none() => bucket = Some(parse_descriptor(&value).entries),
            "bucket" => return bad_request("one bucket per explanation"),
            other => return bad_request(format!("unknown parameter {other:?}")),
        }
    }
    match bucket {
        Some(_) if !descriptors.is_empty() => {
            bad_request("either descriptors or a bucket, not both")
        }
        Some(id) => match explain::explain_bucket(&op.service, &domain, &id) {
            Ok(text) => text.into_response(),
            Err(e) => bad_request(e),
        },
        None => explain(&op, request::Request::new(&domain, &descriptors, 0)).await,
    }
}

/// `POST /explain` with a `/json` request body.
async fn explain_json(State(op): State<Operator>, body: Bytes) -> Response {
    match json::parse_request(&body) {
        Ok(request) => explain(&op, request.as_request()).await,
        Err(e) => bad_request(e),
    }
}

async fn explain(op: &Operator, request: request::Request<'_, Descriptor>) -> Response {
    match explain::explain(&op.service, request).await {
        Ok(text) => text.into_response(),
        Err(e) => bad_request(e),
    }
}

/// `k=v,k2=v2` as a descriptor: entries split at commas, each at its first `=` (an
/// entry without one has an empty value).
pub fn parse_descriptor(text: &str) -> Descriptor {
    Descriptor {
        entries: text
            .split(',')
            .map(|entry| match entry.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (entry.to_string(), String::new()),
            })
            .collect(),
        ..Descriptor::default()
    }
}
