//! The sha256 of a file's content, as head and nodes compare model files.

use sha2::{Digest, Sha256};
use std::{io::Read, path::Path};

/// The sha256 of the file at `path` as 64 lowercase hex digits. Reads in
/// 1 MiB chunks, so memory stays flat for multi-gigabyte models.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// [`sha256_file`] on tokio's blocking threads, so that hashing a
/// multi-gigabyte model does not hold up the async workers.
///
/// # Errors
/// The I/O error reading the file, or one saying the hashing task died.
pub async fn sha256_file_async(path: &Path) -> std::io::Result<String> {
    let owned = path.to_owned();
    tokio::task::spawn_blocking(move || sha256_file(&owned))
        .await
        .map_err(std::io::Error::other)?
}
