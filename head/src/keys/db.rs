//! `keys.db`: the key records in SQLite. Rows hold the SHA-256 of each
//! secret, never the secret.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, ErrorCode, OptionalExtension};

use super::record::{ApiKey, KeyRecord, UsageSnapshot};
use super::secret::KeyHash;
use super::KeysError;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS api_keys (
    name              TEXT PRIMARY KEY NOT NULL,
    secret_sha256     TEXT NOT NULL UNIQUE,
    created           INTEGER NOT NULL,
    expires           INTEGER,
    models            TEXT,
    rpm               INTEGER,
    tpm               INTEGER,
    last_used         INTEGER,
    requests          INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    cached_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0
);";

/// An open key database.
#[derive(Debug)]
pub struct Db {
    conn: Connection,
    path: PathBuf,
}

impl Db {
    /// Opens (or creates) the database at `path`. WAL lets listings read
    /// while usage is written; `synchronous=FULL` so a created or revoked
    /// key survives a power cut that follows the answer.
    pub fn open(path: &Path) -> Result<Db, KeysError> {
        let err = |source| KeysError::Db {
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent() {
            // A missing dir shows up as SQLite's "unable to open" below.
            let _ = std::fs::create_dir_all(dir);
        }
        create_private(path);
        let conn = Connection::open(path).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(err)?;
        conn.execute_batch(SCHEMA).map_err(err)?;
        Ok(Db {
            conn,
            path: path.to_owned(),
        })
    }

    fn err(&self, source: rusqlite::Error) -> KeysError {
        KeysError::Db {
            path: self.path.clone(),
            source,
        }
    }

    /// Every stored key, by the hash of its secret.
    pub fn load(&self) -> Result<Vec<(KeyHash, ApiKey)>, KeysError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT name, secret_sha256, created, expires, models, rpm, tpm, last_used,
                        requests, prompt_tokens, cached_tokens, completion_tokens
                 FROM api_keys",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |row| {
                Ok(Row {
                    name: row.get(0)?,
                    hash: row.get(1)?,
                    created: row.get(2)?,
                    expires: row.get(3)?,
                    models: row.get(4)?,
                    rpm: row.get(5)?,
                    tpm: row.get(6)?,
                    last_used: row.get(7)?,
                    usage: [row.get(8)?, row.get(9)?, row.get(10)?, row.get(11)?],
                })
            })
            .map_err(|e| self.err(e))?;
        let mut keys = Vec::new();
        for row in rows {
            let row = row.map_err(|e| self.err(e))?;
            keys.push(self.key_of(row)?);
        }
        Ok(keys)
    }

    fn key_of(&self, row: Row) -> Result<(KeyHash, ApiKey), KeysError> {
        let bad = |what: String| KeysError::BadRow {
            path: self.path.clone(),
            name: row.name.clone(),
            what,
        };
        let mut hash = [0u8; 32];
        hex::decode_to_slice(&row.hash, &mut hash)
            .map_err(|e| bad(format!("secret_sha256 is not 64 hex digits ({e})")))?;
        let models = match &row.models {
            None => None,
            Some(text) => Some(
                serde_json::from_str::<Vec<String>>(text)
                    .map_err(|e| bad(format!("models is not a JSON list of names ({e})")))?,
            ),
        };
        let unsigned = |v: i64| u64::try_from(v).unwrap_or(0);
        let limit = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
        let record = KeyRecord {
            name: row.name.clone(),
            created: unsigned(row.created),
            expires: row.expires.map(unsigned),
            models,
            rpm: limit(row.rpm),
            tpm: limit(row.tpm),
        };
        let [requests, prompt, cached, completion] = row.usage.map(unsigned);
        let usage = UsageSnapshot {
            requests,
            prompt_tokens: prompt,
            cached_tokens: cached,
            completion_tokens: completion,
            last_used: row.last_used.map(unsigned),
        };
        Ok((hash, ApiKey::stored_with(record, usage)))
    }

    /// Stores a new key; [`KeysError::NameTaken`] if its name is used.
    pub fn insert(&self, hash: &KeyHash, record: &KeyRecord) -> Result<(), KeysError> {
        let models = record
            .models
            .as_ref()
            .map(|m| serde_json::Value::from(m.clone()).to_string());
        let inserted = self.conn.execute(
            "INSERT INTO api_keys (name, secret_sha256, created, expires, models, rpm, tpm)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                record.name,
                hex::encode(hash),
                signed(record.created),
                record.expires.map(signed),
                models,
                record.rpm,
                record.tpm,
            ],
        );
        match inserted {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == ErrorCode::ConstraintViolation =>
            {
                Err(KeysError::NameTaken {
                    name: record.name.clone(),
                })
            }
            Err(e) => Err(self.err(e)),
        }
    }

    /// Deletes the key `name`; [`KeysError::UnknownName`] if there is none.
    pub fn delete(&self, name: &str) -> Result<(), KeysError> {
        let found: Option<String> = self
            .conn
            .query_row(
                "DELETE FROM api_keys WHERE name = ?1 RETURNING name",
                [name],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        found.map(|_| ()).ok_or_else(|| KeysError::UnknownName {
            name: name.to_owned(),
        })
    }

    /// Writes the usage of the named keys, in one transaction.
    pub fn write_usage(&mut self, usage: &[(String, UsageSnapshot)]) -> Result<(), KeysError> {
        let tx = self.conn.transaction().map_err(|source| KeysError::Db {
            path: self.path.clone(),
            source,
        })?;
        for (name, u) in usage {
            tx.execute(
                "UPDATE api_keys SET last_used = ?2, requests = ?3, prompt_tokens = ?4,
                        cached_tokens = ?5, completion_tokens = ?6
                 WHERE name = ?1",
                params![
                    name,
                    u.last_used.map(signed),
                    signed(u.requests),
                    signed(u.prompt_tokens),
                    signed(u.cached_tokens),
                    signed(u.completion_tokens),
                ],
            )
            .map_err(|source| KeysError::Db {
                path: self.path.clone(),
                source,
            })?;
        }
        tx.commit().map_err(|source| KeysError::Db {
            path: self.path.clone(),
            source,
        })
    }
}

/// Creates `path` readable by its owner only, if it is missing: it holds
/// no secret, but names, models and usage are the operator's business.
/// SQLite gives its WAL and shared-memory files the same mode.
fn create_private(path: &Path) {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    // Already there, or not creatable: SQLite opens or reports it.
    let _ = options.open(path);
}

/// SQLite integers are signed; counts and times this large do not occur.
fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

struct Row {
    name: String,
    hash: String,
    created: i64,
    expires: Option<i64>,
    models: Option<String>,
    rpm: Option<i64>,
    tpm: Option<i64>,
    last_used: Option<i64>,
    usage: [i64; 4],
}
