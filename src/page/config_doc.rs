//! `config.json`: the running config's trees as loaded, with where it came from and the
//! last reload error; the page fetches it again when `state.json`'s `loads` changes.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::Page;
use crate::clock::rfc3339;
use crate::rules::Rule;

/// Most config entries listed (the rest are counted; `/rlconfig` has them all).
pub const MAX_ENTRIES: usize = 2000;

/// `config.json`.
#[derive(Debug, Serialize)]
pub struct ConfigDoc {
    /// Configs loaded so far (the first included): `state.json` says when this changes.
    pub loads: u64,
    /// Where the config comes from (a path, URL without password, or xDS server).
    pub source: String,
    /// `file`, `postgres` or `xds`.
    pub kind: &'static str,
    /// The source's version of the running config.
    pub version: String,
    /// The running config's fingerprint, as `/rlconfig` shows it.
    pub fingerprint: String,
    /// When the source last changed the running config (RFC 3339), if it has one.
    pub changed_at: Option<String>,
    /// Why the latest edit was rejected (its file and line), while the config before it
    /// stays in force.
    pub error: Option<String>,
    /// Global shadow mode (`--shadow-mode`) is on.
    pub global_shadow: bool,
    /// `--algorithm`: what rules without `algorithm` use.
    pub default_algorithm: &'static str,
    /// Each domain's entries.
    pub domains: Vec<DomainDoc>,
    /// Entries left out past [`MAX_ENTRIES`].
    pub left_out: usize,
}

/// One domain's tree, depth first in file order.
#[derive(Debug, Serialize)]
pub struct DomainDoc {
    /// The domain.
    pub name: String,
    /// Its entries.
    pub entries: Vec<EntryDoc>,
}

/// One descriptor entry of the config.
#[derive(Debug, Serialize)]
pub struct EntryDoc {
    /// 0 for the domain's first level.
    pub depth: usize,
    /// `key` or `key_value`, as the config names the entry.
    pub key: String,
    /// The rule at this entry, if it has one.
    pub rule: Option<RuleDoc>,
}

/// A rule as loaded.
#[derive(Debug, Serialize)]
pub struct RuleDoc {
    /// Its path (`/rlconfig`'s name; `state.json` names rules by it).
    pub path: String,
    /// `rate_limit.name`.
    pub name: String,
    /// `unlimited: true`.
    pub unlimited: bool,
    /// `shadow_mode: true`.
    pub shadow: bool,
    /// `quota_mode: true`.
    pub quota: bool,
    /// The rules it replaces.
    pub replaces: Vec<String>,
    /// Its limits, all of which a request must have room in (none for a concurrency
    /// rule, whose `concurrency` says it all).
    pub limits: Vec<LimitDoc>,
    /// `reserve` or `concurrency`: what it holds per request in flight.
    pub holds: Option<HoldsDoc>,
}

/// A rule's `reserve` or `concurrency`.
#[derive(Debug, Serialize)]
pub struct HoldsDoc {
    /// `concurrency.max_in_flight`; `None` for `reserve`.
    pub max_in_flight: Option<u32>,
    /// How long a hold lasts unsettled, in seconds.
    pub ttl_seconds: f64,
}

/// One limit of a rule.
#[derive(Debug, Serialize)]
pub struct LimitDoc {
    /// Its name in a `rate_limits` list (empty when unset).
    pub name: String,
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unit` (`second`, `minute`, ...).
    pub unit: String,
    /// `unit_multiplier`.
    pub multiplier: u32,
    /// `burst`.
    pub burst: u32,
    /// The algorithm in force for it.
    pub algorithm: &'static str,
    /// `charge: always`: its hits are charges, recorded whatever the answer.
    pub charge: bool,
}

impl Page {
    /// `config.json`.
    pub fn config_doc(&self) -> ConfigDoc {
        let config = self.service.config().load_full();
        let default = self.service.default_algorithm();
        let mut listed = 0;
        let mut left_out = 0;
        let mut domains = Vec::new();
        for name in config.domains() {
            let Some(tree) = config.domain(name) else {
                continue;
            };
            let mut entries = Vec::new();
            tree.root.visit(&mut Vec::new(), &mut |levels, entry| {
                if listed == MAX_ENTRIES {
                    left_out += 1;
                    return;
                }
                listed += 1;
                entries.push(EntryDoc {
                    depth: levels.len() - 1,
                    key: levels.last().copied().unwrap_or_default().to_string(),
                    rule: entry.rule.as_ref().map(|rule| rule_doc(rule, default)),
                });
            });
            domains.push(DomainDoc {
                name: name.to_string(),
                entries,
            });
        }
        let history = &self.history;
        ConfigDoc {
            loads: history.applied.load(Ordering::SeqCst),
            source: history.described().to_string(),
            kind: history.kind(),
            version: history.version(),
            fingerprint: format!("{:016x}", config.fingerprint()),
            changed_at: history.changed_at().map(rfc3339),
            error: history.last_error.lock().clone(),
            global_shadow: self.service.global_shadow(),
            default_algorithm: default.name(),
            domains,
            left_out,
        }
    }
}

fn rule_doc(rule: &Rule, default: crate::rules::Algorithm) -> RuleDoc {
    RuleDoc {
        path: rule.full_key.clone(),
        name: rule.name.clone(),
        unlimited: rule.is_unlimited(),
        shadow: rule.mode.is_shadow(),
        quota: rule.mode.is_quota(),
        replaces: rule.replaces.clone(),
        holds: rule.holds.map(|h| HoldsDoc {
            max_in_flight: h.slots,
            ttl_seconds: h.ttl as f64 / 1e9,
        }),
        limits: rule
            .limits
            .iter()
            .filter(|_| rule.holds.is_none_or(|h| h.slots.is_none()))
            .map(|limit| LimitDoc {
                name: limit.name.clone(),
                requests_per_unit: limit.requests_per_unit,
                unit: limit.unit.to_string(),
                multiplier: limit.multiplier,
                burst: limit.burst,
                algorithm: limit.algorithm.unwrap_or(default).name(),
                charge: limit.charge,
            })
            .collect(),
    }
}
