//! Turns a stopped head left open. A session whose last event is a
//! `generation_prompt` was generating when the head stopped (killed,
//! crashed, the power cut): neither its answer nor its failure was ever
//! written. At start-up, before anything is served, each such turn is
//! ended with the event its caller makes (a `generation_failed`), so that
//! replays leave it out and a stored response reads as failed rather than
//! in progress forever.

use rusqlite::params;
use serde_json::Value;

use super::error::SessionError;
use super::history::{event_row, Db};
use super::ops::insert_event;
use super::store::SessionStore;
use super::types::{Event, EventKind, SessionId};

/// The most trailing events read of an open turn (its input messages and
/// its prompt); a turn's input is written in one change, so far fewer.
const TURN_EVENTS: i64 = 256;

impl SessionStore {
    /// Ends every turn left open by a head that stopped mid-generation with
    /// a [`EventKind::GenerationFailed`] event whose body `end` makes from
    /// the turn: the session's trailing `message` events and, last, the
    /// `generation_prompt`. Returns how many it ended. Call it once at
    /// start-up, before any generation begins.
    ///
    /// # Errors
    /// [`SessionError`] when the database cannot be read or written.
    pub async fn end_interrupted_turns(
        &self,
        end: fn(&[Event]) -> Value,
    ) -> Result<usize, SessionError> {
        self.write(move |db, _, _| {
            let open = open_turns(db)?;
            for (session, turn) in &open {
                let seq = turn.last().map_or(0, |prompt| prompt.seq);
                insert_event(
                    db,
                    *session,
                    seq + 1,
                    EventKind::GenerationFailed,
                    end(turn),
                )?;
            }
            Ok(open.len())
        })
        .await
    }
}

/// Each session whose own last event is a `generation_prompt`, with its
/// open turn in order.
fn open_turns(db: Db<'_>) -> Result<Vec<(SessionId, Vec<Event>)>, SessionError> {
    let sessions: Vec<i64> = db
        .conn
        .prepare_cached(
            "SELECT e.session FROM events e
             JOIN (SELECT session, MAX(seq) AS last FROM events GROUP BY session) m
               ON e.session = m.session AND e.seq = m.last
             WHERE e.kind = ?1",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![EventKind::GenerationPrompt.as_str()], |r| r.get(0))?
                .collect()
        })
        .map_err(|e| db.err(e))?;
    sessions
        .into_iter()
        .map(|id| {
            let session = SessionId(id);
            Ok((session, open_turn(db, session)?))
        })
        .collect()
}

/// The session's trailing prompt and the `message` events just before it.
fn open_turn(db: Db<'_>, session: SessionId) -> Result<Vec<Event>, SessionError> {
    let mut stmt = db
        .conn
        .prepare_cached(
            "SELECT id, seq, kind, body, created_ms FROM events
             WHERE session = ?1 ORDER BY seq DESC LIMIT ?2",
        )
        .map_err(|e| db.err(e))?;
    let rows = stmt
        .query_map(params![session.0, TURN_EVENTS], event_row)
        .map_err(|e| db.err(e))?;
    let mut turn = Vec::new();
    for row in rows {
        let event = db.event(session, row.map_err(|e| db.err(e))?)?;
        let wanted = if turn.is_empty() {
            event.kind == EventKind::GenerationPrompt
        } else {
            event.kind == EventKind::Message
        };
        if !wanted {
            break;
        }
        turn.push(event);
    }
    turn.reverse();
    Ok(turn)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::sessions::{Meta, Turn, DB_FILE};

    /// The body the test ends a turn with: the kinds and the first id seen.
    fn end(turn: &[Event]) -> Value {
        let kinds: Vec<&str> = turn.iter().map(|e| e.kind.as_str()).collect();
        json!({"kinds": kinds, "turn": turn.first().map(|e| e.id)})
    }

    #[tokio::test]
    async fn a_turn_left_generating_is_ended_once_and_finished_ones_are_left_alone() {
        let dir = std::env::temp_dir().join(format!("superfluid-recover-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join(DB_FILE);
        let (open, done) = {
            let store = SessionStore::open(&path).unwrap();
            let mut ids = Vec::new();
            for answered in [false, true] {
                let (info, _) = store.create(json!({}), Meta::default()).await.unwrap();
                let guard = store.begin_generation(info.id).await.unwrap();
                let turn = Turn {
                    events: vec![
                        (EventKind::Message, json!({"role": "user", "content": "hi"})),
                        (EventKind::GenerationPrompt, json!({"model": "m"})),
                    ],
                    reserve: 1,
                };
                store.append_turn(&guard, turn).await.unwrap();
                if answered {
                    let answer = json!({"content": "hello"});
                    store
                        .append_generated(&guard, EventKind::Generated, answer)
                        .await
                        .unwrap();
                }
                ids.push(info.id);
            }
            // The head stops here, the first turn still generating.
            (ids[0], ids[1])
        };
        let store = SessionStore::open(&path).unwrap();
        assert_eq!(store.end_interrupted_turns(end).await.unwrap(), 1);
        let (events, _) = store.events(open, 0, 100).await.unwrap();
        let last = events.last().unwrap();
        assert_eq!(last.kind, EventKind::GenerationFailed);
        assert_eq!(last.body["kinds"], json!(["message", "generation_prompt"]));
        assert_eq!(last.body["turn"], json!(events[1].id));
        let (answered, _) = store.events(done, 0, 100).await.unwrap();
        assert_eq!(answered.last().unwrap().kind, EventKind::Generated);
        // Nothing is left open: a second start-up ends nothing.
        assert_eq!(store.end_interrupted_turns(end).await.unwrap(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
