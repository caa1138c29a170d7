use super::*;
use crate::Identity;
use std::{
    net::{Ipv4Addr, Ipv6Addr},
    path::PathBuf,
    process::{Command, Output, Stdio},
};

/// Set in a test re-run inside a private network namespace.
const CHILD_ENV: &str = "SUPERFLUID_DISCOVERY_NETNS_CHILD";

fn v4(a: [u8; 4], port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), port)
}

#[test]
fn usable_addrs_drop_junk_and_loopback_when_something_else_is_there() {
    let link_local = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 9, 0, 3));
    let global = SocketAddr::new(IpAddr::V6("fd00::7".parse().unwrap()), 9);
    let got = usable_addrs([
        link_local,
        v4([127, 0, 0, 1], 9),
        global,
        v4([0, 0, 0, 0], 9),
        v4([224, 0, 0, 251], 9),
        v4([255, 255, 255, 255], 9),
        v4([10, 77, 1, 1], 0),
        v4([10, 77, 1, 1], 9),
        v4([10, 77, 1, 1], 9),
        SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 9),
    ]);
    assert_eq!(got, vec![v4([10, 77, 1, 1], 9), global, link_local]);
    // A head on this host with only loopback up is still usable.
    let lo = usable_addrs([v4([127, 0, 0, 1], 9), v4([0, 0, 0, 0], 9)]);
    assert_eq!(lo, vec![v4([127, 0, 0, 1], 9)]);
}

#[test]
fn fleet_ids_and_instance_names_fit_dns() {
    assert!(check_fleet_id("f-1234abcd").is_ok());
    for bad in ["", "a\nb", &"x".repeat(129)] {
        let e = check_fleet_id(bad).unwrap_err();
        assert!(e
            .to_string()
            .contains("use the fleet id printed by the head"));
    }
    assert_eq!(instance_name("f1", "box"), "superfluid-f1-box");
    let long = instance_name(&"é".repeat(60), "box");
    assert!(long.len() <= 63 && long.starts_with("superfluid-é"));
    let host = host_name();
    assert!(!host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
}

#[test]
fn not_found_says_what_to_do() {
    let e = DiscoveryError::NotFound {
        fleet_id: "f9".into(),
        waited: Duration::from_secs(3),
    };
    assert_eq!(
        e.to_string(),
        "no head of fleet f9 answered on mDNS within 3s; check that the head runs without \
         --no-mdns and that multicast reaches this machine, or rely on the token's addresses"
    );
    let id = Identity::generate().unwrap();
    let empty = advertise("f9", &id.fingerprint(), 1, Some(Vec::new())).unwrap_err();
    assert!(matches!(empty, DiscoveryError::NoAddresses), "{empty}");
}

/// Whether this process may create network namespaces (root and `ip netns`).
fn can_use_netns() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Uid:"))?.to_owned();
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false);
    root && ip(&["netns", "list"]).is_ok()
}

fn ip(args: &[&str]) -> Result<Output, String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A network namespace, deleted (with its interfaces) on drop.
struct Netns(String);

impl Netns {
    fn create(tag: &str) -> Self {
        let name = format!("sf-disc-{tag}-{}", std::process::id());
        let _ = ip(&["netns", "del", &name]);
        ip(&["netns", "add", &name]).unwrap();
        let ns = Self(name);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.0.as_str()];
        all.extend_from_slice(args);
        ip(&all).unwrap();
    }

    fn exec(&self, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.0]).arg(program);
        cmd
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.0]);
    }
}

/// Advertise and find in one process, on loopback only. As root this runs in
/// a fresh namespace (nothing leaves it); otherwise on this host's loopback.
#[test]
fn advertise_then_find_on_loopback() {
    if std::env::var_os(CHILD_ENV).is_none() && can_use_netns() {
        let ns = Netns::create("lo");
        let exe = std::env::current_exe().unwrap();
        let out = ns
            .exec(&exe)
            .args([
                "--exact",
                "discovery::tests::advertise_then_find_on_loopback",
            ])
            .args(["--nocapture", "--test-threads", "1"])
            .env(CHILD_ENV, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        println!("{text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"));
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let lo = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
        let id = Identity::generate().unwrap();
        let fleet = format!("fleet-lo-{}", std::process::id());
        let ad = advertise(&fleet, &id.fingerprint(), 7411, Some(lo.clone())).unwrap();
        assert!(ad.fullname().starts_with("superfluid-fleet-lo-"), "{ad:?}");

        let head = browse_head(&fleet, Duration::from_secs(8), Some(lo.clone()))
            .await
            .unwrap();
        assert_eq!(head.addrs, vec![v4([127, 0, 0, 1], 7411)]);
        assert_eq!(head.fingerprint, Some(id.fingerprint()));
        assert_eq!(head.version, Some(superfluid_proto::PROTOCOL_VERSION));
        assert_eq!(head.instance, ad.fullname());

        let other = browse_head(
            "another-fleet",
            Duration::from_millis(1500),
            Some(lo.clone()),
        )
        .await
        .unwrap_err();
        assert!(matches!(other, DiscoveryError::NotFound { .. }), "{other}");
        // A browse dropped mid-way must not leave its daemon thread behind.
        let cancelled = tokio::time::timeout(
            Duration::from_millis(200),
            browse_head("another-fleet", Duration::from_secs(30), Some(lo)),
        );
        assert!(cancelled.await.is_err());
        ad.stop().unwrap();
        println!("found {:?} over mDNS on loopback", head.addrs);
        for _ in 0..50 {
            if mdns_threads() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{} mDNS daemon threads left running", mdns_threads());
    });
}

/// Threads of this process named like mdns-sd's daemon thread.
fn mdns_threads() -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "mDNS_daemon")
        .count()
}

/// `target/<profile>/examples/mdns_probe`; `cargo test` builds examples.
fn probe_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile.join("examples").join("mdns_probe")
}

/// Advertise in namespace A, browse from namespace B across a veth pair.
#[test]
fn veth_namespaces_find_the_head() {
    if !can_use_netns() {
        println!("SKIPPED veth_namespaces_find_the_head: needs root and `ip netns`");
        return;
    }
    let probe = probe_path();
    if !probe.exists() {
        println!(
            "SKIPPED veth_namespaces_find_the_head: {} missing; run `cargo build -p superfluid-link --examples`",
            probe.display()
        );
        return;
    }
    let (a, b) = (Netns::create("a"), Netns::create("b"));
    ip(&[
        "link", "add", "veth-a", "netns", &a.0, "type", "veth", "peer", "name", "veth-b", "netns",
        &b.0,
    ])
    .unwrap();
    for (ns, dev, addr) in [
        (&a, "veth-a", "10.77.201.1/24"),
        (&b, "veth-b", "10.77.201.2/24"),
    ] {
        ns.ip(&["addr", "add", addr, "dev", dev]);
        ns.ip(&["link", "set", "dev", dev, "up", "multicast", "on"]);
    }
    let fp = Identity::generate().unwrap().fingerprint().to_string();
    let mut head = a
        .exec(&probe)
        .args([
            "advertise",
            "--fleet",
            "fleet-veth",
            "--port",
            "7412",
            "--secs",
            "20",
        ])
        .args(["--fp", &fp])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    if let Some(out) = head.stdout.take() {
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut ready).unwrap();
    }
    println!("advertise in {}: {ready}", a.0);
    assert!(
        ready.starts_with("ADVERTISING superfluid-fleet-veth-"),
        "{ready}"
    );
    let browse = |fleet: &str, ms: &str| {
        let out = b
            .exec(&probe)
            .args(["browse", "--fleet", fleet, "--timeout-ms", ms])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        println!("browse {fleet} from {}: {text}", b.0);
        (out.status.code(), text)
    };
    let found = browse("fleet-veth", "8000");
    let missing = browse("fleet-other", "1500");
    let _ = head.kill();
    let _ = head.wait();

    assert_eq!(found.0, Some(0), "{}", found.1);
    assert!(found.1.contains("fleet=fleet-veth"), "{}", found.1);
    assert!(found.1.contains(&format!("fp={fp}")), "{}", found.1);
    assert!(found.1.contains("addrs=10.77.201.1:7412"), "{}", found.1);
    assert!(!found.1.contains("127.0.0.1"), "{}", found.1);
    assert_eq!(missing.0, Some(2), "{}", missing.1);
    assert!(
        missing.1.contains("no head of fleet fleet-other"),
        "{}",
        missing.1
    );
}
