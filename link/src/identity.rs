//! Ed25519 identities: key pair, self-signed certificate and fingerprint.
//!
//! A peer is known by its [`Fingerprint`]: the sha256 of its raw 32-byte
//! ed25519 public key. Certificates are only a wrapper TLS needs; nothing
//! in them but the key is trusted.

use crate::IdentityError;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};
use std::{
    fmt,
    io::Write,
    path::{Path, PathBuf},
    str::FromStr,
    sync::Arc,
};

/// The DER prefix of an ed25519 SubjectPublicKeyInfo (RFC 8410), before the 32 key bytes.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// The sha256 of a raw ed25519 public key. Prints as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of a raw 32-byte ed25519 public key.
    pub fn of_public_key(raw: &[u8]) -> Self {
        Self(Sha256::digest(raw).into())
    }

    /// The fingerprint of the ed25519 key in a DER certificate, or `None`
    /// if the certificate does not parse or holds another kind of key.
    pub fn of_certificate(cert: &CertificateDer<'_>) -> Option<Self> {
        let parsed = webpki::EndEntityCert::try_from(cert).ok()?;
        let spki = parsed.subject_public_key_info();
        let key = spki.as_ref().strip_prefix(&ED25519_SPKI_PREFIX[..])?;
        (key.len() == 32).then(|| Self::of_public_key(key))
    }

    /// The 32 digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

impl FromStr for Fingerprint {
    type Err = IdentityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || IdentityError::BadFingerprint {
            input: s.to_owned(),
        };
        let bytes = hex::decode(s.trim()).map_err(|_| bad())?;
        let arr: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
        Ok(Self(arr))
    }
}

/// An ed25519 key pair with its self-signed certificate. Cheap to clone.
#[derive(Clone)]
pub struct Identity {
    signer: Arc<Ed25519KeyPair>,
    public: [u8; 32],
    pkcs8: Vec<u8>,
    pem: String,
    cert: CertificateDer<'static>,
    fingerprint: Fingerprint,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// A new random identity.
    pub fn generate() -> Result<Self, IdentityError> {
        let key =
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(IdentityError::Generate)?;
        Self::from_key_pair(&key)
    }

    /// An identity from a PKCS#8 ed25519 key, PEM or DER.
    pub fn from_pkcs8(bytes: &[u8]) -> Result<Self, IdentityError> {
        Self::parse(bytes, Path::new("<memory>"))
    }

    /// Loads the identity key from `path` (PEM or DER PKCS#8).
    pub fn load(path: &Path) -> Result<Self, IdentityError> {
        let bytes = std::fs::read(path).map_err(|source| IdentityError::KeyFile {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&bytes, path)
    }

    /// Saves the key as PKCS#8 PEM, readable only by this user (mode 0600).
    pub fn save(&self, path: &Path) -> Result<(), IdentityError> {
        let io = |source| IdentityError::KeyFile {
            path: path.to_owned(),
            source,
        };
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut file = opts.open(path).map_err(io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(io)?;
        }
        file.write_all(self.pkcs8_pem().as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)
    }

    /// Loads the identity at `path`, or generates and saves one if the file does not exist.
    pub fn load_or_create(path: &Path) -> Result<Self, IdentityError> {
        match std::fs::metadata(path) {
            Ok(_) => Self::load(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|source| IdentityError::KeyFile {
                        path: dir.to_owned(),
                        source,
                    })?;
                }
                let id = Self::generate()?;
                id.save(path)?;
                Ok(id)
            }
            Err(source) => Err(IdentityError::KeyFile {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// This identity's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The raw 32-byte ed25519 public key.
    pub fn public_key(&self) -> &[u8; 32] {
        &self.public
    }

    /// An ed25519 signature (64 bytes) of `message` by this key.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.signer.sign(message).as_ref().to_vec()
    }

    /// Whether `signature` is this identity's signature of `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        verify_signature(&self.public, message, signature)
    }

    /// The self-signed certificate presented in TLS.
    pub fn certificate(&self) -> CertificateDer<'static> {
        self.cert.clone()
    }

    /// The private key, for rustls.
    pub fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.pkcs8.clone()))
    }

    /// The private key as PKCS#8 PEM.
    pub fn pkcs8_pem(&self) -> &str {
        &self.pem
    }

    fn parse(bytes: &[u8], path: &Path) -> Result<Self, IdentityError> {
        let bad = |reason: String| IdentityError::BadKey {
            path: PathBuf::from(path),
            reason,
        };
        let key = if bytes.starts_with(b"-----") {
            let pem = std::str::from_utf8(bytes).map_err(|e| bad(e.to_string()))?;
            rcgen::KeyPair::from_pem(pem).map_err(|e| bad(e.to_string()))?
        } else {
            let der = PrivatePkcs8KeyDer::from(bytes);
            rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_ED25519)
                .map_err(|e| bad(e.to_string()))?
        };
        if key.algorithm() != &rcgen::PKCS_ED25519 {
            return Err(bad("the key is not ed25519".into()));
        }
        Self::from_key_pair(&key)
    }

    fn from_key_pair(key: &rcgen::KeyPair) -> Result<Self, IdentityError> {
        let mut params = rcgen::CertificateParams::new(vec!["superfluid".to_owned()])
            .map_err(IdentityError::Generate)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "superfluid");
        let cert = params.self_signed(key).map_err(IdentityError::Generate)?;
        let pkcs8 = key.serialize_der();
        let signer = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&pkcs8).map_err(|e| {
            IdentityError::BadKey {
                path: PathBuf::from("<memory>"),
                reason: e.to_string(),
            }
        })?;
        let public: [u8; 32] =
            signer
                .public_key()
                .as_ref()
                .try_into()
                .map_err(|_| IdentityError::BadKey {
                    path: PathBuf::from("<memory>"),
                    reason: "the public key is not 32 bytes".into(),
                })?;
        Ok(Self {
            signer: Arc::new(signer),
            public,
            pkcs8,
            pem: key.serialize_pem(),
            cert: cert.der().clone(),
            fingerprint: Fingerprint::of_public_key(key.public_key_raw()),
        })
    }
}

/// Whether `signature` is a valid ed25519 signature of `message` by the raw
/// 32-byte `public_key`. Any malformed input is simply `false`.
pub fn verify_signature(public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    UnparsedPublicKey::new(&ED25519, public_key)
        .verify(message, signature)
        .is_ok()
}

#[cfg(test)]
mod tests;
