//! Starting `superfluid head` and nodes that join it with `superfluid fleet
//! join`, and running the `fleet` admin commands against a head.
//!
//! Every process is killed on drop and every data dir is a fresh folder
//! under the system temp dir, removed on drop. Nodes run with one thread,
//! two slots and a small context so several fit on a small machine; the
//! fleet tests take [`serial`] so only one fleet runs at a time.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use crate::support::model_path;

/// The `superfluid` binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_superfluid")
}

/// Held by each fleet test so that only one fleet (a head and its model-
/// loading nodes) runs at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits for the other fleet tests to finish.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// A fresh folder under the system temp dir; removed with its contents on drop.
pub struct TempDir(PathBuf);

static DIRS: AtomicU32 = AtomicU32::new(0);

impl TempDir {
    /// `<tmp>/superfluid-e2e-<pid>-<n>-<tag>`, created empty.
    pub fn new(tag: &str) -> TempDir {
        let n = DIRS.fetch_add(1, Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("superfluid-e2e-{}-{n}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The path as a string, for command lines.
    pub fn arg(&self) -> String {
        self.0.display().to_string()
    }

    /// A fresh folder holding copies of this one's files (not subfolders).
    pub fn copy(&self, tag: &str) -> TempDir {
        let to = TempDir::new(tag);
        for entry in std::fs::read_dir(&self.0).expect("reading a data dir") {
            let entry = entry.expect("reading a data dir entry");
            if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
                std::fs::copy(entry.path(), to.0.join(entry.file_name()))
                    .expect("copying a data dir file");
            }
        }
        to
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process whose stdout and stderr are collected (and echoed with a
/// tag) by threads; killed and reaped on drop.
pub struct Proc {
    child: Child,
    tag: String,
    log: Arc<Mutex<String>>,
    lines: Option<mpsc::Receiver<String>>,
}

impl Proc {
    /// Spawns `cmd` with piped output.
    pub fn spawn(tag: &str, mut cmd: Command) -> Result<Proc> {
        let mut child = cmd
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawning {tag}: {cmd:?}"))?;
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().context("no stdout")?;
        let err = child.stderr.take().context("no stderr")?;
        for (stream, tx) in [
            (Box::new(out) as Box<dyn Read + Send>, tx.clone()),
            (Box::new(err), tx),
        ] {
            let log = log.clone();
            let tag = tag.to_owned();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    eprintln!("[{tag}] {line}");
                    if let Ok(mut l) = log.lock() {
                        l.push_str(&line);
                        l.push('\n');
                    }
                    let _ = tx.send(line);
                }
            });
        }
        Ok(Proc {
            child,
            tag: tag.to_owned(),
            log,
            lines: Some(rx),
        })
    }

    /// Everything it has printed so far.
    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Waits until its output contains `needle`; fails with the output so
    /// far if it does not within `timeout` or the process exits first.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.log();
            if log.contains(needle) {
                return Ok(log);
            }
            if let Some(status) = self.child.try_wait()? {
                // Let the reader threads catch up with the last lines.
                std::thread::sleep(Duration::from_millis(200));
                let log = self.log();
                if log.contains(needle) {
                    return Ok(log);
                }
                bail!(
                    "{} exited ({status}) without printing {needle:?}; its output:\n{log}",
                    self.tag
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not print {needle:?} within {timeout:?}; its output:\n{log}",
                    self.tag
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Kills and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The output of a command that ran to its end.
#[derive(Debug)]
pub struct Ran {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// The command line's outcome, for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` to its end, killing it and failing after `timeout`.
pub fn run_cmd(tag: &str, mut cmd: Command, timeout: Duration) -> Result<Ran> {
    let mut child = cmd
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {tag}: {cmd:?}"))?;
    let read = |stream: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut s) = stream {
                let _ = s.read_to_string(&mut text);
            }
            text
        })
    };
    let out = read(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = read(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stdout = out.join().unwrap_or_default();
            let stderr = err.join().unwrap_or_default();
            bail!("{tag} did not finish within {timeout:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let ran = Ran {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    eprintln!("[{tag}] {}", ran.describe());
    Ok(ran)
}

/// A free UDP port on 127.0.0.1 (free when this returns).
pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("binding a UDP port")
}

/// Calls `check` every 50 ms until it returns true or `timeout` passes;
/// whether it did.
pub fn wait_until(mut check: impl FnMut() -> bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The addresses a head's start line gives: `http://ADDR` and `Link F on ADDR`.
pub fn parse_head_line(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let addr_after = |text: &str, marker: &str| -> Option<SocketAddr> {
        let at = text.find(marker)? + marker.len();
        let word: String = text[at..]
            .chars()
            .take_while(|c| !c.is_whitespace() && !matches!(c, ')' | ',' | ';' | '"'))
            .collect();
        word.trim_end_matches(['/', '.']).parse().ok()
    };
    let http = addr_after(line, "http://")?;
    let link = addr_after(line, "Link F on ").or_else(|| addr_after(line, "link "))?;
    Some((http, link))
}

/// A running `superfluid head` on loopback without mDNS; killed on drop.
pub struct Head {
    pub proc: Proc,
    /// Its data dir.
    pub dir: PathBuf,
    /// Where its HTTP API listens.
    pub http: SocketAddr,
    /// Where its Link F (UDP) listens.
    pub link: SocketAddr,
    pub client: reqwest::Client,
}

impl Head {
    /// Starts `superfluid head --http 127.0.0.1:0 --link 127.0.0.1:0 --no-mdns
    /// --data-dir DIR --model MODEL EXTRA` (a later `--link` in `extra`
    /// overrides) and waits for the line that says where it listens.
    pub fn start(dir: &Path, extra: &[&str]) -> Result<Head> {
        let mut cmd = Command::new(bin());
        cmd.args(["head", "--http", "127.0.0.1:0"]);
        if !extra.contains(&"--link") {
            cmd.args(["--link", "127.0.0.1:0"]);
        }
        cmd.args(["--no-mdns", "--data-dir"])
            .arg(dir)
            .arg("--model")
            .arg(model_path())
            .args(extra);
        Self::spawn(dir, cmd)
    }

    /// Spawns a prepared `superfluid head` command line and waits for its
    /// start line.
    pub fn spawn(dir: &Path, cmd: Command) -> Result<Head> {
        let mut proc = Proc::spawn("head", cmd)?;
        let lines = proc.lines.take().context("no output lines")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let (http, link) = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(found) = parse_head_line(&line) {
                        break found;
                    }
                }
                Err(_) => bail!(
                    "superfluid head did not print `http://ADDR ... Link F on ADDR` within 60 s \
                     (exit: {:?}); its output:\n{}",
                    proc.try_wait(),
                    proc.log()
                ),
            }
        };
        Ok(Head {
            proc,
            dir: dir.to_owned(),
            http,
            link,
            client: reqwest::Client::new(),
        })
    }

    /// `http://ADDR` of its HTTP API.
    pub fn base(&self) -> String {
        format!("http://{}", self.http)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    /// The status `/health` answers (0 if it does not answer).
    pub async fn health(&self) -> u16 {
        match self
            .client
            .get(self.url("/health"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
        {
            Ok(r) => r.status().as_u16(),
            Err(_) => 0,
        }
    }

    /// Polls `/health` until it answers 200; whether it did within `timeout`.
    pub async fn wait_healthy(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.health().await == 200 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends `body` to `/v1/chat/completions`, two minutes at most.
    pub async fn post_chat(&self, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url("/v1/chat/completions"))
            .json(body)
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .expect("sending a chat request")
    }

    /// The text of `GET /metrics`.
    pub async fn metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the metrics page")
    }

    /// A greedy chat completion with `max_tokens`; status, body, and the
    /// `x-superfluid-node` header.
    pub async fn chat(
        &self,
        prompt: &str,
        max_tokens: u32,
    ) -> Result<(u16, Value, Option<String>)> {
        let body = crate::support::chat(
            serde_json::json!([{"role": "user", "content": prompt}]),
            max_tokens,
        );
        let resp = self
            .client
            .post(self.url("/v1/chat/completions"))
            .json(&body)
            .timeout(Duration::from_secs(120))
            .send()
            .await?;
        let status = resp.status().as_u16();
        let node = node_header(&resp);
        let text = resp.text().await?;
        let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, json, node))
    }

    /// Runs `superfluid fleet ARGS --url URL --data-dir DIR` against this head.
    pub fn fleet(&self, args: &[&str]) -> Result<Ran> {
        let mut cmd = Command::new(bin());
        cmd.arg("fleet")
            .args(args)
            .args(["--url", &self.base(), "--data-dir"])
            .arg(&self.dir);
        run_cmd(
            &format!("fleet {}", args.join(" ")),
            cmd,
            Duration::from_secs(60),
        )
    }
}

/// The `x-superfluid-node` header of a response.
pub fn node_header(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get("x-superfluid-node")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Mints a join token with `superfluid fleet token ARGS`; checks that it
/// printed exactly one line, the token.
pub fn token(head: &Head, args: &[&str]) -> Result<String> {
    let mut all = vec!["token"];
    all.extend_from_slice(args);
    let ran = head.fleet(&all)?;
    ensure!(
        ran.status.success(),
        "fleet token failed: {}",
        ran.describe()
    );
    let lines: Vec<&str> = ran.stdout.lines().collect();
    ensure!(
        lines.len() == 1 && lines[0].trim().starts_with("sfj1."),
        "fleet token should print exactly one line, the `sfj1.` token: {}",
        ran.describe()
    );
    Ok(lines[0].trim().to_owned())
}

/// `superfluid fleet nodes --json`, parsed.
pub fn nodes_json(head: &Head) -> Result<Vec<Value>> {
    let ran = head.fleet(&["nodes", "--json"])?;
    ensure!(
        ran.status.success(),
        "fleet nodes failed: {}",
        ran.describe()
    );
    let value: Value = serde_json::from_str(ran.stdout.trim())
        .with_context(|| format!("fleet nodes --json did not print JSON: {}", ran.describe()))?;
    value
        .as_array()
        .cloned()
        .with_context(|| format!("fleet nodes --json is not an array: {value}"))
}

/// The entry of `nodes` named `name`.
pub fn node_named<'a>(nodes: &'a [Value], name: &str) -> Option<&'a Value> {
    nodes.iter().find(|n| n["name"] == name)
}

/// The state (`up`, `draining`, `down`) `fleet nodes` gives the node named
/// `name`, or `None` if it is not listed.
pub fn state_of(head: &Head, name: &str) -> Option<String> {
    let nodes = nodes_json(head).ok()?;
    node_named(&nodes, name).and_then(|n| n["state"].as_str().map(str::to_owned))
}

/// Asserts that the head stops listing node `name` as `up` within `limit`
/// of `since` (the moment it was told to let the node go, as `what` says).
pub fn assert_leaves(head: &Head, name: &str, since: Instant, limit: Duration, what: &str) {
    let gone = wait_until(
        || state_of(head, name).as_deref() != Some("up"),
        limit.saturating_sub(since.elapsed()),
    );
    assert!(
        gone,
        "fleet nodes --json still lists {name} up {:?} after {what}: {:?}",
        since.elapsed(),
        nodes_json(head).ok()
    );
}

/// Node flags that keep CPU use low.
pub const LIGHT: [&str; 6] = ["--threads", "1", "--slots", "2", "--ctx", "1024"];

/// A `superfluid fleet join` (or `superfluid node`) process; killed on drop.
pub struct Node {
    pub proc: Proc,
    pub name: String,
}

impl Node {
    /// Runs `superfluid fleet join TOKEN --no-mdns --data-dir DIR --name NAME
    /// --model MODEL --threads 1 --slots 2 --ctx 1024 EXTRA`, which joins and
    /// then serves.
    pub fn join(token: &str, dir: &Path, name: &str, extra: &[&str]) -> Result<Node> {
        let mut cmd = Command::new(bin());
        cmd.args(["fleet", "join", token, "--no-mdns", "--data-dir"])
            .arg(dir)
            .args(["--name", name, "--model"])
            .arg(model_path())
            .args(LIGHT)
            .args(extra);
        Ok(Node {
            proc: Proc::spawn(&format!("join {name}"), cmd)?,
            name: name.to_owned(),
        })
    }

    /// Runs `superfluid node --data-dir DIR --model MODEL --threads 1 --slots
    /// 2 --ctx 1024`: a node from its stored credential.
    pub fn run(dir: &Path, name: &str) -> Result<Node> {
        let mut cmd = Command::new(bin());
        cmd.args(["node", "--data-dir"])
            .arg(dir)
            .arg("--model")
            .arg(model_path())
            .args(LIGHT);
        Ok(Node {
            proc: Proc::spawn(&format!("node {name}"), cmd)?,
            name: name.to_owned(),
        })
    }

    /// Waits until the head lists this node as `up`.
    pub fn wait_up(&mut self, head: &Head, timeout: Duration) -> Result<()> {
        let up = wait_until(
            || {
                self.proc.try_wait().is_none()
                    && state_of(head, &self.name).as_deref() == Some("up")
            },
            timeout,
        );
        if up {
            return Ok(());
        }
        bail!(
            "node {} is not `up` in `fleet nodes --json` within {timeout:?} (exit: {:?}; listed: {:?}); its output:\n{}",
            self.name,
            self.proc.try_wait(),
            nodes_json(head).map(Value::from).ok(),
            self.proc.log()
        )
    }
}

/// Runs `superfluid fleet join TOKEN --no-run --no-mdns --data-dir DIR --name
/// NAME ...` to its end (30 s at most).
pub fn join_no_run(token: &str, dir: &Path, name: &str) -> Result<Ran> {
    let mut cmd = Command::new(bin());
    cmd.args([
        "fleet",
        "join",
        token,
        "--no-run",
        "--no-mdns",
        "--data-dir",
    ])
    .arg(dir)
    .args(["--name", name, "--model"])
    .arg(model_path())
    .args(LIGHT);
    run_cmd(
        &format!("join --no-run {name}"),
        cmd,
        Duration::from_secs(30),
    )
}

/// Fails unless a `fleet join --no-run` exited non-zero with `wanted` (any
/// of them) in its stderr.
pub fn assert_refused(ran: &Ran, wanted: &[&str]) {
    assert!(
        !ran.status.success(),
        "the join should have been refused (non-zero exit) with one of {wanted:?}, but it succeeded: {}",
        ran.describe()
    );
    assert!(
        wanted.iter().any(|w| ran.stderr.contains(w)),
        "the refused join's stderr should say {wanted:?}: {}",
        ran.describe()
    );
}

/// Fails unless a `fleet join --no-run` exited 0 and wrote `node.json` and `node.key`.
pub fn assert_joined(ran: &Ran, dir: &Path) {
    assert!(
        ran.status.success(),
        "the join should succeed: {}",
        ran.describe()
    );
    for file in ["node.json", "node.key"] {
        assert!(
            dir.join(file).is_file(),
            "a successful join should write {file} in {}: {}",
            dir.display(),
            ran.describe()
        );
    }
}
