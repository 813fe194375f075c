//! One connection to PostgreSQL: the URL parsed (every form tokio-postgres reads:
//! `postgres://user:password@host:port/db?sslmode=...`, `postgresql://`, a unix socket as
//! `?host=/run/postgresql` or a percent-encoded path), TLS chosen by [`super::tls`], and
//! a task of its own driving the connection and passing its notifications on.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, Client};
use tracing::debug;

use super::PgOptions;
use super::tls;

/// Bound on opening a connection, when the URL sets no `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// TCP keepalives, unless the URL sets its own: a peer gone without a word (a host
/// powered off, a partition) is noticed within about 25 s rather than the OS's 2 h.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);

/// Interval between unanswered keepalive probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// Unanswered probes before the connection counts as dead.
const KEEPALIVE_RETRIES: u32 = 3;

/// tokio-postgres' default keepalive idle time, which the URL did not change when it is
/// still this.
const DEFAULT_KEEPALIVE_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// An open connection: the client for statements, and what the server sends unasked.
#[derive(Debug)]
pub(super) struct Session {
    /// Runs statements.
    pub(super) client: Client,
    /// One item per notification not yet taken (at most one is kept: any number of
    /// notifications ask for the same thing, a reload); ends when the connection does.
    pub(super) notifications: mpsc::Receiver<()>,
    /// The task driving the connection; returns why the connection ended.
    driver: AbortOnDrop,
}

/// A task aborted when its handle is dropped, so that a session never outlives its
/// owner (the follower is aborted at shutdown).
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<String>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Session {
    /// Connects to `options.url`.
    ///
    /// # Errors
    /// Why it failed, in words (no password), e.g. `cannot connect: error connecting to
    /// server: Connection refused (os error 111)`.
    pub(super) async fn open(options: &PgOptions) -> Result<Session, String> {
        let mut config = client_config(&options.url)?;
        let tls = tls::connector(&mut config)?;
        let (client, mut connection) = config
            .connect(tls)
            .await
            .map_err(|e| format!("cannot connect: {}", describe(&e)))?;
        let (tell, notifications) = mpsc::channel(1);
        let driver = tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(|cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        debug!(channel = n.channel(), payload = n.payload(), "NOTIFY");
                        // Full: a reload is asked for already, and will see this change.
                        let _ = tell.try_send(());
                    }
                    Ok(AsyncMessage::Notice(notice)) => debug!(%notice, "PostgreSQL notice"),
                    Ok(_) => {}
                    Err(e) => return format!("connection lost: {}", describe(&e)),
                }
            }
            "connection closed".to_string()
        });
        Ok(Session {
            client,
            notifications,
            driver: AbortOnDrop(driver),
        })
    }

    /// Why the connection ended, once [`Session::notifications`] has ended.
    pub(super) async fn ended(mut self) -> String {
        (&mut self.driver.0)
            .await
            .unwrap_or_else(|e| format!("connection task failed: {e}"))
    }
}

/// `url` parsed, with meshlimit's connect timeout and keepalives where it sets none.
///
/// # Errors
/// The URL cannot be parsed or names no host.
pub(super) fn client_config(url: &str) -> Result<tokio_postgres::Config, String> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| format!("invalid URL: {}", describe(&e)))?;
    if config.get_hosts().is_empty() {
        return Err(
            "the URL names no host: give one (postgres://user@host/db), or a unix \
                    socket directory (postgresql:///db?host=/run/postgresql)"
                .into(),
        );
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_keepalives_idle() == DEFAULT_KEEPALIVE_IDLE {
        config
            .keepalives_idle(KEEPALIVE_IDLE)
            .keepalives_interval(KEEPALIVE_INTERVAL)
            .keepalives_retries(KEEPALIVE_RETRIES);
    }
    if config.get_application_name().is_none() {
        config.application_name("meshlimit");
    }
    Ok(config)
}

/// `e` with its causes (tokio-postgres' own text is only `db error` for the server's
/// refusals), and a hint when the table is missing.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    if e.code() == Some(&SqlState::UNDEFINED_TABLE) {
        text.push_str(" (create it with `meshlimit db init --config <URL>`)");
    }
    text
}

/// `name` as a quoted SQL identifier.
pub(super) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as a quoted SQL string literal.
pub(super) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_postgres::config::Host;

    #[test]
    fn every_url_form_parses() {
        let config = client_config("postgres://app:s3cret@db.internal:6432/limits").unwrap();
        assert_eq!(config.get_hosts(), [Host::Tcp("db.internal".into())]);
        assert_eq!(config.get_ports(), [6432]);
        assert_eq!(config.get_user(), Some("app"));
        assert_eq!(config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(config.get_dbname(), Some("limits"));
        assert_eq!(config.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
        assert_eq!(config.get_keepalives_idle(), KEEPALIVE_IDLE);

        let socket = client_config("postgresql:///limits?host=/run/postgresql").unwrap();
        assert_eq!(socket.get_hosts(), [Host::Unix("/run/postgresql".into())]);
        let encoded = client_config("postgresql://app@%2Frun%2Fpostgresql:5433/limits").unwrap();
        assert_eq!(encoded.get_hosts(), [Host::Unix("/run/postgresql".into())]);
        assert_eq!(encoded.get_ports(), [5433]);

        let own = client_config("postgres://db/x?connect_timeout=2&keepalives_idle=60").unwrap();
        assert_eq!(own.get_connect_timeout(), Some(&Duration::from_secs(2)));
        assert_eq!(own.get_keepalives_idle(), Duration::from_secs(60));
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        let no_host = client_config("postgresql:///limits").unwrap_err();
        assert!(no_host.contains("names no host"), "{no_host}");
        let bad = client_config("postgres://db/x?sslmode=sometimes").unwrap_err();
        assert!(
            bad.starts_with("invalid URL") && bad.contains("sslmode"),
            "{bad}"
        );
    }

    #[test]
    fn names_and_strings_are_quoted() {
        assert_eq!(ident("meshlimit_config"), "\"meshlimit_config\"");
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(literal("it's"), "'it''s'");
    }
}
