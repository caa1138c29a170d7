//! [`SessionStore`]: the handle the head uses. Changes go to the writer
//! and return once committed; reads go to the reader pool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::error::SessionError;
use super::history::Db;
use super::hot::{GenerationGuard, Hot};
use super::idempotency::{self, Kept, Running, RunningGuard, ScopedKey};
use super::limits::SessionLimits;
use super::ops::{self, Maker, Writer};
use super::read::{self, Readers};
use super::types::{Event, EventId, EventKind, Meta, MetaPatch, SessionId, SessionInfo};
use super::writer::{self, Job, Shared};

/// The session store: cheap to clone, all clones share one writer.
#[derive(Debug, Clone)]
pub struct SessionStore {
    jobs: mpsc::Sender<Job>,
    shared: Arc<Shared>,
    readers: Readers,
    hot: Hot,
    running: Running,
    limits: SessionLimits,
}

/// A session just made, with the events it holds and a hold on it (so
/// that its turn's generation writes on before anyone else can).
#[derive(Debug)]
pub struct Made {
    /// The session.
    pub info: SessionInfo,
    /// Its events: `created` or `forked`, then the turn's.
    pub events: Vec<Event>,
    /// The hold, taken before the change was acknowledged.
    pub guard: GenerationGuard,
}

/// A turn's events, written all or none, and how many more its
/// generation will write (room the limits keep for them).
#[derive(Debug, Clone, Default)]
pub struct Turn {
    /// The events, in order.
    pub events: Vec<(EventKind, Value)>,
    /// Events to come after them.
    pub reserve: usize,
}

impl SessionStore {
    /// Opens (or creates) the database at `path` with no limits: refuses a
    /// damaged file with [`SessionError::Corrupt`], then starts the writer
    /// thread.
    pub fn open(path: &Path) -> Result<SessionStore, SessionError> {
        SessionStore::open_with(path, SessionLimits::unlimited())
    }

    /// [`SessionStore::open`], enforcing `limits` on every change.
    pub fn open_with(path: &Path, limits: SessionLimits) -> Result<SessionStore, SessionError> {
        let conn = super::open::open_writer(path)?;
        let shared = Arc::new(Shared {
            path: path.to_owned(),
            stopped: OnceLock::new(),
            conn: std::sync::Mutex::new(conn),
        });
        let jobs = writer::spawn(shared.clone()).map_err(|e| SessionError::Stopped {
            path: path.to_owned(),
            reason: format!("the writer thread could not start: {e}"),
        })?;
        Ok(SessionStore {
            jobs,
            shared,
            readers: Readers::new(path.to_owned()),
            hot: Hot::default(),
            running: Running::default(),
            limits,
        })
    }

    /// The limits this store enforces.
    pub fn limits(&self) -> &SessionLimits {
        &self.limits
    }

    /// The database file.
    pub fn path(&self) -> &PathBuf {
        &self.shared.path
    }

    pub(super) async fn write<R, F>(&self, f: F) -> Result<R, SessionError>
    where
        R: Send + 'static,
        F: FnOnce(Db<'_>, &Hot, &SessionLimits) -> Result<R, SessionError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let hot = self.hot.clone();
        let limits = self.limits;
        if self.shared.stopped.get().is_some() {
            return Err(self.shared.stopped_error());
        }
        let job = writer::job(move |db| f(db, &hot, &limits), reply);
        let queued = match writer::try_inline(&self.shared, &self.jobs, job) {
            Ok(()) => Ok(()),
            Err(job) => self.jobs.send(job).await,
        };
        if queued.is_err() {
            return Err(self.shared.stopped_error());
        }
        answer
            .await
            .unwrap_or_else(|_| Err(self.shared.stopped_error()))
    }

    /// A new session with no owner; its first event (`created`) holds
    /// `body`.
    pub async fn create(
        &self,
        body: Value,
        meta: Meta,
    ) -> Result<(SessionInfo, Event), SessionError> {
        let mut made = self.create_for(None, body, meta, Turn::default()).await?;
        Ok((made.info, made.events.remove(0)))
    }

    /// A new session held by `owner` (an API key's name), with `turn`
    /// written after its `created` event, all in one change.
    pub async fn create_for(
        &self,
        owner: Option<String>,
        body: Value,
        meta: Meta,
        turn: Turn,
    ) -> Result<Made, SessionError> {
        self.write(move |db, hot, limits| {
            let maker = Maker {
                owner: owner.as_deref(),
                limits,
            };
            let (info, created) = ops::create(db, body, &meta, maker)?;
            with_turn(db, hot, limits, info, created, turn)
        })
        .await
    }

    /// Appends an event from a client; refused while the session generates.
    pub async fn append(
        &self,
        session: SessionId,
        kind: EventKind,
        body: Value,
    ) -> Result<Event, SessionError> {
        let mut events = self
            .write(move |db, hot, limits| {
                ops::append(
                    db,
                    hot,
                    limits,
                    session,
                    vec![(kind, body)],
                    Writer::Client,
                    0,
                )
            })
            .await?;
        events.pop().ok_or_else(|| self.shared.stopped_error())
    }

    /// Appends an event of the generation holding the session. A
    /// `generation_prompt` is refused unless the reply has room too.
    pub async fn append_generated(
        &self,
        guard: &GenerationGuard,
        kind: EventKind,
        body: Value,
    ) -> Result<Event, SessionError> {
        let reserve = usize::from(kind == EventKind::GenerationPrompt);
        let turn = Turn {
            events: vec![(kind, body)],
            reserve,
        };
        let mut events = self.append_turn(guard, turn).await?;
        events.pop().ok_or_else(|| self.shared.stopped_error())
    }

    /// Appends a turn's events for the generation holding the session, all
    /// or none.
    pub async fn append_turn(
        &self,
        guard: &GenerationGuard,
        turn: Turn,
    ) -> Result<Vec<Event>, SessionError> {
        let session = guard.session();
        self.write(move |db, hot, limits| {
            ops::append(
                db,
                hot,
                limits,
                session,
                turn.events,
                Writer::Generation,
                turn.reserve,
            )
        })
        .await
    }

    /// Marks the session as generating until the guard drops; busy if it is.
    pub async fn begin_generation(
        &self,
        session: SessionId,
    ) -> Result<GenerationGuard, SessionError> {
        self.get(session).await?;
        self.hot.begin(session)
    }

    /// Whether a generation holds `session` now.
    pub fn is_generating(&self, session: SessionId) -> bool {
        self.hot.is_generating(session)
    }

    /// A fork of `parent` sharing its history up to and including `at`.
    pub async fn fork(
        &self,
        parent: SessionId,
        at: EventId,
    ) -> Result<(SessionInfo, Event), SessionError> {
        let mut made = self.fork_for(None, parent, at, Turn::default()).await?;
        Ok((made.info, made.events.remove(0)))
    }

    /// A fork of `parent` at `at` held by `owner`, with `turn` written
    /// after its `forked` event, all in one change.
    pub async fn fork_for(
        &self,
        owner: Option<String>,
        parent: SessionId,
        at: EventId,
        turn: Turn,
    ) -> Result<Made, SessionError> {
        self.write(move |db, hot, limits| {
            let maker = Maker {
                owner: owner.as_deref(),
                limits,
            };
            let (info, forked) = ops::fork(db, parent, at, maker)?;
            with_turn(db, hot, limits, info, forked, turn)
        })
        .await
    }

    /// Drops the events after `at`, if `expected` (when given) is current.
    pub async fn trim(
        &self,
        session: SessionId,
        at: EventId,
        expected: Option<i64>,
    ) -> Result<SessionInfo, SessionError> {
        self.write(move |db, hot, _| ops::trim(db, hot, session, at, expected))
            .await
    }

    /// Removes the session (and with `cascade` its forks); the ids removed.
    pub async fn purge(
        &self,
        session: SessionId,
        expected: Option<i64>,
        cascade: bool,
    ) -> Result<Vec<SessionId>, SessionError> {
        self.write(move |db, hot, _| ops::purge(db, hot, session, expected, cascade))
            .await
    }

    /// Changes metadata if `expected` is the session's version.
    pub async fn update_meta(
        &self,
        session: SessionId,
        expected: i64,
        patch: MetaPatch,
    ) -> Result<SessionInfo, SessionError> {
        self.write(move |db, _, _| ops::update_meta(db, session, expected, patch))
            .await
    }

    /// One session.
    pub async fn get(&self, session: SessionId) -> Result<SessionInfo, SessionError> {
        self.readers.read(move |db| read::get(db, session)).await
    }

    /// Sessions after `after` in id order, at most `limit`.
    pub async fn list(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionInfo>, SessionError> {
        self.readers
            .read(move |db| read::list(db, after, limit))
            .await
    }

    /// The tree of forks the session belongs to.
    pub async fn tree(&self, session: SessionId) -> Result<Vec<SessionInfo>, SessionError> {
        self.readers.read(move |db| read::tree(db, session)).await
    }

    /// History events after `cursor` (a `seq`; 0 for the start), at most
    /// `limit`, and the cursor that continues after them.
    pub async fn events(
        &self,
        session: SessionId,
        cursor: i64,
        limit: usize,
    ) -> Result<(Vec<Event>, i64), SessionError> {
        self.readers
            .read(move |db| read::events(db, session, cursor, limit))
            .await
    }

    /// The answer kept for an `Idempotency-Key`, if one is and has not
    /// expired.
    pub async fn kept_answer(&self, key: ScopedKey) -> Result<Option<Kept>, SessionError> {
        self.readers
            .read(move |db| idempotency::get(db, &key))
            .await
    }

    /// Keeps the first answer to an `Idempotency-Key` for 24 hours.
    pub async fn keep_answer(&self, key: ScopedKey, kept: Kept) -> Result<(), SessionError> {
        self.write(move |db, _, _| idempotency::put(db, &key, &kept))
            .await
    }

    /// Marks an `Idempotency-Key` as running its first request; the
    /// fingerprint of the request already running with it, if one is.
    pub fn begin_keyed(&self, key: ScopedKey, fingerprint: &str) -> Result<RunningGuard, String> {
        self.running.begin(key, fingerprint)
    }
}

/// A session just made (`first` is its `created` or `forked` event) with
/// `turn` appended after it, and the hold for its generation.
fn with_turn(
    db: Db<'_>,
    hot: &Hot,
    limits: &SessionLimits,
    mut info: SessionInfo,
    first: Event,
    turn: Turn,
) -> Result<Made, SessionError> {
    let mut events = vec![first];
    events.extend(ops::append(
        db,
        hot,
        limits,
        info.id,
        turn.events,
        Writer::Generation,
        turn.reserve,
    )?);
    info.last_seq = events.last().map_or(info.last_seq, |e| e.seq);
    let guard = hot.begin(info.id)?;
    Ok(Made {
        info,
        events,
        guard,
    })
}
