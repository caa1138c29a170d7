use super::*;

fn claims() -> JoinClaims {
    JoinClaims {
        fleet_id: "fleet-0123abcd".into(),
        head_fingerprint: "ab".repeat(32),
        head_addrs: vec!["192.0.2.1:7070".into(), "[2001:db8::1]:7070".into()],
        expires_unix: 2_000,
        nonce: "00112233445566778899aabbccddeeff".into(),
        uses: 1,
        labels: vec![("gpu".into(), "h200".into())],
    }
}

#[test]
fn a_minted_token_round_trips_and_verifies() {
    let fleet = Identity::generate().unwrap();
    let text = mint(&fleet, &claims()).unwrap();
    assert!(text.starts_with(PREFIX));
    assert!(text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)));
    assert_eq!(parse(&text).unwrap(), claims());
    assert_eq!(verify(&text, &fleet, 1_000).unwrap(), claims());
    assert_eq!(
        verify(&format!("  {text}\n"), &fleet, 1_000).unwrap(),
        claims()
    );
}

#[test]
fn a_token_signed_by_another_key_is_a_bad_signature() {
    let fleet = Identity::generate().unwrap();
    let other = Identity::generate().unwrap();
    let text = mint(&other, &claims()).unwrap();
    assert_eq!(verify(&text, &fleet, 1_000), Err(TokenError::BadSignature));
}

#[test]
fn changing_any_claim_breaks_the_signature() {
    let fleet = Identity::generate().unwrap();
    let text = mint(&fleet, &claims()).unwrap();
    let (_, sig) = text.rsplit_once('.').unwrap();
    let mut forged = claims();
    forged.uses = 1000;
    forged.expires_unix = u64::MAX;
    let body = base64url::encode(&forged.to_bytes().unwrap());
    let tampered = format!("{PREFIX}{body}.{sig}");
    assert_eq!(parse(&tampered).unwrap(), forged);
    assert_eq!(
        verify(&tampered, &fleet, 1_000),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn flipping_a_character_is_detected() {
    let fleet = Identity::generate().unwrap();
    let text = mint(&fleet, &claims()).unwrap();
    for i in PREFIX.len()..text.len() {
        let mut bytes = text.clone().into_bytes();
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        let changed = String::from_utf8(bytes).unwrap();
        if changed == text {
            continue;
        }
        assert!(
            verify(&changed, &fleet, 1_000).is_err(),
            "a change at {i} went unnoticed"
        );
    }
}

#[test]
fn an_expired_token_says_when() {
    let fleet = Identity::generate().unwrap();
    let text = mint(&fleet, &claims()).unwrap();
    let err = verify(&text, &fleet, 2_060).unwrap_err();
    assert_eq!(
        err,
        TokenError::Expired {
            expires_unix: 2_000,
            ago: 60
        }
    );
    assert!(err.to_string().contains("superfluid fleet token"));
}

#[test]
fn other_text_is_not_a_token() {
    let fleet = Identity::generate().unwrap();
    assert_eq!(parse("hello"), Err(TokenError::NotAToken));
    assert_eq!(verify("", &fleet, 0), Err(TokenError::NotAToken));
    assert!(matches!(parse("sfj1."), Err(TokenError::Malformed { .. })));
    assert!(matches!(
        parse("sfj1.AAAA"),
        Err(TokenError::Malformed { .. })
    ));
    assert!(matches!(
        parse("sfj1.!!.AA"),
        Err(TokenError::Malformed { .. })
    ));
    let long = format!("{PREFIX}{}", "A".repeat(MAX_TOKEN_LEN));
    assert!(matches!(parse(&long), Err(TokenError::Malformed { .. })));
}

#[test]
fn base64url_round_trips_every_length() {
    for len in 0..70u8 {
        let bytes: Vec<u8> = (0..len)
            .map(|i| i.wrapping_mul(37).wrapping_add(len))
            .collect();
        let text = base64url::encode(&bytes);
        assert!(!text.contains('='));
        assert_eq!(base64url::decode(&text).unwrap(), bytes);
    }
    assert_eq!(base64url::encode(b"\xfb\xff"), "-_8");
    assert_eq!(base64url::decode("A"), None);
    assert_eq!(base64url::decode("AB"), None, "non-zero trailing bits");
}

/// A small deterministic generator, so the garbage below is reproducible.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn garbage_never_panics() {
    let fleet = Identity::generate().unwrap();
    let good = mint(&fleet, &claims()).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let alphabet: Vec<char> = "ABCxyz019-_.=+/ é\u{0}sfj1".chars().collect();
    for round in 0..20_000 {
        let len = (xorshift(&mut state) % 200) as usize;
        let mut text: String = (0..len)
            .map(|_| alphabet[(xorshift(&mut state) % alphabet.len() as u64) as usize])
            .collect();
        if round % 2 == 0 {
            text = format!("{PREFIX}{text}");
        }
        if round % 3 == 0 {
            // Mutate a real token: truncate it and splice garbage in.
            let cut = (xorshift(&mut state) as usize) % good.len();
            text = format!("{}{}", &good[..cut], text);
        }
        let _ = parse(&text);
        let _ = verify(&text, &fleet, 1_000);
    }
}

/// Found while fuzzing join tokens: `mint` signed claims of any size, and
/// `parse` refuses tokens over `MAX_TOKEN_LEN`, so many labels made a token
/// that no node would take.
#[test]
fn claims_too_large_for_a_token_are_refused_at_minting() {
    let fleet = Identity::generate().unwrap();
    let mut big = claims();
    big.labels = vec![("team".into(), "x".repeat(MAX_TOKEN_LEN))];
    let refused = mint(&fleet, &big);
    assert!(
        matches!(refused, Err(TokenError::TooLong { len }) if len > MAX_TOKEN_LEN),
        "{refused:?}"
    );
    let mut fits = claims();
    fits.labels = vec![("team".into(), "x".repeat(MAX_TOKEN_LEN / 2))];
    let text = mint(&fleet, &fits).unwrap();
    assert_eq!(parse(&text).unwrap(), fits);
}
