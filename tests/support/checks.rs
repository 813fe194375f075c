//! Store checks as the script tests write them: one line per check instead of a struct
//! literal, so a test reads as the sequence of requests it sends.

use meshlimit::rules::{Limit, Mode};
use meshlimit::store::Check;

/// The check of bucket `key` under `limit`, taking `hits` in `mode`, for the request's
/// descriptor number `descriptor`.
pub fn check(key: &str, limit: Limit, hits: u64, mode: Mode, descriptor: usize) -> Check<'_> {
    Check {
        refund: false,
        key: key.into(),
        limit,
        hits,
        mode,
        descriptor,
        hold: None,
    }
}
