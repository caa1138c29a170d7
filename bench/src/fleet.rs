//! A fleet of `superfluid` processes on this machine: a head and
//! fake-engine nodes (`superfluid node --fake-engine`, which compute
//! nothing, so what is measured is the fleet's own cost), each started in
//! the host's network or in a namespace of [`crate::netns`]. Every process
//! is killed on drop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

/// Where a process runs: the host's network, or a namespace by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Host,
    Netns(String),
}

impl Place {
    /// `program` to be run here; add arguments with `.args`.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match self {
            Place::Host => Command::new(program),
            Place::Netns(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(program);
                cmd
            }
        }
    }
}

/// A temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Result<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "superfluid-bench-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(TempDir(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process, killed (SIGKILL) on drop.
#[derive(Debug)]
pub struct Proc(pub Child);

impl Proc {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// SIGKILL, as a crash or `kill -9` ends it, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// SIGTERM: a node closes its connection with a reason and leaves.
    pub fn terminate(&mut self, within: Duration) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `cmd` to its end; its stdout, or an error with its stderr.
fn output(what: &str, mut cmd: Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    ensure!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A running `superfluid head` without mDNS, its binary and model.
pub struct Head {
    pub proc: Proc,
    pub place: Place,
    pub dir: TempDir,
    pub http: SocketAddr,
    pub bin: PathBuf,
    pub model: PathBuf,
}

impl Head {
    /// Starts `superfluid head` at `place`, HTTP on its loopback, Link F on
    /// `link_ip`, and waits for the line that says where it listens.
    pub fn start(bin: &Path, model: &Path, place: Place, link_ip: &str) -> Result<Head> {
        let dir = TempDir::new("head")?;
        let mut cmd = place.command(bin);
        cmd.args(["head", "--http", "127.0.0.1:0", "--link"])
            .arg(format!("{link_ip}:0"))
            .args(["--no-mdns", "--data-dir"])
            .arg(dir.path())
            .arg("--model")
            .arg(model)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("starting superfluid head")?;
        let (tx, rx) = mpsc::channel();
        for out in [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        let proc = Proc(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                bail!("superfluid head did not say where it listens within 60 s");
            };
            if let Some((http, _link)) = parse_head_line(&line) {
                return Ok(Head {
                    proc,
                    place,
                    dir,
                    http,
                    bin: bin.to_owned(),
                    model: model.to_owned(),
                });
            }
        }
    }

    /// `http://ADDR` of its HTTP API.
    pub fn base(&self) -> String {
        format!("http://{}", self.http)
    }

    /// `superfluid fleet ARGS --url URL --data-dir DIR`, run at the head's place.
    pub fn fleet(&self, args: &[&str]) -> Result<String> {
        let mut cmd = self.place.command(&self.bin);
        cmd.arg("fleet")
            .args(args)
            .args(["--url", &self.base(), "--data-dir"])
            .arg(self.dir.path());
        output(&format!("fleet {}", args.join(" ")), cmd)
    }

    /// `fleet nodes --json`.
    pub fn nodes(&self) -> Result<Vec<Value>> {
        let out = self.fleet(&["nodes", "--json"])?;
        let nodes: Value = serde_json::from_str(out.trim()).context("fleet nodes --json")?;
        Ok(nodes.as_array().cloned().unwrap_or_default())
    }

    /// The state `fleet nodes` gives node `name`, `None` when not listed.
    pub fn state(&self, name: &str) -> Option<String> {
        let nodes = self.nodes().ok()?;
        let node = nodes.iter().find(|n| n["name"] == name)?;
        node["state"].as_str().map(str::to_owned)
    }

    /// Waits until `check` holds of node `name`'s state, for `within`.
    pub fn wait_state(
        &self,
        name: &str,
        within: Duration,
        check: impl Fn(Option<&str>) -> bool,
    ) -> Result<Duration> {
        let start = Instant::now();
        while start.elapsed() < within {
            if check(self.state(name).as_deref()) {
                return Ok(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(30));
        }
        bail!("node {name} did not reach the awaited state within {within:?}")
    }

    /// Joins a fake-engine node named `name` at `place` (once; its key and
    /// credential stay in its dir for every later start).
    pub fn join(&self, place: &Place, name: &str, slots: u32) -> Result<FakeNode> {
        let token = self.fleet(&["token"])?.trim().to_owned();
        let dir = TempDir::new(name)?;
        let mut cmd = place.command(&self.bin);
        cmd.args([
            "fleet",
            "join",
            &token,
            "--no-run",
            "--no-mdns",
            "--name",
            name,
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--model")
        .arg(&self.model);
        output(&format!("fleet join {name}"), cmd)?;
        Ok(FakeNode {
            name: name.to_owned(),
            place: place.clone(),
            dir,
            slots,
            proc: None,
        })
    }
}

/// A fake-engine node's credential and, while it runs, its process.
pub struct FakeNode {
    pub name: String,
    pub place: Place,
    dir: TempDir,
    slots: u32,
    pub proc: Option<Proc>,
}

impl FakeNode {
    /// Starts (or restarts) the node and waits until the head lists it up.
    pub fn start(&mut self, head: &Head) -> Result<Duration> {
        let mut cmd = self.place.command(&head.bin);
        cmd.args(["node", "--fake-engine", "--data-dir"])
            .arg(self.dir.path())
            .arg("--model")
            .arg(&head.model)
            .args(["--slots", &self.slots.to_string(), "--ctx", "4096"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.proc = Some(Proc(cmd.spawn().context("starting a fake node")?));
        head.wait_state(&self.name, Duration::from_secs(60), |s| s == Some("up"))
    }
}

/// The addresses in the head's start line: `http://ADDR` and `Link F on ADDR`.
fn parse_head_line(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let addr_after = |marker: &str| -> Option<SocketAddr> {
        let at = line.find(marker)? + marker.len();
        let word: String = line[at..]
            .chars()
            .take_while(|c| !c.is_whitespace() && !matches!(c, ')' | ',' | ';' | '"'))
            .collect();
        word.trim_end_matches(['/', '.']).parse().ok()
    };
    Some((addr_after("http://")?, addr_after("Link F on ")?))
}

#[cfg(test)]
mod tests {
    use super::parse_head_line;

    #[test]
    fn the_head_line_gives_both_addresses() {
        let line = "head of fleet f serving m on http://127.0.0.1:7700 (Link F on 10.0.0.1:7701); data dir /d";
        let (http, link) = parse_head_line(line).expect("both addresses");
        assert_eq!(http.to_string(), "127.0.0.1:7700");
        assert_eq!(link.to_string(), "10.0.0.1:7701");
        assert!(parse_head_line("starting").is_none());
    }
}
