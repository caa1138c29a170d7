//! Model distribution end to end: a node started on a bare machine (an
//! empty `SUPERFLUID_HOME`, no `--model`) joins a head, fetches the head's
//! model over Link F into its cache, verifies it, loads it and serves.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use superfluid_link::digest::sha256_file;

use crate::fleet_support::{
    bin, node_named, nodes_json, serial, token, wait_until, Head, Node, Proc, TempDir, LIGHT,
};
use crate::support::{model_path, MODEL};

/// How long a bare node may take to fetch, load and join.
const READY: Duration = Duration::from_secs(180);

/// `superfluid fleet join TOKEN` with only the binary and the token: no
/// `--model`, no `SUPERFLUID_MODEL`, `SUPERFLUID_HOME` an empty folder.
pub(crate) fn bare_join(token: &str, home: &Path, name: &str) -> Result<Node> {
    let mut cmd = Command::new(bin());
    cmd.args(["fleet", "join", token, "--no-mdns", "--name", name])
        .args(LIGHT)
        .env_remove("SUPERFLUID_MODEL")
        .env("SUPERFLUID_HOME", home);
    Ok(Node {
        proc: Proc::spawn(&format!("bare {name}"), cmd)?,
        name: name.to_owned(),
    })
}

/// Waits until the head lists `node` as up and serving the model (while it
/// fetches, it is listed with no model).
fn wait_serving(node: &mut Node, head: &Head) -> Result<()> {
    wait_serving_model(node, head, MODEL)
}

/// Waits until the head lists `node` as up and serving `model`.
pub(crate) fn wait_serving_model(node: &mut Node, head: &Head, model: &str) -> Result<()> {
    let serving = wait_until(
        || {
            node.proc.try_wait().is_none()
                && nodes_json(head).ok().is_some_and(|nodes| {
                    node_named(&nodes, &node.name).is_some_and(|n| {
                        n["state"] == "up" && n["models"].to_string().contains(model)
                    })
                })
        },
        READY,
    );
    ensure!(
        serving,
        "node {} does not serve {model} within {READY:?}; its output:\n{}",
        node.name,
        node.proc.log()
    );
    Ok(())
}

/// A head, a fresh token, and the head's model's sha256.
fn head_and_token(tag: &str) -> Result<(TempDir, Head, String, String)> {
    let dir = TempDir::new(tag);
    let head = Head::start(dir.path(), &[])?;
    let tok = token(&head, &[])?;
    let sha256 = sha256_file(Path::new(&model_path())).context("hashing the head's model")?;
    Ok((dir, head, tok, sha256))
}

/// Where a node with `home` keeps the model of `sha256`.
pub(crate) fn cached(home: &Path, sha256: &str, ext: &str) -> PathBuf {
    home.join("models").join(format!("{sha256}.{ext}"))
}

/// Asserts the node's cached model is the head's, and that a chat request
/// through the head is answered by the node.
async fn assert_serves_the_heads_model(head: &Head, home: &Path, sha256: &str) -> Result<()> {
    let file = cached(home, sha256, "gguf");
    ensure!(
        file.is_file(),
        "the node's cache should hold {}",
        file.display()
    );
    ensure!(
        sha256_file(&file)? == sha256,
        "the cached model's content is not the head's"
    );
    ensure!(
        !cached(home, sha256, "partial").exists(),
        "no partial file is left once the model is in place"
    );
    let (status, body, node) = head.chat("Say hello.", 8).await?;
    ensure!(status == 200, "the chat request failed: {status} {body}");
    ensure!(node.is_some(), "the answer names no node: {body}");
    Ok(())
}

/// Asserts the head's metrics count the whole model sent once `transport`.
async fn assert_counted(head: &Head, transport: &str) -> Result<()> {
    let size = std::fs::metadata(model_path())?.len();
    let page = head.metrics().await;
    let bytes = format!(
        "superfluid_model_transfer_bytes_total{{model=\"{MODEL}\",transport=\"{transport}\"}} {size}\n"
    );
    let sent = format!(
        "superfluid_model_transfers_total{{outcome=\"sent\",transport=\"{transport}\"}} 1\n"
    );
    ensure!(
        page.contains(&bytes) && page.contains(&sent),
        "the head's metrics should count the model sent over {transport}: {page}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_node_fetches_the_heads_model_and_serves() -> Result<()> {
    let _serial = serial().await;
    let (_hd, head, tok, sha256) = head_and_token("transfer-head")?;
    let home = TempDir::new("transfer-bare");
    let mut node = bare_join(&tok, home.path(), "bare")?;
    wait_serving(&mut node, &head)?;
    let log = node.proc.log();
    ensure!(
        log.contains("fetching the model from the head"),
        "the node should say it fetches the model: {log}"
    );
    ensure!(
        log.contains("fetching over the head's transfer port (TLS over TCP)"),
        "the node should fetch over the head's transfer port: {log}"
    );
    assert_counted(&head, "tcp").await?;
    ensure!(
        !log.contains("scripts/setup"),
        "a node with a head to fetch from must not ask for scripts/setup: {log}"
    );
    assert_serves_the_heads_model(&head, home.path(), &sha256).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_fetches_over_quic_where_the_transfer_port_is_closed() -> Result<()> {
    let _serial = serial().await;
    // A TCP socket bound but not listening: the head cannot take the port
    // number on TCP, and a node's connection to it is refused, as behind a
    // firewall that opens Link F's UDP port only.
    let taken = tokio::net::TcpSocket::new_v4()?;
    taken.bind("127.0.0.1:0".parse()?)?;
    let link = format!("127.0.0.1:{}", taken.local_addr()?.port());
    let dir = TempDir::new("quic-fetch-head");
    let head = Head::start(dir.path(), &["--link", &link])?;
    let tok = token(&head, &[])?;
    let sha256 = sha256_file(Path::new(&model_path())).context("hashing the head's model")?;
    let home = TempDir::new("quic-fetch-bare");
    let mut node = bare_join(&tok, home.path(), "quic")?;
    wait_serving(&mut node, &head)?;
    let log = node.proc.log();
    ensure!(
        log.contains("fetching over Link F's QUIC connection"),
        "the node should fall back to QUIC: {log}"
    );
    ensure!(
        head.proc
            .log()
            .contains("could not listen on TCP for model transfers"),
        "the head should say why nodes fetch over QUIC: {}",
        head.proc.log()
    );
    assert_counted(&head, "quic").await?;
    assert_serves_the_heads_model(&head, home.path(), &sha256).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_download_resumes_from_its_length() -> Result<()> {
    let _serial = serial().await;
    let (_hd, head, tok, sha256) = head_and_token("resume-head")?;
    let home = TempDir::new("resume-bare");
    let model = std::fs::read(model_path())?;
    let held = model.len() / 3;
    std::fs::create_dir_all(home.path().join("models"))?;
    std::fs::write(cached(home.path(), &sha256, "partial"), &model[..held])?;
    let mut node = bare_join(&tok, home.path(), "resumer")?;
    wait_serving(&mut node, &head)?;
    let log = node.proc.log();
    ensure!(
        log.contains(&format!("resuming the model's download from byte {held}")),
        "the node should resume at byte {held}, not 0: {log}"
    );
    ensure!(
        !log.contains("fetching the model from the head"),
        "the node should not start again from byte 0: {log}"
    );
    assert_serves_the_heads_model(&head, home.path(), &sha256).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_partial_download_is_deleted_and_fetched_again() -> Result<()> {
    let _serial = serial().await;
    let (_hd, head, tok, sha256) = head_and_token("corrupt-head")?;
    let home = TempDir::new("corrupt-bare");
    let model = std::fs::read(model_path())?;
    let held = model.len() / 4;
    let wrong: Vec<u8> = model[..held].iter().map(|b| b ^ 0x5a).collect();
    std::fs::create_dir_all(home.path().join("models"))?;
    std::fs::write(cached(home.path(), &sha256, "partial"), wrong)?;
    let mut node = bare_join(&tok, home.path(), "mended")?;
    wait_serving(&mut node, &head)?;
    let log = node.proc.log();
    ensure!(
        log.contains("does not match its sha256"),
        "the node should say the file did not match: {log}"
    );
    ensure!(
        log.contains("fetching the model from the head"),
        "after the mismatch the node should fetch from byte 0: {log}"
    );
    assert_serves_the_heads_model(&head, home.path(), &sha256).await
}
