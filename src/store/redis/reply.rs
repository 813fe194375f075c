//! The decision script's reply ([`decide.lua`](./decide.lua)): parsed as plain numbers,
//! then read for each check's algorithm ([`CheckReply::outcome`]), so that nothing else
//! needs to know what the script's numbers mean.
//!
//! Parsing is a pure function of the raw reply, so that it can be fuzzed: anything that is
//! not the script's exact shape is an error, never a panic.

use redis::Value;

use super::script_args::Scale;
use crate::clock::Nanos;
use crate::limiter::Report;
use crate::rules::{Algorithm, Limit};

/// One check's numbers as the script sends them: three that mean the same for every
/// algorithm, then two whose meaning depends on the check's algorithm, read by
/// [`CheckReply::outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckReply {
    /// The check is over its limit.
    pub over: bool,
    /// Whole tokens (or window hits) left.
    pub remaining: i64,
    /// Microseconds until the bucket can pass again (token buckets), the window resets
    /// (fixed windows), or, for sliding windows, until the request could pass (over) or
    /// the window is empty (not over).
    pub reset_us: i64,
    /// The script's last two numbers, unnamed until the algorithm is known.
    specific: [i64; 2],
    /// Holds (and slots) of the check's key that the script released unsettled after
    /// their TTL before deciding (only a check with a hold has any): sent in the first
    /// number, beside `over`, as `over + 2 × expired`.
    pub expired: u64,
}

/// One check's reply, read for its algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The check is over its limit.
    pub over: bool,
    /// Whole tokens (or window hits) left, negatives as 0.
    pub remaining: u32,
    /// Until the bucket can pass again (token buckets) or the window resets.
    pub reset: Nanos,
    /// What the script left of the bucket.
    pub after: After,
}

impl Outcome {
    /// The report of a check under `limit` (the limit the script was asked about). What a
    /// limit that charges owes follows from what the script left: a token bucket's debt
    /// beyond its capacity in whole tokens, a window's count beyond its limit.
    pub fn report(&self, limit: &Limit) -> Report {
        let (reset, count) = match self.after {
            // A bucket that never refills does not say when: one period, as the embedded
            // store reports it.
            After::TokenBucket { .. } if limit.requests_per_unit == 0 => (limit.period_nanos(), 0),
            // What it owes past empty, which only a limit that charges can.
            After::TokenBucket { debt, .. } if limit.charge => {
                (self.reset, Scale::of(limit).owed(debt))
            }
            After::TokenBucket { .. } => (self.reset, 0),
            After::FixedWindow { count, .. } | After::SlidingWindow { count, .. } => {
                (self.reset, count)
            }
        };
        Report {
            over: self.over,
            remaining: self.remaining,
            reset,
            count,
            cached: false,
        }
    }
}

/// What the script left of a bucket after deciding, per algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// A token bucket.
    TokenBucket {
        /// Debt after the decision, in the limit's scaled units (`Scale` in
        /// script_args.rs).
        debt: u64,
        /// Tokens leased to this replica beyond the request's own.
        leased: u64,
    },
    /// A fixed window.
    FixedWindow {
        /// Hits counted in the window after the decision.
        count: u64,
        /// Microseconds until the window ends.
        ends_in_us: u64,
    },
    /// A sliding window.
    SlidingWindow {
        /// Hits counted in the window after the decision (admitted ones only).
        count: u64,
        /// When over: microseconds until one hit could pass; nothing passes before (no
        /// admission, so no count can change), which is what the over-limit cache keeps.
        /// 0 when one hit could pass now, or when the check is not over.
        one_passes_in_us: u64,
    },
}

impl CheckReply {
    /// decide.lua's numbers for a check: over, remaining, reset in microseconds, and the
    /// two the algorithm names ([`CheckReply::outcome`]).
    pub(crate) fn new(over: bool, remaining: i64, reset_us: i64, specific: [i64; 2]) -> Self {
        CheckReply {
            over,
            remaining,
            reset_us,
            specific,
            expired: 0,
        }
    }

    /// The reply of a concurrency slot's check (decide.lua's `slot_report`): slots left,
    /// the time until the soonest expires, and slots in use as the count. Negative
    /// numbers (never sent) read as 0.
    pub fn slot_report(&self) -> Report {
        Report {
            over: self.over,
            remaining: u32::try_from(self.remaining.max(0)).unwrap_or(u32::MAX),
            reset: (self.reset_us.max(0) as u64).saturating_mul(1000),
            count: self.specific[0].max(0) as u64,
            cached: false,
        }
    }

    /// The reply read for a check of `algorithm`; negative numbers (never sent by the
    /// script) read as 0.
    pub fn outcome(&self, algorithm: Algorithm) -> Outcome {
        let [first, second] = self.specific.map(|n| n.max(0) as u64);
        Outcome {
            over: self.over,
            remaining: u32::try_from(self.remaining.max(0)).unwrap_or(u32::MAX),
            reset: (self.reset_us.max(0) as u64).saturating_mul(1000),
            after: match algorithm {
                Algorithm::TokenBucket => After::TokenBucket {
                    debt: first,
                    leased: second,
                },
                Algorithm::FixedWindow => After::FixedWindow {
                    count: first,
                    ends_in_us: second,
                },
                Algorithm::SlidingWindow => After::SlidingWindow {
                    count: first,
                    one_passes_in_us: second,
                },
            },
        }
    }
}

/// The script's whole reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The request was denied (no token bucket consumed).
    pub denied: bool,
    /// One entry per check, in request order.
    pub checks: Vec<CheckReply>,
}

/// A reply that is not the script's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Redis sent a malformed reply: {0}")]
pub struct ReplyError(
    /// What is wrong with the reply.
    pub(crate) String,
);

/// Fields per check in the reply.
const FIELDS: usize = 5;

/// Parses an `EVALSHA` reply of the decision script for one request: an array of integers,
/// the denied flag then [`FIELDS`] per check.
///
/// # Errors
/// Anything else: another type, a non-integer element, a length that is not 1 + 5n, a
/// denied flag that is neither 0 nor 1, or a check's first number negative.
pub fn parse(value: &Value) -> Result<Reply, ReplyError> {
    let numbers = integers(value)?;
    let Some(per) = numbers.len().checked_sub(1) else {
        return Err(ReplyError("empty array".into()));
    };
    if per % FIELDS != 0 {
        return Err(ReplyError(format!(
            "{} elements, not 1 + {FIELDS} per check",
            numbers.len()
        )));
    }
    request(&numbers)
}

/// The numbers of an array of integers (a script call's reply, before it is split into
/// its requests' replies).
///
/// # Errors
/// Another type, or a non-integer element.
pub(crate) fn integers(value: &Value) -> Result<Vec<i64>, ReplyError> {
    let Value::Array(items) = value else {
        return Err(ReplyError(format!(
            "expected an array, got {}",
            kind(value)
        )));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Int(n) => Ok(*n),
            other => Err(ReplyError(format!("element {i} is {}", kind(other)))),
        })
        .collect()
}

/// The numbers of a string of little-endian doubles (decide_buckets.lua's reply), each a
/// whole number.
///
/// # Errors
/// Another type, a length that is not a multiple of 8, or a number that is not whole.
pub(crate) fn doubles(value: &Value) -> Result<Vec<i64>, ReplyError> {
    let Value::BulkString(bytes) = value else {
        return Err(ReplyError(format!(
            "expected a string of numbers, got {}",
            kind(value)
        )));
    };
    if bytes.len() % 8 != 0 {
        return Err(ReplyError(format!(
            "{} bytes, not a whole number of doubles",
            bytes.len()
        )));
    }
    bytes
        .chunks_exact(8)
        .map(|b| {
            let mut raw = [0; 8];
            raw.copy_from_slice(b);
            let n = f64::from_le_bytes(raw);
            // Whole and within i64 (2^63 is exact as a double, and out of range).
            if n.fract() == 0.0 && n.abs() < 9_223_372_036_854_775_808.0 {
                Ok(n as i64)
            } else {
                Err(ReplyError(format!("{n} is not a whole number")))
            }
        })
        .collect()
}

/// One request's reply from decide.lua's numbers: the denied flag, then [`FIELDS`] per
/// check (`numbers` is 1 + 5n long), each check's first its over flag plus twice the holds
/// it released ([`CheckReply::expired`]).
///
/// # Errors
/// A denied flag that is neither 0 nor 1, or a check's first number negative.
pub(crate) fn request(numbers: &[i64]) -> Result<Reply, ReplyError> {
    let (&denied, per) = numbers
        .split_first()
        .ok_or_else(|| ReplyError("empty array".into()))?;
    let checks = per
        .chunks_exact(FIELDS)
        .map(|c| {
            let expired =
                u64::try_from(c[0] >> 1).map_err(|_| ReplyError(format!("over flag {}", c[0])))?;
            Ok(CheckReply {
                over: c[0] & 1 == 1,
                remaining: c[1],
                reset_us: c[2],
                specific: [c[3], c[4]],
                expired,
            })
        })
        .collect::<Result<Vec<_>, ReplyError>>()?;
    Ok(Reply {
        denied: flag(denied, "denied")?,
        checks,
    })
}

/// A script's 0 or 1 as a flag; `what` names it in the error.
///
/// # Errors
/// Any other number.
pub(crate) fn flag(n: i64, what: &str) -> Result<bool, ReplyError> {
    match n {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(ReplyError(format!("{what} flag {other}"))),
    }
}

/// [`parse`] of a reply still in RESP bytes (what Redis sends), for fuzzing the whole way
/// from the wire.
///
/// # Errors
/// Bytes that are not one whole RESP value, or a value [`parse`] rejects.
pub fn parse_resp(bytes: &[u8]) -> Result<Reply, ReplyError> {
    let value = redis::parse_redis_value(bytes)
        .map_err(|e| ReplyError(format!("not a RESP value: {e}")))?;
    parse(&value)
}

/// A value's type, for messages (never its content, which may be large).
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Int(_) => "an integer",
        Value::BulkString(_) => "a bulk string",
        Value::Array(_) => "an array",
        Value::SimpleString(_) => "a simple string",
        Value::Okay => "OK",
        Value::ServerError(_) => "an error reply",
        _ => "another type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(ns: &[i64]) -> Value {
        Value::Array(ns.iter().map(|&n| Value::Int(n)).collect())
    }

    #[test]
    fn the_scripts_shape_parses() {
        let reply = parse(&ints(&[1, 1, 0, 500, 7, 0, 0, 3, 0, 2, 1])).expect("valid");
        assert!(reply.denied);
        assert_eq!(
            reply.checks,
            [
                CheckReply {
                    over: true,
                    remaining: 0,
                    reset_us: 500,
                    specific: [7, 0],
                    expired: 0,
                },
                CheckReply {
                    over: false,
                    remaining: 3,
                    reset_us: 0,
                    specific: [2, 1],
                    expired: 0,
                },
            ]
        );
        assert_eq!(parse(&ints(&[0])).expect("no checks").checks, []);
    }

    #[test]
    fn a_checks_first_number_is_its_over_flag_and_twice_the_holds_it_released() {
        let reply = parse(&ints(&[0, 6, 3, 0, 0, 0, 7, 0, 0, 0, 0])).expect("valid");
        let read = |c: &CheckReply| (c.over, c.expired);
        assert_eq!(
            reply.checks.iter().map(read).collect::<Vec<_>>(),
            [(false, 3), (true, 3)]
        );
        assert!(parse(&ints(&[0, -2, 0, 0, 0, 0])).is_err());
    }

    #[test]
    fn a_string_of_doubles_reads_as_whole_numbers() {
        let packed =
            |ns: &[f64]| Value::BulkString(ns.iter().flat_map(|n| n.to_le_bytes()).collect());
        assert_eq!(
            doubles(&packed(&[0.0, 3.0, 9_007_199_254_740_991.0])),
            Ok(vec![0, 3, (1 << 53) - 1])
        );
        assert_eq!(doubles(&packed(&[])), Ok(vec![]));
        for bad in [
            packed(&[0.5]),
            packed(&[f64::NAN]),
            packed(&[f64::INFINITY]),
            packed(&[1e19]),
            Value::BulkString(vec![0; 7]),
            ints(&[0]),
        ] {
            assert!(doubles(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_last_two_numbers_are_named_by_the_algorithm() {
        let reply = parse(&ints(&[0, 1, -4, 2500, 7, 3])).expect("valid");
        let check = reply.checks[0];
        assert_eq!(
            check.outcome(Algorithm::TokenBucket),
            Outcome {
                over: true,
                remaining: 0,
                reset: 2_500_000,
                after: After::TokenBucket { debt: 7, leased: 3 },
            }
        );
        assert_eq!(
            check.outcome(Algorithm::FixedWindow).after,
            After::FixedWindow {
                count: 7,
                ends_in_us: 3
            }
        );
        assert_eq!(
            check.outcome(Algorithm::SlidingWindow).after,
            After::SlidingWindow {
                count: 7,
                one_passes_in_us: 3
            }
        );
    }

    #[test]
    fn a_limit_that_charges_reports_what_it_owes() {
        let limit = |algorithm, charge| Limit {
            charge,
            requests_per_unit: 100,
            unit: crate::rules::Unit::Second,
            multiplier: 1,
            burst: 10,
            algorithm,
        };
        // 100/s, burst 10: a token is 10,000 scaled units, the capacity 100,000.
        let bucket = parse(&ints(&[1, 1, 0, 5_000, 125_001, 0]))
            .expect("valid")
            .checks[0];
        let owed = |reply: CheckReply, algorithm, charge| {
            let limit = limit(algorithm, charge);
            reply.outcome(algorithm).report(&limit).owed(&limit)
        };
        assert_eq!(owed(bucket, Algorithm::TokenBucket, true), 3);
        assert_eq!(owed(bucket, Algorithm::TokenBucket, false), 0);
        let window = parse(&ints(&[1, 1, 0, 5_000, 130, 0]))
            .expect("valid")
            .checks[0];
        for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
            assert_eq!(owed(window, algorithm, true), 30);
            assert_eq!(owed(window, algorithm, false), 0);
        }
        let within = parse(&ints(&[0, 0, 3, 5_000, 97, 0]))
            .expect("valid")
            .checks[0];
        assert_eq!(owed(within, Algorithm::FixedWindow, true), 0);
    }

    proptest::proptest! {
        /// Whatever bytes Redis (or a fuzzer) sends: an answer, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse_resp(&bytes);
        }

        /// Arrays of integers of any length and values: valid exactly when the shape is.
        #[test]
        fn integer_arrays_are_valid_exactly_in_the_scripts_shape(ns in proptest::collection::vec(-3i64..3, 0..24)) {
            let valid = !ns.is_empty()
                && (ns.len() - 1) % FIELDS == 0
                && (0..=1).contains(&ns[0])
                && ns[1..].chunks(FIELDS).all(|c| c[0] >= 0);
            proptest::prop_assert_eq!(parse(&ints(&ns)).is_ok(), valid);
        }
    }

    #[test]
    fn resp_bytes_parse_or_say_why() {
        let reply = parse_resp(b"*6\r\n:0\r\n:0\r\n:9\r\n:0\r\n:1\r\n:0\r\n").expect("valid");
        assert_eq!(reply.checks.len(), 1);
        assert_eq!(reply.checks[0].remaining, 9);
        for bad in [
            &b""[..],
            b"*6\r\n:0\r\n",
            b"-OOM command not allowed\r\n",
            b"$-1\r\n",
            b"*1\r\n$3\r\nabc\r\n",
            b"\xff\xfe garbage",
            b"*2\r\n:0\r\n",
        ] {
            assert!(parse_resp(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        let nested = Value::Array(vec![Value::Int(0), ints(&[1, 2, 3, 4, 5])]);
        for bad in [
            Value::Nil,
            Value::Okay,
            Value::Int(0),
            Value::BulkString(b"\x00\xff".to_vec()),
            Value::SimpleString("OK".into()),
            ints(&[]),
            ints(&[0, 1, 2]),
            ints(&[0, 1, 2, 3, 4, 5, 6]),
            ints(&[2, 0, 0, 0, 0, 0]),
            ints(&[0, -1, 0, 0, 0, 0]),
            ints(&[i64::MIN, 0, 0, 0, 0, 0]),
            nested,
            Value::Array(vec![Value::Int(0), Value::Nil, Value::Int(0)]),
            Value::Array(vec![Value::Int(0); 1_000_002]),
        ] {
            let Err(err) = parse(&bad) else {
                panic!("accepted a malformed reply");
            };
            assert!(err.to_string().starts_with("Redis sent a malformed reply"));
        }
    }
}
