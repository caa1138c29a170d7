use super::*;

#[test]
fn fingerprint_round_trips_through_hex() {
    let id = Identity::generate().unwrap();
    let text = id.fingerprint().to_string();
    assert_eq!(text.len(), 64);
    assert_eq!(text, text.to_lowercase());
    assert_eq!(text.parse::<Fingerprint>().unwrap(), id.fingerprint());
    assert!("abc".parse::<Fingerprint>().is_err());
    assert!("zz".repeat(32).parse::<Fingerprint>().is_err());
}

#[test]
fn certificate_carries_the_identity_key() {
    let id = Identity::generate().unwrap();
    assert_eq!(
        Fingerprint::of_certificate(&id.certificate()),
        Some(id.fingerprint())
    );
    assert_eq!(
        Fingerprint::of_certificate(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])),
        None
    );
}

#[test]
fn save_and_load_keep_the_identity_with_mode_0600() {
    let dir = std::env::temp_dir().join(format!("superfluid-link-id-{}", std::process::id()));
    let path = dir.join("sub").join("node.key");
    let _ = std::fs::remove_dir_all(&dir);
    let first = Identity::load_or_create(&path).unwrap();
    let again = Identity::load_or_create(&path).unwrap();
    assert_eq!(first.fingerprint(), again.fingerprint());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let der = Identity::from_pkcs8(&first.pkcs8).unwrap();
    assert_eq!(der.fingerprint(), first.fingerprint());
    std::fs::write(&path, b"not a key").unwrap();
    assert!(matches!(
        Identity::load(&path),
        Err(IdentityError::BadKey { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
