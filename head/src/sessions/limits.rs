//! The session store's limits: events per session, bytes per message,
//! sessions per API key and the database's total size. Each is checked in
//! the writer's transaction before the change writes anything, so a change
//! over a limit is refused whole.
//!
//! The end of a generation (its `generated` or `generation_failed` event)
//! is never refused: a generation is admitted only with room for it, and a
//! reply the node has produced is not thrown away.

use rusqlite::params;
use serde_json::Value;

use super::error::{Limit, SessionError};
use super::history::Db;
use super::types::{EventKind, SessionId};

/// The limits a store enforces; the head takes them from its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Events one session's history may hold (inherited ones included).
    pub max_events: u64,
    /// Bytes one message (an event's body as stored, JSON) may have.
    pub max_message_bytes: u64,
    /// Sessions one API key may hold (without keys, all clients together).
    pub max_sessions_per_key: u64,
    /// Bytes the database may use (its pages in use, all tables).
    pub max_total_bytes: u64,
}

impl Default for SessionLimits {
    /// 10,000 events per session, 1 MiB per message, 10,000 sessions per
    /// key, 10 GiB in all.
    fn default() -> Self {
        SessionLimits {
            max_events: 10_000,
            max_message_bytes: 1024 * 1024,
            max_sessions_per_key: 10_000,
            max_total_bytes: 10 * 1024 * 1024 * 1024,
        }
    }
}

impl SessionLimits {
    /// No limits: what a store opened without any enforces.
    pub fn unlimited() -> Self {
        SessionLimits {
            max_events: u64::MAX,
            max_message_bytes: u64::MAX,
            max_sessions_per_key: u64::MAX,
            max_total_bytes: u64::MAX,
        }
    }

    /// Refuses a message body larger than the per-message limit.
    pub fn check_message(&self, body: &Value) -> Result<(), SessionError> {
        if self.max_message_bytes == u64::MAX {
            return Ok(());
        }
        let bytes = body.to_string().len() as u64;
        if bytes > self.max_message_bytes {
            return Err(SessionError::OverLimit {
                limit: Limit::MessageBytes,
                value: self.max_message_bytes,
                detail: format!("this message is {bytes} bytes as stored"),
            });
        }
        Ok(())
    }

    /// Refuses a history that would grow from `len` events by `adding`
    /// plus `reserve` (the events a generation started now will write)
    /// past the per-session limit.
    pub fn check_events(
        &self,
        session: Option<SessionId>,
        len: i64,
        adding: usize,
        reserve: usize,
    ) -> Result<(), SessionError> {
        let after = len.max(0) as u64 + adding as u64 + reserve as u64;
        if after > self.max_events {
            let whose = session.map_or("the new session".to_owned(), |s| format!("session {s}"));
            return Err(SessionError::OverLimit {
                limit: Limit::Events,
                value: self.max_events,
                detail: format!(
                    "{whose} holds {len} events and this would make it {after}{}",
                    if reserve > 0 { " (with the reply)" } else { "" }
                ),
            });
        }
        Ok(())
    }

    /// Checks a change that writes `events` into `session`'s history of
    /// `len` events (and `reserve` more later): each body's size, the
    /// session's length, and the database's size.
    pub(super) fn check_append(
        &self,
        db: Db<'_>,
        session: SessionId,
        len: i64,
        events: &[(EventKind, Value)],
        reserve: usize,
    ) -> Result<(), SessionError> {
        if *self == SessionLimits::unlimited() {
            return Ok(());
        }
        let counted: Vec<&Value> = events
            .iter()
            .filter(|(kind, _)| !ends_turn(*kind))
            .map(|(_, body)| body)
            .collect();
        if counted.is_empty() {
            return Ok(());
        }
        for body in &counted {
            self.check_message(body)?;
        }
        self.check_events(Some(session), len, counted.len(), reserve)?;
        let bytes = counted.iter().map(|b| b.to_string().len() as u64).sum();
        self.check_total(db, bytes)
    }

    /// Refuses a new session for `owner` past the per-key limit or the
    /// database's size.
    pub(super) fn check_new_session(
        &self,
        db: Db<'_>,
        owner: Option<&str>,
        body: &Value,
    ) -> Result<(), SessionError> {
        self.check_message(body)?;
        if self.max_sessions_per_key != u64::MAX {
            let held: i64 = db
                .conn
                .prepare_cached("SELECT COUNT(*) FROM sessions WHERE owner IS ?1")
                .and_then(|mut stmt| stmt.query_row(params![owner], |r| r.get(0)))
                .map_err(|e| db.err(e))?;
            if held as u64 >= self.max_sessions_per_key {
                let who = owner.map_or(
                    "this head's clients (it has no API keys) already hold".to_owned(),
                    |o| format!("the API key {o:?} already holds"),
                );
                return Err(SessionError::OverLimit {
                    limit: Limit::SessionsPerKey,
                    value: self.max_sessions_per_key,
                    detail: format!("{who} {held} sessions"),
                });
            }
        }
        self.check_total(db, body.to_string().len() as u64)
    }

    /// Refuses `adding` bytes once the database's pages in use would pass
    /// the total limit.
    fn check_total(&self, db: Db<'_>, adding: u64) -> Result<(), SessionError> {
        if self.max_total_bytes == u64::MAX {
            return Ok(());
        }
        let pragma = |name: &str| -> Result<u64, SessionError> {
            db.conn
                .pragma_query_value(None, name, |r| r.get::<_, i64>(0))
                .map(|v| v.max(0) as u64)
                .map_err(|e| db.err(e))
        };
        let used =
            pragma("page_count")?.saturating_sub(pragma("freelist_count")?) * pragma("page_size")?;
        if used.saturating_add(adding) > self.max_total_bytes {
            return Err(SessionError::OverLimit {
                limit: Limit::TotalBytes,
                value: self.max_total_bytes,
                detail: format!("the session database uses {used} bytes"),
            });
        }
        Ok(())
    }
}

/// Events that end a generation: never refused (see the module's note).
pub(super) fn ends_turn(kind: EventKind) -> bool {
    matches!(kind, EventKind::Generated | EventKind::GenerationFailed)
}
