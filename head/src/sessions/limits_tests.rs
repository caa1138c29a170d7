//! The store's limits: each refuses a change whole, with an error that
//! names the limit, its value and its flag.

use serde_json::{json, Value};

use super::*;

fn temp_db(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "superfluid-session-limits-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join(DB_FILE)
}

fn limited(tag: &str, limits: SessionLimits) -> SessionStore {
    SessionStore::open_with(&temp_db(tag), limits).unwrap()
}

fn message(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn over(err: SessionError) -> (Limit, u64, String) {
    let text = err.to_string();
    match err {
        SessionError::OverLimit { limit, value, .. } => (limit, value, text),
        other => panic!("expected a limit error, got {other:?}"),
    }
}

async fn all_events(store: &SessionStore, session: SessionId) -> Vec<Event> {
    store.events(session, 0, 1000).await.unwrap().0
}

#[tokio::test]
async fn a_message_over_the_byte_limit_is_refused_and_not_written() {
    let limits = SessionLimits {
        max_message_bytes: 100,
        ..SessionLimits::default()
    };
    let store = limited("bytes", limits);
    let (info, _) = store.create(json!({}), Meta::default()).await.unwrap();
    store
        .append(info.id, EventKind::Message, message("short"))
        .await
        .unwrap();
    let err = store
        .append(info.id, EventKind::Message, message(&"x".repeat(200)))
        .await
        .unwrap_err();
    let (limit, value, text) = over(err);
    assert_eq!((limit, value), (Limit::MessageBytes, 100));
    assert!(
        text.contains("over the limit of 100 bytes per message (--session-max-message-bytes)"),
        "{text}"
    );
    assert!(text.contains("send a shorter message"), "{text}");
    assert_eq!(all_events(&store, info.id).await.len(), 2);
}

#[tokio::test]
async fn a_full_session_refuses_more_events_and_its_fork_does_too() {
    let limits = SessionLimits {
        max_events: 3,
        ..SessionLimits::default()
    };
    let store = limited("events", limits);
    let (info, _) = store.create(json!({}), Meta::default()).await.unwrap();
    store
        .append(info.id, EventKind::Message, message("a"))
        .await
        .unwrap();
    let last = store
        .append(info.id, EventKind::Message, message("b"))
        .await
        .unwrap();
    let err = store
        .append(info.id, EventKind::Message, message("c"))
        .await
        .unwrap_err();
    let (limit, value, text) = over(err);
    assert_eq!((limit, value), (Limit::Events, 3));
    assert!(
        text.contains(&format!(
            "session {} holds 3 events and this would make it 4",
            info.id
        )),
        "{text}"
    );
    assert!(text.contains("--session-max-events"), "{text}");
    // A fork at the last event would hold 4 (the parent's 3 and `forked`).
    let err = store.fork(info.id, last.id).await.unwrap_err();
    assert_eq!(over(err).0, Limit::Events);
    assert_eq!(
        store.list(None, 10).await.unwrap().len(),
        1,
        "no fork was made"
    );
}

#[tokio::test]
async fn a_turn_is_written_whole_with_room_for_its_reply_or_not_at_all() {
    let limits = SessionLimits {
        max_events: 4,
        ..SessionLimits::default()
    };
    let store = limited("turn", limits);
    let (info, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let guard = store.begin_generation(info.id).await.unwrap();
    // Two messages and a prompt, with a reply to come: 1 + 3 + 1 > 4.
    let turn = Turn {
        events: vec![
            (EventKind::Message, message("a")),
            (EventKind::Message, message("b")),
            (EventKind::GenerationPrompt, json!({})),
        ],
        reserve: 1,
    };
    let err = store.append_turn(&guard, turn).await.unwrap_err();
    assert_eq!(over(err).0, Limit::Events);
    assert_eq!(
        all_events(&store, info.id).await.len(),
        1,
        "nothing of the turn"
    );
    // One message and a prompt fit, and so does the reply they kept room for.
    let turn = Turn {
        events: vec![
            (EventKind::Message, message("a")),
            (EventKind::GenerationPrompt, json!({})),
        ],
        reserve: 1,
    };
    store.append_turn(&guard, turn).await.unwrap();
    store
        .append_generated(&guard, EventKind::Generated, json!({"content": "ok"}))
        .await
        .unwrap();
    drop(guard);
    assert_eq!(all_events(&store, info.id).await.len(), 4);
}

#[tokio::test]
async fn each_key_holds_at_most_its_sessions_and_purging_frees_room() {
    let limits = SessionLimits {
        max_sessions_per_key: 2,
        ..SessionLimits::default()
    };
    let store = limited("per-key", limits);
    let make = |owner: &str| {
        store.create_for(
            Some(owner.to_owned()),
            json!({}),
            Meta::default(),
            Turn::default(),
        )
    };
    let first = make("alice").await.unwrap().info;
    make("alice").await.unwrap();
    let err = make("alice").await.unwrap_err();
    let (limit, value, text) = over(err);
    assert_eq!((limit, value), (Limit::SessionsPerKey, 2));
    assert!(
        text.contains("the API key \"alice\" already holds 2 sessions"),
        "{text}"
    );
    assert!(text.contains("--session-max-per-key"), "{text}");
    // Another key has its own count; a purge frees one of alice's.
    make("bob").await.unwrap();
    store.purge(first.id, None, false).await.unwrap();
    make("alice").await.unwrap();
    assert_eq!(store.list(None, 10).await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_full_database_refuses_new_data_and_keeps_what_it_acknowledged() {
    let limits = SessionLimits {
        max_total_bytes: 128 * 1024,
        ..SessionLimits::default()
    };
    let store = limited("total", limits);
    let (info, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let text = "x".repeat(2000);
    let mut acknowledged = 0;
    let err = loop {
        match store
            .append(info.id, EventKind::Message, message(&text))
            .await
        {
            Ok(_) => acknowledged += 1,
            Err(err) => break err,
        }
        assert!(
            acknowledged < 200,
            "128 KiB holds fewer than 200 messages of 2 KB"
        );
    };
    let (limit, value, text) = over(err);
    assert_eq!((limit, value), (Limit::TotalBytes, 128 * 1024));
    assert!(
        text.contains(
            "over the limit of 131072 bytes for all sessions (--session-max-total-bytes)"
        ),
        "{text}"
    );
    assert!(acknowledged > 10, "the limit left room: {acknowledged}");
    assert_eq!(all_events(&store, info.id).await.len(), 1 + acknowledged);
    // A new session is refused too.
    let err = store.create(json!({}), Meta::default()).await.unwrap_err();
    assert_eq!(over(err).0, Limit::TotalBytes);
}

#[tokio::test]
async fn a_generation_end_is_never_refused() {
    let limits = SessionLimits {
        max_events: 3,
        max_message_bytes: 10,
        ..SessionLimits::default()
    };
    let store = limited("ending", limits);
    let (info, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let guard = store.begin_generation(info.id).await.unwrap();
    store
        .append_generated(&guard, EventKind::GenerationPrompt, json!({}))
        .await
        .unwrap();
    // Past the byte limit, and still committed: the reply was produced.
    let reply = json!({"content": "a reply longer than ten bytes"});
    store
        .append_generated(&guard, EventKind::Generated, reply)
        .await
        .unwrap();
    assert_eq!(all_events(&store, info.id).await.len(), 3);
}
