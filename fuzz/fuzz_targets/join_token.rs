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
        // Signing may lengthen the token (a full signature where the input
        // had a short one); over the cap, minting refuses it.
        let minted = match token::mint(fleet(), &claims) {
            Ok(minted) => minted,
            Err(token::TokenError::TooLong { .. }) => return,
            Err(e) => panic!("parsed claims could not be signed: {e}"),
        };
        match token::verify(&minted, fleet(), now) {
            Ok(again) => assert_eq!(again, claims),
            Err(token::TokenError::Expired { .. }) => assert!(claims.expires_unix <= now),
            Err(e) => panic!("a freshly minted token was refused: {e}"),
        }
    }
});
