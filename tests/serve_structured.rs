//! Structured output through `superfluid serve` with the real model: every
//! reply held to a JSON Schema validates against it, `json_object` gives a
//! JSON object, and schemas that cannot be enforced are refused or finish
//! cleanly while the server keeps serving.

use serde_json::{json, Map, Value};

use crate::support::{chat, error_message, Server};

const CHAT: &str = "/v1/chat/completions";

/// Required fields, an integer, an enum array and no other properties.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 40},
            "year": {"type": "integer"},
            "genres": {
                "type": "array",
                "items": {"type": "string", "enum": ["drama", "comedy", "science fiction", "horror"]},
                "maxItems": 3
            }
        },
        "required": ["title", "year", "genres"],
        "additionalProperties": false
    })
}

fn with_schema(prompt: &str, max_tokens: u32) -> Value {
    let mut body = chat(json!([{"role": "user", "content": prompt}]), max_tokens);
    body["response_format"] = json!({
        "type": "json_schema",
        "json_schema": {"name": "film", "schema": schema(), "strict": true}
    });
    body
}

/// Why `value` does not validate against [`schema`], if it does not: the
/// schema's keywords checked one by one.
fn schema_violation(value: &Value) -> Option<String> {
    let Some(object) = value.as_object() else {
        return Some("not an object".into());
    };
    for key in object.keys() {
        if !["title", "year", "genres"].contains(&key.as_str()) {
            return Some(format!("additional property {key:?}"));
        }
    }
    let field = |name: &str| object.get(name).ok_or(format!("missing {name:?}"));
    let check = |object: &Map<String, Value>| -> Result<(), String> {
        let _ = object;
        let title = field("title")?;
        if title.as_str().is_none_or(|t| t.chars().count() > 40) {
            return Err(format!(
                "title {title} is not a string of at most 40 characters"
            ));
        }
        let year = field("year")?;
        if !(year.is_i64() || year.is_u64()) {
            return Err(format!("year {year} is not an integer"));
        }
        let genres = field("genres")?
            .as_array()
            .ok_or("genres is not an array")?;
        if genres.len() > 3 {
            return Err(format!("{} genres, more than 3", genres.len()));
        }
        let allowed = ["drama", "comedy", "science fiction", "horror"];
        if let Some(bad) = genres
            .iter()
            .find(|g| !g.as_str().is_some_and(|g| allowed.contains(&g)))
        {
            return Err(format!("genre {bad} is not in the enum"));
        }
        Ok(())
    };
    check(object).err()
}

fn content(body: &Value) -> &str {
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no content in {body}"))
}

#[tokio::test]
async fn every_reply_validates_against_its_schema_even_where_greedy_text_is_not_json() {
    let server = Server::start(&["--ctx", "1024"]).expect("serve starts");
    let joke = "Tell me a short joke about cats.";
    let (status, plain) = server
        .post(CHAT, &chat(json!([{"role": "user", "content": joke}]), 64))
        .await
        .expect("plain request");
    assert_eq!(status, 200, "{plain}");
    assert!(
        serde_json::from_str::<Value>(content(&plain)).is_err(),
        "the unconstrained answer was JSON already: {plain}"
    );
    for prompt in [
        joke,
        "Describe your favourite film.",
        "What is the capital of France?",
        "List three prime numbers.",
    ] {
        let (status, body) = server
            .post(CHAT, &with_schema(prompt, 200))
            .await
            .expect("constrained request");
        assert_eq!(status, 200, "{prompt}: {body}");
        // The grammar leaves no free whitespace to pad with, so the JSON
        // closes well within 200 tokens.
        assert_eq!(
            body["choices"][0]["finish_reason"], "stop",
            "{prompt}: {body}"
        );
        let text = content(&body);
        let value: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("{prompt}: {text:?} is not JSON: {e}"));
        assert_eq!(schema_violation(&value), None, "{prompt}: {text}");
    }
}

#[tokio::test]
async fn json_object_streams_and_completes_as_a_json_object_on_both_endpoints() {
    let server = Server::start(&["--ctx", "1024"]).expect("serve starts");
    let mut body = chat(
        json!([{"role": "user", "content": "Give me a recipe for pancakes."}]),
        200,
    );
    body["response_format"] = json!({"type": "json_object"});
    body["stream"] = json!(true);
    let (events, _) = server.stream(CHAT, &body).await.expect("stream");
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let text: String = events
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    let value: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?} is not JSON: {e}"));
    assert!(value.is_object(), "{text}");

    let completion = json!({
        "model": crate::support::MODEL,
        "prompt": "The weather today is",
        "temperature": 0,
        "max_tokens": 200,
        "response_format": {"type": "json_object"},
    });
    let (status, answer) = server
        .post("/v1/completions", &completion)
        .await
        .expect("completion");
    assert_eq!(status, 200, "{answer}");
    let text = answer["choices"][0]["text"].as_str().unwrap_or_default();
    let value: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?} is not JSON: {e}"));
    assert!(value.is_object(), "{text}");
}

#[tokio::test]
async fn a_constrained_reply_cut_by_max_tokens_or_a_stop_string_says_so() {
    let server = Server::start(&["--ctx", "1024"]).expect("serve starts");
    let (status, body) = server
        .post(CHAT, &with_schema("Describe a film.", 4))
        .await
        .expect("short request");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    assert!(content(&body).starts_with('{'), "{body}");

    let mut stopped = with_schema("Describe a film.", 200);
    stopped["stop"] = json!(["\"year\""]);
    let (status, body) = server.post(CHAT, &stopped).await.expect("stop request");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");
    assert!(!content(&body).contains("\"year\""), "{body}");
}

#[tokio::test]
async fn hostile_schemas_are_refused_or_finish_and_the_server_keeps_serving() {
    let server = Server::start(&["--ctx", "1024"]).expect("serve starts");
    let mut deep = json!({"type": "integer"});
    for _ in 0..60 {
        deep = json!({"type": "object", "properties": {"a": deep}, "required": ["a"]});
    }
    let huge_enum: Vec<String> = (0..20_000).map(|i| format!("value number {i}")).collect();
    let hostile = [
        ("deep nesting", deep),
        (
            "a huge enum",
            json!({"type": "object", "properties": {"v": {"enum": huge_enum}}, "required": ["v"]}),
        ),
        (
            "an unsatisfiable schema",
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["n"]}),
        ),
        (
            "a pattern that does not compile",
            json!({"type": "object", "properties": {"id": {"type": "string", "pattern": "(a"}}, "required": ["id"]}),
        ),
        (
            "an impossible type",
            json!({"type": "object", "properties": {"x": {"allOf": [{"type": "string"}, {"type": "integer"}]}}, "required": ["x"]}),
        ),
    ];
    for (what, schema) in hostile {
        let mut body = chat(json!([{"role": "user", "content": "Hello"}]), 32);
        body["response_format"] =
            json!({"type": "json_schema", "json_schema": {"name": "h", "schema": schema}});
        let (status, answer) = server.post(CHAT, &body).await.expect(what);
        match status {
            400 => {
                assert!(
                    answer["error"]["param"]
                        .as_str()
                        .is_some_and(|p| p.starts_with("response_format")),
                    "{what}: {answer}"
                );
                assert!(!error_message(&answer).is_empty());
            }
            200 => {
                let finish = &answer["choices"][0]["finish_reason"];
                assert!(finish == "stop" || finish == "length", "{what}: {answer}");
            }
            other => panic!("{what}: {other} {answer}"),
        }
        let (status, after) = server
            .post(CHAT, &chat(json!([{"role": "user", "content": "Hi"}]), 4))
            .await
            .expect("a plain request after");
        assert_eq!(status, 200, "after {what}: {after}");
    }
    let (status, body) = server
        .post(CHAT, &with_schema("Describe a film.", 200))
        .await
        .expect("a constrained request after");
    assert_eq!(status, 200, "{body}");
    let value: Value = serde_json::from_str(content(&body)).expect("JSON");
    assert_eq!(schema_violation(&value), None, "{body}");
}
