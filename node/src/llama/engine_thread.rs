//! The engine thread: loads the model and context it owns, then batches.

use std::num::NonZeroU32;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;

use super::batch_loop::{Batcher, Job};
use super::LlamaConfig;
use crate::engine::EngineError;
use crate::ledger::Ledger;

/// Loads the model, reports readiness, then serves jobs until every sender
/// is gone and no work is left.
pub fn run(
    backend: &Arc<LlamaBackend>,
    config: &LlamaConfig,
    ready: &SyncSender<Result<(), EngineError>>,
    jobs: Receiver<Job>,
    ledger: Arc<Ledger>,
) {
    let path = config.model_path.display().to_string();
    let model =
        match LlamaModel::load_from_file(backend, &config.model_path, &LlamaModelParams::default())
        {
            Ok(model) => model,
            Err(e) => {
                let _ = ready.send(Err(EngineError::Load {
                    path,
                    reason: e.to_string(),
                }));
                return;
            }
        };
    let n_batch = config.prefill_chunk.saturating_add(config.slots);
    let threads = i32::try_from(config.threads).unwrap_or(1);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(config.ctx.saturating_mul(config.slots)))
        .with_n_seq_max(config.slots)
        // By default one KV stream per slot: a prompt's attention spans its
        // own slot's cells, not every resident conversation's.
        .with_kv_unified(config.shared_kv)
        .with_n_batch(n_batch)
        .with_n_ubatch(n_batch)
        .with_n_threads(threads)
        .with_n_threads_batch(threads);
    let ctx = match model.new_context(backend, params) {
        Ok(ctx) => ctx,
        Err(e) => {
            let _ = ready.send(Err(EngineError::Context {
                ctx: config.ctx,
                slots: config.slots,
                reason: e.to_string(),
            }));
            return;
        }
    };
    if ready.send(Ok(())).is_err() {
        return;
    }
    Batcher::new(&model, ctx, config, n_batch as usize, ledger).serve(&jobs);
}
