//! Config from PostgreSQL: every row of a table holds one domain file's YAML; a change is
//! announced with NOTIFY and the whole table is read again.
//!
//! - `connect`: the URL's forms, one connection and the task driving it.
//! - `tls`: TLS by `sslmode` (see there: `prefer` does not verify, `require` does).
//! - `rows`: rows → a validated config, each row named `postgres:<table>/<domain>`.
//! - `snapshot`: one read of the table.
//! - `follow`: LISTEN, reload on NOTIFY (bursts coalesced), reconnect with backoff.
//! - `init`: `meshlimit db init`'s table and trigger.
#![forbid(unsafe_code)]

mod connect;
mod follow;
mod init;
mod options;
mod rows;
mod snapshot;
mod tls;

pub use follow::follow;
pub use options::{PgOptions, is_url};

use super::{History, Loaded};
use crate::error::ConfigError;
use connect::Session;
use snapshot::unreachable;

/// Reads and validates every row once.
///
/// # Errors
/// Every problem of the rows, or why PostgreSQL could not be read (one error of kind
/// [`crate::error::ConfigErrorKind::SourceUnreachable`]).
pub async fn load(options: &PgOptions) -> Result<Loaded, Vec<ConfigError>> {
    let session = Session::open(options)
        .await
        .map_err(|why| vec![unreachable(options, &why)])?;
    snapshot::read(&session.client, options)
        .await
        .map_err(|why| vec![unreachable(options, &why)])?
}

/// `meshlimit db init`: creates the table and the trigger that notifies on every change;
/// safe to run twice.
///
/// # Errors
/// PostgreSQL could not be reached or refused a statement.
pub async fn init(options: &PgOptions) -> Result<(), String> {
    let session = Session::open(options)
        .await
        .map_err(|why| format!("{}: {why}", options.describe()))?;
    session
        .client
        .batch_execute(&init::statements(options))
        .await
        .map_err(|e| format!("{}: {}", options.describe(), connect::describe(&e)))
}
