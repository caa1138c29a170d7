//! Properties of the streaming text stages: the text a client gets does not
//! depend on how the node's tokens were split into messages.
//!
//! Token streams come from random text (accents, CJK, emoji, whose bytes
//! byte-level BPE splits across tokens) tokenized by the real SmolLM2
//! vocabulary; stop strings are drawn from a small alphabet so that they
//! often match, overlap and straddle chunk boundaries.

use super::tests::smollm;
use super::{Detokenizer, StopMatcher};
use proptest::prelude::*;
use proptest::sample::Index;
use superfluid_proto::TokenId;

/// Characters of the random text: ASCII, accents, CJK, emoji (one with a
/// skin-tone modifier), whitespace.
const TEXT_CHARS: &[char] = &[
    'a',
    'b',
    'Z',
    ' ',
    ' ',
    '.',
    '\n',
    'é',
    'ü',
    'ñ',
    'ø',
    '日',
    '本',
    '語',
    '中',
    '한',
    '🦀',
    '🎉',
    '👍',
    '\u{1F3FD}',
];

/// Few characters, so that stop strings match often.
const STOP_CHARS: &[char] = &['a', 'b', 'é', '🦀'];

fn text(chars: &'static [char], max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(chars), 0..max)
        .prop_map(|chars| chars.into_iter().collect())
}

fn stops() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(
        proptest::collection::vec(proptest::sample::select(STOP_CHARS), 1..4)
            .prop_map(|chars| chars.into_iter().collect()),
        1..4,
    )
}

/// Cut points; each picks a place in whatever is being split.
fn cuts() -> impl Strategy<Value = Vec<Index>> {
    proptest::collection::vec(any::<Index>(), 0..12)
}

/// `items` split at `cuts` (empty pieces included, as a node may send).
fn split<'a, T>(items: &'a [T], cuts: &[Index]) -> Vec<&'a [T]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(items.len() + 1)).collect();
    at.sort_unstable();
    let mut pieces = Vec::with_capacity(at.len() + 1);
    let mut start = 0;
    for end in at.into_iter().chain([items.len()]) {
        pieces.push(items.get(start..end).unwrap_or_default());
        start = end;
    }
    pieces
}

/// `text` split at `cuts`, on character boundaries.
fn split_str<'a>(text: &'a str, cuts: &[Index]) -> Vec<&'a str> {
    let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| {
            bounds
                .get(c.index(bounds.len() + 1))
                .copied()
                .unwrap_or(text.len())
        })
        .collect();
    at.sort_unstable();
    let mut pieces = Vec::with_capacity(at.len() + 1);
    let mut start = 0;
    for end in at.into_iter().chain([text.len()]) {
        pieces.push(text.get(start..end).unwrap_or_default());
        start = end;
    }
    pieces
}

/// The tokens' text, fed one chunk at a time.
fn detokenize(chunks: &[&[TokenId]]) -> String {
    let mut detok = Detokenizer::new();
    let mut out = String::new();
    for chunk in chunks {
        out.push_str(&detok.feed(smollm(), chunk));
    }
    detok.finish();
    out
}

/// What the client gets of `chunks` with `stops`, and whether a stop
/// string ended it.
fn stop_at<'a>(stops: &[String], chunks: impl IntoIterator<Item = &'a str>) -> (String, bool) {
    let mut matcher = StopMatcher::new(stops.iter().cloned());
    let mut out = String::new();
    for chunk in chunks {
        let step = matcher.push(chunk);
        out.push_str(&step.text);
        if step.stopped {
            return (out, true);
        }
    }
    out.push_str(&matcher.finish());
    (out, false)
}

/// `text` up to the stop string that is complete first, as it would be if
/// the text came a character at a time (of two complete at the same place,
/// the longer, which began earlier), or all of it if none occurs.
fn expected(text: &str, stops: &[String]) -> (String, bool) {
    let first = stops
        .iter()
        .filter_map(|s| text.find(s.as_str()).map(|at| (at + s.len(), at)))
        .min();
    match first {
        Some((_, at)) => (text.get(..at).unwrap_or_default().to_owned(), true),
        None => (text.to_owned(), false),
    }
}

proptest! {
    #[test]
    fn detokenized_text_is_the_same_for_any_split_of_the_tokens(
        text in text(TEXT_CHARS, 40),
        cuts in cuts(),
    ) {
        let ids = smollm().tokenize_plain(&text);
        let whole = detokenize(&[&ids]);
        prop_assert_eq!(&whole, &text);
        prop_assert_eq!(detokenize(&split(&ids, &cuts)), whole);
    }

    #[test]
    fn any_bytes_detokenize_the_same_for_any_split(
        bytes in proptest::collection::vec(any::<u8>(), 0..64),
        cuts in cuts(),
    ) {
        let run = |chunks: Vec<&[u8]>| {
            let mut detok = Detokenizer::new();
            chunks.into_iter().map(|c| detok.push_bytes(c)).collect::<String>()
        };
        prop_assert_eq!(run(split(&bytes, &cuts)), run(vec![&bytes]));
    }

    #[test]
    fn tokens_through_detokenizer_and_stop_matcher_do_not_depend_on_the_split(
        text in text(TEXT_CHARS, 40),
        stops in stops(),
        cuts in cuts(),
    ) {
        let ids = smollm().tokenize_plain(&text);
        let mut detok = Detokenizer::new();
        let pieces: Vec<String> = split(&ids, &cuts)
            .into_iter()
            .map(|chunk| detok.feed(smollm(), chunk))
            .collect();
        let got = stop_at(&stops, pieces.iter().map(String::as_str));
        prop_assert_eq!(got, expected(&text, &stops));
    }
}

proptest! {
    // Cheap, and the cases that matter (a stop inside a longer one) are
    // rare among random draws, so this one runs many.
    #![proptest_config(ProptestConfig::with_cases(4096))]
    #[test]
    fn stop_matcher_cuts_where_the_first_stop_begins_for_any_split(
        text in text(STOP_CHARS, 24),
        stops in stops(),
        cuts in cuts(),
    ) {
        let (out, stopped) = stop_at(&stops, split_str(&text, &cuts));
        for stop in &stops {
            prop_assert!(!out.contains(stop.as_str()), "{:?} contains {:?}", out, stop);
        }
        prop_assert_eq!((out, stopped), expected(&text, &stops));
    }
}

#[test]
fn a_stop_inside_a_longer_one_wins_however_the_text_is_split() {
    let stops = ["a b".to_string(), " ".to_string()];
    assert_eq!(stop_at(&stops, ["a b"]), ("a".to_owned(), true));
    assert_eq!(stop_at(&stops, ["a ", "b"]), ("a".to_owned(), true));
}
