//! The engine thread: loads the model and context it owns, then drives the
//! scheduler on the wall clock.

use std::num::NonZeroU32;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;

use super::context::ContextBackend;
use super::LlamaConfig;
use crate::engine::EngineError;
use crate::ledger::Ledger;
use crate::schedule::{slots, Job, Limits, Scheduler};

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
    let limits = Limits {
        slots: config.slots as usize,
        ctx: config.ctx as usize,
        prefill_chunk: config.prefill_chunk as usize,
        min_copy_gain: slots::min_copy_gain(config.ctx as usize, config.shared_kv),
    };
    let backend = ContextBackend::new(&model, ctx, n_batch as usize);
    serve(Scheduler::new(limits, ledger), backend, &jobs);
}

/// Steps until every sender is gone and no work is left, timing each decode.
fn serve<'m>(
    mut scheduler: Scheduler<ContextBackend<'m>>,
    mut backend: ContextBackend<'m>,
    jobs: &Receiver<Job>,
) {
    let mut open = true;
    loop {
        if !scheduler.busy() {
            if !open {
                return;
            }
            match jobs.recv() {
                Ok(job) => scheduler.push(job),
                Err(_) => return,
            }
        }
        while open {
            match jobs.try_recv() {
                Ok(job) => scheduler.push(job),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => open = false,
            }
        }
        if scheduler.plan(&mut backend).is_none() {
            continue;
        }
        let started = Instant::now();
        let picked = scheduler.finish_step(&mut backend, || started.elapsed().as_secs_f64());
        // Sending a token woke whoever waits for it (the node's Link F task,
        // or an in-process caller). When it was woken onto this core, let it
        // run now, between two decodes: otherwise it preempts one of
        // llama.cpp's threads in the middle of the next decode, and every
        // other compute thread waits for that one at the next barrier.
        if picked {
            std::thread::yield_now();
        }
    }
}
