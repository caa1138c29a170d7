//! Reading a session's row and working out its history, on any connection
//! (the writer's inside its transaction, or a reader's).

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use super::error::SessionError;
use super::open::classify;
use super::types::{Event, EventId, EventKind, Meta, SessionId, SessionInfo};

/// A connection and the file it is on, for errors that name the file.
#[derive(Clone, Copy)]
pub(super) struct Db<'a> {
    pub conn: &'a Connection,
    pub path: &'a Path,
}

/// A session as stored.
#[derive(Debug, Clone)]
pub(super) struct SessionRow {
    pub id: SessionId,
    pub parent: Option<SessionId>,
    pub fork_at: Option<EventId>,
    pub base_seq: i64,
    pub created_ms: i64,
    pub meta: Meta,
    pub version: i64,
}

/// The part of one session's own events that a history includes: `seq` in
/// `lo..=hi`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    pub session: SessionId,
    pub lo: i64,
    pub hi: i64,
}

/// An event's columns as read: `id, seq, kind, body, created_ms`.
pub(super) type EventRow = (i64, i64, String, String, i64);

/// An [`EventRow`] from a query that selects `id, seq, kind, body,
/// created_ms` of `events`, in that order.
pub(super) fn event_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

pub(super) const SESSION_COLUMNS: &str =
    "id, parent, fork_at, base_seq, created_ms, title, tags, archived, version";

impl Db<'_> {
    pub fn err(&self, source: rusqlite::Error) -> SessionError {
        classify(self.path, source)
    }

    pub fn bad_row(&self, what: String) -> SessionError {
        SessionError::BadRow {
            path: self.path.to_owned(),
            what,
        }
    }

    /// Maps a row of [`SESSION_COLUMNS`].
    pub fn session_from(&self, row: &rusqlite::Row<'_>) -> rusqlite::Result<(SessionRow, String)> {
        let tags: String = row.get(6)?;
        Ok((
            SessionRow {
                id: SessionId(row.get(0)?),
                parent: row.get::<_, Option<i64>>(1)?.map(SessionId),
                fork_at: row.get::<_, Option<i64>>(2)?.map(EventId),
                base_seq: row.get(3)?,
                created_ms: row.get(4)?,
                meta: Meta {
                    title: row.get(5)?,
                    tags: Vec::new(),
                    archived: row.get::<_, i64>(7)? != 0,
                },
                version: row.get(8)?,
            },
            tags,
        ))
    }

    /// Finishes a row: parses its tags.
    pub fn finish(
        &self,
        (mut row, tags): (SessionRow, String),
    ) -> Result<SessionRow, SessionError> {
        row.meta.tags = serde_json::from_str(&tags)
            .map_err(|e| self.bad_row(format!("session {} tags {tags:?}: {e}", row.id)))?;
        Ok(row)
    }

    /// The session's row, or not found.
    pub fn session(&self, id: SessionId) -> Result<SessionRow, SessionError> {
        let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1");
        let found = self
            .conn
            .prepare_cached(&sql)
            .and_then(|mut stmt| {
                stmt.query_row([id.0], |row| self.session_from(row))
                    .optional()
            })
            .map_err(|e| self.err(e))?;
        match found {
            Some(row) => self.finish(row),
            None => Err(SessionError::NotFound { session: id }),
        }
    }

    /// The `seq` of the session's last event.
    pub fn last_seq(&self, row: &SessionRow) -> Result<i64, SessionError> {
        self.conn
            .prepare_cached("SELECT MAX(seq) FROM events WHERE session = ?1")
            .and_then(|mut stmt| stmt.query_row([row.id.0], |r| r.get::<_, Option<i64>>(0)))
            .map(|max| max.unwrap_or(row.base_seq))
            .map_err(|e| self.err(e))
    }

    /// The session as the store shows it.
    pub fn info(&self, row: SessionRow) -> Result<SessionInfo, SessionError> {
        let last_seq = self.last_seq(&row)?;
        Ok(SessionInfo {
            id: row.id,
            parent: row.parent,
            at: row.fork_at,
            created_ms: row.created_ms,
            meta: row.meta,
            version: row.version,
            last_seq,
        })
    }

    /// The segments of the session's history, oldest first.
    pub fn segments(&self, row: &SessionRow) -> Result<Vec<Segment>, SessionError> {
        let mut segments = vec![Segment {
            session: row.id,
            lo: row.base_seq + 1,
            hi: i64::MAX,
        }];
        let mut hi = row.base_seq;
        let mut parent = row.parent;
        while let Some(id) = parent {
            let up = self.session(id)?;
            segments.push(Segment {
                session: id,
                lo: up.base_seq + 1,
                hi,
            });
            hi = hi.min(up.base_seq);
            parent = up.parent;
            if segments.len() > 100_000 {
                return Err(self.bad_row(format!("session {} has a cycle of parents", row.id)));
            }
        }
        segments.reverse();
        Ok(segments)
    }

    /// The `seq` of `event` if it is in the session's history.
    pub fn seq_in_history(&self, row: &SessionRow, event: EventId) -> Result<i64, SessionError> {
        let found = self
            .conn
            .prepare_cached("SELECT session, seq FROM events WHERE id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([event.0], |r| {
                    Ok((SessionId(r.get(0)?), r.get::<_, i64>(1)?))
                })
                .optional()
            })
            .map_err(|e| self.err(e))?;
        let not_in = SessionError::EventNotInHistory {
            session: row.id,
            event,
        };
        let Some((owner, seq)) = found else {
            return Err(not_in);
        };
        let inside = self
            .segments(row)?
            .iter()
            .any(|s| s.session == owner && s.lo <= seq && seq <= s.hi);
        if inside {
            Ok(seq)
        } else {
            Err(not_in)
        }
    }

    /// Events of the history with `seq > after`, at most `limit`, in order.
    pub fn events(
        &self,
        row: &SessionRow,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Event>, SessionError> {
        let mut out = Vec::new();
        for segment in self.segments(row)? {
            if out.len() >= limit || segment.hi <= after {
                continue;
            }
            let mut stmt = self
                .conn
                .prepare_cached(
                    "SELECT id, seq, kind, body, created_ms FROM events
                     WHERE session = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4",
                )
                .map_err(|e| self.err(e))?;
            let want = (limit - out.len()) as i64;
            let rows = stmt
                .query_map(
                    params![
                        segment.session.0,
                        after.max(segment.lo - 1),
                        segment.hi,
                        want
                    ],
                    event_row,
                )
                .map_err(|e| self.err(e))?;
            for found in rows {
                let row = found.map_err(|e| self.err(e))?;
                out.push(self.event(segment.session, row)?);
            }
        }
        Ok(out)
    }

    /// An event of `session` from its row's columns (`id, seq, kind, body,
    /// created_ms`); a row that does not read is [`SessionError::BadRow`].
    pub fn event(&self, session: SessionId, row: EventRow) -> Result<Event, SessionError> {
        let (id, seq, kind, body, created_ms) = row;
        let kind = EventKind::parse(&kind)
            .ok_or_else(|| self.bad_row(format!("event {id} has kind {kind:?}")))?;
        let body = serde_json::from_str(&body)
            .map_err(|e| self.bad_row(format!("event {id} body: {e}")))?;
        Ok(Event {
            id: EventId(id),
            session,
            seq,
            kind,
            body,
            created_ms,
        })
    }
}

/// Now, in milliseconds since the Unix epoch.
pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
