//! Who is calling on a connection, as far as the transport tells: whether the peer is on
//! this host (a loopback address or the Unix socket), and the client certificate it
//! presented over mTLS. Put into every request's extensions, for the endpoints that
//! decide who may do what (see [`GiveBack`]).

use std::sync::{Arc, OnceLock};

use rustls::pki_types::{CertificateDer, ServerName};
use tokio_util::either::Either;

use super::tls_error::TlsError;

/// A connection's caller.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The peer's address; `None` on the Unix socket. Logged with what an operator
    /// endpoint changes (a bucket reset).
    pub peer: Option<std::net::SocketAddr>,
    /// The peer is on this host: a loopback address, or the Unix socket.
    pub local: bool,
    /// The end-entity certificate the peer presented (mTLS), already verified.
    pub certificate: Option<Arc<CertificateDer<'static>>>,
    /// [`GiveBack::allows`]'s verdict, worked out on the connection's first request that
    /// asks (a certificate is parsed once, not per request).
    pub verdict: Arc<OnceLock<bool>>,
}

impl Caller {
    /// The caller on `stream` before any TLS.
    pub(crate) fn of(stream: &super::listener::Stream) -> Self {
        let (peer, unix) = match stream {
            Either::Left(tcp) => (tcp.peer_addr().ok(), false),
            Either::Right(_) => (None, true),
        };
        Caller {
            peer,
            // `to_canonical`: an IPv4 loopback peer on a dual-stack socket is ::ffff:127.x.
            local: unix || peer.is_some_and(|a| a.ip().to_canonical().is_loopback()),
            ..Caller::default()
        }
    }
}

/// Who may give budget back: refunds (`is_negative_hits`) and settles of holds, which
/// release what a request did not use and concurrency slots (`--give-back-from`).
#[derive(Debug, Clone)]
pub struct GiveBack {
    /// Anyone may.
    anyone: bool,
    /// Callers on this host may.
    local: bool,
    /// Callers presenting a client certificate valid for one of these names may.
    sans: Vec<ServerName<'static>>,
}

impl Default for GiveBack {
    /// Callers on this host only (see `docs/holds.md`: a rate-limit service every pod can
    /// reach must not let every pod hand itself budget).
    fn default() -> Self {
        GiveBack {
            anyone: false,
            local: true,
            sans: Vec::new(),
        }
    }
}

impl GiveBack {
    /// The policy of `--give-back-from` values: `anyone`, `loopback`, `none`, or
    /// `san:<name>` (a DNS name or IP address a client certificate is valid for). No
    /// value: the default.
    ///
    /// # Errors
    /// A value that is none of those, or a SAN that is no DNS name or IP address.
    pub fn parse(values: &[String]) -> Result<Self, TlsError> {
        if values.is_empty() {
            return Ok(GiveBack::default());
        }
        let mut policy = GiveBack {
            anyone: false,
            local: false,
            sans: Vec::new(),
        };
        for value in values {
            match value.as_str() {
                "anyone" => policy.anyone = true,
                "loopback" => policy.local = true,
                "none" => {}
                other => {
                    let Some(san) = other.strip_prefix("san:") else {
                        return Err(TlsError(format!(
                            "--give-back-from {other:?}: expected anyone, loopback, none or san:<name>"
                        )));
                    };
                    let name = ServerName::try_from(san.to_string()).map_err(|_| {
                        TlsError(format!(
                            "--give-back-from san:{san}: neither a DNS name nor an IP address"
                        ))
                    })?;
                    policy.sans.push(name);
                }
            }
        }
        Ok(policy)
    }

    /// Whether `caller` (`None`: not known, as for a request from inside the process)
    /// may give budget back.
    pub fn allows(&self, caller: Option<&Caller>) -> bool {
        if self.anyone {
            return true;
        }
        let Some(caller) = caller else {
            return false;
        };
        *caller.verdict.get_or_init(|| self.decide(caller))
    }

    fn decide(&self, caller: &Caller) -> bool {
        if self.local && caller.local {
            return true;
        }
        let Some(der) = &caller.certificate else {
            return false;
        };
        let Ok(cert) = webpki::EndEntityCert::try_from(der.as_ref()) else {
            return false;
        };
        self.sans
            .iter()
            .any(|name| cert.verify_is_valid_for_subject_name(name).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_lets_only_this_host_give_back() {
        let policy = GiveBack::parse(&[]).unwrap();
        assert!(policy.allows(Some(&Caller {
            local: true,
            ..Caller::default()
        })));
        assert!(!policy.allows(Some(&Caller::default())));
        assert!(!policy.allows(None));
        let anyone = GiveBack::parse(&["anyone".into()]).unwrap();
        assert!(anyone.allows(Some(&Caller::default())));
        let none = GiveBack::parse(&["none".into()]).unwrap();
        assert!(!none.allows(Some(&Caller {
            local: true,
            ..Caller::default()
        })));
        assert!(GiveBack::parse(&["everyone".into()]).is_err());
        assert!(GiveBack::parse(&["san:".into()]).is_err());
        assert!(GiveBack::parse(&["san:gateway.example".into()]).is_ok());
    }
}
