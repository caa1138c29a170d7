//! One generation from the head's side: checks the prompt against the
//! context, dispatches it to the fleet, and turns the node's tokens into
//! text with stop strings applied.

use super::output::{FinishReason, Step};
use super::recent::{self, RequestNote};
use super::types::Params;
use super::{ApiError, AppState};
use crate::codec::{Detokenizer, ModelCodec, StopMatcher};
use crate::fleet::{Fleet, FleetError, RemoteGeneration};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Instant;
use superfluid_proto::{GenerateEvent, GenerateRequest, TokenId};
use timing::Timing;
use tracing::Span;

mod timing;

/// The prompt must leave room for at least one generated token.
pub fn check_context(len: usize, max: u32, param: &'static str) -> Result<(), ApiError> {
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

/// Token counts reported to the client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
    /// Prompt tokens the node found in its KV cache.
    pub cached_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
}

/// How many times a generation is sent to another node when its node is
/// lost before the first token.
const MAX_RETRIES: usize = 2;

/// What sending a generation again takes.
struct Retry {
    fleet: Fleet,
    /// The request; each routing sets its slot anew.
    request: GenerateRequest,
    /// The nodes (ids) it has been sent to.
    tried: Vec<String>,
}

/// A generation running on a node, read as text.
///
/// If the node is lost before the first token (its process stopped, its
/// connection died), the generation is sent to another node serving the
/// model, at most [`MAX_RETRIES`] times; the client sees one answer, later.
/// After the first token it is not: the text so far would be answered twice.
///
/// Dropping it drops the [`RemoteGeneration`], which cancels the generation
/// on the node (for example when the client disconnects).
pub struct Generation {
    remote: Option<Box<dyn EventSource>>,
    retry: Option<Retry>,
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
        let ctx = state.fleet.context_len(codec.id()).ok_or_else(|| {
            ApiError::Fleet(crate::fleet::FleetError::NoNode {
                model: codec.id().to_owned(),
            })
        })?;
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
        };
        let started = Instant::now();
        let remote = state.fleet.generate(&mut request).await?;
        let timing = Timing::new(Some(state.fleet.metrics().latency(codec.id())), received);
        timing.dispatched();
        let node = remote.node_name.clone();
        span.record("node", node.as_str());
        let retry = Retry {
            fleet: state.fleet.clone(),
            request,
            tried: vec![remote.node_id.clone()],
        };
        let mut generation =
            Generation::from_source(Box::new(remote), codec, &params.stop, len, node, span);
        generation.started = started;
        generation.timing = timing;
        generation.retry = Some(retry);
        generation.param = param;
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
            retry: None,
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
        }
    }

    /// Calls `hook` with the token counts when the generation is dropped:
    /// finished, failed, or left by a client that went away.
    pub fn on_end(&mut self, hook: UsageHook) {
        self.on_end = Some(hook);
    }

    /// Token counts so far (final once [`Step::Done`] was returned).
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The stop string that ended the generation, if one did.
    pub fn stop_sequence(&self) -> Option<&str> {
        self.stop.matched()
    }

    /// The next piece of text, or the end. After [`Step::Done`] or an error
    /// it keeps answering [`Step::Done`].
    pub async fn next(&mut self) -> Result<Step, ApiError> {
        loop {
            let Some(remote) = self.remote.as_mut() else {
                return Ok(Step::Done(self.finish));
            };
            let event = match remote.next_event().await {
                Ok(event) => event,
                Err(err) => {
                    self.remote = None;
                    match self.send_elsewhere(err).await {
                        Ok(()) => continue,
                        Err(err) => {
                            self.timing.end();
                            return Err(err.into());
                        }
                    }
                }
            };
            match event {
                Some(GenerateEvent::Tokens(ids)) => {
                    self.first_token();
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
                Some(GenerateEvent::Finished(outcome)) => {
                    self.remote = None;
                    self.finish = outcome.finish.into();
                    self.usage.prompt_tokens = outcome.prompt_tokens;
                    self.usage.cached_tokens = outcome.cached_tokens;
                    self.usage.completion_tokens = outcome.generated_tokens;
                    self.span.record("cached_tokens", outcome.cached_tokens);
                    self.detok.finish();
                    self.log_end();
                    let rest = self.stop.finish();
                    if !rest.is_empty() {
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

    /// After `lost` ended the generation, sends it to another node if no
    /// token has come yet. Otherwise the error to answer with: `lost`, or,
    /// when every node left is draining (as the one that turned it away
    /// is), that.
    async fn send_elsewhere(&mut self, lost: FleetError) -> Result<(), FleetError> {
        if self.seen_first_token || !matches!(lost, FleetError::NodeLost { .. }) {
            return Err(lost);
        }
        let Some(retry) = self.retry.as_mut() else {
            return Err(lost);
        };
        if retry.tried.len() > MAX_RETRIES {
            return Err(lost);
        }
        let sent = retry.fleet.retry(&mut retry.request, &retry.tried).await;
        let _entered = self.span.enter();
        match sent {
            Ok(remote) => {
                tracing::warn!(error = %lost, to = %remote.node_name, "lost the node before the first token; sent the generation to another");
                retry.tried.push(remote.node_id.clone());
                self.node = remote.node_name.clone();
                self.span.record("node", self.node.as_str());
                self.remote = Some(Box::new(remote));
                Ok(())
            }
            Err(error) => {
                tracing::warn!(error = %lost, retry = %error, "lost the node before the first token, and no other node took the generation");
                match error {
                    FleetError::Draining { .. } => Err(error),
                    _ => Err(lost),
                }
            }
        }
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
    }
}
