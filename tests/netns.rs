//! Two network namespaces joined by a veth pair, for end-to-end tests that
//! need a real LAN hop (mDNS discovery, a node on "another machine").
//!
//! Needs root and `ip netns` (iproute2); [`NetnsPair::create`] returns
//! `Ok(None)` otherwise, so tests can print why they skip. Nothing here
//! touches the host's own interfaces: the veth ends are created directly in
//! the two namespaces, and deleting the namespaces removes them.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use anyhow::{bail, ensure, Context, Result};

/// The veth end inside namespace `a`.
pub const VETH_A: &str = "veth-a";
/// The veth end inside namespace `b`.
pub const VETH_B: &str = "veth-b";

/// Namespaces `a` and `b`, linked by `veth-a` (`addr_a`/24) and `veth-b`
/// (`addr_b`/24), with `lo` up in both. Deleted on drop: kill the processes
/// started in them first.
pub struct NetnsPair {
    pub a: String,
    pub b: String,
    pub addr_a: Ipv4Addr,
    pub addr_b: Ipv4Addr,
}

/// Runs `ip ARGS`, failing with its stderr.
fn ip<I, S>(args: I) -> Result<Output>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let out = Command::new("ip")
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running ip {args:?}"))?;
    ensure!(
        out.status.success(),
        "ip {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(out)
}

/// Whether this process runs with effective uid 0.
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Uid:"))?.to_owned();
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

/// A number in 1..=250 from `tag`, so each tag gets its own /24.
fn subnet_of(tag: &str) -> u8 {
    let h = tag.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    (h % 250) as u8 + 1
}

impl NetnsPair {
    /// Creates `sf-<tag>-<pid>-a` and `-b` (removing leftovers of the same
    /// name first) on 10.77.<n>.1 and .2, n derived from `tag`. `Ok(None)`
    /// when not root or `ip netns` is unavailable; the reason is printed.
    pub fn create(tag: &str) -> Result<Option<Self>> {
        if !is_root() {
            eprintln!("netns: not root; skipping the namespace test");
            return Ok(None);
        }
        if let Err(e) = ip(["netns", "list"]) {
            eprintln!("netns: `ip netns` is unavailable ({e:#}); skipping the namespace test");
            return Ok(None);
        }
        let n = subnet_of(tag);
        let base = format!("sf-{tag}-{}", std::process::id());
        let pair = Self {
            a: format!("{base}-a"),
            b: format!("{base}-b"),
            addr_a: Ipv4Addr::new(10, 77, n, 1),
            addr_b: Ipv4Addr::new(10, 77, n, 2),
        };
        // From here on, Drop removes whatever was made.
        pair.remove();
        pair.setup()?;
        Ok(Some(pair))
    }

    fn setup(&self) -> Result<()> {
        ip(["netns", "add", &self.a])?;
        ip(["netns", "add", &self.b])?;
        let (a, b) = (self.a.as_str(), self.b.as_str());
        ip([
            "link", "add", VETH_A, "netns", a, "type", "veth", "peer", "name", VETH_B, "netns", b,
        ])?;
        for (ns, dev, addr) in [(a, VETH_A, self.addr_a), (b, VETH_B, self.addr_b)] {
            let cidr = format!("{addr}/24");
            ip(["-n", ns, "addr", "add", &cidr, "dev", dev])?;
            ip(["-n", ns, "link", "set", "dev", "lo", "up"])?;
            ip(["-n", ns, "link", "set", "dev", dev, "multicast", "on", "up"])?;
            // mdns-sd picks the interface itself; the route helps other senders.
            ip(["-n", ns, "route", "add", "224.0.0.0/4", "dev", dev])?;
        }
        Ok(())
    }

    fn remove(&self) {
        for ns in [&self.a, &self.b] {
            let _ = ip(["netns", "del", ns.as_str()]);
        }
    }

    /// `ip netns exec <ns> <program>`; add arguments with `.args`.
    pub fn command(&self, ns: &str, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]).arg(program);
        cmd
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `target/<profile>/examples/mdns_probe`, next to this test binary's
/// `deps/` folder, or `$SUPERFLUID_MDNS_PROBE`. `cargo test` of the root
/// package does not build it: run `cargo build -p superfluid-link --examples`.
pub fn mdns_probe_path() -> PathBuf {
    if let Some(p) = std::env::var_os("SUPERFLUID_MDNS_PROBE") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    profile.join("examples").join("mdns_probe")
}

/// Kills and reaps a child on drop.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `mdns_probe browse` in `ns`: `(exit code, stdout)`.
fn browse(pair: &NetnsPair, ns: &str, fleet: &str, ms: u32) -> Result<(Option<i32>, String)> {
    let out = pair
        .command(ns, mdns_probe_path())
        .args(["browse", "--fleet", fleet, "--timeout-ms", &ms.to_string()])
        .stdin(Stdio::null())
        .output()
        .context("running mdns_probe browse")?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    eprintln!("[netns {ns}] browse {fleet}: {text}");
    Ok((out.status.code(), text))
}

/// The mDNS proof: `mdns_probe advertise` in `a`, `browse` from `b` finds
/// `addr_a`, the fleet id and the fingerprint; another fleet id is not found.
pub fn check_mdns_across(pair: &NetnsPair) -> Result<()> {
    let probe = mdns_probe_path();
    ensure!(
        probe.exists(),
        "{} is missing; run `cargo build -p superfluid-link --examples` first",
        probe.display()
    );
    let fleet = format!("fleet-{}", std::process::id());
    let fp = "ab".repeat(32);
    let mut child = pair
        .command(&pair.a, &probe)
        .args([
            "advertise",
            "--fleet",
            &fleet,
            "--fp",
            &fp,
            "--port",
            "7413",
        ])
        .args(["--secs", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting mdns_probe advertise")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let _head = Reap(child);
    let mut ready = String::new();
    BufReader::new(stdout).read_line(&mut ready)?;
    eprintln!("[netns {}] {}", pair.a, ready.trim());
    ensure!(
        ready.starts_with("ADVERTISING"),
        "advertise failed: {ready:?}"
    );

    let (code, text) = browse(pair, &pair.b, &fleet, 8000)?;
    if code != Some(0) {
        bail!("mDNS across namespaces failed (exit {code:?}): {text}");
    }
    for want in [
        format!("fleet={fleet} "),
        format!("fp={fp} "),
        format!("addrs={}:7413", pair.addr_a),
    ] {
        ensure!(text.contains(&want), "browse output lacks {want:?}: {text}");
    }
    ensure!(
        !text.contains("127.0.0.1"),
        "loopback leaked across: {text}"
    );

    let (code, text) = browse(pair, &pair.b, "no-such-fleet", 1500)?;
    ensure!(
        code == Some(2) && text.contains("no head of fleet no-such-fleet"),
        "a foreign fleet id was answered (exit {code:?}): {text}"
    );
    Ok(())
}
