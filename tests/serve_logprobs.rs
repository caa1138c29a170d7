//! Log probabilities and `n` through `superfluid serve` with the real model
//! and the official `openai` Python client (tests/python/openai_logprobs.py):
//! real, sorted log-probabilities whole and streamed, the greedy token on
//! top, `n` indexed choices reproducible with a seed and computing their
//! prompt once, the legacy completions shape, and 400s naming the field out
//! of range.

use std::time::Duration;

use serde_json::json;

use crate::fleet_support::serial;
use crate::python_clients::python_cases;
use crate::scrape::{parse, sum};
use crate::support::{chat, Server, MODEL};

#[tokio::test]
async fn the_openai_python_client_reads_logprobs_and_n_choices() {
    let _serial = serial().await;
    let server = Server::start(&[]).expect("starting superfluid serve");
    python_cases(
        "openai_logprobs.py",
        &server.url("/v1"),
        &[],
        &[
            "chat_logprobs_are_real_sorted_and_the_greedy_token_is_the_top_one",
            "streamed_logprobs_concatenate_to_the_text",
            "n_gives_indexed_choices_with_summed_usage",
            "seeded_n_is_reproducible_whole_and_streamed",
            "legacy_completions_logprobs_shape",
            "out_of_range_is_a_400_naming_the_field",
        ],
        Duration::from_secs(400),
    );
}

#[tokio::test]
async fn logprobs_with_tools_or_echo_are_refused_naming_the_field() {
    let server = Server::start(&[]).expect("serve starts");
    let tools = json!([{"type": "function", "function": {"name": "f"}}]);
    let mut body = chat(json!([{"role": "user", "content": "Hi"}]), 4);
    body["tools"] = tools.clone();
    body["logprobs"] = json!(true);
    let (status, answer) = server
        .post("/v1/chat/completions", &body)
        .await
        .expect("chat");
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "logprobs", "{answer}");

    let mut body = chat(json!([{"role": "user", "content": "Hi"}]), 4);
    body["tools"] = tools;
    body["n"] = json!(2);
    let (status, answer) = server
        .post("/v1/chat/completions", &body)
        .await
        .expect("chat");
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "n", "{answer}");

    let echo =
        json!({"model": MODEL, "prompt": "Hi", "max_tokens": 2, "echo": true, "logprobs": 1});
    let (status, answer) = server
        .post("/v1/completions", &echo)
        .await
        .expect("completion");
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "echo", "{answer}");
}

/// `superfluid_prompt_tokens_total` for the default model, by source.
async fn prompt_tokens(server: &Server) -> (f64, f64) {
    let page = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the metrics page");
    let samples = parse(&page);
    let of = |source| {
        sum(
            &samples,
            "superfluid_prompt_tokens_total",
            &[("model", MODEL), ("source", source)],
        )
    };
    (of("computed"), of("cached"))
}

#[tokio::test]
async fn the_n_choices_of_one_prompt_compute_it_once() {
    let server = Server::start(&[]).expect("serve starts");
    let story = "The lighthouse keeper counted the ships that passed each night, \
        writing their names in a book with a green cover. "
        .repeat(40);
    let mut body = chat(json!([{"role": "user", "content": story}]), 4);
    body["n"] = json!(3);
    body["temperature"] = json!(1.0);
    body["seed"] = json!(7);
    let (computed_before, cached_before) = prompt_tokens(&server).await;
    let (status, answer) = server
        .post("/v1/chat/completions", &body)
        .await
        .expect("chat");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["choices"].as_array().map(Vec::len),
        Some(3),
        "{answer}"
    );
    let prompt = answer["usage"]["prompt_tokens"].as_f64().expect("usage");
    assert!(prompt > 100.0, "{answer}");
    let (computed, cached) = prompt_tokens(&server).await;
    let (computed, cached) = (computed - computed_before, cached - cached_before);
    // The first choice computes the prompt; the other two copy all of it
    // but the token whose logits they sample from.
    assert!(
        computed <= prompt + 2.0,
        "{computed} prompt tokens computed for 3 choices of a {prompt}-token prompt, {cached} cached"
    );
    assert!(
        cached >= 2.0 * (prompt - 1.0),
        "{cached} cached of {prompt}"
    );
}
