//! Small files only this user may read (keys, credentials, membership),
//! written so that a crash leaves either the old content or the new one.

use std::io::Write as _;
use std::path::Path;

/// Writes `name` in `dir` with mode 0600: a temporary file beside it,
/// fsync, rename over the old one, then fsync the directory so the rename
/// itself survives a power cut. `dir` must exist.
///
/// # Errors
/// The I/O error of whichever step failed; the old file is then intact.
pub fn write_private_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut file = opts.open(&tmp)?;
    // A temporary file left by an older version may have had wider rights.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, &path)?;
    // Not every filesystem lets a directory be fsynced; the rename is done.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::write_private_atomic;

    #[test]
    fn rewrite_replaces_content_and_leaves_no_temporary_file() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("sf-private-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        write_private_atomic(&dir, "state.json", b"old")?;
        write_private_atomic(&dir, "state.json", b"new")?;
        assert_eq!(std::fs::read(dir.join("state.json"))?, b"new");
        assert!(!dir.join(".state.json.tmp").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("state.json"))?
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "only this user may read it");
        }
        std::fs::remove_dir_all(&dir)
    }
}
