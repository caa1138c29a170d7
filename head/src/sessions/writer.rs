//! The group-commit writer: one thread owns the write connection. It takes
//! every change waiting in its queue, runs them in one transaction (each in
//! a savepoint, so one caller's mistake does not undo another's change),
//! commits once, and only after the commit answers each caller.
//!
//! A SQLite error inside the batch or at commit stops the store: the batch
//! is rolled back, no caller in it is told "done", and every later change
//! is refused with [`SessionError::Stopped`].

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rusqlite::Connection;
use tokio::sync::mpsc;

use super::error::SessionError;
use super::history::Db;

/// Changes taken into one transaction at most; a bound on how long the
/// first caller of a batch waits behind the others.
pub(super) const MAX_BATCH: usize = 4096;

/// Changes that may wait for the writer before callers wait to queue.
pub(super) const QUEUE: usize = 16 * 1024;

/// Answers one caller; run only after its change is committed.
pub(super) type Ack = Box<dyn FnOnce() + Send>;

/// What a change did inside the transaction.
pub(super) enum Ran {
    /// Applied or refused for the caller's own reason: keep the batch.
    Done(Ack),
    /// SQLite failed: the store must stop.
    Fatal(String),
}

/// One change: runs against the write connection inside the batch.
pub(super) type Job = Box<dyn FnOnce(Db<'_>) -> Ran + Send>;

/// What the writer and the store's handles share.
#[derive(Debug)]
pub(super) struct Shared {
    pub path: PathBuf,
    /// Why the store stopped, once it has.
    pub stopped: OnceLock<String>,
}

impl Shared {
    /// The error every change gets once the store has stopped.
    pub fn stopped_error(&self) -> SessionError {
        SessionError::Stopped {
            path: self.path.clone(),
            reason: self
                .stopped
                .get()
                .cloned()
                .unwrap_or_else(|| "the writer thread ended".to_owned()),
        }
    }
}

/// Starts the writer thread on `conn`.
pub(super) fn spawn(conn: Connection, shared: Arc<Shared>) -> std::io::Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel(QUEUE);
    std::thread::Builder::new()
        .name("sessions-writer".to_owned())
        .spawn(move || run(conn, rx, &shared))?;
    Ok(tx)
}

fn run(conn: Connection, mut rx: mpsc::Receiver<Job>, shared: &Shared) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let db = Db {
            conn: &conn,
            path: &shared.path,
        };
        match commit(db, &mut batch) {
            Ok(acks) => acks.into_iter().for_each(|ack| ack()),
            Err(reason) => {
                tracing::error!(path = %shared.path.display(), %reason, "session store stopped: a write failed");
                let _ = shared.stopped.set(reason);
                // Dropping the receiver and the unanswered jobs tells every
                // waiting caller the store has stopped.
                return;
            }
        }
    }
}

/// Runs the batch in one transaction and commits it; the acks to send.
fn commit(db: Db<'_>, batch: &mut Vec<Job>) -> Result<Vec<Ack>, String> {
    db.conn
        .execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| e.to_string())?;
    let mut acks = Vec::with_capacity(batch.len());
    for job in batch.drain(..) {
        match job(db) {
            Ran::Done(ack) => acks.push(ack),
            Ran::Fatal(reason) => {
                let _ = db.conn.execute_batch("ROLLBACK");
                return Err(reason);
            }
        }
    }
    if let Err(e) = db.conn.execute_batch("COMMIT") {
        let _ = db.conn.execute_batch("ROLLBACK");
        return Err(e.to_string());
    }
    Ok(acks)
}

/// Wraps a change in a savepoint: its own error rolls back only itself; a
/// SQLite error is fatal for the batch.
pub(super) fn job<R, F>(f: F, reply: tokio::sync::oneshot::Sender<Result<R, SessionError>>) -> Job
where
    R: Send + 'static,
    F: FnOnce(Db<'_>) -> Result<R, SessionError> + Send + 'static,
{
    Box::new(move |db: Db<'_>| {
        if let Err(e) = db.conn.execute_batch("SAVEPOINT change") {
            return Ran::Fatal(e.to_string());
        }
        let result = f(db);
        let end = match &result {
            Err(e) if e.is_fatal() => return Ran::Fatal(e.to_string()),
            Err(_) => "ROLLBACK TO change; RELEASE change",
            Ok(_) => "RELEASE change",
        };
        if let Err(e) = db.conn.execute_batch(end) {
            return Ran::Fatal(e.to_string());
        }
        Ran::Done(Box::new(move || {
            let _ = reply.send(result);
        }))
    })
}
