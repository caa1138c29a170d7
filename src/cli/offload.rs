//! Flags for where a node's models live: GPU layers and split, the KV
//! cache's type, flash attention. Each takes what llama.cpp takes and is
//! refused at start, naming the choices, otherwise.

use clap::Args;
use superfluid_node::offload::{
    FlashAttn, GpuLayers, KvCacheType, Offload, OffloadError, SplitMode, TensorSplit,
};

/// GPU offload and memory flags of a node's engines.
#[derive(Debug, Clone, Args)]
pub struct OffloadFlags {
    /// Model layers on the GPUs: a number, or `auto` for every layer the
    /// build has a GPU for. A build without a GPU backend offloads nothing.
    #[arg(long, env = "SUPERFLUID_GPU_LAYERS", default_value = "auto")]
    pub gpu_layers: GpuLayers,
    /// How several GPUs share a model: `layer` (whole layers per GPU),
    /// `row` (rows of each matrix across them) or `none` (only --main-gpu).
    #[arg(long, env = "SUPERFLUID_SPLIT_MODE", default_value = "layer")]
    pub split_mode: SplitMode,
    /// Each GPU's share of the model, e.g. `3,1` [default: by free memory].
    #[arg(long, env = "SUPERFLUID_TENSOR_SPLIT")]
    pub tensor_split: Option<TensorSplit>,
    /// The GPU for the whole model with `--split-mode none`, and for
    /// intermediate results otherwise.
    #[arg(long, env = "SUPERFLUID_MAIN_GPU", default_value_t = 0)]
    pub main_gpu: u32,
    /// The type of the KV cache's keys and values: `f16`, `q8_0` (about
    /// half of f16's memory) or `q4_0` (about a quarter).
    #[arg(long, env = "SUPERFLUID_KV_CACHE_TYPE", default_value = "f16")]
    pub kv_cache_type: KvCacheType,
    /// Flash attention: `auto` (where the device has it, and always with a
    /// quantized KV cache), `on` or `off`.
    #[arg(long, env = "SUPERFLUID_FLASH_ATTN", default_value = "auto")]
    pub flash_attn: FlashAttn,
}

impl OffloadFlags {
    /// The settings, refused where llama.cpp or this build cannot take them.
    ///
    /// # Errors
    /// See [`Offload::check`].
    pub fn offload(&self) -> Result<Offload, OffloadError> {
        let offload = Offload {
            gpu_layers: self.gpu_layers,
            split_mode: self.split_mode,
            tensor_split: self.tensor_split.clone().unwrap_or_default(),
            main_gpu: self.main_gpu,
            kv_cache_type: self.kv_cache_type,
            flash_attn: self.flash_attn,
        };
        offload.check()?;
        Ok(offload)
    }

    /// The flags that give `offload`, as an engine host takes them.
    pub fn args(offload: &Offload) -> Vec<(&'static str, String)> {
        let mut args = vec![
            ("--gpu-layers", offload.gpu_layers.to_string()),
            ("--split-mode", offload.split_mode.to_string()),
            ("--main-gpu", offload.main_gpu.to_string()),
            ("--kv-cache-type", offload.kv_cache_type.to_string()),
            ("--flash-attn", offload.flash_attn.to_string()),
        ];
        if !offload.tensor_split.0.is_empty() {
            args.push(("--tensor-split", offload.tensor_split.to_string()));
        }
        args
    }
}
