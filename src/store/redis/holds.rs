//! The operator's view of a key's holds ([`RedisStore::held`]) and resets
//! ([`RedisStore::reset`]), each one small script call on the key's node. Holds themselves
//! are decided in [`decide.lua`](./decide.lua)'s hold section, with their request.
//!
//! A reset deletes the bucket and its hold keys, and publishes the bucket on [`RESETS`]:
//! every replica follows the channel ([`RedisStore::follow_resets`], started by the
//! store's upkeep) and drops its over-limit snapshot and lease of the bucket, which would
//! otherwise go on answering for the state the reset removed.

use std::sync::atomic::Ordering;

use futures_util::StreamExt;

use super::RedisStore;
use super::options::TimeSource;
use super::script_args::hold_keys;
use crate::bucket_key::BucketKey;
use crate::clock::Nanos;
use crate::error::StoreError;
use crate::store::Held;

/// The channel of resets: global to a server, and heard on every node of a Cluster (as
/// [`super::QUOTA_NUDGES`]).
pub const RESETS: &str = "ml1:resets";

/// Counts the live holds of a key (hash KEYS[1], expiries KEYS[2]) at ARGV[1] (µs, or ''
/// for Redis' clock), purging nothing: holds, their hits (a slot, which keeps none in the
/// hash, counts 1), the soonest expiry in µs (0 without holds). In pages, so that
/// `unpack` stays within Lua's stack.
const HELD: &str = r"
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local holds, hits, soonest, offset = 0, 0, 0, 0
while true do
  local page = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES',
                          'LIMIT', offset, 1000)
  if #page == 0 then break end
  local ids = {}
  for k = 1, #page, 2 do ids[#ids + 1] = page[k] end
  if soonest == 0 then soonest = tonumber(page[2]) end
  local amounts = redis.call('HMGET', KEYS[1], unpack(ids))
  for k = 1, #ids do hits = hits + (tonumber(amounts[k]) or 1) end
  holds = holds + #ids
  offset = offset + #ids
end
return { holds, hits, soonest }
";

/// Deletes a bucket (KEYS[1]) and its hold keys, and tells every replica (PUBLISH ARGV[2]
/// on ARGV[1]); how many of the keys existed.
const RESET: &str = r"
local existed = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return existed
";

impl RedisStore {
    /// See [`crate::store::Store::held`]: asked of Redis directly, at `now` (or Redis'
    /// own clock, as the store decides).
    ///
    /// # Errors
    /// Redis could not answer in time, or answered nonsense.
    pub async fn held(&self, key: &BucketKey<'_>, now: Nanos) -> Result<Held, StoreError> {
        let inner = &*self.inner;
        let [holds, expiries] = hold_keys(&key.redis_key(&inner.options.key_prefix));
        let now_arg = match inner.options.time {
            TimeSource::Redis => String::new(),
            TimeSource::Caller => (now / 1000).to_string(),
        };
        let script = redis::Script::new(HELD);
        let mut call = script.prepare_invoke();
        call.key(&holds).key(&expiries).arg(now_arg);
        let asked: Result<(u64, u64, u64), StoreError> =
            inner.run_small(&holds, &call, "a hold's script").await;
        let (count, hits, soonest) = match (asked, inner.fallback.local()) {
            (Ok(numbers), _) => numbers,
            // Redis cannot answer: the local fallback decides alone, so it holds the holds.
            (Err(_), Some(local)) => return Ok(local.held(key, now)),
            (Err(why), None) => return Err(why),
        };
        Ok(Held {
            holds: count,
            hits,
            soonest_expiry: soonest.saturating_mul(1000),
        })
    }

    /// See [`crate::store::Store::reset`]: the bucket and its holds deleted in one script
    /// call, and every replica told to forget what it knows of the bucket (this one at
    /// once).
    ///
    /// # Errors
    /// Redis could not reset it in time.
    pub async fn reset(&self, key: &BucketKey<'_>) -> Result<bool, StoreError> {
        let inner = &*self.inner;
        let bucket = key.redis_key(&inner.options.key_prefix);
        let [holds, expiries] = hold_keys(&bucket);
        let script = redis::Script::new(RESET);
        let mut call = script.prepare_invoke();
        call.key(&bucket)
            .key(&holds)
            .key(&expiries)
            .arg(RESETS)
            .arg(reset_message(&inner.options.key_prefix, key.as_str()));
        let asked: Result<u64, StoreError> =
            inner.run_small(&bucket, &call, "a hold's script").await;
        inner.forget(key.as_str());
        match (asked, inner.fallback.local()) {
            (Ok(existed), local) => {
                // What the fallback kept from an outage is stale now: dropped too.
                Ok(local.is_some_and(|l| l.reset(key)) || existed > 0)
            }
            // Redis cannot reset: the local fallback decides alone meanwhile.
            (Err(_), Some(local)) => Ok(local.reset(key)),
            (Err(why), None) => Err(why),
        }
    }

    /// Follows [`RESETS`] in the background unless already following: each reset of a
    /// bucket of this store's namespace drops this replica's snapshot and lease of it.
    /// Called by the upkeep, so a lost subscription is made again within a second.
    pub(super) fn follow_resets(&self) {
        let inner = &self.inner;
        if inner.following_resets.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            if let Ok(mut messages) = store.subscribe(RESETS).await {
                while let Some(message) = messages.next().await {
                    let Ok(text) = message.get_payload::<String>() else {
                        continue;
                    };
                    if let Some(bucket) = reset_bucket(&store.inner.options.key_prefix, &text) {
                        store.inner.forget(bucket);
                    }
                }
            }
            store.inner.following_resets.store(false, Ordering::Release);
        });
    }
}

impl super::Inner {
    /// Drops what this replica knows of `bucket` (its text): snapshot and lease.
    fn forget(&self, bucket: &str) {
        self.over_limit_cache.forget(bucket);
        self.leases.forget(bucket);
    }
}

/// A reset's message: the namespace (`--redis-key-prefix`) length-prefixed, so that any
/// text can follow it, then the bucket's text.
fn reset_message(namespace: &str, bucket: &str) -> String {
    format!("{}:{namespace}{bucket}", namespace.len())
}

/// The bucket of reset `message` when it is of `namespace` (deployments sharing a Redis
/// with other prefixes hear each other's resets).
fn reset_bucket<'m>(namespace: &str, message: &'m str) -> Option<&'m str> {
    let (len, rest) = message.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let (theirs, bucket) = (rest.get(..len)?, rest.get(len..)?);
    (theirs == namespace).then_some(bucket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_names_its_namespace_and_bucket() {
        let message = reset_message("a:b", "3:llm5:alice");
        assert_eq!(message, "3:a:b3:llm5:alice");
        assert_eq!(reset_bucket("a:b", &message), Some("3:llm5:alice"));
        assert_eq!(reset_bucket("", &message), None);
        assert_eq!(reset_bucket("", &reset_message("", "k")), Some("k"));
        assert_eq!(reset_bucket("", "garbage"), None);
        assert_eq!(reset_bucket("", "9:short"), None);
    }
}
