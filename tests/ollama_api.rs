//! The Ollama API through `superfluid serve` with the real model: each
//! endpoint streamed and not, and each refusal in Ollama's error shape.

use crate::support::{Server, MODEL};
use serde_json::{json, Value};

/// A greedy Ollama chat request.
fn chat(messages: Value, num_predict: i64, stream: bool) -> Value {
    json!({
        "model": MODEL,
        "messages": messages,
        "stream": stream,
        "options": {"temperature": 0, "num_predict": num_predict},
    })
}

fn france() -> Value {
    json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"}
    ])
}

/// POSTs `body`; returns the status, the content type, the node header and
/// the body's lines parsed as JSON.
async fn ndjson(
    server: &Server,
    path: &str,
    body: &Value,
) -> (u16, String, Option<String>, Vec<Value>) {
    let resp = server
        .client
        .post(server.url(path))
        .json(body)
        .send()
        .await
        .expect("request sent");
    let status = resp.status().as_u16();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header("content-type").unwrap_or_default();
    let node = header("x-superfluid-node");
    let text = resp.text().await.expect("body read");
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l:?} is not JSON: {e}")))
        .collect();
    (status, content_type, node, lines)
}

/// The Ollama error text of a body.
fn error(body: &Value) -> String {
    body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error string in {body}"))
        .to_owned()
}

fn assert_final_counts(last: &Value) {
    assert_eq!(last["done"], true, "{last}");
    assert!(
        last["done_reason"] == "stop" || last["done_reason"] == "length",
        "{last}"
    );
    for field in [
        "total_duration",
        "load_duration",
        "prompt_eval_duration",
        "eval_duration",
        "prompt_eval_count",
        "eval_count",
    ] {
        assert!(last[field].as_u64().is_some(), "{field} missing in {last}");
    }
    assert!(last["eval_count"].as_u64().unwrap_or(0) > 0, "{last}");
    assert!(last["total_duration"].as_u64().unwrap_or(0) > 0, "{last}");
    let created = last["created_at"].as_str().unwrap_or_default();
    assert!(created.len() > 20 && created.ends_with('Z'), "{last}");
    assert_eq!(last["model"], MODEL);
}

#[tokio::test]
async fn chat_answers_whole_and_streamed_and_the_second_turn_is_cached() {
    let server = Server::start(&[]).expect("starting superfluid serve");
    let (status, body) = server
        .post("/api/chat", &chat(france(), 48, false))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let whole = body["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(whole.contains("Paris"), "{body}");
    assert_eq!(body["message"]["role"], "assistant");
    assert_final_counts(&body);

    let (status, content_type, node, lines) =
        ndjson(&server, "/api/chat", &chat(france(), 48, true)).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "application/x-ndjson");
    assert!(
        node.is_some_and(|n| !n.is_empty()),
        "no x-superfluid-node header"
    );
    let (last, pieces) = lines.split_last().expect("at least one line");
    assert!(pieces.len() > 1, "the answer came in one piece: {lines:?}");
    assert!(pieces.iter().all(|l| l["done"] == false), "{lines:?}");
    let streamed: String = lines
        .iter()
        .map(|l| l["message"]["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(streamed, whole);
    assert_final_counts(last);

    // The same conversation's next turn finds its start in the node's cache.
    let mut turns = france().as_array().cloned().unwrap_or_default();
    turns.push(json!({"role": "assistant", "content": whole}));
    turns.push(json!({"role": "user", "content": "And of Italy?"}));
    let (status, second) = server
        .post("/api/chat", &chat(json!(turns), 16, false))
        .await
        .unwrap();
    assert_eq!(status, 200, "{second}");
    let cached = second["prompt_cached_count"].as_u64().unwrap_or(0);
    assert!(
        cached > 10,
        "the second turn should find the first cached: {second}"
    );
    assert!(
        second["prompt_eval_count"].as_u64().unwrap_or(0) > 0,
        "{second}"
    );

    // A request without messages only loads the model, as in Ollama.
    let (status, loaded) = server
        .post("/api/chat", &json!({"model": MODEL, "messages": []}))
        .await
        .unwrap();
    assert_eq!(status, 200, "{loaded}");
    assert_eq!(loaded["done_reason"], "load", "{loaded}");
}

#[tokio::test]
async fn generate_answers_whole_streamed_raw_and_as_json() {
    let server = Server::start(&[]).expect("starting superfluid serve");
    let request = json!({
        "model": format!("{MODEL}:latest"),
        "prompt": "What is the capital of France?",
        "system": "You are a helpful assistant.",
        "stream": false,
        "options": {"temperature": 0, "num_predict": 32},
    });
    let (status, body) = server.post("/api/generate", &request).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let whole = body["response"].as_str().unwrap_or_default().to_owned();
    assert!(whole.contains("Paris"), "{body}");
    assert_final_counts(&body);

    let mut streaming = request.clone();
    streaming["stream"] = json!(true);
    let (status, _, _, lines) = ndjson(&server, "/api/generate", &streaming).await;
    assert_eq!(status, 200);
    let streamed: String = lines
        .iter()
        .map(|l| l["response"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(streamed, whole);
    assert_final_counts(lines.last().expect("a last line"));

    // `num_predict` is a limit the answer reports reaching.
    let (status, short) = server
        .post(
            "/api/generate",
            &json!({"model": MODEL, "prompt": "Count to fifty:", "raw": true, "stream": false,
            "options": {"temperature": 0, "num_predict": 3}}),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{short}");
    assert_eq!(short["eval_count"], 3, "{short}");
    assert_eq!(short["done_reason"], "length", "{short}");

    // `format` with a schema gives JSON of that schema.
    let schema =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let (status, structured) = server
        .post(
            "/api/generate",
            &json!({"model": MODEL, "prompt": "Name the capital of France as JSON.",
            "format": schema, "stream": false, "options": {"temperature": 0, "num_predict": 64}}),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{structured}");
    let answer: Value = serde_json::from_str(structured["response"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {structured}"));
    assert!(answer["city"].is_string(), "{answer}");

    // Curl's default form content type is read as JSON, as Ollama does.
    let (status, body) = server
        .post_raw("/api/generate", "application/x-www-form-urlencoded",
            &json!({"model": MODEL, "prompt": "Hi", "stream": false, "options": {"num_predict": 2}}).to_string())
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn listings_probes_and_refusals_answer_in_ollamas_shape() {
    let server = Server::start(&[]).expect("starting superfluid serve");
    let get = |path: &str| {
        let url = server.url(path);
        let client = server.client.clone();
        async move {
            let resp = client.get(url).send().await.expect("sent");
            (resp.status().as_u16(), resp.text().await.expect("read"))
        }
    };
    let (status, text) = get("/").await;
    assert_eq!((status, text.as_str()), (200, "superfluid is running"));
    let head = server.client.head(server.url("/")).send().await.unwrap();
    assert_eq!(head.status().as_u16(), 200);

    let (status, text) = get("/api/tags").await;
    assert_eq!(status, 200, "{text}");
    let tags: Value = serde_json::from_str(&text).unwrap();
    let model = &tags["models"][0];
    assert_eq!(model["name"], MODEL, "{tags}");
    assert!(model["size"].as_u64().unwrap_or(0) > 1_000_000, "{tags}");
    assert_eq!(model["details"]["format"], "gguf", "{tags}");
    assert_eq!(model["details"]["family"], "llama", "{tags}");

    let (status, text) = get("/api/ps").await;
    assert_eq!(status, 200, "{text}");
    let ps: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(ps["models"][0]["name"], MODEL, "{ps}");

    let (status, text) = get("/api/version").await;
    assert_eq!(status, 200);
    assert!(
        serde_json::from_str::<Value>(&text).unwrap()["version"].is_string(),
        "{text}"
    );

    let (status, show) = server
        .post("/api/show", &json!({"model": MODEL}))
        .await
        .unwrap();
    assert_eq!(status, 200, "{show}");
    assert!(
        show["template"]
            .as_str()
            .unwrap_or_default()
            .contains("im_start"),
        "{show}"
    );
    assert!(
        show["parameters"]
            .as_str()
            .unwrap_or_default()
            .contains("num_ctx"),
        "{show}"
    );
    assert_eq!(
        show["model_info"]["general.architecture"], "llama",
        "{show}"
    );
    assert!(
        show["model_info"]["llama.context_length"]
            .as_u64()
            .is_some(),
        "{show}"
    );

    for (path, body, status, says) in [
        ("/api/show", json!({"model": "nope"}), 404, "not found"),
        (
            "/api/chat",
            chat(json!([{"role": "user", "content": "x"}]), 4, false).tap("model", json!("nope")),
            404,
            "nope",
        ),
        (
            "/api/embed",
            json!({"model": MODEL, "input": "x"}),
            400,
            "cannot compute embeddings",
        ),
        (
            "/api/embeddings",
            json!({"model": MODEL, "prompt": "x"}),
            400,
            "cannot compute embeddings",
        ),
        ("/api/pull", json!({"model": "llama3"}), 400, "--model"),
        ("/api/create", json!({"model": "x"}), 400, "--model"),
        (
            "/api/copy",
            json!({"source": "a", "destination": "b"}),
            400,
            "--model",
        ),
        ("/api/unknown", json!({}), 404, "/api/chat"),
        (
            "/api/chat",
            chat(json!([{"role": "user", "content": "x"}]), 4, false)
                .tap("tools", json!([{"type": "function", "function": {}}])),
            400,
            "tools[0].function.name",
        ),
        (
            "/api/chat",
            chat(
                json!([{"role": "user", "content": "x", "images": ["aGk="]}]),
                4,
                false,
            ),
            400,
            "images",
        ),
        (
            "/api/chat",
            chat(json!([]), 4, false).tap("bogus", json!(1)),
            400,
            "bogus",
        ),
        (
            "/api/chat",
            chat(json!([]), 4, false).tap("options", json!({"mirostat": 2})),
            400,
            "mirostat",
        ),
        (
            "/api/chat",
            chat(json!([{"role": "user", "content": "x"}]), 4, false)
                .tap("options", json!({"num_ctx": 100_000_000})),
            400,
            "num_ctx",
        ),
        (
            "/api/chat",
            chat(json!([{"role": "user", "content": "x"}]), 4, false)
                .tap("options", json!({"temperature": 7})),
            400,
            "options.temperature",
        ),
        (
            "/api/generate",
            json!({"model": MODEL, "prompt": "x", "template": "{{ .Prompt }}"}),
            400,
            "template",
        ),
        (
            "/api/generate",
            json!({"model": MODEL, "prompt": "x", "think": true}),
            400,
            "think",
        ),
        (
            "/api/generate",
            json!({"model": MODEL, "prompt": "x".repeat(300), "options": {"num_ctx": 64}}),
            400,
            "context length",
        ),
    ] {
        let (got, answer) = server.post(path, &body).await.unwrap();
        assert_eq!(got, status, "{path} {body}: {answer}");
        let message = error(&answer);
        assert!(message.contains(says), "{path} {body}: {message}");
    }
    let (status, text) = get("/api/delete").await;
    assert_eq!(status, 400, "{text}");
}

#[tokio::test]
async fn ollama_port_serves_the_same_api() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let server =
        Server::start(&["--ollama-port", &port.to_string()]).expect("starting superfluid serve");
    let base = format!("http://127.0.0.1:{port}");
    let text = server
        .client
        .get(format!("{base}/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "superfluid is running");
    let resp = server
        .client
        .post(format!("{base}/api/chat"))
        .json(&chat(france(), 8, false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["done"], true, "{body}");
}

/// `value` with `key` set.
trait Tap {
    fn tap(self, key: &str, value: Value) -> Value;
}

impl Tap for Value {
    fn tap(mut self, key: &str, value: Value) -> Value {
        self[key] = value;
        self
    }
}

#[tokio::test]
async fn the_ollama_python_client_chats_generates_lists_and_shows() {
    let _serial = crate::fleet_support::serial().await;
    let server = Server::start(&[]).expect("starting superfluid serve");
    crate::python_clients::python_cases(
        "ollama_client.py",
        &server.base,
        &[("SUPERFLUID_OLLAMA_HOST", &server.base)],
        &[
            "chat",
            "streamed_chat",
            "generate",
            "structured_chat",
            "chat_with_tools",
            "streamed_chat_with_tools",
            "tool_result_gets_text",
            "list_names_the_model",
            "show_gives_template_and_model_info",
            "embed_of_a_chat_model_raises_bad_request",
            "pull_raises_with_how_models_arrive",
        ],
        std::time::Duration::from_secs(180),
    );
}
