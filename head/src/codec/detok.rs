//! Incremental detokenization: text out of a stream of token bytes without
//! ever splitting a UTF-8 character.

use super::ModelCodec;
use superfluid_proto::TokenId;

/// Turns generated tokens into text as they arrive.
///
/// A token may end in the middle of a multi-byte character (byte-level BPE
/// splits emoji and CJK characters across tokens); those bytes are held back
/// until the character is complete. Bytes that can never form a character
/// become U+FFFD right away, so invalid output never stalls the stream.
#[derive(Debug, Default)]
pub struct Detokenizer {
    pending: Vec<u8>,
}

impl Detokenizer {
    /// A detokenizer with nothing held back.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds generated tokens; returns the text that is now complete.
    pub fn feed(&mut self, codec: &ModelCodec, tokens: &[TokenId]) -> String {
        let mut out = String::new();
        for &token in tokens {
            out.push_str(&self.push_bytes(&codec.piece(token)));
        }
        out
    }

    /// Feeds raw bytes; returns the text that is now complete.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut start = 0;
        loop {
            let rest = self.pending.get(start..).unwrap_or_default();
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    start = self.pending.len();
                    break;
                }
                Err(err) => {
                    let valid = err.valid_up_to();
                    if let Some(text) = rest.get(..valid).and_then(|v| std::str::from_utf8(v).ok())
                    {
                        out.push_str(text);
                    }
                    match err.error_len() {
                        // An incomplete character at the end: wait for more.
                        None => {
                            start += valid;
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start += valid + bad;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start.min(self.pending.len()));
        out
    }

    /// Whether bytes of an incomplete character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Ends the stream: held-back bytes of a character that never completed
    /// are dropped, since they cannot be shown as text.
    pub fn finish(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn split_characters_are_held_until_complete() {
        let text = "aé日本🦀z";
        let mut d = Detokenizer::new();
        let mut out = String::new();
        for b in text.as_bytes() {
            let piece = d.push_bytes(std::slice::from_ref(b));
            assert!(!piece.contains(char::REPLACEMENT_CHARACTER));
            out.push_str(&piece);
        }
        assert_eq!(out, text);
        assert!(!d.has_pending());
    }

    #[test]
    fn invalid_bytes_do_not_stall_the_stream() {
        let mut d = Detokenizer::new();
        assert_eq!(d.push_bytes(&[b'a', 0xff, b'b']), "a\u{fffd}b");
        assert_eq!(d.push_bytes(&[0xe6, 0x97]), "");
        assert!(d.has_pending());
        assert_eq!(d.push_bytes(&[0xa5]), "日");
    }
}
