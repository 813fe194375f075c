//! The limits of a limited descriptor: a config rule's (one, or a `rate_limits` list),
//! or the one a request sends in place of the config's.

use crate::rules::{Algorithm, ConfigLimit, Limit};

/// The limits of a limited descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limits<'c> {
    /// A config rule's, `algorithm` filling those that name none.
    Config {
        /// The rule's limits, in config order.
        limits: &'c [ConfigLimit],
        /// The server's default algorithm.
        algorithm: Algorithm,
    },
    /// A limit sent in the request: one, in place of the config's.
    Override(Limit),
}

impl<'c> Limits<'c> {
    /// How many there are.
    pub fn len(&self) -> usize {
        match self {
            Limits::Config { limits, .. } => limits.len(),
            Limits::Override(_) => 1,
        }
    }

    /// Never: a limited descriptor has at least one limit.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Limit `i` as enforced, with its config form (`None` for an override).
    ///
    /// # Panics
    /// When `i` is not below [`Limits::len`].
    #[inline]
    pub fn get(&self, i: usize) -> (Limit, Option<&'c ConfigLimit>) {
        match *self {
            Limits::Config { limits, algorithm } => {
                let limit = &limits[i];
                (limit.resolve(algorithm), Some(limit))
            }
            Limits::Override(limit) => {
                assert_eq!(i, 0, "an override is one limit");
                (limit, None)
            }
        }
    }

    /// Each limit as enforced, with its config form (`None` for an override).
    pub fn iter(&self) -> impl Iterator<Item = (Limit, Option<&'c ConfigLimit>)> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The name a status echoes for each limit: the config's, empty for an override.
    pub fn name(config: Option<&ConfigLimit>) -> &str {
        config.map_or("", |l| l.name.as_str())
    }
}
