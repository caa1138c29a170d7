//! Join tokens as a stranger may present them in a hello: parsing and
//! verifying any text never panics, and a token this fleet signs verifies
//! to the claims it was minted from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use superfluid_link::{token, Identity};

fn fleet() -> &'static Identity {
    static FLEET: OnceLock<Identity> = OnceLock::new();
    FLEET.get_or_init(|| Identity::generate().expect("a fleet key"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now = 1_700_000_000;
    let parsed = token::parse(text);
    let verified = token::verify(text, fleet(), now);
    // Verification reads the same claims as parsing, or refuses.
    if let (Ok(claims), Ok(parsed)) = (&verified, &parsed) {
        assert_eq!(claims, parsed);
    }
    if let Ok(claims) = parsed {
        // Signed by this fleet, the same claims verify unless expired.
        let minted = token::mint(fleet(), &claims).expect("parsed claims can be signed");
        if minted.len() > token::MAX_TOKEN_LEN {
            // A longer signature part than the input's: over the length
            // cap, which `mint` does not check.
            return;
        }
        match token::verify(&minted, fleet(), now) {
            Ok(again) => assert_eq!(again, claims),
            Err(token::TokenError::Expired { .. }) => assert!(claims.expires_unix <= now),
            Err(e) => panic!("a freshly minted token was refused: {e}"),
        }
    }
});
