//! OpenAI's Responses API end to end: the official `openai` Python client
//! (tests/python/openai_responses.py) against `superfluid serve` with the
//! real model and a key: stored, continued with `previous_response_id`,
//! forked, streamed (raw events and the stream helper), retrieved, input
//! items, deleted, `store=False`, refused fields, `max_output_tokens`; and
//! function tools (tests/python/openai_responses_tools.py).

use std::time::Duration;

use crate::fleet_support::{serial, TempDir};
use crate::python_clients::python_cases;
use crate::support::{Server, MODEL};
use serde_json::{json, Value};

const KEY: &str = "sk-sf-responses-test";

#[tokio::test]
async fn the_openai_python_client_stores_continues_streams_and_deletes_responses() {
    let _serial = serial().await;
    let dir = TempDir::new("responses");
    let data_dir = dir.arg();
    let server = Server::start(&["--api-key", KEY, "--data-dir", &data_dir])
        .expect("starting superfluid serve");
    python_cases(
        "openai_responses.py",
        &server.url("/v1"),
        &[("SUPERFLUID_TEST_KEY", KEY)],
        &[
            "stored_response_is_continued_with_previous_response_id",
            "streamed_response_events_arrive_in_order_and_text_assembles",
            "stream_helper_accumulates_the_response",
            "retrieve_then_delete_then_404",
            "unstored_response_is_not_kept",
            "unsupported_fields_are_refused_by_name",
            "max_output_tokens_cuts_an_incomplete_response",
        ],
        Duration::from_secs(300),
    );
}

#[tokio::test]
async fn the_openai_python_client_calls_function_tools_through_responses() {
    let _serial = serial().await;
    let dir = TempDir::new("responses-tools");
    let data_dir = dir.arg();
    let server = Server::start(&["--api-key", KEY, "--data-dir", &data_dir])
        .expect("starting superfluid serve");
    python_cases(
        "openai_responses_tools.py",
        &server.url("/v1"),
        &[("SUPERFLUID_TEST_KEY", KEY)],
        &[
            "named_tool_choice_returns_a_function_call_with_valid_arguments",
            "required_returns_a_call",
            "the_calls_output_gets_a_text_answer_with_previous_response_id",
            "the_whole_item_list_with_call_and_output_gets_a_text_answer",
            "streamed_call_deltas_assemble_to_its_arguments",
            "tool_choice_none_gets_text",
            "a_bad_function_gets_a_400_naming_the_field",
        ],
        Duration::from_secs(300),
    );
}

#[tokio::test]
async fn a_response_cut_by_the_head_stopping_reads_as_failed_after_a_restart() {
    let _serial = serial().await;
    let dir = TempDir::new("responses-stopped");
    let data_dir = dir.arg();
    let flags = ["--data-dir", data_dir.as_str()];
    let server = Server::start(&flags).expect("starting superfluid serve");
    let first = json!({"model": MODEL, "input": "Say hi.", "max_output_tokens": 8});
    let (status, first) = server.post("/v1/responses", &first).await.expect("first");
    assert_eq!(status, 200, "{first}");
    let first_id = first["id"].as_str().expect("an id").to_owned();
    // A long streamed answer; the head is killed once text has come.
    let long = json!({"model": MODEL, "input": "Count from 1 to 1000, one number per line.",
        "max_output_tokens": 1500, "temperature": 0, "previous_response_id": first_id,
        "stream": true});
    let mut response = server
        .client
        .post(server.url("/v1/responses"))
        .json(&long)
        .send()
        .await
        .expect("the streamed request");
    let mut seen = String::new();
    while !seen.contains("response.output_text.delta") {
        let chunk = response
            .chunk()
            .await
            .expect("a chunk")
            .expect("more events");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let id = seen
        .split("\"id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the response id in response.created")
        .to_owned();
    drop(server); // SIGKILL, mid-answer
    let server = Server::start(&flags).expect("restarting superfluid serve");
    let got = server
        .client
        .get(server.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .expect("GET the cut response");
    assert_eq!(got.status().as_u16(), 200);
    let got: Value = got.json().await.expect("a response object");
    assert_eq!(got["status"], "failed", "{got}");
    let message = got["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("head stopped"), "{got}");
    // It has no answer to continue from; the response before it has.
    let (status, refused) = server
        .post(
            "/v1/responses",
            &json!({"input": "go on", "previous_response_id": id, "max_output_tokens": 4}),
        )
        .await
        .expect("continuing the cut response");
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["error"]["param"], "previous_response_id",
        "{refused}"
    );
    let (status, next) = server
        .post(
            "/v1/responses",
            &json!({"input": "And bye?", "previous_response_id": first_id, "max_output_tokens": 4}),
        )
        .await
        .expect("continuing the first response");
    assert_eq!(status, 200, "{next}");
}
