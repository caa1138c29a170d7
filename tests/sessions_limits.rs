//! The session limits end to end, on `superfluid serve` started with small
//! ones by flag: each refusal's status, code and message (which names the
//! limit, its value and its flag), and nothing written by a refused request.

use reqwest::Method;
use serde_json::{json, Value};

use crate::sessions_api::{call, code, get, post, serve};
use crate::sessions_crash::temp_dir;
use crate::support::{error_message, Server, MODEL};

async fn event_count(server: &Server, session: i64) -> usize {
    let events = get(server, &format!("/v1/sessions/{session}/events")).await;
    assert_eq!(events.status, 200, "{}", events.body);
    events.body["events"].as_array().map_or(0, Vec::len)
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

#[tokio::test(flavor = "multi_thread")]
async fn small_limits_set_by_flag_refuse_with_what_the_limit_is_and_how_to_change_it() {
    let dir = temp_dir("sessions-limits");
    let server = serve(
        &dir,
        &[
            "--session-max-events",
            "4",
            "--session-max-message-bytes",
            "200",
            "--session-max-per-key",
            "2",
        ],
    );
    let create = json!({"model": MODEL});

    // Sessions: two for this head's clients (it has no keys), then 429.
    let first = post(&server, "/v1/sessions", &create).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let sid = first.body["id"].as_i64().expect("id");
    let second = post(&server, "/v1/sessions", &create).await;
    assert_eq!(second.status, 201, "{}", second.body);
    let third = post(&server, "/v1/sessions", &create).await;
    assert_eq!(third.status, 429, "{}", third.body);
    assert_eq!(code(&third.body), "session_limit_per_key");
    assert_eq!(
        error_message(&third.body),
        "this head's clients (it has no API keys) already hold 2 sessions, over the limit of 2 sessions per API key (--session-max-per-key); purge sessions you no longer need (DELETE /v1/sessions/ID); or ask the operator to start the head with a larger --session-max-per-key"
    );

    // A message over 200 bytes: 413, and nothing written.
    let path = format!("/v1/sessions/{sid}/messages");
    let long = post(&server, &path, &user(&"x".repeat(300))).await;
    assert_eq!(long.status, 413, "{}", long.body);
    assert_eq!(code(&long.body), "session_message_too_large");
    let message = error_message(&long.body);
    assert!(
        message.contains("over the limit of 200 bytes per message (--session-max-message-bytes)"),
        "{message}"
    );
    assert_eq!(event_count(&server, sid).await, 1);

    // Events: `created` and two messages leave no room for a generation's
    // prompt and reply (5 > 4), so it is refused before a node is asked.
    for text in ["one", "two"] {
        let added = post(&server, &path, &user(text)).await;
        assert_eq!(added.status, 201, "{}", added.body);
    }
    let generate = format!("/v1/sessions/{sid}/generate");
    let refused = post(&server, &generate, &json!({})).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(code(&refused.body), "session_events_limit");
    let message = error_message(&refused.body);
    assert!(
        message.contains(&format!(
            "session {sid} holds 3 events and this would make it 5 (with the reply)"
        )) && message.contains("over the limit of 4 events per session (--session-max-events)"),
        "{message}"
    );
    assert_eq!(event_count(&server, sid).await, 3);
    let fourth = post(&server, &path, &user("three")).await;
    assert_eq!(fourth.status, 201, "{}", fourth.body);
    let fifth = post(&server, &path, &user("four")).await;
    assert_eq!(fifth.status, 422, "{}", fifth.body);
    assert_eq!(event_count(&server, sid).await, 4);

    // The Responses API: a long input is refused before a node is asked,
    // and no session is made.
    let input = json!({"model": MODEL, "input": "y".repeat(300)});
    let response = post(&server, "/v1/responses", &input).await;
    assert_eq!(response.status, 413, "{}", response.body);
    assert_eq!(code(&response.body), "session_message_too_large");

    // Purging a session makes room for another.
    let purged = call(
        &server,
        Method::DELETE,
        &format!("/v1/sessions/{sid}"),
        None,
        &[],
    )
    .await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    let again = post(&server, "/v1/sessions", &create).await;
    assert_eq!(again.status, 201, "{}", again.body);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_session_store_refuses_with_507_and_writes_nothing() {
    let dir = temp_dir("sessions-full");
    // Smaller than the empty database itself: every new session is refused.
    let server = serve(&dir, &["--session-max-total-bytes", "1024"]);
    let refused = post(&server, "/v1/sessions", &json!({"model": MODEL})).await;
    assert_eq!(refused.status, 507, "{}", refused.body);
    assert_eq!(code(&refused.body), "session_storage_full");
    let message = error_message(&refused.body);
    assert!(
        message.contains("--session-max-total-bytes") && message.contains("purge sessions"),
        "{message}"
    );
    let listed = get(&server, "/v1/sessions").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(
        listed.body["data"].as_array().map(Vec::len),
        Some(0),
        "{}",
        listed.body
    );
    let response = post(
        &server,
        "/v1/responses",
        &json!({"model": MODEL, "input": "hi"}),
    )
    .await;
    assert_eq!(response.status, 507, "{}", response.body);
    let _ = std::fs::remove_dir_all(&dir);
}
