//! `--kv-cache-type` end to end: a node serving with a q8_0 KV cache
//! answers the README's request, and `/v1/fleet` shows its KV cache's type
//! and bytes, about half of the same model's with the default f16. Offload
//! flags llama.cpp cannot take are refused at start, naming the choices.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::fleet_support::{bin, run_cmd, serial, TempDir};
use crate::serve_shutdown::start_serve_with;
use crate::support::{model_path, MODEL};

/// The README's first request.
fn readme_request() -> Value {
    json!({
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"}
        ],
        "temperature": 0
    })
}

/// What one served configuration showed.
struct Served {
    /// The answer to the README's request.
    answer: String,
    /// The first token's most likely candidates and their log-probabilities.
    first: Vec<(String, f64)>,
    /// The model's entry in `/v1/fleet`'s `model_memory`.
    memory: Value,
}

/// POSTs `body` to `base`'s chat route; the answer's JSON.
async fn chat(client: &reqwest::Client, base: &str, body: &Value) -> Value {
    let response = client
        .post(format!("{base}/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), 200, "{body}");
    response.json().await.expect("a JSON answer")
}

/// Serves the default model with `extra` flags, asks the README's request
/// (and its first token's candidates), and reads `/v1/fleet`.
async fn serve_and_ask(extra: &[&str]) -> Served {
    let (_serve, base) = start_serve_with(extra);
    let client = reqwest::Client::new();
    let body = chat(&client, &base, &readme_request()).await;
    let answer = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut first_token = readme_request();
    first_token["max_tokens"] = json!(1);
    first_token["logprobs"] = json!(true);
    first_token["top_logprobs"] = json!(4);
    let body = chat(&client, &base, &first_token).await;
    let first = body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        .as_array()
        .map(|top| {
            top.iter()
                .map(|t| {
                    let token = t["token"].as_str().unwrap_or_default().to_owned();
                    (token, t["logprob"].as_f64().unwrap_or(f64::NEG_INFINITY))
                })
                .collect()
        })
        .unwrap_or_default();
    let fleet: Value = client
        .get(format!("{base}/v1/fleet"))
        .send()
        .await
        .expect("GET /v1/fleet")
        .json()
        .await
        .expect("the fleet as JSON");
    let memory = fleet["nodes"][0]["model_memory"]
        .as_array()
        .and_then(|models| models.iter().find(|m| m["id"] == MODEL))
        .cloned()
        .unwrap_or_else(|| panic!("/v1/fleet shows no memory for {MODEL}: {fleet}"));
    Served {
        answer,
        first,
        memory,
    }
}

#[tokio::test]
async fn a_q8_0_kv_cache_answers_and_takes_about_half_of_f16s_bytes() {
    let _serial = serial().await;
    let q8 = serve_and_ask(&["--kv-cache-type", "q8_0"]).await;
    let f16 = serve_and_ask(&[]).await;
    eprintln!(
        "q8_0: {} {:?} answered {:?}",
        q8.memory, q8.first, q8.answer
    );
    eprintln!(
        "f16: {} {:?} answered {:?}",
        f16.memory, f16.first, f16.answer
    );
    assert!(!q8.answer.trim().is_empty(), "q8_0 gave no answer");
    assert_eq!(q8.memory["kv_cache_type"], "q8_0");
    assert_eq!(f16.memory["kv_cache_type"], "f16");

    // The README's question is a near tie for this small model at its
    // first token ("The" against "La", 0.13 nats apart with f16), which a
    // quantized KV cache may tip; what q8_0 must keep is the distribution.
    assert_eq!(q8.first.len(), 4, "{:?}", q8.first);
    for (token, logprob) in &f16.first {
        let q8_logprob = q8
            .first
            .iter()
            .find(|(t, _)| t == token)
            .map(|(_, l)| *l)
            .unwrap_or_else(|| panic!("{token:?} left q8_0's top 4: {:?}", q8.first));
        assert!(
            (q8_logprob - logprob).abs() < 0.3,
            "{token:?}: f16 {logprob}, q8_0 {q8_logprob}"
        );
    }

    let (q8_bytes, f16_bytes) = (
        q8.memory["kv_bytes"].as_u64().unwrap_or(0),
        f16.memory["kv_bytes"].as_u64().unwrap_or(0),
    );
    assert!(f16_bytes > 0, "f16's kv_bytes: {}", f16.memory);
    let ratio = q8_bytes as f64 / f16_bytes as f64;
    assert!(
        (0.4..=0.65).contains(&ratio),
        "q8_0 should take about half of f16's KV bytes (8.5 bits a value against 16): {q8_bytes} / {f16_bytes} = {ratio:.3}"
    );
}

/// Runs `superfluid serve` with `flags`, which it must refuse before
/// loading anything; its stderr.
fn refused(flags: &[&str]) -> String {
    let dir = TempDir::new("offload-refused");
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--http", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .arg("--model")
        .arg(model_path())
        .args(flags);
    let ran = run_cmd("serve", cmd, Duration::from_secs(30)).expect("serve ran");
    assert!(
        !ran.status.success(),
        "{flags:?} was taken: {}",
        ran.describe()
    );
    ran.stderr
}

#[test]
fn offload_values_llama_cpp_cannot_take_are_refused_naming_the_choices() {
    let stderr = refused(&["--kv-cache-type", "q5_1"]);
    assert!(stderr.contains("f16, q8_0, q4_0"), "{stderr}");
    let stderr = refused(&["--split-mode", "tensor"]);
    assert!(stderr.contains("layer, row, none"), "{stderr}");
    let stderr = refused(&["--flash-attn", "maybe"]);
    assert!(stderr.contains("auto, on, off"), "{stderr}");
    let stderr = refused(&["--gpu-layers", "all"]);
    assert!(stderr.contains("auto, or a number of layers"), "{stderr}");
    let stderr = refused(&["--kv-cache-type", "q8_0", "--flash-attn", "off"]);
    assert!(stderr.contains("--flash-attn auto or on"), "{stderr}");
}
