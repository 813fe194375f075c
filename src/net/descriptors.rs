//! The process' file-descriptor limit (`RLIMIT_NOFILE`), and the default connection cap
//! it allows.
//!
//! Every connection costs one descriptor; the server also needs some for itself: the
//! listening sockets, the runtime's epoll and wake-up descriptors, the config watcher
//! and the files a reload reads, Redis connections (one per node, plus a probe), log
//! output and TLS files. [`DESCRIPTOR_HEADROOM`] is kept for those, so that a flood of
//! connections meets the connection cap, which refuses cleanly, before the descriptor
//! limit, which makes every `accept`, `open` and `connect` of the process fail.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors kept out of the default connection cap for the server's own use (half
/// the limit when the limit is below twice this).
pub const DESCRIPTOR_HEADROOM: usize = 64;

/// Cap used when the descriptor limit is unlimited.
const UNLIMITED_CAP: usize = 1 << 20;

/// Raises the soft descriptor limit to the hard one, as Go programs do at startup (the
/// soft limit is often 1024 while the hard one allows far more). Returns the soft limit
/// in force afterwards (`None`: unlimited).
pub fn raise_soft_limit() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
        && current < maximum
    {
        let raised = Rlimit {
            current: Some(maximum.min(UNLIMITED_CAP as u64)),
            maximum: Some(maximum),
        };
        // Not being allowed to is no problem: the limit stays as it was.
        let _ = setrlimit(Resource::Nofile, raised);
    }
    getrlimit(Resource::Nofile).current
}

/// The default `--max-connections`: the soft descriptor limit minus
/// [`DESCRIPTOR_HEADROOM`] (minus half the limit when it is below twice that).
pub fn default_max_connections() -> usize {
    cap_for(getrlimit(Resource::Nofile).current)
}

fn cap_for(limit: Option<u64>) -> usize {
    match limit {
        None => UNLIMITED_CAP,
        Some(limit) => {
            let limit = usize::try_from(limit)
                .unwrap_or(UNLIMITED_CAP)
                .min(UNLIMITED_CAP);
            limit - DESCRIPTOR_HEADROOM.min(limit / 2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_is_kept_out_of_the_cap() {
        assert_eq!(cap_for(Some(1024)), 960);
        assert_eq!(cap_for(Some(256)), 192);
        assert_eq!(cap_for(Some(64)), 32);
        assert_eq!(cap_for(None), UNLIMITED_CAP);
    }
}
