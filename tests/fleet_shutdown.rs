//! A node stopped the way users and service managers stop it (Ctrl-C,
//! SIGTERM) says goodbye: the head stops routing to it at once, instead of
//! sending requests into a silent connection until Link F's 10 s idle
//! timeout.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::fleet_support::{assert_leaves, serial, token, wait_until, Head, Node, TempDir};

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

    let pid = node.proc.id().to_string();
    let sent = Command::new("sh")
        .args(["-c", &format!("kill -TERM {pid}")])
        .status()
        .expect("running kill");
    assert!(sent.success(), "kill -TERM {pid} failed");
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
