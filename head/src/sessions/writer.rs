//! The group-commit writer: one thread owns the write connection. It takes
//! every change waiting in its queue, runs them in one transaction (each in
//! a savepoint, so one caller's mistake does not undo another's change),
//! commits once, and only after the commit answers each caller.
//!
//! A lone change, with nothing queued and the connection free, is run and
//! committed on its caller's thread instead ([`try_inline`]): the same
//! transaction and commit, without the hand-over to the writer thread and
//! back, which at one writer costs about a fifth of an append.
//!
//! A SQLite error inside the batch or at commit stops the store: the batch
//! is rolled back, no caller in it is told "done", and every later change
//! is refused with [`SessionError::Stopped`].

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use superfluid_link::sync::lock;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::mpsc;

use super::error::SessionError;
use super::history::Db;

/// Changes taken into one transaction at most; a bound on how long the
/// first caller of a batch waits behind the others.
pub(super) const MAX_BATCH: usize = 4096;

/// Changes that may wait for the writer before callers wait to queue.
pub(super) const QUEUE: usize = 16 * 1024;

/// How long the writer looks for the next change after a commit before it
/// sleeps: a caller that was just answered often sends its next change
/// within this, and finds the writer awake (no thread wake-up per append).
const LINGER: Duration = Duration::from_micros(50);

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
    /// The write connection: the writer thread's, lent to a lone change.
    pub conn: Mutex<Connection>,
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

/// Starts the writer thread on the shared connection.
pub(super) fn spawn(shared: Arc<Shared>) -> std::io::Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel(QUEUE);
    std::thread::Builder::new()
        .name("sessions-writer".to_owned())
        .spawn(move || run(rx, &shared))?;
    Ok(tx)
}

fn run(mut rx: mpsc::Receiver<Job>, shared: &Shared) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = next_job(&mut rx) {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if shared.stopped.get().is_some() {
            // A lone change failed on its caller's thread: dropping the
            // receiver and these jobs tells every caller.
            return;
        }
        let conn = lock(&shared.conn);
        if !commit_or_stop(shared, &conn, &mut batch) {
            return;
        }
    }
}

/// Commits `batch` and answers its callers; on a failure stops the store
/// (no caller in the batch is answered) and returns false.
fn commit_or_stop(shared: &Shared, conn: &Connection, batch: &mut Vec<Job>) -> bool {
    let db = Db {
        conn,
        path: &shared.path,
    };
    match commit(db, batch) {
        Ok(acks) => {
            acks.into_iter().for_each(|ack| ack());
            true
        }
        Err(reason) => {
            tracing::error!(path = %shared.path.display(), %reason, "session store stopped: a write failed");
            let _ = shared.stopped.set(reason);
            batch.clear();
            false
        }
    }
}

/// Runs `job` at once on the caller's thread when nothing is queued and
/// the connection is free, on a multi-threaded tokio runtime (whose worker
/// may block for the commit); gives it back otherwise, for the queue.
pub(super) fn try_inline(shared: &Shared, queue: &mpsc::Sender<Job>, job: Job) -> Result<(), Job> {
    let multi_threaded =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if !multi_threaded || queue.capacity() != queue.max_capacity() {
        return Err(job);
    }
    let Ok(conn) = shared.conn.try_lock() else {
        return Err(job);
    };
    if shared.stopped.get().is_some() {
        return Err(job);
    }
    tokio::task::block_in_place(|| commit_or_stop(shared, &conn, &mut vec![job]));
    Ok(())
}

/// The next change: one already queued, or one that comes within
/// [`LINGER`], or else whenever one comes (`None` once every sender is gone).
fn next_job(rx: &mut mpsc::Receiver<Job>) -> Option<Job> {
    let lingering = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) if lingering.elapsed() < LINGER => {
                std::thread::yield_now();
            }
            Err(mpsc::error::TryRecvError::Empty) => return rx.blocking_recv(),
        }
    }
}

/// Runs one statement of the writer's own (transaction control), prepared
/// once and kept.
fn control(db: Db<'_>, sql: &str) -> rusqlite::Result<()> {
    db.conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Runs the batch in one transaction and commits it; the acks to send.
fn commit(db: Db<'_>, batch: &mut Vec<Job>) -> Result<Vec<Ack>, String> {
    control(db, "BEGIN IMMEDIATE").map_err(|e| e.to_string())?;
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
    if let Err(e) = control(db, "COMMIT") {
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
        if let Err(e) = control(db, "SAVEPOINT change") {
            return Ran::Fatal(e.to_string());
        }
        let result = f(db);
        let ended = match &result {
            Err(e) if e.is_fatal() => return Ran::Fatal(e.to_string()),
            Err(_) => {
                control(db, "ROLLBACK TO change").and_then(|()| control(db, "RELEASE change"))
            }
            Ok(_) => control(db, "RELEASE change"),
        };
        if let Err(e) = ended {
            return Ran::Fatal(e.to_string());
        }
        Ran::Done(Box::new(move || {
            let _ = reply.send(result);
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        Shared {
            path: PathBuf::from(":memory:"),
            stopped: OnceLock::new(),
            conn: Mutex::new(Connection::open_in_memory().unwrap()),
        }
    }

    /// A change that answers the name of the thread it ran on.
    fn whose_thread() -> (
        Job,
        tokio::sync::oneshot::Receiver<Result<String, SessionError>>,
    ) {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = job(
            |_db| Ok(std::thread::current().name().unwrap_or_default().to_owned()),
            reply,
        );
        (job, answer)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lone_change_runs_on_its_callers_thread_unless_others_wait() {
        let shared = shared();
        let (queue, _rx) = mpsc::channel(4);
        let (job, answer) = whose_thread();
        // Answered at once: committed before try_inline returned.
        assert!(try_inline(&shared, &queue, job).is_ok());
        let thread = answer.await.unwrap().unwrap();
        assert_eq!(Some(thread.as_str()), std::thread::current().name());
        // With a change queued ahead of it, it waits its turn in the queue.
        let (ahead, _) = whose_thread();
        queue.send(ahead).await.unwrap();
        let (job, _) = whose_thread();
        assert!(try_inline(&shared, &queue, job).is_err());
    }

    #[tokio::test]
    async fn a_single_threaded_runtime_always_queues() {
        let shared = shared();
        let (queue, _rx) = mpsc::channel(4);
        let (job, _) = whose_thread();
        assert!(try_inline(&shared, &queue, job).is_err());
    }
}
