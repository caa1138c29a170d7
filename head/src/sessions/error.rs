//! Why a session operation failed, with what to do about it.

use std::path::PathBuf;

use super::types::{EventId, SessionId};

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// No session has this id (never had, or it was purged).
    #[error("no session {session}; list sessions to find the one you want")]
    NotFound {
        /// The id asked for.
        session: SessionId,
    },
    /// The event is not part of the session's history.
    #[error("event {event} is not in the history of session {session}; read its events to pick one that is")]
    EventNotInHistory {
        /// The session.
        session: SessionId,
        /// The event named.
        event: EventId,
    },
    /// The caller's expected version is not the session's version.
    #[error("session {session} is at version {current}, not {expected}: it changed since you read it; read it again and retry with version {current}")]
    StaleVersion {
        /// The session.
        session: SessionId,
        /// The version the caller named.
        expected: i64,
        /// The version it has.
        current: i64,
    },
    /// A generation is writing to the session.
    #[error("session {session} is generating; wait for the generation to finish, then retry")]
    Busy {
        /// The session.
        session: SessionId,
    },
    /// Purge without cascade of a session that has forks.
    #[error("session {session} has forks ({children}); purge them first, or purge with cascade to remove them too")]
    HasForks {
        /// The session.
        session: SessionId,
        /// Its direct forks, comma-separated.
        children: String,
    },
    /// Trim would cut events a fork shares.
    #[error("session {child} was forked from session {session} at event {at}, after the point you trim to; trim to a later event, or purge the fork first")]
    ForkedAfter {
        /// The session being trimmed.
        session: SessionId,
        /// The fork that shares the events.
        child: SessionId,
        /// The event the fork was made at.
        at: EventId,
    },
    /// The database file fails SQLite's integrity check or is not a database.
    #[error("the session database {path} is damaged ({detail}); the head will not serve or change it. Restore it from a backup, or move it aside to start with no sessions (`sqlite3 {path} .recover` salvages what is readable)")]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What SQLite found.
        detail: String,
    },
    /// SQLite failed opening, reading or writing the database.
    #[error("the session database {path} could not be used: {source}; check that the head's data dir is writable and its disk not full")]
    Db {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// A commit failed earlier: the store accepts nothing more, so that
    /// nothing is acknowledged that is not on disk.
    #[error("the session store {path} stopped after a failed write ({reason}); nothing unacknowledged was kept. Fix the disk, then restart the head")]
    Stopped {
        /// The database file.
        path: PathBuf,
        /// The write error that stopped it.
        reason: String,
    },
    /// A change would pass one of the store's limits; nothing of it was
    /// written.
    #[error("{detail}, over the limit of {value} {} ({}); {}", limit.unit(), limit.flag(), limit.remedy())]
    OverLimit {
        /// Which limit.
        limit: Limit,
        /// Its value.
        value: u64,
        /// What the change would have made of it.
        detail: String,
    },
    /// A stored row is not what this head writes.
    #[error("the session database {path} holds a row this head cannot read ({what}); it may come from a newer version")]
    BadRow {
        /// The database file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
}

impl SessionError {
    /// Whether the store can take no more writes after this error.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            SessionError::Db { .. } | SessionError::Stopped { .. } | SessionError::Corrupt { .. }
        )
    }
}

/// The store's limits, as errors name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Events per session.
    Events,
    /// Bytes per message.
    MessageBytes,
    /// Sessions per API key.
    SessionsPerKey,
    /// Bytes of the whole database.
    TotalBytes,
}

impl Limit {
    /// The head flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Limit::Events => "--session-max-events",
            Limit::MessageBytes => "--session-max-message-bytes",
            Limit::SessionsPerKey => "--session-max-per-key",
            Limit::TotalBytes => "--session-max-total-bytes",
        }
    }

    /// What the limit counts.
    pub fn unit(self) -> &'static str {
        match self {
            Limit::Events => "events per session",
            Limit::MessageBytes => "bytes per message",
            Limit::SessionsPerKey => "sessions per API key",
            Limit::TotalBytes => "bytes for all sessions",
        }
    }

    /// What the client (or the operator) can do.
    pub fn remedy(self) -> String {
        let or = format!(
            "or ask the operator to start the head with a larger {}",
            self.flag()
        );
        match self {
            Limit::Events => format!(
                "fork the session at an earlier event, trim it, or start a new session; {or}"
            ),
            Limit::MessageBytes => {
                format!("send a shorter message, or split it into several; {or}")
            }
            Limit::SessionsPerKey => {
                format!("purge sessions you no longer need (DELETE /v1/sessions/ID); {or}")
            }
            Limit::TotalBytes => {
                format!("purge sessions no longer needed (DELETE /v1/sessions/ID); {or}")
            }
        }
    }
}
