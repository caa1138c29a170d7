use super::*;

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("superfluid-cred-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn claims() -> JoinClaims {
    JoinClaims {
        fleet_id: "fleet-00aa11bb".into(),
        head_fingerprint: "cd".repeat(32),
        head_addrs: vec!["127.0.0.1:7070".into(), "[::1]:7070".into()],
        expires_unix: 10,
        nonce: "00".repeat(16),
        uses: 1,
        labels: vec![],
    }
}

#[test]
fn a_credential_from_claims_saves_and_loads_with_mode_0600() {
    let dir = temp_dir("roundtrip");
    assert!(matches!(
        Credential::load(&dir),
        Err(CredentialError::NotJoined { .. })
    ));
    let cred = Credential::from_claims(&claims(), "gpu-box").unwrap();
    assert_eq!(cred.head_addrs.len(), 2);
    cred.save(&dir).unwrap();
    assert!(Credential::exists(&dir));
    assert_eq!(Credential::load(&dir).unwrap(), cred);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join(CREDENTIAL_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let id = load_or_create_identity(&dir).unwrap();
    assert_eq!(
        load_or_create_identity(&dir).unwrap().fingerprint(),
        id.fingerprint()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_claims_and_damaged_files_say_what_to_do() {
    let mut bad = claims();
    bad.head_addrs = vec!["not an address".into()];
    let err = Credential::from_claims(&bad, "n").unwrap_err();
    assert!(err.to_string().contains("superfluid fleet token"), "{err}");
    let dir = temp_dir("damaged");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(CREDENTIAL_FILE), b"{nope").unwrap();
    let err = Credential::load(&dir).unwrap_err();
    assert!(err.to_string().contains("fleet join"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
