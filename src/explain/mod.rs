//! Why a request gets the answer it gets: the matching walk of each descriptor, the rule
//! it lands on (or where and why it stopped), `replaces`, the bucket key and the bucket's
//! current state, all without consuming anything. Served by `GET /explain` and printed
//! by `meshlimit explain`.
//!
//! Nested descriptors surprise users of the Go server most: a parent's limit does not
//! apply to a longer request, a request must end exactly at an entry with a
//! `rate_limit`, and the walk never backtracks. The text says so where it matters.

pub mod bucket_state;
mod quota_bucket;

use std::fmt::Write;

use crate::bucket_key::BucketKey;
use crate::clock::{NANOS_PER_SEC, Nanos};
use crate::error::{RequestError, StoreError};
use crate::limiter::{Report, binding};
use crate::matcher::{Listing, Matched, WalkStep};
use crate::plan::{Plan, PlannedHold, Resolved};
use crate::request::{Descriptor, Request, RequestDescriptor};
use crate::rules::{Algorithm, HOLD_KEY, HoldRule, Limit, Mode, Rule, SETTLE_KEY};
use crate::service::Service;
use crate::store::{Held, Phase, Store};
pub use quota_bucket::{BucketError, explain_bucket};

/// Most entries listed where the text shows what a level offers.
const LISTED: usize = 12;

/// Explains, as text, how `request` would be decided now by `service`, consuming
/// nothing. Each descriptor is planned with its own hits, or one: an explanation shows the
/// state one request finds, whatever the request-level `hits_addend`.
///
/// # Errors
/// What [`Plan::build`] refuses. A store that cannot be read is reported in the text, not
/// as an error.
pub async fn explain(
    service: &Service,
    request: Request<'_, Descriptor>,
) -> Result<String, RequestError> {
    let request = Request {
        hits_addend: 1,
        ..request
    };
    let config = service.config().load();
    let plan = Plan::build(&config, &request, service.plan_defaults())?;
    let store = service.store();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "domain {:?} (store: {}, default algorithm: {})",
        request.domain,
        store.kind(),
        service.default_algorithm().name()
    );
    let Some(tree) = plan.tree() else {
        let _ = writeln!(
            out,
            "no such domain in the config (configured: {}): every descriptor is OK with no limit",
            listed(&Listing {
                total: config.domains().len(),
                first: config.domains().into_iter().take(LISTED).collect(),
            })
        );
        return Ok(out);
    };

    // One peek for every limited descriptor, as the store would decide them.
    // A peek releases expired holds: counted on their rules, as a decision's would be.
    let expiries = service.hold_expiries(&config, &request, &plan, false);
    let mut checks = plan.checks();
    crate::service::count_expiries(&mut checks, &expiries);
    let states = if checks.is_empty() {
        Ok(Default::default())
    } else {
        store.peek(&checks, service.clock().now()).await
    };
    let mut held = Vec::with_capacity(checks.len());
    for check in &checks {
        held.push(match check.hold {
            Some(_) => Some(store.held(&check.key, service.clock().now()).await),
            None => None,
        });
    }
    let mut states = States {
        reports: states.as_ref().map(|reports| reports.iter()),
        redis: match store {
            Store::Redis(redis) => Some(redis.key_prefix()),
            _ => None,
        },
        held: held.into_iter(),
        now: service.clock().now(),
    };
    for (i, (d, resolved)) in request.descriptors.iter().zip(plan.resolved()).enumerate() {
        let entries: Vec<String> = d.entries().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "\ndescriptor {}: {}", i + 1, entries.join(", "));
        if let Some(o) = d.limit {
            let unit = o.unit.map_or("?", |u| u.name());
            let _ = writeln!(
                out,
                "  limit override in the request: {} per {unit}; the config is not consulted",
                o.requests_per_unit
            );
        } else if let Resolved::Limited {
            hold: Some(hold), ..
        } = resolved
            && hold.phase != Phase::Peek
        {
            let walked = d.entries().count() - 1;
            walk(&mut out, &tree.explain(d.entries().take(walked), LISTED));
            hold_line(&mut out, hold, plan.hold_op(hold).id, d);
        } else {
            walk(&mut out, &tree.explain(d.entries(), LISTED));
        }
        descriptor_result(&mut out, &plan, resolved, &mut states);
    }
    Ok(out)
}

/// The buckets' states the store reported, taken in request order, and the key prefix
/// of a Redis store.
struct States<'a, I> {
    /// The states of the limits not yet explained, or why the store could not be read.
    reports: Result<I, &'a StoreError>,
    /// A Redis store's key prefix; `None` on the embedded store.
    redis: Option<&'a str>,
    /// What each check's key holds, for checks of rules that hold; in request order.
    held: std::vec::IntoIter<Option<Result<Held, StoreError>>>,
    /// The store's clock, when the states were read.
    now: Nanos,
}

/// What `resolved`, one descriptor of `plan`, comes to: its rule, and each limit's bucket
/// and state.
fn descriptor_result<'a, 'c, I: Iterator<Item = &'a Report>>(
    out: &mut String,
    plan: &Plan<'c>,
    resolved: &Resolved<'c>,
    states: &mut States<'_, I>,
) {
    let Resolved::Limited {
        limits, rule, key, ..
    } = resolved
    else {
        let _ = match resolved {
            Resolved::Replaced { rule, by } => writeln!(
                out,
                "  result: OK, no limit: rule {} ({:?}) is replaced by {} in this request",
                rule.full_key, rule.name, by.full_key
            ),
            Resolved::Unlimited { rule, .. } => writeln!(
                out,
                "  rule: {}{}: unlimited\n  result: OK, never limited",
                rule.full_key,
                name(rule)
            ),
            _ => writeln!(out, "  result: OK, no limit"),
        };
        return;
    };
    let reports: Vec<Report> = match &mut states.reports {
        Ok(all) => all.by_ref().take(limits.len()).copied().collect(),
        Err(_) => Vec::new(),
    };
    let held: Vec<_> = states.held.by_ref().take(limits.len()).collect();
    let holds = match resolved {
        Resolved::Limited { hold: Some(h), .. } => Some(h.rule),
        _ => None,
    };
    let state_of = |i: usize, limit: &Limit| match (&states.reports, reports.get(i)) {
        (Err(e), _) => format!("cannot be read: {e}"),
        (Ok(_), Some(report)) => state(report, limit),
        (Ok(_), None) => "unknown".into(),
    };
    let mut each = plan.limit_keys(limits, key);
    if limits.len() == 1 {
        // One limit: the rule's line says it all, as it always has.
        let Some((limit, _, bucket)) = each.next() else {
            return;
        };
        if let Some(rule) = rule {
            let what = match holds {
                Some(HoldRule {
                    slots: Some(max),
                    ttl,
                }) => format!(
                    "at most {max} requests in flight (concurrency), a slot released after {} unsettled",
                    seconds(ttl)
                ),
                Some(HoldRule { ttl, .. }) => format!(
                    "{}; request-path hits held until settled, or released after {}",
                    describe(&limit),
                    seconds(ttl)
                ),
                None => describe(&limit),
            };
            let _ = writeln!(
                out,
                "  rule: {}{}: {what}{}",
                rule.full_key,
                name(rule),
                flags(rule, plan.mode_of(resolved))
            );
        }
        bucket_lines(out, "  ", &bucket, states.redis, &state_of(0, &limit));
        held_line(out, "  ", holds, held.first(), states.now);
        return;
    }
    if let Some(rule) = rule {
        let _ = writeln!(
            out,
            "  rule: {}: {} limits, all must have room{}",
            rule.full_key,
            limits.len(),
            flags(rule, plan.mode_of(resolved))
        );
    }
    let bound = binding(&reports);
    for (i, (limit, config, bucket)) in each.enumerate() {
        let label = config.map_or_else(String::new, |c| c.label());
        let _ = writeln!(out, "  limit {label}: {}", describe(&limit));
        bucket_lines(out, "    ", &bucket, states.redis, &state_of(i, &limit));
        held_line(out, "    ", holds, held.get(i), states.now);
        if i == bound && !reports.is_empty() {
            let why = if reports.iter().any(|r| r.over) {
                "of the limits refusing, the longest wait"
            } else {
                "the fewest requests left"
            };
            let _ = writeln!(out, "    binds: the status reports this limit ({why})");
        }
    }
}

/// The walk, one line per request entry.
fn walk(out: &mut String, steps: &[WalkStep<'_>]) {
    let _ = writeln!(out, "  walk:");
    let mut parent_rule: Option<&Rule> = None;
    for (i, step) in steps.iter().enumerate() {
        let entry = format!("{}={}", step.key, step.value);
        let last = i + 1 == steps.len();
        match step.matched {
            Some(how) => {
                let _ = writeln!(
                    out,
                    "    {}. {entry}: matched {}{}",
                    i + 1,
                    matched(step, how),
                    has_rule(step)
                );
                if last && step.rule.is_none() {
                    let _ = writeln!(
                        out,
                        "       the request ends here, at an entry without a rate_limit: no limit \
                         applies (a limit applies only where the request's last entry lands); \
                         nested here: {}",
                        listed(&step.nested)
                    );
                }
            }
            None => {
                let _ = writeln!(
                    out,
                    "    {}. {entry}: no match: no entry \"{}_{}\", no wildcard matching it, no \
                     value-less \"{}\"; the walk stops (it never backtracks)",
                    i + 1,
                    step.key,
                    step.value,
                    step.key
                );
                if step.offered.total == 0 {
                    let _ = writeln!(
                        out,
                        "       nothing is nested under the previous entry: the config is shorter \
                         than this request"
                    );
                } else {
                    let _ = writeln!(out, "       this level offers: {}", listed(&step.offered));
                }
                if let Some(parent) = parent_rule {
                    let _ = writeln!(
                        out,
                        "       note: the rate_limit of {} applies only to requests that end at \
                         that entry; it is not a fallback for longer ones",
                        parent.full_key
                    );
                }
            }
        }
        if step.rule.is_some() {
            parent_rule = step.rule;
        }
    }
}

/// The entry a walk's step matched, and how.
fn matched(step: &WalkStep<'_>, how: Matched<'_>) -> String {
    match how {
        Matched::Exact => format!("exact entry \"{}_{}\"", step.key, step.value),
        Matched::Wildcard(pattern) => {
            format!("wildcard entry \"{pattern}\" (first matching wildcard in file order)")
        }
        Matched::ValueLess => format!("value-less entry \"{}\" (any value)", step.key),
    }
}

/// Whether the entry a step matched has a limit, as a clause.
fn has_rule(step: &WalkStep<'_>) -> &'static str {
    if step.rule.is_some() {
        "; has a rate_limit"
    } else {
        "; no rate_limit of its own"
    }
}

fn name(rule: &Rule) -> String {
    if rule.name.is_empty() {
        String::new()
    } else {
        format!(" (name {:?})", rule.name)
    }
}

fn describe(limit: &Limit) -> String {
    let per = if limit.multiplier == 1 {
        limit.unit.to_string()
    } else {
        format!("{} {}", limit.multiplier, limit.unit)
    };
    let text = if limit.algorithm.has_burst() {
        format!(
            "{} per {per}, burst {}, {}",
            limit.requests_per_unit,
            limit.burst,
            limit.algorithm.name()
        )
    } else {
        format!(
            "{} per {per}, {}",
            limit.requests_per_unit,
            limit.algorithm.name()
        )
    };
    if limit.charge {
        format!("{text}, charges always")
    } else {
        text
    }
}

/// A bucket's lines, each after `indent`: its key, its Redis key on a Redis store (whose
/// keys start with `redis`), and its state `now`.
fn bucket_lines(
    out: &mut String,
    indent: &str,
    bucket: &BucketKey<'_>,
    redis: Option<&str>,
    now: &str,
) {
    let _ = writeln!(out, "{indent}bucket: {bucket}");
    if let Some(namespace) = redis {
        let _ = writeln!(out, "{indent}redis key: {}", bucket.redis_key(namespace));
    }
    let _ = writeln!(out, "{indent}state now: {now}");
}

/// The `hold` or `settle` entry ending descriptor `d`, which names a request rather
/// than a level of the tree.
fn hold_line<D: RequestDescriptor>(out: &mut String, hold: &PlannedHold, id: &str, d: &D) {
    let n = d.entries().count();
    let what = match (hold.phase, hold.rule.slots) {
        (Phase::Hold, Some(_)) => "takes a concurrency slot named by it, until its settle",
        (Phase::Hold, None) => "holds this descriptor's hits under its name, until its settle",
        (_, Some(_)) => "gives back the concurrency slot of that name",
        (_, None) => "settles the hold of that name: its hits are what was used",
    };
    let key = if hold.phase == Phase::Hold {
        HOLD_KEY
    } else {
        SETTLE_KEY
    };
    let _ = writeln!(
        out,
        "    {n}. {key}={id}: names a request, not a level: {what}"
    );
}

/// What a bucket of a rule that holds has in force (`held`, as the store reported it).
fn held_line(
    out: &mut String,
    indent: &str,
    holds: Option<HoldRule>,
    held: Option<&Option<Result<Held, StoreError>>>,
    now: Nanos,
) {
    let Some(rule) = holds else { return };
    let text = match held {
        Some(Some(Ok(held))) => {
            let soonest = if held.holds == 0 {
                String::new()
            } else {
                format!(
                    "; the soonest expires in {}",
                    seconds(held.soonest_expiry.saturating_sub(now))
                )
            };
            match rule.slots {
                Some(max) => format!("{} of {max} slots in use{soonest}", held.holds),
                None => format!(
                    "{} holds in force, {} hits held{soonest}",
                    held.holds, held.hits
                ),
            }
        }
        Some(Some(Err(e))) => format!("cannot be read: {e}"),
        _ => "unknown".into(),
    };
    let _ = writeln!(out, "{indent}holds: {text}");
}

/// A limit's state as a peek reports it.
fn state(report: &Report, limit: &Limit) -> String {
    let owed = report.owed(limit);
    if owed > 0 {
        return format!(
            "IN DEBT: {owed} owed by charges; a hit could pass in {}",
            seconds(report.reset)
        );
    }
    if report.over {
        return format!(
            "OVER_LIMIT: {} remaining; a hit could pass in {}",
            report.remaining,
            seconds(report.reset)
        );
    }
    let (idle, again) = match limit.algorithm {
        Algorithm::SlidingWindow => ("the window is empty", "empty again in"),
        _ => ("the bucket is full", "full again in"),
    };
    let rest = if report.reset == 0 {
        idle.to_string()
    } else {
        format!("{again} {}", seconds(report.reset))
    };
    format!("OK: {} remaining; {rest}", report.remaining)
}

/// What `mode`, the mode `rule`'s descriptor is decided in, does; global quota mode
/// (`--quota-mode`) makes it a quota one whatever the rule says.
fn flags(rule: &Rule, mode: Mode) -> &'static str {
    let global = mode.is_quota() && !rule.mode.is_quota();
    match (mode, global) {
        (Mode::Enforce, _) => "",
        (Mode::Shadow, _) => "; shadow_mode: an over-limit status is reported as OK",
        (Mode::Quota, false) => "; quota_mode: denies only when every quota descriptor is over",
        (Mode::Quota, true) => {
            "; quota mode (--quota-mode): denies only when every descriptor but unlimited ones is over"
        }
        (Mode::ShadowQuota, false) => "; shadow_mode and quota_mode: never denies",
        (Mode::ShadowQuota, true) => "; shadow_mode, and quota mode (--quota-mode): never denies",
    }
}

fn seconds(nanos: u64) -> String {
    let ms = nanos.div_ceil(NANOS_PER_SEC / 1000);
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

/// Up to [`LISTED`] items, comma-separated, with a count of the rest.
fn listed(items: &Listing<'_>) -> String {
    if items.total == 0 {
        return "nothing".into();
    }
    let mut text = items
        .first
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ");
    if items.total > items.first.len() {
        let _ = write!(text, " and {} more", items.total - items.first.len());
    }
    text
}
