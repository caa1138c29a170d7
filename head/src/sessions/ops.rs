//! The changes, as the writer runs them inside its batch transaction. Each
//! either succeeds whole or returns an error the writer rolls back to the
//! savepoint it took before it.

use rusqlite::params;
use serde_json::{json, Value};

use super::error::SessionError;
use super::history::{now_ms, Db, SessionRow};
use super::hot::Hot;
use super::limits::SessionLimits;
use super::types::{Event, EventId, EventKind, Meta, MetaPatch, SessionId, SessionInfo};

/// Who is appending: a generation may write to the session it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Writer {
    /// A client's append: refused while the session is generating.
    Client,
    /// The generation that holds the session.
    Generation,
}

pub(super) fn insert_event(
    db: Db<'_>,
    session: SessionId,
    seq: i64,
    kind: EventKind,
    body: Value,
) -> Result<Event, SessionError> {
    let created_ms = now_ms();
    let text = body.to_string();
    db.conn
        .prepare_cached(
            "INSERT INTO events (session, seq, kind, body, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .and_then(|mut stmt| stmt.execute(params![session.0, seq, kind.as_str(), text, created_ms]))
        .map_err(|e| db.err(e))?;
    Ok(Event {
        id: EventId(db.conn.last_insert_rowid()),
        session,
        seq,
        kind,
        body,
        created_ms,
    })
}

fn insert_session(
    db: Db<'_>,
    parent: Option<(SessionId, EventId)>,
    base_seq: i64,
    meta: &Meta,
    owner: Option<&str>,
) -> Result<SessionRow, SessionError> {
    let created_ms = now_ms();
    let tags = serde_json::to_string(&meta.tags).unwrap_or_else(|_| "[]".to_owned());
    db.conn
        .prepare_cached(
            "INSERT INTO sessions (parent, fork_at, base_seq, created_ms, title, tags, archived, owner)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                parent.map(|(p, _)| p.0),
                parent.map(|(_, at)| at.0),
                base_seq,
                created_ms,
                meta.title,
                tags,
                meta.archived as i64,
                owner
            ])
        })
        .map_err(|e| db.err(e))?;
    Ok(SessionRow {
        id: SessionId(db.conn.last_insert_rowid()),
        parent: parent.map(|(p, _)| p),
        fork_at: parent.map(|(_, at)| at),
        base_seq,
        created_ms,
        meta: meta.clone(),
        version: 1,
    })
}

fn check_version(row: &SessionRow, expected: Option<i64>) -> Result<(), SessionError> {
    match expected {
        Some(expected) if expected != row.version => Err(SessionError::StaleVersion {
            session: row.id,
            expected,
            current: row.version,
        }),
        _ => Ok(()),
    }
}

fn bump_version(db: Db<'_>, id: SessionId) -> Result<(), SessionError> {
    db.conn
        .prepare_cached("UPDATE sessions SET version = version + 1 WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute([id.0]))
        .map_err(|e| db.err(e))?;
    Ok(())
}

/// Who makes a new session, and what it is allowed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Maker<'a> {
    /// The API key's name, when keys are on.
    pub owner: Option<&'a str>,
    /// The limits to check.
    pub limits: &'a SessionLimits,
}

/// A new session whose first event, `created`, holds `body`.
pub(super) fn create(
    db: Db<'_>,
    body: Value,
    meta: &Meta,
    maker: Maker<'_>,
) -> Result<(SessionInfo, Event), SessionError> {
    maker.limits.check_new_session(db, maker.owner, &body)?;
    maker.limits.check_events(None, 0, 1, 0)?;
    let row = insert_session(db, None, 0, meta, maker.owner)?;
    let event = insert_event(db, row.id, 1, EventKind::Created, body)?;
    let mut info = db.info(row)?;
    info.last_seq = event.seq;
    Ok((info, event))
}

/// Appends events at the end of the session's history, all or none,
/// leaving room for `reserve` more (a generation's reply).
pub(super) fn append(
    db: Db<'_>,
    hot: &Hot,
    limits: &SessionLimits,
    session: SessionId,
    events: Vec<(EventKind, Value)>,
    writer: Writer,
    reserve: usize,
) -> Result<Vec<Event>, SessionError> {
    let row = db.session(session)?;
    if writer == Writer::Client {
        hot.check_idle(session)?;
    }
    let mut seq = db.last_seq(&row)?;
    limits.check_append(db, session, seq, &events, reserve)?;
    let mut written = Vec::with_capacity(events.len());
    for (kind, body) in events {
        seq += 1;
        written.push(insert_event(db, session, seq, kind, body)?);
    }
    Ok(written)
}

/// A child of `parent` sharing its history up to and including `at`.
pub(super) fn fork(
    db: Db<'_>,
    parent: SessionId,
    at: EventId,
    maker: Maker<'_>,
) -> Result<(SessionInfo, Event), SessionError> {
    let row = db.session(parent)?;
    let seq = db.seq_in_history(&row, at)?;
    let body = json!({"parent": parent, "at": at});
    maker.limits.check_new_session(db, maker.owner, &body)?;
    maker.limits.check_events(None, seq, 1, 0)?;
    let child = insert_session(db, Some((parent, at)), seq, &Meta::default(), maker.owner)?;
    let event = insert_event(db, child.id, seq + 1, EventKind::Forked, body)?;
    let mut info = db.info(child)?;
    info.last_seq = event.seq;
    Ok((info, event))
}

/// Drops every event after `at`; `at` may be inherited, and then the session
/// keeps only the shared history up to it.
pub(super) fn trim(
    db: Db<'_>,
    hot: &Hot,
    session: SessionId,
    at: EventId,
    expected: Option<i64>,
) -> Result<SessionInfo, SessionError> {
    let row = db.session(session)?;
    check_version(&row, expected)?;
    hot.check_idle(session)?;
    let seq = db.seq_in_history(&row, at)?;
    let forked_after = db
        .conn
        .prepare_cached("SELECT id, fork_at FROM sessions WHERE parent = ?1 AND base_seq > ?2 ORDER BY id LIMIT 1")
        .and_then(|mut stmt| {
            stmt.query_row(params![session.0, seq], |r| Ok((SessionId(r.get(0)?), EventId(r.get(1)?))))
        });
    match forked_after {
        Ok((child, at)) => return Err(SessionError::ForkedAfter { session, child, at }),
        Err(rusqlite::Error::QueryReturnedNoRows) => {}
        Err(e) => return Err(db.err(e)),
    }
    db.conn
        .prepare_cached("DELETE FROM events WHERE session = ?1 AND seq > ?2")
        .and_then(|mut stmt| stmt.execute(params![session.0, seq]))
        .map_err(|e| db.err(e))?;
    if seq < row.base_seq {
        db.conn
            .prepare_cached("UPDATE sessions SET base_seq = ?2, fork_at = ?3 WHERE id = ?1")
            .and_then(|mut stmt| stmt.execute(params![session.0, seq, at.0]))
            .map_err(|e| db.err(e))?;
    }
    bump_version(db, session)?;
    db.info(db.session(session)?)
}

/// Removes the session, and with `cascade` every session forked from it
/// (and from those); returns the ids removed.
pub(super) fn purge(
    db: Db<'_>,
    hot: &Hot,
    session: SessionId,
    expected: Option<i64>,
    cascade: bool,
) -> Result<Vec<SessionId>, SessionError> {
    let row = db.session(session)?;
    check_version(&row, expected)?;
    let family = db
        .conn
        .prepare_cached(
            "WITH RECURSIVE family(id) AS (
                 SELECT ?1 UNION ALL SELECT s.id FROM sessions s JOIN family f ON s.parent = f.id)
             SELECT id FROM family",
        )
        .and_then(|mut stmt| {
            stmt.query_map([session.0], |r| r.get::<_, i64>(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()
        })
        .map_err(|e| db.err(e))?;
    let family: Vec<SessionId> = family.into_iter().map(SessionId).collect();
    if family.len() > 1 && !cascade {
        let children = db
            .conn
            .prepare_cached("SELECT id FROM sessions WHERE parent = ?1 ORDER BY id")
            .and_then(|mut stmt| {
                stmt.query_map([session.0], |r| r.get::<_, i64>(0))?
                    .collect::<rusqlite::Result<Vec<i64>>>()
            })
            .map_err(|e| db.err(e))?;
        let children = children
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(SessionError::HasForks { session, children });
    }
    for id in &family {
        hot.check_idle(*id)?;
    }
    for id in &family {
        db.conn
            .prepare_cached("DELETE FROM events WHERE session = ?1")
            .and_then(|mut stmt| stmt.execute([id.0]))
            .and_then(|_| db.conn.prepare_cached("DELETE FROM sessions WHERE id = ?1"))
            .and_then(|mut stmt| stmt.execute([id.0]))
            .map_err(|e| db.err(e))?;
    }
    Ok(family)
}

/// Changes title, tags or archived if the caller's version is current.
pub(super) fn update_meta(
    db: Db<'_>,
    session: SessionId,
    expected: i64,
    patch: MetaPatch,
) -> Result<SessionInfo, SessionError> {
    let row = db.session(session)?;
    check_version(&row, Some(expected))?;
    let mut meta = row.meta.clone();
    if let Some(title) = patch.title {
        meta.title = title;
    }
    if let Some(tags) = patch.tags {
        meta.tags = tags;
    }
    if let Some(archived) = patch.archived {
        meta.archived = archived;
    }
    let tags = serde_json::to_string(&meta.tags).unwrap_or_else(|_| "[]".to_owned());
    db.conn
        .prepare_cached(
            "UPDATE sessions SET title = ?2, tags = ?3, archived = ?4, version = version + 1 WHERE id = ?1",
        )
        .and_then(|mut stmt| stmt.execute(params![session.0, meta.title, tags, meta.archived as i64]))
        .map_err(|e| db.err(e))?;
    db.info(db.session(session)?)
}
