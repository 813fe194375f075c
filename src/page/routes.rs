//! The page's HTTP routes: `/` for browsers (see [`wants_html`]), its script and style,
//! and its two JSON documents. All read-only (`GET`), all sent with a strict
//! Content-Security-Policy; the admin token guards them like the other endpoints.

use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::Page;
use super::assets::{APP_JS, CONTENT_SECURITY_POLICY, INDEX_HTML, STYLE_CSS};

/// The page's own paths (`/` stays with the other endpoints, which answer it for
/// everything but browsers).
pub fn router(page: Arc<Page>) -> Router {
    Router::new()
        .route(
            "/page/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/page/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route("/page/config.json", get(config_json))
        .route("/page/state.json", get(state_json))
        .with_state(page)
}

/// Whether a request for `/` comes from a browser: it accepts HTML (browsers say so
/// first; curl and scripts send `*/*` or nothing and keep the plain-text list).
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|kind| {
            kind.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("text/html")
        })
}

/// `GET /` for a browser.
pub fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// `body` as `content_type`, with the page's security headers.
fn asset(content_type: &'static str, body: impl IntoResponse) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    secure(headers);
    response
}

/// The headers every page response carries: the policy, no MIME sniffing (a JSON
/// document holding a caller's `<script>` is never read as HTML), no referrer, no cache.
fn secure(headers: &mut HeaderMap) {
    let policy = HeaderValue::from_static(CONTENT_SECURITY_POLICY);
    headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => asset("application/json", body),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn config_json(State(page): State<Arc<Page>>) -> Response {
    json(&page.config_doc())
}

/// `GET /page/state.json[?after=SEQ]`.
async fn state_json(State(page): State<Arc<Page>>, RawQuery(query): RawQuery) -> Response {
    let pairs: Vec<(String, String)> =
        match serde_urlencoded::from_str(query.as_deref().unwrap_or("")) {
            Ok(pairs) => pairs,
            Err(e) => return bad_request(&e.to_string()),
        };
    let mut after = None;
    for (name, value) in pairs {
        match (name.as_str(), value.parse::<u64>()) {
            ("after", Ok(seq)) => after = Some(seq),
            ("after", Err(_)) => return bad_request("after: not a tick number"),
            (other, _) => return bad_request(&format!("unknown parameter {other:?}")),
        }
    }
    json(&page.state_doc(after))
}

fn bad_request(why: &str) -> Response {
    let mut response = (StatusCode::BAD_REQUEST, format!("Bad Request: {why}\n")).into_response();
    secure(response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn browsers_get_the_page_and_everything_else_the_list() {
        let chromium = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        assert!(wants_html(&accept(chromium)));
        assert!(wants_html(&accept("TEXT/HTML; charset=utf-8")));
        assert!(!wants_html(&accept("*/*")));
        assert!(!wants_html(&accept("text/plain, application/json")));
        assert!(!wants_html(&HeaderMap::new()));
    }
}
