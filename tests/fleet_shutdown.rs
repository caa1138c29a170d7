//! A node stopped the way users and service managers stop it (Ctrl-C,
//! SIGTERM) says goodbye: the head stops routing to it at once, instead of
//! sending requests into a silent connection until Link F's 10 s idle
//! timeout. A request it had not started answering goes to another node.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fleet_support::{
    assert_leaves, node_header, node_named, nodes_json, serial, token, wait_until, Head, Node,
    TempDir,
};
use crate::support::chat;

/// Sends SIGTERM to `node`'s process.
fn terminate(node: &Node) {
    let pid = node.proc.id().to_string();
    let sent = Command::new("sh")
        .args(["-c", &format!("kill -TERM {pid}")])
        .status()
        .expect("running kill");
    assert!(sent.success(), "kill -TERM {pid} failed");
}

#[tokio::test]
async fn a_node_stopped_with_sigterm_leaves_the_fleet_at_once() {
    let _serial = serial().await;
    let head_dir = TempDir::new("head");
    let head = Head::start(head_dir.path(), &[]).expect("starting superfluid head");
    let tok = token(&head, &[]).expect("minting a token");
    let node_dir = TempDir::new("leaving");
    let mut node = Node::join(&tok, node_dir.path(), "leaving", &[]).expect("starting the node");
    node.wait_up(&head, Duration::from_secs(60))
        .expect("the node joins");

    terminate(&node);
    let signalled = Instant::now();
    let exited = wait_until(|| node.proc.try_wait().is_some(), Duration::from_secs(10));
    assert!(
        exited,
        "the node still runs 10 s after SIGTERM:\n{}",
        node.proc.log()
    );
    let status = node.proc.try_wait();
    assert!(
        status.is_some_and(|s| s.success()),
        "a node stopped with SIGTERM should exit cleanly, got {status:?}:\n{}",
        node.proc.log()
    );
    assert!(
        node.proc
            .log()
            .contains("closing the connection to the head"),
        "{}",
        node.proc.log()
    );

    // Well inside the idle timeout, the head no longer counts the node...
    assert_leaves(
        &head,
        "leaving",
        signalled,
        Duration::from_secs(5),
        "SIGTERM",
    );
    // ...and a request is told so (503) rather than sent to the node.
    let (status, body, _) = head.chat("Hello", 4).await.expect("asking the head");
    assert_eq!(status, 503, "with its only node gone: {body}");
}

// Multi-threaded: the request runs on its own task while this one polls
// `fleet nodes` with blocking calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_node_stops_before_its_first_token_is_answered_by_another() {
    let _serial = serial().await;
    let head_dir = TempDir::new("head");
    let head = Head::start(head_dir.path(), &[]).expect("starting superfluid head");
    let mut dirs = Vec::new();
    let mut nodes = Vec::new();
    for name in ["first", "second"] {
        let tok = token(&head, &[]).expect("minting a token");
        let dir = TempDir::new(name);
        let mut node = Node::join(&tok, dir.path(), name, &[]).expect("starting the node");
        node.wait_up(&head, Duration::from_secs(60))
            .expect("the node joins");
        dirs.push(dir);
        nodes.push(node);
    }

    // About 700 prompt tokens: seconds of prefill on one thread, time enough
    // to stop the node computing it before its first token.
    let prompt = "The quick brown fox jumps over the lazy dog. ".repeat(70);
    let asking = {
        let request = head
            .client
            .post(head.url("/v1/chat/completions"))
            .json(&chat(json!([{"role": "user", "content": prompt}]), 8))
            .timeout(Duration::from_secs(120));
        tokio::spawn(async move {
            let response = request.send().await?;
            let node = node_header(&response);
            let status = response.status().as_u16();
            let body: Value = response.json().await?;
            Ok::<_, reqwest::Error>((status, body, node))
        })
    };
    let mut busy = None;
    let found = wait_until(
        || {
            busy = nodes_json(&head).ok().and_then(|listed| {
                ["first", "second"].into_iter().find(|name| {
                    node_named(&listed, name).is_some_and(|n| n["in_flight"].as_u64() == Some(1))
                })
            });
            busy.is_some()
        },
        Duration::from_secs(10),
    );
    assert!(
        found,
        "no node took the request: {:?}",
        nodes_json(&head).ok()
    );
    let (stopped, other) = match busy {
        Some("first") => (&nodes[0], "second"),
        _ => (&nodes[1], "first"),
    };
    terminate(stopped);

    let answered = asking.await.expect("the request task");
    let (status, body, node) = answered.expect("asking the head");
    assert_eq!(status, 200, "the other node should answer: {body}");
    assert_eq!(node.as_deref(), Some(other), "{body}");
    let content = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or("");
    assert!(!content.is_empty(), "{body}");
    assert!(
        body["usage"]["prompt_tokens"].as_u64().unwrap_or(0) > 500,
        "{body}"
    );
    let metrics = head.metrics().await;
    assert!(
        metrics.contains("superfluid_generations_retried_total 1\n"),
        "{metrics}"
    );
}
