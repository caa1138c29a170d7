//! Model transfers that do not run to their end: a bare node killed
//! mid-download resumes from its partial file when it starts again, and a
//! node whose disk is too small stops with a clear error before it writes
//! the model.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::json;
use superfluid_link::digest::sha256_file;

use crate::fleet_support::{bin, node_header, serial, token, wait_until, Head, TempDir};
use crate::fleet_transfer::{bare_join, cached, wait_serving_model};
use crate::support::model_path;

/// The larger model `scripts/setup` installs (253 MB), so that a transfer
/// lasts long enough to be cut.
pub(crate) const LARGE: &str = "gemma-3-270m-q4_k_m";

pub(crate) fn large_model_path() -> PathBuf {
    Path::new(&model_path()).with_file_name(format!("{LARGE}.gguf"))
}

/// A head serving only `model`.
fn head_serving(dir: &Path, model: &Path) -> Result<Head> {
    let mut cmd = Command::new(bin());
    cmd.args(["head", "--http", "127.0.0.1:0", "--link", "127.0.0.1:0"])
        .args(["--no-mdns", "--data-dir"])
        .arg(dir)
        .arg("--model")
        .arg(model);
    Head::spawn(dir, cmd)
}

/// Polls `path` until it holds some bytes but fewer than `size`; false if
/// that is not seen within `timeout` (or the download finished first).
pub(crate) fn wait_partly_written(path: &Path, size: u64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.len() > 0 && meta.len() < size {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// The length of the partial file a cut transfer left in the cache at
/// `home`, which must hold part of the model's `size` bytes, and no model
/// in place.
pub(crate) fn partly_held(home: &Path, sha256: &str, size: u64) -> Result<u64> {
    let partial = cached(home, sha256, "partial");
    let held = std::fs::metadata(&partial)
        .with_context(|| format!("the cut left no {}", partial.display()))?
        .len();
    ensure!(
        held > 0 && held < size,
        "the cut should leave part of the file, not {held} of {size} bytes"
    );
    ensure!(
        !cached(home, sha256, "gguf").exists(),
        "a cut download must not leave a model in place"
    );
    Ok(held)
}

/// The byte the node's log says it resumed from, if it says so.
pub(crate) fn resumed_from(log: &str) -> Option<u64> {
    const SAID: &str = "resuming the model's download from byte ";
    let at = log.find(SAID)? + SAID.len();
    let digits: String = log[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_download_resumes_where_it_stopped() -> Result<()> {
    let _serial = serial().await;
    let model = large_model_path();
    ensure!(
        model.is_file(),
        "{} is missing: run scripts/setup, which installs it",
        model.display()
    );
    let size = std::fs::metadata(&model)?.len();
    let sha256 = sha256_file(&model).context("hashing the large model")?;
    let head_dir = TempDir::new("cut-head");
    let head = head_serving(head_dir.path(), &model)?;
    let tok = token(&head, &[])?;
    let home = TempDir::new("cut-bare");
    let partial = cached(home.path(), &sha256, "partial");

    let mut first = bare_join(&tok, home.path(), "cut")?;
    ensure!(
        wait_partly_written(&partial, size, Duration::from_secs(120)),
        "the node's partial file never held part of the model (exit: {:?}); its output:\n{}",
        first.proc.try_wait(),
        first.proc.log()
    );
    first.proc.kill(); // SIGKILL: no chance to clean up.
    let held = partly_held(home.path(), &sha256, size)?;

    // The credential was saved on the welcome: a plain `superfluid node`.
    let mut cmd = Command::new(bin());
    cmd.args(["node", "--threads", "1", "--slots", "2", "--ctx", "1024"])
        .env_remove("SUPERFLUID_MODEL")
        .env("SUPERFLUID_HOME", home.path());
    let mut again = crate::fleet_support::Node {
        proc: crate::fleet_support::Proc::spawn("restarted cut", cmd)?,
        name: "cut".to_owned(),
    };
    wait_serving_model(&mut again, &head, LARGE)?;
    let log = again.proc.log();
    ensure!(
        resumed_from(&log) == Some(held),
        "the restarted node should resume from byte {held}, where the killed one stopped: {log}"
    );
    ensure!(
        !log.contains("fetching the model from the head"),
        "the restarted node should not start again from byte 0: {log}"
    );
    let file = cached(home.path(), &sha256, "gguf");
    ensure!(
        sha256_file(&file)? == sha256,
        "the resumed file's content is not the head's"
    );
    ensure!(
        !partial.exists(),
        "no partial file is left once it is in place"
    );

    // A base model with no chat template: a raw completion.
    let resp = head
        .client
        .post(head.url("/v1/completions"))
        .json(&json!({"model": LARGE, "prompt": "The colours of the rainbow are", "max_tokens": 4, "temperature": 0}))
        .timeout(Duration::from_secs(120))
        .send()
        .await?;
    let status = resp.status().as_u16();
    let node = node_header(&resp);
    let body = resp.text().await?;
    ensure!(status == 200, "the completion failed: {status} {body}");
    ensure!(
        node.as_deref() == Some("cut"),
        "the resumed node should answer, not {node:?}: {body}"
    );
    Ok(())
}

/// A tmpfs of `size` mounted on a fresh folder; unmounted on drop, before
/// the folder is removed.
struct Tmpfs {
    dir: TempDir,
}

impl Tmpfs {
    /// `None` (and why, printed) where this process may not mount.
    fn mount(tag: &str, size: &str) -> Result<Option<Tmpfs>> {
        if !crate::netns::is_root() {
            eprintln!("tmpfs: not root; skipping the full-disk test");
            return Ok(None);
        }
        let dir = TempDir::new(tag);
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .context("running mount")?;
        if !out.status.success() {
            bail!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(Some(Tmpfs { dir }))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_on_a_full_disk_stops_with_a_clear_error() -> Result<()> {
    let _serial = serial().await;
    let Some(disk) = Tmpfs::mount("full-disk", "20m")? else {
        return Ok(());
    };
    let head_dir = TempDir::new("full-head");
    let model = PathBuf::from(model_path());
    let sha256 = sha256_file(&model).context("hashing the head's model")?;
    let head = head_serving(head_dir.path(), &model)?;
    let tok = token(&head, &[])?;
    let mut node = bare_join(&tok, disk.dir.path(), "small-disk")?;
    let exited = wait_until(|| node.proc.try_wait().is_some(), Duration::from_secs(60));
    ensure!(
        exited,
        "a node whose disk cannot hold the model should stop; its output:\n{}",
        node.proc.log()
    );
    let status = node.proc.try_wait();
    // Let the reader threads catch up with the last lines.
    std::thread::sleep(Duration::from_millis(200));
    let log = node.proc.log();
    ensure!(
        status.is_some_and(|s| !s.success()),
        "the node should exit with an error, not {status:?}: {log}"
    );
    ensure!(
        log.contains("not enough disk space") && log.contains("set SUPERFLUID_HOME"),
        "the node should say the disk is too small and what to do: {log}"
    );
    ensure!(
        !cached(disk.dir.path(), &sha256, "gguf").exists(),
        "no model may be left in place on a full disk"
    );
    let partial = std::fs::metadata(cached(disk.dir.path(), &sha256, "partial"));
    ensure!(
        partial.map_or(true, |m| m.len() == 0),
        "nothing should be written before the space check"
    );
    Ok(())
}
