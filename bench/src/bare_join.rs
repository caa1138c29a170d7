//! From `superfluid fleet join` on a bare machine to the first token: a
//! real head serving the model, and `fleet join TOKEN` started with an
//! empty `SUPERFLUID_HOME` and no `--model`, so the node fetches the model
//! from the head, loads it and serves. The time is split by the node's own
//! log lines into joining, transfer and load, and then the first token of
//! a streamed chat request through the head.

use std::io::BufRead as _;
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::fleet::{Head, Place, Proc, TempDir};

/// The phases of a bare join, in seconds.
#[derive(Debug, Clone, Serialize)]
pub struct BareJoin {
    /// From starting `fleet join` until the node starts fetching (the
    /// token's handshake and the welcome).
    pub join_secs: f64,
    /// Fetching, verifying and placing the model file.
    pub transfer_secs: f64,
    /// Loading the model and joining again to serve it, until the head
    /// lists the node up.
    pub load_secs: f64,
    /// From sending a streamed chat request to its first token.
    pub first_token_secs: f64,
    /// All of it: from `fleet join` to the first token.
    pub total_secs: f64,
}

/// One bare join of a node to a head serving `model`, with `superfluid` at `bin`.
pub async fn run(bin: &Path, model: &Path) -> Result<BareJoin> {
    let head = Head::start(bin, model, Place::Host, "127.0.0.1")?;
    let token = head.fleet(&["token"])?.trim().to_owned();
    let home = TempDir::new("bare-home")?;
    let data = TempDir::new("bare-node")?;
    let started = Instant::now();
    let mut child = std::process::Command::new(bin)
        .args([
            "fleet",
            "join",
            &token,
            "--no-mdns",
            "--name",
            "bare",
            "--data-dir",
        ])
        .arg(data.path())
        .env("SUPERFLUID_HOME", home.path())
        .env_remove("SUPERFLUID_MODEL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting superfluid fleet join")?;
    let (tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().context("the node's stderr")?;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send((Instant::now(), line));
        }
    });
    let _node = Proc(child);
    let at = |needle: &str| -> Result<Instant> {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok((when, line)) if line.contains(needle) => return Ok(when),
                Ok(_) => {}
                Err(_) => bail!("the bare node never logged {needle:?}"),
            }
        }
    };
    let fetching = at("fetching the model from the head")?;
    let fetched = at("fetched and verified the model")?;
    head.wait_state("bare", Duration::from_secs(600), |s| s == Some("up"))?;
    let up = Instant::now();
    let first_token_secs = first_token(&head).await?;
    let secs = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64();
    Ok(BareJoin {
        join_secs: secs(started, fetching),
        transfer_secs: secs(fetching, fetched),
        load_secs: secs(fetched, up),
        first_token_secs,
        total_secs: secs(started, up) + first_token_secs,
    })
}

/// Seconds from sending a streamed chat request to its first content.
async fn first_token(head: &Head) -> Result<f64> {
    let model = superfluid_proto::model_id_from_path(&head.model);
    let body = serde_json::json!({
        "model": model,
        "stream": true,
        "max_tokens": 8,
        "temperature": 0,
        "messages": [{"role": "user", "content": "Say hello."}],
    });
    let sent = Instant::now();
    let mut response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", head.base()))
        .json(&body)
        .send()
        .await?
        .error_for_status()?;
    while let Some(chunk) = response.chunk().await? {
        if String::from_utf8_lossy(&chunk).contains("\"content\":\"") {
            return Ok(sent.elapsed().as_secs_f64());
        }
    }
    bail!("the streamed answer had no content")
}
