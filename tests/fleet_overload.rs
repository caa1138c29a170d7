//! Overload: a node takes its slots plus a bounded queue (`--max-queue`),
//! and past that the head answers 429 at once with `Retry-After` and the
//! queue depth; clients that go away free their places and their slots;
//! a drained node stopped afterwards loses no request.

use std::time::Duration;

use futures::future::join_all;
use serde_json::Value;

use crate::fleet_support::{node_header, serial, state_of, token, Head, Node, TempDir};
use crate::stop_support::{
    assert_exits_cleanly, assert_stream_complete, read_rest, story_stream, terminate,
};
use crate::support::Server;

/// The value of the first sample of `name` on a metrics page.
fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn metrics(server: &Server) -> String {
    let resp = server.client.get(server.url("/metrics")).send().await;
    match resp {
        Ok(resp) => resp.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Polls the server's metrics until `check` holds for them (10 s at most).
async fn wait_metrics(server: &Server, what: &str, check: impl Fn(&str) -> bool) {
    for _ in 0..200 {
        if check(&metrics(server).await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}; metrics:\n{}", metrics(server).await);
}

async fn open_stream(server: &Server, max_tokens: u32) -> reqwest::Response {
    server
        .client
        .post(server.url("/v1/chat/completions"))
        .json(&story_stream(max_tokens))
        .send()
        .await
        .expect("sending a request")
}

/// Checks a busy fleet's 429: its headers and OpenAI's error shape.
async fn assert_fleet_busy(resp: reqwest::Response) {
    assert_eq!(resp.status().as_u16(), 429);
    let header = |name: &str| -> u64 {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no numeric {name} header: {:?}", resp.headers()))
    };
    assert!(header("retry-after") >= 1, "Retry-After is whole seconds");
    let _depth = header("x-superfluid-queue");
    let body: Value = resp.json().await.expect("a JSON error body");
    assert_eq!(body["error"]["type"], "fleet_busy", "{body}");
    assert_eq!(body["error"]["code"], "fleet_busy", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("retry after"), "{body}");
}

#[tokio::test]
async fn more_requests_than_slots_and_queue_get_429_and_the_rest_complete() {
    let _serial = serial().await;
    let server = Server::start(&["--slots", "1", "--max-queue", "1"]).expect("starting serve");
    let sent = (0..6).map(|_| async {
        let asked = std::time::Instant::now();
        let mut resp = open_stream(&server, 48).await;
        if resp.status().as_u16() == 200 {
            let mut text = String::new();
            read_rest(&mut resp, &mut text).await;
            Ok(text)
        } else {
            Err((resp, asked.elapsed()))
        }
    });
    let answers = join_all(sent).await;
    let mut completed = 0;
    let mut refused = 0;
    let mut slowest_refusal = Duration::ZERO;
    for answer in answers {
        match answer {
            Ok(text) => {
                assert_stream_complete(&text);
                completed += 1;
            }
            Err((resp, took)) => {
                assert_fleet_busy(resp).await;
                refused += 1;
                slowest_refusal = slowest_refusal.max(took);
            }
        }
    }
    // A figure for docs/operations.md, not a timed assertion.
    eprintln!("the slowest 429 came {slowest_refusal:?} after its request was sent");
    assert!(completed >= 2, "the slot and the queue place were served");
    assert!(refused >= 1, "six at once on one slot and one queue place");
    let page = metrics(&server).await;
    assert_eq!(
        sample(&page, "superfluid_requests_refused_total"),
        Some(f64::from(refused)),
        "{page}"
    );
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_frees_its_slot() {
    let _serial = serial().await;
    let server = Server::start(&["--slots", "1", "--max-queue", "0"]).expect("starting serve");
    let mut resp = open_stream(&server, 1000).await;
    assert_eq!(resp.status().as_u16(), 200);
    let mut text = String::new();
    while !text.contains("\"content\"") {
        let chunk = resp.chunk().await.expect("reading the stream");
        text.push_str(&String::from_utf8_lossy(
            &chunk.expect("the stream ended early"),
        ));
    }
    wait_metrics(&server, "the node reports its slot busy", |page| {
        sample(page, "superfluid_node_busy_slots") == Some(1.0)
    })
    .await;
    drop(resp);

    // The node's own load report says the slot is free again.
    wait_metrics(
        &server,
        "the slot stays busy after the client left",
        |page| {
            sample(page, "superfluid_node_busy_slots") == Some(0.0)
                && sample(page, "superfluid_node_in_flight") == Some(0.0)
                && sample(page, "superfluid_generations_cancelled_total") == Some(1.0)
        },
    )
    .await;
    // And it serves the next request.
    let mut next = open_stream(&server, 8).await;
    assert_eq!(next.status().as_u16(), 200);
    let mut text = String::new();
    read_rest(&mut next, &mut text).await;
    assert_stream_complete(&text);
}

// Multi-threaded: the queued requests wait on their own tasks (a stream's
// headers come with its first text) while this one reads the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_client_that_gives_up_leaves_the_queue() {
    let _serial = serial().await;
    let server = Server::start(&["--slots", "1", "--max-queue", "1"]).expect("starting serve");
    let running = open_stream(&server, 1000).await;
    assert_eq!(running.status().as_u16(), 200);
    let queue = |max_tokens: u32| {
        let request = server
            .client
            .post(server.url("/v1/chat/completions"))
            .json(&story_stream(max_tokens));
        tokio::spawn(request.send())
    };
    let queued = queue(1000);
    wait_metrics(&server, "the second request is queued", |page| {
        sample(page, "superfluid_node_in_flight") == Some(2.0)
            && sample(page, "superfluid_node_queue_depth") == Some(1.0)
    })
    .await;
    assert_fleet_busy(open_stream(&server, 8).await).await;

    // The queued client goes away: its place is free for the next.
    queued.abort();
    wait_metrics(&server, "the queued request still counts", |page| {
        sample(page, "superfluid_node_in_flight") == Some(1.0)
            && sample(page, "superfluid_node_queue_depth") == Some(0.0)
            && sample(page, "superfluid_generations_cancelled_total") == Some(1.0)
    })
    .await;
    let next = queue(8);
    wait_metrics(&server, "the freed place takes a request", |page| {
        sample(page, "superfluid_node_in_flight") == Some(2.0)
            && sample(page, "superfluid_requests_refused_total") == Some(1.0)
    })
    .await;
    next.abort();
    drop(running);
}

// Multi-threaded: `fleet drain` runs blocking while streams are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_stopped_afterwards_loses_no_request() {
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

    let mut running = head.post_chat(&story_stream(96)).await;
    assert_eq!(running.status().as_u16(), 200);
    let serving = node_header(&running).expect("the stream names its node");
    let drained = usize::from(serving != "first");
    let other = ["first", "second"][1 - drained];
    let mut text = String::new();
    let first = running.chunk().await.expect("reading the stream");
    text.push_str(&String::from_utf8_lossy(&first.expect("a first chunk")));

    let ran = tokio::task::block_in_place(|| head.fleet(&["drain", &serving])).unwrap();
    assert!(ran.status.success(), "fleet drain: {}", ran.describe());
    let state = tokio::task::block_in_place(|| state_of(&head, &serving));
    assert_eq!(state.as_deref(), Some("draining"));

    // Stopping the drained node while requests arrive: none is lost.
    terminate(&nodes[drained].proc);
    let prompts: Vec<String> = (0..3).map(|i| format!("Say {i}.")).collect();
    let asked = prompts.iter().map(|p| head.chat(p, 4));
    for (status, body, node) in join_all(asked).await.into_iter().map(Result::unwrap) {
        assert_eq!(status, 200, "{body}");
        assert_eq!(node.as_deref(), Some(other), "{body}");
    }
    read_rest(&mut running, &mut text).await;
    assert_stream_complete(&text);
    assert_exits_cleanly(
        &mut nodes[drained].proc,
        Duration::from_secs(10),
        "a drained node sent SIGTERM",
    );
    let (status, body, node) = head.chat("Hello", 4).await.expect("asking the head");
    assert_eq!(status, 200, "{body}");
    assert_eq!(node.as_deref(), Some(other));
}

#[tokio::test]
async fn the_openai_python_client_reads_fleet_busy_and_its_retries_get_in() {
    let _serial = serial().await;
    let server = Server::start(&["--slots", "1", "--max-queue", "0"]).expect("starting serve");
    crate::python_clients::python_cases(
        "openai_overload.py",
        &server.url("/v1"),
        &[],
        &[
            "full_fleet_raises_rate_limit_error_fleet_busy",
            "retries_succeed_once_the_slot_is_free",
        ],
        Duration::from_secs(180),
    );
}
