//! The two JSON documents the page polls:
//! - `config.json`: the running config's trees as loaded, with where it came from and the
//!   last reload error; fetched again when `state.json`'s `loads` changes;
//! - `state.json?after=SEQ`: the timeline's points after tick `SEQ` (all of the window
//!   without it), the charted rules' rates, every limit of rules with several, the most
//!   refused descriptors, the store's health and the quota service's streams.
//!
//! Values from callers (refused descriptors) and from the config (keys, values, names)
//! are strings in JSON; the page only ever puts them into the document as text.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::Page;
use super::timeline::{Line, Point, WINDOW};
use crate::clock::rfc3339;
use crate::rules::Rule;
use crate::store::{Store, StoreHealth};

/// Most config entries listed (the rest are counted; `/rlconfig` has them all).
pub const MAX_ENTRIES: usize = 2000;

/// Most refused descriptors listed.
pub const MAX_REFUSED: usize = 100;

/// Most quota buckets listed.
const MAX_QUOTA_BUCKETS: usize = 50;

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
    /// Its limits, all of which a request must have room in.
    pub limits: Vec<LimitDoc>,
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
}

/// `state.json`.
#[derive(Debug, Serialize)]
pub struct StateDoc {
    /// The latest tick; ask `?after=` it next time.
    pub seq: u64,
    /// Seconds between ticks.
    pub interval_s: u64,
    /// Ticks a line keeps.
    pub window: usize,
    /// Configs loaded so far: fetch `config.json` again when it changes.
    pub loads: u64,
    /// The last reload error, as in `config.json`.
    pub error: Option<String>,
    /// Descriptors of every rule, per tick, after `after` (oldest first).
    pub total: Vec<Point>,
    /// The rules with a line, busiest over the returned points first.
    pub rules: Vec<RuleRates>,
    /// Rules with traffic in the latest tick but no line (all lines taken).
    pub uncharted: usize,
    /// Limits of rules with several: which one binds most.
    pub multi: Vec<MultiDoc>,
    /// The most refused descriptors of the last one to two refusal windows.
    pub refused: Vec<RefusedDoc>,
    /// Seconds a refusal window lasts.
    pub refusal_window_s: u64,
    /// The store.
    pub store: StoreDoc,
    /// The quota service's streams and buckets, as `/rlqs` words them (first buckets).
    pub rlqs: String,
}

/// One charted rule.
#[derive(Debug, Serialize)]
pub struct RuleRates {
    /// Its domain.
    pub domain: String,
    /// Its path.
    pub path: String,
    /// Allowed and over-limit descriptors in the latest tick.
    pub last: Point,
    /// Its points, aligned with `total`'s (zeros before the line began).
    pub points: Vec<Point>,
}

/// One rule with several limits.
#[derive(Debug, Serialize)]
pub struct MultiDoc {
    /// Its domain.
    pub domain: String,
    /// Its path.
    pub path: String,
    /// Each limit, in config order.
    pub limits: Vec<LimitCountsDoc>,
}

/// One limit's counts.
#[derive(Debug, Serialize)]
pub struct LimitCountsDoc {
    /// Its label.
    pub label: String,
    /// Hits it had room for.
    pub within: u64,
    /// Hits it refused.
    pub over: u64,
    /// Descriptors whose status it was.
    pub binding: u64,
}

/// A refused descriptor.
#[derive(Debug, Serialize)]
pub struct RefusedDoc {
    /// The rule's domain.
    pub domain: String,
    /// The rule's path.
    pub path: String,
    /// The descriptor's entries, `k=v, k2=v2`.
    pub key: String,
    /// Its refusals (a lower bound).
    pub count: u64,
}

/// The store's state.
#[derive(Debug, Serialize)]
pub struct StoreDoc {
    /// `memory` or `redis`.
    pub kind: &'static str,
    /// `OK`, `degraded: why` or `down: why` (as `/healthcheck` says).
    pub health: String,
    /// The embedded store's size.
    pub memory: Option<MemoryDoc>,
    /// Redis' nodes and caches.
    pub redis: Option<RedisDoc>,
}

/// The embedded store's size and evictions.
#[derive(Debug, Serialize)]
pub struct MemoryDoc {
    /// Buckets held.
    pub buckets: u64,
    /// `--max-buckets`.
    pub max_buckets: u64,
    /// Bytes they count for.
    pub bytes: u64,
    /// `--max-store-bytes`.
    pub max_bytes: u64,
    /// Buckets evicted to respect a bound.
    pub evictions: u64,
    /// Of those, buckets not full again.
    pub evictions_weakened: u64,
}

/// Redis as the store sees it.
#[derive(Debug, Serialize)]
pub struct RedisDoc {
    /// `--redis-failure`.
    pub failure_policy: &'static str,
    /// Each node.
    pub nodes: Vec<NodeDoc>,
    /// Requests answered by the over-limit cache.
    pub over_limit_hits: u64,
    /// Requests answered from leased tokens.
    pub lease_hits: u64,
    /// Requests sent to Redis.
    pub misses: u64,
    /// Requests Redis failed to decide.
    pub errors: u64,
    /// Requests the failure policy answered.
    pub fallbacks: u64,
}

/// One Redis node.
#[derive(Debug, Serialize)]
pub struct NodeDoc {
    /// `host:port`.
    pub name: String,
    /// Why its circuit is open; `None` while it decides.
    pub down: Option<String>,
    /// The latest probe's round trip in microseconds (0: none yet).
    pub round_trip_us: u64,
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
        let source = &self.source;
        ConfigDoc {
            loads: source.applied.load(Ordering::SeqCst),
            source: source.described().to_string(),
            kind: source.kind(),
            version: source.version(),
            fingerprint: format!("{:016x}", config.fingerprint()),
            changed_at: source.changed_at().map(rfc3339),
            error: source.last_error.lock().clone(),
            global_shadow: self.service.global_shadow(),
            default_algorithm: default.name(),
            domains,
            left_out,
        }
    }

    /// `state.json`: the timeline after tick `after` (the whole window without it).
    pub fn state_doc(&self, after: Option<u64>) -> StateDoc {
        let mut multi = Vec::new();
        self.metrics.visit_rules(|view| {
            if view.limits.is_empty() || multi.len() == MAX_ENTRIES {
                return;
            }
            let limits = view
                .rule
                .limits
                .iter()
                .zip(&view.limits)
                .map(|(limit, counts)| LimitCountsDoc {
                    label: limit.label(),
                    within: counts.within,
                    over: counts.over,
                    binding: counts.binding,
                })
                .collect();
            multi.push(MultiDoc {
                domain: view.domain.to_string(),
                path: view.rule.full_key.clone(),
                limits,
            });
        });
        let refused = self
            .metrics
            .refusals()
            .top()
            .into_iter()
            .take(MAX_REFUSED)
            .map(|top| RefusedDoc {
                domain: top.rule.domain.to_string(),
                path: top.rule.path.to_string(),
                key: top.text,
                count: top.count,
            })
            .collect();
        let timeline = self.timeline.lock();
        let seq = timeline.seq;
        let window = WINDOW as u64;
        let n = match after {
            Some(after) if after < seq => (seq - after).min(window),
            Some(_) => 0,
            None => seq.min(window),
        } as usize;
        let mut rules: Vec<RuleRates> = timeline
            .rules()
            .map(|(counts, line)| RuleRates {
                domain: counts.domain.to_string(),
                path: counts.path.to_string(),
                last: line.last(),
                points: padded(line, n),
            })
            .collect();
        let busy = |r: &RuleRates| -> u64 {
            r.points
                .iter()
                .map(|&(a, o)| u64::from(a) + u64::from(o))
                .sum()
        };
        rules.sort_by(|a, b| busy(b).cmp(&busy(a)).then_with(|| a.path.cmp(&b.path)));
        let total = padded(&timeline.total, n);
        let uncharted = timeline.uncharted;
        drop(timeline);
        StateDoc {
            seq,
            interval_s: 1,
            window: WINDOW,
            loads: self.source.applied.load(Ordering::SeqCst),
            error: self.source.last_error.lock().clone(),
            total,
            rules,
            uncharted,
            multi,
            refused,
            refusal_window_s: crate::metrics::refusals::WINDOW_SECONDS,
            store: self.store_doc(),
            rlqs: crate::rlqs::page::listing(&self.quotas, MAX_QUOTA_BUCKETS),
        }
    }

    fn store_doc(&self) -> StoreDoc {
        let store = self.service.store();
        let health = match store.health() {
            StoreHealth::Healthy => "OK".to_string(),
            StoreHealth::Degraded(why) => format!("degraded: {why}"),
            StoreHealth::Down(why) => format!("down: {why}"),
        };
        let (memory, redis) = match store {
            Store::Memory(memory) => {
                let (stats, bounds) = (memory.stats(), memory.bounds());
                let doc = MemoryDoc {
                    buckets: stats.buckets,
                    max_buckets: bounds.buckets,
                    bytes: stats.bytes,
                    max_bytes: bounds.bytes,
                    evictions: stats.evictions,
                    evictions_weakened: stats.evictions_weakened,
                };
                (Some(doc), None)
            }
            Store::Redis(redis) => {
                let stats = redis.stats();
                let nodes = redis
                    .nodes()
                    .into_iter()
                    .map(|node| NodeDoc {
                        name: node.name,
                        down: node.down,
                        round_trip_us: node.round_trip_us,
                    })
                    .collect();
                let doc = RedisDoc {
                    failure_policy: redis.failure_policy().name(),
                    nodes,
                    over_limit_hits: stats.over_limit_hits,
                    lease_hits: stats.lease_hits,
                    misses: stats.misses,
                    errors: stats.errors,
                    fallbacks: stats.fallbacks,
                };
                (None, Some(doc))
            }
        };
        StoreDoc {
            kind: store.kind(),
            health,
            memory,
            redis,
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
        limits: rule
            .limits
            .iter()
            .map(|limit| LimitDoc {
                name: limit.name.clone(),
                requests_per_unit: limit.requests_per_unit,
                unit: limit.unit.to_string(),
                multiplier: limit.multiplier,
                burst: limit.burst,
                algorithm: limit.algorithm.unwrap_or(default).name(),
            })
            .collect(),
    }
}

/// The newest `n` points of `line`, zeros first where it is younger.
fn padded(line: &Line, n: usize) -> Vec<Point> {
    let mut points: Vec<Point> = line.newest(n).collect();
    if points.len() < n {
        let mut zeros = vec![(0, 0); n - points.len()];
        zeros.append(&mut points);
        points = zeros;
    }
    points
}
