use super::*;
use superfluid_link::token;

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "superfluid-membership-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn key() -> Fingerprint {
    Identity::generate().unwrap().fingerprint()
}

fn hour() -> Duration {
    Duration::from_secs(3600)
}

fn mint(m: &Membership, uses: u32) -> String {
    m.mint(
        hour(),
        uses,
        vec![],
        vec!["127.0.0.1:7070".parse().unwrap()],
    )
    .unwrap()
}

fn count(m: &Membership, label: &str) -> u64 {
    m.refusals()
        .into_iter()
        .find(|(l, _)| *l == label)
        .map(|(_, n)| n)
        .unwrap()
}

#[test]
fn open_creates_private_keys_once_and_loads_them_after() {
    let dir = temp_dir("open");
    let m = Membership::open(&dir).unwrap();
    assert!(m.fleet_id().starts_with("fleet-") && m.fleet_id().len() == 14);
    assert_eq!(m.admin_key().len(), 64);
    #[cfg(unix)]
    for file in [FLEET_KEY_FILE, ADMIN_KEY_FILE] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    let again = Membership::open(&dir).unwrap();
    assert_eq!(again.fleet_id(), m.fleet_id());
    assert_eq!(again.admin_key(), m.admin_key());
    assert_eq!(again.identity().fingerprint(), m.identity().fingerprint());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_minted_token_names_this_fleet_and_head() {
    let dir = temp_dir("claims");
    let m = Membership::open(&dir).unwrap();
    let labels = vec![("zone".to_owned(), "lab".to_owned())];
    let text = m
        .mint(
            hour(),
            3,
            labels.clone(),
            vec!["10.0.0.1:7070".parse().unwrap()],
        )
        .unwrap();
    let claims = token::verify(&text, &m.identity(), now_unix()).unwrap();
    assert_eq!(claims.fleet_id, m.fleet_id());
    assert_eq!(
        claims.head_fingerprint,
        m.identity().fingerprint().to_string()
    );
    assert_eq!(claims.head_addrs, vec!["10.0.0.1:7070".to_owned()]);
    assert_eq!(
        (claims.uses, claims.labels, claims.nonce.len()),
        (3, labels, 32)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_token_enrols_a_key_that_then_joins_without_one() {
    let dir = temp_dir("enrol");
    let m = Membership::open(&dir).unwrap();
    let node = key();
    let text = m
        .mint(hour(), 1, vec![("gpu".into(), "yes".into())], vec![])
        .unwrap();
    let enrolment = m.admit(&node, "box", Some(&text), now_unix()).unwrap();
    assert_eq!(enrolment.labels, vec![("gpu".to_owned(), "yes".to_owned())]);
    assert_eq!(m.admit(&node, "box", None, now_unix()).unwrap(), enrolment);
    // Still enrolled after a restart.
    let m = Membership::open(&dir).unwrap();
    assert_eq!(m.admit(&node, "box", None, now_unix()).unwrap(), enrolment);
    assert_eq!(m.enrolled(), vec![enrolment]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_used_nonce_is_refused_after_a_restart() {
    let dir = temp_dir("nonce");
    let m = Membership::open(&dir).unwrap();
    let text = mint(&m, 1);
    m.admit(&key(), "first", Some(&text), now_unix()).unwrap();
    drop(m);
    let m = Membership::open(&dir).unwrap();
    let refusal = m
        .admit(&key(), "second", Some(&text), now_unix())
        .unwrap_err();
    assert_eq!(refusal, Refusal::NonceUsed);
    assert!(refusal.to_string().contains("already used"), "{refusal}");
    assert_eq!(count(&m, "nonce_used"), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_multi_use_token_admits_that_many_nodes() {
    let dir = temp_dir("uses");
    let m = Membership::open(&dir).unwrap();
    let text = mint(&m, 2);
    m.admit(&key(), "a", Some(&text), now_unix()).unwrap();
    m.admit(&key(), "b", Some(&text), now_unix()).unwrap();
    let m = Membership::open(&dir).unwrap();
    let refusal = m.admit(&key(), "c", Some(&text), now_unix()).unwrap_err();
    assert_eq!(refusal, Refusal::UsesExhausted { uses: 2 });
    assert!(
        refusal.to_string().contains("all 2 of its uses"),
        "{refusal}"
    );
    assert_eq!(m.enrolled().len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn expired_foreign_tampered_and_missing_tokens_are_refused_each_by_name() {
    let dir = temp_dir("refusals");
    let other_dir = temp_dir("refusals-other");
    let m = Membership::open(&dir).unwrap();
    let other = Membership::open(&other_dir).unwrap();
    let node = key();
    let now = now_unix();

    let text = mint(&m, 1);
    let refusal = m.admit(&node, "n", Some(&text), now + 7200).unwrap_err();
    assert_eq!(refusal.label(), "expired");
    let message = refusal.to_string();
    assert!(
        message.contains("expired at") && message.contains("UTC"),
        "{message}"
    );
    assert!(message.contains("superfluid fleet token"), "{message}");

    let refusal = m
        .admit(&node, "n", Some(&mint(&other, 1)), now)
        .unwrap_err();
    assert_eq!(refusal.label(), "wrong_fleet");
    assert!(refusal.to_string().contains(&other.fleet_id()), "{refusal}");
    assert!(refusal.to_string().contains(&m.fleet_id()), "{refusal}");

    // Claims of this fleet signed by another key.
    let mut claims = token::parse(&text).unwrap();
    claims.uses = 100;
    let forged = token::mint(&other.identity(), &claims).unwrap();
    let refusal = m.admit(&node, "n", Some(&forged), now).unwrap_err();
    assert_eq!(refusal.label(), "bad_signature");
    assert!(refusal.to_string().contains("signature"), "{refusal}");
    let refusal = m.admit(&node, "n", Some("hello"), now).unwrap_err();
    assert_eq!(refusal.label(), "bad_signature");

    let refusal = m.admit(&node, "n", None, now).unwrap_err();
    assert_eq!(refusal.label(), "unknown_node");
    assert!(
        refusal.to_string().contains("superfluid fleet join TOKEN"),
        "{refusal}"
    );

    // None of the refused attempts used up the token.
    m.admit(&node, "n", Some(&text), now).unwrap();
    let counts: Vec<_> = m.refusals().into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(
        counts,
        vec![
            ("bad_signature", 2),
            ("expired", 1),
            ("wrong_fleet", 1),
            ("unknown_node", 1)
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&other_dir).unwrap();
}

#[test]
fn a_revoked_key_is_refused_even_with_a_new_token_after_a_restart() {
    let dir = temp_dir("revoke");
    let m = Membership::open(&dir).unwrap();
    let node = key();
    m.admit(&node, "n", Some(&mint(&m, 1)), now_unix()).unwrap();
    m.revoke(&node).unwrap();
    assert!(m.enrolled().is_empty());
    let m = Membership::open(&dir).unwrap();
    assert!(m.is_revoked(&node));
    let refusal = m.admit(&node, "n", None, now_unix()).unwrap_err();
    assert_eq!(refusal.label(), "revoked");
    assert!(
        refusal.to_string().contains("this node was revoked"),
        "{refusal}"
    );
    let refusal = m
        .admit(&node, "n", Some(&mint(&m, 1)), now_unix())
        .unwrap_err();
    assert_eq!(refusal.label(), "revoked");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn utc_formats_unix_seconds() {
    assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(utc(1_798_761_599), "2026-12-31 23:59:59 UTC");
}
