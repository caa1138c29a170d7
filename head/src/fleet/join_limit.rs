//! A bound on join attempts per source address on Link F.
//!
//! A hello that presents a join token costs the head a signature check and
//! a look at its nonces; without a bound, one host could try tokens as fast
//! as QUIC handshakes go. Each address may try [`BURST`] times in a row and
//! then once every [`REFILL`]; further hellos with a token are refused,
//! unread, with a reason that says when to try again. Enrolled nodes
//! reconnecting (no token) are not counted.
//!
//! IPv6 addresses count per /64, the block one host is usually given, so a
//! host cannot dodge the bound by changing its interface id. The table is
//! capped at [`MAX_TRACKED`] addresses: when it is full of addresses still
//! within their window, new addresses are refused until some expire.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use superfluid_link::sync::lock;

/// Join attempts one address may make in a row.
pub const BURST: u32 = 10;

/// How often an address regains one attempt.
pub const REFILL: Duration = Duration::from_secs(6);

/// Addresses tracked at once; bounds the table's memory.
pub const MAX_TRACKED: usize = 4096;

/// Why a join attempt was refused before its token was read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinLimited {
    /// This address has used its attempts.
    #[error("too many join attempts from {addr}: at most {BURST} in a row, then one every {} s; try again in {retry_after_secs} s with a valid token", REFILL.as_secs())]
    TooMany {
        /// The address (for IPv6, its /64) the attempts came from.
        addr: IpAddr,
        /// Seconds until one more attempt is allowed.
        retry_after_secs: u64,
    },
    /// Attempts are arriving from more addresses than the head tracks.
    #[error("the head is receiving join attempts from too many addresses at once; try again in a minute")]
    Busy,
}

/// Per-address join attempts. Cheap to clone; clones share one table.
#[derive(Debug, Clone, Default)]
pub struct JoinLimit {
    /// Per address, when its attempts are all regained ("theoretical
    /// arrival time"): an address with no entry, or one in the past, has
    /// all [`BURST`] attempts.
    regained_at: Arc<Mutex<HashMap<IpAddr, Instant>>>,
}

impl JoinLimit {
    /// Counts one join attempt from `addr` at `now`, or says why it is refused.
    pub fn attempt(&self, addr: IpAddr, now: Instant) -> Result<(), JoinLimited> {
        let addr = bucket(addr);
        let mut table = lock(&self.regained_at);
        if table.len() >= MAX_TRACKED && !table.contains_key(&addr) {
            table.retain(|_, regained| *regained > now);
            if table.len() >= MAX_TRACKED {
                return Err(JoinLimited::Busy);
            }
        }
        let regained = table
            .get(&addr)
            .copied()
            .filter(|t| *t > now)
            .unwrap_or(now);
        // The attempts left are what `regained - now` has not yet used up.
        let window = REFILL * (BURST - 1);
        let owed = regained - now;
        if owed > window {
            let wait = owed - window;
            return Err(JoinLimited::TooMany {
                addr,
                retry_after_secs: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            });
        }
        table.insert(addr, regained + REFILL);
        Ok(())
    }
}

/// The address attempts are counted under: IPv4 as is, IPv6 by its /64.
fn bucket(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::from(segments)
            }
        },
    }
}

#[cfg(test)]
mod tests;
