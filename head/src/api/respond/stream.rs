//! The server-sent-event renderer: the `n` choices of one request stream
//! side by side, each chunk naming its choice's `index`, and end together
//! with one usage chunk (if asked) and `[DONE]`.

use super::{summed, with_node, Envelope, Flavor, Piece};
use crate::api::generate::answer::{Answer, Output};
use crate::api::generate::{Generation, Usage};
use crate::api::ApiError;
use axum::response::sse::{Event, Sse};
use axum::response::Response;
use futures::stream::{self, BoxStream, SelectAll, Stream, StreamExt};
use std::collections::VecDeque;
use std::convert::Infallible;
use superfluid_proto::TokenLogprob;

/// Answers with server-sent events as the node generates. If the client
/// goes away the stream, and with it the generation, is dropped.
pub async fn stream(
    generation: Generation,
    envelope: Envelope,
    include_usage: bool,
) -> Result<Response, ApiError> {
    stream_all(vec![generation], envelope, include_usage).await
}

/// [`stream`] for the `n` choices of one request.
///
/// The response starts with every choice's first text (or its end), so
/// that its `x-superfluid-node` header names the node that answers even if
/// the first one was lost before its first token, and a generation that
/// fails before any text gets an error status instead of a stream.
pub async fn stream_all(
    generations: Vec<Generation>,
    envelope: Envelope,
    include_usage: bool,
) -> Result<Response, ApiError> {
    let mut answers: Vec<Answer> = generations
        .into_iter()
        .map(|generation| Answer::new(generation, None))
        .collect();
    let firsts = futures::future::try_join_all(answers.iter_mut().map(Answer::next)).await?;
    let node = answers
        .first()
        .map(|a| a.generation().node.clone())
        .unwrap_or_default();
    let n = answers.len();
    let mut state = StreamState {
        envelope,
        include_usage,
        pending: VecDeque::new(),
        offsets: vec![0; n],
        scores: vec![Vec::new(); n],
        usages: vec![Usage::default(); n],
        running: n,
        done: n == 0,
    };
    let echo = state.envelope.echo.take();
    for index in 0..n {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        if state.envelope.flavor == Flavor::Chat {
            let role = Piece {
                role: true,
                text: Some(String::new()),
                ..Piece::default()
            };
            state.send(index, role);
        }
        if let Some(echo) = &echo {
            let prompt = Piece {
                text: Some(echo.clone()),
                ..Piece::default()
            };
            // The prompt is not scored: its offsets start after it.
            state.send(index, prompt);
            state.offsets[index as usize] = echo.chars().count();
        }
    }
    let choices = stream::select_all(
        (0u32..)
            .zip(answers.into_iter().zip(firsts))
            .map(|(index, (answer, first))| steps(index, answer, first)),
    );
    let sse = Sse::new(events(state, choices)).keep_alive(crate::api::sse::keep_alive());
    Ok(with_node(&node, sse))
}

/// One event of one choice.
struct ChoiceStep {
    index: u32,
    output: Result<Output, ApiError>,
    usage: Usage,
}

/// A choice's events, starting with `first`, up to its end or its error.
/// The answer is dropped once it has ended.
fn steps(index: u32, answer: Answer, first: Output) -> BoxStream<'static, ChoiceStep> {
    stream::unfold(Some((answer, Some(first))), move |state| async move {
        let (mut answer, mut first) = state?;
        let output = match first.take() {
            Some(output) => Ok(output),
            None => answer.next().await,
        };
        let more = matches!(&output, Ok(o) if !matches!(o, Output::Done(_)));
        let item = ChoiceStep {
            index,
            output,
            usage: answer.generation().usage(),
        };
        Some((item, more.then_some((answer, None))))
    })
    .boxed()
}

struct StreamState {
    envelope: Envelope,
    include_usage: bool,
    pending: VecDeque<Event>,
    /// Each choice's text so far, in characters (for legacy offsets).
    offsets: Vec<usize>,
    /// Each choice's log-probabilities for its next chunk.
    scores: Vec<Vec<TokenLogprob>>,
    /// Each choice's final token counts, as they end.
    usages: Vec<Usage>,
    /// Choices not yet ended.
    running: usize,
    done: bool,
}

impl StreamState {
    fn send(&mut self, index: u32, piece: Piece) {
        let offset = self.offsets.get_mut(index as usize);
        let mut scratch = 0;
        let event = self
            .envelope
            .chunk(index, piece, offset.unwrap_or(&mut scratch));
        self.pending.push_back(event);
    }

    /// Queues the events for one step of a choice: the SSE renderer, where
    /// every kind of output is rendered or refused.
    fn push(&mut self, item: ChoiceStep) {
        let ChoiceStep {
            index,
            output,
            usage,
        } = item;
        match output {
            Ok(Output::Logprobs(entries)) => {
                if let Some(scores) = self.scores.get_mut(index as usize) {
                    scores.extend(entries);
                }
            }
            Ok(Output::Text(text)) => {
                let piece = Piece {
                    text: Some(text),
                    logprobs: self.take_scores(index),
                    ..Piece::default()
                };
                self.send(index, piece);
            }
            // No tools are offered to a request answered here (they go to
            // the tools module's answer), so no call comes.
            Ok(
                Output::CallStart { .. } | Output::CallArguments { .. } | Output::CallEnd { .. },
            ) => {}
            Ok(Output::Done(finish)) => {
                let last = Piece {
                    finish: Some(finish),
                    logprobs: self.take_scores(index),
                    ..Piece::default()
                };
                self.send(index, last);
                if let Some(u) = self.usages.get_mut(index as usize) {
                    *u = usage;
                }
                self.running = self.running.saturating_sub(1);
                if self.running == 0 {
                    if self.include_usage {
                        let usage = self.envelope.usage_chunk(summed(self.usages.clone()));
                        self.pending.push_back(usage);
                    }
                    self.pending.push_back(Event::default().data("[DONE]"));
                    self.done = true;
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, choice = index, "generation failed mid-stream");
                self.pending
                    .push_back(Event::default().data(err.body().to_string()));
                self.pending.push_back(Event::default().data("[DONE]"));
                self.done = true;
            }
        }
    }

    /// Choice `index`'s log-probabilities gathered for its next chunk.
    fn take_scores(&mut self, index: u32) -> Vec<TokenLogprob> {
        self.scores
            .get_mut(index as usize)
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

fn events(
    state: StreamState,
    choices: SelectAll<BoxStream<'static, ChoiceStep>>,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    stream::unfold((state, choices), |(mut st, mut choices)| async move {
        loop {
            if let Some(event) = st.pending.pop_front() {
                return Some((Ok(event), (st, choices)));
            }
            if st.done {
                return None;
            }
            match choices.next().await {
                Some(item) => st.push(item),
                // Every choice ends with a step that ends it, so this is
                // only reached if one did not: end the stream regardless.
                None => {
                    st.pending.push_back(Event::default().data("[DONE]"));
                    st.done = true;
                }
            }
        }
    })
}
