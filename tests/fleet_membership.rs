//! Fleet membership end to end: a `superfluid head`, nodes that join it with
//! `superfluid fleet join TOKEN`, and the `fleet` admin commands, all real
//! processes on loopback with the real model.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use crate::fleet_support::{
    assert_joined, assert_leaves, assert_refused, free_udp_port, join_no_run, node_named,
    nodes_json, serial, state_of, token, Head, Node, TempDir,
};

/// How long a node may take to load the model and join.
const JOIN: Duration = Duration::from_secs(60);

/// Starts a head in a fresh data dir.
fn head(tag: &str) -> (TempDir, Head) {
    let dir = TempDir::new(tag);
    let head = Head::start(dir.path(), &[]).expect("starting superfluid head");
    (dir, head)
}

/// A node joined with its own single-use token and listed as `up`.
fn joined_node(head: &Head, name: &str) -> (TempDir, Node) {
    let tok = token(head, &[]).expect("minting a token");
    let dir = TempDir::new(name);
    let mut node = Node::join(&tok, dir.path(), name, &[]).expect("starting fleet join");
    node.wait_up(head, JOIN).expect("the node joins");
    (dir, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_join_with_tokens_and_both_serve() {
    let _serial = serial().await;
    let (_hd, head) = head("head");
    let (t1, t2) = (
        token(&head, &["--uses", "1"]).unwrap(),
        token(&head, &["--uses", "1"]).unwrap(),
    );
    assert_ne!(t1, t2, "two mints gave the same token");
    let (d1, d2) = (TempDir::new("alpha"), TempDir::new("beta"));
    let mut alpha = Node::join(&t1, d1.path(), "alpha", &[]).unwrap();
    let mut beta = Node::join(&t2, d2.path(), "beta", &[]).unwrap();
    alpha.wait_up(&head, JOIN).unwrap();
    beta.wait_up(&head, JOIN).unwrap();

    let nodes = nodes_json(&head).unwrap();
    assert_eq!(
        nodes.len(),
        2,
        "fleet nodes --json should list two nodes: {nodes:?}"
    );
    for name in ["alpha", "beta"] {
        let node =
            node_named(&nodes, name).unwrap_or_else(|| panic!("{name} not listed: {nodes:?}"));
        for key in [
            "id",
            "name",
            "address",
            "models",
            "slots",
            "context",
            "state",
            "connected_since",
            "last_heartbeat",
            "served",
            "in_flight",
            "ineligible",
        ] {
            assert!(node.get(key).is_some(), "{name} lacks key {key:?}: {node}");
        }
        assert_eq!(node["state"], "up", "{node}");
        assert_eq!(node["slots"], 2, "--slots 2 should be listed: {node}");
        assert!(
            node["models"].to_string().contains(crate::support::MODEL),
            "{name} should list the model: {node}"
        );
    }
    assert!(
        head.wait_healthy(Duration::from_secs(10)).await,
        "/health is not 200 with two nodes up"
    );

    // Eight short chats, four at a time.
    let mut served_by: BTreeMap<String, u32> = BTreeMap::new();
    for round in 0..2 {
        let prompts: Vec<String> = (0..4)
            .map(|i| format!("Say the number {}.", round * 4 + i))
            .collect();
        let chats = prompts.iter().map(|p| head.chat(p, 8));
        for result in futures::future::join_all(chats).await {
            let (status, body, node) = result.unwrap();
            assert_eq!(status, 200, "chat failed: {body}");
            let node = node.unwrap_or_else(|| panic!("no x-superfluid-node header: {body}"));
            *served_by.entry(node).or_default() += 1;
        }
    }
    for name in ["alpha", "beta"] {
        assert!(
            served_by.contains_key(name),
            "eight chats (four at a time) should reach both nodes; x-superfluid-node said {served_by:?}"
        );
    }
    let nodes = nodes_json(&head).unwrap();
    for name in ["alpha", "beta"] {
        let node = node_named(&nodes, name).unwrap();
        assert!(
            node["served"].as_u64().unwrap_or(0) > 0,
            "{name} should have served > 0 after answering requests: {node}"
        );
    }
    let total: u64 = nodes
        .iter()
        .map(|n| n["served"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(
        total, 8,
        "served counts should add up to the eight chats: {nodes:?}"
    );
}

#[tokio::test]
async fn expired_token_is_refused() {
    let _serial = serial().await;
    let (_hd, head) = head("head");
    let tok = token(&head, &["--ttl", "1s"]).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let dir = TempDir::new("late");
    let ran = join_no_run(&tok, dir.path(), "late").unwrap();
    assert_refused(&ran, &["expired"]);
    assert!(
        !dir.path().join("node.json").exists(),
        "a refused join wrote node.json"
    );
    let page = head.metrics().await;
    assert!(
        page.contains("superfluid_join_refusals_total{reason=\"expired\"} 1\n"),
        "the refusal is counted by reason:\n{page}"
    );
}

#[tokio::test]
async fn reused_token_is_refused() {
    let _serial = serial().await;
    let (_hd, head) = head("head");
    let tok = token(&head, &[]).unwrap();
    let first = TempDir::new("first");
    assert_joined(
        &join_no_run(&tok, first.path(), "first").unwrap(),
        first.path(),
    );
    let second = TempDir::new("second");
    let ran = join_no_run(&tok, second.path(), "second").unwrap();
    assert_refused(&ran, &["already used"]);
    assert!(
        !second.path().join("node.json").exists(),
        "a refused join wrote node.json"
    );
}

#[tokio::test]
async fn uses_exhausted_token_is_refused() {
    let _serial = serial().await;
    let (_hd, head) = head("head");
    let tok = token(&head, &["--uses", "2"]).unwrap();
    for name in ["one", "two"] {
        let dir = TempDir::new(name);
        assert_joined(&join_no_run(&tok, dir.path(), name).unwrap(), dir.path());
    }
    let dir = TempDir::new("three");
    let ran = join_no_run(&tok, dir.path(), "three").unwrap();
    assert_refused(&ran, &["all 2 of its uses are spent"]);
}

/// `token` with one character in the middle of its signature changed to
/// another base64url character.
fn tamper(token: &str) -> String {
    let sig_start = token.rfind('.').expect("a token has a signature part") + 1;
    let at = sig_start + (token.len() - sig_start) / 2;
    let mut bytes = token.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).expect("ascii")
}

#[tokio::test]
async fn tampered_token_is_refused() {
    let _serial = serial().await;
    let (_hd, head) = head("head");
    let tok = token(&head, &[]).unwrap();
    let bad = tamper(&tok);
    assert_ne!(bad, tok);
    let dir = TempDir::new("tampered");
    let ran = join_no_run(&bad, dir.path(), "tampered").unwrap();
    assert_refused(&ran, &["signature"]);
    assert!(
        ran.stderr.contains("join token refused") || ran.stderr.contains("altered"),
        "the refusal should say the token was refused as altered: {}",
        ran.describe()
    );
    // The untouched token still works: the refusal did not spend it.
    assert_joined(
        &join_no_run(&tok, dir.path(), "tampered").unwrap(),
        dir.path(),
    );
}

#[tokio::test]
async fn token_from_another_fleet_is_refused() {
    let _serial = serial().await;
    // Head B mints a token naming its key and its Link F port; then head A
    // takes that port, so the token leads the node to A. The node pins B's
    // key, so A must not be able to enrol it, and the join must end with a
    // message naming the mismatch rather than retrying forever.
    let port = free_udp_port();
    let link = format!("127.0.0.1:{port}");
    let (dir_b, dir_a) = (TempDir::new("head-b"), TempDir::new("head-a"));
    let foreign = {
        let b = Head::start(dir_b.path(), &["--link", &link]).unwrap();
        token(&b, &[]).unwrap()
    };
    let a = Head::start(dir_a.path(), &["--link", &link]).unwrap();
    assert_eq!(a.link.port(), port);
    let dir = TempDir::new("stray");
    let ran = join_no_run(&foreign, dir.path(), "stray").unwrap_or_else(|e| {
        panic!(
            "`fleet join --no-run` with another fleet's token, led to a head whose key is not \
             the token's, should exit non-zero with a clear message; it did not end: {e:#}"
        )
    });
    assert_refused(
        &ran,
        &[
            "not the pinned one",
            "is for fleet",
            "another fleet",
            "another head",
            "fingerprint",
        ],
    );
    assert!(
        !dir.path().join("node.json").exists(),
        "a refused join wrote node.json"
    );
    let nodes = nodes_json(&a).unwrap();
    assert!(
        nodes.is_empty(),
        "head A enrolled a node with B's token: {nodes:?}"
    );
}

#[tokio::test]
async fn revoked_node_is_refused() {
    let _serial = serial().await;
    let (_hd, head) = head("head");
    let (dir, node) = joined_node(&head, "gone");
    let ran = head.fleet(&["revoke", "gone"]).unwrap();
    assert!(
        ran.status.success(),
        "fleet revoke failed: {}",
        ran.describe()
    );
    drop(node);
    let mut again = Node::run(dir.path(), "gone").unwrap();
    again
        .proc
        .wait_for_log("was revoked from fleet", Duration::from_secs(30))
        .expect("a revoked node restarted from its data dir should be told it was revoked");
    assert_ne!(
        state_of(&head, "gone").as_deref(),
        Some("up"),
        "a revoked node is listed up"
    );
}

#[tokio::test]
async fn copied_data_dir_is_refused_while_the_first_runs() {
    let _serial = serial().await;
    let (_hd, head) = head("head");
    let (dir, mut first) = joined_node(&head, "original");
    let copy = dir.copy("copy");
    let mut twin = Node::run(copy.path(), "copy").unwrap();
    twin.proc
        .wait_for_log("already connected", Duration::from_secs(30))
        .expect("a node started from a copied data dir should be refused as a duplicate");
    assert!(first.proc.try_wait().is_none(), "the original node exited");
    first.wait_up(&head, Duration::from_secs(5)).unwrap();
}

#[tokio::test]
async fn unknown_node_key_is_refused() {
    let _serial = serial().await;
    let (_hd, head) = head("head");
    let tok = token(&head, &[]).unwrap();
    let joined = TempDir::new("joined");
    assert_joined(
        &join_no_run(&tok, joined.path(), "joined").unwrap(),
        joined.path(),
    );
    // The credential without its key: the node makes a fresh key the head
    // has never enrolled.
    let stranger = TempDir::new("stranger");
    std::fs::copy(
        joined.path().join("node.json"),
        stranger.path().join("node.json"),
    )
    .unwrap();
    let mut node = Node::run(stranger.path(), "stranger").unwrap();
    node.proc
        .wait_for_log("is not enrolled in fleet", Duration::from_secs(30))
        .expect("a node whose key was never enrolled should be told so");
    assert_eq!(
        nodes_json(&head).unwrap().len(),
        1,
        "only the joined node is enrolled"
    );
}

#[tokio::test]
async fn used_nonces_survive_a_head_restart() {
    let _serial = serial().await;
    let dir = TempDir::new("head");
    // The same Link F port both times, so the token still leads to the head.
    let link = format!("127.0.0.1:{}", free_udp_port());
    let tok = {
        let head = Head::start(dir.path(), &["--link", &link]).unwrap();
        let tok = token(&head, &[]).unwrap();
        let first = TempDir::new("first");
        assert_joined(
            &join_no_run(&tok, first.path(), "first").unwrap(),
            first.path(),
        );
        tok
    };
    let _head = Head::start(dir.path(), &["--link", &link]).unwrap();
    let second = TempDir::new("second");
    let ran = join_no_run(&tok, second.path(), "second").unwrap();
    assert_refused(&ran, &["already used"]);
}

#[tokio::test]
async fn revoke_closes_the_connection_within_a_second_and_reconnects_are_refused() {
    let _serial = serial().await;
    let (_hd, head) = head("head");
    let (_dir, mut node) = joined_node(&head, "cut");
    let ran = head.fleet(&["revoke", "cut"]).unwrap();
    assert!(
        ran.status.success(),
        "fleet revoke failed: {}",
        ran.describe()
    );
    assert_leaves(
        &head,
        "cut",
        Instant::now(),
        Duration::from_secs(1),
        "`fleet revoke` returned",
    );
    node.proc
        .wait_for_log("was revoked from fleet", Duration::from_secs(30))
        .expect("the revoked node should log the head's refusal when it reconnects");
    let (status, body, _) = head.chat("Hello", 4).await.unwrap();
    assert_ne!(
        status, 200,
        "a fleet whose only node is revoked answered: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_stops_new_work_and_lets_running_generations_finish() {
    let _serial = serial().await;
    let (_hd, head) = head("head");
    let (_d1, _alpha) = joined_node(&head, "alpha");
    let (_d2, _beta) = joined_node(&head, "beta");
    assert!(head.wait_healthy(Duration::from_secs(10)).await);

    let body = json!({
        "model": crate::support::MODEL,
        "messages": [{"role": "user", "content": "Count from 1 to 300, separated by commas."}],
        "temperature": 0,
        "max_tokens": 160,
        "stream": true,
    });
    let resp = head
        .client
        .post(head.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let busy = crate::fleet_support::node_header(&resp)
        .expect("no x-superfluid-node header on the stream");
    let other = if busy == "alpha" { "beta" } else { "alpha" };
    let mut stream = resp.bytes_stream();
    // Wait for the first token so the generation is really running.
    let mut text = String::new();
    while !text.contains("data:") {
        let chunk = stream
            .next()
            .await
            .expect("the stream ended before its first event")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }

    let ran = tokio::task::block_in_place(|| head.fleet(&["drain", &busy])).unwrap();
    assert!(
        ran.status.success(),
        "fleet drain failed: {}",
        ran.describe()
    );
    let before = text.matches("data:").count();
    let state = tokio::task::block_in_place(|| state_of(&head, &busy));
    assert_eq!(
        state.as_deref(),
        Some("draining"),
        "{busy} should be listed draining"
    );

    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("the running stream broke after the drain");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let after = text.matches("data:").count() - before;
    assert!(
        text.trim_end().ends_with("data: [DONE]"),
        "the stream running on the drained node should complete: {text}"
    );
    assert!(
        text.contains("\"finish_reason\":\"length\"")
            || text.contains("\"finish_reason\":\"stop\""),
        "the stream should end with a finish reason: {text}"
    );
    assert!(
        after > 0,
        "the stream had ended before the drain; the test proved nothing: {text}"
    );

    for i in 0..4 {
        let (status, body, node) = head.chat(&format!("Say {i}."), 4).await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            node.as_deref(),
            Some(other),
            "after draining {busy}, new work should go to {other}"
        );
    }

    // With both drained, requests and the health check say so.
    let ran = tokio::task::block_in_place(|| head.fleet(&["drain", other])).unwrap();
    assert!(
        ran.status.success(),
        "fleet drain failed: {}",
        ran.describe()
    );
    let (status, body, node) = head.chat("Say hi.", 4).await.unwrap();
    assert_eq!((status, node), (503, None), "{body}");
    assert_eq!(body["error"]["code"], "nodes_draining", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("is draining"), "{body}");
    let health = head.client.get(head.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), 503);
    let health: serde_json::Value = health.json().await.unwrap();
    assert_eq!(health["status"], "draining", "{health}");
}

#[tokio::test]
async fn head_restart_nodes_return_and_serve_within_10s() {
    let _serial = serial().await;
    let dir = TempDir::new("head");
    let link = format!("127.0.0.1:{}", free_udp_port());
    let head = Head::start(dir.path(), &["--link", &link]).unwrap();
    let (_nd, _node) = joined_node(&head, "stays");
    assert!(head.wait_healthy(Duration::from_secs(10)).await);
    drop(head);

    let head = Head::start(dir.path(), &["--link", &link]).unwrap();
    let started = Instant::now();
    let healthy = head.wait_healthy(Duration::from_secs(10)).await;
    if !healthy {
        // How late it is, for the failure message.
        let late = head.wait_healthy(Duration::from_secs(30)).await;
        panic!(
            "/health is not 200 within 10 s of the head restarting; {}; nodes: {:?}",
            if late {
                format!("it became 200 after {:?}", started.elapsed())
            } else {
                "nor within 40 s".to_owned()
            },
            nodes_json(&head).ok()
        );
    }
    let (status, body, node) = head.chat("Say hi.", 4).await.unwrap();
    assert_eq!(status, 200, "chat after the head restart failed: {body}");
    assert_eq!(node.as_deref(), Some("stays"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "serving again took {:?} after the head restarted",
        started.elapsed()
    );
}
