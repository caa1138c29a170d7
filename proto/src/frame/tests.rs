use super::*;
use crate::messages::*;
use proptest::prelude::*;

fn request(prompt: Vec<u32>, max_tokens: u32, temperature: f32, seed: u32) -> GenerateRequest {
    let logprobs = (seed % 3 == 0).then_some((seed % 21) as u8);
    GenerateRequest {
        model: "m".into(),
        prompt,
        sampling: Sampling {
            temperature,
            seed,
            ..Sampling::default()
        },
        max_tokens,
        slot: None,
        constraint: None,
        logprobs,
    }
}

proptest! {
    #[test]
    fn generate_request_round_trips(prompt in proptest::collection::vec(any::<u32>(), 0..500),
                                    max_tokens in any::<u32>(), t in 0.0f32..2.0, seed in any::<u32>()) {
        let msg = request(prompt, max_tokens, t, seed);
        let bytes = encode(&msg).unwrap();
        let mut reader = FrameReader::default();
        reader.push(&bytes);
        prop_assert_eq!(reader.next_frame::<GenerateRequest>().unwrap(), Some(msg));
    }

    #[test]
    fn events_round_trip_in_pieces(ids in proptest::collection::vec(any::<u32>(), 0..50), split in 0usize..64,
                                   logprob in -9999.0f32..=0.0, top in 0usize..=20) {
        let scored = TokenLogprob {
            token: ids.first().copied().unwrap_or(0),
            text: " h\u{e9}".into(),
            bytes: vec![0x20, 0x68, 0xc3],
            logprob,
            top: (0..top)
                .map(|i| TopLogprob { token: i as u32, text: format!("t{i}"), bytes: vec![i as u8], logprob: logprob - i as f32 })
                .collect(),
        };
        let events = vec![
            GenerateEvent::Logprobs(vec![scored]),
            GenerateEvent::Tokens(ids),
            GenerateEvent::Finished(Outcome { finish: FinishReason::Stop, prompt_tokens: 3, cached_tokens: 1, generated_tokens: 9 }),
        ];
        let mut bytes = Vec::new();
        for e in &events { bytes.extend(encode(e).unwrap()); }
        let (a, b) = bytes.split_at(split.min(bytes.len()));
        let mut reader = FrameReader::default();
        reader.push(a);
        let mut got = Vec::new();
        while let Some(e) = reader.next_frame::<GenerateEvent>().unwrap() { got.push(e); }
        reader.push(b);
        while let Some(e) = reader.next_frame::<GenerateEvent>().unwrap() { got.push(e); }
        prop_assert_eq!(got, events);
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode::<GenerateRequest>(&bytes);
        let _ = decode::<NodeHello>(&bytes);
        let _ = decode::<ControlMsg>(&bytes);
        let mut reader = FrameReader::default();
        reader.push(&bytes);
        let _ = reader.next_frame::<GenerateEvent>();
    }
}

#[test]
fn oversized_frame_is_refused_before_buffering() {
    let mut reader = FrameReader::default();
    reader.push(&u32::MAX.to_be_bytes());
    let err = reader.next_frame::<GenerateEvent>().unwrap_err();
    assert!(err.to_string().contains("over the"), "{err}");
}

#[test]
fn trailing_bytes_are_an_error() {
    let mut body = encode(&ControlMsg::Heartbeat).unwrap()[LEN_PREFIX..].to_vec();
    body.push(7);
    assert!(decode::<ControlMsg>(&body).is_err());
}

#[test]
fn wrong_type_is_an_error_not_a_panic() {
    let bytes = encode(&GenerateEvent::Failed {
        kind: FailureKind::Engine,
        message: "x".into(),
    })
    .unwrap();
    assert!(decode::<NodeHello>(&bytes[LEN_PREFIX..]).is_err());
}

/// The hello of protocol version 5, before it carried the hardware.
#[derive(serde::Serialize)]
struct HelloV5 {
    version: u32,
    name: String,
    models: Vec<crate::ModelDescription>,
    join_token: Option<String>,
}

#[test]
fn an_older_hello_does_not_decode_but_still_tells_its_version() {
    let old = HelloV5 {
        version: 5,
        name: "old-node".into(),
        models: Vec::new(),
        join_token: None,
    };
    let bytes = encode(&old).unwrap();
    let body = &bytes[LEN_PREFIX..];
    assert!(decode::<NodeHello>(body).is_err());
    assert_eq!(crate::frame::hello_version(body), Some(5));
    assert_eq!(crate::frame::hello_version(&[]), None);
}

#[test]
fn every_failure_kind_round_trips_with_its_message() {
    let kinds = [
        FailureKind::PromptTooLong,
        FailureKind::UnknownModel,
        FailureKind::EmptyPrompt,
        FailureKind::InvalidToken,
        FailureKind::Engine,
        FailureKind::Stopped,
    ];
    for kind in kinds {
        let event = GenerateEvent::Failed {
            kind,
            message: format!("{kind:?} happened"),
        };
        let bytes = encode(&event).unwrap();
        assert_eq!(
            decode::<GenerateEvent>(&bytes[LEN_PREFIX..]).unwrap(),
            event
        );
    }
}
