//! The node's model cache: model files fetched from the head, named by the
//! sha256 of their content.
//!
//! A file being fetched is `HASH.partial`; once its whole content hashes to
//! `HASH` it is fsynced and renamed to `HASH.gguf`, so a `.gguf` in the
//! cache has always been verified and a half-written one is never loaded
//! (the bytes start for the disk while the rest still comes; see [`flush`]).
//! The partial file's length is where a cut download resumes: its bytes are
//! hashed first, then the rest streams into the same hasher, so bytes
//! already on disk are checked as part of the whole file.
//!
//! Two downloads of one model never run at once. Within a process an
//! in-process guard refuses the second at once ([`CacheError::AlreadyFetching`]);
//! between processes sharing the cache (two nodes on one machine) an
//! exclusive `flock` on `HASH.lock` makes the second wait for the first.
//! The kernel drops that lock when its process dies, so a node killed
//! mid-download leaves no stale lock behind.

mod fetch;
mod flush;
mod hashing;
mod progress;

pub use fetch::{fetch, FetchError};
pub use progress::Progress;

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use superfluid_link::sync::lock;

use sha2::{Digest as _, Sha256};
use superfluid_proto::ModelOffer;

/// Why a model could not be put in the cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The cache directory or a file in it could not be read or written.
    #[error("model cache {path}: {source}; check that the directory exists and is writable, or set SUPERFLUID_HOME to another place")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The disk holding the cache has too little free space for the rest
    /// of the file.
    #[error("not enough disk space for {model} in {dir}: {needed} bytes needed, {free} free; free some space or set SUPERFLUID_HOME to a larger disk")]
    NoSpace {
        /// The model id.
        model: String,
        /// The cache directory.
        dir: PathBuf,
        /// Bytes still to write.
        needed: u64,
        /// Bytes free for this user.
        free: u64,
    },
    /// This process is already downloading the model.
    #[error("{model} is already being fetched by this node; wait for that download to end")]
    AlreadyFetching {
        /// The model id.
        model: String,
    },
    /// The file ended before its announced length (the transfer was cut).
    #[error("the transfer of {model} ended at byte {got} of {size}; the partial file is kept and the next attempt resumes from there")]
    Incomplete {
        /// The model id.
        model: String,
        /// Bytes held.
        got: u64,
        /// The file's length.
        size: u64,
    },
    /// More bytes arrived than the file holds.
    #[error("the head sent more than the {size} bytes of {model}; the partial file was deleted")]
    TooLong {
        /// The model id.
        model: String,
        /// The file's length.
        size: u64,
    },
    /// The whole file does not hash to the expected sha256.
    #[error("the fetched {model} has sha256 {got}, not {want}; the file was deleted and will be fetched again from the start")]
    Mismatch {
        /// The model id.
        model: String,
        /// The expected sha256.
        want: String,
        /// What the file hashed to.
        got: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CacheError + '_ {
    move |source| CacheError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Model files fetched from the head, in one directory.
#[derive(Debug, Clone)]
pub struct ModelCache {
    dir: PathBuf,
}

/// The sha256s this process is downloading now.
static FETCHING: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Holds a model's place in [`FETCHING`] until dropped.
#[derive(Debug)]
struct FetchGuard(String);

impl FetchGuard {
    fn take(offer: &ModelOffer) -> Result<FetchGuard, CacheError> {
        let mut fetching = lock(&FETCHING);
        if !fetching
            .get_or_insert_with(HashSet::new)
            .insert(offer.sha256.clone())
        {
            return Err(CacheError::AlreadyFetching {
                model: offer.id.clone(),
            });
        }
        Ok(FetchGuard(offer.sha256.clone()))
    }
}

impl Drop for FetchGuard {
    fn drop(&mut self) {
        let mut fetching = lock(&FETCHING);
        if let Some(set) = fetching.as_mut() {
            set.remove(&self.0);
        }
    }
}

/// Bytes free for this user on the filesystem holding `dir`.
///
/// # Errors
/// What `statvfs` said.
pub fn free_bytes(dir: &Path) -> Result<u64, CacheError> {
    let stat = rustix::fs::statvfs(dir).map_err(|e| CacheError::Io {
        path: dir.to_owned(),
        source: e.into(),
    })?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

impl ModelCache {
    /// The cache in `dir` (created on first use).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the verified file of `sha256` lives.
    pub fn model_path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.gguf"))
    }

    fn partial_path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.partial"))
    }

    /// The verified file of `offer`, if the cache has it.
    pub fn cached(&self, offer: &ModelOffer) -> Option<PathBuf> {
        let path = self.model_path(&offer.sha256);
        let size = std::fs::metadata(&path).ok()?.len();
        (size == offer.size).then_some(path)
    }

    /// Starts or resumes the download of `offer`, given the bytes free on
    /// the cache's disk (see [`free_bytes`]). Blocking: it hashes the
    /// bytes a partial file already holds, and may wait for another
    /// process's download of the same file.
    ///
    /// # Errors
    /// [`CacheError::AlreadyFetching`] while this process downloads it,
    /// [`CacheError::NoSpace`] when the rest does not fit, or an I/O error.
    pub fn start(
        &self,
        offer: &ModelOffer,
        free: impl FnOnce(&Path) -> Result<u64, CacheError>,
    ) -> Result<Download, CacheError> {
        std::fs::create_dir_all(&self.dir).map_err(io_error(&self.dir))?;
        let guard = FetchGuard::take(offer)?;
        let lock = self.lock(offer)?;
        let partial_path = self.partial_path(&offer.sha256);
        let mut partial = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&partial_path)
            .map_err(io_error(&partial_path))?;
        let mut offset = partial.metadata().map_err(io_error(&partial_path))?.len();
        if offset > offer.size {
            tracing::warn!(model = %offer.id, offset, size = offer.size, "the partial file is longer than the model; starting again");
            partial.set_len(0).map_err(io_error(&partial_path))?;
            offset = 0;
        }
        let mut hasher = Sha256::new();
        hash_prefix(&mut partial, offset, &mut hasher).map_err(io_error(&partial_path))?;
        let needed = offer.size - offset;
        let free = free(&self.dir)?;
        if needed > free {
            return Err(CacheError::NoSpace {
                model: offer.id.clone(),
                dir: self.dir.clone(),
                needed,
                free,
            });
        }
        let flush = flush::EarlyFlush::new(partial.try_clone().map_err(io_error(&partial_path))?);
        Ok(Download {
            flush,
            offer: offer.clone(),
            final_path: self.model_path(&offer.sha256),
            partial_path,
            partial,
            hashing: hashing::Hashing::start(hasher),
            offset,
            written: offset,
            _lock: lock,
            _guard: guard,
        })
    }

    /// Takes the cross-process lock of `offer`'s download, waiting for
    /// another process that holds it.
    fn lock(&self, offer: &ModelOffer) -> Result<File, CacheError> {
        use rustix::fs::{flock, FlockOperation};
        let path = self.dir.join(format!("{}.lock", offer.sha256));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error(&path))?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            tracing::info!(model = %offer.id, lock = %path.display(), "another process is fetching this model; waiting for it");
            flock(&file, FlockOperation::LockExclusive).map_err(|e| CacheError::Io {
                path: path.clone(),
                source: e.into(),
            })?;
        }
        Ok(file)
    }
}

/// Feeds the first `len` bytes of `file` to `hasher`.
fn hash_prefix(file: &mut File, len: u64, hasher: &mut Sha256) -> std::io::Result<()> {
    use std::io::Seek as _;
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let want = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
        let n = file.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        hasher.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(())
}

/// A download in progress: appends to the partial file and hashes as it goes.
#[derive(Debug)]
pub struct Download {
    flush: flush::EarlyFlush,
    offer: ModelOffer,
    final_path: PathBuf,
    partial_path: PathBuf,
    partial: File,
    hashing: hashing::Hashing,
    offset: u64,
    written: u64,
    _lock: File,
    _guard: FetchGuard,
}

impl Download {
    /// Where the transfer starts: the bytes the partial file already held.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes held so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends the next bytes of the file.
    ///
    /// # Errors
    /// [`CacheError::TooLong`] (and the partial file deleted) past the
    /// file's length, or the I/O error writing.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), CacheError> {
        self.write_chunk(bytes.to_vec())
    }

    /// [`Download::write`], handing over the buffer (the hashing thread
    /// takes it, so nothing is copied).
    ///
    /// # Errors
    /// As [`Download::write`].
    pub fn write_chunk(&mut self, bytes: Vec<u8>) -> Result<(), CacheError> {
        let total = self.written.saturating_add(bytes.len() as u64);
        if total > self.offer.size {
            let _ = std::fs::remove_file(&self.partial_path);
            return Err(CacheError::TooLong {
                model: self.offer.id.clone(),
                size: self.offer.size,
            });
        }
        self.partial
            .write_all(&bytes)
            .map_err(io_error(&self.partial_path))?;
        self.flush.wrote(bytes.len() as u64);
        self.hashing.update(bytes);
        self.written = total;
        Ok(())
    }

    /// Checks the whole file against its sha256 and puts it in place:
    /// fsync, rename to `HASH.gguf`, fsync the directory. Blocking.
    ///
    /// # Errors
    /// [`CacheError::Incomplete`] (the partial file kept) if bytes are
    /// missing, [`CacheError::Mismatch`] (the partial file deleted) if the
    /// content is not the model's, or an I/O error.
    pub fn finish(self) -> Result<PathBuf, CacheError> {
        if self.written < self.offer.size {
            return Err(CacheError::Incomplete {
                model: self.offer.id.clone(),
                got: self.written,
                size: self.offer.size,
            });
        }
        let got = self.hashing.finish();
        if got != self.offer.sha256 {
            let _ = std::fs::remove_file(&self.partial_path);
            tracing::warn!(model = %self.offer.id, want = %self.offer.sha256, %got, "the fetched model does not match its sha256; deleted it");
            return Err(CacheError::Mismatch {
                model: self.offer.id,
                want: self.offer.sha256,
                got,
            });
        }
        self.partial
            .sync_all()
            .map_err(io_error(&self.partial_path))?;
        std::fs::rename(&self.partial_path, &self.final_path)
            .map_err(io_error(&self.final_path))?;
        if let Some(dir) = self.final_path.parent() {
            // Not every filesystem lets a directory be fsynced; the rename is done.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(self.final_path)
    }
}

#[cfg(test)]
mod tests;
