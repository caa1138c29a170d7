//! `Idempotency-Key` end to end on `superfluid serve` with the real model:
//! a repeat answers the first result again without generating, another
//! body under the same key is refused with 422, a repeat while the first
//! still runs with 409, and a streamed request with a key with 400; on
//! Anthropic's messages and Ollama's chat and generate too.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fleet_support::{serial, TempDir};
use crate::support::{chat, error_message, Server, MODEL};

fn serve(dir: &TempDir) -> Server {
    let data_dir = dir.arg();
    Server::start(&["--data-dir", &data_dir]).expect("starting superfluid serve")
}

/// POSTs `body` with `Idempotency-Key: key`: status, whether the answer
/// says it was replayed, body.
async fn keyed(server: &Server, path: &str, key: &str, body: &Value) -> (u16, bool, Value) {
    let resp = server
        .client
        .post(server.url(path))
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .expect("sending a request");
    let status = resp.status().as_u16();
    let replayed = resp
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let text = resp.text().await.expect("reading the body");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, replayed, body)
}

/// POSTs `body` with `Idempotency-Key: key`: whether the answer says it
/// was replayed, and the node it names.
async fn keyed_node(server: &Server, key: &str, body: &Value) -> (bool, Option<String>) {
    let resp = server
        .client
        .post(server.url("/v1/chat/completions"))
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .expect("sending a request");
    assert_eq!(resp.status(), 200);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    (
        header("idempotent-replayed").as_deref() == Some("true"),
        header("x-superfluid-node"),
    )
}

/// A chat request that samples (a fresh seed each time it runs).
fn sampled(text: &str, max_tokens: u32) -> Value {
    let mut body = chat(json!([{"role": "user", "content": text}]), max_tokens);
    body["temperature"] = json!(1.0);
    body
}

#[tokio::test]
async fn a_repeated_idempotency_key_answers_the_first_result_and_refuses_another_body() {
    let _serial = serial().await;
    let dir = TempDir::new("idempotency-replay");
    let server = serve(&dir);

    let body = sampled("Tell me a fact about the sea.", 24);
    let (status, replayed, first) = keyed(&server, "/v1/chat/completions", "k-1", &body).await;
    assert_eq!(status, 200, "{first}");
    assert!(!replayed, "a first answer is not a replay");
    let (status, replayed, again) = keyed(&server, "/v1/chat/completions", "k-1", &body).await;
    assert_eq!(status, 200, "{again}");
    assert!(replayed, "the repeat says it was replayed");
    // The same id and text: the first answer, not a second generation.
    assert_eq!(again, first);
    // And the node that answered it.
    let (replayed, node) = keyed_node(&server, "k-4", &body).await;
    assert!(!replayed && node.is_some(), "a first answer names its node");
    assert_eq!(keyed_node(&server, "k-4", &body).await, (true, node));

    let other = sampled("Tell me a fact about the moon.", 24);
    let (status, _, refused) = keyed(&server, "/v1/chat/completions", "k-1", &other).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["param"], "Idempotency-Key", "{refused}");
    assert!(
        error_message(&refused).contains("different request"),
        "{refused}"
    );
    // The same key on another route is another request too.
    let completion = json!({"model": MODEL, "prompt": "The sea", "max_tokens": 4});
    let (status, _, _) = keyed(&server, "/v1/completions", "k-1", &completion).await;
    assert_eq!(status, 422);

    // A stored response is created once: the repeat names the same one.
    let create = json!({"model": MODEL, "input": "Say hello.", "max_output_tokens": 8});
    let (status, _, made) = keyed(&server, "/v1/responses", "k-2", &create).await;
    assert_eq!(status, 200, "{made}");
    let (status, replayed, same) = keyed(&server, "/v1/responses", "k-2", &create).await;
    assert_eq!((status, replayed), (200, true), "{same}");
    assert_eq!(same["id"], made["id"]);

    // A session message is appended once.
    let (status, session) = server
        .post("/v1/sessions", &json!({"model": MODEL}))
        .await
        .expect("creating a session");
    assert_eq!(status, 201, "{session}");
    let path = format!("/v1/sessions/{}/messages", session["id"]);
    let message = json!({"role": "user", "content": "hello"});
    let (status, _, appended) = keyed(&server, &path, "k-3", &message).await;
    assert_eq!(status, 201, "{appended}");
    let (status, replayed, again) = keyed(&server, &path, "k-3", &message).await;
    assert_eq!((status, replayed), (201, true), "{again}");
    assert_eq!(again["id"], appended["id"]);
    let events_path = format!("/v1/sessions/{}/events", session["id"]);
    let resp = server
        .client
        .get(server.url(&events_path))
        .send()
        .await
        .expect("events");
    let events: Value = resp.json().await.expect("events JSON");
    let messages = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "message")
        .count();
    assert_eq!(messages, 1, "{events}");
}

#[tokio::test]
async fn a_key_still_running_is_refused_with_409_and_a_streamed_request_with_400() {
    let _serial = serial().await;
    let dir = TempDir::new("idempotency-running");
    let server = serve(&dir);

    let mut streamed = sampled("Say hello.", 8);
    streamed["stream"] = json!(true);
    let (status, _, refused) = keyed(&server, "/v1/chat/completions", "s-1", &streamed).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "Idempotency-Key", "{refused}");
    assert!(error_message(&refused).contains("stream"), "{refused}");

    let long = sampled("Write a long story about a dragon and a knight.", 400);
    let first = {
        let (server_url, client, long) = (
            server.url("/v1/chat/completions"),
            server.client.clone(),
            long.clone(),
        );
        tokio::spawn(async move {
            client
                .post(server_url)
                .header("Idempotency-Key", "r-1")
                .json(&long)
                .send()
                .await
                .expect("sending the first request")
                .status()
                .as_u16()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _, busy) = keyed(&server, "/v1/chat/completions", "r-1", &long).await;
    assert_eq!(status, 409, "{busy}");
    assert!(error_message(&busy).contains("still running"), "{busy}");
    assert_eq!(first.await.expect("the first request"), 200);
    let (status, replayed, _) = keyed(&server, "/v1/chat/completions", "r-1", &long).await;
    assert_eq!((status, replayed), (200, true));
}

#[tokio::test]
async fn anthropic_messages_and_ollama_chat_and_generate_answer_a_repeated_key_once() {
    let _serial = serial().await;
    let dir = TempDir::new("idempotency-other-apis");
    let server = serve(&dir);

    // Anthropic's Messages API: sampled, so a second generation would differ.
    let messages = json!({"model": MODEL, "max_tokens": 24, "temperature": 1.0,
        "messages": [{"role": "user", "content": "Tell me a fact about the sea."}]});
    let (status, replayed, first) = keyed(&server, "/v1/messages", "a-1", &messages).await;
    assert_eq!((status, replayed), (200, false), "{first}");
    let (status, replayed, again) = keyed(&server, "/v1/messages", "a-1", &messages).await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again, first);
    let mut other = messages.clone();
    other["max_tokens"] = json!(8);
    let (status, _, refused) = keyed(&server, "/v1/messages", "a-1", &other).await;
    assert_eq!(status, 422, "{refused}");
    // In Anthropic's error shape.
    assert_eq!(refused["type"], "error", "{refused}");
    let said = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("different request"), "{refused}");

    // Ollama's chat and generate, which stream unless told not to.
    let options = json!({"temperature": 1.0, "num_predict": 24});
    let chat = json!({"model": MODEL, "stream": false, "options": options,
        "messages": [{"role": "user", "content": "Tell me a fact about the sea."}]});
    let generate = json!({"model": MODEL, "stream": false, "options": options,
        "prompt": "Tell me a fact about the moon."});
    for (path, body) in [("/api/chat", chat), ("/api/generate", generate)] {
        let key = format!("{path}-1");
        let (status, replayed, first) = keyed(&server, path, &key, &body).await;
        assert_eq!((status, replayed), (200, false), "{path}: {first}");
        let (status, replayed, again) = keyed(&server, path, &key, &body).await;
        assert_eq!((status, replayed), (200, true), "{path}: {again}");
        assert_eq!(again, first, "{path}");
        // A key with Ollama's default stream is refused, in Ollama's shape.
        let mut streamed = body.clone();
        streamed.as_object_mut().map(|b| b.remove("stream"));
        let (status, _, refused) = keyed(&server, path, &format!("{path}-2"), &streamed).await;
        assert_eq!(status, 400, "{path}: {refused}");
        let said = refused["error"].as_str().unwrap_or_default();
        assert!(said.contains("\"stream\": false"), "{path}: {refused}");
    }
}
