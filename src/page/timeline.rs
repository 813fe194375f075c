//! The last [`WINDOW`] seconds of allowed and over-limit descriptors per second, overall
//! and per busy rule, sampled once a second by the server itself so that a page opened
//! during an incident shows the minutes before it at once.
//!
//! Bounded whatever the config and the traffic: at most [`MAX_CHARTED`] rules have a
//! history, taken by the first rules to see traffic and given back after a whole window
//! without any; the others' descriptors still count in the overall line.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::metrics::live::RuleCounts;

/// Seconds of history kept.
pub const WINDOW: usize = 600;

/// Most rules with a history of their own.
pub const MAX_CHARTED: usize = 200;

/// Descriptors in one second: (allowed, over the limit).
pub type Point = (u32, u32);

/// One line of the chart: its points, oldest first, the newest being the latest tick's.
#[derive(Debug, Default)]
pub struct Line {
    /// At most [`WINDOW`] points.
    points: VecDeque<Point>,
    /// Ticks in a row without any descriptor.
    idle: usize,
}

impl Line {
    fn push(&mut self, point: Point) {
        if self.points.len() == WINDOW {
            self.points.pop_front();
        }
        self.points.push_back(point);
        self.idle = if point == (0, 0) { self.idle + 1 } else { 0 };
    }

    /// The newest `n` points (fewer if the line is younger), oldest first.
    pub fn newest(&self, n: usize) -> impl Iterator<Item = Point> + '_ {
        self.points
            .iter()
            .skip(self.points.len().saturating_sub(n))
            .copied()
    }

    /// The latest tick's point.
    pub fn last(&self) -> Point {
        self.points.back().copied().unwrap_or_default()
    }
}

/// Every line, and the tick they end at.
#[derive(Debug, Default)]
pub struct Timeline {
    /// Ticks so far; a line's newest point is this tick's.
    pub seq: u64,
    /// Every rule's descriptors together.
    pub total: Line,
    /// The charted rules' lines, by the address of their counts (held in the value).
    rules: HashMap<usize, (Arc<RuleCounts>, Line)>,
    /// Rules that saw traffic in the latest tick without a line (all taken).
    pub uncharted: usize,
}

impl Timeline {
    /// One tick: each of `rules` (the running config's) adds what it counted since the
    /// previous tick. Lines of rules no longer in the config, or idle for a whole window,
    /// are dropped.
    pub fn tick<'a>(&mut self, rules: impl Iterator<Item = &'a Arc<RuleCounts>>) {
        self.seq += 1;
        let mut total: (u64, u64) = (0, 0);
        let mut seen = std::collections::HashSet::with_capacity(self.rules.len());
        self.uncharted = 0;
        for counts in rules {
            let (allowed, over) = counts.since_last();
            total = (total.0 + allowed, total.1 + over);
            let id = Arc::as_ptr(counts) as usize;
            let point = (saturate(allowed), saturate(over));
            let charted = self.rules.len();
            match self.rules.get_mut(&id) {
                Some((_, line)) => line.push(point),
                None if point == (0, 0) => continue,
                None if charted >= MAX_CHARTED => {
                    self.uncharted += 1;
                    continue;
                }
                None => {
                    let mut line = Line::default();
                    line.push(point);
                    self.rules.insert(id, (counts.clone(), line));
                }
            }
            seen.insert(id);
        }
        self.rules
            .retain(|id, (_, line)| seen.contains(id) && line.idle < WINDOW);
        self.total.push((saturate(total.0), saturate(total.1)));
    }

    /// The charted rules and their lines.
    pub fn rules(&self) -> impl Iterator<Item = (&Arc<RuleCounts>, &Line)> {
        self.rules.values().map(|(counts, line)| (counts, line))
    }
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::live::RuleCounts;

    fn counts(n: usize) -> Vec<Arc<RuleCounts>> {
        (0..n)
            .map(|i| Arc::new(RuleCounts::for_test(&format!("d.r{i}"))))
            .collect()
    }

    #[test]
    fn busy_rules_get_lines_up_to_the_cap_and_all_count_in_the_total() {
        let rules = counts(MAX_CHARTED + 5);
        let mut timeline = Timeline::default();
        for rule in &rules {
            rule.count(false);
        }
        rules[0].count(true);
        timeline.tick(rules.iter());
        assert_eq!(timeline.rules().count(), MAX_CHARTED);
        assert_eq!(timeline.uncharted, 5);
        assert_eq!(timeline.total.last(), (MAX_CHARTED as u32 + 5, 1));
        let first = timeline
            .rules()
            .find(|(c, _)| Arc::ptr_eq(c, &rules[0]))
            .map(|(_, line)| line.last());
        assert_eq!(first, Some((1, 1)));
    }

    #[test]
    fn lines_keep_one_window_and_idle_or_removed_rules_give_theirs_back() {
        let rules = counts(2);
        let mut timeline = Timeline::default();
        rules[0].count(false);
        rules[1].count(true);
        timeline.tick(rules.iter());
        // The second rule leaves the config.
        for _ in 0..WINDOW - 1 {
            timeline.tick(rules[..1].iter());
        }
        let lines: Vec<_> = timeline
            .rules()
            .map(|(_, line)| line.newest(WINDOW + 5).count())
            .collect();
        assert_eq!(lines, [WINDOW]);
        assert_eq!(timeline.total.newest(3).collect::<Vec<_>>(), [(0, 0); 3]);
        timeline.tick(rules[..1].iter());
        assert_eq!(timeline.rules().count(), 0, "idle for a whole window");
        assert_eq!(timeline.seq, WINDOW as u64 + 1);
    }
}
