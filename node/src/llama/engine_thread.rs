//! The engine thread: loads the model and context it owns, then drives the
//! scheduler on the wall clock.

use std::num::NonZeroU32;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

use llama_cpp_2::context::params::{KvCacheType as LlamaKvType, LlamaContextParams};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::{LlamaModelParams, LlamaSplitMode};
use llama_cpp_2::model::LlamaModel;

use super::context::ContextBackend;
use super::kv_size::KvShape;
use super::LlamaConfig;
use crate::engine::EngineError;
use crate::ledger::Ledger;
use crate::offload::{FlashAttn, GpuLayers, KvCacheType, Offload, SplitMode};
use crate::schedule::{slots, Job, Limits, Scheduler};

/// Loads the model, reports readiness (with the KV cache's bytes), then
/// serves jobs until every sender is gone and no work is left.
pub fn run(
    backend: &Arc<LlamaBackend>,
    config: &LlamaConfig,
    ready: &SyncSender<Result<u64, EngineError>>,
    jobs: Receiver<Job>,
    ledger: Arc<Ledger>,
) {
    let path = config.model_path.display().to_string();
    let model = match LlamaModel::load_from_file(
        backend,
        &config.model_path,
        &model_params(&config.offload),
    ) {
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
    let params = with_offload(params, &config.offload);
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
    let kv_bytes = KvShape::of(&model)
        .and_then(|shape| shape.bytes(ctx.n_ctx(), config.offload.kv_cache_type))
        .unwrap_or(0);
    if ready.send(Ok(kv_bytes)).is_err() {
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

/// The model's offload settings as llama.cpp takes them. On a build with
/// no GPU backend llama.cpp has no device to offload to, whatever they say.
pub(super) fn model_params(offload: &Offload) -> LlamaModelParams {
    let mut params = LlamaModelParams::default()
        .with_split_mode(match offload.split_mode {
            SplitMode::Layer => LlamaSplitMode::Layer,
            SplitMode::Row => LlamaSplitMode::Row,
            SplitMode::None => LlamaSplitMode::None,
        })
        .with_main_gpu(i32::try_from(offload.main_gpu).unwrap_or(i32::MAX));
    // `auto` keeps llama.cpp's default: every layer on the GPUs.
    if let GpuLayers::Count(n) = offload.gpu_layers {
        params = params.with_n_gpu_layers(n);
    }
    params
}

/// llama.cpp's `llama_flash_attn_type` values (`include/llama.h`).
const FLASH_ATTN_AUTO: i32 = -1;
const FLASH_ATTN_DISABLED: i32 = 0;
const FLASH_ATTN_ENABLED: i32 = 1;

/// `params` with the KV cache type (K and V alike) and flash attention.
/// llama.cpp turns `auto` flash attention on for a quantized V cache; with
/// it off it refuses one, which [`Offload::check`] refused first.
pub(super) fn with_offload(params: LlamaContextParams, offload: &Offload) -> LlamaContextParams {
    let kv = match offload.kv_cache_type {
        KvCacheType::F16 => LlamaKvType::F16,
        KvCacheType::Q8_0 => LlamaKvType::Q8_0,
        KvCacheType::Q4_0 => LlamaKvType::Q4_0,
    };
    let flash_attn = match offload.flash_attn {
        FlashAttn::Auto => FLASH_ATTN_AUTO,
        FlashAttn::On => FLASH_ATTN_ENABLED,
        FlashAttn::Off => FLASH_ATTN_DISABLED,
    };
    params
        .with_type_k(kv)
        .with_type_v(kv)
        .with_flash_attention_policy(flash_attn)
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
