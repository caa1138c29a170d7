//! A generation that fails part way, into a session (`/v1/sessions/{id}/
//! generate`) and into a stored response (`/v1/responses`): the turn ends
//! with a `generation_failed` event that names where it began, so that the
//! acknowledged events stay as they are and replays leave the turn out.

use super::node_tests::{fleet, post, stub, wait_for, Stub};
use super::tests::{catalog, MODEL};
use super::{router, AppState};
use crate::sessions::{EventKind, SessionId, SessionStore};
use axum::http::StatusCode;
use axum::Router;
use serde_json::{json, Value};

/// A router whose only node sends one token and then vanishes, and the
/// session store behind it.
async fn failing_app(tag: &str) -> (Router, SessionStore) {
    let dir = std::env::temp_dir().join(format!(
        "superfluid-session-failure-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let store = SessionStore::open(&dir.join(crate::sessions::DB_FILE)).unwrap();
    let (fleet, identity, addr) = fleet().await;
    stub(addr, &identity, "stub", 512, Stub::VanishAfterFirstToken).await;
    wait_for(&fleet, 1, 512).await;
    let app = router(AppState {
        catalog: catalog(),
        fleet,
        sessions: Some(store.clone()),
    });
    (app, store)
}

/// The kinds of the session's events, and the events themselves.
async fn history(store: &SessionStore, session: SessionId) -> Vec<(EventKind, i64, Value)> {
    let (events, _) = store.events(session, 0, 100).await.unwrap();
    events
        .into_iter()
        .map(|e| (e.kind, e.id.0, e.body))
        .collect()
}

#[tokio::test]
async fn a_failed_session_generation_ends_its_turn_with_a_failure_event() {
    let (app, store) = failing_app("generate").await;
    let (status, _, text) = post(app.clone(), "/v1/sessions", json!({"model": MODEL})).await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let id = serde_json::from_str::<Value>(&text).unwrap()["id"]
        .as_i64()
        .unwrap();
    let path = format!("/v1/sessions/{id}/messages");
    let (status, _, text) =
        post(app.clone(), &path, json!({"role": "user", "content": "Hi"})).await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let path = format!("/v1/sessions/{id}/generate");
    let (status, _, text) = post(app.clone(), &path, json!({})).await;
    assert!(status.is_server_error(), "{status}: {text}");

    let events = history(&store, SessionId(id)).await;
    let kinds: Vec<EventKind> = events.iter().map(|e| e.0).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Created,
            EventKind::Message,
            EventKind::GenerationPrompt,
            EventKind::GenerationFailed
        ]
    );
    // It names the prompt: the client's own message stays in the replay.
    assert_eq!(events[3].2["turn"], events[2].1);
    assert!(
        events[3].2["error"]["message"].is_string(),
        "{}",
        events[3].2
    );
    assert!(
        !store.is_generating(SessionId(id)),
        "the session is free again"
    );
}

#[tokio::test]
async fn a_failed_stored_response_names_its_input_as_the_turn_to_drop() {
    let (app, store) = failing_app("responses").await;
    let body = json!({"model": MODEL, "input": "Hi"});
    let (status, _, text) = post(app.clone(), "/v1/responses", body).await;
    assert!(status.is_server_error(), "{status}: {text}");

    let session = store.list(None, 10).await.unwrap()[0].id;
    let events = history(&store, session).await;
    let kinds: Vec<EventKind> = events.iter().map(|e| e.0).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Created,
            EventKind::Message,
            EventKind::GenerationPrompt,
            EventKind::GenerationFailed
        ]
    );
    // It names the input: the whole turn is left out of replays.
    assert_eq!(events[3].2["turn"], events[1].1);
    let replay = super::sessions::history::conversation(
        session,
        &store.events(session, 0, 100).await.unwrap().0,
    )
    .unwrap();
    assert!(replay.messages.is_empty(), "{:?}", replay.messages);

    // The stored response reads as failed, with what went wrong.
    let id = format!("resp_{}_{}", session, events[2].1);
    let found = super::responses::turn::find(&store, &id).await.unwrap();
    let view = found.view(false);
    assert_eq!(view.status.as_str(), "failed");
    assert!(found.is_latest(), "a failed turn can be deleted");
}
