//! Following the table while the server runs: connect, `LISTEN`, read the whole table,
//! then read it again after every notification; reconnect (and read again) after
//! PostgreSQL went away. Serving never waits on any of it: an outage keeps the last good
//! config in force.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::connect::{Session, ident};
use super::snapshot::{Snapshot, read, unreachable};
use super::{History, PgOptions};
use crate::config::SharedConfig;
use crate::source::apply;
use crate::source::backoff::{Backoff, Waits};

/// After a notification, how long to wait for the rest of a burst (a transaction
/// touching many rows, a script updating them one by one) before the one read they all
/// ask for.
pub(super) const COALESCE: Duration = Duration::from_millis(50);

/// The waits between reconnections: 100 ms doubling to 5 s, each spread by ±25%.
const RECONNECT: Backoff = Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(5),
    random_factor: 0.25,
    jitter: true,
};

/// Whether PostgreSQL could be read, as last logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// Listening, the table read.
    Up,
    /// Unreachable, or the table unreadable; retrying.
    Down,
}

/// Follows the table for ever (see the module's comment). An outage is logged, and
/// recorded in `history` (so `/rlconfig` and `meshlimit_config_last_load_failed` show it),
/// once when it starts; the return once when it ends; never once per attempt.
pub async fn follow(options: PgOptions, shared: SharedConfig, history: Arc<History>) {
    let mut backoff = Waits::new(RECONNECT);
    let mut link = None;
    loop {
        let why = match start(&options).await {
            Err(why) => why,
            Ok((session, snapshot)) => {
                match link {
                    None => info!(
                        source = %options.describe(),
                        channel = %options.channel,
                        "following PostgreSQL: listening for changes"
                    ),
                    Some(Link::Down) => info!(
                        source = %options.describe(),
                        "PostgreSQL reachable again: listening and the table read again"
                    ),
                    Some(Link::Up) => {}
                }
                link = Some(Link::Up);
                backoff.reset();
                apply(snapshot, &shared, &history);
                listen(session, &options, &shared, &history).await
            }
        };
        if link != Some(Link::Down) {
            warn!(
                source = %options.describe(),
                "PostgreSQL unreachable, the running config stays in force; reconnecting \
                 with backoff: {why}"
            );
            history.record_outage(&unreachable(&options, &why));
            link = Some(Link::Down);
        }
        tokio::time::sleep(backoff.next_wait()).await;
    }
}

/// Connects, listens, then reads the table (in that order: a change committed after the
/// read is notified).
async fn start(options: &PgOptions) -> Result<(Session, Snapshot), String> {
    let session = Session::open(options).await?;
    let listen = format!("LISTEN {}", ident(&options.channel));
    session
        .client
        .batch_execute(&listen)
        .await
        .map_err(|e| format!("cannot LISTEN: {}", super::connect::describe(&e)))?;
    let snapshot = read(&session.client, options).await?;
    Ok((session, snapshot))
}

/// Reads the table again after every burst of notifications, until the connection ends;
/// why it ended.
async fn listen(
    mut session: Session,
    options: &PgOptions,
    shared: &SharedConfig,
    history: &History,
) -> String {
    loop {
        if session.notifications.recv().await.is_none() {
            return session.ended().await;
        }
        tokio::time::sleep(COALESCE).await;
        while session.notifications.try_recv().is_ok() {}
        match read(&session.client, options).await {
            Ok(snapshot) => {
                apply(snapshot, shared, history);
            }
            Err(why) => return why,
        }
    }
}
