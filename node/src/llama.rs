//! The llama.cpp engine.
//!
//! [`LlamaEngine::start`] loads the model on a dedicated OS thread that owns
//! the model and one context holding a KV sequence per slot. Requests reach
//! that thread over a channel; it runs continuous batching (one decode per
//! step, mixing one token per decoding slot with chunks of pending prompts)
//! and keeps finished sequences resident so later prompts reuse their prefix.
//! The slots, queue and steps are [`crate::schedule`]'s; this module is its
//! [`crate::schedule::Backend`] over a llama.cpp context, and the thread
//! that drives it on the wall clock.

mod context;
mod draw;
pub mod embed;
mod engine_thread;
mod grammar;
pub mod kv_size;
mod sampler;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::{mpsc as std_mpsc, Arc};

use llama_cpp_2::llama_backend::LlamaBackend;
use superfluid_proto::{model_id_from_path, GenerateRequest, ModelDescription};
use tokio::sync::mpsc;

use crate::engine::{Engine, EngineError, EngineInfo, Generation};
use crate::ledger::Ledger;
use crate::offload::Offload;
pub use crate::schedule::validate;
use crate::schedule::Job;

/// How to run a model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// The GGUF file.
    pub model_path: PathBuf,
    /// Sequences decoded at once.
    pub slots: u32,
    /// Tokens per slot (prompt plus generated).
    pub ctx: u32,
    /// CPU threads for decoding and prompt processing.
    pub threads: u32,
    /// Prompt tokens evaluated per step, shared by all prefilling slots.
    pub prefill_chunk: u32,
    /// One KV cache shared by every slot instead of a KV stream per slot.
    /// Several streams decode faster while few conversations are resident;
    /// prompts compute slower while many are (see `docs/architecture.md`).
    pub shared_kv: bool,
    /// The id clients name the model by; the file stem when `None`. A file
    /// fetched into the node's model cache is named by its hash, not its id.
    pub model_id: Option<String>,
    /// GPU layers and split, KV cache type and flash attention.
    pub offload: Offload,
}

impl Default for LlamaConfig {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
        Self {
            model_path: PathBuf::new(),
            slots: 4,
            ctx: 4096,
            threads: u32::try_from(threads).unwrap_or(4),
            prefill_chunk: 512,
            shared_kv: false,
            model_id: None,
            offload: Offload::default(),
        }
    }
}

/// Runs one model with llama.cpp on its own thread.
pub struct LlamaEngine {
    info: EngineInfo,
    jobs: std_mpsc::Sender<Job>,
    ledger: Arc<Ledger>,
}

impl LlamaEngine {
    /// Loads the model and starts the engine thread; returns once the model
    /// and context are ready.
    ///
    /// # Errors
    /// [`EngineError::Load`] when the model cannot be loaded,
    /// [`EngineError::Context`] when the context cannot be created.
    pub fn start(
        backend: Arc<LlamaBackend>,
        config: LlamaConfig,
    ) -> Result<LlamaEngine, EngineError> {
        let config = LlamaConfig {
            slots: config.slots.max(1),
            ctx: config.ctx.max(2),
            threads: config.threads.max(1),
            prefill_chunk: config.prefill_chunk.max(1),
            ..config
        };
        if !config.model_path.is_file() {
            return Err(EngineError::Load {
                path: config.model_path.display().to_string(),
                reason: "no such file".into(),
            });
        }
        config.offload.check()?;
        let mut info = EngineInfo {
            model: ModelDescription {
                id: config
                    .model_id
                    .clone()
                    .unwrap_or_else(|| model_id_from_path(&config.model_path)),
                ctx: config.ctx,
                slots: config.slots,
                // The engine does not hash the file; whoever announces the model may.
                sha256: String::new(),
                kv_cache_type: config.offload.kv_cache_type.to_string(),
                // Measured once the context exists.
                kv_bytes: 0,
            },
        };
        let ledger = Arc::new(Ledger::new(&info.model.id, config.slots as usize));
        let (jobs, job_rx) = std_mpsc::channel();
        let (ready_tx, ready_rx) = std_mpsc::sync_channel(1);
        let thread_ledger = ledger.clone();
        std::thread::Builder::new()
            .name(format!("llama-{}", info.model.id))
            .spawn(move || engine_thread::run(&backend, &config, &ready_tx, job_rx, thread_ledger))
            .map_err(|e| EngineError::Load {
                path: info.model.id.clone(),
                reason: format!("could not start the engine thread: {e}"),
            })?;
        info.model.kv_bytes = ready_rx.recv().map_err(|_| EngineError::Stopped)??;
        Ok(LlamaEngine { info, jobs, ledger })
    }
}

impl Engine for LlamaEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn submit(&self, request: GenerateRequest) -> Result<Generation, EngineError> {
        validate(&self.info.model, &request)?;
        let (events, rx) = mpsc::unbounded_channel();
        self.jobs
            .send(Job { request, events })
            .map_err(|_| EngineError::Stopped)?;
        Ok(Generation { events: rx })
    }

    fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }
}
