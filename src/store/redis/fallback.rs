//! The failure policy's answer, for the requests Redis cannot decide.

use std::sync::Arc;

use super::options::{FailurePolicy, RedisOptions};
use crate::clock::{Clock, Nanos};
use crate::error::StoreError;
use crate::limiter::Report;
use crate::store::{Bounds, Check, MemoryStore, Reports};

/// What answers when Redis cannot decide.
pub(super) struct Fallback {
    /// The policy (`--redis-failure`).
    pub(super) policy: FailurePolicy,
    /// The embedded store that decides alone under [`FailurePolicy::Local`]; `None` under
    /// the other policies, which keep no state.
    local: Option<MemoryStore>,
}

impl Fallback {
    /// The fallback `options` ask for; a local store reads idle-ness from `clock`.
    pub(super) fn new(options: &RedisOptions, clock: Arc<dyn Clock>) -> Self {
        let local = (options.failure == FailurePolicy::Local).then(|| {
            let bounds = Bounds {
                buckets: options.fallback_buckets,
                bytes: options.fallback_bytes,
            };
            MemoryStore::bounded(bounds, clock)
        });
        Self {
            policy: options.failure,
            local,
        }
    }

    /// Whether the policy answers in Redis' place (as opposed to passing the error on).
    pub(super) fn answers(&self) -> bool {
        self.policy != FailurePolicy::Error
    }

    /// The policy's answer to `checks` at `now`, Redis having failed with `why`: the
    /// error itself, every check allowed, or the embedded store's decision.
    pub(super) fn answer(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        why: StoreError,
    ) -> Result<Reports, StoreError> {
        match self.policy {
            FailurePolicy::Error => Err(why),
            FailurePolicy::Allow => Ok(checks
                .iter()
                .map(|c| Report {
                    over: false,
                    remaining: c.limit.burst,
                    ..Report::default()
                })
                .collect()),
            FailurePolicy::Local => match &self.local {
                Some(store) => Ok(store.check(checks, now)),
                None => Err(why),
            },
        }
    }

    /// The embedded store deciding alone under [`FailurePolicy::Local`]: what answers for
    /// holds and resets too while Redis cannot.
    pub(super) fn local(&self) -> Option<&MemoryStore> {
        self.local.as_ref()
    }

    /// The embedded store's upkeep, if there is one.
    pub(super) fn maintain(&self) {
        if let Some(local) = &self.local {
            local.maintain();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket_key::BucketKey;
    use crate::clock::ManualClock;
    use crate::error::StoreErrorKind;
    use crate::rules::{Algorithm, Limit, Mode, Unit};

    fn answer(policy: FailurePolicy, hits: u64) -> Result<Reports, StoreError> {
        let mut options = RedisOptions::new("redis://127.0.0.1:1");
        options.failure = policy;
        let fallback = Fallback::new(&options, Arc::new(ManualClock::new(0)));
        let check = Check {
            refund: false,
            key: BucketKey::from("1:d1:k1:v"),
            limit: Limit {
                charge: false,
                requests_per_unit: 1,
                unit: Unit::Hour,
                multiplier: 1,
                burst: 3,
                algorithm: Algorithm::TokenBucket,
            },
            hits,
            mode: Mode::Enforce,
            descriptor: 0,
            hold: None,
        };
        let why = StoreError::new(StoreErrorKind::Unreachable, "down");
        fallback.answer(&[check], 0, why)
    }

    #[test]
    fn each_policy_answers_its_way() {
        let error = answer(FailurePolicy::Error, 1).expect_err("the error passes on");
        assert_eq!(error.kind, StoreErrorKind::Unreachable);
        let allowed = answer(FailurePolicy::Allow, 5).expect("allowed");
        assert!(!allowed[0].over && allowed[0].remaining == 3);
        let local = answer(FailurePolicy::Local, 5).expect("decided locally");
        assert!(
            local[0].over,
            "the embedded store limits: 5 hits over a burst of 3"
        );
    }
}
