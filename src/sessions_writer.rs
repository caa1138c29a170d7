//! `superfluid sessions-writer`: many concurrent writers appending to a
//! session database, each acknowledged event printed as it is acknowledged.
//! The crash test kills it at random moments and checks that every printed
//! event is in the database. Hidden from `--help`: it is a test subject.
//!
//! Writer `w` appends `{"w": w, "n": n}` to session `w % sessions` with `n`
//! counting up; after a restart it goes on from the last `n` the database
//! holds, so a writer's events are always `0, 1, 2, ...` in its session.
//! Each acknowledgement is one line: `ack W N SESSION EVENT_ID SEQ`.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::json;
use superfluid_head::sessions::{EventKind, Meta, SessionId, SessionStore};

/// Flags of `superfluid sessions-writer`.
#[derive(Debug, clap::Args)]
pub struct Flags {
    /// The session database to write.
    #[arg(long)]
    pub db: PathBuf,
    /// Concurrent writers.
    #[arg(long, default_value_t = 16)]
    pub writers: usize,
    /// Sessions the writers share.
    #[arg(long, default_value_t = 4)]
    pub sessions: usize,
    /// Events each writer appends before it stops [default: until killed].
    #[arg(long)]
    pub per_writer: Option<u64>,
}

pub async fn run(flags: Flags) -> Result<()> {
    let store = SessionStore::open(&flags.db)?;
    let sessions = ensure_sessions(&store, flags.sessions.max(1)).await?;
    let next = next_numbers(&store, &sessions).await?;
    println!("ready");
    let mut tasks = Vec::new();
    for w in 0..flags.writers {
        let store = store.clone();
        let session = sessions[w % sessions.len()];
        let start = next.get(&(w as u64)).copied().unwrap_or(0);
        let end = flags.per_writer.map_or(u64::MAX, |count| start + count);
        tasks.push(tokio::spawn(async move {
            for n in start..end {
                let body = json!({"w": w, "n": n});
                let event = store.append(session, EventKind::Message, body).await?;
                println!("ack {w} {n} {session} {} {}", event.id, event.seq);
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await.context("a writer panicked")??;
    }
    Ok(())
}

/// The first `count` sessions, created if missing.
async fn ensure_sessions(store: &SessionStore, count: usize) -> Result<Vec<SessionId>> {
    let mut ids: Vec<SessionId> = store
        .list(None, count)
        .await?
        .iter()
        .map(|s| s.id)
        .collect();
    while ids.len() < count {
        let (info, _) = store.create(json!({}), Meta::default()).await?;
        ids.push(info.id);
    }
    Ok(ids)
}

/// For each writer, the `n` after the last one the database holds.
async fn next_numbers(store: &SessionStore, sessions: &[SessionId]) -> Result<HashMap<u64, u64>> {
    let mut next = HashMap::new();
    for &session in sessions {
        let mut cursor = 0;
        loop {
            let (events, after) = store.events(session, cursor, 10_000).await?;
            if events.is_empty() {
                break;
            }
            for event in events {
                if let (Some(w), Some(n)) = (event.body["w"].as_u64(), event.body["n"].as_u64()) {
                    let slot = next.entry(w).or_insert(0);
                    *slot = (*slot).max(n + 1);
                }
            }
            cursor = after;
        }
    }
    Ok(next)
}
