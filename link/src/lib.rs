//! Link F transport: QUIC (quinn + rustls), ed25519 identities and pinning.
#![forbid(unsafe_code)]
