use super::{record_paths, sha256_file_cached, Record};
use std::path::PathBuf;

fn scratch(name: &str) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("sf-hash-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

const ABC_SHA256: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

#[test]
fn hash_is_recorded_beside_the_file_and_reused() -> std::io::Result<()> {
    let dir = scratch("reuse")?;
    let model = dir.join("m.gguf");
    std::fs::write(&model, b"abc")?;
    let first = sha256_file_cached(&model, None)?;
    assert_eq!(first.sha256, ABC_SHA256);
    assert_eq!(first.size, 3);
    let record = dir.join("m.gguf.sha256");
    let text = std::fs::read_to_string(&record)?;
    assert!(text.starts_with(ABC_SHA256), "{text}");
    // A record that still matches the file's stamp is trusted as it is:
    // plant a different hash with the same stamp and it comes back.
    let mut planted = Record::parse(&text).expect("the record parses");
    planted.sha256 = "0".repeat(64);
    std::fs::write(&record, planted.text())?;
    assert_eq!(sha256_file_cached(&model, None)?.sha256, "0".repeat(64));
    std::fs::remove_dir_all(&dir)
}

#[test]
fn a_changed_file_is_hashed_again() -> std::io::Result<()> {
    let dir = scratch("changed")?;
    let model = dir.join("m.gguf");
    std::fs::write(&model, b"old content")?;
    sha256_file_cached(&model, None)?;
    std::fs::write(&model, b"abc")?;
    let again = sha256_file_cached(&model, None)?;
    assert_eq!(again.sha256, ABC_SHA256);
    assert_eq!(again.size, 3);
    std::fs::remove_dir_all(&dir)
}

#[test]
fn a_garbled_record_is_ignored() -> std::io::Result<()> {
    let dir = scratch("garbled")?;
    let model = dir.join("m.gguf");
    std::fs::write(&model, b"abc")?;
    std::fs::write(dir.join("m.gguf.sha256"), "not a record")?;
    assert_eq!(sha256_file_cached(&model, None)?.sha256, ABC_SHA256);
    std::fs::remove_dir_all(&dir)
}

#[test]
fn the_fallback_dir_is_read_after_the_files_own() {
    let paths = record_paths(
        std::path::Path::new("/models/m.gguf"),
        Some(std::path::Path::new("/data/model-hashes")),
    );
    assert_eq!(
        paths,
        vec![
            PathBuf::from("/models/m.gguf.sha256"),
            PathBuf::from("/data/model-hashes/m.gguf.sha256")
        ]
    );
}
