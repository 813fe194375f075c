//! `meshlimit bucket inspect|reset`: a running server's `GET /bucket` and
//! `POST /bucket/reset`, over plain HTTP. The state is the server's, not a copy: unlike
//! `meshlimit explain`, nothing is loaded here.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use axum::body::Body;
use http::{Method, Request, StatusCode, Uri, header};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::{fail, out};
use crate::http::OPERATOR_HEADER;

/// How long the whole call may take: a server that does not answer is an error, not a
/// hang in an operator's terminal or script.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The longest answer read; an inspection is a few hundred bytes per limit.
const MAX_ANSWER: usize = 1 << 20;

/// `meshlimit bucket`: what it does to one descriptor's buckets on a running server.
#[derive(Debug, clap::Subcommand)]
pub enum BucketCommand {
    /// Print the buckets of the rule a descriptor matches, as JSON: each limit, its level,
    /// debt and holds (GET /bucket). Consumes nothing.
    Inspect(BucketArgs),
    /// Reset the buckets of the rule a descriptor matches: full again, holds and slots
    /// dropped (POST /bucket/reset). The server logs who asked.
    Reset(BucketArgs),
}

/// The flags of both `bucket` commands; each field's comment is its `--help` text.
#[derive(Debug, clap::Args)]
pub struct BucketArgs {
    /// The server's operator port, as http://HOST:PORT (plain HTTP).
    #[arg(long)]
    server: String,
    /// The descriptor's domain.
    #[arg(long)]
    domain: String,
    /// The descriptor as `key=value,key2=value2`.
    #[arg(long)]
    descriptor: String,
    /// A file holding the server's admin token (as `serve --admin-token-file`), sent as
    /// `Authorization: Bearer`.
    #[arg(long)]
    admin_token_file: Option<PathBuf>,
    /// Who is asking, for the server's log (sent as the X-Meshlimit-Operator header);
    /// defaults to $USER.
    #[arg(long)]
    by: Option<String>,
}

impl BucketCommand {
    /// Calls the server; prints the inspection (pretty JSON) or a one-line summary of the
    /// reset. Non-zero with the server's message when it refuses.
    pub async fn run(self) -> ExitCode {
        let (args, reset) = match self {
            BucketCommand::Inspect(args) => (args, false),
            BucketCommand::Reset(args) => (args, true),
        };
        let answer = match tokio::time::timeout(TIMEOUT, args.call(reset)).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return fail(e),
            Err(_) => return fail(format!("{}: no answer within {TIMEOUT:?}", args.server)),
        };
        if reset {
            out(summary(&answer));
        } else {
            let text = serde_json::to_string_pretty(&answer).unwrap_or_default();
            out(format_args!("{text}\n"));
        }
        ExitCode::SUCCESS
    }
}

impl BucketArgs {
    /// The endpoint's JSON answer, or what went wrong (the server's `error` on a refusal).
    async fn call(&self, reset: bool) -> Result<Value, String> {
        let (method, path) = if reset {
            (Method::POST, "/bucket/reset")
        } else {
            (Method::GET, "/bucket")
        };
        let query = serde_urlencoded::to_string([
            ("domain", self.domain.as_str()),
            ("descriptor", self.descriptor.as_str()),
        ])
        .map_err(|e| e.to_string())?;
        let base = self.server.trim_end_matches('/');
        let uri: Uri = format!("{base}{path}?{query}")
            .parse()
            .map_err(|e| format!("--server {}: {e}", self.server))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!(
                "--server {}: only http:// is supported",
                self.server
            ));
        }
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(token) = self.token()? {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(by) = self.by.clone().or_else(|| std::env::var("USER").ok()) {
            request = request.header(OPERATOR_HEADER, by);
        }
        let request = request.body(Body::empty()).map_err(|e| e.to_string())?;
        let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("{}: {e}", self.server))?;
        let status = response.status();
        let body = axum::body::to_bytes(Body::new(response.into_body()), MAX_ANSWER)
            .await
            .map_err(|e| format!("{}: reading the answer: {e}", self.server))?;
        answer(status, &body)
    }

    /// The admin token from `--admin-token-file`, trimmed as the server trims it.
    fn token(&self) -> Result<Option<String>, String> {
        let Some(path) = &self.admin_token_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--admin-token-file {}: {e}", path.display()))?;
        Ok(Some(text.trim().to_string()))
    }
}

/// A 200's JSON, or an error naming the status and the server's reason.
fn answer(status: StatusCode, body: &[u8]) -> Result<Value, String> {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    if status == StatusCode::OK {
        return json.ok_or_else(|| "the server's answer is not JSON".into());
    }
    let why = match json.as_ref().and_then(|j| j["error"].as_str()) {
        Some(error) => error.to_string(),
        // Not one of the endpoint's answers (the token check's 401, a proxy's page).
        None => String::from_utf8_lossy(body).trim().to_string(),
    };
    Err(format!("server answered {status}: {why}"))
}

/// `reset N bucket(s) of rule R: key (existed), key (was empty)`.
fn summary(answer: &Value) -> String {
    let keys = answer["reset"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let existed = answer["existed"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let each: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let was = match existed.get(i).and_then(Value::as_bool) {
                Some(true) => "reset",
                _ => "nothing to reset",
            };
            format!("{} ({was})", key.as_str().unwrap_or("?"))
        })
        .collect();
    format!(
        "reset {} bucket(s) of rule {}: {}\n",
        keys.len(),
        answer["rule"].as_str().unwrap_or("?"),
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_carry_the_servers_reason() {
        let e = answer(StatusCode::NOT_FOUND, br#"{"error":"no rule"}"#).unwrap_err();
        assert_eq!(e, "server answered 404 Not Found: no rule");
        let e = answer(StatusCode::UNAUTHORIZED, b"Unauthorized: token\n").unwrap_err();
        assert!(e.ends_with("Unauthorized: token"), "{e}");
        assert!(answer(StatusCode::OK, b"{}").is_ok());
    }

    #[test]
    fn a_reset_is_summed_up_on_one_line() {
        let answer =
            serde_json::json!({"rule": "r", "reset": ["a", "b"], "existed": [true, false]});
        assert_eq!(
            summary(&answer),
            "reset 2 bucket(s) of rule r: a (reset), b (nothing to reset)\n"
        );
    }
}
