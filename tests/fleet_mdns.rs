//! Discovery across a real LAN hop: two network namespaces joined by a veth
//! pair (see `netns.rs`). Skipped, with a note, where namespaces cannot be made.

use std::time::Duration;

use crate::fleet_support::{bin, run_cmd, serial, Head, TempDir, LIGHT};
use crate::netns::{check_mdns_across, NetnsPair};
use crate::support::model_path;

#[tokio::test]
async fn mdns_finds_the_head_across_namespaces() {
    let Some(pair) = NetnsPair::create("probe").expect("creating the namespaces") else {
        eprintln!("SKIPPED mdns_finds_the_head_across_namespaces: no network namespaces here");
        return;
    };
    check_mdns_across(&pair).expect("mDNS across the veth pair");
}

#[tokio::test]
async fn fleet_join_finds_the_head_by_mdns_across_namespaces() {
    let _serial = serial().await;
    let Some(pair) = NetnsPair::create("join").expect("creating the namespaces") else {
        eprintln!("SKIPPED fleet_join_finds_the_head_by_mdns_across_namespaces: no network namespaces here");
        return;
    };
    let head_dir = TempDir::new("mdns-head");
    let node_dir = TempDir::new("mdns-node");

    // The head in A, with mDNS, its HTTP API on A's loopback.
    let mut cmd = pair.command(&pair.a, bin());
    cmd.args(["head", "--http", "127.0.0.1:0", "--link", "0.0.0.0:7711"])
        .arg("--data-dir")
        .arg(head_dir.path())
        .arg("--model")
        .arg(model_path());
    let mut head = Head::spawn(head_dir.path(), cmd).expect("starting the head in namespace A");

    let mut mint = pair.command(&pair.a, bin());
    mint.args(["fleet", "token", "--url", &head.base(), "--data-dir"])
        .arg(head_dir.path());
    let minted = run_cmd("fleet token (A)", mint, Duration::from_secs(30)).unwrap();
    assert!(
        minted.status.success(),
        "fleet token in A failed: {}",
        minted.describe()
    );
    let token = minted.stdout.trim().to_owned();
    assert!(
        token.starts_with("sfj1."),
        "not a token: {}",
        minted.describe()
    );

    // The node in B, with no address but the token's.
    let mut join = pair.command(&pair.b, bin());
    join.args(["fleet", "join", &token, "--no-run", "--data-dir"])
        .arg(node_dir.path())
        .args(["--name", "faraway", "--model"])
        .arg(model_path())
        .args(LIGHT);
    let ran = run_cmd("fleet join (B)", join, Duration::from_secs(60));
    head.proc.kill();
    let ran = ran.unwrap();
    assert!(
        ran.status.success(),
        "the join from namespace B failed: {}",
        ran.describe()
    );
    let found = format!("found the head by mDNS at {}", pair.addr_a);
    assert!(
        ran.stderr.contains(&found),
        "the join should say it {found:?} (discovery, not the token's addresses): {}",
        ran.describe()
    );
    assert!(
        node_dir.path().join("node.json").is_file(),
        "the join from B did not write node.json: {}",
        ran.describe()
    );
    drop(head);
    drop(pair);
}
