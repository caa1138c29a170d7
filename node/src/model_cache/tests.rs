use super::{CacheError, ModelCache};
use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};
use superfluid_proto::ModelOffer;

/// Pretend weights, different in each test: the in-process guard is shared
/// by the tests that run at once, and keyed by the content's hash.
fn weights(test: &str) -> Vec<u8> {
    format!("GGUF pretend content, long enough to split in pieces, for {test}").into_bytes()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sf-model-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn offer(content: &[u8]) -> ModelOffer {
    ModelOffer {
        id: "pretend".into(),
        sha256: hex::encode(Sha256::digest(content)),
        size: content.len() as u64,
    }
}

fn plenty(_: &Path) -> Result<u64, CacheError> {
    Ok(u64::MAX)
}

#[test]
fn a_whole_download_is_verified_and_put_in_place() -> anyhow::Result<()> {
    let model = weights("a_whole_download_is_verified_and_put_in_place");
    let content = model.as_slice();
    let cache = ModelCache::new(scratch("whole"));
    let offer = offer(content);
    assert_eq!(cache.cached(&offer), None);
    let mut download = cache.start(&offer, plenty)?;
    assert_eq!(download.offset(), 0);
    download.write(&content[..10])?;
    download.write(&content[10..])?;
    let path = download.finish()?;
    assert_eq!(path, cache.model_path(&offer.sha256));
    assert_eq!(std::fs::read(&path)?, content);
    assert_eq!(cache.cached(&offer), Some(path));
    assert!(!cache
        .dir()
        .join(format!("{}.partial", offer.sha256))
        .exists());
    std::fs::remove_dir_all(cache.dir())?;
    Ok(())
}

#[test]
fn a_partial_file_resumes_from_its_length() -> anyhow::Result<()> {
    let model = weights("a_partial_file_resumes_from_its_length");
    let content = model.as_slice();
    let cache = ModelCache::new(scratch("resume"));
    let offer = offer(content);
    std::fs::create_dir_all(cache.dir())?;
    std::fs::write(
        cache.dir().join(format!("{}.partial", offer.sha256)),
        &content[..17],
    )?;
    let mut download = cache.start(&offer, plenty)?;
    assert_eq!(download.offset(), 17);
    download.write(&content[17..])?;
    let path = download.finish()?;
    assert_eq!(std::fs::read(path)?, content);
    std::fs::remove_dir_all(cache.dir())?;
    Ok(())
}

#[test]
fn a_corrupted_partial_file_is_caught_by_the_whole_hash_and_deleted() -> anyhow::Result<()> {
    let model = weights("a_corrupted_partial_file_is_caught_by_the_whole_hash_and_deleted");
    let content = model.as_slice();
    let cache = ModelCache::new(scratch("corrupt"));
    let offer = offer(content);
    let partial = cache.dir().join(format!("{}.partial", offer.sha256));
    std::fs::create_dir_all(cache.dir())?;
    std::fs::write(&partial, b"wrong bytes here!")?;
    let mut download = cache.start(&offer, plenty)?;
    download.write(&content[17..])?;
    match download.finish() {
        Err(CacheError::Mismatch { want, .. }) => assert_eq!(want, offer.sha256),
        other => panic!("expected a mismatch, got {other:?}"),
    }
    assert!(!partial.exists(), "the bad file is deleted");
    assert_eq!(cache.cached(&offer), None, "nothing unverified is in place");
    std::fs::remove_dir_all(cache.dir())?;
    Ok(())
}

#[test]
fn a_cut_download_keeps_its_partial_file() -> anyhow::Result<()> {
    let model = weights("a_cut_download_keeps_its_partial_file");
    let content = model.as_slice();
    let cache = ModelCache::new(scratch("cut"));
    let offer = offer(content);
    let mut download = cache.start(&offer, plenty)?;
    download.write(&content[..5])?;
    assert!(matches!(
        download.finish(),
        Err(CacheError::Incomplete { got: 5, .. })
    ));
    assert_eq!(cache.start(&offer, plenty)?.offset(), 5);
    std::fs::remove_dir_all(cache.dir())?;
    Ok(())
}

#[test]
fn bytes_past_the_files_length_are_refused() -> anyhow::Result<()> {
    let model = weights("bytes_past_the_files_length_are_refused");
    let content = model.as_slice();
    let cache = ModelCache::new(scratch("long"));
    let offer = offer(content);
    let mut download = cache.start(&offer, plenty)?;
    let mut longer = content.to_vec();
    longer.push(b'!');
    assert!(matches!(
        download.write(&longer),
        Err(CacheError::TooLong { .. })
    ));
    std::fs::remove_dir_all(cache.dir())?;
    Ok(())
}

#[test]
fn one_model_is_fetched_once_at_a_time() -> anyhow::Result<()> {
    let model = weights("one_model_is_fetched_once_at_a_time");
    let content = model.as_slice();
    let cache = ModelCache::new(scratch("once"));
    let offer = offer(content);
    let first = cache.start(&offer, plenty)?;
    assert!(matches!(
        cache.start(&offer, plenty),
        Err(CacheError::AlreadyFetching { .. })
    ));
    drop(first);
    assert!(
        cache.start(&offer, plenty).is_ok(),
        "free again once the first ends"
    );
    std::fs::remove_dir_all(cache.dir())?;
    Ok(())
}

#[test]
fn too_little_disk_space_is_refused_before_the_transfer_naming_both_sizes() -> anyhow::Result<()> {
    let model = weights("too_little_disk_space_is_refused_before_the_transfer_naming_both_sizes");
    let content = model.as_slice();
    let cache = ModelCache::new(scratch("space"));
    let offer = offer(content);
    std::fs::create_dir_all(cache.dir())?;
    std::fs::write(
        cache.dir().join(format!("{}.partial", offer.sha256)),
        &content[..10],
    )?;
    let needed = offer.size - 10;
    let err = cache
        .start(&offer, |_| Ok(needed - 1))
        .expect_err("one byte short");
    assert!(
        matches!(err, CacheError::NoSpace { needed: n, free: f, .. } if n == needed && f == needed - 1)
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!("{needed} bytes needed")),
        "{message}"
    );
    assert!(
        cache.start(&offer, |_| Ok(needed)).is_ok(),
        "exactly enough is enough"
    );
    std::fs::remove_dir_all(cache.dir())?;
    Ok(())
}

#[test]
fn free_space_is_read_from_the_filesystem() -> anyhow::Result<()> {
    assert!(super::free_bytes(&std::env::temp_dir())? > 0);
    Ok(())
}
