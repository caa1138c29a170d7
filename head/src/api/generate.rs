//! One generation from the head's side: checks the prompt against the
//! context, dispatches it to the fleet, and turns the node's tokens into
//! text with stop strings applied.

pub use super::output::Usage;
use super::output::{FinishReason, Step};
use super::recent::{self, RequestNote};
use super::types::Params;
use super::{ApiError, AppState};
use crate::codec::{Detokenizer, ModelCodec, StopMatcher};
use crate::fleet::{FleetError, RemoteGeneration};
use failover::{Cause, Relay, Watchdog};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Instant;
use superfluid_proto::{FailureKind, GenerateEvent, GenerateRequest, TokenId, TokenLogprob};
use timing::Timing;
use tracing::Span;

pub mod answer;
mod failover;
mod moving;
pub mod prepare;
pub mod prompt;
pub mod request;
pub mod residency;
mod timing;
pub mod transcript;

use transcript::{Transcript, TranscriptHook};

/// The prompt must leave room for at least one generated token.
pub(crate) fn check_context(len: usize, max: u32, param: &'static str) -> Result<(), ApiError> {
    if len.saturating_add(1) > max as usize {
        return Err(ApiError::ContextLength { max, len, param });
    }
    Ok(())
}

/// Where a generation's events come from: a node over Link F, or a script
/// in tests. Dropping the source cancels the generation.
pub trait EventSource: Send {
    /// The next event; `Ok(None)` once the stream has ended.
    fn next_event(&mut self) -> BoxFuture<'_, Result<Option<GenerateEvent>, FleetError>>;
}

impl EventSource for RemoteGeneration {
    fn next_event(&mut self) -> BoxFuture<'_, Result<Option<GenerateEvent>, FleetError>> {
        Box::pin(RemoteGeneration::next_event(self))
    }
}

/// A generation running on a node, read as text.
///
/// If the node is lost (its process stopped, its connection died) or its
/// stream stalls, before or after the first token, the generation moves to
/// another node serving the model, at most [`failover::MAX_MOVES`] times;
/// the client sees one answer (see [`failover`]).
///
/// Dropping it drops the [`RemoteGeneration`], which cancels the generation
/// on the node (for example when the client disconnects).
pub struct Generation {
    remote: Option<Box<dyn EventSource>>,
    relay: Option<Relay>,
    /// Every token the client has been given text for, across nodes.
    generated: Vec<TokenId>,
    watchdog: Watchdog,
    /// When the current node last sent an event (or was sent the request).
    last_event: Instant,
    /// After a move, when the lost node's last token came: the client's
    /// gap ends at the next node's first token.
    gap_from: Option<Instant>,
    codec: Arc<ModelCodec>,
    detok: Detokenizer,
    stop: StopMatcher,
    usage: Usage,
    finish: FinishReason,
    started: Instant,
    timing: Timing,
    seen_first_token: bool,
    span: Span,
    on_end: Option<UsageHook>,
    /// The request field the prompt came from, named when a node finds
    /// the prompt at fault.
    param: &'static str,
    /// The node serving it.
    pub node: String,
    /// Its request's entry among the recent requests.
    note: Option<RequestNote>,
    /// Its text, kept for a caller that records it.
    transcript: Option<Transcript>,
    /// The log-probabilities of the tokens given so far and not yet taken,
    /// kept only when the request asked for them (`scored`).
    logprobs: Vec<TokenLogprob>,
    scored: bool,
}

/// Told a generation's final token counts.
pub type UsageHook = Box<dyn FnOnce(Usage) + Send + Sync>;

impl Generation {
    /// Checks the prompt against the context and sends it to a node.
    /// `param` names the request field the prompt came from; `received` is
    /// when the request arrived, which its latencies count from.
    pub async fn start(
        state: &AppState,
        received: Instant,
        codec: Arc<ModelCodec>,
        prompt: Vec<TokenId>,
        params: &Params,
        param: &'static str,
        span: Span,
    ) -> Result<Generation, ApiError> {
        if prompt.is_empty() {
            return Err(ApiError::param(
                param,
                format!("`{param}` is empty; give some text to continue"),
            ));
        }
        let served = state.fleet.ready(codec.id()).await?;
        let ctx = params.context.map_or(served, |asked| asked.min(served));
        check_context(prompt.len(), ctx, param)?;
        let len = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        let room = ctx.saturating_sub(len);
        let max_tokens = params.max_tokens.map_or(room, |m| m.min(room));
        span.record("prompt_tokens", len);
        let mut request = GenerateRequest {
            model: codec.id().to_owned(),
            prompt,
            sampling: params.sampling.clone(),
            max_tokens,
            slot: None,
            constraint: params.constraint.clone(),
            logprobs: params.logprobs,
        };
        let started = Instant::now();
        let remote = match &params.beside {
            Some(node) => state.fleet.generate_beside(&mut request, node).await?,
            None => state.fleet.generate(&mut request).await?,
        };
        let timing = Timing::new(Some(state.fleet.metrics().latency(codec.id())), received);
        timing.dispatched();
        let node = remote.node_name.clone();
        span.record("node", node.as_str());
        let relay = Relay::new(state.fleet.clone(), request, remote.node_id.clone());
        let mut generation =
            Generation::from_source(Box::new(remote), codec, &params.stop, len, node, span);
        generation.started = started;
        generation.timing = timing;
        generation.relay = Some(relay);
        generation.param = param;
        generation.scored = params.logprobs.is_some();
        generation.note = recent::current();
        if let Some(note) = &generation.note {
            note.dispatched(generation.codec.id(), &generation.node);
        }
        Ok(generation)
    }

    /// A generation reading events from `source`, already dispatched to
    /// `node` with a prompt of `prompt_tokens` tokens.
    pub fn from_source(
        source: Box<dyn EventSource>,
        codec: Arc<ModelCodec>,
        stop: &[String],
        prompt_tokens: u32,
        node: String,
        span: Span,
    ) -> Generation {
        Generation {
            remote: Some(source),
            relay: None,
            generated: Vec::new(),
            watchdog: Watchdog::default(),
            last_event: Instant::now(),
            gap_from: None,
            codec,
            detok: Detokenizer::new(),
            stop: StopMatcher::new(stop.iter().cloned()),
            usage: Usage {
                prompt_tokens,
                ..Usage::default()
            },
            finish: FinishReason::Stop,
            started: Instant::now(),
            timing: Timing::new(None, Instant::now()),
            seen_first_token: false,
            span,
            on_end: None,
            param: "prompt",
            node,
            note: None,
            transcript: None,
            logprobs: Vec::new(),
            scored: false,
        }
    }

    /// Calls `hook` with the token counts when the generation is dropped:
    /// finished, failed, or left by a client that went away.
    pub fn on_end(&mut self, hook: UsageHook) {
        self.on_end = Some(hook);
    }

    /// Calls `hook` with the whole text when the generation ends, or with
    /// `None` if it fails or is dropped first.
    pub fn record(&mut self, hook: TranscriptHook) {
        self.transcript = Some(Transcript::new(hook));
    }

    /// Token counts so far (final once [`Step::Done`] was returned).
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The log-probabilities of the tokens read since the last call: those
    /// of the text the last [`Step::Text`] gave, and of any tokens whose
    /// text a stop string holds back. Empty unless the request asked.
    pub fn take_logprobs(&mut self) -> Vec<TokenLogprob> {
        std::mem::take(&mut self.logprobs)
    }

    /// The stop string that ended the generation, if one did.
    pub fn stop_sequence(&self) -> Option<&str> {
        self.stop.matched()
    }

    /// The next piece of text, or the end. After [`Step::Done`] or an error
    /// it keeps answering [`Step::Done`].
    pub async fn next(&mut self) -> Result<Step, ApiError> {
        let step = self.step().await;
        let ended = self.transcript.as_mut().is_some_and(|t| t.observe(&step));
        if ended {
            if let Some(transcript) = self.transcript.take() {
                let finish = match &step {
                    Ok(Step::Done(finish)) => Some(*finish),
                    _ => None,
                };
                transcript.end(finish, self.usage);
            }
        }
        step
    }

    async fn step(&mut self) -> Result<Step, ApiError> {
        loop {
            let Some(remote) = self.remote.as_mut() else {
                return Ok(Step::Done(self.finish));
            };
            let next = remote.next_event();
            let waited = match self.watchdog.limit() {
                Some(limit) => tokio::time::timeout(limit, next)
                    .await
                    .map_err(|_| (Cause::Stalled, limit)),
                None => Ok(next.await),
            };
            let lost = match waited {
                Ok(Ok(event)) => Ok(event),
                Ok(Err(err)) => Err((Cause::NodeLost, err)),
                Err((cause, limit)) => Err((
                    cause,
                    FleetError::NodeLost {
                        node: self.node.clone(),
                        reason: format!(
                            "its stream made no progress for {:.1} s",
                            limit.as_secs_f64()
                        ),
                    },
                )),
            };
            if matches!(lost, Ok(Some(_))) {
                self.last_event = Instant::now();
            }
            let event = match lost {
                Ok(Some(GenerateEvent::Failed {
                    kind: FailureKind::Stopped,
                    message,
                })) if self.relay.is_some() => {
                    let node = self.node.clone();
                    let lost = FleetError::NodeLost {
                        node,
                        reason: message,
                    };
                    match self.move_on(Cause::NodeStopping, lost).await {
                        Ok(None) => continue,
                        Ok(Some(step)) => return Ok(step),
                        Err(err) => return Err(err),
                    }
                }
                Ok(event) => event,
                Err((cause, err)) => match self.move_on(cause, err).await {
                    Ok(None) => continue,
                    Ok(Some(step)) => return Ok(step),
                    Err(err) => return Err(err),
                },
            };
            match event {
                Some(GenerateEvent::Tokens(ids)) => {
                    self.first_token();
                    self.watchdog.tokens();
                    self.end_gap();
                    self.generated.extend_from_slice(&ids);
                    self.timing.tokens(ids.len());
                    let n = u32::try_from(ids.len()).unwrap_or(u32::MAX);
                    self.usage.completion_tokens = self.usage.completion_tokens.saturating_add(n);
                    let text = self.detok.feed(&self.codec, &ids);
                    let out = self.stop.push(&text);
                    if out.stopped {
                        // Dropping the remote generation cancels it on the node.
                        self.remote = None;
                        self.finish = FinishReason::Stop;
                        self.log_end();
                    }
                    if !out.text.is_empty() {
                        return Ok(Step::Text(out.text));
                    }
                }
                // A node that sends them unasked is not listened to.
                Some(GenerateEvent::Logprobs(entries)) if self.scored => {
                    self.logprobs.extend(entries);
                }
                Some(GenerateEvent::Logprobs(_)) => {}
                Some(GenerateEvent::Finished(outcome)) => {
                    if self.moves() == 0 {
                        self.usage.prompt_tokens = outcome.prompt_tokens;
                        self.usage.completion_tokens = outcome.generated_tokens;
                    }
                    // After a move the node's prompt held the tokens
                    // generated before it; the client's counts stand.
                    self.usage.cached_tokens = outcome.cached_tokens.min(self.usage.prompt_tokens);
                    self.span.record("cached_tokens", self.usage.cached_tokens);
                    if let Some(rest) = self.end_with(outcome.finish.into()) {
                        return Ok(Step::Text(rest));
                    }
                }
                Some(GenerateEvent::Failed { kind, message }) => {
                    self.remote = None;
                    self.timing.end();
                    return Err(ApiError::NodeFailed {
                        kind,
                        message,
                        param: self.param,
                    });
                }
                None => {
                    self.remote = None;
                    self.timing.end();
                    return Err(ApiError::Generation {
                        message: format!(
                            "node {} ended the stream without a final outcome; retry the request",
                            self.node
                        ),
                    });
                }
            }
        }
    }

    /// The id of the node it runs on now, once dispatched.
    pub fn node_id(&self) -> Option<&str> {
        self.relay.as_ref().and_then(Relay::node_id)
    }

    /// Moves made so far.
    fn moves(&self) -> usize {
        self.relay.as_ref().map_or(0, Relay::moves)
    }

    /// Ends the generation for `finish`; the text the stop matcher held
    /// back, if any.
    fn end_with(&mut self, finish: FinishReason) -> Option<String> {
        self.remote = None;
        self.finish = finish;
        self.detok.finish();
        self.log_end();
        Some(self.stop.finish()).filter(|rest| !rest.is_empty())
    }

    fn first_token(&mut self) {
        if !self.seen_first_token {
            self.seen_first_token = true;
            let ttft = self.started.elapsed().as_secs_f64() * 1000.0;
            self.span.record("ttft_ms", ttft);
            if let Some(note) = &self.note {
                note.first_token(ttft);
            }
        }
    }

    fn log_end(&mut self) {
        self.timing.end();
        let usage = self.usage;
        let outcome = match self.finish {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
        };
        self.span.record("outcome", outcome);
        self.span.in_scope(|| {
            tracing::info!(
                finish = ?self.finish,
                completion_tokens = usage.completion_tokens,
                elapsed_ms = self.started.elapsed().as_millis() as u64,
                "generation done"
            );
        });
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        // A client that went away ends the generation here.
        self.timing.end();
        if let Some(note) = &self.note {
            note.ended(self.usage, &self.node);
        }
        if let Some(hook) = self.on_end.take() {
            hook(self.usage);
        }
        if let Some(transcript) = self.transcript.take() {
            transcript.end(None, self.usage);
        }
    }
}
