//! Link F transport: QUIC (quinn + rustls), ed25519 identities and pinning.
//!
//! - [`identity`]: an ed25519 key pair, its self-signed certificate and its
//!   [`Fingerprint`] (sha256 of the raw public key).
//! - [`tls`]: rustls verifiers. The head asks an [`Authorizer`] about each
//!   client key; the node pins the head's fingerprint. No CA, no host names.
//! - [`endpoint`]: quinn endpoints for the head ([`server_endpoint`]) and the
//!   node ([`client_endpoint`], [`connect`]), and [`peer_fingerprint`].
//! - [`control`]: heartbeat interval, close/reset codes, handshake wording.
//! - [`token`]: join tokens, signed by the fleet key ([`token::mint`],
//!   [`token::parse`], [`token::verify`]).
//! - [`digest`]: the sha256 of a file, as model hashes are compared.
//! - [`hash_cache`]: that sha256 computed once and kept beside the file.
//! - [`private_file`]: atomic writes of files only this user may read.
//! - [`stream`]: one frame at a time on quinn streams ([`write_frame`],
//!   [`read_frame`]).
//! - [`sync`]: [`sync::lock`], the one poison-tolerant mutex lock.
//! - [`transfer`]: model files over TLS on TCP, on the head's Link F port.
#![forbid(unsafe_code)]

pub mod control;
pub mod digest;
pub mod discovery;
pub mod endpoint;
pub mod error;
pub mod hash_cache;
pub mod identity;
pub mod private_file;
pub mod stream;
pub mod sync;
pub mod tls;
pub mod token;
pub mod transfer;

pub use discovery::{advertise, find_head, Advertisement, DiscoveryError};
pub use endpoint::{
    client_endpoint, connect, peer_fingerprint, server_endpoint, transport_config, SERVER_NAME,
};
pub use error::{DialError, EndpointError, FrameIoError, IdentityError, PeerIdentityError};
pub use identity::{Fingerprint, Identity};
pub use stream::{read_frame, read_frame_body, write_frame};
pub use tls::{allow_any, allow_only, Authorizer};
pub use token::TokenError;

/// Re-exported so users of this crate name the same quinn types.
pub use quinn;
