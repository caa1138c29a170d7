//! `superfluid head` with one joined node, twice: once with no key and once
//! answering only a key with request and token limits set far above what
//! the bench sends. The same topology on both sides, so the pair's ratio is
//! the cost of checking the key and its limits on every request.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::http::{self, ServerProcess};
use crate::ServeArgs;

/// Requests per minute of the bench's key: never reached.
const KEY_RPM: &str = "1000000";
/// Tokens per minute of the bench's key: never reached.
const KEY_TPM: &str = "1000000000";

/// A head and its node; both are killed and the data dirs removed on drop.
pub struct KeyedHead {
    pub head: ServerProcess,
    /// The node process.
    _node: ServerProcess,
    /// The key clients send; `None` when the head has none.
    pub key: Option<String>,
    dirs: [PathBuf; 2],
}

impl Drop for KeyedHead {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Starts a head (with a limited key when `limited`), joins a node with the
/// bench's engine flags, and waits until the head answers `/health`.
pub async fn start(args: &ServeArgs, tag: &str, limited: bool) -> Result<KeyedHead> {
    let base = std::env::temp_dir().join(format!("superfluid-bench-{tag}-{}", std::process::id()));
    let (head_dir, node_dir) = (base.join("head"), base.join("node"));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&head_dir)?;
    let head_args: Vec<String> = [
        "head",
        "--http",
        "127.0.0.1:{port}",
        "--link",
        "127.0.0.1:0",
        "--no-mdns",
        "--data-dir",
        &head_dir.display().to_string(),
        "--model",
        &args.model.display().to_string(),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    // With no key and no node yet, `/v1/models` answers as soon as the
    // head listens.
    let head = http::start_until(&args.superfluid, &head_args, "/v1/models").await?;
    let dir = head_dir.display().to_string();
    let admin = ["--url", head.base.as_str(), "--data-dir", dir.as_str()];
    let token = run(
        &args.superfluid,
        &[&["fleet", "token"][..], &admin].concat(),
    )?;
    let key = if limited {
        let create = [
            "keys", "create", "bench", "--rpm", KEY_RPM, "--tpm", KEY_TPM,
        ];
        Some(run(&args.superfluid, &[&create[..], &admin].concat())?)
    } else {
        None
    };
    let node_args: Vec<String> = [
        "fleet",
        "join",
        &token,
        "--no-mdns",
        "--data-dir",
        &node_dir.display().to_string(),
        "--name",
        tag,
        "--threads",
        &args.threads.to_string(),
        "--slots",
        &args.slots.to_string(),
        "--ctx",
        &args.ctx.to_string(),
        "--model",
        &args.model.display().to_string(),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let node = http::spawn(&args.superfluid, &node_args, String::new())?;
    wait_healthy(&head.base).await?;
    Ok(KeyedHead {
        head,
        _node: node,
        key,
        dirs: [head_dir, node_dir],
    })
}

/// Runs `superfluid ARGS` to its end; its one line of output.
fn run(binary: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} {}", binary.display(), args.join(" ")))?;
    ensure!(
        out.status.success(),
        "{} {} failed: {}",
        binary.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

async fn wait_healthy(base: &str) -> Result<()> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(r) = client.get(format!("{base}/health")).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the head at {base} has no node up within 120 s")
}
