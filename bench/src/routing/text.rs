//! Plain English text for the real fleet's chats, generated from a seed.

use super::rng::Rng;

const ROLES: [&str; 3] = [
    "You are the help desk assistant of a small public library.",
    "You are the support assistant of a company that sells garden tools.",
    "You are a travel assistant for a regional railway.",
];
const SUBJECTS: [&str; 10] = [
    "every answer",
    "a reply to a member",
    "the first sentence",
    "each recommendation",
    "an apology",
    "a short summary",
    "the closing line",
    "any list of steps",
    "a question back to the user",
    "a price or a date",
];
const RULES: [&str; 12] = [
    "should be polite and plain, with no jargon",
    "must name the policy section it relies on",
    "ought to stay under five sentences unless asked for detail",
    "should repeat the key fact the user gave",
    "must never promise what the staff cannot deliver",
    "should offer one next step the user can take today",
    "must be checked against the opening hours and the calendar",
    "should mention where to find the printed guide",
    "ought to thank the user for their patience",
    "must say clearly when something is not known",
    "should avoid guessing about personal details",
    "ought to point to a person when the question is about money",
];
const PLACES: [&str; 8] = [
    "the north branch",
    "the main office",
    "the station at the harbour",
    "the online catalogue",
    "the service counter",
    "the east warehouse",
    "the ticket hall",
    "the reading room",
];
const TOPICS: [&str; 8] = [
    "opening hours on public holidays",
    "how to return an item that arrived damaged",
    "the rules for bringing a bicycle",
    "renewing a membership card",
    "a refund for a cancelled trip",
    "the best way to store the tools in winter",
    "booking a quiet room for a group",
    "the cheapest ticket for a family of four",
];

/// A system prompt of at least `min_words` words: a role and house rules.
pub fn system_prompt(rng: &mut Rng, role: usize, min_words: usize) -> String {
    let mut text = String::from(ROLES[role % ROLES.len()]);
    text.push_str(" Follow these house rules.");
    let mut rule = 1;
    while text.split_whitespace().count() < min_words {
        let subject = rng.pick(&SUBJECTS);
        let verb = rng.pick(&RULES);
        let place = rng.pick(&PLACES);
        text.push_str(&format!(
            " Rule {rule}: {subject} {verb}, in particular for questions about {place}."
        ));
        rule += 1;
    }
    text
}

/// The user's message of conversation `conversation`, turn `turn`. The
/// first carries notes of at least `notes_words` words that only this
/// conversation has, as a user pastes a document to ask about it.
pub fn user_message(rng: &mut Rng, conversation: usize, turn: usize, notes_words: usize) -> String {
    let topic = rng.pick(&TOPICS);
    let place = rng.pick(&PLACES);
    if turn == 0 {
        let mut text = format!("Hello, I am visitor {conversation}. My notes so far:");
        let start = text.split_whitespace().count();
        let mut visit = 1;
        while text.split_whitespace().count() < start + notes_words {
            let (topic, place) = (rng.pick(&TOPICS), rng.pick(&PLACES));
            text.push_str(&format!(
                " On visit {visit} I asked at {place} about {topic}, and was told that {} {}.",
                rng.pick(&SUBJECTS),
                rng.pick(&RULES)
            ));
            visit += 1;
        }
        text.push_str(&format!(
            " Now I have a question about {topic} at {place}. What should I do?"
        ));
        text
    } else {
        format!("Thank you. One more thing, question {turn}: what about {topic} at {place}?")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_deterministic_and_long_enough() {
        let a = system_prompt(&mut Rng::derive(0, 4), 0, 250);
        let b = system_prompt(&mut Rng::derive(0, 4), 0, 250);
        assert_eq!(a, b);
        assert!(a.split_whitespace().count() >= 250);
        assert_ne!(a, system_prompt(&mut Rng::derive(0, 4), 1, 250));
        let first = user_message(&mut Rng::derive(0, 1), 3, 0, 100);
        assert!(first.contains("visitor 3"));
        assert!(first.split_whitespace().count() >= 100);
        assert_ne!(first, user_message(&mut Rng::derive(0, 2), 3, 0, 100));
        assert!(
            user_message(&mut Rng::derive(0, 1), 3, 1, 100)
                .split_whitespace()
                .count()
                < 30
        );
    }
}
