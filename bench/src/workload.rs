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

/// Long prompt number `n` (about 870 tokens) for measuring prefill; each
/// number gives a different prompt.
pub fn long_prompt(n: usize) -> String {
    let mut text = format!("Document {n}. ");
    for i in 0..40 {
        text.push_str(&format!(
            "Section {i}: the quick brown fox jumps over the lazy dog near river number {}. ",
            i * 7 + n
        ));
    }
    text.push_str("\nSummary:");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_long_prompt_of_a_run_is_different_from_the_first_line_on() {
        // 6 rounds of 6 long prompts, as `--prefill 6` sends them.
        let prompts: Vec<String> = (500..536).map(long_prompt).collect();
        let firsts: std::collections::HashSet<&str> = prompts
            .iter()
            .map(|p| p.split(". ").next().unwrap_or(""))
            .collect();
        assert_eq!(firsts.len(), prompts.len());
        assert!(prompts.iter().all(|p| p.len() > 3000));
    }
}
