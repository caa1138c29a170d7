//! Embeddings end to end: `superfluid serve` with the chat model and the
//! all-MiniLM-L6-v2 embedding model that `scripts/setup` installs, driven
//! by the official `openai` and `ollama` Python clients and by raw HTTP
//! for the refusals' bodies.

use std::time::Duration;

use serde_json::json;

use crate::fleet_support::serial;
use crate::python_clients::python_cases;
use crate::support::{error_message, Server, MODEL};

/// The embedding model's id.
const EMBED: &str = "all-MiniLM-L6-v2";

fn embed_model_path() -> String {
    crate::support::installed_model(&format!("{EMBED}.gguf"))
}

fn serve_with_embeddings() -> Server {
    let path = embed_model_path();
    Server::start(&["--embedding-model", &path]).expect("starting superfluid serve")
}

#[tokio::test]
async fn official_clients_embed_with_the_embedding_model() {
    let _serial = serial().await;
    let server = serve_with_embeddings();
    let ollama_host = server.base.clone();
    python_cases(
        "embeddings_client.py",
        &server.url("/v1"),
        &[
            ("SUPERFLUID_OLLAMA_HOST", &ollama_host),
            ("SUPERFLUID_EMBED_MODEL", EMBED),
        ],
        &[
            "single_input_gives_one_unit_vector_of_384",
            "batch_equals_the_inputs_one_by_one",
            "paraphrase_ranks_above_unrelated",
            "base64_decodes_to_the_same_floats",
            "token_array_equals_its_text",
            "chat_model_is_refused_with_the_embedding_models",
            "empty_input_is_refused",
            "other_dimensions_are_refused",
            "ollama_embed_and_legacy_embeddings",
        ],
        Duration::from_secs(180),
    );
}

#[tokio::test]
async fn embedding_refusals_say_what_to_do() {
    let _serial = serial().await;
    let server = serve_with_embeddings();
    let cases = [
        (
            json!({"model": MODEL, "input": "hi"}),
            "model",
            "cannot compute embeddings",
        ),
        (json!({"model": EMBED, "input": ""}), "input", "empty"),
        (json!({"model": EMBED}), "input", "`input` is required"),
        (
            json!({"model": EMBED, "input": "hi", "encoding_format": "int8"}),
            "encoding_format",
            "\"float\" or \"base64\"",
        ),
        (
            json!({"model": EMBED, "input": [[101, 999999, 102]]}),
            "input",
            "not in the model's vocabulary",
        ),
        (
            json!({"model": EMBED, "input": "word ".repeat(600)}),
            "input",
            "at most 512 tokens",
        ),
    ];
    for (body, param, says) in cases {
        let (status, answer) = server.post("/v1/embeddings", &body).await.unwrap();
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["param"], param, "{body}: {answer}");
        let message = error_message(&answer);
        assert!(message.contains(says), "{body}: {message}");
    }
    // A field OpenAI does not document is named, not ignored.
    let (status, answer) = server
        .post(
            "/v1/embeddings",
            &json!({"model": EMBED, "input": "hi", "truncate": true}),
        )
        .await
        .unwrap();
    assert_eq!(status, 400, "{answer}");
    assert!(error_message(&answer).contains("truncate"), "{answer}");
    // The embedding model cannot generate text.
    let (status, answer) = server
        .post(
            "/v1/completions",
            &json!({"model": EMBED, "prompt": "hi", "max_tokens": 4}),
        )
        .await
        .unwrap();
    assert_eq!(status, 400, "{answer}");
    let message = error_message(&answer);
    assert!(
        message.contains("embedding model") && message.contains(MODEL),
        "{message}"
    );
    // A chat request naming it gets the same refusal, not a template error.
    let chat =
        json!({"model": EMBED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let (status, answer) = server.post("/v1/chat/completions", &chat).await.unwrap();
    assert_eq!(status, 400, "{answer}");
    assert_eq!(error_message(&answer), message, "{answer}");
    assert_eq!(answer["error"]["param"], "model", "{answer}");
    // Both models are listed, and chat still works beside embeddings.
    let models = server
        .client
        .get(server.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(models.contains(EMBED) && models.contains(MODEL), "{models}");
    let (status, answer) = server
        .post(
            "/v1/chat/completions",
            &crate::support::chat(json!([{"role": "user", "content": "Hi"}]), 4),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");
}
