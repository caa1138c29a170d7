//! The requests every contender gets: the same text, fresh in every round so
//! no contender answers from a cache the others lack.

const TOPICS: [&str; 8] = [
    "a lighthouse keeper",
    "a lost robot",
    "a dragon who bakes bread",
    "two rival chess players",
    "a city under the sea",
    "a time-travelling cat",
    "the last tree on Mars",
    "a haunted violin",
];

/// The prompt of stream `stream` in round `round`.
pub fn story_prompt(round: u32, stream: usize) -> String {
    let topic = TOPICS[stream % TOPICS.len()];
    format!("Story {round}-{stream}. Once upon a time there was {topic}. Write a long story about it.\n\n")
}

/// A long prompt (about 500 tokens) for measuring prefill, fresh per round.
pub fn long_prompt(round: u32) -> String {
    let mut text = format!("Document {round}. ");
    for i in 0..40 {
        text.push_str(&format!(
            "Section {i}: the quick brown fox jumps over the lazy dog near river number {}. ",
            i * 7 + round as usize
        ));
    }
    text.push_str("\nSummary:");
    text
}
