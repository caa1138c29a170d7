//! Readers: a small pool of read-only connections, each query in one read
//! transaction so it sees a single committed state. They never wait for
//! the writer (WAL).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use superfluid_link::sync::lock;

use super::error::SessionError;
use super::history::{Db, SESSION_COLUMNS};
use super::open::open_reader;
use super::types::{Event, SessionId, SessionInfo};

/// Idle reader connections kept for reuse.
const KEEP_IDLE: usize = 8;

/// Read-only connections to the session database.
#[derive(Debug, Clone)]
pub(super) struct Readers {
    path: PathBuf,
    idle: Arc<Mutex<Vec<Connection>>>,
}

impl Readers {
    pub fn new(path: PathBuf) -> Readers {
        Readers {
            path,
            idle: Arc::default(),
        }
    }

    /// Runs `f` in a read transaction on a pooled connection, off the async
    /// threads.
    pub async fn read<R, F>(&self, f: F) -> Result<R, SessionError>
    where
        R: Send + 'static,
        F: FnOnce(Db<'_>) -> Result<R, SessionError> + Send + 'static,
    {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.read_now(f))
            .await
            .unwrap_or_else(|join| {
                Err(SessionError::BadRow {
                    path: self.path.clone(),
                    what: format!("a read panicked: {join}"),
                })
            })
    }

    fn read_now<R>(
        &self,
        f: impl FnOnce(Db<'_>) -> Result<R, SessionError>,
    ) -> Result<R, SessionError> {
        let conn = lock(&self.idle).pop();
        let mut conn = match conn {
            Some(conn) => conn,
            None => open_reader(&self.path)?,
        };
        let result = {
            let tx = conn
                .transaction()
                .map_err(|e| super::open::classify(&self.path, e))?;
            let out = f(Db {
                conn: &tx,
                path: &self.path,
            });
            // A read transaction has nothing to keep; ending it frees the
            // WAL snapshot for checkpoints.
            let _ = tx.finish();
            out
        };
        let mut idle = lock(&self.idle);
        if idle.len() < KEEP_IDLE {
            idle.push(conn);
        }
        result
    }
}

/// One session.
pub(super) fn get(db: Db<'_>, id: SessionId) -> Result<SessionInfo, SessionError> {
    db.info(db.session(id)?)
}

/// Sessions with ids above `after`, oldest first, at most `limit`.
pub(super) fn list(
    db: Db<'_>,
    after: Option<SessionId>,
    limit: usize,
) -> Result<Vec<SessionInfo>, SessionError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id > ?1 ORDER BY id LIMIT ?2");
    let rows = db
        .conn
        .prepare_cached(&sql)
        .and_then(|mut stmt| {
            stmt.query_map(
                rusqlite::params![after.map_or(0, |a| a.0), limit as i64],
                |row| db.session_from(row),
            )?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(|e| db.err(e))?;
    rows.into_iter()
        .map(|row| db.info(db.finish(row)?))
        .collect()
}

/// The whole tree the session belongs to: its root and every session forked
/// from it, directly or not, in id order (parents before children).
pub(super) fn tree(db: Db<'_>, id: SessionId) -> Result<Vec<SessionInfo>, SessionError> {
    let mut root = db.session(id)?;
    let mut hops = 0;
    while let Some(parent) = root.parent {
        root = db.session(parent)?;
        hops += 1;
        if hops > 100_000 {
            return Err(db.bad_row(format!("session {id} has a cycle of parents")));
        }
    }
    let sql = format!(
        "WITH RECURSIVE family(id) AS (
             SELECT ?1 UNION ALL SELECT s.id FROM sessions s JOIN family f ON s.parent = f.id)
         SELECT {SESSION_COLUMNS} FROM sessions WHERE id IN (SELECT id FROM family) ORDER BY id"
    );
    let rows = db
        .conn
        .prepare_cached(&sql)
        .and_then(|mut stmt| {
            stmt.query_map([root.id.0], |row| db.session_from(row))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(|e| db.err(e))?;
    rows.into_iter()
        .map(|row| db.info(db.finish(row)?))
        .collect()
}

/// Events of the session's history after `cursor` (a `seq`), at most
/// `limit`, and the cursor to continue from.
pub(super) fn events(
    db: Db<'_>,
    id: SessionId,
    cursor: i64,
    limit: usize,
) -> Result<(Vec<Event>, i64), SessionError> {
    let row = db.session(id)?;
    let events = db.events(&row, cursor, limit)?;
    let next = events.last().map_or(cursor, |e| e.seq);
    Ok((events, next))
}
