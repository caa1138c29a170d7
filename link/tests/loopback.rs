//! Link F over a real loopback QUIC connection.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::{net::SocketAddr, time::Duration};
use superfluid_link::{
    allow_only, client_endpoint, connect, peer_fingerprint, read_frame, server_endpoint,
    stream::write_raw, write_frame, DialError, FrameIoError, Identity,
};
use superfluid_proto::{
    FrameError, GenerateEvent, GenerateRequest, NodeHello, Sampling, MAX_FRAME,
};

const LOOPBACK: &str = "127.0.0.1:0";

struct Pair {
    head: Identity,
    node: Identity,
    server: quinn::Endpoint,
    addr: SocketAddr,
}

fn pair(authorize_node: bool) -> Pair {
    let head = Identity::generate().unwrap();
    let node = Identity::generate().unwrap();
    let allowed = if authorize_node {
        node.fingerprint()
    } else {
        Identity::generate().unwrap().fingerprint()
    };
    let server = server_endpoint(LOOPBACK.parse().unwrap(), &head, allow_only([allowed])).unwrap();
    let addr = server.local_addr().unwrap();
    Pair {
        head,
        node,
        server,
        addr,
    }
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("timed out")
}

async fn connected(p: &Pair) -> (quinn::Connection, quinn::Connection) {
    let client = client_endpoint(p.addr, &p.node, p.head.fingerprint()).unwrap();
    let server = p.server.clone();
    let accept = tokio::spawn(async move { server.accept().await.unwrap().await.unwrap() });
    let node_side = within(connect(&client, p.addr)).await.unwrap();
    let head_side = within(accept).await.unwrap();
    (head_side, node_side)
}

#[tokio::test]
async fn pinned_fingerprint_mismatch_is_refused() {
    let p = pair(true);
    let wrong = Identity::generate().unwrap().fingerprint();
    let client = client_endpoint(p.addr, &p.node, wrong).unwrap();
    let server = p.server.clone();
    tokio::spawn(async move {
        if let Some(incoming) = server.accept().await {
            let _ = incoming.await;
        }
    });
    let result = within(connect(&client, p.addr)).await;
    assert!(matches!(result, Err(DialError::Handshake(_))), "{result:?}");
}

#[tokio::test]
async fn unauthorized_client_key_is_refused_by_the_head() {
    let p = pair(false);
    let client = client_endpoint(p.addr, &p.node, p.head.fingerprint()).unwrap();
    let server = p.server.clone();
    let head = tokio::spawn(async move { server.accept().await.unwrap().await });
    let node_side = within(connect(&client, p.addr)).await;
    assert!(
        within(head).await.unwrap().is_err(),
        "the head accepted an unauthorized key"
    );
    // In TLS 1.3 the client may finish its side first; the connection then dies at once.
    if let Ok(conn) = node_side {
        let reason = within(conn.closed()).await;
        assert!(
            !matches!(reason, quinn::ConnectionError::LocallyClosed),
            "{reason:?}"
        );
    }
}

#[tokio::test]
async fn frames_round_trip_over_loopback_quic() {
    let p = pair(true);
    let (head_side, node_side) = connected(&p).await;
    assert_eq!(peer_fingerprint(&head_side).unwrap(), p.node.fingerprint());
    assert_eq!(peer_fingerprint(&node_side).unwrap(), p.head.fingerprint());

    let (mut send, mut recv_node) = node_side.open_bi().await.unwrap();
    let hello = NodeHello {
        version: superfluid_proto::PROTOCOL_VERSION,
        name: "n".into(),
        models: vec![],
        join_token: None,
        hardware: "test machine".into(),
        free_memory: 0,
        on_disk: Vec::new(),
    };
    write_frame(&mut send, &hello).await.unwrap();
    let (mut head_send, mut head_recv) = within(head_side.accept_bi()).await.unwrap();
    assert_eq!(
        within(read_frame::<NodeHello>(&mut head_recv))
            .await
            .unwrap(),
        Some(hello)
    );

    let req = GenerateRequest {
        model: "m".into(),
        prompt: vec![1, 2, 3],
        sampling: Sampling::default(),
        max_tokens: 9,
        slot: None,
        constraint: None,
        logprobs: None,
    };
    write_frame(&mut head_send, &req).await.unwrap();
    write_frame(&mut head_send, &GenerateEvent::Tokens(vec![4, 5]))
        .await
        .unwrap();
    head_send.finish().unwrap();
    assert_eq!(
        within(read_frame::<GenerateRequest>(&mut recv_node))
            .await
            .unwrap(),
        Some(req)
    );
    let ev = within(read_frame::<GenerateEvent>(&mut recv_node))
        .await
        .unwrap();
    assert_eq!(ev, Some(GenerateEvent::Tokens(vec![4, 5])));
    assert!(within(read_frame::<GenerateEvent>(&mut recv_node))
        .await
        .unwrap()
        .is_none());
}

async fn read_after_raw(
    bytes: &[u8],
    finish: bool,
) -> Result<Option<GenerateRequest>, FrameIoError> {
    let p = pair(true);
    let (head_side, node_side) = connected(&p).await;
    let (mut send, _recv) = node_side.open_bi().await.unwrap();
    write_raw(&mut send, bytes).await.unwrap();
    if finish {
        send.finish().unwrap();
    }
    let (_s, mut recv) = within(head_side.accept_bi()).await.unwrap();
    within(read_frame::<GenerateRequest>(&mut recv)).await
}

#[tokio::test]
async fn oversized_frame_is_an_error_not_a_panic() {
    let prefix = u32::try_from(MAX_FRAME + 1).unwrap().to_be_bytes();
    let result = read_after_raw(&prefix, false).await;
    assert!(
        matches!(
            result,
            Err(FrameIoError::Frame(FrameError::TooLarge { .. }))
        ),
        "{result:?}"
    );
}

#[tokio::test]
async fn garbage_frame_is_an_error_not_a_panic() {
    let mut bytes = 5u32.to_be_bytes().to_vec();
    bytes.extend([0xff; 5]);
    let result = read_after_raw(&bytes, false).await;
    assert!(
        matches!(result, Err(FrameIoError::Frame(FrameError::Decode(_)))),
        "{result:?}"
    );
}

#[tokio::test]
async fn stream_ending_inside_a_frame_is_an_error() {
    let mut bytes = 10u32.to_be_bytes().to_vec();
    bytes.extend([1, 2]);
    let result = read_after_raw(&bytes, true).await;
    assert!(
        matches!(result, Err(FrameIoError::Truncated { got: 2, want: 10 })),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_prompt_of_a_million_tokens_and_many_small_events_cross_intact() {
    let p = pair(true);
    let (head_side, node_side) = connected(&p).await;
    // Far more than the initial congestion window in one frame, head to node;
    // then many one-token events back, as a generation streams them.
    let req = GenerateRequest {
        model: "m".into(),
        prompt: (0..1_000_000u32).map(|i| i % 49_152).collect(),
        sampling: Sampling::default(),
        max_tokens: 500,
        slot: None,
        constraint: None,
        logprobs: None,
    };
    let (mut head_send, mut head_recv) = head_side.open_bi().await.unwrap();
    let sent = req.clone();
    // The frame is larger than a stream's receive window: the write completes
    // only as the node reads.
    let writing = tokio::spawn(async move {
        write_frame(&mut head_send, &sent).await.unwrap();
        head_send
    });
    let (mut node_send, mut node_recv) = within(node_side.accept_bi()).await.unwrap();
    let got = within(read_frame::<GenerateRequest>(&mut node_recv))
        .await
        .unwrap();
    assert_eq!(got, Some(req));
    let _head_send = within(writing).await.unwrap();
    for token in 0..500u32 {
        write_frame(&mut node_send, &GenerateEvent::Tokens(vec![token]))
            .await
            .unwrap();
        let event = within(read_frame::<GenerateEvent>(&mut head_recv))
            .await
            .unwrap();
        assert_eq!(event, Some(GenerateEvent::Tokens(vec![token])));
    }
    node_send.finish().unwrap();
    assert!(within(read_frame::<GenerateEvent>(&mut head_recv))
        .await
        .unwrap()
        .is_none());
}
