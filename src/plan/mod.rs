//! A request's plan: what each descriptor resolves to before any store is asked. Built
//! once per request from a config snapshot, the [`Request`] and the service's
//! [`PlanDefaults`]; pure (no store, no clock, no metrics). `ShouldRateLimit`, `/json`,
//! `/explain` and `meshlimit explain` all decide from it, so they cannot disagree.
//!
//! For each descriptor, in request order (§1.3–1.5 of the behaviour reference): the
//! per-request limit override, or else the config walk; then `replaces` across the
//! request; `unlimited`; hits (descriptor-level `hits_addend` wins, 0 there checks without
//! consuming; request-level 0 counts as 1). Each limit of a limited descriptor becomes one
//! store [`Check`], its bucket key written into one buffer shared by the whole request.

mod buffers;
mod hold;
mod limits;
mod modes;

use std::collections::HashSet;
use std::ops::Range;

use foldhash::fast::RandomState;
use smallvec::SmallVec;

use crate::bucket_key::{BucketKey, KeyWriter, key_at};
use crate::config::Config;
use crate::error::RequestError;
use crate::matcher::DomainTree;
use crate::request::{Request, RequestDescriptor};
use crate::request_caps::RequestCaps;
use crate::rules::{Algorithm, ConfigLimit, Limit, Mode, Rule, Unit};
use crate::store::{Check, HoldOp, Phase};
use buffers::Buffers;
pub use hold::PlannedHold;
use hold::hold_entry;
pub use limits::Limits;

/// What a plan takes from the service rather than from the request or the config.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanDefaults {
    /// The algorithm of rules that do not name one, and of limit overrides.
    pub algorithm: Algorithm,
    /// Caps on what one request may ask for.
    pub caps: RequestCaps,
    /// Global quota mode (the Go server's `QUOTA_MODE`): every descriptor counts as a
    /// quota-mode one, those without a limit included (see [`Plan::mode_of`] and
    /// [`Plan::has_passing_quota`]).
    pub global_quota: bool,
}

/// What one descriptor resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved<'c> {
    /// No rule applies: the walk stopped, or ended at an entry without a `rate_limit`.
    NoRule,
    /// The rule matched, but another rule matched in the same request `replaces` it.
    Replaced {
        /// The rule that matched.
        rule: &'c Rule,
        /// The first rule of the request (in request order) replacing it.
        by: &'c Rule,
    },
    /// An `unlimited` rule: never limited, its hits still counted.
    Unlimited {
        /// The rule.
        rule: &'c Rule,
        /// Hits the descriptor asks for.
        hits: u64,
    },
    /// Limits apply: one store check each.
    Limited {
        /// The limits, all of which must have room.
        limits: Limits<'c>,
        /// The config rule; `None` for a limit override sent in the request.
        rule: Option<&'c Rule>,
        /// The descriptor's bucket key's place in the plan's key buffer (see
        /// [`Plan::key`]); the keys of a `rate_limits` list's limits follow it there (see
        /// [`Plan::limit_keys`]).
        key: Range<usize>,
        /// Hits to take; 0 checks without consuming.
        hits: u64,
        /// `is_negative_hits`: the hits are given back (the rule takes refunds).
        refund: bool,
        /// The descriptor's part in a hold of the rule's (`reserve`, `concurrency`);
        /// `None` for most.
        hold: Option<PlannedHold>,
    },
}

impl<'c> Resolved<'c> {
    /// The config rule the descriptor matched, replaced or not; `None` without a rule and
    /// for overrides.
    pub fn rule(&self) -> Option<&'c Rule> {
        match *self {
            Resolved::NoRule => None,
            Resolved::Replaced { rule, .. } | Resolved::Unlimited { rule, .. } => Some(rule),
            Resolved::Limited { rule, .. } => rule,
        }
    }

    /// How an over-limit verdict of this descriptor counts towards the request's fate.
    pub fn mode(&self) -> Mode {
        self.rule().map_or(Mode::Enforce, |rule| rule.mode)
    }
}

/// Most requests carry a handful of descriptors: their plan stays off the heap.
type Descriptors<'c> = SmallVec<[Resolved<'c>; 8]>;

/// Store checks of a request, in request order.
pub type Checks<'k> = SmallVec<[Check<'k>; 4]>;

/// A request's plan (see the module docs).
#[derive(Debug)]
pub struct Plan<'c> {
    /// The domain's rules; `None` when the config has no such domain.
    tree: Option<&'c DomainTree>,
    /// One per request descriptor, in request order.
    resolved: Descriptors<'c>,
    /// Every limited descriptor's bucket key, back to back, and the matcher's scratch.
    buffers: Buffers,
    /// [`PlanDefaults::global_quota`] of the plan's service.
    global_quota: bool,
}

impl<'c> Plan<'c> {
    /// Plans `request` on `config`.
    ///
    /// # Errors
    /// What no config could answer: an empty domain, no descriptors, a request over the
    /// caps, or an override without a valid unit. The caps are checked first, so that a
    /// request over them costs no more than reading its size.
    pub fn build<D: RequestDescriptor>(
        config: &'c Config,
        request: &Request<'_, D>,
        defaults: &PlanDefaults,
    ) -> Result<Self, RequestError> {
        let mut plan = Plan::empty(config, request.domain);
        plan.fill(request, defaults)?;
        Ok(plan)
    }

    /// A plan of no descriptor yet for `domain` on `config`, for [`Plan::fill`] to fill
    /// where it lies. A plan is a few hundred bytes (its descriptors stay off the heap),
    /// and a request's hot path builds it in place rather than pay for the copies of a
    /// returned one.
    #[inline]
    pub(crate) fn empty(config: &'c Config, domain: &str) -> Self {
        Plan {
            tree: config.domain(domain),
            resolved: SmallVec::new(),
            buffers: Buffers::take(),
            global_quota: false,
        }
    }

    /// Plans `request` into this [`Plan::empty`] of the same domain (see [`Plan::build`]).
    pub(crate) fn fill<D: RequestDescriptor>(
        &mut self,
        request: &Request<'_, D>,
        defaults: &PlanDefaults,
    ) -> Result<(), RequestError> {
        debug_assert!(self.resolved.is_empty(), "a plan is filled once");
        validate(request, &defaults.caps)?;
        self.global_quota = defaults.global_quota;
        let Some(tree) = self.tree else {
            self.resolved
                .extend(request.descriptors.iter().map(|_| Resolved::NoRule));
            return Ok(());
        };
        let default_hits = u64::from(request.hits_addend.max(1));
        let Buffers { keys, scratch } = &mut self.buffers;
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            let hits = descriptor.hits_addend().unwrap_or(default_hits);
            let resolved = resolve(
                tree,
                request.domain,
                descriptor,
                hits,
                defaults.algorithm,
                keys,
                scratch,
            );
            if descriptor.is_negative_hits() {
                self.resolved.push(as_refund(i, resolved)?);
            } else {
                self.resolved.push(resolved);
            }
        }
        apply_replaces(&mut self.resolved);
        Ok(())
    }

    /// Whether the config has the request's domain (without it, every descriptor is OK
    /// with no limit).
    pub fn knows_domain(&self) -> bool {
        self.tree.is_some()
    }

    /// The domain's rules, for explanations.
    pub fn tree(&self) -> Option<&'c DomainTree> {
        self.tree
    }

    /// What each descriptor resolved to, in request order.
    pub fn resolved(&self) -> &[Resolved<'c>] {
        &self.resolved
    }

    /// The bucket key at `range` (from [`Resolved::Limited`]).
    pub fn key(&self, range: &Range<usize>) -> BucketKey<'_> {
        key_at(&self.buffers.keys, range.clone())
    }

    /// Each limit of a limited descriptor with its bucket key, in config order: the
    /// descriptor's own key for a single limit, that key and the limit's
    /// [`ConfigLimit::key_part`] for each of a list.
    #[inline]
    pub fn limit_keys<'p>(
        &'p self,
        limits: &'p Limits<'c>,
        key: &Range<usize>,
    ) -> impl Iterator<Item = (Limit, Option<&'c ConfigLimit>, BucketKey<'p>)> + 'p {
        let base = key.clone();
        let mut next = base.end;
        limits.iter().map(move |(limit, config)| {
            let part = config.map_or(0, |c| c.key_part.len());
            if part == 0 {
                return (limit, config, self.key(&base));
            }
            let start = next;
            next += base.len() + part;
            let text = &self.buffers.keys[start..next];
            (limit, config, BucketKey::listed(text, base.len()))
        })
    }

    /// One store check per limit of each limited descriptor, in request order.
    pub fn checks(&self) -> Checks<'_> {
        let mut checks = Checks::new();
        self.push_checks(&mut checks);
        checks
    }

    /// What a store is asked of `hold` (see [`crate::store::hold`]).
    pub fn hold_op(&self, hold: &PlannedHold) -> HoldOp<'_> {
        HoldOp {
            id: &self.buffers.keys[hold.id.clone()],
            phase: hold.phase,
            ttl: hold.rule.ttl,
            slots: hold.rule.slots,
            expiries: None,
        }
    }

    /// Whether the request gives budget back: a refund (`is_negative_hits`), or a settle of
    /// a hold (which releases what was not used, and a concurrency slot). Only callers the
    /// operator allows may (see `docs/holds.md`).
    pub fn gives_back(&self) -> bool {
        self.resolved.iter().any(|r| {
            matches!(r, Resolved::Limited { refund: true, .. })
                || matches!(r, Resolved::Limited { hold: Some(h), .. } if h.phase == Phase::Settle)
        })
    }

    /// [`Plan::checks`] pushed onto `checks`, for a caller that keeps them where they lie
    /// (see [`Plan::empty`]).
    pub(crate) fn push_checks<'p>(&'p self, checks: &mut Checks<'p>) {
        let passing_quota = self.has_passing_quota();
        for (descriptor, resolved) in self.resolved.iter().enumerate() {
            if let Resolved::Limited {
                limits,
                key,
                hits,
                refund,
                hold,
                ..
            } = resolved
            {
                let mode = self.verdict_mode(resolved, passing_quota);
                let hold = hold.as_ref().map(|hold| self.hold_op(hold));
                // A loop of pushes: `extend` reserves by the iterator's size hint first,
                // which costs more than the one or two checks a descriptor has.
                for (mut limit, _, key) in self.limit_keys(limits, key) {
                    if let Some(op) = hold.filter(|op| op.phase != Phase::Peek) {
                        // A hold's hits are taken only when its request passes; a
                        // settle's land whatever the answer, as charges do.
                        limit.charge = op.phase == Phase::Settle;
                    }
                    checks.push(Check {
                        refund: *refund,
                        key,
                        limit,
                        hits: *hits,
                        mode,
                        descriptor,
                        hold,
                    });
                }
            }
        }
    }
}

/// See [`Plan::build`]'s errors.
fn validate<D: RequestDescriptor>(
    request: &Request<'_, D>,
    caps: &RequestCaps,
) -> Result<(), RequestError> {
    let Request {
        domain,
        descriptors,
        ..
    } = *request;
    if domain.is_empty() {
        return Err(RequestError::EmptyDomain);
    }
    if descriptors.is_empty() {
        return Err(RequestError::NoDescriptors);
    }
    caps.check_count(descriptors.len())?;
    for (i, d) in descriptors.iter().enumerate() {
        caps.check_descriptor(i, d.entries())?;
    }
    match descriptors
        .iter()
        .position(|d| d.limit_override().is_some_and(|o| o.unit.is_none()))
    {
        Some(i) => Err(RequestError::BadOverrideUnit(i)),
        None => Ok(()),
    }
}

/// One descriptor: the override, or else the config walk; its bucket key appended to
/// `keys` when a limit applies.
fn resolve<'c, D: RequestDescriptor>(
    tree: &'c DomainTree,
    domain: &str,
    descriptor: &D,
    hits: u64,
    algorithm: Algorithm,
    keys: &mut String,
    scratch: &mut String,
) -> Resolved<'c> {
    if let Some(o) = descriptor.limit_override() {
        let mut key = KeyWriter::new(keys, domain);
        for (k, v) in descriptor.entries() {
            key.push(k);
            key.push(v);
        }
        // An override replaces the config walk entirely; its unit was validated.
        let unit = o.unit.unwrap_or(Unit::Second);
        return Resolved::Limited {
            limits: Limits::Override(Limit {
                charge: false,
                requests_per_unit: o.requests_per_unit,
                unit,
                multiplier: 1,
                burst: o.requests_per_unit,
                algorithm,
            }),
            rule: None,
            key: key.finish(),
            hits,
            refund: false,
            hold: None,
        };
    }
    let held = hold_entry(descriptor).and_then(|(phase, id, walked)| {
        let mut at = KeyWriter::new(keys, domain);
        match tree.find(descriptor.entries().take(walked), &mut at, scratch) {
            Some(rule) if rule.holds.is_some() => Some((rule, at.finish(), phase, id)),
            _ => {
                at.discard();
                None
            }
        }
    });
    if let Some((rule, key, phase, id)) = held {
        return limited(rule, key, phase, id, hits, algorithm, keys);
    }
    let mut key = KeyWriter::new(keys, domain);
    let Some(rule) = tree.find(descriptor.entries(), &mut key, scratch) else {
        key.discard();
        return Resolved::NoRule;
    };
    if rule.is_unlimited() {
        key.discard();
        return Resolved::Unlimited { rule, hits };
    }
    // A concurrency rule's descriptor naming no request asks whether a slot is free; a
    // reservation's is decided as the rule's limits say, its expired holds released
    // first, so that it never sees their hits as spent.
    let key = key.finish();
    limited(rule, key, Phase::Peek, "", hits, algorithm, keys)
}

/// A descriptor limited by `rule`, its bucket key at `key`: the listed limits' keys and
/// the hold's name `id` written after it. On a rule that holds, it asks `phase` of hold
/// `id` (a name of none for [`Phase::Peek`]).
fn limited<'c>(
    rule: &'c Rule,
    key: Range<usize>,
    phase: Phase,
    id: &str,
    hits: u64,
    algorithm: Algorithm,
    keys: &mut String,
) -> Resolved<'c> {
    write_listed_keys(keys, &key, &rule.limits);
    let start = keys.len();
    keys.push_str(id);
    let hold = rule.holds.map(|rule| PlannedHold {
        phase,
        id: start..keys.len(),
        rule,
    });
    Resolved::Limited {
        limits: Limits::Config {
            limits: &rule.limits,
            algorithm,
        },
        rule: Some(rule),
        key,
        hits,
        refund: false,
        hold,
    }
}

/// Descriptor `i`, resolved to `resolved`, asking for its hits back (`is_negative_hits`):
/// a refund to a rule whose limits all charge; nothing on a descriptor no limit applies
/// to; refused on any other limit, which never recorded more than it admitted.
fn as_refund(i: usize, mut resolved: Resolved<'_>) -> Result<Resolved<'_>, RequestError> {
    match &mut resolved {
        // A refund names no hold: not on a descriptor that holds or settles one.
        Resolved::Limited {
            rule: Some(rule),
            refund,
            hold,
            ..
        } if rule.takes_refunds() && hold.as_ref().is_none_or(|h| h.phase == Phase::Peek) => {
            *refund = true;
        }
        Resolved::Limited { .. } => return Err(RequestError::RefundNotAllowed(i)),
        Resolved::Unlimited { hits, .. } => *hits = 0,
        _ => {}
    }
    Ok(resolved)
}

/// After the descriptor's key at `key`, the key of each limit of a `rate_limits` list:
/// the descriptor's, then the limit's part (see [`Plan::limit_keys`]).
fn write_listed_keys(keys: &mut String, key: &Range<usize>, limits: &[ConfigLimit]) {
    for limit in limits.iter().filter(|l| !l.key_part.is_empty()) {
        keys.extend_from_within(key.clone());
        keys.push_str(&limit.key_part);
    }
}

/// Turns every matched rule whose name another matched rule (unlimited ones included)
/// replaces into [`Resolved::Replaced`]. Only within this request. A set of the replaced
/// names, so that the cost stays linear in descriptors and `replaces` entries; building
/// it allocates only when some rule replaces another.
fn apply_replaces(resolved: &mut [Resolved<'_>]) {
    // Nearly every request: no rule replaces another, and no set is worth building.
    if resolved
        .iter()
        .filter_map(Resolved::rule)
        .all(|rule| rule.replaces.is_empty())
    {
        return;
    }
    let replaced: HashSet<&str, RandomState> = resolved
        .iter()
        .filter_map(Resolved::rule)
        .flat_map(|rule| rule.replaces.iter().map(String::as_str))
        .collect();
    if replaced.is_empty() {
        return;
    }
    for i in 0..resolved.len() {
        let Some(rule) = resolved[i].rule() else {
            continue;
        };
        if !rule.names().any(|name| replaced.contains(name)) {
            continue;
        }
        // Replaced entries still name their rule, so that the order of replacement does
        // not change who replaces whom.
        let by = resolved.iter().filter_map(Resolved::rule).find(|other| {
            rule.names()
                .any(|name| other.replaces.iter().any(|r| r == name))
        });
        if let Some(by) = by {
            resolved[i] = Resolved::Replaced { rule, by };
        }
    }
}
