//! Opening the session database: check it before trusting it, then set it up.

use std::path::Path;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::error::SessionError;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    parent     INTEGER,
    fork_at    INTEGER,
    base_seq   INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    title      TEXT,
    tags       TEXT NOT NULL DEFAULT '[]',
    archived   INTEGER NOT NULL DEFAULT 0,
    version    INTEGER NOT NULL DEFAULT 1,
    owner      TEXT
);
CREATE INDEX IF NOT EXISTS sessions_by_parent ON sessions(parent);
CREATE TABLE IF NOT EXISTS events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session    INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_session_seq ON events(session, seq);
CREATE TABLE IF NOT EXISTS idempotency (
    scope       TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status      INTEGER NOT NULL,
    content_type TEXT,
    node        TEXT,
    body        BLOB NOT NULL,
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS idempotency_by_age ON idempotency(created_ms);
";

/// Opens the write connection: checks the file with `PRAGMA quick_check`
/// before anything may write to it, then WAL, full sync, the schema.
pub(super) fn open_writer(path: &Path) -> Result<Connection, SessionError> {
    if let Some(dir) = path.parent() {
        // A missing dir shows up as SQLite's "unable to open" below.
        let _ = std::fs::create_dir_all(dir);
    }
    let conn = Connection::open(path).map_err(|e| classify(path, e))?;
    // Another process opening the same file waits rather than fails.
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| classify(path, e))?;
    quick_check(path, &conn)?;
    let setup = || -> rusqlite::Result<()> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(SCHEMA)?;
        add_column(&conn, "sessions", "owner")?;
        conn.execute_batch("CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions(owner)")?;
        add_column(&conn, "idempotency", "node")
    };
    setup().map_err(|e| classify(path, e))?;
    Ok(conn)
}

/// Gives `table` the TEXT column `column` if a database made before it
/// lacks it (sessions' `owner`, a kept answer's `node`); indexes on such a
/// column are made after this, once it is sure to exist.
fn add_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<()> {
    if has_column(conn, table, column)? {
        return Ok(());
    }
    add_missing_column(conn, table, column)
}

/// Adds the column found missing; another process opening the same file
/// at once may have added it since, which is as good.
fn add_missing_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<()> {
    match conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} TEXT")) {
        Err(_) if has_column(conn, table, column)? => Ok(()),
        added => added,
    }
}

fn has_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    conn.prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
        .exists([table, column])
}

/// Opens a reader connection on a database the writer has set up.
pub(super) fn open_reader(path: &Path) -> Result<Connection, SessionError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| classify(path, e))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| classify(path, e))?;
    Ok(conn)
}

/// SQLite's own structural check of every page, index and record format;
/// anything but "ok" means the file is not to be trusted.
fn quick_check(path: &Path, conn: &Connection) -> Result<(), SessionError> {
    let found = (|| -> rusqlite::Result<Vec<String>> {
        let mut stmt = conn.prepare("PRAGMA quick_check")?;
        let rows = stmt.query_map([], |row| row.get::<_, String>(0))?;
        rows.collect()
    })()
    .map_err(|e| classify(path, e))?;
    if found.len() == 1 && found[0] == "ok" {
        return Ok(());
    }
    let mut detail = found.into_iter().take(3).collect::<Vec<_>>().join("; ");
    if detail.is_empty() {
        detail = "quick_check returned nothing".to_owned();
    }
    Err(SessionError::Corrupt {
        path: path.to_owned(),
        detail,
    })
}

/// A damaged file is a different failure from an unwritable one: the
/// first needs the operator to restore or move the file.
pub(super) fn classify(path: &Path, source: rusqlite::Error) -> SessionError {
    let code = source.sqlite_error_code();
    if matches!(
        code,
        Some(ErrorCode::DatabaseCorrupt) | Some(ErrorCode::NotADatabase)
    ) {
        return SessionError::Corrupt {
            path: path.to_owned(),
            detail: source.to_string(),
        };
    }
    SessionError::Db {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::{add_column, add_missing_column, has_column};
    use rusqlite::Connection;

    #[test]
    fn a_missing_column_is_added_once_and_one_added_meanwhile_is_taken_as_is() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (a TEXT)").unwrap();
        add_column(&conn, "t", "b").unwrap();
        assert!(has_column(&conn, "t", "b").unwrap());
        add_column(&conn, "t", "b").unwrap();
        // As when another process added it between the check and the ALTER.
        add_missing_column(&conn, "t", "b").unwrap();
        // Any other failure is still one.
        assert!(add_missing_column(&conn, "no_such_table", "b").is_err());
    }
}
