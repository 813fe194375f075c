//! Who is being limited: the descriptors each rule refused most often lately, for the
//! operator page.
//!
//! Descriptor values come from callers, so the number of distinct ones is unbounded. Each
//! window keeps a Misra–Gries summary of at most [`CAPACITY`] entries: a refusal of a known
//! value adds one; of a new value, takes a free entry, or else takes one from every entry
//! (dropping those at zero) and is itself not kept. A value refused more than
//! `1 / (CAPACITY + 1)` of the window's refusals is always listed, whatever else callers
//! send, and its count is short by at most that share; memory stays at `CAPACITY` entries,
//! each with at most [`TEXT_BYTES`] of text. The two windows are rotated every
//! [`WINDOW_SECONDS`], so what is shown covers the last one to two windows. A refusal
//! never waits for the summary's lock: when another core holds it, the refusal is left
//! out (counts are lower bounds either way).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use foldhash::fast::RandomState;
use parking_lot::Mutex;

use super::live::RuleCounts;

/// Most entries of one window.
pub const CAPACITY: usize = 256;

/// Most bytes of a descriptor's text kept (cut at a character boundary, marked `…`).
pub const TEXT_BYTES: usize = 200;

/// Seconds one window covers.
pub const WINDOW_SECONDS: u64 = 30;

/// (the rule's counts' address, the hash of the descriptor's entries).
type Key = (usize, u64);

/// One refused descriptor in a window.
#[derive(Debug)]
struct Refused {
    /// The rule that refused it; held so that the address in the key stays its own.
    rule: Arc<RuleCounts>,
    /// `k=v, k2=v2`, cut at [`TEXT_BYTES`].
    text: Box<str>,
    /// Refusals counted (see the module docs for how it falls short).
    count: u64,
}

/// One window's summary.
#[derive(Debug, Default)]
struct Summary(HashMap<Key, Refused, RandomState>);

impl Summary {
    fn add<'e>(
        &mut self,
        key: Key,
        rule: &Arc<RuleCounts>,
        entries: impl Iterator<Item = (&'e str, &'e str)>,
    ) {
        if let Some(known) = self.0.get_mut(&key) {
            known.count += 1;
        } else if self.0.len() < CAPACITY {
            let refused = Refused {
                rule: rule.clone(),
                text: text(entries),
                count: 1,
            };
            self.0.insert(key, refused);
        } else {
            self.0.retain(|_, refused| {
                refused.count -= 1;
                refused.count > 0
            });
        }
    }
}

/// The refused descriptors of the current and the previous window.
#[derive(Debug, Default)]
pub struct Refusals {
    /// Hashes descriptors' entries (a per-process key: callers cannot aim at collisions).
    hasher: RandomState,
    /// (current, previous).
    windows: Mutex<(Summary, Summary)>,
}

/// A refused descriptor, as the page lists it.
#[derive(Debug, Clone)]
pub struct TopRefused {
    /// The rule that refused it.
    pub rule: Arc<RuleCounts>,
    /// Its entries, `k=v, k2=v2`.
    pub text: String,
    /// Refusals in the last one to two windows (a lower bound, see the module docs).
    pub count: u64,
}

impl Refusals {
    /// `rule` refused a descriptor with `entries`.
    pub(super) fn record<'e, I>(&self, rule: &Arc<RuleCounts>, entries: impl Fn() -> I)
    where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        let mut hasher = self.hasher.build_hasher();
        for (key, value) in entries() {
            key.hash(&mut hasher);
            value.hash(&mut hasher);
        }
        let key = (Arc::as_ptr(rule) as usize, hasher.finish());
        // Never wait: a refusal that finds another core recording is left out, so the
        // summary becomes a sample under contention, where a heavy caller stays heavy.
        if let Some(mut windows) = self.windows.try_lock() {
            windows.0.add(key, rule, entries());
        }
    }

    /// Starts a new window; the current one becomes the previous.
    pub fn rotate(&self) {
        let mut windows = self.windows.lock();
        windows.1 = std::mem::take(&mut windows.0);
    }

    /// Every descriptor refused in both windows, most refused first.
    pub fn top(&self) -> Vec<TopRefused> {
        let windows = self.windows.lock();
        let mut merged: HashMap<Key, TopRefused, RandomState> = HashMap::default();
        for (key, refused) in windows.0.0.iter().chain(windows.1.0.iter()) {
            merged
                .entry(*key)
                .and_modify(|top| top.count += refused.count)
                .or_insert_with(|| TopRefused {
                    rule: refused.rule.clone(),
                    text: refused.text.to_string(),
                    count: refused.count,
                });
        }
        drop(windows);
        let mut top: Vec<TopRefused> = merged.into_values().collect();
        top.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.text.cmp(&b.text)));
        top
    }
}

/// `k=v, k2=v2`, at most [`TEXT_BYTES`] bytes and a `…`.
fn text<'e>(entries: impl Iterator<Item = (&'e str, &'e str)>) -> Box<str> {
    let mut out = String::new();
    for (i, (key, value)) in entries.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(key);
        out.push('=');
        out.push_str(value);
        if out.len() > TEXT_BYTES {
            break;
        }
    }
    if out.len() > TEXT_BYTES {
        let mut end = TEXT_BYTES;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push('…');
    }
    out.into_boxed_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::live::LiveRules;

    fn refuse(refusals: &Refusals, rule: &Arc<RuleCounts>, user: &str) {
        refusals.record(rule, || [("user", user)].into_iter());
    }

    #[test]
    fn a_heavy_caller_is_listed_through_a_flood_of_one_off_values() {
        let mut live = LiveRules::default();
        let rule = live.of_rule("d", "d.user");
        let refusals = Refusals::default();
        for i in 0..20_000 {
            refuse(&refusals, &rule, &format!("one-off-{i}"));
            if i % 20 == 0 {
                refuse(&refusals, &rule, "mallory");
            }
        }
        let top = refusals.top();
        assert!(top.len() <= CAPACITY);
        assert_eq!(top[0].text, "user=mallory");
        // 1000 refusals, short by at most 21,000 / 257.
        assert!(top[0].count > 1000 - 21_000 / 257, "{}", top[0].count);
        assert!(top[0].count <= 1000);
    }

    #[test]
    fn counts_cover_two_windows_and_are_kept_per_rule() {
        let mut live = LiveRules::default();
        let (a, b) = (live.of_rule("d", "d.a"), live.of_rule("d", "d.b"));
        let refusals = Refusals::default();
        refuse(&refusals, &a, "x");
        refuse(&refusals, &b, "x");
        refusals.rotate();
        refuse(&refusals, &a, "x");
        let top = refusals.top();
        let count = |rule: &Arc<RuleCounts>| {
            top.iter()
                .find(|t| Arc::ptr_eq(&t.rule, rule))
                .map(|t| t.count)
        };
        assert_eq!((count(&a), count(&b)), (Some(2), Some(1)));
        refusals.rotate();
        refusals.rotate();
        assert!(refusals.top().is_empty());
    }

    #[test]
    fn long_values_are_cut_at_a_character_boundary() {
        let long = "é".repeat(300);
        let cut = text([("k", long.as_str())].into_iter());
        assert!(cut.len() <= TEXT_BYTES + '…'.len_utf8());
        assert!(cut.starts_with("k=é") && cut.ends_with('…'));
        assert_eq!(&*text([("a", "1"), ("b", "")].into_iter()), "a=1, b=");
    }
}
