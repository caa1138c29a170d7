//! `superfluid serve` and `superfluid head` stopped the way users and
//! service managers stop them (Ctrl-C, SIGTERM) take no new connections but
//! answer the requests they have, streams to their end, before they exit.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::fleet_support::{bin, serial, token, Head, Node, Proc, TempDir, LIGHT};
use crate::stop_support::{
    assert_exits_cleanly, assert_stream_complete, read_rest, story_stream, terminate,
};
use crate::support::model_path;

/// Starts a light `superfluid serve` (one model, so one engine host) on a
/// free port; the process and its base URL.
pub fn start_serve() -> (Proc, String) {
    start_serve_with(&[])
}

/// [`start_serve`] with `extra` flags.
pub fn start_serve_with(extra: &[&str]) -> (Proc, String) {
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--http", "127.0.0.1:0", "--model"])
        .arg(model_path())
        .args(LIGHT)
        .args(extra);
    let mut serve = Proc::spawn("serve", cmd).expect("starting superfluid serve");
    let log = serve
        .wait_for_log("on http://", Duration::from_secs(60))
        .expect("serve says where it listens");
    let addr = log
        .split("on http://")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| c.is_whitespace() || c == '"').next())
        .expect("an address after `on http://`")
        .to_owned();
    (serve, format!("http://{addr}"))
}

/// Waits (5 s at most) until a new connection to `base` is refused.
async fn assert_refuses_connections(base: &str) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let tried = client
            .get(format!("{base}/health"))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match tried {
            Err(e) if e.is_connect() => return,
            _ if Instant::now() >= deadline => {
                panic!("a stopping server should refuse new connections; got {tried:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Sends SIGTERM to `proc` once `response`, a stream, has sent its first
/// chunk; fails unless new connections to `base` are then refused and the
/// stream still runs to its end.
async fn stop_during_stream(proc: &mut Proc, mut response: reqwest::Response, base: &str) {
    assert_eq!(response.status().as_u16(), 200);
    let first = response.chunk().await.expect("reading the stream");
    let mut text = String::from_utf8_lossy(&first.expect("a first chunk")).into_owned();
    terminate(proc);
    proc.wait_for_log("taking no new requests", Duration::from_secs(10))
        .expect("a graceful stop");
    assert_refuses_connections(base).await;
    read_rest(&mut response, &mut text).await;
    assert_stream_complete(&text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_stopped_with_sigterm_finishes_its_running_stream_first() {
    let _serial = serial().await;
    let (mut serve, base) = start_serve();
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&story_stream(128))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("sending a streamed chat request");
    stop_during_stream(&mut serve, response, &base).await;
    assert_exits_cleanly(
        &mut serve,
        Duration::from_secs(15),
        "superfluid serve after its stream",
    );
    let log = serve.log();
    assert!(log.contains("the running generations finished"), "{log}");
    assert!(log.contains("the open requests are answered"), "{log}");
}

#[tokio::test]
async fn serve_stopped_with_sigterm_while_idle_exits_at_once() {
    let _serial = serial().await;
    let (mut serve, _) = start_serve();
    terminate(&serve);
    assert_exits_cleanly(
        &mut serve,
        Duration::from_secs(5),
        "an idle superfluid serve",
    );
    let log = serve.log();
    assert!(log.contains("stopped"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_stopped_with_sigterm_finishes_its_open_streams_first() {
    let _serial = serial().await;
    let head_dir = TempDir::new("head");
    let mut head = Head::start(head_dir.path(), &[]).expect("starting superfluid head");
    let tok = token(&head, &[]).expect("minting a token");
    let node_dir = TempDir::new("node");
    let mut node = Node::join(&tok, node_dir.path(), "node", &[]).expect("starting the node");
    node.wait_up(&head, Duration::from_secs(60))
        .expect("the node joins");

    let response = head.post_chat(&story_stream(128)).await;
    let base = head.base();
    stop_during_stream(&mut head.proc, response, &base).await;
    assert_exits_cleanly(
        &mut head.proc,
        Duration::from_secs(15),
        "a head after its stream",
    );
    // The node was told why the head went, and stays to rejoin it.
    node.proc
        .wait_for_log("the head is shutting down", Duration::from_secs(5))
        .expect("the node hears that the head shut down");
    assert!(node.proc.try_wait().is_none(), "{}", node.proc.log());
}
