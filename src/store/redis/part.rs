//! One request's share of a script call ([`Part`]): which script decides it ([`Shape`]),
//! its keys and arguments, and how its reply is read from the call's. A call decides the
//! parts of one shape in order ([`evalsha`]); see [`super::call_queue`] for how they are put
//! together.
//!
//! [`decide_buckets.lua`](./decide_buckets.lua) answers a token bucket's debt before the
//! request and the request's fate; [`BucketCheck::reply`] derives from those what
//! [`decide.lua`](./decide.lua) answers (over, remaining, reset, debt after), with the same
//! exact integer arithmetic, so the rest of the store reads one reply whichever script
//! decided. Charges and refunds take either script: their replies are derived alike (a
//! landed debt, the same for both fates), so a charge costs what a normal decision of
//! its shape costs.

use std::collections::HashMap;

use foldhash::fast::RandomState;
use redis::Cmd;

use super::leases::Want;
use super::options::TimeSource;
use super::reply::{self, CheckReply, Reply, ReplyError};
use super::script_args::{self, BucketCheck, general_args};
use crate::clock::Nanos;
use crate::store::Check;

/// Which script decides a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// [`decide_buckets.lua`](./decide_buckets.lua): every check a token bucket in enforce
    /// or shadow mode, no lease, no bucket twice. Most requests; the same answers as the
    /// general script, for a fraction of Redis' time.
    Buckets,
    /// [`decide.lua`](./decide.lua): any request.
    General,
}

/// Checks up to which a request is looked at for a bucket named twice (which the
/// specialised script does not take); longer requests go to the general script.
const BUCKETS_UP_TO: usize = 16;

/// A request's arguments, in its script's layout.
#[derive(Debug)]
enum Args {
    /// Each check's numbers for [`decide_buckets.lua`](./decide_buckets.lua).
    Buckets(Vec<BucketCheck>),
    /// [`decide.lua`](./decide.lua)'s arguments for the request.
    General(Cmd),
}

/// One request's share of a script call: its keys, its arguments, and what bounds a call.
#[derive(Debug)]
pub(crate) struct Part {
    /// Its checks' Redis keys, in order.
    pub(crate) keys: smallvec::SmallVec<[String; 4]>,
    /// Its arguments.
    args: Args,
    /// The time it is decided at, in microseconds, when the caller gives it
    /// ([`TimeSource::Caller`]); `None`: Redis' clock. A call's parts share one.
    pub(crate) now_us: Option<u64>,
    /// Its checks.
    pub(crate) checks: usize,
    /// Bytes it adds to the call (keys and arguments), to bound a call's size.
    pub(crate) bytes: usize,
}

impl Part {
    /// The part deciding `checks` at `now` on `keys` (their Redis keys), each leasing its
    /// [`Want`]'s extra tokens, the time read from `time`. Token buckets alone go to the
    /// specialised script unless `specialised` is false.
    pub(crate) fn new(
        time: TimeSource,
        mut keys: smallvec::SmallVec<[String; 4]>,
        checks: &[Check<'_>],
        wants: &[Want],
        now: Nanos,
        specialised: bool,
    ) -> Part {
        // One key a check, all distinct: the specialised script numbers a call's buckets by
        // its parts' keys (`distinct_buckets`), check after check. Looked at last, and only
        // for short requests: `distinct` compares every pair of keys.
        let holds = script_args::hold_ops(checks).count() > 0;
        // Holds go to the general script: its hold section is the only one.
        let buckets = if specialised
            && !holds
            && checks.len() <= BUCKETS_UP_TO
            && keys.len() == checks.len()
            && distinct(&keys)
        {
            checks
                .iter()
                .zip(wants)
                .map(|(check, want)| BucketCheck::of(check).filter(|_| want.extra == 0))
                .collect::<Option<Vec<BucketCheck>>>()
        } else {
            None
        };
        let (args, arg_bytes) = match buckets {
            Some(buckets) => {
                let bytes = 8 * (1 + 3 * buckets.len());
                (Args::Buckets(buckets), bytes)
            }
            None => {
                // Each hold op's keys after the checks' (decide.lua's KEYS), in op order.
                if holds {
                    let extra: Vec<String> = script_args::hold_ops(checks)
                        .filter_map(|(i, _, _)| keys.get(i))
                        .flat_map(|key| script_args::hold_keys(key))
                        .collect();
                    keys.extend(extra);
                }
                let mut args = Cmd::new();
                let bytes = general_args(&mut args, time, checks, wants, now);
                (Args::General(args), bytes)
            }
        };
        Part {
            bytes: keys.iter().map(String::len).sum::<usize>() + arg_bytes,
            keys,
            args,
            now_us: match time {
                TimeSource::Redis => None,
                TimeSource::Caller => Some(now / 1000),
            },
            checks: checks.len(),
        }
    }

    /// A part of `shape` with `checks` checks and `bytes` bytes, and nothing in them: for
    /// tests of how parts are put together.
    #[cfg(test)]
    pub(crate) fn sized(shape: Shape, checks: usize, bytes: usize) -> Part {
        Part {
            keys: smallvec::SmallVec::new(),
            args: match shape {
                Shape::Buckets => Args::Buckets(Vec::new()),
                Shape::General => Args::General(Cmd::new()),
            },
            now_us: None,
            checks,
            bytes,
        }
    }

    /// The script that decides it.
    pub(crate) fn shape(&self) -> Shape {
        match self.args {
            Args::Buckets(_) => Shape::Buckets,
            Args::General(_) => Shape::General,
        }
    }

    /// Numbers its script answers for it.
    fn reply_len(&self) -> usize {
        match &self.args {
            Args::Buckets(checks) => 1 + checks.len(),
            Args::General(_) => 1 + 5 * self.checks,
        }
    }

    /// Its reply from its share of the call's numbers (`reply_len` of them).
    fn reply(&self, numbers: &[i64]) -> Result<Reply, ReplyError> {
        let Args::Buckets(checks) = &self.args else {
            return reply::request(numbers);
        };
        let (&denied, debts) = numbers
            .split_first()
            .ok_or_else(|| ReplyError("empty reply".into()))?;
        let denied = reply::flag(denied, "denied")?;
        let mut over_enforced = false;
        let replies = checks
            .iter()
            .zip(debts)
            .map(|(check, &debt)| {
                let reply = check.reply(debt, denied)?;
                over_enforced |= check.enforce && reply.over;
                Ok(reply)
            })
            .collect::<Result<Vec<CheckReply>, ReplyError>>()?;
        if over_enforced != denied {
            return Err(ReplyError(format!(
                "denied flag {denied} for checks that say otherwise"
            )));
        }
        Ok(Reply {
            denied,
            checks: replies,
        })
    }
}

/// Whether no key repeats.
fn distinct(keys: &[String]) -> bool {
    keys.iter()
        .enumerate()
        .all(|(i, key)| !keys[..i].contains(key))
}

impl BucketCheck {
    /// What decide.lua answers for this check, from the bucket's debt before the request
    /// (`debt`, refilled to now) and the request's fate: the same steps as its `bucket`
    /// and `outcome`, in exact integers (every number stays below 2^53).
    ///
    /// A check that lands (a charge or a refund, see `careful` in decide_buckets.lua) moves
    /// the debt by its hits whatever the fate, within 0..=ceiling, and is over while the
    /// bucket is in debt; its reset is then the time until one hit passes.
    fn reply(&self, debt: i64, denied: bool) -> Result<CheckReply, ReplyError> {
        let s = &self.scale;
        let debt = u64::try_from(debt)
            .ok()
            .filter(|&d| d <= s.ceiling)
            .ok_or_else(|| ReplyError(format!("debt {debt} outside 0..={}", s.ceiling)))?;
        let take = self.hits.saturating_mul(s.token);
        let need = take.max(s.token);
        let (over, after, reset) = if self.lands() {
            let after = if self.refund {
                debt.saturating_sub(take)
            } else {
                debt.saturating_add(take).min(s.ceiling)
            };
            let over = after > s.cap;
            let reset = if !over {
                after.div_ceil(s.rate)
            } else if after == debt && s.token > s.cap {
                debt.div_ceil(s.rate)
            } else {
                (after - s.cap + s.token).div_ceil(s.rate)
            };
            (over, after, reset)
        } else {
            // In debt (only under a limit that charges) nothing passes.
            let passes = s.rate > 0 && debt <= s.cap && need <= s.cap - debt;
            let after = if passes && !denied { debt + take } else { debt };
            let reset = if passes {
                after.div_ceil(s.rate)
            } else if s.rate == 0 {
                0
            } else if need <= s.cap {
                (need + debt - s.cap).div_ceil(s.rate)
            } else {
                debt.div_ceil(s.rate)
            };
            (!passes, after, reset)
        };
        let remaining = if s.rate > 0 {
            s.cap.saturating_sub(after) / s.token
        } else {
            0
        };
        let number = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Ok(CheckReply::new(
            over,
            number(remaining),
            number(reset.saturating_mul(s.q)),
            [number(after), 0],
        ))
    }
}

/// The `EVALSHA` of the script `sha` deciding `parts` (all of one shape, and one time) in
/// order, in one call: the keys, then the arguments. decide_buckets.lua takes each bucket
/// of the call once, however many parts name it, and one string of doubles (the time
/// first) in which each check names its bucket by number; decide.lua takes every part's
/// keys and arguments, one part after the other.
pub(crate) fn evalsha(sha: &str, parts: &[&Part]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha);
    if parts.first().is_some_and(|p| p.shape() == Shape::Buckets) {
        let (buckets, numbers) = distinct_buckets(parts);
        cmd.arg(buckets.len());
        for key in buckets {
            cmd.arg(key);
        }
        cmd.arg(buckets_arg(parts, &numbers));
    } else {
        cmd.arg(parts.iter().map(|p| p.keys.len()).sum::<usize>());
        for part in parts {
            for key in &part.keys {
                cmd.arg(key);
            }
        }
        for part in parts {
            if let Args::General(args) = &part.args {
                for arg in args.args_iter() {
                    if let redis::Arg::Simple(bytes) = arg {
                        cmd.arg(bytes);
                    }
                }
            }
        }
    }
    cmd
}

/// Each bucket `parts` name, once, in order of first use; and for each of the parts' keys
/// in turn, its bucket's number in that list (1 on, as Lua counts).
///
/// Requests of a call often share buckets (one user's, one client's): each is sent, read
/// and written once a call, and the script finds a check's bucket by number instead of
/// hashing its key.
fn distinct_buckets<'p>(parts: &[&'p Part]) -> (Vec<&'p str>, Vec<u32>) {
    let keys = parts.iter().map(|p| p.keys.len()).sum();
    let mut buckets: Vec<&str> = Vec::with_capacity(keys);
    let mut numbers = Vec::with_capacity(keys);
    let mut known: HashMap<&str, u32, RandomState> =
        HashMap::with_capacity_and_hasher(keys, RandomState::default());
    for key in parts.iter().flat_map(|p| &p.keys) {
        let number = *known.entry(key).or_insert_with(|| {
            buckets.push(key);
            // A call's keys are bounded (`call_queue::MAX_CHECKS`), far below u32::MAX.
            buckets.len() as u32
        });
        numbers.push(number);
    }
    (buckets, numbers)
}

/// decide_buckets.lua's one argument for `parts`, little-endian doubles: now in microseconds
/// (-1: Redis' clock), the number of limits and each limit's token, rate, cap, q and
/// ceiling, then per part its number of checks (negative when one of them is of a limit
/// that charges, or a refund), then per check its hits (negative for a refund, -0 for a
/// refund of nothing), its limit's number (1 on), negative in shadow mode, and its
/// bucket's number (`buckets`: one per check, in order, see [`distinct_buckets`]). Most
/// checks of a call share a few limits, so each check sends three numbers rather than
/// eight.
fn buckets_arg(parts: &[&Part], buckets: &[u32]) -> Vec<u8> {
    let mut limits: smallvec::SmallVec<[[u64; 5]; 4]> = smallvec::SmallVec::new();
    let mut checks: Vec<f64> = Vec::with_capacity(parts.iter().map(|p| 1 + 3 * p.checks).sum());
    let mut buckets = buckets.iter();
    for part in parts {
        let Args::Buckets(bucket_checks) = &part.args else {
            continue;
        };
        let n = bucket_checks.len() as f64;
        let careful = bucket_checks.iter().any(BucketCheck::careful);
        checks.push(if careful { -n } else { n });
        for check in bucket_checks {
            let s = &check.scale;
            let limit = [s.token, s.rate, s.cap, s.q, s.ceiling];
            let number = match limits.iter().position(|l| *l == limit) {
                Some(i) => i + 1,
                None => {
                    limits.push(limit);
                    limits.len()
                }
            } as f64;
            // Integers below 2^53 are exact as doubles; larger hits round to the nearest,
            // as the general script's tonumber rounds them.
            let hits = check.hits as f64;
            checks.push(if check.refund { -hits } else { hits });
            checks.push(if check.enforce { number } else { -number });
            checks.push(buckets.next().copied().map_or(0.0, f64::from));
        }
    }
    let now = parts
        .first()
        .and_then(|p| p.now_us)
        .map_or(-1.0, |us| us as f64);
    let numbers = [now, limits.len() as f64]
        .into_iter()
        .chain(limits.iter().flatten().map(|&n| n as f64))
        .chain(checks);
    numbers.flat_map(f64::to_le_bytes).collect()
}

/// Each part's reply from the call's `value`, in order.
///
/// # Errors
/// Not the script's numbers (decide_buckets.lua: a string of doubles; decide.lua: an array
/// of integers), not as many as the parts' replies together, or a part's reply that is not
/// its script's.
pub(crate) fn replies(value: &redis::Value, parts: &[&Part]) -> Result<Vec<Reply>, ReplyError> {
    let numbers = match parts.first().map(|p| p.shape()) {
        Some(Shape::Buckets) => reply::doubles(value)?,
        _ => reply::integers(value)?,
    };
    let expected: usize = parts.iter().map(|p| p.reply_len()).sum();
    if numbers.len() != expected {
        return Err(ReplyError(format!(
            "{} numbers for {} requests, not {expected}",
            numbers.len(),
            parts.len(),
        )));
    }
    let mut rest = &numbers[..];
    parts
        .iter()
        .map(|part| {
            let (one, after) = rest.split_at(part.reply_len());
            rest = after;
            part.reply(one)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Mode, Unit};
    use crate::store::redis::script_args::tests::limit;

    fn keys(names: &[&str]) -> smallvec::SmallVec<[String; 4]> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn check(key: &str, mode: Mode, hits: u64) -> Check<'_> {
        Check {
            refund: false,
            key: key.into(),
            limit: limit(100, Unit::Second, 10),
            hits,
            mode,
            descriptor: 0,
            hold: None,
        }
    }

    /// The command's arguments, raw.
    fn args(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn token_buckets_alone_go_to_the_specialised_script_in_one_string() {
        let nothing = [Want::nothing(), Want::nothing()];
        let checks = [
            check("4:t:a", Mode::Enforce, 2),
            check("4:t:b", Mode::Shadow, 1),
        ];
        let part = |names, checks: &[Check<'_>], wants: &[Want], specialised| {
            Part::new(
                TimeSource::Redis,
                keys(names),
                checks,
                wants,
                5,
                specialised,
            )
        };
        let buckets = part(&["a", "b"], &checks, &nothing, true);
        assert_eq!(buckets.shape(), Shape::Buckets);
        let cmd = evalsha("sha", &[&buckets, &buckets]);
        let sent = args(&cmd);
        // EVALSHA sha 2 a b: each bucket once however many requests name it; then one
        // string of doubles.
        assert_eq!(sent.len(), 1 + 2 + 2 + 1);
        assert_eq!(sent[2..5], [b"2".to_vec(), b"a".to_vec(), b"b".to_vec()]);
        let doubles: Vec<f64> = sent[5]
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        // Redis' clock; one limit (token, rate, cap, q, ceiling); then each request: two
        // checks, each its hits, its limit's number (negative: shadow) and its bucket's.
        let head = [-1.0, 1.0, 10_000.0, 1.0, 100_000.0, 1.0, 100_000.0];
        let request = [2.0, 2.0, 1.0, 1.0, 1.0, -1.0, 2.0];
        assert_eq!(doubles, [&head[..], &request, &request].concat());
        // Buckets numbered in order of first use across the call's requests.
        let reversed = part(&["b", "c"], &checks, &nothing, true);
        let sent = args(&evalsha("sha", &[&buckets, &reversed]));
        assert_eq!(
            sent[2..6],
            [b"3".to_vec(), b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        let doubles: Vec<f64> = sent[6]
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        let second = [2.0, 2.0, 1.0, 2.0, 1.0, -1.0, 3.0];
        assert_eq!(doubles, [&head[..], &request, &second].concat());
        // Two limits: numbered in order of first use.
        let mut other = check("4:t:c", Mode::Enforce, 1);
        other.limit = limit(5, Unit::Minute, 1);
        let two = part(&["a", "c"], &[checks[0], other], &nothing, true);
        let sent = args(&evalsha("sha", &[&two]));
        let doubles: Vec<f64> = sent[5]
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        assert_eq!(doubles[1], 2.0);
        assert_eq!(&doubles[12..], [2.0, 2.0, 1.0, 1.0, 1.0, 2.0, 2.0]);
        // The general script for anything else: off, a bucket twice, a lease, a quota.
        let general = |names, checks: &[Check<'_>], wants: &[Want], specialised| {
            part(names, checks, wants, specialised).shape() == Shape::General
        };
        assert!(general(&["a", "b"], &checks, &nothing, false));
        assert!(general(&["a", "a"], &checks, &nothing, true));
        // Not one key a check: the buckets could not be numbered check by check.
        assert!(general(&["a"], &checks, &nothing, true));
        let lease = [
            Want::nothing(),
            Want {
                extra: 3,
                refill: None,
            },
        ];
        assert!(general(&["a", "b"], &checks, &lease, true));
        let quota = [checks[0], check("4:t:c", Mode::Quota, 1)];
        assert!(general(&["a", "c"], &quota, &nothing, true));
    }

    #[test]
    fn a_request_with_holds_goes_to_the_general_script_with_its_hold_keys() {
        let nothing = [Want::nothing(), Want::nothing()];
        let held = Check {
            hold: Some(crate::store::HoldOp {
                id: "r1",
                phase: crate::store::Phase::Hold,
                ttl: 1_000,
                slots: None,
                expiries: None,
            }),
            ..check("4:t:b", Mode::Enforce, 1)
        };
        let checks = [check("4:t:a", Mode::Enforce, 1), held];
        let part = Part::new(
            TimeSource::Redis,
            keys(&["a", "b"]),
            &checks,
            &nothing,
            5,
            true,
        );
        assert_eq!(part.shape(), Shape::General);
        // The checks' keys, then the held check's hold keys; one reply per check still.
        assert_eq!(
            part.keys.as_slice(),
            keys(&["a", "b", "b:h", "b:e"]).as_slice()
        );
        assert_eq!(part.reply_len(), 1 + 5 * 2);
        let sent = args(&evalsha("sha", &[&part]));
        assert_eq!(sent[2], b"4".to_vec());
    }

    #[test]
    fn the_specialised_reply_reads_as_the_general_scripts() {
        let nothing = [Want::nothing(), Want::nothing()];
        // 100/s, burst 10: a token is 10,000 scaled units, the capacity 100,000.
        let checks = [
            check("4:t:a", Mode::Enforce, 2),
            check("4:t:b", Mode::Shadow, 1),
        ];
        let part = Part::new(
            TimeSource::Redis,
            keys(&["a", "b"]),
            &checks,
            &nothing,
            5,
            true,
        );
        let general = Part::new(
            TimeSource::Redis,
            keys(&["a", "b"]),
            &checks,
            &nothing,
            5,
            false,
        );
        let value =
            |ns: &[i64]| redis::Value::Array(ns.iter().map(|&n| redis::Value::Int(n)).collect());
        let packed = |ns: &[i64]| {
            redis::Value::BulkString(ns.iter().flat_map(|&n| (n as f64).to_le_bytes()).collect())
        };
        // Allowed: a takes two tokens from 30,000 of debt; b (shadow) is over, untouched.
        let allowed = replies(&packed(&[0, 30_000, 95_000]), &[&part]).expect("valid");
        let expected = replies(
            &value(&[0, 0, 5, 50_000, 50_000, 0, 1, 0, 5_000, 95_000, 0]),
            &[&general],
        )
        .expect("valid");
        assert_eq!(allowed, expected);
        // Denied: a is over (a token short), b passes but takes nothing.
        let denied = replies(&packed(&[1, 90_000, 0]), &[&part]).expect("valid");
        let expected = replies(
            &value(&[1, 1, 1, 10_000, 90_000, 0, 0, 10, 0, 0, 0]),
            &[&general],
        )
        .expect("valid");
        assert_eq!(denied, expected);
        // Two requests in one reply, each read with its own checks.
        let both = replies(&packed(&[0, 30_000, 95_000, 1, 90_000, 0]), &[&part, &part]);
        assert_eq!(both.expect("valid").len(), 2);
        // Not the script's: a debt beyond the capacity or below 0, a fate the checks
        // contradict, a length for other requests.
        for bad in [
            &[0, 100_001, 0][..],
            &[0, -1, 0],
            &[1, 0, 0],
            &[0, 95_000, 0],
            &[0, 0],
        ] {
            assert!(replies(&packed(bad), &[&part]).is_err(), "{bad:?}");
        }
        // Nor the general script's integers.
        assert!(replies(&value(&[0, 30_000, 95_000]), &[&part]).is_err());
    }

    #[test]
    fn a_charge_or_refund_lands_in_the_specialised_reply_whatever_the_fate() {
        // 100/s, burst 10, charging: a token is 10,000, the capacity 100,000, the ceiling
        // 10,100,000.
        let charging = crate::rules::Limit {
            charge: true,
            ..limit(100, Unit::Second, 10)
        };
        let nothing = [Want::nothing(), Want::nothing()];
        let charge = Check {
            limit: charging,
            ..check("4:t:a", Mode::Enforce, 3)
        };
        let refund = Check {
            refund: true,
            hits: 0,
            ..charge
        };
        let part = |checks: &[Check<'_>]| {
            Part::new(
                TimeSource::Redis,
                keys(&["a", "b"][..checks.len()]),
                checks,
                &nothing,
                5,
                true,
            )
        };
        // The request goes the careful way (-n checks), the refund of nothing as -0.
        let careful = part(&[check("4:t:b", Mode::Enforce, 1), refund]);
        assert_eq!(careful.shape(), Shape::Buckets);
        let sent = args(&evalsha("sha", &[&careful]));
        let doubles: Vec<f64> = sent[5]
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        assert_eq!(
            doubles[1], 2.0,
            "two limits: the plain one, the charging one"
        );
        assert_eq!(
            &doubles[2..12],
            [
                10_000.0,
                1.0,
                100_000.0,
                1.0,
                100_000.0,
                10_000.0,
                1.0,
                100_000.0,
                1.0,
                10_100_000.0
            ]
        );
        assert_eq!(doubles[12], -2.0);
        assert_eq!(&doubles[13..16], [1.0, 1.0, 1.0]);
        assert!(doubles[16] == 0.0 && doubles[16].is_sign_negative(), "-0");
        // A normal request keeps its count positive.
        let usual = part(&[check("4:t:b", Mode::Enforce, 1)]);
        let sent = args(&evalsha("sha", &[&usual]));
        assert_eq!(sent[4][8 * 7..8 * 8], 1.0f64.to_le_bytes());

        let packed = |ns: &[i64]| {
            redis::Value::BulkString(ns.iter().flat_map(|&n| (n as f64).to_le_bytes()).collect())
        };
        let charged = part(&[charge]);
        // 95,000 owed before: 3 tokens take it to 125,000, in debt by 2.5 tokens; over,
        // and the request denied, but the charge stays; one hit passes after 3.5 tokens.
        let reply = replies(&packed(&[1, 95_000]), &[&charged]).expect("valid");
        let outcome = reply[0].checks[0].outcome(crate::rules::Algorithm::TokenBucket);
        assert!(reply[0].denied && outcome.over);
        assert_eq!(outcome.remaining, 0);
        assert_eq!(outcome.reset, 35_000 * 1000);
        assert_eq!(
            outcome.after,
            crate::store::redis::reply::After::TokenBucket {
                debt: 125_000,
                leased: 0
            }
        );
        assert_eq!(outcome.report(&charging).owed(&charging), 3);
        // At the ceiling a charge adds nothing more.
        let reply = replies(&packed(&[1, 10_100_000]), &[&charged]).expect("valid");
        let outcome = reply[0].checks[0].outcome(crate::rules::Algorithm::TokenBucket);
        assert_eq!(
            outcome.after,
            crate::store::redis::reply::After::TokenBucket {
                debt: 10_100_000,
                leased: 0
            }
        );
        assert_eq!(outcome.report(&charging).owed(&charging), 1_000);
        // A refund of 4 tokens from 125,000: 85,000, out of debt, not over.
        let refunded = part(&[Check { hits: 4, ..refund }]);
        let reply = replies(&packed(&[0, 125_000]), &[&refunded]).expect("valid");
        let outcome = reply[0].checks[0].outcome(crate::rules::Algorithm::TokenBucket);
        assert!(!outcome.over);
        assert_eq!((outcome.remaining, outcome.reset), (1, 85_000 * 1000));
        // A check of nothing while in debt: over, until one hit passes.
        let check_only = part(&[Check { hits: 0, ..charge }]);
        let reply = replies(&packed(&[1, 125_000]), &[&check_only]).expect("valid");
        let outcome = reply[0].checks[0].outcome(crate::rules::Algorithm::TokenBucket);
        assert!(outcome.over);
        assert_eq!(outcome.reset, 35_000 * 1000);
        // Not the script's: beyond the ceiling, or a fate the landed debt contradicts.
        for bad in [&[1, 10_100_001][..], &[0, 95_000]] {
            assert!(replies(&packed(bad), &[&charged]).is_err(), "{bad:?}");
        }
    }
}
