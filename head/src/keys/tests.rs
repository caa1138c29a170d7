use super::*;

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let path = std::env::temp_dir().join(format!(
            "superfluid-keys-{}-{tag}-{}",
            std::process::id(),
            unix_now()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("creating a temp dir");
        Dir(path)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn named(name: &str) -> NewKey {
    NewKey {
        name: name.into(),
        ..NewKey::default()
    }
}

#[test]
fn a_new_key_has_the_prefix_and_256_random_bits() {
    let a = new_secret().expect("a secret");
    let b = new_secret().expect("a secret");
    assert!(a.starts_with(SECRET_PREFIX));
    assert_eq!(a.len(), SECRET_PREFIX.len() + 64);
    assert_ne!(a, b);
}

#[test]
fn a_created_key_authenticates_and_a_revoked_one_does_not() {
    let dir = Dir::new("revoke");
    let keys = Keys::open(&dir.0, &[]).expect("opening");
    assert!(!keys.required(), "no key yet: the API is open");
    let (secret, record) = keys.create(named("alice")).expect("creating");
    assert!(keys.required());
    let key = keys
        .authenticate(&secret, unix_now())
        .expect("the key works");
    assert_eq!(key.record, record);
    assert_eq!(
        keys.authenticate("sk-sf-wrong", unix_now()).err(),
        Some(Refusal::Unknown)
    );
    keys.revoke("alice").expect("revoking");
    assert_eq!(
        keys.authenticate(&secret, unix_now()).err(),
        Some(Refusal::Unknown)
    );
    assert!(matches!(
        keys.revoke("alice"),
        Err(KeysError::UnknownName { .. })
    ));
}

#[test]
fn keys_and_usage_survive_reopening_and_the_file_holds_no_secret() {
    let dir = Dir::new("reopen");
    let secret = {
        let keys = Keys::open(&dir.0, &[]).expect("opening");
        let (secret, _) = keys
            .create(NewKey {
                models: Some(vec!["m1".into()]),
                ..named("bob")
            })
            .expect("creating");
        let key = keys.authenticate(&secret, 100).expect("the key works");
        key.usage.count_request(100);
        key.usage.count_tokens(10, 4, 7);
        keys.flush().expect("flushing");
        secret
    };
    let keys = Keys::open(&dir.0, &[]).expect("reopening");
    let key = keys.authenticate(&secret, 100).expect("still works");
    assert!(key.allows("m1") && !key.allows("m2"));
    let usage = key.usage.snapshot();
    assert_eq!(
        (
            usage.requests,
            usage.prompt_tokens,
            usage.cached_tokens,
            usage.completion_tokens,
            usage.last_used
        ),
        (1, 10, 4, 7, Some(100))
    );
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(&dir.0).expect("listing") {
        bytes.extend(std::fs::read(entry.expect("an entry").path()).expect("reading"));
    }
    let hex_secret = &secret[SECRET_PREFIX.len()..];
    assert!(!bytes
        .windows(hex_secret.len())
        .any(|w| w == hex_secret.as_bytes()));
}

#[test]
fn an_expired_key_is_refused_by_name() {
    let dir = Dir::new("expiry");
    let keys = Keys::open(&dir.0, &[]).expect("opening");
    let (secret, record) = keys
        .create(NewKey {
            expires_in: Some(Duration::from_secs(60)),
            ..named("carol")
        })
        .expect("creating");
    let expires = record.expires.expect("an expiry");
    assert!(keys.authenticate(&secret, expires - 1).is_ok());
    assert_eq!(
        keys.authenticate(&secret, expires).err(),
        Some(Refusal::Expired {
            name: "carol".into()
        })
    );
}

#[test]
fn names_are_unique_and_plain() {
    let dir = Dir::new("names");
    let keys = Keys::open(&dir.0, &[]).expect("opening");
    keys.create(named("dave")).expect("creating");
    assert!(matches!(
        keys.create(named("dave")),
        Err(KeysError::NameTaken { .. })
    ));
    for bad in ["", "has space", "semi;colon", &"x".repeat(65)] {
        assert!(
            matches!(keys.create(named(bad)), Err(KeysError::BadName { .. })),
            "{bad:?} should be refused"
        );
    }
}

#[test]
fn limits_are_stored_and_enforced_after_reopening() {
    let dir = Dir::new("limits");
    let secret = {
        let keys = Keys::open(&dir.0, &[]).expect("opening");
        let (secret, record) = keys
            .create(NewKey {
                rpm: Some(2),
                tpm: Some(1000),
                ..named("erin")
            })
            .expect("creating");
        assert_eq!((record.rpm, record.tpm), (Some(2), Some(1000)));
        secret
    };
    let keys = Keys::open(&dir.0, &[]).expect("reopening");
    let key = keys.authenticate(&secret, unix_now()).expect("works");
    assert_eq!((key.record.rpm, key.record.tpm), (Some(2), Some(1000)));
    let limiter = key.limiter().expect("a limited key has a limiter");
    let now = tokio::time::Instant::now();
    limiter.admit(now).expect("first");
    limiter.admit(now).expect("second");
    assert!(
        limiter.admit(now).is_err(),
        "the third in a minute is refused"
    );
}

#[test]
fn a_zero_limit_is_refused_and_nothing_is_stored() {
    let dir = Dir::new("zero-limit");
    let keys = Keys::open(&dir.0, &[]).expect("opening");
    let rpm = keys.create(NewKey {
        rpm: Some(0),
        ..named("erin")
    });
    assert!(matches!(rpm, Err(KeysError::ZeroLimit { what: "rpm" })));
    let tpm = keys.create(NewKey {
        tpm: Some(0),
        ..named("erin")
    });
    assert!(matches!(tpm, Err(KeysError::ZeroLimit { what: "tpm" })));
    assert!(keys.list().is_empty(), "nothing is stored");
}

#[test]
fn keys_without_limits_have_no_limiter() {
    let dir = Dir::new("unlimited");
    let keys = Keys::open(&dir.0, &["static".into()]).expect("opening");
    let (secret, _) = keys.create(named("gus")).expect("creating");
    let stored = keys.authenticate(&secret, unix_now()).expect("works");
    assert!(stored.limiter().is_none());
    let fixed = keys.authenticate("static", unix_now()).expect("works");
    assert!(fixed.limiter().is_none());
}

#[test]
fn static_keys_work_for_every_model_and_are_not_listed() {
    let keys = Keys::in_memory(&["s3cret".into()]).expect("a static key");
    assert!(keys.required());
    let key = keys.authenticate("s3cret", unix_now()).expect("works");
    assert!(key.allows("any-model"));
    assert!(keys.list().is_empty());
    assert!(matches!(keys.create(named("x")), Err(KeysError::NoStore)));
    assert!(Keys::in_memory(&["two words".into()]).is_err());
}

#[test]
fn a_non_loopback_bind_needs_a_key_or_insecure() {
    let open = Keys::default();
    let lan: SocketAddr = "0.0.0.0:7700".parse().expect("an address");
    let local: SocketAddr = "127.0.0.1:7700".parse().expect("an address");
    assert!(check_bind(local, &open, false).is_ok());
    let refused = check_bind(lan, &open, false).expect_err("refused");
    assert!(refused.to_string().contains("superfluid keys create"));
    assert!(refused.to_string().contains("--api-key"));
    assert!(refused.to_string().contains("--insecure-no-auth"));
    assert!(check_bind(lan, &open, true).is_ok());
    let keyed = Keys::in_memory(&["k".into()]).expect("a static key");
    assert!(check_bind(lan, &keyed, false).is_ok());
}

#[test]
fn a_reachable_address_keeps_requiring_keys_when_the_last_is_revoked() {
    let dir = Dir::new("always");
    let keys = Keys::open(&dir.0, &[]).expect("opening");
    keys.create(named("frank")).expect("creating");
    let lan: SocketAddr = "0.0.0.0:7700".parse().expect("an address");
    check_bind(lan, &keys, false).expect("a key exists");
    keys.revoke("frank").expect("revoking");
    assert!(keys.required(), "the API must not open by itself");
}

#[test]
fn on_loopback_revoking_the_last_key_opens_the_api_again() {
    let dir = Dir::new("loopback");
    let keys = Keys::open(&dir.0, &[]).expect("opening");
    keys.create(named("grace")).expect("creating");
    let local: SocketAddr = "127.0.0.1:7700".parse().expect("an address");
    check_bind(local, &keys, false).expect("loopback");
    keys.revoke("grace").expect("revoking");
    assert!(!keys.required());
}

#[cfg(unix)]
#[test]
fn the_key_database_is_private_to_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("mode");
    Keys::open(&dir.0, &[]).expect("opening");
    let mode = std::fs::metadata(dir.0.join(DB_FILE))
        .expect("keys.db exists")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "mode {mode:o}");
}
