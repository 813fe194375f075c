//! TLS to PostgreSQL, by the URL's `sslmode` (rustls with ring):
//!
//! - `sslmode=disable`: plain TCP.
//! - `sslmode=prefer` (tokio-postgres' default when the URL has no `sslmode`): TLS when the
//!   server offers it, plain TCP when it does not; the certificate is **not** verified,
//!   as libpq does for `prefer`. It keeps the traffic from passive eavesdroppers, not from
//!   an active attacker, and works with the self-signed certificate Debian's packages
//!   give every server.
//! - `sslmode=require`: TLS or no connection, and the certificate must chain to one of the
//!   system's roots (rustls-native-certs: the OS store, or the `SSL_CERT_FILE` and
//!   `SSL_CERT_DIR` environment variables for a private CA) and name the host. Stricter
//!   than libpq's `require`, which does not verify: it is libpq's `verify-full`.
//! - A unix socket (every host a path, `?host=/run/postgresql` or a percent-encoded
//!   path as host): no TLS whatever the `sslmode`, as libpq (PostgreSQL never offers TLS
//!   over a unix socket).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

/// The TLS connector for `config`, whose `sslmode` it may lower to `disable` (a unix
/// socket).
///
/// # Errors
/// `sslmode=require` and no root certificate could be loaded.
pub(super) fn connector(config: &mut tokio_postgres::Config) -> Result<MakeRustlsConnect, String> {
    let hosts = config.get_hosts();
    if !hosts.is_empty() && hosts.iter().all(|h| matches!(h, Host::Unix(_))) {
        config.ssl_mode(SslMode::Disable);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let config = match config.get_ssl_mode() {
        SslMode::Require => builder
            .with_root_certificates(system_roots()?)
            .with_no_client_auth(),
        _ => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(
                provider.signature_verification_algorithms,
            )))
            .with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The OS's root certificates (or `SSL_CERT_FILE` / `SSL_CERT_DIR`).
fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(format!(
            "sslmode=require verifies the server's certificate, but no root certificate \
             could be loaded (install ca-certificates, or set SSL_CERT_FILE to a CA \
             bundle){}{}",
            if why.is_empty() { "" } else { ": " },
            why.join("; ")
        ));
    }
    Ok(roots)
}

/// `sslmode=prefer`: any certificate is accepted (libpq's `prefer`); the handshake's
/// signatures are still checked, so the session is encrypted to whoever holds the key.
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> SslMode {
        let mut config: tokio_postgres::Config = url.parse().expect(url);
        connector(&mut config).expect("connector");
        config.get_ssl_mode()
    }

    #[test]
    fn a_unix_socket_never_uses_tls() {
        assert_eq!(
            mode("postgresql:///db?host=/run/postgresql&sslmode=require"),
            SslMode::Disable
        );
        assert_eq!(
            mode("postgresql://u@%2Frun%2Fpostgresql/db?sslmode=prefer"),
            SslMode::Disable
        );
        assert_eq!(mode("postgres://u:p@db:5432/x"), SslMode::Prefer);
        assert_eq!(
            mode("postgres://u:p@db/x?sslmode=disable"),
            SslMode::Disable
        );
    }
}
