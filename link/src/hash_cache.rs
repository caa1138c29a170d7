//! A model file's sha256, computed once and remembered beside the file.
//!
//! Hashing a multi-gigabyte model takes seconds to minutes, and the head
//! and nodes need the hash at every start. The hash is kept in
//! `NAME.sha256` beside `NAME` (one line: hash, size, modification time in
//! nanoseconds) and trusted while the file's size and modification time
//! are those recorded; otherwise the file is hashed again. Where the file's
//! directory is not writable (a read-only model share), the record goes
//! into a fallback directory instead, named after the file.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::digest::sha256_file;

/// A file's content hash and the length it was computed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHash {
    /// The sha256 as 64 lowercase hex digits.
    pub sha256: String,
    /// The file's length in bytes.
    pub size: u64,
}

/// The record for a file: hash, size and modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    sha256: String,
    size: u64,
    mtime_ns: u128,
}

impl Record {
    fn parse(text: &str) -> Option<Record> {
        let mut words = text.split_whitespace();
        let sha256 = words.next()?;
        let size = words.next()?.parse().ok()?;
        let mtime_ns = words.next()?.parse().ok()?;
        let hex = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit());
        hex.then(|| Record {
            sha256: sha256.to_ascii_lowercase(),
            size,
            mtime_ns,
        })
    }

    fn text(&self) -> String {
        format!("{} {} {}\n", self.sha256, self.size, self.mtime_ns)
    }
}

/// The size and modification time of `path` now.
fn stamp(path: &Path) -> std::io::Result<(u64, u128)> {
    let meta = std::fs::metadata(path)?;
    let mtime_ns = meta
        .modified()?
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    Ok((meta.len(), mtime_ns))
}

/// Where the record of `path` lives: beside it, and in `fallback_dir`.
fn record_paths(path: &Path, fallback_dir: Option<&Path>) -> Vec<PathBuf> {
    let name = path
        .file_name()
        .map(|n| format!("{}.sha256", n.to_string_lossy()))
        .unwrap_or_else(|| "model.sha256".into());
    let mut paths = vec![path.with_file_name(&name)];
    if let Some(dir) = fallback_dir {
        paths.push(dir.join(name));
    }
    paths
}

/// The sha256 and size of the file at `path`, from its record if the file
/// has not changed since, else computed and recorded (beside the file, or
/// in `fallback_dir` when that cannot be written).
///
/// # Errors
/// The I/O error reading the file. Failing to write the record is only
/// logged: the hash is right either way.
pub fn sha256_file_cached(path: &Path, fallback_dir: Option<&Path>) -> std::io::Result<FileHash> {
    let (size, mtime_ns) = stamp(path)?;
    let records = record_paths(path, fallback_dir);
    let known = records
        .iter()
        .filter_map(|r| std::fs::read_to_string(r).ok())
        .filter_map(|text| Record::parse(&text))
        .find(|r| r.size == size && r.mtime_ns == mtime_ns);
    if let Some(record) = known {
        return Ok(FileHash {
            sha256: record.sha256,
            size,
        });
    }
    let sha256 = sha256_file(path)?;
    // The file may have changed while it was read; record only a hash of
    // the content the stamp describes.
    if stamp(path)? == (size, mtime_ns) {
        let record = Record {
            sha256: sha256.clone(),
            size,
            mtime_ns,
        };
        save(&records, &record);
    }
    Ok(FileHash { sha256, size })
}

/// Writes `record` to the first of `paths` that can be written, through a
/// temporary file and a rename so that a reader never sees half a record.
fn save(paths: &[PathBuf], record: &Record) {
    for path in paths {
        let tmp = path.with_extension("sha256.tmp");
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&tmp, record.text()))
            .and_then(|()| std::fs::rename(&tmp, path));
        match written {
            Ok(()) => return,
            Err(_) => {
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }
    tracing::debug!(
        paths = ?paths,
        "could not record a model file's hash; it will be computed again at the next start"
    );
}

/// [`sha256_file_cached`] on tokio's blocking threads.
///
/// # Errors
/// As [`sha256_file_cached`], or one saying the hashing task died.
pub async fn sha256_file_cached_async(
    path: &Path,
    fallback_dir: Option<&Path>,
) -> std::io::Result<FileHash> {
    let path = path.to_owned();
    let fallback = fallback_dir.map(Path::to_owned);
    tokio::task::spawn_blocking(move || sha256_file_cached(&path, fallback.as_deref()))
        .await
        .map_err(std::io::Error::other)?
}

#[cfg(test)]
mod tests;
