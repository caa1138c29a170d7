//! The embedding engine: a model whose GGUF names a pooling type, run in a
//! llama.cpp context of its own with embeddings on.
//!
//! The generation engine never turns embeddings on (it would make every
//! token an output); an embedding model gets this engine instead. Its
//! thread packs the inputs of a request into batches of whole sequences,
//! one sequence id each, reads each sequence's pooled vector and scales it
//! to unit length, as OpenAI's and sentence-transformers' vectors are.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::{mpsc as std_mpsc, Arc};

use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use superfluid_proto::{
    embedding_pooling, model_id_from_path, EmbedReply, EmbedRequest, FailureKind, GenerateRequest,
    ModelDescription, Pooling, TokenId, MAX_EMBED_INPUTS,
};
use tokio::sync::oneshot;

use super::LlamaConfig;
use crate::engine::{Embedding, Engine, EngineError, EngineInfo, Generation};
use crate::ledger::Ledger;

/// Sequences computed in one batch at most.
const MAX_SEQS: u32 = 16;

/// The pooling `model`'s GGUF names, if it embeds ([`embedding_pooling`]).
pub fn model_pooling(model: &LlamaModel) -> Option<Pooling> {
    let arch = model.meta_val_str("general.architecture").ok()?;
    let pooling = model
        .meta_val_str(&superfluid_proto::embed::pooling_key(&arch))
        .ok();
    embedding_pooling(&arch, pooling.as_deref())
}

/// Whether the GGUF at `path` is an embedding model, from its metadata
/// alone (the weights are not loaded).
///
/// # Errors
/// [`EngineError::Load`] when the file cannot be read as a GGUF model.
pub fn file_pooling(backend: &LlamaBackend, path: &Path) -> Result<Option<Pooling>, EngineError> {
    let params = LlamaModelParams::default().with_vocab_only(true);
    let model =
        LlamaModel::load_from_file(backend, path, &params).map_err(|e| EngineError::Load {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    Ok(model_pooling(&model))
}

struct EmbedJob {
    request: EmbedRequest,
    reply: oneshot::Sender<EmbedReply>,
}

/// Runs one embedding model with llama.cpp on its own thread.
pub struct EmbedEngine {
    info: EngineInfo,
    jobs: std_mpsc::Sender<EmbedJob>,
    ledger: Arc<Ledger>,
}

impl EmbedEngine {
    /// Loads the model and its embedding context on a thread of their own;
    /// returns once both are ready. `config.ctx` caps the tokens of one
    /// input (the model's training context caps it too).
    ///
    /// # Errors
    /// [`EngineError::Load`] when the model cannot be loaded or does not
    /// embed, [`EngineError::Context`] when its context cannot be created.
    pub fn start(backend: Arc<LlamaBackend>, config: LlamaConfig) -> Result<Self, EngineError> {
        let id = config
            .model_id
            .clone()
            .unwrap_or_else(|| model_id_from_path(&config.model_path));
        let (jobs, job_rx) = std_mpsc::channel::<EmbedJob>();
        let (ready_tx, ready_rx) = std_mpsc::sync_channel(1);
        let thread_config = config.clone();
        std::thread::Builder::new()
            .name(format!("embed-{id}"))
            .spawn(move || run(&backend, &thread_config, &ready_tx, &job_rx))
            .map_err(|e| EngineError::Load {
                path: config.model_path.display().to_string(),
                reason: format!("could not start the engine thread: {e}"),
            })?;
        let ctx = ready_rx.recv().map_err(|_| EngineError::Stopped)??;
        let slots = config.slots.max(1);
        let info = EngineInfo {
            model: ModelDescription {
                id: id.clone(),
                ctx,
                slots,
                sha256: String::new(),
                ..Default::default()
            },
        };
        let ledger = Arc::new(Ledger::new(&id, slots as usize));
        Ok(Self { info, jobs, ledger })
    }
}

impl Engine for EmbedEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn submit(&self, _request: GenerateRequest) -> Result<Generation, EngineError> {
        Err(EngineError::CannotGenerate {
            model: self.info.model.id.clone(),
        })
    }

    fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    fn embed(&self, request: EmbedRequest) -> Result<Embedding, EngineError> {
        if request.model != self.info.model.id {
            return Err(EngineError::UnknownModel {
                requested: request.model,
                served: self.info.model.id.clone(),
            });
        }
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(EmbedJob { request, reply })
            .map_err(|_| EngineError::Stopped)?;
        Ok(rx)
    }
}

/// The engine thread: loads model and context, says ready with the tokens
/// one input may hold, then answers jobs until every sender is gone.
fn run(
    backend: &LlamaBackend,
    config: &LlamaConfig,
    ready: &std_mpsc::SyncSender<Result<u32, EngineError>>,
    jobs: &std_mpsc::Receiver<EmbedJob>,
) {
    let path = config.model_path.display().to_string();
    let load_error = |reason: String| EngineError::Load {
        path: path.clone(),
        reason,
    };
    // The GPU layers as for a generation model; an encoder keeps no KV
    // cache, so its type does not apply.
    let model_params = super::engine_thread::model_params(&config.offload);
    let model = match LlamaModel::load_from_file(backend, &config.model_path, &model_params) {
        Ok(model) => model,
        Err(e) => {
            let _ = ready.send(Err(load_error(e.to_string())));
            return;
        }
    };
    let Some(pooling) = model_pooling(&model) else {
        let _ = ready.send(Err(load_error(
            "its GGUF names no pooling type, so it cannot compute embeddings".into(),
        )));
        return;
    };
    // Whole inputs go in one batch (an encoder computes a sequence at once),
    // so the batch holds the context.
    let ctx_len = config.ctx.max(2).min(model.n_ctx_train().max(2));
    let threads = i32::try_from(config.threads.max(1)).unwrap_or(1);
    let params = LlamaContextParams::default()
        .with_embeddings(true)
        .with_pooling_type(llama_pooling(pooling))
        .with_n_ctx(NonZeroU32::new(ctx_len))
        .with_n_batch(ctx_len)
        .with_n_ubatch(ctx_len)
        .with_n_seq_max(MAX_SEQS)
        .with_kv_unified(true)
        .with_n_threads(threads)
        .with_n_threads_batch(threads);
    let mut ctx = match model.new_context(backend, params) {
        Ok(ctx) => ctx,
        Err(e) => {
            let _ = ready.send(Err(EngineError::Context {
                ctx: ctx_len,
                slots: MAX_SEQS,
                reason: e.to_string(),
            }));
            return;
        }
    };
    if ready.send(Ok(ctx_len)).is_err() {
        return;
    }
    let n_vocab = u32::try_from(model.n_vocab()).unwrap_or(0);
    let mut batch = LlamaBatch::new(ctx_len as usize, MAX_SEQS as i32);
    while let Ok(job) = jobs.recv() {
        if job.reply.is_closed() {
            continue;
        }
        let limits = Limits {
            ctx: ctx_len,
            n_vocab,
        };
        let reply = embed_all(&mut ctx, &mut batch, &job.request.inputs, limits);
        let _ = job.reply.send(reply);
    }
}

fn llama_pooling(pooling: Pooling) -> LlamaPoolingType {
    match pooling {
        Pooling::Mean => LlamaPoolingType::Mean,
        Pooling::Cls => LlamaPoolingType::Cls,
        Pooling::Last => LlamaPoolingType::Last,
    }
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    ctx: u32,
    n_vocab: u32,
}

fn failed(kind: FailureKind, message: String) -> EmbedReply {
    EmbedReply::Failed { kind, message }
}

/// Checks every input before any is computed: llama.cpp aborts the process
/// on an input longer than the batch, so none may reach it.
fn check(inputs: &[Vec<TokenId>], limits: Limits) -> Result<(), EmbedReply> {
    if inputs.is_empty() || inputs.len() > MAX_EMBED_INPUTS {
        return Err(failed(
            FailureKind::EmptyPrompt,
            format!(
                "send between 1 and {MAX_EMBED_INPUTS} inputs, not {}",
                inputs.len()
            ),
        ));
    }
    for (i, input) in inputs.iter().enumerate() {
        if input.is_empty() {
            return Err(failed(
                FailureKind::EmptyPrompt,
                format!("input {i} has no tokens; send text or at least one token"),
            ));
        }
        if input.len() > limits.ctx as usize {
            return Err(failed(FailureKind::PromptTooLong, format!("this model's maximum context length is {} tokens, but input {i} has {} tokens; shorten it", limits.ctx, input.len())));
        }
        if let Some(bad) = input.iter().find(|&&t| t >= limits.n_vocab) {
            return Err(failed(
                FailureKind::InvalidToken,
                format!(
                    "input {i} has token {bad}, which is not in the model's vocabulary of {} tokens",
                    limits.n_vocab
                ),
            ));
        }
    }
    Ok(())
}

/// Embeds every input, packing as many whole inputs per batch as fit.
fn embed_all(
    ctx: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    inputs: &[Vec<TokenId>],
    limits: Limits,
) -> EmbedReply {
    if let Err(reply) = check(inputs, limits) {
        return reply;
    }
    let mut vectors = Vec::with_capacity(inputs.len());
    let mut tokens = 0u32;
    let mut start = 0;
    while start < inputs.len() {
        let mut end = start;
        let mut used = 0usize;
        while end < inputs.len()
            && end - start < MAX_SEQS as usize
            && used + inputs[end].len() <= limits.ctx as usize
        {
            used += inputs[end].len();
            end += 1;
        }
        match embed_batch(ctx, batch, &inputs[start..end]) {
            Ok(mut done) => vectors.append(&mut done),
            Err(message) => return failed(FailureKind::Engine, message),
        }
        tokens = tokens.saturating_add(u32::try_from(used).unwrap_or(u32::MAX));
        start = end;
    }
    EmbedReply::Embeddings {
        vectors,
        prompt_tokens: tokens,
    }
}

/// One batch: each input its own sequence, every token an output (pooling
/// reads them all), then each sequence's pooled vector at unit length.
fn embed_batch(
    ctx: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    inputs: &[Vec<TokenId>],
) -> Result<Vec<Vec<f32>>, String> {
    batch.clear();
    for (seq, input) in inputs.iter().enumerate() {
        for (pos, &token) in input.iter().enumerate() {
            batch
                .add(LlamaToken(token as i32), pos as i32, &[seq as i32], true)
                .map_err(|e| format!("could not fill the batch: {e}"))?;
        }
    }
    // A decoder's KV cache would otherwise keep the last batch's sequences.
    ctx.clear_kv_cache();
    ctx.decode(batch)
        .map_err(|e| format!("llama.cpp could not compute the embeddings: {e}"))?;
    let mut vectors = Vec::with_capacity(inputs.len());
    for seq in 0..inputs.len() {
        let pooled = ctx
            .embeddings_seq_ith(seq as i32)
            .map_err(|e| format!("llama.cpp gave no embedding for input {seq}: {e}"))?;
        vectors.push(unit_length(pooled));
    }
    Ok(vectors)
}

/// `v` scaled to Euclidean length 1 (a zero vector stays zero).
pub fn unit_length(v: &[f32]) -> Vec<f32> {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return v.to_vec();
    }
    v.iter().map(|x| (f64::from(*x) / norm) as f32).collect()
}
