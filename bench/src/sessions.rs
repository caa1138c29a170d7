//! `sessions`: acknowledged durable appends per second through the session
//! store (group commit: one transaction and one fsync for all waiting
//! appends) at 1, 8 and 64 concurrent writers, against the same appends
//! each in its own SQLite transaction (WAL, `synchronous=FULL`, one
//! connection per writer: what an application that does not batch gets),
//! on the same disk in the same run. Also how long the store takes to open
//! a database of 1M events (its `quick_check` reads every page), and the
//! memory the head holds per idle session.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::json;
use superfluid_head::sessions::{EventKind, Meta, SessionId, SessionStore};

use crate::stats::{percentile, Spread};

/// Flags of `superfluid-bench sessions`.
#[derive(Debug, clap::Args)]
pub struct SessionsArgs {
    /// Where the databases are made (the disk measured).
    #[arg(long, default_value = "target/bench-sessions")]
    pub dir: PathBuf,
    /// Seconds each contender appends in each round.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Rounds at each writer count: each runs both contenders, one after
    /// the other, the first alternating, on fresh databases; the ratio is
    /// the median of the rounds' ratios, with its quartiles.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Events in the database whose opening is timed.
    #[arg(long, default_value_t = 1_000_000)]
    pub startup_events: u64,
    /// Sessions in the database whose memory is measured.
    #[arg(long, default_value_t = 100_000)]
    pub idle_sessions: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Appends per second at one writer count.
#[derive(Debug, Serialize)]
pub struct AppendRow {
    pub writers: usize,
    /// Through the store: acknowledged only after their batch committed
    /// (the median of the rounds).
    pub group_commit_per_s: f64,
    /// Each append its own transaction and commit (the median of the rounds).
    pub own_transaction_per_s: f64,
    /// The median of the rounds' `group / own`; the aim is at least 0.9 at
    /// 1 writer and 10 at 64.
    pub ratio: f64,
    /// The quartiles of the rounds' ratios.
    pub ratio_spread: Spread,
}

/// What `scripts/bench sessions --json` prints.
#[derive(Debug, Serialize)]
pub struct SessionsReport {
    pub dir: String,
    pub seconds: f64,
    pub rounds: usize,
    pub appends: Vec<AppendRow>,
    /// Events in the database opened.
    pub startup_events: u64,
    /// Opening it (integrity check and open turns included) and answering
    /// a first read.
    pub startup_seconds: f64,
    pub idle_sessions: u64,
    /// Resident memory after opening and listing every session, over the
    /// number of sessions.
    pub idle_session_bytes: f64,
}

const BODY: &str = "a user message of a typical length, about sixty bytes long";

pub async fn run(args: &SessionsArgs) -> Result<SessionsReport> {
    let _ = std::fs::remove_dir_all(&args.dir);
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let length = Duration::from_secs_f64(args.seconds);
    let mut appends = Vec::new();
    for writers in [1, 8, 64] {
        let (mut group, mut own) = (Vec::new(), Vec::new());
        for round in 0..args.rounds.max(1) {
            let store_db = args.dir.join(format!("group-{writers}-{round}.db"));
            let own_db = args.dir.join(format!("own-{writers}-{round}.db"));
            let (g, o) = if round % 2 == 0 {
                let g = group_commit(&store_db, writers, length).await?;
                (g, own_transactions(&own_db, writers, length).await?)
            } else {
                let o = own_transactions(&own_db, writers, length).await?;
                (group_commit(&store_db, writers, length).await?, o)
            };
            eprintln!("{writers} writers, round {round}: group commit {g:.0}/s, own transactions {o:.0}/s, ratio {:.2}", g / o);
            group.push(g);
            own.push(o);
        }
        let ratio_spread = Spread::of_ratios(&group, &own);
        appends.push(AppendRow {
            writers,
            group_commit_per_s: percentile(&mut group, 0.5),
            own_transaction_per_s: percentile(&mut own, 0.5),
            ratio: ratio_spread.p50,
            ratio_spread,
        });
    }
    let startup_db = args.dir.join("startup.db");
    fill(&startup_db, 1000, args.startup_events / 1000).await?;
    let started = Instant::now();
    let store = SessionStore::open(&startup_db)?;
    // As the head starts: the turns a stopped head left open are ended.
    store
        .end_interrupted_turns(superfluid_head::api::sessions::bodies::interrupted)
        .await?;
    store.list(None, 1).await?;
    let startup_seconds = started.elapsed().as_secs_f64();
    drop(store);
    let idle_db = args.dir.join("idle.db");
    fill(&idle_db, args.idle_sessions, 2).await?;
    let before = rss_bytes()?;
    let store = SessionStore::open(&idle_db)?;
    let mut after = None;
    loop {
        let page = store.list(after, 1000).await?;
        match page.last() {
            Some(last) => after = Some(last.id),
            None => break,
        }
    }
    let idle_session_bytes =
        rss_bytes()?.saturating_sub(before) as f64 / args.idle_sessions.max(1) as f64;
    drop(store);
    let _ = std::fs::remove_dir_all(&args.dir);
    Ok(SessionsReport {
        dir: args.dir.display().to_string(),
        seconds: args.seconds,
        rounds: args.rounds,
        appends,
        startup_events: args.startup_events,
        startup_seconds,
        idle_sessions: args.idle_sessions,
        idle_session_bytes,
    })
}

/// Sessions for the writers, made through the store (so the schema is its own).
async fn sessions(store: &SessionStore, count: usize) -> Result<Vec<SessionId>> {
    let mut ids = Vec::new();
    for _ in 0..count {
        ids.push(store.create(json!({}), Meta::default()).await?.0.id);
    }
    Ok(ids)
}

async fn group_commit(db: &Path, writers: usize, length: Duration) -> Result<f64> {
    let store = SessionStore::open(db)?;
    let ids = sessions(&store, writers).await?;
    let acked = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + length;
    let started = Instant::now();
    let tasks: Vec<_> = ids
        .into_iter()
        .map(|id| {
            let (store, acked) = (store.clone(), acked.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let body = json!({"role": "user", "content": BODY});
                    store.append(id, EventKind::Message, body).await?;
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(acked.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

async fn own_transactions(db: &Path, writers: usize, length: Duration) -> Result<f64> {
    let ids = {
        let store = SessionStore::open(db)?;
        sessions(&store, writers).await?
    };
    let acked = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + length;
    let started = Instant::now();
    let threads: Vec<_> = ids
        .into_iter()
        .map(|id| {
            let (db, acked) = (db.to_owned(), acked.clone());
            std::thread::spawn(move || -> Result<()> {
                let conn = rusqlite::Connection::open(&db)?;
                conn.pragma_update(None, "journal_mode", "WAL")?;
                conn.pragma_update(None, "synchronous", "FULL")?;
                conn.busy_timeout(Duration::from_secs(60))?;
                let mut insert = conn.prepare(
                    "INSERT INTO events (session, seq, kind, body, created_ms)
                     VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE session = ?1), 'message', ?2, 0)",
                )?;
                while Instant::now() < deadline {
                    let body = json!({"role": "user", "content": BODY}).to_string();
                    insert.execute(rusqlite::params![id.0, body])?;
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a writer thread panicked"))??;
    }
    Ok(acked.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// A database of `sessions` sessions with `per_session` events each, in
/// the store's schema, written in bulk (the figure measured is reading it).
async fn fill(db: &Path, sessions: u64, per_session: u64) -> Result<()> {
    drop(SessionStore::open(db)?);
    let mut conn = rusqlite::Connection::open(db)?;
    let tx = conn.transaction()?;
    {
        let mut session = tx.prepare("INSERT INTO sessions (created_ms) VALUES (0)")?;
        let mut event = tx.prepare(
            "INSERT INTO events (session, seq, kind, body, created_ms) VALUES (?1, ?2, 'message', ?3, 0)",
        )?;
        let body = json!({"role": "user", "content": BODY}).to_string();
        for _ in 0..sessions {
            session.execute([])?;
            let id = tx.last_insert_rowid();
            for seq in 1..=per_session {
                event.execute(rusqlite::params![id, seq as i64, body])?;
            }
        }
    }
    tx.commit()?;
    Ok(())
}

/// This process's resident memory.
fn rss_bytes() -> Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").context("reading /proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .context("parsing /proc/self/statm")?;
    Ok(pages * 4096)
}

/// The report as a table.
pub fn print_table(report: &SessionsReport) {
    println!(
        "durable appends/s (medians of {} rounds of {} s each, in {})",
        report.rounds, report.seconds, report.dir
    );
    println!(
        "{:>8} {:>14} {:>16} {:>7} {:>13}",
        "writers", "group commit", "own transaction", "ratio", "p25-p75"
    );
    for row in &report.appends {
        println!(
            "{:>8} {:>14.0} {:>16.0} {:>7.2} {:>6.2}-{:<6.2}",
            row.writers,
            row.group_commit_per_s,
            row.own_transaction_per_s,
            row.ratio,
            row.ratio_spread.p25,
            row.ratio_spread.p75
        );
    }
    println!(
        "open with {} events: {:.3} s; memory per idle session: {:.0} bytes",
        report.startup_events, report.startup_seconds, report.idle_session_bytes
    );
}
