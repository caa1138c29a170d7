//! The HTTP API against a real fleet: a loopback Link F listener and a stub
//! node that answers every generation with fixed tokens.

use super::tests::{catalog, MODEL};
use super::{router, AppState, NODE_HEADER};
use crate::fleet::{listen, Fleet, LinkListenConfig};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use superfluid_link::{client_endpoint, connect, read_frame, write_frame, Identity};
use superfluid_proto::{
    FinishReason, GenerateEvent, GenerateRequest, ModelDescription, NodeHello, Outcome,
    PROTOCOL_VERSION,
};
use tower::ServiceExt;

/// What the stub node says, one token per frame.
const REPLY: &str = "Hello 日本 🦀! The end.";

/// A router whose fleet holds one stub node serving the model with `ctx`.
async fn app_with_node(ctx: u32) -> Router {
    let identity = Identity::generate().unwrap();
    let fleet = Fleet::new();
    let config = LinkListenConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        identity: identity.clone(),
        authorizer: Arc::new(|_| true),
    };
    let listener = listen(fleet.clone(), config).await.unwrap();
    let reply = catalog().get(MODEL).unwrap().tokenize_plain(REPLY);

    let node_id = Identity::generate().unwrap();
    let endpoint = client_endpoint(listener.addr, &node_id, identity.fingerprint()).unwrap();
    let conn = connect(&endpoint, listener.addr).await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = NodeHello {
        version: PROTOCOL_VERSION,
        name: "stub".into(),
        models: vec![ModelDescription {
            id: MODEL.into(),
            ctx,
            slots: 1,
            sha256: String::new(),
        }],
        join_token: None,
    };
    write_frame(&mut send, &hello).await.unwrap();
    let _reply: Option<superfluid_proto::HeadReply> = read_frame(&mut recv).await.unwrap();
    tokio::spawn(async move {
        let _keep = (send, recv, endpoint, listener);
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            let reply = reply.clone();
            tokio::spawn(async move {
                let Ok(Some(req)) = read_frame::<GenerateRequest>(&mut recv).await else {
                    return;
                };
                let n = reply.len().min(req.max_tokens as usize);
                for &t in &reply[..n] {
                    if write_frame(&mut send, &GenerateEvent::Tokens(vec![t]))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                let outcome = Outcome {
                    finish: if n < reply.len() {
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
    for _ in 0..500 {
        if fleet.context_len(MODEL).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(fleet.context_len(MODEL), Some(ctx));
    router(AppState {
        catalog: catalog(),
        fleet,
    })
}

async fn post(app: Router, path: &str, body: Value) -> (StatusCode, Option<String>, String) {
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
