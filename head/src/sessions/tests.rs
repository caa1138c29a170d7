use std::path::PathBuf;

use serde_json::json;

use super::*;

fn temp_db(tag: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("superfluid-sessions-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join(DB_FILE)
}

async fn store(tag: &str) -> SessionStore {
    SessionStore::open(&temp_db(tag)).unwrap()
}

async fn user(store: &SessionStore, session: SessionId, text: &str) -> Event {
    store
        .append(
            session,
            EventKind::Message,
            json!({"role": "user", "content": text}),
        )
        .await
        .unwrap()
}

fn texts(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e.kind {
            EventKind::Message => e.body["content"].as_str().unwrap_or_default().to_owned(),
            kind => kind.as_str().to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn appended_events_come_back_in_order_with_ids_and_seqs() {
    let store = store("order").await;
    let (info, created) = store
        .create(json!({"system": "be brief"}), Meta::default())
        .await
        .unwrap();
    assert_eq!((created.seq, created.kind), (1, EventKind::Created));
    let a = user(&store, info.id, "a").await;
    let b = user(&store, info.id, "b").await;
    assert_eq!((a.seq, b.seq), (2, 3));
    assert!(a.id < b.id);
    let (events, next) = store.events(info.id, 0, 100).await.unwrap();
    assert_eq!(texts(&events), ["created", "a", "b"]);
    assert_eq!(next, 3);
    let (rest, next) = store.events(info.id, 1, 1).await.unwrap();
    assert_eq!((texts(&rest), next), (vec!["a".to_owned()], 2));
    let (none, next) = store.events(info.id, 3, 10).await.unwrap();
    assert!(none.is_empty());
    assert_eq!(next, 3);
    assert_eq!(store.get(info.id).await.unwrap().last_seq, 3);
}

#[tokio::test]
async fn events_survive_reopening_the_database() {
    let path = temp_db("reopen");
    let id = {
        let store = SessionStore::open(&path).unwrap();
        let (info, _) = store.create(json!({}), Meta::default()).await.unwrap();
        user(&store, info.id, "kept").await;
        info.id
    };
    let store = SessionStore::open(&path).unwrap();
    let (events, _) = store.events(id, 0, 10).await.unwrap();
    assert_eq!(texts(&events), ["created", "kept"]);
}

#[tokio::test]
async fn unknown_session_is_not_found() {
    let store = store("unknown").await;
    let err = store
        .append(SessionId(42), EventKind::Message, json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::NotFound {
                session: SessionId(42)
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("no session 42"), "{err}");
}

#[tokio::test]
async fn fork_shares_history_up_to_the_event_and_then_diverges() {
    let store = store("fork").await;
    let (root, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let a = user(&store, root.id, "a").await;
    user(&store, root.id, "b").await;
    let (child, forked) = store.fork(root.id, a.id).await.unwrap();
    assert_eq!((child.parent, child.at), (Some(root.id), Some(a.id)));
    assert_eq!((forked.kind, forked.seq), (EventKind::Forked, 3));
    user(&store, child.id, "c").await;
    let (events, _) = store.events(child.id, 0, 100).await.unwrap();
    assert_eq!(texts(&events), ["created", "a", "forked", "c"]);
    let (parent_events, _) = store.events(root.id, 0, 100).await.unwrap();
    assert_eq!(texts(&parent_events), ["created", "a", "b"]);
    // A fork of the fork at an inherited event shares the root's history.
    let (grandchild, _) = store.fork(child.id, a.id).await.unwrap();
    let (events, _) = store.events(grandchild.id, 0, 100).await.unwrap();
    assert_eq!(texts(&events), ["created", "a", "forked"]);
    let tree = store.tree(grandchild.id).await.unwrap();
    let ids: Vec<_> = tree.iter().map(|s| (s.id, s.parent)).collect();
    assert_eq!(
        ids,
        [
            (root.id, None),
            (child.id, Some(root.id)),
            (grandchild.id, Some(child.id))
        ]
    );
}

#[tokio::test]
async fn fork_at_an_event_outside_the_history_is_refused() {
    let store = store("fork-outside").await;
    let (one, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let (two, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let other = user(&store, two.id, "elsewhere").await;
    let err = store.fork(one.id, other.id).await.unwrap_err();
    assert!(
        matches!(err, SessionError::EventNotInHistory { .. }),
        "{err}"
    );
    let err = store.fork(one.id, EventId(9999)).await.unwrap_err();
    assert!(
        err.to_string().contains("not in the history of session"),
        "{err}"
    );
    // The child's events after its fork point are not the parent's.
    let a = user(&store, one.id, "a").await;
    let (child, _) = store.fork(one.id, a.id).await.unwrap();
    let c = user(&store, child.id, "c").await;
    assert!(matches!(
        store.fork(one.id, c.id).await,
        Err(SessionError::EventNotInHistory { .. })
    ));
}

#[tokio::test]
async fn trim_drops_later_events_and_bumps_the_version() {
    let store = store("trim").await;
    let (root, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let a = user(&store, root.id, "a").await;
    user(&store, root.id, "b").await;
    let trimmed = store.trim(root.id, a.id, Some(1)).await.unwrap();
    assert_eq!((trimmed.version, trimmed.last_seq), (2, 2));
    let after = user(&store, root.id, "b2").await;
    assert_eq!(after.seq, 3);
    let (events, _) = store.events(root.id, 0, 100).await.unwrap();
    assert_eq!(texts(&events), ["created", "a", "b2"]);
    let err = store.trim(root.id, a.id, Some(1)).await.unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::StaleVersion {
                expected: 1,
                current: 2,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn trim_into_inherited_history_keeps_only_the_shared_part() {
    let store = store("trim-inherited").await;
    let (root, created) = store.create(json!({}), Meta::default()).await.unwrap();
    let a = user(&store, root.id, "a").await;
    let (child, _) = store.fork(root.id, a.id).await.unwrap();
    user(&store, child.id, "c").await;
    let trimmed = store.trim(child.id, created.id, None).await.unwrap();
    assert_eq!((trimmed.at, trimmed.last_seq), (Some(created.id), 1));
    let (events, _) = store.events(child.id, 0, 100).await.unwrap();
    assert_eq!(texts(&events), ["created"]);
}

#[tokio::test]
async fn trim_before_a_fork_point_is_refused() {
    let store = store("trim-fork").await;
    let (root, created) = store.create(json!({}), Meta::default()).await.unwrap();
    let a = user(&store, root.id, "a").await;
    let (child, _) = store.fork(root.id, a.id).await.unwrap();
    let err = store.trim(root.id, created.id, None).await.unwrap_err();
    assert!(
        matches!(err, SessionError::ForkedAfter { child: c, .. } if c == child.id),
        "{err}"
    );
    assert!(err.to_string().contains("purge the fork first"), "{err}");
    // Trimming to the fork point itself is fine.
    store.trim(root.id, a.id, None).await.unwrap();
}

#[tokio::test]
async fn purge_refuses_forks_without_cascade_and_stale_versions() {
    let store = store("purge").await;
    let (root, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let a = user(&store, root.id, "a").await;
    let (child, _) = store.fork(root.id, a.id).await.unwrap();
    let (grandchild, _) = store.fork(child.id, a.id).await.unwrap();
    let err = store.purge(root.id, None, false).await.unwrap_err();
    assert!(matches!(err, SessionError::HasForks { .. }), "{err}");
    assert!(err.to_string().contains(&child.id.to_string()), "{err}");
    let err = store.purge(root.id, Some(7), true).await.unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::StaleVersion {
                expected: 7,
                current: 1,
                ..
            }
        ),
        "{err}"
    );
    let gone = store.purge(root.id, Some(1), true).await.unwrap();
    assert_eq!(gone, [root.id, child.id, grandchild.id]);
    for id in gone {
        assert!(matches!(
            store.get(id).await,
            Err(SessionError::NotFound { .. })
        ));
    }
}

#[tokio::test]
async fn purge_of_a_leaf_leaves_its_parent() {
    let store = store("purge-leaf").await;
    let (root, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let a = user(&store, root.id, "a").await;
    let (child, _) = store.fork(root.id, a.id).await.unwrap();
    assert_eq!(
        store.purge(child.id, None, false).await.unwrap(),
        [child.id]
    );
    assert_eq!(store.tree(root.id).await.unwrap().len(), 1);
    // Ids are never reused: a new session gets a fresh one.
    let (next, _) = store.create(json!({}), Meta::default()).await.unwrap();
    assert!(next.id > child.id);
}

#[tokio::test]
async fn metadata_changes_need_the_current_version() {
    let store = store("meta").await;
    let (root, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let patch = MetaPatch {
        title: Some(Some("plans".to_owned())),
        tags: Some(vec!["work".to_owned()]),
        archived: None,
    };
    let updated = store.update_meta(root.id, 1, patch.clone()).await.unwrap();
    assert_eq!(updated.version, 2);
    assert_eq!(updated.meta.title.as_deref(), Some("plans"));
    assert_eq!(updated.meta.tags, ["work"]);
    let err = store.update_meta(root.id, 1, patch).await.unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::StaleVersion {
                expected: 1,
                current: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("retry with version 2"), "{err}");
    let archived = MetaPatch {
        archived: Some(true),
        ..MetaPatch::default()
    };
    let updated = store.update_meta(root.id, 2, archived).await.unwrap();
    assert!(updated.meta.archived);
    assert_eq!(updated.meta.title.as_deref(), Some("plans"));
}

#[tokio::test]
async fn a_generating_session_refuses_other_writers() {
    let store = store("busy").await;
    let (root, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let a = user(&store, root.id, "a").await;
    let guard = store.begin_generation(root.id).await.unwrap();
    assert!(matches!(
        store.begin_generation(root.id).await,
        Err(SessionError::Busy { .. })
    ));
    let err = store
        .append(root.id, EventKind::Message, json!({}))
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Busy { .. }), "{err}");
    assert!(err.to_string().contains("is generating"), "{err}");
    assert!(matches!(
        store.trim(root.id, a.id, None).await,
        Err(SessionError::Busy { .. })
    ));
    assert!(matches!(
        store.purge(root.id, None, false).await,
        Err(SessionError::Busy { .. })
    ));
    // The generation itself writes; a fork reads only committed history.
    store
        .append_generated(&guard, EventKind::Generated, json!({"text": "hi"}))
        .await
        .unwrap();
    store.fork(root.id, a.id).await.unwrap();
    drop(guard);
    user(&store, root.id, "after").await;
}

#[tokio::test]
async fn sessions_list_in_pages() {
    let store = store("list").await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(store.create(json!({}), Meta::default()).await.unwrap().0.id);
    }
    let first = store.list(None, 2).await.unwrap();
    assert_eq!(first.iter().map(|s| s.id).collect::<Vec<_>>(), ids[..2]);
    let rest = store.list(Some(ids[1]), 10).await.unwrap();
    assert_eq!(rest.iter().map(|s| s.id).collect::<Vec<_>>(), ids[2..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_are_all_acknowledged_and_ordered() {
    let store = store("concurrent").await;
    let (root, _) = store.create(json!({}), Meta::default()).await.unwrap();
    let writers = (0..32).map(|w| {
        let store = store.clone();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            for n in 0..20 {
                let body = json!({"w": w, "n": n});
                acked.push(
                    store
                        .append(root.id, EventKind::Message, body)
                        .await
                        .unwrap(),
                );
            }
            acked
        })
    });
    let acked: Vec<Event> = futures::future::join_all(writers)
        .await
        .into_iter()
        .flat_map(|r| r.unwrap())
        .collect();
    let (events, _) = store.events(root.id, 1, 10_000).await.unwrap();
    assert_eq!(events.len(), acked.len());
    for event in &acked {
        assert_eq!(events[(event.seq - 2) as usize].id, event.id);
    }
    assert!(events
        .windows(2)
        .all(|w| w[0].id < w[1].id && w[0].seq + 1 == w[1].seq));
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_by_name() {
    let path = temp_db("garbage");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, vec![0x5a; 64 * 1024]).unwrap();
    let err = SessionStore::open(&path).unwrap_err();
    assert!(matches!(err, SessionError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        vec![0x5a; 64 * 1024],
        "the file was changed"
    );
}
