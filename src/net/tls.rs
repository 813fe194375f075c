//! rustls server configs from PEM files: the certificate chain and key, and optionally
//! the CA that client certificates must chain to (then mandatory) and the SANs allowed.
//! rustls with the ring provider; TLS 1.2 and 1.3.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

use super::client_san;
use super::tls_error::TlsError;

/// The files of one port's TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, the server's own certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the certificate.
    pub key: PathBuf,
    /// PEM CA certificates that client certificates must chain to; `Some` makes client
    /// certificates mandatory.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: a client certificate must be valid for at least one of these
    /// DNS names or IP addresses (empty: any certificate from the CA).
    pub client_sans: Vec<String>,
}

impl TlsFiles {
    /// Server TLS only, no client certificates.
    pub fn server(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self {
            cert: cert.into(),
            key: key.into(),
            client_ca: None,
            client_sans: Vec::new(),
        }
    }

    /// Every file, in a fixed order.
    pub(crate) fn paths(&self) -> Vec<&Path> {
        let mut paths = vec![self.cert.as_path(), self.key.as_path()];
        paths.extend(self.client_ca.as_deref());
        paths
    }
}

/// What a port speaks over TLS, offered by ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocols {
    /// gRPC: HTTP/2 only.
    Grpc,
    /// The operator endpoints: HTTP/2 or HTTP/1.1.
    Http,
}

impl Protocols {
    fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            Self::Grpc => vec![b"h2".to_vec()],
            Self::Http => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        }
    }
}

/// The config `files` describe, as of now.
pub(crate) fn build(files: &TlsFiles, protocols: Protocols) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = certificates(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        TlsError(format!(
            "{}: no usable private key: {e}",
            files.key.display()
        ))
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = match &files.client_ca {
        None if !files.client_sans.is_empty() => {
            return Err(TlsError(
                "allowed client SANs need a client CA (--grpc-client-ca)".into(),
            ));
        }
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| TlsError(format!("{}: {e}", ca.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError(format!("{}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(client_san::allow_only(verifier, &files.client_sans)?)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        TlsError(format!(
            "{} with {}: {e}",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    config.alpn_protocols = protocols.alpn();
    Ok(config)
}

/// Every certificate in the PEM file at `path`; at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |e: &dyn std::fmt::Display| TlsError(format!("{}: {e}", path.display()));
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"no PEM certificate in the file"));
    }
    Ok(certs)
}
