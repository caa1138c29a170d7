//! Crash safety of the session store: a separate process appends from many
//! concurrent writers and prints each acknowledged event; it is killed with
//! SIGKILL at random moments, many times, and restarted. Every acknowledged
//! event must then be in the database, in order, and nothing else but the
//! at most one append per writer that was in flight at each kill.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use superfluid_head::sessions::SessionStore;

const WRITERS: usize = 16;
const SESSIONS: usize = 4;

/// One acknowledged append, as the writer printed it.
#[derive(Debug, Clone, Copy)]
struct Ack {
    w: u64,
    n: u64,
    session: i64,
    id: i64,
    seq: i64,
}

fn parse_ack(line: &str) -> Option<Ack> {
    let mut parts = line.strip_prefix("ack ")?.split(' ');
    let mut next = || parts.next()?.parse::<i64>().ok();
    Some(Ack {
        w: next()? as u64,
        n: next()? as u64,
        session: next()?,
        id: next()?,
        seq: next()?,
    })
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("superfluid-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Starts the writer; its complete stdout lines arrive on the receiver.
fn start_writer(db: &Path) -> Result<(Child, mpsc::Receiver<String>, std::thread::JoinHandle<()>)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_superfluid"))
        .arg("sessions-writer")
        .arg("--db")
        .arg(db)
        .args([
            "--writers",
            &WRITERS.to_string(),
            "--sessions",
            &SESSIONS.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("spawning superfluid sessions-writer")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        // A line cut by the kill has no newline: its ack was never whole.
        while stdout.read_line(&mut line).unwrap_or(0) > 0 && line.ends_with('\n') {
            if tx.send(line.trim_end().to_owned()).is_err() {
                break;
            }
            line.clear();
        }
    });
    Ok((child, rx, reader))
}

/// A small deterministic generator of kill delays; the seed is printed so
/// a failing run can be repeated with SUPERFLUID_CRASH_SEED.
struct Delays(u64);

impl Delays {
    fn next_ms(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (self.0 >> 33) % (hi - lo)
    }
}

/// Runs the writer once and kills it: after `ready` and a random delay, or
/// (every fifth run) at a random moment of its start-up.
fn run_once(db: &Path, delays: &mut Delays, round: usize, acks: &mut Vec<Ack>) -> Result<()> {
    let (mut child, lines, reader) = start_writer(db)?;
    if round % 5 == 4 {
        std::thread::sleep(Duration::from_millis(delays.next_ms(1, 80)));
    } else {
        match lines.recv_timeout(Duration::from_secs(120)) {
            Ok(line) if line == "ready" => {}
            Ok(line) => bail!("writer said {line:?} before ready"),
            Err(_) => bail!("the writer did not get ready in 120 s (round {round})"),
        }
        std::thread::sleep(Duration::from_millis(delays.next_ms(20, 400)));
    }
    if let Some(status) = child.try_wait()? {
        bail!("the writer exited by itself with {status} in round {round}");
    }
    child.kill().context("SIGKILL")?;
    child.wait()?;
    let _ = reader.join();
    for line in lines.try_iter() {
        if let Some(ack) = parse_ack(&line) {
            acks.push(ack);
        } else if line != "ready" {
            bail!("unexpected writer output {line:?}");
        }
    }
    Ok(())
}

/// What the database holds: per writer, (n, session, event id, seq) in
/// history order.
type Stored = BTreeMap<u64, Vec<(u64, i64, i64, i64)>>;

fn stored(db: &Path) -> Result<Stored> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let store = SessionStore::open(db)?;
        let mut by_writer = Stored::new();
        for info in store.list(None, 100).await? {
            let (events, _) = store.events(info.id, 0, usize::MAX).await?;
            let mut last_seq = 0;
            for event in events {
                ensure!(
                    event.seq == last_seq + 1,
                    "session {} skips from seq {last_seq} to {}",
                    info.id,
                    event.seq
                );
                last_seq = event.seq;
                let (Some(w), Some(n)) = (event.body["w"].as_u64(), event.body["n"].as_u64())
                else {
                    continue;
                };
                by_writer
                    .entry(w)
                    .or_default()
                    .push((n, event.session.0, event.id.0, event.seq));
            }
        }
        Ok(by_writer)
    })
}

#[test]
fn acknowledged_appends_survive_repeated_sigkill() -> Result<()> {
    let kills: usize = std::env::var("SUPERFLUID_CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("SUPERFLUID_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("crash test: {kills} kills, SUPERFLUID_CRASH_SEED={seed}");
    let dir = temp_dir("sessions-crash");
    let db = dir.join("sessions.db");
    let mut delays = Delays(seed);
    let mut acks = Vec::new();
    for round in 0..kills {
        run_once(&db, &mut delays, round, &mut acks)?;
    }
    ensure!(
        acks.len() > 100,
        "only {} appends were acknowledged in {kills} runs",
        acks.len()
    );

    let stored = stored(&db)?;
    // Each writer's events are exactly 0, 1, 2, ... in history order: in
    // order, none lost in the middle, none duplicated or invented.
    for (w, events) in &stored {
        for (i, (n, ..)) in events.iter().enumerate() {
            ensure!(
                *n == i as u64,
                "writer {w}: event {i} in history order has n = {n}"
            );
        }
        ensure!(
            events.iter().all(|e| e.1 == events[0].1),
            "writer {w} wrote to two sessions"
        );
    }
    // Every acknowledged event is there, with the id and seq it was acked with.
    let mut acked: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for ack in &acks {
        let events = stored
            .get(&ack.w)
            .with_context(|| format!("writer {} has no stored events; lost {ack:?}", ack.w))?;
        let found = events
            .get(ack.n as usize)
            .with_context(|| format!("lost acknowledged {ack:?}"))?;
        ensure!(
            *found == (ack.n, ack.session, ack.id, ack.seq),
            "acknowledged {ack:?} is stored as {found:?}"
        );
        acked.entry(ack.w).or_default().insert(ack.n);
    }
    // Unacknowledged but stored: at most the one append per writer in
    // flight at each kill.
    for (w, events) in &stored {
        let acked = acked.get(w).map_or(0, BTreeSet::len);
        ensure!(
            events.len() - acked <= kills,
            "writer {w} has {} stored events but only {acked} acknowledged in {kills} runs",
            events.len()
        );
    }
    eprintln!(
        "crash test: {} acknowledged appends over {kills} kills, all present",
        acks.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
