use super::*;
use crate::{decode, encode, ControlMsg, HeadReply, LEN_PREFIX};
use proptest::prelude::*;

fn round_trip<T>(msg: &T) -> T
where
    T: Serialize + serde::de::DeserializeOwned,
{
    let bytes = encode(msg).expect("encodes");
    decode(&bytes[LEN_PREFIX..]).expect("decodes")
}

proptest! {
    #[test]
    fn fetch_request_round_trips(sha256 in "[0-9a-f]{64}", offset in any::<u64>()) {
        let msg = NodeStream::Fetch(FetchRequest { sha256, offset });
        prop_assert_eq!(round_trip(&msg), msg);
    }

    #[test]
    fn fetch_replies_round_trip(size in any::<u64>(), reason in ".{0,80}") {
        for msg in [FetchReply::Sending { size }, FetchReply::Refused { reason: reason.clone() }] {
            prop_assert_eq!(round_trip(&msg), msg);
        }
    }

    #[test]
    fn progress_round_trips_and_stays_within_a_hundred_percent(done in any::<u64>(), total in any::<u64>()) {
        let progress = FetchProgress { model: "m".into(), done, total };
        prop_assert!(progress.percent() <= 100);
        let msg = ControlMsg::Fetching(progress);
        prop_assert_eq!(round_trip(&msg), msg);
    }

    #[test]
    fn garbage_never_panics_a_transfer_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode::<NodeStream>(&bytes);
        let _ = decode::<FetchReply>(&bytes);
    }
}

#[test]
fn welcome_names_the_heads_models() {
    let welcome = HeadReply::Welcome {
        version: crate::PROTOCOL_VERSION,
        node_id: "n1".into(),
        models: vec![ModelOffer {
            id: "SmolLM2".into(),
            sha256: "ab".repeat(32),
            size: 92_000_000,
        }],
    };
    assert_eq!(round_trip(&welcome), welcome);
}

#[test]
fn percent_counts_whole_percent_done() {
    let at = |done, total| {
        FetchProgress {
            model: "m".into(),
            done,
            total,
        }
        .percent()
    };
    assert_eq!(at(43, 100), 43);
    assert_eq!(at(0, 0), 100);
    assert_eq!(at(u64::MAX, u64::MAX), 100);
    assert_eq!(at(1, 3), 33);
}
