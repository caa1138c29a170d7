//! Admission against a real fleet: a loopback Link F listener and a stub
//! node of one slot that streams one token and then holds its generation
//! until the head cancels it.

use super::node_tests::{app, wait_for};
use super::tests::{catalog, MODEL};
use crate::fleet::{listen, Fleet, LinkListenConfig};
use crate::metrics::Refusal;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use superfluid_link::{client_endpoint, connect, read_frame, write_frame, Identity};
use superfluid_proto::{GenerateEvent, ModelDescription, NodeHello};
use tower::ServiceExt;

const CTX: u32 = 512;

/// A fleet whose nodes queue at most `max_queue` generations, with one
/// holding stub node; and how many generations the node saw cancelled.
async fn fleet_with_holding_node(max_queue: u32) -> (Fleet, Arc<AtomicUsize>) {
    let identity = Identity::generate().unwrap();
    let fleet = Fleet::new().with_max_queue(Some(max_queue));
    let config = LinkListenConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        identity: identity.clone(),
        authorizer: Arc::new(|_| true),
    };
    let listener = listen(fleet.clone(), config).await.unwrap();
    let addr = listener.addr;
    tokio::spawn(async move {
        let _keep = listener;
        std::future::pending::<()>().await;
    });
    let cancelled = holding_stub(addr, &identity).await;
    wait_for(&fleet, 1, CTX).await;
    (fleet, cancelled)
}

/// Joins a one-slot node that answers each generation with one token and
/// then holds it; counts the generations the head cancels.
async fn holding_stub(head_addr: std::net::SocketAddr, head: &Identity) -> Arc<AtomicUsize> {
    let token = catalog().get(MODEL).unwrap().tokenize_plain("Hi");
    let node_id = Identity::generate().unwrap();
    let endpoint = client_endpoint(head_addr, &node_id, head.fingerprint()).unwrap();
    let conn = connect(&endpoint, head_addr).await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = NodeHello {
        version: superfluid_proto::PROTOCOL_VERSION,
        name: "holding".into(),
        models: vec![ModelDescription {
            id: MODEL.into(),
            ctx: CTX,
            slots: 1,
            sha256: String::new(),
            ..Default::default()
        }],
        join_token: None,
        hardware: "test machine".into(),
        free_memory: 0,
        on_disk: Vec::new(),
    };
    write_frame(&mut send, &hello).await.unwrap();
    let _reply: Option<superfluid_proto::HeadReply> = read_frame(&mut recv).await.unwrap();
    let cancelled = Arc::new(AtomicUsize::new(0));
    let counter = cancelled.clone();
    tokio::spawn(async move {
        let _keep = (send, recv, endpoint);
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            let token = token.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(Some(superfluid_proto::HeadStream::Generate(_))) =
                    read_frame::<superfluid_proto::HeadStream>(&mut recv).await
                else {
                    return;
                };
                let _ = write_frame(&mut send, &GenerateEvent::Tokens(token)).await;
                // Held until the head resets the stream.
                if send.stopped().await.is_ok() {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    cancelled
}

fn stream_request() -> Request<Body> {
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": true,
    });
    Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// Sends a streaming request and returns its response (the stream open).
async fn open_stream(fleet: &Fleet) -> Response<Body> {
    tokio::time::timeout(
        Duration::from_secs(20),
        app(fleet.clone()).oneshot(stream_request()),
    )
    .await
    .unwrap()
    .unwrap()
}

/// Waits until the fleet counts `n` generations in flight.
async fn wait_in_flight(fleet: &Fleet, n: u32) {
    for _ in 0..500 {
        if fleet.nodes().first().map(|node| node.in_flight) == Some(n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "in flight: {:?}, wanted {n}",
        fleet.nodes().first().map(|n| n.in_flight)
    );
}

#[tokio::test]
async fn a_full_fleet_answers_429_at_once_with_retry_after_and_the_queue_depth() {
    let (fleet, _) = fleet_with_holding_node(1).await;
    // One in the node's slot, one in its queue.
    let running = open_stream(&fleet).await;
    let queued = open_stream(&fleet).await;
    assert_eq!(running.status(), StatusCode::OK);
    assert_eq!(queued.status(), StatusCode::OK);

    let refused = open_stream(&fleet).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let header = |name: &str| {
        refused
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(header("retry-after").as_deref(), Some("1"));
    assert_eq!(header("x-superfluid-queue").as_deref(), Some("1"));
    let bytes = refused.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["error"]["type"], "fleet_busy", "{body}");
    assert_eq!(body["error"]["code"], "fleet_busy", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("retry after 1 s"), "{message}");
    assert!(message.contains("add nodes"), "{message}");
    assert_eq!(fleet.metrics().overload.refused(Refusal::FleetBusy), 1);
    drop((running, queued));
}

#[tokio::test]
async fn a_queued_client_that_gives_up_leaves_the_queue() {
    let (fleet, cancelled) = fleet_with_holding_node(1).await;
    let running = open_stream(&fleet).await;
    let queued = open_stream(&fleet).await;
    wait_in_flight(&fleet, 2).await;
    assert_eq!(
        open_stream(&fleet).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );

    // The queued client goes away: its place is free, and its generation
    // is cancelled on the node.
    drop(queued);
    wait_in_flight(&fleet, 1).await;
    let next = open_stream(&fleet).await;
    assert_eq!(next.status(), StatusCode::OK);
    for _ in 0..500 {
        if cancelled.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        cancelled.load(Ordering::SeqCst),
        1,
        "the node saw the cancel"
    );
    assert_eq!(fleet.metrics().overload.cancelled(), 1);
    drop((running, next));
}

#[tokio::test]
async fn with_no_queue_a_node_takes_only_its_slots() {
    let (fleet, _) = fleet_with_holding_node(0).await;
    let running = open_stream(&fleet).await;
    assert_eq!(running.status(), StatusCode::OK);
    let refused = open_stream(&fleet).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.headers().get("x-superfluid-queue").unwrap(),
        "0",
        "nothing waits"
    );
    drop(running);
}
