//! A descriptor's part in a hold (see [`crate::store::hold`]): its `hold` or `settle`
//! entry, read off the end of the descriptor, and what the plan keeps of it.

use std::ops::Range;

use crate::request::RequestDescriptor;
use crate::rules::{HOLD_KEY, HoldRule, SETTLE_KEY};
use crate::store::Phase;

/// A descriptor's part in a hold: what it asks, and where the hold's name (the `hold` or
/// `settle` entry's value) is in the plan's key buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedHold {
    /// What is asked.
    pub phase: Phase,
    /// The hold's name in the key buffer (empty for [`Phase::Peek`]).
    pub id: Range<usize>,
    /// The rule's holds.
    pub rule: HoldRule,
}

/// When `descriptor` ends in a `hold` or `settle` entry after at least one other: its
/// phase, its value (the hold's name) and how many entries come before it.
pub(super) fn hold_entry<D: RequestDescriptor>(descriptor: &D) -> Option<(Phase, &str, usize)> {
    let (count, (key, value)) = descriptor
        .entries()
        .enumerate()
        .last()
        .filter(|(i, _)| *i > 0)?;
    let phase = match key {
        HOLD_KEY => Phase::Hold,
        SETTLE_KEY => Phase::Settle,
        _ => return None,
    };
    Some((phase, value, count))
}
