//! `state.json?after=SEQ`, which the page polls: the timeline's points after tick `SEQ`
//! (all of the window without it), the charted rules' rates, every limit of rules with
//! several, the most refused descriptors, the store's health ([`super::store_doc`]) and
//! the quota service's streams.
//!
//! Values from callers (refused descriptors) and from the config (keys, values, names)
//! are strings in JSON; the page only ever puts them into the document as text.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::Page;
use super::config_doc::MAX_ENTRIES;
use super::store_doc::StoreDoc;
use super::timeline::{Line, Point, WINDOW};

/// Most refused descriptors listed.
pub const MAX_REFUSED: usize = 100;

/// Ticks over which rules are ranked by traffic.
const BUSY_TICKS: usize = 60;

/// Most quota buckets listed.
const MAX_QUOTA_BUCKETS: usize = 50;

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
    /// The rules with a line, busiest over the last minute first.
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

impl Page {
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
        // Busiest over the last minute first, whatever `after` asks for, so that the
        // page's rows keep their order from one poll to the next.
        let busy = |line: &Line| -> u64 {
            line.newest(BUSY_TICKS)
                .map(|(a, o)| u64::from(a) + u64::from(o))
                .sum()
        };
        // Each line's sum once, not once per comparison.
        let mut lines: Vec<_> = timeline
            .rules()
            .map(|(counts, line)| (busy(line), counts, line))
            .collect();
        lines.sort_by(|a, b| {
            (b.0.cmp(&a.0))
                .then_with(|| a.1.domain.cmp(&b.1.domain))
                .then_with(|| a.1.path.cmp(&b.1.path))
        });
        let rules = lines
            .into_iter()
            .map(|(_, counts, line)| RuleRates {
                domain: counts.domain.to_string(),
                path: counts.path.to_string(),
                last: line.last(),
                points: padded(line, n),
            })
            .collect();
        let total = padded(&timeline.total, n);
        let uncharted = timeline.uncharted;
        drop(timeline);
        StateDoc {
            seq,
            interval_s: 1,
            window: WINDOW,
            loads: self.history.applied.load(Ordering::SeqCst),
            error: self.history.last_error.lock().clone(),
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
