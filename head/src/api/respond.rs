//! Answers running [`Generation`]s (the `n` choices of one request) as one
//! JSON object or as server-sent events ([`stream`]), in the shape of
//! either chat or text completions.

use super::generate::answer::Answer;
use super::generate::{Generation, Usage};
use super::output::FinishReason;
use super::wire::chat::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletion, ChatCompletionChunk, Delta, Role,
};
use super::wire::completion::{TextChoice, TextChunkChoice, TextCompletion, TextCompletionChunk};
use super::wire::logprobs::{ChatLogprobs, TextLogprobs};
use super::wire::{self, Object};
use super::ApiError;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};
use superfluid_proto::TokenLogprob;

mod stream;

pub use stream::{stream, stream_all};

pub use super::node_header::{with_node, NODE_HEADER};

/// Which OpenAI endpoint is answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

/// What every object of one response shares.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// `chatcmpl-...` or `cmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model id.
    pub model: String,
    /// Chat or text.
    pub flavor: Flavor,
    /// The prompt, when the client asked for it before the completion
    /// (`echo` on `/v1/completions`).
    pub echo: Option<String>,
    /// Whether the client asked for log probabilities: every whole choice
    /// then carries them, and every chunk that has tokens.
    pub logprobs: bool,
}

/// One choice of a whole answer, as generated.
struct Answered {
    text: String,
    finish: FinishReason,
    logprobs: Vec<TokenLogprob>,
}

impl Envelope {
    /// A new response id for this flavor.
    pub fn new(flavor: Flavor, model: &str, request_id: &str) -> Self {
        let prefix = match flavor {
            Flavor::Chat => "chatcmpl",
            Flavor::Text => "cmpl",
        };
        Envelope {
            id: format!("{prefix}-{request_id}"),
            created: unix_now(),
            model: model.to_owned(),
            flavor,
            echo: None,
            logprobs: false,
        }
    }

    /// The whole, non-streamed answer with its choices, by index.
    fn complete(&self, answers: Vec<Answered>, usage: Usage) -> Response {
        let usage = usage.into();
        match self.flavor {
            Flavor::Chat => Json(ChatCompletion {
                id: self.id.clone(),
                object: Object::ChatCompletion,
                created: self.created,
                model: self.model.clone(),
                choices: (0..)
                    .zip(answers)
                    .map(|(index, a)| ChatChoice {
                        index,
                        message: AssistantMessage {
                            role: Role::Assistant,
                            content: Some(a.text),
                            tool_calls: None,
                        },
                        logprobs: self.logprobs.then(|| ChatLogprobs::new(&a.logprobs)),
                        finish_reason: a.finish,
                    })
                    .collect(),
                usage,
            })
            .into_response(),
            Flavor::Text => Json(TextCompletion {
                id: self.id.clone(),
                object: Object::TextCompletion,
                created: self.created,
                model: self.model.clone(),
                choices: (0..)
                    .zip(answers)
                    .map(|(index, a)| {
                        let logprobs = self
                            .logprobs
                            .then(|| TextLogprobs::new(&a.logprobs, &mut 0));
                        let mut text = a.text;
                        if let Some(echo) = &self.echo {
                            text.insert_str(0, echo);
                        }
                        TextChoice {
                            index,
                            text,
                            logprobs,
                            finish_reason: a.finish,
                        }
                    })
                    .collect(),
                usage,
            })
            .into_response(),
        }
    }

    /// A streamed chunk of choice `index` with text (and the assistant
    /// role on the first chat chunk) or with a finish reason, and the
    /// log-probabilities of the tokens it covers. `offset` is where the
    /// tokens' text starts in the choice's text (legacy log
    /// probabilities count it); it moves past them.
    fn chunk(&self, index: u32, piece: Piece, offset: &mut usize) -> Event {
        let scored = self.logprobs && !piece.logprobs.is_empty();
        match self.flavor {
            Flavor::Chat => data(&self.chat_chunk(
                vec![ChatChunkChoice {
                    index,
                    delta: Delta {
                        role: piece.role.then_some(Role::Assistant),
                        content: piece.text,
                        tool_calls: None,
                    },
                    logprobs: scored.then(|| ChatLogprobs::new(&piece.logprobs)),
                    finish_reason: piece.finish,
                }],
                None,
            )),
            Flavor::Text => data(&self.text_chunk(
                vec![TextChunkChoice {
                    index,
                    text: piece.text.unwrap_or_default(),
                    logprobs: scored.then(|| TextLogprobs::new(&piece.logprobs, offset)),
                    finish_reason: piece.finish,
                }],
                None,
            )),
        }
    }

    /// The chunk after the finish reasons that carries only the usage.
    fn usage_chunk(&self, usage: Usage) -> Event {
        let usage = Some(usage.into());
        match self.flavor {
            Flavor::Chat => data(&self.chat_chunk(Vec::new(), usage)),
            Flavor::Text => data(&self.text_chunk(Vec::new(), usage)),
        }
    }

    fn chat_chunk(
        &self,
        choices: Vec<ChatChunkChoice>,
        usage: Option<wire::Usage>,
    ) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: Object::ChatCompletionChunk,
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
        }
    }

    fn text_chunk(
        &self,
        choices: Vec<TextChunkChoice>,
        usage: Option<wire::Usage>,
    ) -> TextCompletionChunk {
        TextCompletionChunk {
            id: self.id.clone(),
            object: Object::TextCompletion,
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
        }
    }
}

/// What one chunk of one choice carries.
#[derive(Default)]
struct Piece {
    /// The assistant role (the first chat chunk).
    role: bool,
    text: Option<String>,
    finish: Option<FinishReason>,
    logprobs: Vec<TokenLogprob>,
}

/// The usage of `n` choices of one prompt: the prompt counted once (its
/// cached part as the first choice found it), the completions summed.
pub fn summed(usages: impl IntoIterator<Item = Usage>) -> Usage {
    let mut usages = usages.into_iter();
    let first = usages.next().unwrap_or_default();
    usages.fold(first, |sum, u| Usage {
        completion_tokens: sum.completion_tokens.saturating_add(u.completion_tokens),
        ..sum
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Runs the generation to its end and answers with one JSON object.
pub async fn complete(generation: Generation, envelope: Envelope) -> Result<Response, ApiError> {
    complete_all(vec![generation], envelope).await
}

/// Runs the `n` generations of one request side by side to their ends
/// and answers with one JSON object holding a choice for each.
pub async fn complete_all(
    generations: Vec<Generation>,
    envelope: Envelope,
) -> Result<Response, ApiError> {
    let mut answers: Vec<Answer> = generations
        .into_iter()
        .map(|generation| Answer::new(generation, None))
        .collect();
    let wholes = futures::future::try_join_all(answers.iter_mut().map(Answer::whole)).await?;
    let usage = summed(answers.iter().map(|a| a.generation().usage()));
    let choices = wholes
        .into_iter()
        .map(|whole| Answered {
            text: whole.text,
            finish: whole.finish,
            logprobs: whole.logprobs,
        })
        .collect();
    let body = envelope.complete(choices, usage);
    let node = answers.first().map_or("", |a| a.generation().node.as_str());
    Ok(with_node(node, body))
}

/// `value` as one `data:` event.
pub(super) fn data(value: &impl Serialize) -> Event {
    match serde_json::to_string(value) {
        Ok(json) => Event::default().data(json),
        // The wire types have string keys and no custom serializers, so
        // this does not happen; if it did, the client gets an error event.
        Err(e) => {
            let err = ApiError::Generation {
                message: format!(
                    "the head could not encode a stream chunk ({e}); retry the request"
                ),
            };
            Event::default().data(err.body().to_string())
        }
    }
}
