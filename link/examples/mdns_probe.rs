//! A standalone check of superfluid's mDNS discovery.
//!
//! ```text
//! mdns_probe advertise --fleet F [--fp HEX] [--port P] [--addr IP]... [--secs N]
//! mdns_probe browse --fleet F [--timeout-ms N] [--on IP]...
//! ```
//!
//! `advertise` announces a head (a fresh identity unless `--fp`), prints
//! `ADVERTISING <instance> fp=<hex> port=<p>` and stays up `--secs` seconds
//! (default 30) or until killed. `browse` prints
//! `FOUND fleet=<id> fp=<hex> v=<n> addrs=<a,b>` and exits 0, or prints
//! `NOT FOUND: <error>` and exits 2. `--addr` / `--on` limit the interfaces used.

use std::{net::IpAddr, process::ExitCode, time::Duration};

use superfluid_link::{discovery, Fingerprint, Identity};

#[derive(Default)]
struct Args {
    mode: String,
    fleet: Option<String>,
    fp: Option<Fingerprint>,
    port: u16,
    addrs: Vec<IpAddr>,
    secs: u64,
    timeout_ms: u64,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut args = Args {
        mode: it.next().ok_or("missing mode: advertise or browse")?,
        port: 7450,
        secs: 30,
        timeout_ms: 5000,
        ..Args::default()
    };
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--fleet" => args.fleet = Some(value),
            "--fp" => args.fp = Some(value.parse().map_err(|e| bad(&e))?),
            "--port" => args.port = value.parse().map_err(|e| bad(&e))?,
            "--addr" | "--on" => args.addrs.push(value.parse().map_err(|e| bad(&e))?),
            "--secs" => args.secs = value.parse().map_err(|e| bad(&e))?,
            "--timeout-ms" => args.timeout_ms = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

fn limit(addrs: &[IpAddr]) -> Option<Vec<IpAddr>> {
    (!addrs.is_empty()).then(|| addrs.to_vec())
}

async fn run(args: Args) -> Result<ExitCode, String> {
    let fleet = args.fleet.ok_or("--fleet is required")?;
    match args.mode.as_str() {
        "advertise" => {
            let fp = match args.fp {
                Some(fp) => fp,
                None => Identity::generate()
                    .map_err(|e| e.to_string())?
                    .fingerprint(),
            };
            let ad = discovery::advertise(&fleet, &fp, args.port, limit(&args.addrs))
                .map_err(|e| e.to_string())?;
            println!("ADVERTISING {} fp={fp} port={}", ad.fullname(), args.port);
            tokio::time::sleep(Duration::from_secs(args.secs)).await;
            ad.stop().map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        "browse" => {
            let timeout = Duration::from_millis(args.timeout_ms);
            match discovery::browse_head(&fleet, timeout, limit(&args.addrs)).await {
                Ok(head) => {
                    let fp = head.fingerprint.map(|f| f.to_string()).unwrap_or_default();
                    let version = head.version.map(|v| v.to_string()).unwrap_or_default();
                    let addrs: Vec<String> = head.addrs.iter().map(|a| a.to_string()).collect();
                    println!(
                        "FOUND fleet={} fp={fp} v={version} addrs={}",
                        head.fleet_id,
                        addrs.join(",")
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    println!("NOT FOUND: {e}");
                    Ok(ExitCode::from(2))
                }
            }
        }
        other => Err(format!("unknown mode {other}; use advertise or browse")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match parse() {
        Ok(args) => run(args).await,
        Err(e) => Err(e),
    };
    result.unwrap_or_else(|e| {
        eprintln!("mdns_probe: {e}");
        ExitCode::from(1)
    })
}
