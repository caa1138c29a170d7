//! The one typed output stream a generation gives every dialect: text,
//! log-probabilities, tool calls (read out of the text once, here), and
//! the end. Each
//! dialect's encoder maps these events onto its wire (SSE, NDJSON, whole
//! JSON); a new kind of output is a new [`Output`] variant, which every
//! encoder's `match` then renders or refuses by name.
//!
//! With tools offered, text that may begin a call is held back (by the
//! one [`CallSplitter`]); the calls the answer ends with come as
//! [`Output::CallStart`], their arguments in [`Output::CallArguments`]
//! pieces and [`Output::CallEnd`], before [`Output::Done`] with
//! [`FinishReason::ToolCalls`]. Text that does not read as calls is sent
//! as text after all.

use std::collections::VecDeque;

use superfluid_proto::TokenLogprob;

use super::Generation;
use crate::api::output::{FinishReason, Step};
use crate::api::tools::parse::ParsedCall;
use crate::api::tools::split::{pieces, CallSplitter, Ending, ARGUMENT_PIECE};
use crate::api::tools::ToolSet;
use crate::api::ApiError;

/// One event of an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Text for the client (never empty).
    Text(String),
    /// The log-probabilities of the tokens of the next [`Output::Text`]
    /// (or, before [`Output::Done`], of tokens whose text a stop string
    /// held back); only when the request asked for them.
    Logprobs(Vec<TokenLogprob>),
    /// The `index`th call (from 0) starts: the function's name.
    CallStart {
        /// Which call of the answer.
        index: u32,
        /// The function called, one of the offered ones.
        name: String,
    },
    /// A piece of the `index`th call's arguments, JSON text; the pieces
    /// joined are one JSON object.
    CallArguments {
        /// Which call.
        index: u32,
        /// The next piece.
        piece: String,
    },
    /// The `index`th call is whole.
    CallEnd {
        /// Which call.
        index: u32,
    },
    /// The answer ended, for this reason ([`FinishReason::ToolCalls`] when
    /// it ended in calls). Asked again, it is repeated.
    Done(FinishReason),
}

/// A generation read as [`Output`] events.
pub struct Answer {
    generation: Generation,
    tools: Option<(ToolSet, CallSplitter)>,
    queued: VecDeque<Output>,
    finish: Option<FinishReason>,
}

impl Answer {
    /// The answer of `generation`, whose request offered `tools` (when
    /// any are offered, calls are read out of its text).
    pub fn new(generation: Generation, tools: Option<ToolSet>) -> Answer {
        Answer {
            generation,
            tools: tools
                .filter(ToolSet::offered)
                .map(|set| (set, CallSplitter::default())),
            queued: VecDeque::new(),
            finish: None,
        }
    }

    /// The generation: its usage, node and stop sequence.
    pub fn generation(&self) -> &Generation {
        &self.generation
    }

    /// The next event. After [`Output::Done`] it keeps answering it; an
    /// error ends the answer.
    pub async fn next(&mut self) -> Result<Output, ApiError> {
        loop {
            if let Some(output) = self.queued.pop_front() {
                return Ok(output);
            }
            if let Some(finish) = self.finish {
                return Ok(Output::Done(finish));
            }
            let step = self.generation.next().await?;
            let logprobs = self.generation.take_logprobs();
            if !logprobs.is_empty() {
                self.queued.push_back(Output::Logprobs(logprobs));
            }
            match step {
                Step::Text(text) => {
                    let text = match &mut self.tools {
                        Some((_, split)) => split.text(&text),
                        None => text,
                    };
                    if !text.is_empty() {
                        self.queued.push_back(Output::Text(text));
                    }
                }
                Step::Done(finish) => self.end(finish),
            }
        }
    }

    /// Queues what the splitter held back, and the end.
    fn end(&mut self, mut finish: FinishReason) {
        if let Some((set, split)) = &mut self.tools {
            match split.finish(set) {
                Ending::Calls(calls) => {
                    for (index, call) in (0..).zip(calls) {
                        self.queue_call(index, call);
                    }
                    finish = FinishReason::ToolCalls;
                }
                Ending::Text(held) if !held.is_empty() => self.queued.push_back(Output::Text(held)),
                Ending::Text(_) => {}
            }
        }
        self.queued.push_back(Output::Done(finish));
        self.finish = Some(finish);
    }

    fn queue_call(&mut self, index: u32, call: ParsedCall) {
        self.queued.push_back(Output::CallStart {
            index,
            name: call.name,
        });
        for piece in pieces(&call.arguments, ARGUMENT_PIECE) {
            self.queued.push_back(Output::CallArguments {
                index,
                piece: piece.to_owned(),
            });
        }
        self.queued.push_back(Output::CallEnd { index });
    }

    /// Runs the answer to its end and gathers it whole.
    pub async fn whole(&mut self) -> Result<Whole, ApiError> {
        let mut whole = Whole::default();
        loop {
            if whole.add(&self.next().await?) {
                return Ok(whole);
            }
        }
    }
}

/// A whole answer: its text, the calls it ended with, why it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Whole {
    /// The text (before the calls, when it ended in calls).
    pub text: String,
    /// The calls, in order.
    pub calls: Vec<ParsedCall>,
    /// Why it ended.
    pub finish: FinishReason,
    /// Each token's log-probability, when the request asked for them.
    pub logprobs: Vec<TokenLogprob>,
}

impl Default for Whole {
    fn default() -> Self {
        Whole {
            text: String::new(),
            calls: Vec::new(),
            finish: FinishReason::Stop,
            logprobs: Vec::new(),
        }
    }
}

impl Whole {
    /// Adds one event of the answer; whether it was the end.
    pub fn add(&mut self, output: &Output) -> bool {
        match output {
            Output::Text(text) => self.text.push_str(text),
            Output::Logprobs(entries) => self.logprobs.extend_from_slice(entries),
            Output::CallStart { name, .. } => self.calls.push(ParsedCall {
                name: name.clone(),
                arguments: String::new(),
            }),
            Output::CallArguments { piece, .. } => {
                if let Some(call) = self.calls.last_mut() {
                    call.arguments.push_str(piece);
                }
            }
            Output::CallEnd { .. } => {}
            Output::Done(finish) => {
                self.finish = *finish;
                return true;
            }
        }
        false
    }

    /// The text to answer beside the calls: none when it is blank; around
    /// calls, trimmed, as the model's spacing before a call tag is not
    /// part of what it said.
    pub fn content(&self) -> Option<String> {
        if self.calls.is_empty() {
            return Some(self.text.clone());
        }
        let text = self.text.trim();
        (!text.is_empty()).then(|| text.to_owned())
    }
}
