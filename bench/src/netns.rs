//! Two network namespaces joined by a veth pair, made by the failover bench
//! to cut a node's link: its veth set down drops its packets and closes
//! nothing, as a pulled cable does. Nothing touches the host's own
//! interfaces: the veth ends are created in the namespaces, and deleting
//! the namespaces (on drop) removes them. Needs root and `ip netns`.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use anyhow::{ensure, Context, Result};

use crate::fleet::Place;

/// The veth end in namespace `b`, the one the bench sets down.
const VETH_B: &str = "veth-b";

/// Namespaces `a` (`addr_a`) and `b`, linked by a veth pair; deleted on drop.
pub struct NetnsPair {
    pub a: String,
    pub b: String,
    pub addr_a: Ipv4Addr,
}

/// Runs `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running ip {args:?}"))?;
    ensure!(
        out.status.success(),
        "ip {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Why namespaces cannot be made here, or `None` when they can.
pub fn unavailable() -> Option<String> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Uid:"))?.to_owned();
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false);
    if !root {
        return Some("not root".into());
    }
    ip(&["netns", "list"])
        .err()
        .map(|e| format!("`ip netns` is unavailable: {e:#}"))
}

impl NetnsPair {
    /// Creates `sfb-<pid>-a` and `-b` on 10.78.<n>.1 and .2.
    pub fn create() -> Result<NetnsPair> {
        let pid = std::process::id();
        let base = format!("sfb-{pid}");
        let n = (pid % 250) as u8 + 1;
        let pair = NetnsPair {
            a: format!("{base}-a"),
            b: format!("{base}-b"),
            addr_a: Ipv4Addr::new(10, 78, n, 1),
        };
        pair.remove();
        let (a, b) = (pair.a.as_str(), pair.b.as_str());
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        ip(&[
            "link", "add", "veth-a", "netns", a, "type", "veth", "peer", "name", VETH_B, "netns", b,
        ])?;
        let addr_b = Ipv4Addr::new(10, 78, n, 2);
        for (ns, dev, addr) in [(a, "veth-a", pair.addr_a), (b, VETH_B, addr_b)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", "dev", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", "dev", dev, "up"])?;
        }
        Ok(pair)
    }

    /// Sets `b`'s veth down (`false`) or up again (`true`).
    pub fn link_b(&self, up: bool) -> Result<()> {
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.b, "link", "set", "dev", VETH_B, state])
    }

    pub fn place_a(&self) -> Place {
        Place::Netns(self.a.clone())
    }

    pub fn place_b(&self) -> Place {
        Place::Netns(self.b.clone())
    }

    fn remove(&self) {
        for ns in [&self.a, &self.b] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        self.remove();
    }
}
