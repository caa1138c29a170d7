//! Every dialect is a codec on the one generation path of `superfluid
//! serve`: one greedy request through OpenAI chat, Anthropic messages,
//! Ollama chat and Responses gives the same text; a refused request on each
//! writes one log line and gets its dialect's error body; a session records
//! through each chat route (`x-superfluid-session`).

use std::time::Duration;

use serde_json::{json, Value};

use crate::fleet_support::{serial, wait_until, Proc, TempDir};
use crate::serve_shutdown::start_serve_with;
use crate::support::MODEL;

const QUESTION: &str = "Name three colors.";
const MAX_TOKENS: u64 = 12;

/// A light `superfluid serve` keeping sessions in `dir`, logging JSON.
fn start(dir: &TempDir) -> (Proc, String) {
    let data_dir = dir.arg();
    start_serve_with(&["--log-format", "json", "--data-dir", &data_dir])
}

/// POSTs `body` to `path` with `headers`; the status and the JSON body.
async fn post(base: &str, path: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("a response");
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, body)
}

/// The four chat dialects' greedy requests for `QUESTION` to `model`:
/// route, body, and where the answer's text is.
fn requests(model: &str) -> [(&'static str, Value, &'static str); 4] {
    let user = json!([{"role": "user", "content": QUESTION}]);
    [
        (
            "/v1/chat/completions",
            json!({"model": model, "temperature": 0, "max_tokens": MAX_TOKENS, "messages": user}),
            "/choices/0/message/content",
        ),
        (
            "/v1/messages",
            json!({"model": model, "temperature": 0, "max_tokens": MAX_TOKENS, "messages": user}),
            "/content/0/text",
        ),
        (
            "/api/chat",
            json!({"model": model, "stream": false, "messages": user,
                   "options": {"temperature": 0, "num_predict": MAX_TOKENS}}),
            "/message/content",
        ),
        (
            "/v1/responses",
            json!({"model": model, "temperature": 0, "max_output_tokens": MAX_TOKENS,
                   "input": QUESTION}),
            "/output/0/content/0/text",
        ),
    ]
}

/// The text at `pointer` of an answer.
fn text_at(body: &Value, pointer: &str) -> String {
    body.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no text at {pointer} in {body}"))
        .to_owned()
}

/// The head's JSON log lines whose message is `message`.
fn lines_saying(serve: &Proc, message: &str) -> Vec<Value> {
    serve
        .log()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["fields"]["message"] == message)
        .collect()
}

#[tokio::test]
async fn every_dialect_gives_the_same_text_logs_refusals_and_records_sessions() {
    let _serial = serial().await;
    let dir = TempDir::new("dialects");
    let (serve, base) = start(&dir);

    // One greedy request, four dialects, one text.
    let mut texts = Vec::new();
    for (path, body, pointer) in requests(MODEL) {
        let (status, answer) = post(&base, path, &body, &[]).await;
        assert_eq!(status, 200, "{path}: {answer}");
        texts.push((path, text_at(&answer, pointer)));
    }
    let (_, openai) = &texts[0];
    assert!(!openai.trim().is_empty(), "{texts:?}");
    for (path, text) in &texts {
        assert_eq!(text, openai, "{path} answered differently: {texts:?}");
    }

    // A refused request on each: its dialect's error body, one log line.
    let endpoints = ["chat", "messages", "ollama_chat", "responses"];
    for ((path, body, _), endpoint) in requests("no-such-model").into_iter().zip(endpoints) {
        let (status, error) = post(&base, path, &body, &[]).await;
        assert_eq!(status, 404, "{path}: {error}");
        let message = match path {
            "/v1/messages" => {
                assert_eq!(error["type"], "error", "{error}");
                assert_eq!(error["error"]["type"], "not_found_error", "{error}");
                &error["error"]["message"]
            }
            "/api/chat" => &error["error"],
            _ => &error["error"]["message"],
        };
        let message = message.as_str().unwrap_or_default();
        assert!(message.contains("no-such-model"), "{path}: {error}");
        let logged = wait_until(
            || {
                lines_saying(&serve, "request refused")
                    .iter()
                    .any(|l| l["span"]["endpoint"] == endpoint)
            },
            Duration::from_secs(5),
        );
        assert!(logged, "no refusal line for {endpoint}:\n{}", serve.log());
    }
    let refused = lines_saying(&serve, "request refused");
    for endpoint in endpoints {
        let lines: Vec<&Value> = refused
            .iter()
            .filter(|l| l["span"]["endpoint"] == endpoint)
            .collect();
        assert_eq!(lines.len(), 1, "{endpoint}: {lines:?}");
        assert_eq!(lines[0]["fields"]["status"], 404, "{endpoint}");
        assert_eq!(lines[0]["span"]["outcome"], 404, "{endpoint}");
        assert_eq!(lines[0]["span"]["model"], "no-such-model", "{endpoint}");
    }

    // A session records through each chat route.
    for (path, body, pointer) in requests(MODEL).into_iter().take(3) {
        let (status, created) = post(&base, "/v1/sessions", &json!({"model": MODEL}), &[]).await;
        assert_eq!(status, 201, "{created}");
        let id = created["id"].as_i64().expect("a session id").to_string();
        let header = [("x-superfluid-session", id.as_str())];
        let (status, answer) = post(&base, path, &body, &header).await;
        assert_eq!(status, 200, "{path}: {answer}");
        let said = text_at(&answer, pointer);
        let events = reqwest::get(format!("{base}/v1/sessions/{id}/events"))
            .await
            .expect("the session's events")
            .json::<Value>()
            .await
            .expect("JSON events");
        let events = events["events"].as_array().expect("an array of events");
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            ["created", "message", "generated"],
            "{path}: {events:?}"
        );
        assert_eq!(
            events[1]["body"],
            json!({"role": "user", "content": QUESTION}),
            "{path}"
        );
        assert_eq!(events[2]["body"]["content"], said.as_str(), "{path}");
    }
}
