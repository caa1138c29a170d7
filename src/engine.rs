//! Validated engine flags, default paths, and starting the llama.cpp engine.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use llama_cpp_2::llama_backend::LlamaBackend;
use superfluid_node::host::{HostCommand, HostEngine, RestartPolicy};
use superfluid_node::llama::embed::{file_pooling, EmbedEngine};
use superfluid_node::llama::{LlamaConfig, LlamaEngine};
use superfluid_node::offload::{Offload, OffloadError};
use superfluid_node::Engine;

use crate::cli::{EngineFlags, OffloadFlags};

/// Why engine flags cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The model file is missing.
    #[error("model file {0} does not exist; run scripts/setup to install the default model, or pass --model PATH")]
    MissingModel(PathBuf),
    /// An offload flag llama.cpp or this build cannot take.
    #[error(transparent)]
    Offload(#[from] OffloadError),
    /// A numeric flag is out of range.
    #[error("--{flag} must be at least {min}, got {value}")]
    TooSmall {
        flag: &'static str,
        min: u32,
        value: u32,
    },
}

/// `$SUPERFLUID_HOME`, by default `~/.cache/superfluid`.
pub fn home() -> PathBuf {
    std::env::var_os("SUPERFLUID_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let user = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            user.join(".cache").join("superfluid")
        })
}

/// `$SUPERFLUID_HOME/models`: where `scripts/setup` installs the default
/// model and where a node keeps the models it fetches from its head.
pub fn models_dir() -> PathBuf {
    home().join("models")
}

/// Where `scripts/setup` installs the default model.
pub fn default_model() -> PathBuf {
    models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// A model path that exists: the one given, or the default.
pub fn model_path(given: Option<PathBuf>) -> Result<PathBuf, ConfigError> {
    let model = given.unwrap_or_else(default_model);
    if !model.is_file() {
        return Err(ConfigError::MissingModel(model));
    }
    Ok(model)
}

/// The model files `given` names: itself if a file, or every `.gguf` in it
/// (sorted, not recursing) if a directory.
///
/// # Errors
/// `given` does not exist, cannot be read, or is a directory with no GGUF.
pub fn model_files(given: PathBuf) -> Result<Vec<PathBuf>> {
    if !given.is_dir() {
        return Ok(vec![model_path(Some(given))?]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&given)
        .with_context(|| format!("reading the model directory {}", given.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        anyhow::bail!(
            "the model directory {} holds no .gguf file; pass a GGUF file or a directory of them",
            given.display()
        );
    }
    Ok(files)
}

fn at_least(flag: &'static str, value: u32, min: u32) -> Result<u32, ConfigError> {
    if value < min {
        return Err(ConfigError::TooSmall { flag, min, value });
    }
    Ok(value)
}

/// Whether this build offloads the model to a GPU (llama.cpp offloads every
/// layer by default), leaving the CPU threads mostly waiting on it.
pub const GPU_BUILD: bool = cfg!(any(feature = "cuda", feature = "metal", feature = "vulkan"));

/// The machine's cores: the engine's threads unless `--threads` says.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// What the engine runs with.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub model: PathBuf,
    pub slots: u32,
    pub ctx: u32,
    pub threads: u32,
    pub shared_kv: bool,
    /// The id clients name the model by; the file stem when `None`.
    pub model_id: Option<String>,
    /// Run llama.cpp inside this process instead of an engine host.
    pub in_process: bool,
    /// How the engine host logs (the node's own format).
    pub log_format: crate::logging::LogFormat,
    /// GPU layers and split, KV cache type and flash attention.
    pub offload: Offload,
}

impl EngineConfig {
    pub fn from_flags(flags: EngineFlags) -> Result<EngineConfig, ConfigError> {
        Ok(EngineConfig {
            model: model_path(flags.model)?,
            slots: at_least("slots", flags.slots, 1)?,
            ctx: at_least("ctx", flags.ctx, 64)?,
            threads: at_least("threads", flags.threads.unwrap_or(cores() as u32), 1)?,
            shared_kv: flags.shared_kv,
            model_id: None,
            in_process: flags.engine_in_process,
            log_format: crate::logging::current(),
            offload: flags.offload.offload()?,
        })
    }

    /// Starts the model's engine: in an engine host of its own (a child
    /// process: an abort in llama.cpp ends only it), or in this process
    /// with `--engine-in-process`.
    pub async fn start(&self, backend: &Arc<LlamaBackend>) -> Result<Arc<dyn Engine>> {
        if self.in_process {
            return self.start_here(backend);
        }
        let engine = HostEngine::start(self.host_command(), RestartPolicy::default())
            .await
            .context("starting the engine host")?;
        Ok(Arc::new(engine))
    }

    /// The model id this config serves the model as.
    pub fn id(&self) -> String {
        self.model_id
            .clone()
            .unwrap_or_else(|| superfluid_proto::model_id_from_path(&self.model))
    }

    /// `superfluid engine-host` with this config's flags.
    fn host_command(&self) -> HostCommand {
        let mut args: Vec<std::ffi::OsString> = vec!["engine-host".into(), "--model".into()];
        args.push(self.model.clone().into());
        for (flag, value) in [
            ("--model-id", self.id()),
            ("--slots", self.slots.to_string()),
            ("--ctx", self.ctx.to_string()),
            ("--threads", self.threads.to_string()),
            ("--log-format", self.log_format.as_str().to_owned()),
        ]
        .into_iter()
        .chain(OffloadFlags::args(&self.offload))
        {
            args.push(flag.into());
            args.push(value.into());
        }
        if self.shared_kv {
            args.push("--shared-kv".into());
        }
        HostCommand {
            program: this_binary(),
            args,
            model_id: self.id(),
        }
    }

    /// Loads the model and starts the engine its GGUF calls for, in this
    /// process: the
    /// embedding engine for a model that names a pooling type (by the rule
    /// the head applies too), the generation engine for any other.
    pub fn start_here(&self, backend: &Arc<LlamaBackend>) -> Result<Arc<dyn Engine>> {
        let config = self.llama_config();
        if let Some(pooling) = file_pooling(backend, &self.model).context("reading the model")? {
            tracing::info!(model = %self.model.display(), pooling = pooling.as_str(), "an embedding model: serving embeddings");
            let engine = EmbedEngine::start(backend.clone(), config)
                .context("starting the embedding engine")?;
            return Ok(Arc::new(engine));
        }
        let engine = LlamaEngine::start(backend.clone(), config).context("starting the engine")?;
        Ok(Arc::new(engine))
    }

    fn llama_config(&self) -> LlamaConfig {
        LlamaConfig {
            model_path: self.model.clone(),
            slots: self.slots,
            ctx: self.ctx,
            threads: self.threads,
            shared_kv: self.shared_kv,
            model_id: self.model_id.clone(),
            offload: self.offload.clone(),
            ..LlamaConfig::default()
        }
    }
}

/// Loads the models the head places on a node with this node's engine
/// flags (slots, context, threads).
pub struct LlamaLoader {
    pub backend: Arc<LlamaBackend>,
    pub config: EngineConfig,
}

impl superfluid_node::models::Loader for LlamaLoader {
    fn load(&self, id: &str, path: &std::path::Path) -> Result<Arc<dyn Engine>, String> {
        let config = EngineConfig {
            model: path.to_owned(),
            model_id: Some(id.to_owned()),
            ..self.config.clone()
        };
        // Called on a blocking thread of the node's runtime.
        tokio::runtime::Handle::current()
            .block_on(config.start(&self.backend))
            .map_err(|e| format!("{e:#}"))
    }
}

/// The binary this process runs, to start engine hosts with. On Linux
/// `/proc/self/exe`, which stays this very binary even when an update
/// replaced the file on disk.
fn this_binary() -> PathBuf {
    let proc_self = PathBuf::from("/proc/self/exe");
    if proc_self.exists() {
        return proc_self;
    }
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("superfluid"))
}

/// llama.cpp's backend, once per process, with its logs sent to `tracing`.
pub fn backend() -> Result<Arc<LlamaBackend>> {
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
    Ok(Arc::new(
        LlamaBackend::init().context("initialising llama.cpp")?,
    ))
}

/// This machine's host name, for a node's default name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "node".into())
}
