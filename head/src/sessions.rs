//! Sessions: conversations the head keeps, as ordered events in SQLite.
//!
//! The database (`sessions.db` in the head's data dir) is opened in WAL mode
//! with `synchronous=FULL`, and is checked with `PRAGMA quick_check` before
//! anything is served from it or written to it. One writer thread owns the
//! write connection: every change queues to it, and it takes everything
//! waiting, applies it in one transaction, commits (one fsync for the whole
//! batch) and only then acknowledges each change. This group commit is what
//! makes durable appends fast under many writers. A failed commit stops the
//! store for good: nothing is retried into a silent loss. Readers use their
//! own connections, so reads never wait behind a commit.
//!
//! A session's history is its parent's history up to the event it was forked
//! at, followed by its own events; `seq` numbers the whole history from 1.
//! Which sessions are generating is hot state held in memory beside the
//! database ([`hot`]).
//!
//! - [`error`]: what can go wrong, with what to do about it.
//! - [`open`]: opening and checking the database file.
//! - [`writer`]: the group-commit writer thread.
//! - [`ops`]: the changes, as run inside the writer's transaction.
//! - [`read`]: the queries readers run.
//! - [`idempotency`]: answers kept for `Idempotency-Key`.
//! - [`limits`]: events per session, bytes per message, sessions per key
//!   and total size, checked before a change writes anything.
//! - [`store`]: the [`SessionStore`] handle that ties them together.

pub mod error;
mod history;
pub mod hot;
pub mod idempotency;
pub mod limits;
mod open;
mod ops;
mod read;
mod recover;
pub mod store;
pub mod types;
mod writer;

#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod tests;

pub use error::{Limit, SessionError};
pub use hot::GenerationGuard;
pub use limits::SessionLimits;
pub use store::{Made, SessionStore, Turn};
pub use types::{Event, EventId, EventKind, Meta, MetaPatch, SessionId, SessionInfo};

/// The session database's file name in the head's data dir.
pub const DB_FILE: &str = "sessions.db";
