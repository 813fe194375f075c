//! The error of a TLS config that cannot be built: shared by [`super::tls`] (the config),
//! [`super::client_san`] (the SAN allow-list) and [`super::tls_reload`] (its reload).

/// Files that do not make a TLS config, with the file and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(
    /// The message: the file and what is wrong with it.
    pub(crate) String,
);
