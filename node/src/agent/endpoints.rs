//! The node's QUIC endpoints towards the head: one per address family the
//! head's addresses use.

use super::{AgentConfig, AgentError};
use std::{net::SocketAddr, time::Duration};
use superfluid_link::{client_endpoint, quinn};

/// The longest a closing node waits for the head to be told.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// One client endpoint per address family the head addresses use.
pub(super) struct Endpoints {
    v4: Option<quinn::Endpoint>,
    v6: Option<quinn::Endpoint>,
}

impl Endpoints {
    pub(super) fn new(config: &AgentConfig) -> Result<Endpoints, AgentError> {
        if config.head_addrs.is_empty() {
            return Err(AgentError::NoHeadAddress);
        }
        let make = |want_v6: bool| -> Result<Option<quinn::Endpoint>, AgentError> {
            match config.head_addrs.iter().find(|a| a.is_ipv6() == want_v6) {
                None => Ok(None),
                Some(addr) => client_endpoint(*addr, &config.identity, config.head_fingerprint)
                    .map(Some)
                    .map_err(AgentError::Setup),
            }
        };
        Ok(Endpoints {
            v4: make(false)?,
            v6: make(true)?,
        })
    }

    /// Closes every connection with `reason` and waits (for
    /// [`CLOSE_WAIT`] at most) until the head has been told.
    pub(super) async fn close(&self, reason: &[u8]) {
        let open = || [&self.v4, &self.v6].into_iter().flatten();
        for endpoint in open() {
            endpoint.close(superfluid_link::control::CLOSE_NORMAL, reason);
        }
        let told = async {
            for endpoint in open() {
                endpoint.wait_idle().await;
            }
        };
        let _ = tokio::time::timeout(CLOSE_WAIT, told).await;
    }

    pub(super) fn for_addr(&self, addr: &SocketAddr) -> Option<&quinn::Endpoint> {
        if addr.is_ipv6() {
            self.v6.as_ref()
        } else {
            self.v4.as_ref()
        }
    }
}
