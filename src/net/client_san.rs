//! The client-certificate SAN allow-list (`--grpc-client-san`): after the usual chain
//! verification, a client certificate must also be valid for one of the allowed names,
//! by the same rules as a server name (DNS names, wildcards included, and IP
//! addresses), as checked by webpki.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

use super::tls_error::TlsError;

/// `inner`, refusing certificates valid for none of `sans` (none given: `inner` as is).
pub(crate) fn allow_only(
    inner: Arc<dyn ClientCertVerifier>,
    sans: &[String],
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    if sans.is_empty() {
        return Ok(inner);
    }
    let names = sans
        .iter()
        .map(|san| {
            ServerName::try_from(san.clone()).map_err(|_| {
                TlsError(format!(
                    "client SAN {san:?} is neither a DNS name nor an IP address"
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Arc::new(AllowedSans { inner, names }))
}

/// A verifier that also requires one of `names` among the certificate's SANs.
#[derive(Debug)]
struct AllowedSans {
    /// The usual chain verification, run first; everything else is delegated to it.
    inner: Arc<dyn ClientCertVerifier>,
    /// The allowed SANs (`--grpc-client-san`), parsed once: DNS names and IP addresses.
    names: Vec<ServerName<'static>>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if self
            .names
            .iter()
            .any(|name| cert.verify_is_valid_for_subject_name(name).is_ok())
        {
            Ok(verified)
        } else {
            Err(Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
