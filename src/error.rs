//! The errors below the edges (gRPC, HTTP, the command line), each with a kind that callers
//! branch on; the edges turn them into status codes and messages. Messages are for people:
//! nothing branches on their text.

use crate::request_caps::TooLarge;

/// Why a request could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request named no domain.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// The request had no descriptors.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// A limit override with an unusable unit (the Go server crashes on this one).
    #[error("descriptor {0}: limit override has no valid unit")]
    BadOverrideUnit(usize),
    /// The store could not decide.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `is_negative_hits` on a descriptor whose rule does not take refunds: one without
    /// `charge: always` on every limit, or a limit sent in the request.
    #[error(
        "descriptor {0}: is_negative_hits (a refund) needs a rule whose limits all have charge: always"
    )]
    RefundNotAllowed(usize),
    /// A refund or a settle from a caller `--give-back-from` does not allow.
    #[error(
        "this caller may not give budget back (is_negative_hits, or a settle of a hold): see --give-back-from"
    )]
    GiveBackNotAllowed,
    /// The request is over one of the caps of [`crate::request_caps::RequestCaps`].
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
}

impl RequestError {
    /// Whether the caller sent something no config can answer (as opposed to a store that
    /// could not decide): the Go server's `service_error`.
    pub fn is_invalid_request(&self) -> bool {
        !matches!(self, RequestError::Store(_))
    }
}

/// Why a quota stream (`StreamRateLimitQuotas`) is refused, or ended by a report.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// The server is draining: new streams are refused.
    #[error("meshlimit is shutting down")]
    ShuttingDown,
    /// The first usage report of a stream named no domain.
    #[error("the first usage report of a stream must name a domain")]
    NoDomain,
    /// A usage report's bucket id (at this index of `bucket_quota_usages`) has no entries.
    #[error("bucket_quota_usages[{0}]: the bucket id is empty")]
    EmptyBucketId(usize),
    /// A bucket id over the caps a descriptor has.
    #[error("bucket_quota_usages: {0}")]
    TooLarge(TooLarge),
}

/// What kind of failure kept a store from deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// The store could not be reached, or its circuit is open after failures.
    Unreachable,
    /// The store did not answer within the timeout.
    TimedOut,
    /// The store answered with an error reply.
    Refused,
    /// The store's reply could not be read.
    MalformedReply,
}

/// A store could not decide; the service answers gRPC `UNAVAILABLE` so that Envoy's
/// `failure_mode_deny` applies.
#[derive(Debug, Clone, thiserror::Error)]
#[error("store unavailable: {message}")]
pub struct StoreError {
    /// What kind of failure.
    pub kind: StoreErrorKind,
    /// What happened, in words, for logs and the gRPC message.
    pub message: String,
}

impl StoreError {
    /// A failure of `kind`, described by `message`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        StoreError {
            kind,
            message: message.into(),
        }
    }
}

/// Which problem a descriptor file has: one kind per rule of the format (and per limit of
/// the parser), so that callers and tests can tell problems apart without reading text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// The config path, or a file under it, cannot be read (missing, a link to nothing,
    /// no permission).
    Unreadable,
    /// A config source that could not be read: PostgreSQL or the xDS control plane down,
    /// refusing the connection or the query.
    SourceUnreachable,
    /// A PostgreSQL row whose `domain` column differs from its YAML's `domain`.
    RowDomainMismatch,
    /// An xDS resource that is not a `RateLimitConfig`, or cannot be decoded.
    BadResource,
    /// A file that is not UTF-8 text.
    NotUtf8,
    /// No thread could be started to parse the file.
    NoParserThread,
    /// The text is not YAML.
    YamlSyntax,
    /// More YAML nodes than allowed in one file (aliases expanded).
    TooManyNodes,
    /// More YAML parser events than allowed in one file.
    TooManyEvents,
    /// Lists and mappings (so descriptors) nested deeper than allowed.
    NestedTooDeep,
    /// Anchors holding more YAML events than allowed (one half of an alias bomb).
    AnchorsTooLarge,
    /// Aliases expanding to more YAML events than allowed (the other half).
    AliasesTooLarge,
    /// Aliases nested in aliases deeper than the parser allows.
    AliasesTooDeep,
    /// More scalar text than allowed in one file.
    TooMuchText,
    /// Another limit of the YAML parser.
    OverParserLimit,
    /// A node that must be a mapping is something else.
    NotAMapping,
    /// An entry of a `descriptors` list is not a mapping (the Go server's wording).
    DescriptorNotAMapping,
    /// A mapping key that is a number, a boolean, a list or a mapping.
    KeyNotAString,
    /// A key the format does not have (a misspelling, usually).
    UnknownKey,
    /// A field that must be a scalar is a list or a mapping.
    NotAString,
    /// A field that must be a list is something else.
    NotAList,
    /// A flag that is not `true` or `false`.
    NotAFlag,
    /// A count that is not a whole number from 0 to `u32::MAX`.
    NotANumber,
    /// The file names no domain, or an empty one.
    EmptyDomain,
    /// A second file defines a domain already defined.
    DuplicateDomain,
    /// A descriptor with an empty `key`.
    EmptyKey,
    /// Two descriptors of one level with the same composite key (`key_value`).
    DuplicateDescriptor,
    /// `share_threshold` on a descriptor whose value has no `*`.
    ShareThresholdWithoutWildcard,
    /// `unlimited: true` together with a unit, burst or algorithm.
    LimitWhenUnlimited,
    /// A `replaces` entry without a name.
    EmptyReplaces,
    /// A rule that replaces its own name.
    ReplacesSelf,
    /// A `unit` that is missing or not one of the units.
    BadUnit,
    /// An `algorithm` other than `token_bucket`, `fixed_window` or `sliding_window`.
    BadAlgorithm,
    /// A `charge` other than `always` or `admitted`, or one with nothing to charge (an
    /// unlimited rule, a descriptor without limits).
    BadCharge,
    /// A `reserve` or `concurrency` block that cannot apply: without a `ttl` or limits to
    /// hold, beside limits (concurrency), or above a child named `hold` or `settle`.
    BadHold,
    /// `burst: 0` on a rule that lets requests through.
    ZeroBurst,
    /// `burst` on a window rule (fixed or sliding), which has no bucket.
    BurstWithoutBucket,
    /// A `unit_multiplier` of 0, or one making the period longer than 100 years.
    BadMultiplier,
    /// A descriptor with both `rate_limit` and `rate_limits`.
    BothLimitForms,
    /// A `rate_limits` list without any entry.
    EmptyLimitList,
    /// `unlimited` inside a `rate_limits` entry.
    UnlimitedInList,
    /// Two limits of one `rate_limits` list with the same name, or unnamed with the same
    /// period: they would share one bucket.
    DuplicateLimit,
}

/// One problem in one descriptor file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Which problem.
    pub kind: ConfigErrorKind,
    /// The file (or config path) at fault.
    pub file: std::path::PathBuf,
    /// 1-based line, where the parser knows it.
    pub line: Option<u32>,
    /// Descriptor path (`domain.key_value.subkey`), where the problem is in a descriptor.
    pub descriptor: Option<String>,
    /// What is wrong, in words; the Go server's wording where it has one.
    pub message: String,
}

impl ConfigError {
    /// A problem of `kind` in `file`, at `line` (0 meaning unknown) and `descriptor`.
    pub(crate) fn new(
        kind: ConfigErrorKind,
        file: &std::path::Path,
        line: Option<u32>,
        descriptor: Option<String>,
        message: impl std::fmt::Display,
    ) -> Self {
        Self {
            kind,
            file: file.to_path_buf(),
            line: line.filter(|&l| l > 0),
            descriptor,
            message: message.to_string(),
        }
    }
}

/// `file[:line][: descriptor 'path']: message`, the form editors and CI logs link to.
impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(descriptor) = &self.descriptor {
            write!(f, ": descriptor '{descriptor}'")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}
