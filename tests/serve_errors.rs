//! Bad input to `superfluid serve`: each gets its status and an OpenAI error
//! body that names the problem, and the server keeps serving.

use crate::support::{chat, error_message, Server, MODEL};
use serde_json::json;

#[tokio::test]
async fn bad_requests_get_clear_errors_and_the_server_keeps_serving() {
    let server = Server::start(&["--ctx", "512"]).unwrap();
    let path = "/v1/chat/completions";
    let hello = json!([{"role": "user", "content": "Hello"}]);

    let (status, body) = server
        .post_raw(path, "application/json", "{\"model\": ")
        .await
        .unwrap();
    assert_eq!(status, 400, "malformed JSON: {body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");

    let (status, body) = server.post_raw(path, "text/plain", "hello").await.unwrap();
    assert_eq!(status, 400, "wrong content type: {body}");
    assert!(
        error_message(&body).to_lowercase().contains("json"),
        "{body}"
    );

    let (status, body) = server
        .post(path, &json!({"messages": hello}))
        .await
        .unwrap();
    assert_eq!(status, 400, "missing model: {body}");
    assert!(error_message(&body).contains("model"), "{body}");

    let mut unknown = chat(hello.clone(), 4);
    unknown["model"] = json!("gpt-4");
    let (status, body) = server.post(path, &unknown).await.unwrap();
    assert_eq!(status, 404, "unknown model: {body}");
    assert!(error_message(&body).contains("gpt-4"), "{body}");
    assert!(
        error_message(&body).contains(MODEL),
        "the message lists the served ids: {body}"
    );

    let mut hot = chat(hello.clone(), 4);
    hot["temperature"] = json!(7);
    let (status, body) = server.post(path, &hot).await.unwrap();
    assert_eq!(status, 400, "bad temperature: {body}");
    assert_eq!(body["error"]["param"], "temperature", "{body}");

    let mut wrong_type = chat(hello.clone(), 4);
    wrong_type["max_tokens"] = json!("many");
    let (status, body) = server.post(path, &wrong_type).await.unwrap();
    assert_eq!(status, 400, "max_tokens of the wrong type: {body}");
    assert!(error_message(&body).contains("max_tokens"), "{body}");

    let mut yaml_mode = chat(hello.clone(), 4);
    yaml_mode["response_format"] = json!({"type": "yaml"});
    let (status, body) = server.post(path, &yaml_mode).await.unwrap();
    assert_eq!(status, 400, "an unknown response format: {body}");
    assert_eq!(body["error"]["param"], "response_format", "{body}");
    assert!(error_message(&body).contains("json_schema"), "{body}");

    let mut tools = chat(hello.clone(), 4);
    tools["tools"] = json!([{"type": "retrieval"}]);
    let (status, body) = server.post(path, &tools).await.unwrap();
    assert_eq!(status, 400, "a tool that is not a function: {body}");
    assert_eq!(body["error"]["param"], "tools[0].type", "{body}");

    let (status, body) = server.post(path, &chat(json!([]), 4)).await.unwrap();
    assert_eq!(status, 400, "no messages: {body}");
    assert!(error_message(&body).contains("messages"), "{body}");

    let (status, body) = server
        .post(path, &chat(json!([{"role": "wizard", "content": "hi"}]), 4))
        .await
        .unwrap();
    assert_eq!(status, 400, "unknown role: {body}");
    assert!(error_message(&body).contains("wizard"), "{body}");

    let long = "word ".repeat(2000);
    let (status, body) = server
        .post(path, &chat(json!([{"role": "user", "content": long}]), 4))
        .await
        .unwrap();
    assert_eq!(status, 400, "too long: {body}");
    let msg = error_message(&body);
    assert!(
        msg.contains("maximum context length is 512 tokens"),
        "{msg}"
    );
    assert!(msg.contains("shorten the prompt"), "{msg}");

    let missing = server
        .client
        .get(server.url("/v1/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    // Still serving after all that.
    let (status, body) = server.post(path, &chat(hello, 4)).await.unwrap();
    assert_eq!(status, 200, "{body}");
}
