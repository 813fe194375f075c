//! How each descriptor's verdict counts towards its request's fate: the rule's mode, and
//! global quota mode (the Go server's `QUOTA_MODE`), under which every descriptor is a
//! quota-mode one and one without a limit a quota descriptor that is never over.

use super::{Plan, Resolved};
use crate::rules::Mode;

impl Plan<'_> {
    /// How an over-limit verdict of one of this plan's descriptors counts towards the
    /// request's fate: its rule's mode, made a quota one under global quota mode.
    #[inline]
    pub fn mode_of(&self, resolved: &Resolved<'_>) -> Mode {
        let mode = resolved.mode();
        if self.global_quota {
            Mode::from_flags(mode.is_shadow(), true)
        } else {
            mode
        }
    }

    /// Whether the request has a quota-mode descriptor that can never be over: under
    /// global quota mode, one without a limit (no rule, or replaced). The Go server counts
    /// such a descriptor among the quota descriptors, so that a request with one is never
    /// denied by the quota rule; an unlimited one does not count. Without global quota
    /// mode, one test of a flag.
    #[inline]
    pub fn has_passing_quota(&self) -> bool {
        self.global_quota
            && self
                .resolved
                .iter()
                .any(|r| matches!(r, Resolved::NoRule | Resolved::Replaced { .. }))
    }

    /// The mode a limited descriptor's verdict is decided with, by the stores (its
    /// checks') and by the answer alike: [`Plan::mode_of`], or, when the request has a
    /// passing quota descriptor (`passing_quota`, [`Plan::has_passing_quota`] asked once),
    /// one that cannot deny. A passing quota descriptor has no check of its own, and the
    /// stores read a check's mode for the request's verdict (and Redis to pick its
    /// script), nothing else.
    #[inline]
    pub fn verdict_mode(&self, resolved: &Resolved<'_>, passing_quota: bool) -> Mode {
        if passing_quota {
            Mode::ShadowQuota
        } else {
            self.mode_of(resolved)
        }
    }
}
