//! The quota service's shared state in Redis: for each quota bucket, the demand of every
//! Envoy reporting it, on whichever replica its stream is (see
//! [`quota_demands.lua`](./quota_demands.lua)). One script call per bucket and report:
//! this replica's entries written, stale ones dropped, all live ones read.

use redis::Value;

use super::RedisStore;
use super::quota_nudges::QUOTA_NUDGES;
use crate::error::{StoreError, StoreErrorKind};

/// The quota scripts, hashed once.
static SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("quota_demands.lua")));
static GRANT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("quota_grant.lua")));

/// One reporter as the replicas share it.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    /// `<replica>/<stream>`.
    pub field: String,
    /// Requests per second; `None`: not known yet.
    pub demand: Option<f64>,
    /// What it is assigned: `tokens_per_fill` (0 when not a token bucket).
    pub tokens_per_fill: u32,
    /// What it is assigned: `max_tokens` (0 when not a token bucket).
    pub max_tokens: u32,
}

impl RedisStore {
    /// Writes `mine` and deletes `gone` in the bucket's hash `key`, drops entries older
    /// than `stale_ms`, and returns every live entry, at `now_ms`. Deleting a field that
    /// was there publishes the bucket on [`QUOTA_NUDGES`]: what it held is free.
    ///
    /// # Errors
    /// Redis did not answer within the store's timeout, or answered nonsense.
    pub async fn quota_demands(
        &self,
        key: &str,
        mine: &[Demand],
        gone: &[String],
        now_ms: u64,
        stale_ms: u64,
    ) -> Result<Vec<Demand>, StoreError> {
        let mut call = SCRIPT.key(key);
        call.arg(now_ms).arg(stale_ms).arg(mine.len());
        for d in mine {
            call.arg(&d.field).arg(format!(
                "{} {} {}",
                d.demand.map_or(-1.0, |d| d),
                d.tokens_per_fill,
                d.max_tokens
            ));
        }
        call.arg(QUOTA_NUDGES);
        for field in gone {
            call.arg(field);
        }
        let value = self
            .inner
            .run_small::<Value>(key, &call, "a quota bucket")
            .await?;
        parse(&value).ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::MalformedReply,
                "Redis sent a malformed quota reply",
            )
        })
    }
}

impl RedisStore {
    /// Grants `wanted` (this replica's reporters of the bucket `key`, each with the share it
    /// should get) within what the other live entries hold of `total` (the rule's
    /// `tokens_per_fill` over the shares' interval, and its `max_tokens`), atomically;
    /// returns the granted `tokens_per_fill` and `max_tokens`, in order. A grant that is
    /// cut, or that leaves one of `replica`'s reporters less than it held, is published on
    /// [`QUOTA_NUDGES`] (see [`RedisStore::quota_nudges`]).
    ///
    /// # Errors
    /// Redis did not answer within the store's timeout, or answered nonsense.
    pub async fn quota_grant(
        &self,
        key: &str,
        wanted: &[Demand],
        total: (u32, u32),
        now_ms: u64,
        stale_ms: u64,
        replica: &str,
    ) -> Result<Vec<(u32, u32)>, StoreError> {
        let mut call = GRANT.key(key);
        call.arg(now_ms)
            .arg(stale_ms)
            .arg(total.0)
            .arg(total.1)
            .arg(wanted.len());
        for d in wanted {
            call.arg(&d.field)
                .arg(d.demand.map_or(-1.0, |d| d))
                .arg(d.tokens_per_fill)
                .arg(d.max_tokens);
        }
        call.arg(QUOTA_NUDGES).arg(replica);
        let value = self
            .inner
            .run_small::<Value>(key, &call, "a quota bucket")
            .await?;
        let malformed = || {
            StoreError::new(
                StoreErrorKind::MalformedReply,
                "Redis sent a malformed quota grant",
            )
        };
        let Value::Array(items) = value else {
            return Err(malformed());
        };
        let number = |v: &Value| match v {
            Value::Int(n) => u32::try_from(*n).ok(),
            _ => None,
        };
        let granted: Option<Vec<(u32, u32)>> = items
            .chunks(2)
            .map(|pair| match pair {
                [rate, burst] => Some((number(rate)?, number(burst)?)),
                _ => None,
            })
            .collect();
        granted
            .filter(|g| g.len() == wanted.len())
            .ok_or_else(malformed)
    }
}

/// The script's reply: field, demand pairs.
fn parse(value: &Value) -> Option<Vec<Demand>> {
    let Value::Array(items) = value else {
        return None;
    };
    let text = |v: &Value| match v {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    items
        .chunks(2)
        .map(|pair| match pair {
            [field, value] => {
                let value = text(value)?;
                let mut parts = value.split(' ');
                let demand: f64 = parts.next()?.parse().ok()?;
                let tokens_per_fill = parts.next()?.parse().ok()?;
                let max_tokens = parts.next()?.parse().ok()?;
                Some(Demand {
                    field: text(field)?,
                    demand: (demand >= 0.0).then_some(demand),
                    tokens_per_fill,
                    max_tokens,
                })
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_strictly() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            bulk("a/1"),
            bulk("2.5 500 10"),
            bulk("b/7"),
            bulk("-1 0 0"),
        ]);
        assert_eq!(
            parse(&reply),
            Some(vec![
                Demand {
                    field: "a/1".into(),
                    demand: Some(2.5),
                    tokens_per_fill: 500,
                    max_tokens: 10
                },
                Demand {
                    field: "b/7".into(),
                    demand: None,
                    tokens_per_fill: 0,
                    max_tokens: 0
                }
            ])
        );
        assert_eq!(parse(&Value::Array(vec![bulk("a/1")])), None);
        assert_eq!(parse(&Value::Array(vec![bulk("a/1"), bulk("2.5")])), None);
        assert_eq!(parse(&Value::Array(vec![bulk("a/1"), bulk("x 1 1")])), None);
        assert_eq!(parse(&Value::Nil), None);
    }
}
