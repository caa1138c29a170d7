//! A damaged session database stops the process that opens it, with a
//! message naming the file, and the file is left exactly as it was.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::json;
use superfluid_head::sessions::{EventKind, Meta, SessionStore};

use crate::sessions_crash::temp_dir;

const PAGE: usize = 4096;

/// A database of a few hundred pages, closed cleanly so that everything is
/// in the main file (no write-ahead log beside it).
fn filled_db(tag: &str) -> Result<PathBuf> {
    let db = temp_dir(tag).join("sessions.db");
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let store = SessionStore::open(&db)?;
        let (info, _) = store
            .create(json!({"system": "s"}), Meta::default())
            .await?;
        let text = "a message long enough to fill pages ".repeat(8);
        for n in 0..3000 {
            store
                .append(
                    info.id,
                    EventKind::Message,
                    json!({"role": "user", "content": text, "n": n}),
                )
                .await?;
        }
        anyhow::Ok(())
    })?;
    drop(runtime);
    let wal = db.with_extension("db-wal");
    let deadline = Instant::now() + Duration::from_secs(30);
    while wal.exists() {
        ensure!(
            Instant::now() < deadline,
            "{} was not checkpointed on close",
            wal.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(db)
}

/// Opening must fail, name the file, and leave its bytes untouched.
fn assert_refused(db: &Path) -> Result<()> {
    let before = std::fs::read(db)?;
    let out = Command::new(env!("CARGO_BIN_EXE_superfluid"))
        .arg("sessions-writer")
        .arg("--db")
        .arg(db)
        .args(["--per-writer", "1"])
        .output()
        .context("running superfluid sessions-writer")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "a damaged database was opened; stderr: {stderr}"
    );
    ensure!(
        stderr.contains(&db.display().to_string()),
        "the error does not name the file: {stderr}"
    );
    ensure!(
        stderr.contains("is damaged"),
        "the error does not say the file is damaged: {stderr}"
    );
    ensure!(
        stderr.contains("Restore it from a backup"),
        "the error does not say what to do: {stderr}"
    );
    ensure!(std::fs::read(db)? == before, "the damaged file was changed");
    Ok(())
}

#[test]
fn flipped_bytes_in_the_middle_are_refused_by_name() -> Result<()> {
    let db = filled_db("sessions-flipped")?;
    let mut bytes = std::fs::read(&db)?;
    ensure!(
        bytes.len() > 64 * PAGE,
        "the database is only {} bytes",
        bytes.len()
    );
    let middle = bytes.len() / 2 / PAGE * PAGE;
    for byte in &mut bytes[middle..middle + PAGE] {
        *byte ^= 0xff;
    }
    std::fs::write(&db, &bytes)?;
    assert_refused(&db)
}

#[test]
fn a_truncated_database_is_refused_by_name() -> Result<()> {
    let db = filled_db("sessions-truncated")?;
    let len = std::fs::metadata(&db)?.len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)?
        .set_len(len / 2)?;
    assert_refused(&db)
}
