//! Finding the head on the LAN by mDNS (`_superfluid._udp.local.`).
//!
//! The head calls [`advertise`] and keeps the [`Advertisement`] alive; a node
//! calls [`find_head`] with the fleet id from its token and gets the head's
//! Link F addresses. Heads of other fleets are ignored. mdns-sd runs its own
//! thread; browsing is bridged to tokio with its channel's `recv_async`, so no
//! runtime thread ever blocks. Addresses found this way are only hints: the
//! node still pins the head's fingerprint when it connects.

use crate::Fingerprint;
use mdns_sd::{IfKind, ResolvedService, ScopedIp, ServiceDaemon, ServiceEvent, ServiceInfo};
use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr, SocketAddrV6},
    time::Duration,
};
use superfluid_proto::PROTOCOL_VERSION;
use tokio::time::{timeout_at, Instant};

/// The mDNS service type a head announces.
pub const SERVICE_TYPE: &str = "_superfluid._udp.local.";

/// How long [`browse_head`] keeps listening after the first match, to collect
/// addresses announced on other interfaces.
const SETTLE: Duration = Duration::from_millis(300);

/// The longest fleet id accepted (it goes into a 255-byte TXT string).
const FLEET_ID_MAX: usize = 128;

/// Why advertising or finding a head over mDNS failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The mDNS daemon could not be started or refused a command.
    #[error("mDNS is not usable here: {0}; check that UDP port 5353 can be bound and multicast is allowed, or run the head with --no-mdns and rely on the token's addresses")]
    Daemon(#[source] mdns_sd::Error),
    /// The service record could not be built or registered.
    #[error("could not announce the head over mDNS: {0}; run the head with --no-mdns and rely on the token's addresses")]
    Register(#[source] mdns_sd::Error),
    /// The fleet id cannot be put into an mDNS record.
    #[error("fleet id {fleet_id:?} cannot be announced over mDNS: {reason}; use the fleet id printed by the head")]
    BadFleetId {
        /// What was given.
        fleet_id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `advertise` was given an explicit, empty address list.
    #[error("no addresses to announce over mDNS; pass None to announce every interface, or at least one address")]
    NoAddresses,
    /// The mDNS daemon stopped while we were browsing.
    #[error("the mDNS daemon stopped while browsing; retry, or rely on the token's addresses")]
    DaemonStopped,
    /// No head of this fleet answered before the timeout.
    #[error("no head of fleet {fleet_id} answered on mDNS within {}s; check that the head runs without --no-mdns and that multicast reaches this machine, or rely on the token's addresses", waited.as_secs_f32())]
    NotFound {
        /// The fleet searched for.
        fleet_id: String,
        /// How long we listened.
        waited: Duration,
    },
}

/// A running mDNS announcement of this head. Dropping it (or [`stop`]) sends
/// goodbye packets and stops the mDNS daemon thread.
///
/// [`stop`]: Advertisement::stop
pub struct Advertisement {
    daemon: ServiceDaemon,
    fullname: String,
    stopped: bool,
}

impl Advertisement {
    /// The full mDNS instance name, e.g. `superfluid-f1-host._superfluid._udp.local.`.
    pub fn fullname(&self) -> &str {
        &self.fullname
    }

    /// Withdraws the announcement and stops the daemon. Does not block.
    pub fn stop(mut self) -> Result<(), DiscoveryError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), DiscoveryError> {
        if std::mem::replace(&mut self.stopped, true) {
            return Ok(());
        }
        // Commands run in order on the daemon thread: goodbyes go out first.
        let unregistered = self.daemon.unregister(&self.fullname).map(drop);
        let shut = self.daemon.shutdown().map(drop);
        unregistered.and(shut).map_err(DiscoveryError::Daemon)
    }
}

impl Drop for Advertisement {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::debug!("stopping mDNS advertisement: {e}");
        }
    }
}

impl std::fmt::Debug for Advertisement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Advertisement")
            .field("fullname", &self.fullname)
            .finish()
    }
}

/// What a head announces, as a node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadRecord {
    /// The full mDNS instance name.
    pub instance: String,
    /// TXT `fleet`.
    pub fleet_id: String,
    /// TXT `fp`, if it parses.
    pub fingerprint: Option<Fingerprint>,
    /// TXT `v`, if it parses.
    pub version: Option<u32>,
    /// Usable Link F addresses, best first (see [`usable_addrs`]).
    pub addrs: Vec<SocketAddr>,
}

/// Announces this head: instance `superfluid-<fleet>-<host>`, TXT `fleet`,
/// `fp`, `port`, `v`. With `addrs: None` the addresses of every interface
/// that is up (kept current as they change); with `Some(list)` only those,
/// and mDNS traffic stays on their interfaces.
pub fn advertise(
    fleet_id: &str,
    fingerprint: &Fingerprint,
    link_port: u16,
    addrs: Option<Vec<IpAddr>>,
) -> Result<Advertisement, DiscoveryError> {
    check_fleet_id(fleet_id)?;
    let instance = instance_name(fleet_id, &host_name());
    // One A/AAAA name per head key, so two heads on one host never merge.
    let fp = fingerprint.to_string();
    let host = format!("sf-{}.local.", fp.get(..12).unwrap_or(&fp));
    let (port, version) = (link_port.to_string(), PROTOCOL_VERSION.to_string());
    let txt = [
        ("fleet", fleet_id),
        ("fp", &fp),
        ("port", &port),
        ("v", &version),
    ];
    let new_info = |ips: &[IpAddr]| {
        ServiceInfo::new(SERVICE_TYPE, &instance, &host, ips, link_port, &txt[..])
            .map_err(DiscoveryError::Register)
    };
    let info = match &addrs {
        // Every interface, loopback included (for a node on this host); each
        // interface answers only with its own subnet's addresses, and nodes
        // drop loopback when anything else is announced.
        None => new_info(&[])?.enable_addr_auto(),
        Some(list) if list.is_empty() => return Err(DiscoveryError::NoAddresses),
        Some(list) => {
            let mut info = new_info(list)?;
            info.set_interfaces(list.iter().copied().map(IfKind::Addr).collect());
            info
        }
    };
    let fullname = info.get_fullname().to_owned();
    let daemon = ServiceDaemon::new().map_err(DiscoveryError::Daemon)?;
    let limited = addrs.map_or(Ok(()), |list| limit_interfaces(&daemon, &list));
    let registered = limited.and_then(|()| daemon.register(info).map_err(DiscoveryError::Register));
    if let Err(e) = registered {
        let _ = daemon.shutdown();
        return Err(e);
    }
    tracing::info!(%fullname, "announcing the head over mDNS");
    Ok(Advertisement {
        daemon,
        fullname,
        stopped: false,
    })
}

/// Finds the head of `fleet_id` on any interface and returns its Link F
/// addresses, best first; [`DiscoveryError::NotFound`] after `timeout`.
pub async fn find_head(
    fleet_id: &str,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, DiscoveryError> {
    Ok(browse_head(fleet_id, timeout, None).await?.addrs)
}

/// Like [`find_head`], but returns the whole record, and with
/// `Some(local addrs)` sends and listens only on the interfaces holding
/// those local addresses (e.g. `127.0.0.1` to stay on loopback).
pub async fn browse_head(
    fleet_id: &str,
    timeout: Duration,
    interfaces: Option<Vec<IpAddr>>,
) -> Result<HeadRecord, DiscoveryError> {
    check_fleet_id(fleet_id)?;
    let deadline = Instant::now() + timeout;
    let daemon = StopOnDrop(ServiceDaemon::new().map_err(DiscoveryError::Daemon)?);
    match browse_with(&daemon.0, fleet_id, deadline, interfaces.as_deref()).await {
        Ok(Some(record)) => Ok(record),
        Ok(None) => Err(DiscoveryError::NotFound {
            fleet_id: fleet_id.to_owned(),
            waited: timeout,
        }),
        Err(e) => Err(e),
    }
}

/// Stops the daemon thread even when the browsing future is dropped.
struct StopOnDrop(ServiceDaemon);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = self.0.shutdown();
    }
}

async fn browse_with(
    daemon: &ServiceDaemon,
    fleet_id: &str,
    deadline: Instant,
    interfaces: Option<&[IpAddr]>,
) -> Result<Option<HeadRecord>, DiscoveryError> {
    if let Some(list) = interfaces {
        limit_interfaces(daemon, list)?;
    }
    let events = daemon
        .browse(SERVICE_TYPE)
        .map_err(DiscoveryError::Daemon)?;
    let mut found: Option<HeadRecord> = None;
    let mut until = deadline;
    loop {
        let event = match timeout_at(until, events.recv_async()).await {
            Err(_elapsed) => return Ok(found),
            Ok(Err(_closed)) if found.is_some() => return Ok(found),
            Ok(Err(_closed)) => return Err(DiscoveryError::DaemonStopped),
            Ok(Ok(event)) => event,
        };
        let ServiceEvent::ServiceResolved(service) = event else {
            continue;
        };
        let Some(record) = head_record(&service, fleet_id) else {
            continue;
        };
        match &mut found {
            Some(first) if first.instance == record.instance => {
                let merged: BTreeSet<_> =
                    first.addrs.iter().chain(&record.addrs).copied().collect();
                first.addrs = usable_addrs(merged);
            }
            Some(_) => {}
            None => {
                tracing::debug!(instance = %record.instance, addrs = ?record.addrs, "head found over mDNS");
                until = deadline.min(Instant::now() + SETTLE);
                found = Some(record);
            }
        }
    }
}

/// The head record in `service`, if it is of `fleet_id` and has an address.
fn head_record(service: &ResolvedService, fleet_id: &str) -> Option<HeadRecord> {
    let txt = |key| service.get_property_val_str(key);
    if txt("fleet") != Some(fleet_id) {
        return None;
    }
    let port = txt("port").and_then(|p| p.parse::<u16>().ok());
    let port = port.filter(|p| *p != 0).unwrap_or(service.port);
    let version = txt("v").and_then(|v| v.parse().ok());
    if version != Some(PROTOCOL_VERSION) {
        tracing::warn!(instance = %service.fullname, ?version, "head announces another protocol version; connecting anyway so the handshake can say which");
    }
    let addrs = usable_addrs(
        service
            .addresses
            .iter()
            .filter_map(|ip| socket_addr(ip, port)),
    );
    if addrs.is_empty() {
        return None;
    }
    Some(HeadRecord {
        instance: service.fullname.clone(),
        fleet_id: fleet_id.to_owned(),
        fingerprint: txt("fp").and_then(|f| f.parse().ok()),
        version,
        addrs,
    })
}

fn socket_addr(ip: &ScopedIp, port: u16) -> Option<SocketAddr> {
    match ip {
        ScopedIp::V6(v6) if is_v6_link_local(v6.addr()) => {
            let scope = v6.scope_id().index;
            (scope != 0).then(|| SocketAddrV6::new(*v6.addr(), port, 0, scope).into())
        }
        other => Some(SocketAddr::new(other.to_ip_addr(), port)),
    }
}

fn is_v6_link_local(ip: &std::net::Ipv6Addr) -> bool {
    ip.segments()[0] & 0xffc0 == 0xfe80
}

/// Keeps addresses a node can connect to, best first: IPv4, then global IPv6,
/// then link-local IPv6. Unspecified, multicast and broadcast addresses and
/// port 0 are dropped; loopback is kept only when nothing else is left (the
/// head is then on this host).
pub fn usable_addrs(addrs: impl IntoIterator<Item = SocketAddr>) -> Vec<SocketAddr> {
    let bad = |ip: IpAddr| {
        ip.is_unspecified()
            || ip.is_multicast()
            || matches!(ip, IpAddr::V4(v4) if v4.is_broadcast())
    };
    let set: BTreeSet<SocketAddr> = addrs
        .into_iter()
        .filter(|a| a.port() != 0 && !bad(a.ip()))
        .collect();
    let (local, remote): (Vec<_>, Vec<_>) = set.into_iter().partition(|a| a.ip().is_loopback());
    let mut out = if remote.is_empty() { local } else { remote };
    out.sort_by_key(|a| match a {
        SocketAddr::V4(_) => 0,
        SocketAddr::V6(v6) if !is_v6_link_local(v6.ip()) => 1,
        SocketAddr::V6(_) => 2,
    });
    out
}

/// Sends and listens only on the interfaces holding `addrs`.
fn limit_interfaces(daemon: &ServiceDaemon, addrs: &[IpAddr]) -> Result<(), DiscoveryError> {
    daemon
        .disable_interface(IfKind::All)
        .and_then(|()| {
            daemon.enable_interface(addrs.iter().copied().map(IfKind::Addr).collect::<Vec<_>>())
        })
        .map_err(DiscoveryError::Daemon)
}

fn check_fleet_id(fleet_id: &str) -> Result<(), DiscoveryError> {
    let reason = if fleet_id.is_empty() {
        "it is empty"
    } else if fleet_id.len() > FLEET_ID_MAX {
        "it is longer than 128 bytes"
    } else if fleet_id.chars().any(char::is_control) {
        "it contains control characters"
    } else {
        return Ok(());
    };
    Err(DiscoveryError::BadFleetId {
        fleet_id: fleet_id.to_owned(),
        reason,
    })
}

/// `superfluid-<fleet>-<host>`, cut to the 63-byte DNS label limit.
fn instance_name(fleet_id: &str, host: &str) -> String {
    let mut name = format!("superfluid-{fleet_id}-{host}");
    let mut cut = name.len().min(63);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    name.truncate(cut);
    name
}

/// This machine's host name as a DNS label, or `host`.
fn host_name() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let label: String = raw
        .trim()
        .split('.')
        .next()
        .unwrap_or_default()
        .chars()
        .map(|c| c.is_ascii_alphanumeric().then(|| c.to_ascii_lowercase()))
        .map(|c| c.unwrap_or('-'))
        .collect();
    if label.is_empty() {
        "host".to_owned()
    } else {
        label
    }
}

#[cfg(test)]
mod tests;
