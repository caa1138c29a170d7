//! Text completions and the model list through `superfluid serve`.

use crate::support::{Server, MODEL};
use serde_json::{json, Value};

#[tokio::test]
async fn completion_continues_the_prompt() {
    let server = Server::start(&[]).unwrap();
    let request = json!({"model": MODEL, "prompt": "The capital of France is", "temperature": 0, "max_tokens": 8});
    let (status, body) = server.post("/v1/completions", &request).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "text_completion");
    let text = body["choices"][0]["text"].as_str().unwrap();
    assert!(text.contains("Paris"), "{body}");
    assert!(
        body["usage"]["completion_tokens"].as_u64().unwrap() > 0,
        "{body}"
    );

    let mut streaming = request.clone();
    streaming["stream"] = json!(true);
    let (events, _) = server.stream("/v1/completions", &streaming).await.unwrap();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let streamed: String = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|c| c["choices"][0]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(streamed, text);
}

#[tokio::test]
async fn models_lists_the_served_model_and_health_is_ok() {
    let server = Server::start(&[]).unwrap();
    let models: Value = server
        .client
        .get(server.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["object"], "list");
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, vec![MODEL]);
    let health = server
        .client
        .get(server.url("/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}
