//! `superfluid engine-host`: one model's engine in a process of its own,
//! started by a node (or `serve`) with its socket on stdin. Not for people
//! to run; see `superfluid_node::host`.

use std::os::fd::AsFd;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use superfluid_node::offload::{
    FlashAttn, GpuLayers, KvCacheType, Offload, SplitMode, TensorSplit,
};

use crate::engine::EngineConfig;
use crate::logging::LogFormat;

/// The engine's flags, passed by the node. No environment variables: the
/// node's own `SUPERFLUID_*` settings must not change what it asked for.
#[derive(Debug, Args)]
pub struct Flags {
    /// The GGUF file.
    #[arg(long)]
    pub model: PathBuf,
    /// The id clients name the model by.
    #[arg(long)]
    pub model_id: String,
    #[arg(long)]
    pub slots: u32,
    #[arg(long)]
    pub ctx: u32,
    #[arg(long)]
    pub threads: u32,
    #[arg(long)]
    pub shared_kv: bool,
    #[arg(long)]
    pub gpu_layers: GpuLayers,
    #[arg(long)]
    pub split_mode: SplitMode,
    #[arg(long)]
    pub tensor_split: Option<TensorSplit>,
    #[arg(long)]
    pub main_gpu: u32,
    #[arg(long)]
    pub kv_cache_type: KvCacheType,
    #[arg(long)]
    pub flash_attn: FlashAttn,
    #[arg(long, value_enum, default_value_t)]
    pub log_format: LogFormat,
}

pub async fn run(flags: Flags) -> Result<()> {
    // stdin is one end of the node's socket pair.
    let fd = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .context("taking the node's socket from stdin")?;
    let socket = std::os::unix::net::UnixStream::from(fd);
    socket
        .set_nonblocking(true)
        .context("the node's socket on stdin")?;
    let socket = tokio::net::UnixStream::from_std(socket)
        .context("stdin is not the node's socket; this command is started by a node")?;
    // A service manager stopping the node signals every process of its
    // group or cgroup at once. The node drains (finishes its streams) and
    // then closes the socket, which ends this host; until then, it serves.
    tokio::spawn(async {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::info!("asked to stop: serving until the node closes the socket");
        }
    });
    let config = EngineConfig {
        model: flags.model,
        slots: flags.slots,
        ctx: flags.ctx,
        threads: flags.threads,
        shared_kv: flags.shared_kv,
        model_id: Some(flags.model_id),
        in_process: true,
        log_format: flags.log_format,
        offload: Offload {
            gpu_layers: flags.gpu_layers,
            split_mode: flags.split_mode,
            tensor_split: flags.tensor_split.unwrap_or_default(),
            main_gpu: flags.main_gpu,
            kv_cache_type: flags.kv_cache_type,
            flash_attn: flags.flash_attn,
        },
    };
    superfluid_node::host::serve::run(socket, move || {
        let backend = crate::engine::backend().map_err(|e| format!("{e:#}"))?;
        config.start_here(&backend).map_err(|e| format!("{e:#}"))
    })
    .await
    .context("serving the node")
}
