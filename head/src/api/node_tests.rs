//! The HTTP API against a real fleet: a loopback Link F listener and a stub
//! node that answers every generation with fixed tokens.

use super::tests::{catalog, MODEL};
use super::{router, AppState, NODE_HEADER};
use crate::codec::ChatMessage;
use crate::fleet::{listen, Fleet, LinkListenConfig};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use superfluid_link::control::STREAM_NODE_STOPPING;
use superfluid_link::{client_endpoint, connect, read_frame, write_frame, Identity};
use superfluid_proto::{
    FailureKind, FinishReason, GenerateEvent, ModelDescription, NodeHello, Outcome,
    PROTOCOL_VERSION,
};
use tower::ServiceExt;

/// What the stub node says, one token per frame.
const REPLY: &str = "Hello 日本 🦀! The end.";

/// What a stub node does with each generation it is sent.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Stub {
    /// Answers [`REPLY`], one token per frame.
    Answer,
    /// Reads the request, then closes its connection, as a node whose
    /// process died before the first token.
    VanishBeforeFirstToken,
    /// Sends the first token of [`REPLY`], then closes its connection.
    VanishAfterFirstToken,
    /// Turns the generation away as a stopping node does.
    Stopping,
    /// Answers `Failed` of this kind, with [`failure_message`].
    Fail(FailureKind),
}

/// What a [`Stub::Fail`] node says.
pub(super) fn failure_message(kind: FailureKind) -> String {
    format!("the stub node failed this generation as {kind:?}; do what it says")
}

/// A fleet listening on loopback Link F for the rest of the test: the fleet,
/// its identity and its Link F address.
pub(super) async fn fleet() -> (Fleet, Identity, std::net::SocketAddr) {
    let identity = Identity::generate().unwrap();
    let fleet = Fleet::new();
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
    (fleet, identity, addr)
}

/// Joins a stub node named `name` serving the model with `ctx`; returns how
/// many generations it has been sent.
pub(super) async fn stub(
    head_addr: std::net::SocketAddr,
    head: &Identity,
    name: &str,
    ctx: u32,
    does: Stub,
) -> Arc<AtomicUsize> {
    let reply = catalog().get(MODEL).unwrap().tokenize_plain(REPLY);
    let node_id = Identity::generate().unwrap();
    let endpoint = client_endpoint(head_addr, &node_id, head.fingerprint()).unwrap();
    let conn = connect(&endpoint, head_addr).await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = NodeHello {
        version: PROTOCOL_VERSION,
        name: name.into(),
        models: vec![ModelDescription {
            id: MODEL.into(),
            ctx,
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
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    tokio::spawn(async move {
        let _keep = (send, recv, endpoint);
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            let reply = reply.clone();
            let conn = conn.clone();
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(Some(superfluid_proto::HeadStream::Generate(req))) =
                    read_frame::<superfluid_proto::HeadStream>(&mut recv).await
                else {
                    return;
                };
                if does == Stub::VanishBeforeFirstToken {
                    conn.close(0u32.into(), b"gone");
                    return;
                }
                if does == Stub::Stopping {
                    let _ = send.reset(STREAM_NODE_STOPPING);
                    return;
                }
                if let Stub::Fail(kind) = does {
                    let message = failure_message(kind);
                    let failed = GenerateEvent::Failed { kind, message };
                    if write_frame(&mut send, &failed).await.is_ok() {
                        let _ = send.finish();
                    }
                    return;
                }
                // A continuation's prompt ends with the reply's start.
                let skip = (1..=reply.len())
                    .rev()
                    .find(|&k| req.prompt.ends_with(&reply[..k]))
                    .unwrap_or(0);
                let n = (reply.len() - skip).min(req.max_tokens as usize);
                for &t in &reply[skip..skip + n] {
                    if write_frame(&mut send, &GenerateEvent::Tokens(vec![t]))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    if does == Stub::VanishAfterFirstToken {
                        // Let the token reach the head before the connection goes.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        conn.close(0u32.into(), b"gone");
                        return;
                    }
                }
                let outcome = Outcome {
                    finish: if skip + n < reply.len() {
                        FinishReason::Length
                    } else {
                        FinishReason::Stop
                    },
                    prompt_tokens: req.prompt.len() as u32,
                    cached_tokens: 0,
                    generated_tokens: n as u32,
                };
                let _ = write_frame(&mut send, &GenerateEvent::Finished(outcome)).await;
                let _ = send.finish();
            });
        }
    });
    asked
}

/// Waits until `fleet` has `n` nodes serving the model with `ctx`.
pub(super) async fn wait_for(fleet: &Fleet, n: usize, ctx: u32) {
    for _ in 0..500 {
        if fleet.context_len(MODEL).is_some() && fleet.nodes().len() == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(fleet.nodes().len(), n);
    assert_eq!(fleet.context_len(MODEL), Some(ctx));
}

pub(super) fn app(fleet: Fleet) -> Router {
    router(AppState {
        catalog: catalog(),
        fleet,
        sessions: None,
    })
}

/// A router whose fleet holds one stub node serving the model with `ctx`.
async fn app_with_node(ctx: u32) -> Router {
    let (fleet, identity, addr) = fleet().await;
    stub(addr, &identity, "stub", ctx, Stub::Answer).await;
    wait_for(&fleet, 1, ctx).await;
    app(fleet)
}

pub(super) async fn post(
    app: Router,
    path: &str,
    body: Value,
) -> (StatusCode, Option<String>, String) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(20), app.oneshot(request))
        .await
        .unwrap()
        .unwrap();
    let status = response.status();
    let node = response
        .headers()
        .get(NODE_HEADER)
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, node, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn chat_completion_through_a_node() {
    let app = app_with_node(512).await;
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]});
    let (status, node, text) = post(app, "/v1/chat/completions", body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(node.as_deref(), Some("stub"));
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], REPLY);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 5);
}

#[tokio::test]
async fn streamed_completion_through_a_node_with_stop_and_max_tokens() {
    let app = app_with_node(512).await;
    let body = json!({"model": MODEL, "prompt": "Say hi", "stream": true, "stop": ["!"]});
    let (status, node, text) = post(app.clone(), "/v1/completions", body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(node.as_deref(), Some("stub"));
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let joined: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(joined, "Hello 日本 🦀");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );

    let body = json!({"model": MODEL, "prompt": "Say hi", "max_tokens": 1});
    let (status, _, text) = post(app, "/v1/completions", body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 1);
}

#[tokio::test]
async fn a_long_prompt_is_counted_exactly_whether_tokenized_inline_or_aside() {
    let app = app_with_node(64).await;
    let codec = super::tests::catalog().get(MODEL).cloned().unwrap();
    // One prompt short enough to tokenize inline, one long enough for a
    // blocking thread; the context message gives the count the node would get.
    for words in [100, 20_000] {
        let prompt = "word ".repeat(words);
        let expected = codec.tokenize(&prompt).len();
        let body = json!({"model": MODEL, "prompt": prompt});
        let (status, _, text) = post(app.clone(), "/v1/completions", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        assert!(
            text.contains(&format!("your request has {expected} tokens")),
            "{words} words should be {expected} tokens: {text}"
        );
        // The same for a chat, rendered with the model's template first.
        let messages = [ChatMessage::new("user", &prompt)];
        let expected = codec.tokenize(&codec.render_chat(&messages).unwrap()).len();
        let body = json!({"model": MODEL, "messages": [{"role": "user", "content": prompt}]});
        let (status, _, text) = post(app.clone(), "/v1/chat/completions", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        assert!(
            text.contains(&format!("your request has {expected} tokens")),
            "a chat of {words} words should be {expected} tokens: {text}"
        );
    }
}

#[tokio::test]
async fn a_prompt_longer_than_the_context_gets_the_context_message() {
    let app = app_with_node(64).await;
    let long = "word ".repeat(100);
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": long}]});
    let (status, node, text) = post(app.clone(), "/v1/chat/completions", body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert_eq!(node, None);
    let body: Value = serde_json::from_str(&text).unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("this model's maximum context length is 64 tokens, but your request has ")
            && message.ends_with(" tokens; shorten the prompt or drop earlier turns"),
        "{message}"
    );
    assert_eq!(body["error"]["param"], "messages");
    assert_eq!(body["error"]["code"], "context_length_exceeded");

    let body = json!({"model": MODEL, "prompt": "word ".repeat(100)});
    let (status, _, text) = post(app, "/v1/completions", body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("\"param\":\"prompt\""), "{text}");
}

/// A fleet of a stub that answers (`good`) and one that does `other`,
/// behind the HTTP API; the fleet, the API, and how often each was asked.
async fn two_stubs(other: Stub) -> (Fleet, Router, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (fleet, identity, addr) = fleet().await;
    let good = stub(addr, &identity, "good", 512, Stub::Answer).await;
    let bad = stub(addr, &identity, "bad", 512, other).await;
    wait_for(&fleet, 2, 512).await;
    (fleet.clone(), app(fleet), good, bad)
}

#[tokio::test]
async fn a_generation_whose_node_vanishes_before_its_first_token_is_answered_by_another() {
    for stream in [false, true] {
        let (fleet, app, good, bad) = two_stubs(Stub::VanishBeforeFirstToken).await;
        // Equal idle nodes take turns, so within two requests one is sent to
        // the vanishing node; every request must still be answered in full.
        for _ in 0..2 {
            let body = json!({"model": MODEL, "prompt": "Say hi", "stream": stream});
            let (status, node, text) = post(app.clone(), "/v1/completions", body).await;
            assert_eq!(status, StatusCode::OK, "stream {stream}: {text}");
            assert_eq!(node.as_deref(), Some("good"), "stream {stream}: {text}");
            let answer: String = if stream {
                assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
                assert!(!text.contains("\"error\""), "{text}");
                text.lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                    .filter_map(|c| c["choices"][0]["text"].as_str().map(str::to_owned))
                    .collect()
            } else {
                let body: Value = serde_json::from_str(&text).unwrap();
                body["choices"][0]["text"].as_str().unwrap_or("").to_owned()
            };
            assert_eq!(answer, REPLY, "stream {stream}");
        }
        assert_eq!(bad.load(Ordering::SeqCst), 1, "stream {stream}");
        assert_eq!(good.load(Ordering::SeqCst), 2, "stream {stream}");
        assert_eq!(fleet.metrics().retried(), 1, "stream {stream}");
        let metrics = super::metrics_page::render(&fleet, &crate::keys::Keys::default());
        assert!(
            metrics.contains("superfluid_generations_retried_total 1\n"),
            "{metrics}"
        );
    }
}

#[tokio::test]
async fn a_generation_whose_node_vanishes_after_its_first_token_goes_on_at_another() {
    for stream in [false, true] {
        let (fleet, app, good, bad) = two_stubs(Stub::VanishAfterFirstToken).await;
        let mut prompts = Vec::new();
        // Equal idle nodes take turns, so one of two requests starts on the
        // vanishing node; both must be answered once, in full.
        for _ in 0..2 {
            let body = json!({"model": MODEL, "prompt": "Say hi", "stream": stream});
            let (status, _, text) = post(app.clone(), "/v1/completions", body).await;
            assert_eq!(status, StatusCode::OK, "stream {stream}: {text}");
            let (answer, finishes) = if stream {
                assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
                assert!(!text.contains("\"error\""), "{text}");
                let chunks: Vec<Value> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                    .collect();
                let answer: String = chunks
                    .iter()
                    .filter_map(|c| c["choices"][0]["text"].as_str())
                    .collect();
                let finishes = chunks
                    .iter()
                    .filter(|c| c["choices"][0]["finish_reason"].is_string())
                    .count();
                (answer, finishes)
            } else {
                let body: Value = serde_json::from_str(&text).unwrap();
                let usage = &body["usage"];
                let reply = catalog().get(MODEL).unwrap().tokenize_plain(REPLY);
                assert_eq!(usage["completion_tokens"], reply.len(), "{text}");
                // The prompt the client sent, not the continuation's.
                prompts.push(usage["prompt_tokens"].clone());
                let answer = body["choices"][0]["text"].as_str().unwrap_or("").to_owned();
                (answer, 1)
            };
            assert_eq!(answer, REPLY, "stream {stream}");
            assert_eq!(finishes, 1, "stream {stream}: {text}");
        }
        assert_eq!(bad.load(Ordering::SeqCst), 1, "stream {stream}");
        assert_eq!(good.load(Ordering::SeqCst), 2, "stream {stream}");
        assert_eq!(fleet.metrics().retried(), 0, "stream {stream}");
        assert!(prompts.windows(2).all(|w| w[0] == w[1]), "{prompts:?}");
    }
}

#[tokio::test]
async fn a_generation_whose_only_node_vanishes_gets_a_502_naming_the_node() {
    let (fleet, identity, addr) = fleet().await;
    let bad = stub(addr, &identity, "bad", 512, Stub::VanishBeforeFirstToken).await;
    wait_for(&fleet, 1, 512).await;
    let body = json!({"model": MODEL, "prompt": "Say hi", "stream": true});
    let (status, node, text) = post(app(fleet.clone()), "/v1/completions", body).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{text}");
    assert_eq!(node, None, "{text}");
    assert!(text.contains("lost the connection to node bad"), "{text}");
    assert_eq!(bad.load(Ordering::SeqCst), 1);
    assert_eq!(fleet.metrics().retried(), 0);
}

#[tokio::test]
async fn a_node_that_turns_a_generation_away_as_it_stops_gets_no_more() {
    let (fleet, app, good, stopping) = two_stubs(Stub::Stopping).await;
    for _ in 0..4 {
        let body = json!({"model": MODEL, "prompt": "Say hi"});
        let (status, node, text) = post(app.clone(), "/v1/completions", body).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert_eq!(node.as_deref(), Some("good"), "{text}");
    }
    // Turned away once, then marked draining: the router skips it.
    assert_eq!(stopping.load(Ordering::SeqCst), 1);
    assert_eq!(good.load(Ordering::SeqCst), 4);
    assert_eq!(fleet.metrics().retried(), 1);
    let states: Vec<(String, &str)> = fleet
        .nodes()
        .iter()
        .map(|n| (n.name.clone(), n.state.as_str()))
        .collect();
    assert!(
        states.contains(&("bad".to_owned(), "draining")),
        "{states:?}"
    );
}
