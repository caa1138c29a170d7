//! rustls configuration: who may connect, and whom a node trusts.
//!
//! The head requires a client certificate and accepts it when its
//! [`Authorizer`] says yes to the key's [`Fingerprint`]. A node trusts
//! exactly one server key, the pinned head fingerprint. Neither side uses a
//! CA or checks host names; both still verify the TLS 1.3 handshake
//! signature, which proves the peer holds the private key.

use crate::{EndpointError, Fingerprint, Identity};
use rustls::{
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{CryptoProvider, WebPkiSupportedAlgorithms},
    pki_types::{CertificateDer, ServerName, UnixTime},
    server::danger::{ClientCertVerified, ClientCertVerifier},
    CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme,
};
use std::{fmt, sync::Arc};

/// Decides whether a client key may join. Called during the TLS handshake.
pub type Authorizer = Arc<dyn Fn(&Fingerprint) -> bool + Send + Sync>;

/// An [`Authorizer`] that accepts exactly the given fingerprints.
pub fn allow_only(allowed: impl IntoIterator<Item = Fingerprint>) -> Authorizer {
    let allowed: Vec<Fingerprint> = allowed.into_iter().collect();
    Arc::new(move |fp| allowed.contains(fp))
}

/// An [`Authorizer`] that accepts every ed25519 key; whoever uses it decides
/// after the handshake (the head's membership checks the hello).
pub fn allow_any() -> Authorizer {
    Arc::new(|_| true)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn verify_tls13(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
}

fn tls12_refused() -> Result<HandshakeSignatureValid, Error> {
    Err(Error::General("Link F speaks TLS 1.3 only".into()))
}

fn key_of(cert: &CertificateDer<'_>) -> Result<Fingerprint, Error> {
    Fingerprint::of_certificate(cert)
        .ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))
}

/// The head's check of node certificates.
pub struct AuthorizingClientVerifier {
    authorizer: Authorizer,
    algs: WebPkiSupportedAlgorithms,
}

impl fmt::Debug for AuthorizingClientVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizingClientVerifier")
            .finish_non_exhaustive()
    }
}

impl ClientCertVerifier for AuthorizingClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let fp = key_of(end_entity)?;
        if (self.authorizer)(&fp) {
            Ok(ClientCertVerified::assertion())
        } else {
            tracing::warn!(fingerprint = %fp, "refused a node whose key is not authorized");
            Err(Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        tls12_refused()
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

/// The node's check of the head certificate: the key must be the pinned one.
pub struct PinnedServerVerifier {
    pinned: Fingerprint,
    algs: WebPkiSupportedAlgorithms,
}

impl fmt::Debug for PinnedServerVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedServerVerifier")
            .field("pinned", &self.pinned)
            .finish_non_exhaustive()
    }
}

impl ServerCertVerifier for PinnedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let fp = key_of(end_entity)?;
        if fp == self.pinned {
            Ok(ServerCertVerified::assertion())
        } else {
            tracing::warn!(expected = %self.pinned, got = %fp, "the head's key is not the pinned one");
            Err(Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        tls12_refused()
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

/// The head's rustls config: TLS 1.3, ALPN Link F, client certificates required.
pub fn server_config(
    identity: &Identity,
    authorizer: Authorizer,
) -> Result<rustls::ServerConfig, EndpointError> {
    let provider = provider();
    let verifier = Arc::new(AuthorizingClientVerifier {
        authorizer,
        algs: provider.signature_verification_algorithms,
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(EndpointError::Tls)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![identity.certificate()], identity.private_key())
        .map_err(EndpointError::Tls)?;
    config.alpn_protocols = vec![superfluid_proto::ALPN.to_vec()];
    Ok(config)
}

/// The node's rustls config: TLS 1.3, ALPN Link F, its own certificate, the head pinned.
pub fn client_config(
    identity: &Identity,
    head: Fingerprint,
) -> Result<rustls::ClientConfig, EndpointError> {
    let provider = provider();
    let verifier = Arc::new(PinnedServerVerifier {
        pinned: head,
        algs: provider.signature_verification_algorithms,
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(EndpointError::Tls)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(vec![identity.certificate()], identity.private_key())
        .map_err(EndpointError::Tls)?;
    config.alpn_protocols = vec![superfluid_proto::ALPN.to_vec()];
    Ok(config)
}
