//! A node stopped the way users and service managers stop it (Ctrl-C,
//! SIGTERM) says goodbye: the head stops routing to it at once, instead of
//! sending requests into a silent connection until Link F's 10 s idle
//! timeout. A request it had not started answering goes to another node.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fleet_support::{
    assert_leaves, node_header, node_named, nodes_json, serial, token, wait_until, Head, Node,
    TempDir,
};
use crate::stop_support::{
    assert_exits_cleanly, assert_stream_complete, read_rest, story_stream, terminate,
};
use crate::support::chat;

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

    terminate(&node.proc);
    let signalled = Instant::now();
    assert_exits_cleanly(
        &mut node.proc,
        Duration::from_secs(10),
        "a node sent SIGTERM",
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

/// A head and two nodes, `first` and `second`, joined to it, after their
/// data dirs: bound in this order, the dirs are removed last.
fn fleet_of_two() -> (Vec<TempDir>, Head, Vec<Node>) {
    let head_dir = TempDir::new("head");
    let head = Head::start(head_dir.path(), &[]).expect("starting superfluid head");
    let mut dirs = vec![head_dir];
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
    (dirs, head, nodes)
}

/// Which of `first` and `second` (index, name) runs a generation now.
fn busy_node(head: &Head) -> Option<(usize, &'static str)> {
    let mut busy = None;
    wait_until(
        || {
            busy = nodes_json(head).ok().and_then(|listed| {
                ["first", "second"]
                    .into_iter()
                    .enumerate()
                    .find(|(_, name)| {
                        node_named(&listed, name)
                            .is_some_and(|n| n["in_flight"].as_u64() == Some(1))
                    })
            });
            busy.is_some()
        },
        Duration::from_secs(10),
    );
    busy
}

// Multi-threaded: the request runs on its own task while this one polls
// `fleet nodes` with blocking calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_node_is_stopped_at_once_before_its_first_token_is_answered_by_another() {
    let _serial = serial().await;
    let (_dirs, head, mut nodes) = fleet_of_two();

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
    let busy = busy_node(&head);
    let Some((stopped, _)) = busy else {
        panic!("no node took the request: {:?}", nodes_json(&head).ok());
    };
    let other = ["first", "second"][1 - stopped];
    // The first signal lets the generation finish; the second stops now.
    terminate(&nodes[stopped].proc);
    nodes[stopped]
        .proc
        .wait_for_log("finishing the running generations", Duration::from_secs(10))
        .expect("the node drains");
    terminate(&nodes[stopped].proc);

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_with_sigterm_finishes_its_running_generation_first() {
    let _serial = serial().await;
    let (_dirs, head, mut nodes) = fleet_of_two();

    let mut response = head.post_chat(&story_stream(96)).await;
    assert_eq!(response.status().as_u16(), 200);
    let serving = node_header(&response).expect("the stream names its node");
    let stopped = if serving == "first" { 0 } else { 1 };
    let mut text = String::new();
    let first = response.chunk().await.expect("reading the stream");
    text.push_str(&String::from_utf8_lossy(&first.expect("a first chunk")));
    terminate(&nodes[stopped].proc);
    let signalled = Instant::now();
    read_rest(&mut response, &mut text).await;
    assert_stream_complete(&text);
    let node = &mut nodes[stopped];
    assert_exits_cleanly(
        &mut node.proc,
        Duration::from_secs(10),
        "a node after its generation",
    );
    let log = node.proc.log();
    assert!(log.contains("the running generations finished"), "{log}");
    assert_leaves(
        &head,
        &serving,
        signalled,
        Duration::from_secs(30),
        "SIGTERM and its generation",
    );
    // The fleet still answers, from the other node.
    let (status, body, node) = head.chat("Hello", 4).await.expect("asking the head");
    assert_eq!(status, 200, "{body}");
    assert_eq!(node.as_deref(), Some(["first", "second"][1 - stopped]));
}
