//! Config from PostgreSQL: every row of a table holds one domain file's YAML; a change is
//! announced with NOTIFY and the whole table is read again.

mod options;

pub use options::{PgOptions, is_url};

use super::{History, Loaded};
use crate::config::SharedConfig;
use crate::error::ConfigError;

/// Reads and validates every row once.
///
/// # Errors
/// Every problem of the rows, or why PostgreSQL could not be read.
pub async fn load(options: &PgOptions) -> Result<Loaded, Vec<ConfigError>> {
    let _ = options;
    unimplemented!("postgres::load")
}

/// Follows the table for ever: LISTEN, reload on each notification, reconnect (and reload)
/// after PostgreSQL went away.
pub async fn follow(options: PgOptions, config: SharedConfig, history: std::sync::Arc<History>) {
    let _ = (options, config, history);
    unimplemented!("postgres::follow")
}

/// `meshlimit db init`: creates the table and the trigger that notifies on every change;
/// safe to run twice.
///
/// # Errors
/// PostgreSQL could not be reached or refused a statement.
pub async fn init(options: &PgOptions) -> Result<(), String> {
    let _ = options;
    unimplemented!("postgres::init")
}
