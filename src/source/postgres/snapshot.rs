//! One snapshot of the config table: every row read in one statement, then validated.

use std::time::Duration;

use tokio_postgres::Client;

use super::connect::{describe, ident};
use super::rows::{Row, config_from_rows};
use super::{Loaded, PgOptions};
use crate::error::{ConfigError, ConfigErrorKind};

/// Bound on reading the table (a lock held on it, a server that stopped answering).
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The rows of one read, validated: a config, or every problem of the rows.
pub(super) type Snapshot = Result<Loaded, Vec<ConfigError>>;

/// Reads every row of `options.table` through `client` and validates them.
///
/// # Errors
/// The table could not be read, in words.
pub(super) async fn read(client: &Client, options: &PgOptions) -> Result<Snapshot, String> {
    let statement = format!(
        "SELECT domain::text, config::text FROM {} ORDER BY domain",
        ident(&options.table)
    );
    let rows = match tokio::time::timeout(READ_TIMEOUT, client.query(&statement, &[])).await {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => return Err(format!("cannot read the table: {}", describe(&e))),
        Err(_) => return Err(format!("reading the table took over {READ_TIMEOUT:?}")),
    };
    let mut read = Vec::with_capacity(rows.len());
    for row in rows {
        let (domain, config) = row
            .try_get::<_, String>(0)
            .and_then(|domain| Ok((domain, row.try_get::<_, Option<String>>(1)?)))
            .map_err(|e| format!("cannot read the table: {}", describe(&e)))?;
        read.push(Row { domain, config });
    }
    let table = options.table.clone();
    // Parsing starts a thread per row (see crate::config): off the runtime's workers.
    let validated = tokio::task::spawn_blocking(move || config_from_rows(&table, &read))
        .await
        .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()));
    Ok(validated.map(Loaded::unversioned))
}

/// The source could not be read: `why`, under the source's safe description.
pub(super) fn unreachable(options: &PgOptions, why: &str) -> ConfigError {
    ConfigError::new(
        ConfigErrorKind::SourceUnreachable,
        std::path::Path::new(&options.describe()),
        None,
        None,
        format!("PostgreSQL: {why}"),
    )
}
