//! The simulated fleet's workloads: multi-turn chats sharing system prompts,
//! and a control with no reuse at all. Everything is drawn from a seed, so
//! every policy gets the same conversations, arrivals and think times.

use serde::Serialize;

use super::rng::{Rng, Zipf};

/// The shape of the chat workload.
#[derive(Debug, Clone, Serialize)]
pub struct Shape {
    /// Distinct system prompts.
    pub system_prompts: usize,
    /// Their lengths are uniform in this range (tokens).
    pub system_tokens: (u32, u32),
    /// Zipf exponent of system-prompt popularity.
    pub zipf_exponent: f64,
    /// Turns per conversation, uniform in this range.
    pub turns: (u32, u32),
    /// Tokens of each new user message, uniform in this range.
    pub user_tokens: (u32, u32),
    /// Tokens of each answer (`max_tokens`), uniform in this range.
    pub answer_tokens: (u32, u32),
    /// Mean think time between an answer and the next turn (exponential).
    pub think_mean_s: f64,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            system_prompts: 8,
            system_tokens: (1024, 4096),
            zipf_exponent: 1.0,
            turns: (3, 6),
            user_tokens: (20, 200),
            answer_tokens: (32, 160),
            think_mean_s: 0.5,
        }
    }
}

impl Shape {
    /// Mean turns per conversation.
    pub fn mean_turns(&self) -> f64 {
        f64::from(self.turns.0 + self.turns.1) / 2.0
    }
}

/// One turn: the user's new message, the answer's length, and the think
/// time before it is sent (0 for the first turn).
#[derive(Debug, Clone)]
pub struct Turn {
    pub user: Vec<u32>,
    pub answer_tokens: u32,
    pub think_s: f64,
}

/// One conversation: when it starts, its system prompt, its turns.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub arrival_s: f64,
    pub system: usize,
    pub turns: Vec<Turn>,
}

/// The chat workload at one arrival rate.
#[derive(Debug, Clone)]
pub struct Chats {
    pub systems: Vec<Vec<u32>>,
    pub conversations: Vec<Conversation>,
}

/// A single request of the no-reuse control.
#[derive(Debug, Clone)]
pub struct Single {
    pub arrival_s: f64,
    pub prompt: Vec<u32>,
    pub answer_tokens: u32,
}

/// The system prompts of `seed`: the same at every rate.
pub fn system_prompts(shape: &Shape, seed: u64) -> Vec<Vec<u32>> {
    let mut rng = Rng::derive(seed, 1);
    (0..shape.system_prompts)
        .map(|_| {
            let n = rng.range(shape.system_tokens.0, shape.system_tokens.1);
            rng.tokens(n as usize)
        })
        .collect()
}

/// Conversations arriving as a Poisson process of `per_s` a second for
/// `window_s` seconds; `stream` tells rates apart.
pub fn chats(shape: &Shape, seed: u64, stream: u64, per_s: f64, window_s: f64) -> Chats {
    let systems = system_prompts(shape, seed);
    let zipf = Zipf::new(systems.len(), shape.zipf_exponent);
    let mut rng = Rng::derive(seed, 100 + stream);
    let mut conversations = Vec::new();
    let mut t = rng.exp(1.0 / per_s);
    while t < window_s {
        let system = zipf.sample(&mut rng);
        let n = rng.range(shape.turns.0, shape.turns.1);
        let turns = (0..n)
            .map(|k| Turn {
                user: {
                    let len = rng.range(shape.user_tokens.0, shape.user_tokens.1);
                    rng.tokens(len as usize)
                },
                answer_tokens: rng.range(shape.answer_tokens.0, shape.answer_tokens.1),
                think_s: if k == 0 {
                    0.0
                } else {
                    rng.exp(shape.think_mean_s)
                },
            })
            .collect();
        conversations.push(Conversation {
            arrival_s: t,
            system,
            turns,
        });
        t += rng.exp(1.0 / per_s);
    }
    Chats {
        systems,
        conversations,
    }
}

/// The prompt lengths and answer lengths the chat workload's requests
/// have, in order: a conversation's turn `k` carries its system prompt,
/// `k` user messages and `k - 1` answers.
pub fn chat_lengths(chats: &Chats) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    for c in &chats.conversations {
        let mut len = chats.systems[c.system].len();
        for (k, turn) in c.turns.iter().enumerate() {
            if k > 0 {
                len += c.turns[k - 1].answer_tokens as usize;
            }
            len += turn.user.len();
            out.push((len, turn.answer_tokens));
        }
    }
    out
}

/// The no-reuse control: requests arriving as a Poisson process of `per_s`
/// a second for `window_s` seconds, each with fresh random tokens, with the
/// lengths of the chat workload's requests (taken in turn from `lengths`).
pub fn unique(
    lengths: &[(usize, u32)],
    seed: u64,
    stream: u64,
    per_s: f64,
    window_s: f64,
) -> Vec<Single> {
    let mut rng = Rng::derive(seed, 200 + stream);
    let mut out = Vec::new();
    let mut t = rng.exp(1.0 / per_s);
    let mut i = 0;
    while t < window_s && !lengths.is_empty() {
        let (len, answer_tokens) = lengths[i % lengths.len()];
        out.push(Single {
            arrival_s: t,
            prompt: rng.tokens(len),
            answer_tokens,
        });
        i += 1;
        t += rng.exp(1.0 / per_s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_chats() {
        let shape = Shape::default();
        let a = chats(&shape, 9, 0, 10.0, 3.0);
        let b = chats(&shape, 9, 0, 10.0, 3.0);
        assert_eq!(a.conversations.len(), b.conversations.len());
        for (x, y) in a.conversations.iter().zip(&b.conversations) {
            assert_eq!(x.arrival_s, y.arrival_s);
            assert_eq!(x.system, y.system);
            assert_eq!(x.turns.len(), y.turns.len());
            assert_eq!(x.turns[0].user, y.turns[0].user);
        }
        assert!(!a.conversations.is_empty());
    }

    #[test]
    fn lengths_grow_within_a_conversation() {
        let shape = Shape::default();
        let c = chats(&shape, 1, 0, 20.0, 1.0);
        let lengths = chat_lengths(&c);
        let first = &c.conversations[0];
        let sys = c.systems[first.system].len();
        assert_eq!(lengths[0].0, sys + first.turns[0].user.len());
        assert!(lengths[1].0 > lengths[0].0);
        let u = unique(&lengths, 1, 0, 50.0, 1.0);
        assert_eq!(u[0].prompt.len(), lengths[0].0);
        assert_ne!(u[0].prompt[..32], c.systems[first.system][..32]);
    }
}
