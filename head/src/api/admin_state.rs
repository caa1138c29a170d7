//! [`AdminState`]: what the admin routes (`/admin/v1`) share.

use crate::fleet::Fleet;
use crate::keys::Keys;
use std::net::SocketAddr;

/// What the admin routes share.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// The fleet, with its membership.
    pub fleet: Fleet,
    /// The head's Link F addresses, written into every join token.
    pub link_addrs: Vec<SocketAddr>,
    /// The client APIs' keys.
    pub keys: Keys,
}
