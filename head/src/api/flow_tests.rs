//! A generation's flow from node events to the client's JSON or SSE, with
//! scripted events standing in for a node.

use super::generate::{EventSource, Generation};
use super::respond::{self, Envelope, Flavor};
use super::tests::{catalog, MODEL};
use super::NODE_HEADER;
use crate::fleet::FleetError;
use axum::body::Body;
use axum::response::Response;
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use superfluid_proto::{FailureKind, FinishReason, GenerateEvent, Outcome};

type Event = Result<Option<GenerateEvent>, FleetError>;

/// Plays back events; after the last one it waits forever, like a node
/// that is still thinking. Records when it is dropped (= cancelled).
struct Script {
    events: VecDeque<Event>,
    dropped: Arc<AtomicBool>,
}

impl Drop for Script {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl EventSource for Script {
    fn next_event(&mut self) -> BoxFuture<'_, Event> {
        match self.events.pop_front() {
            Some(event) => Box::pin(async move { event }),
            None => Box::pin(futures::future::pending()),
        }
    }
}

/// The response of a stream that started.
pub(super) fn started(response: Result<Response, super::ApiError>) -> Response {
    match response {
        Ok(response) => response,
        Err(e) => panic!("the stream did not start: {e}"),
    }
}

/// Fails unless `response` is a 502 whose message contains `needle`.
fn assert_bad_gateway(response: Result<Response, super::ApiError>, needle: &str) {
    match response {
        Ok(_) => panic!("a failed generation must not get a response"),
        Err(e) => {
            assert_eq!(e.status(), axum::http::StatusCode::BAD_GATEWAY);
            assert!(e.to_string().contains(needle), "{e}");
        }
    }
}

/// One token per event for `text`, then `end` if given.
pub(super) fn generation(
    text: &str,
    end: Option<GenerateEvent>,
    stop: &[&str],
) -> (Generation, Arc<AtomicBool>) {
    let catalog = catalog();
    let codec = match catalog.get(MODEL) {
        Some(c) => c.clone(),
        None => panic!("model not loaded"),
    };
    let mut events: VecDeque<Event> = codec
        .tokenize_plain(text)
        .into_iter()
        .map(|t| Ok(Some(GenerateEvent::Tokens(vec![t]))))
        .collect();
    events.extend(end.map(|e| Ok(Some(e))));
    let dropped = Arc::new(AtomicBool::new(false));
    let script = Script {
        events,
        dropped: dropped.clone(),
    };
    let stop: Vec<String> = stop.iter().map(|s| s.to_string()).collect();
    let span = tracing::info_span!("test");
    let generation =
        Generation::from_source(Box::new(script), codec, &stop, 7, "node-a".into(), span);
    (generation, dropped)
}

pub(super) fn finished(finish: FinishReason, generated: u32) -> Option<GenerateEvent> {
    Some(GenerateEvent::Finished(Outcome {
        finish,
        prompt_tokens: 7,
        cached_tokens: 3,
        generated_tokens: generated,
    }))
}

pub(super) async fn json_body(response: Response) -> Value {
    assert_eq!(
        response.headers().get(NODE_HEADER).map(|v| v.as_bytes()),
        Some(&b"node-a"[..])
    );
    let bytes = match response.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => panic!("{e}"),
    };
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// The `data:` payloads of an SSE body.
pub(super) async fn sse_data(response: Response) -> Vec<String> {
    assert_eq!(
        response.headers().get(NODE_HEADER).map(|v| v.as_bytes()),
        Some(&b"node-a"[..])
    );
    let bytes = match response.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => panic!("{e}"),
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn chat_completion_collects_text_and_usage() {
    let text = "Hello 日本 🦀!";
    let (generation, _) = generation(text, finished(FinishReason::Stop, 9), &[]);
    let envelope = Envelope::new(Flavor::Chat, MODEL, "t1");
    let response = match respond::complete(generation, envelope).await {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let body = json_body(response).await;
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["message"]["content"], text);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["prompt_tokens"], 7);
    assert_eq!(body["usage"]["completion_tokens"], 9);
    assert_eq!(body["usage"]["total_tokens"], 16);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
}

#[tokio::test]
async fn length_finish_and_text_completion_shape() {
    let (generation, _) = generation("Once upon", finished(FinishReason::Length, 2), &[]);
    let envelope = Envelope::new(Flavor::Text, MODEL, "t2");
    let body = match respond::complete(generation, envelope).await {
        Ok(r) => json_body(r).await,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], "Once upon");
    assert_eq!(body["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn stop_string_cancels_the_node_and_finishes_with_stop() {
    // No Finished event: the head must end on its own once the stop matches.
    let (generation, dropped) = generation("The answer is 4.\nUser: more", None, &["\nUser:"]);
    let envelope = Envelope::new(Flavor::Chat, MODEL, "t3");
    let body = match respond::complete(generation, envelope).await {
        Ok(r) => json_body(r).await,
        Err(e) => panic!("{e}"),
    };
    assert!(
        dropped.load(Ordering::SeqCst),
        "the remote generation was not cancelled"
    );
    assert_eq!(body["choices"][0]["message"]["content"], "The answer is 4.");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn node_failure_without_streaming_is_a_502() {
    let failed = Some(GenerateEvent::Failed {
        kind: FailureKind::Engine,
        message: "out of memory".into(),
    });
    let (generation, _) = generation("Hi", failed, &[]);
    let envelope = Envelope::new(Flavor::Chat, MODEL, "t4");
    assert_bad_gateway(
        respond::complete(generation, envelope).await,
        "out of memory",
    );
}

#[tokio::test]
async fn chat_stream_has_role_content_finish_usage_and_done() {
    let text = "Hi there, 日本!";
    let (generation, _) = generation(text, finished(FinishReason::Stop, 5), &[]);
    let envelope = Envelope::new(Flavor::Chat, MODEL, "t5");
    let data = sse_data(started(respond::stream(generation, envelope, true).await)).await;
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or(Value::Null))
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"),
        "{chunks:?}"
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, text);
    let n = chunks.len();
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[n - 1]["choices"], Value::Array(vec![]));
    assert_eq!(chunks[n - 1]["usage"]["completion_tokens"], 5);
}

#[tokio::test]
async fn stream_error_is_an_error_event_then_done() {
    let failed = Some(GenerateEvent::Failed {
        kind: FailureKind::Engine,
        message: "node crashed".into(),
    });
    let (generation, _) = generation("Hi", failed, &[]);
    let envelope = Envelope::new(Flavor::Text, MODEL, "t6");
    let data = sse_data(started(respond::stream(generation, envelope, false).await)).await;
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let error: Value = serde_json::from_str(&data[data.len() - 2]).unwrap_or(Value::Null);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("node crashed"),
        "{data:?}"
    );
}

#[tokio::test]
async fn a_stream_that_fails_before_any_text_is_an_error_status() {
    let failed = Some(GenerateEvent::Failed {
        kind: FailureKind::Engine,
        message: "out of memory".into(),
    });
    let (generation, _) = generation("", failed, &[]);
    let envelope = Envelope::new(Flavor::Chat, MODEL, "t8");
    assert_bad_gateway(
        respond::stream(generation, envelope, false).await,
        "out of memory",
    );
}

#[tokio::test]
async fn client_disconnect_cancels_the_generation() {
    // The node sends one token and then nothing more.
    let (generation, dropped) = generation("Hi", None, &[]);
    let envelope = Envelope::new(Flavor::Chat, MODEL, "t7");
    let response = started(respond::stream(generation, envelope, false).await);
    let mut body: Body = response.into_body();
    let first = body.frame().await;
    assert!(matches!(first, Some(Ok(_))));
    assert!(!dropped.load(Ordering::SeqCst));
    drop(body);
    assert!(
        dropped.load(Ordering::SeqCst),
        "dropping the response must cancel the node"
    );
}
