//! Results kept for `Idempotency-Key`: the first answer to a keyed request,
//! in the `idempotency` table beside the sessions (written through the same
//! group-commit writer), for [`TTL_MS`]; and, in memory, the keys whose
//! first request is still running.

use std::sync::Arc;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use rusqlite::{params, OptionalExtension};

use super::error::SessionError;
use super::history::{now_ms, Db};

/// How long a kept result is answered again: 24 hours.
pub const TTL_MS: i64 = 24 * 60 * 60 * 1000;

/// A key within its scope (the API key's name, or empty without keys).
pub type ScopedKey = (String, String);

/// A kept answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// What identifies the request it answered (a hash of its method, path
    /// and body).
    pub fingerprint: String,
    /// Its HTTP status.
    pub status: u16,
    /// Its `Content-Type`.
    pub content_type: Option<String>,
    /// The node that answered (`x-superfluid-node`), where one did.
    pub node: Option<String>,
    /// Its body.
    pub body: Vec<u8>,
}

/// Keys whose first request is running, with that request's fingerprint.
#[derive(Debug, Default, Clone)]
pub struct Running(Arc<DashMap<ScopedKey, String>>);

impl Running {
    /// Marks `key` as running `fingerprint`, or gives the fingerprint of
    /// the request already running with it.
    pub fn begin(&self, key: ScopedKey, fingerprint: &str) -> Result<RunningGuard, String> {
        match self.0.entry(key.clone()) {
            Entry::Occupied(running) => Err(running.get().clone()),
            Entry::Vacant(slot) => {
                slot.insert(fingerprint.to_owned());
                Ok(RunningGuard {
                    key,
                    running: self.clone(),
                })
            }
        }
    }
}

/// A keyed request's mark as running; removed on drop.
#[derive(Debug)]
pub struct RunningGuard {
    key: ScopedKey,
    running: Running,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running.0.remove(&self.key);
    }
}

/// The answer kept for `key`, unless it has expired.
pub(super) fn get(db: Db<'_>, key: &ScopedKey) -> Result<Option<Kept>, SessionError> {
    let oldest = now_ms() - TTL_MS;
    db.conn
        .prepare_cached(
            "SELECT fingerprint, status, content_type, body, node FROM idempotency
             WHERE scope = ?1 AND key = ?2 AND created_ms >= ?3",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![key.0, key.1, oldest], |r| {
                Ok(Kept {
                    fingerprint: r.get(0)?,
                    status: r.get(1)?,
                    content_type: r.get(2)?,
                    body: r.get(3)?,
                    node: r.get(4)?,
                })
            })
            .optional()
        })
        .map_err(|e| db.err(e))
}

/// Keeps `kept` for `key`, and drops answers past their 24 hours.
pub(super) fn put(db: Db<'_>, key: &ScopedKey, kept: &Kept) -> Result<(), SessionError> {
    let now = now_ms();
    db.conn
        .prepare_cached("DELETE FROM idempotency WHERE created_ms < ?1")
        .and_then(|mut stmt| stmt.execute([now - TTL_MS]))
        .and_then(|_| {
            db.conn.prepare_cached(
                "INSERT OR REPLACE INTO idempotency
                 (scope, key, fingerprint, status, content_type, body, created_ms, node)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
        })
        .and_then(|mut stmt| {
            stmt.execute(params![
                key.0,
                key.1,
                kept.fingerprint,
                kept.status,
                kept.content_type,
                kept.body,
                now,
                kept.node
            ])
        })
        .map_err(|e| db.err(e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::{SessionStore, DB_FILE};

    fn store(tag: &str) -> SessionStore {
        let dir = std::env::temp_dir().join(format!(
            "superfluid-idempotency-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        SessionStore::open(&dir.join(DB_FILE)).unwrap()
    }

    fn kept(body: &str) -> Kept {
        Kept {
            fingerprint: "f1".into(),
            status: 200,
            content_type: Some("application/json".into()),
            node: Some("gpu1".into()),
            body: body.as_bytes().to_vec(),
        }
    }

    fn key(scope: &str, key: &str) -> ScopedKey {
        (scope.to_owned(), key.to_owned())
    }

    #[tokio::test]
    async fn a_kept_answer_comes_back_for_its_key_and_scope_only() {
        let store = store("kept");
        store
            .keep_answer(key("alice", "k"), kept("{}"))
            .await
            .unwrap();
        assert_eq!(
            store.kept_answer(key("alice", "k")).await.unwrap(),
            Some(kept("{}"))
        );
        assert_eq!(store.kept_answer(key("bob", "k")).await.unwrap(), None);
        assert_eq!(
            store.kept_answer(key("alice", "other")).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn a_database_kept_before_answers_named_their_node_gains_the_column() {
        let dir =
            std::env::temp_dir().join(format!("superfluid-idempotency-old-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(DB_FILE);
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                 CREATE TABLE idempotency (scope TEXT NOT NULL, key TEXT NOT NULL,
                 fingerprint TEXT NOT NULL, status INTEGER NOT NULL, content_type TEXT,
                 body BLOB NOT NULL, created_ms INTEGER NOT NULL, PRIMARY KEY (scope, key));",
            )
            .unwrap();
        let store = SessionStore::open(&path).unwrap();
        store.keep_answer(key("", "k"), kept("{}")).await.unwrap();
        assert_eq!(
            store.kept_answer(key("", "k")).await.unwrap(),
            Some(kept("{}"))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_running_key_is_refused_until_its_request_ends() {
        let running = Running::default();
        let first = running.begin(key("", "k"), "f1").unwrap();
        assert_eq!(running.begin(key("", "k"), "f2").unwrap_err(), "f1");
        assert!(running.begin(key("other", "k"), "f1").is_ok());
        drop(first);
        assert!(running.begin(key("", "k"), "f2").is_ok());
    }
}
