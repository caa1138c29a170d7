//! A model transfer cut by a pulled cable: the bare node's veth in its
//! network namespace is set down mid-transfer (over a link shaped to
//! 400 Mbit/s, so that the cut falls inside it), and nothing is closed. The
//! node gives the transfer up with its Link F connection (the idle timeout,
//! within seconds), keeps its partial file, and once the cable is back
//! resumes from it and serves. Skipped, with a note, where namespaces
//! cannot be made.

use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use superfluid_link::digest::sha256_file;

use crate::fleet_partition::{curl_in_a, head_in_a, run_in};
use crate::fleet_support::{bin, run_cmd, serial, wait_until, Head, Node, Proc, TempDir, LIGHT};
use crate::fleet_transfer::cached;
use crate::fleet_transfer_cuts::{
    large_model_path, partly_held, resumed_from, wait_partly_written, LARGE,
};
use crate::netns::{NetnsPair, VETH_A, VETH_B};

/// `ip ARGS` or `tc ARGS`, which must succeed.
fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    ensure!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Whether the head in A lists node `name` up and serving `model`.
fn serving_in(pair: &NetnsPair, head: &Head, name: &str, model: &str) -> bool {
    let args = ["fleet", "nodes", "--json", "--url", &head.base()];
    let out = run_in(pair, &pair.a, &args, &head.dir);
    let nodes: Vec<Value> = serde_json::from_str(out.trim()).unwrap_or_default();
    nodes
        .iter()
        .any(|n| n["name"] == name && n["state"] == "up" && n["models"].to_string().contains(model))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_cut_by_a_pulled_cable_resumes_when_the_link_returns() -> Result<()> {
    let _serial = serial().await;
    let Some(pair) = NetnsPair::create("xfer")? else {
        eprintln!("SKIPPED a_transfer_cut_by_a_pulled_cable_resumes_when_the_link_returns: no network namespaces here");
        return Ok(());
    };
    let model = large_model_path();
    ensure!(
        model.is_file(),
        "{} is missing: run scripts/setup, which installs it",
        model.display()
    );
    let size = std::fs::metadata(&model)?.len();
    let sha256 = sha256_file(&model).context("hashing the large model")?;
    // 400 Mbit/s from the head: the 253 MB file takes about 5 s.
    run(
        "tc",
        &[
            "-n", &pair.a, "qdisc", "replace", "dev", VETH_A, "root", "tbf", "rate", "400mbit",
            "burst", "512kb", "latency", "100ms",
        ],
    )?;

    let head_dir = TempDir::new("xfer-head");
    let head = head_in_a(&pair, head_dir.path(), &model)?;
    let args = ["fleet", "token", "--url", &head.base()];
    let token = run_in(&pair, &pair.a, &args, &head.dir).trim().to_owned();

    let home = TempDir::new("xfer-bare");
    let mut cmd = pair.command(&pair.b, bin());
    cmd.args(["fleet", "join", &token, "--no-mdns", "--name", "cable"])
        .args(LIGHT)
        .env_remove("SUPERFLUID_MODEL")
        .env("SUPERFLUID_HOME", home.path());
    let mut node = Node {
        proc: Proc::spawn("bare cable", cmd)?,
        name: "cable".to_owned(),
    };
    let partial = cached(home.path(), &sha256, "partial");
    ensure!(
        wait_partly_written(&partial, size, Duration::from_secs(120)),
        "the node's partial file never held part of the model: {}",
        node.proc.log()
    );
    run("ip", &["-n", &pair.b, "link", "set", "dev", VETH_B, "down"])?;
    node.proc
        .wait_for_log(
            "the Link F connection to the head was lost",
            Duration::from_secs(20),
        )
        .context("the node should give the transfer up with its Link F connection")?;
    let held = partly_held(home.path(), &sha256, size)?;

    run("ip", &["-n", &pair.b, "link", "set", "dev", VETH_B, "up"])?;
    ensure!(
        wait_until(
            || serving_in(&pair, &head, &node.name, LARGE),
            Duration::from_secs(180)
        ),
        "the node did not serve {LARGE} after the cable came back: {}",
        node.proc.log()
    );
    let log = node.proc.log();
    ensure!(
        resumed_from(&log) == Some(held),
        "the node should resume from byte {held}, where the cut left it: {log}"
    );
    ensure!(
        sha256_file(&cached(home.path(), &sha256, "gguf"))? == sha256,
        "the resumed file's content is not the head's"
    );
    let body = json!({"model": LARGE, "prompt": "The colours of the rainbow are", "max_tokens": 4, "temperature": 0});
    let ran = run_cmd(
        "completion",
        curl_in_a(&pair, &head, "/v1/completions", Some(&body)),
        Duration::from_secs(120),
    )?;
    let answer: Value = serde_json::from_str(&ran.stdout)
        .with_context(|| format!("the completion is not JSON: {}", ran.describe()))?;
    ensure!(
        answer["choices"][0]["text"].is_string(),
        "the resumed node should answer: {answer}"
    );
    drop(node);
    drop(head);
    Ok(())
}
