//! Link F frames from a hostile peer (and engine host frames, which are
//! Link F's framing): a byte stream cut into frames by
//! `FrameReader` and decoded as each message type a peer may send or
//! answer with. Nothing may panic, and every message that decodes must
//! encode again to bytes that decode to the same encoding (the first byte
//! picks the type and where the stream is split in two reads).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::{de::DeserializeOwned, Serialize};
use superfluid_proto::host::{FromHost, ToHost};
use superfluid_proto::{
    decode, encode, ControlMsg, EmbedReply, FetchReply, FrameReader, GenerateEvent, HeadReply,
    HeadStream, JoinClaims, NodeHello, NodeStream,
};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, stream)) = data.split_first() else {
        return;
    };
    match selector % 11 {
        0 => frames::<NodeHello>(selector, stream),
        1 => frames::<HeadReply>(selector, stream),
        2 => frames::<ControlMsg>(selector, stream),
        3 => frames::<HeadStream>(selector, stream),
        4 => frames::<GenerateEvent>(selector, stream),
        5 => frames::<EmbedReply>(selector, stream),
        // A model transfer's request and reply, on a QUIC stream or the
        // transfer port alike.
        6 => frames::<NodeStream>(selector, stream),
        7 => frames::<FetchReply>(selector, stream),
        // An engine host's socket, from either end.
        8 => frames::<FromHost>(selector, stream),
        9 => frames::<ToHost>(selector, stream),
        _ => {
            if let Ok(claims) = JoinClaims::from_bytes(stream) {
                let bytes = claims.to_bytes().expect("decoded claims encode");
                let again = JoinClaims::from_bytes(&bytes).expect("encoded claims decode");
                assert_eq!(again.to_bytes().expect("claims encode"), bytes);
            }
        }
    }
});

/// Reads every frame of `stream`, arriving in two pieces, as `T`.
fn frames<T: Serialize + DeserializeOwned>(selector: u8, stream: &[u8]) {
    let cut = usize::from(selector / 9).min(stream.len());
    let (first, second) = stream.split_at(cut);
    let mut reader = FrameReader::default();
    reader.push(first);
    let mut pushed_second = false;
    loop {
        match reader.next_frame::<T>() {
            Ok(Some(msg)) => stable_encoding(&msg),
            Ok(None) if !pushed_second => {
                reader.push(second);
                pushed_second = true;
            }
            Ok(None) | Err(_) => break,
        }
    }
}

/// A decoded message encodes to a frame that decodes to the same bytes.
/// (Compared as bytes: a float may be NaN, which is not equal to itself.)
fn stable_encoding<T: Serialize + DeserializeOwned>(msg: &T) {
    let frame = encode(msg).expect("a decoded message encodes");
    let body = &frame[superfluid_proto::LEN_PREFIX..];
    let again: T = decode(body).expect("an encoded message decodes");
    let frame_again = encode(&again).expect("a decoded message encodes");
    assert_eq!(frame, frame_again, "re-encoding changed the message");
}
