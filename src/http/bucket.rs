//! `GET /bucket` and `POST /bucket/reset`: an operator's look at one descriptor's buckets,
//! and resetting them (see [`crate::explain::bucket_state`]). Both are behind the admin
//! token like every endpoint but health and metrics; a `GET` of the reset path is 405
//! (from the router), so that a link or a prefetch never resets anything.

use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tracing::info;

use super::{Operator, parse_descriptor};
use crate::explain::bucket_state::{self, BucketStateError, descriptor_text};
use crate::net::Caller;
use crate::request::Descriptor;

/// The header naming the person behind a reset, for the log (as `by=` does).
pub const OPERATOR_HEADER: &str = "x-meshlimit-operator";

/// What the query of either path names.
#[derive(Debug, Default)]
struct Query {
    domain: String,
    descriptor: Option<Descriptor>,
    /// `by=`: who resets, for the log.
    by: Option<String>,
}

/// `?domain=D&descriptor=k=v,k2=v2[&by=NAME]`: one descriptor, in `/explain`'s syntax.
fn query(raw: Option<&str>) -> Result<Query, String> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.unwrap_or("")).map_err(|e| e.to_string())?;
    let mut query = Query::default();
    for (name, value) in pairs {
        match name.as_str() {
            "domain" => query.domain = value,
            "descriptor" if query.descriptor.is_none() => {
                query.descriptor = Some(parse_descriptor(&value));
            }
            "descriptor" => return Err("one descriptor per bucket request".into()),
            "by" => query.by = Some(value),
            other => return Err(format!("unknown parameter {other:?}")),
        }
    }
    if query.domain.is_empty() {
        return Err("domain= is required".into());
    }
    if query.descriptor.is_none() {
        return Err("descriptor=k=v,k2=v2 is required".into());
    }
    Ok(query)
}

/// `status` with `{"error": why}`.
fn error(status: StatusCode, why: impl std::fmt::Display) -> Response {
    json_response(status, &json!({ "error": why.to_string() }))
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut text = body.to_string();
    text.push('\n');
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// 400 for a bad request, 404 for a descriptor without a bucket, 503 when the store
/// cannot answer (it may again: a client may retry).
fn failed(e: &BucketStateError) -> Response {
    let status = match e {
        BucketStateError::Request(_) => StatusCode::BAD_REQUEST,
        BucketStateError::NoBucket(_) => StatusCode::NOT_FOUND,
        BucketStateError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e)
}

/// `GET /bucket`: every bucket of the matched rule, consuming nothing.
pub(super) async fn inspect(State(op): State<Operator>, RawQuery(raw): RawQuery) -> Response {
    let query = match query(raw.as_deref()) {
        Ok(query) => query,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let descriptor = query.descriptor.unwrap_or_default();
    match bucket_state::inspect(&op.service, &query.domain, &descriptor).await {
        Ok(body) => json_response(StatusCode::OK, &body),
        Err(e) => failed(&e),
    }
}

/// `POST /bucket/reset`: every bucket of the matched rule reset, and one log line saying
/// who asked (peer, and the person the header or `by=` names) and what was reset.
pub(super) async fn reset(State(op): State<Operator>, request: Request) -> Response {
    let query = match query(request.uri().query()) {
        Ok(query) => query,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    // Every connection's requests carry their Caller; a request handed to the router
    // directly (in-process tests) has none.
    let peer = match request.extensions().get::<Caller>() {
        Some(Caller {
            peer: Some(addr), ..
        }) => addr.to_string(),
        Some(_) => "unix-socket".to_string(),
        None => "unknown".to_string(),
    };
    let by = operator_name(request.headers(), query.by);
    let descriptor = query.descriptor.unwrap_or_default();
    let done = match bucket_state::reset(&op.service, &query.domain, &descriptor).await {
        Ok(done) => done,
        Err(e) => return failed(&e),
    };
    let keys: Vec<&str> = done.keys.iter().map(|(k, _)| k.as_str()).collect();
    let existed: Vec<bool> = done.keys.iter().map(|&(_, e)| e).collect();
    info!(
        peer = %peer,
        by = %by,
        domain = %query.domain,
        descriptor = %descriptor_text(&descriptor),
        rule = %done.rule,
        keys = ?keys,
        existed = ?existed,
        "bucket reset by an operator"
    );
    let body = json!({
        "domain": query.domain,
        "descriptor": descriptor_text(&descriptor),
        "rule": done.rule,
        "reset": keys,
        "existed": existed,
    });
    json_response(StatusCode::OK, &body)
}

/// Who resets: the `X-Meshlimit-Operator` header, else `by=`, else `-` (not said).
fn operator_name(headers: &HeaderMap, by: Option<String>) -> String {
    headers
        .get(OPERATOR_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or(by)
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_one_domain_and_one_descriptor() {
        let q = query(Some("domain=d&descriptor=k%3Dv,k2=v2&by=ann")).unwrap();
        assert_eq!(q.domain, "d");
        let entries = q.descriptor.unwrap().entries;
        assert_eq!(
            entries,
            [("k".into(), "v".into()), ("k2".into(), "v2".into())]
        );
        assert_eq!(q.by.as_deref(), Some("ann"));
        for bad in [
            None,
            Some("domain=d"),
            Some("descriptor=k=v"),
            Some("domain=d&descriptor=a=b&descriptor=c=d"),
            Some("domain=d&descriptor=a=b&hits=3"),
        ] {
            assert!(query(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_header_names_the_operator_before_by() {
        let mut headers = HeaderMap::new();
        assert_eq!(operator_name(&headers, None), "-");
        assert_eq!(operator_name(&headers, Some("bob".into())), "bob");
        headers.insert(OPERATOR_HEADER, "ann".parse().unwrap());
        assert_eq!(operator_name(&headers, Some("bob".into())), "ann");
    }
}
