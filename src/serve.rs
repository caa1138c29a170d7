//! `superfluid serve`: one head and one node in one process, joined over
//! loopback Link F with keys made at start-up.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use llama_cpp_2::llama_backend::LlamaBackend;

use crate::cli::ServeFlags;

/// Validated settings of `serve`.
#[derive(Debug)]
pub struct Config {
    pub http: SocketAddr,
    pub model: PathBuf,
    pub slots: u32,
    pub ctx: u32,
    pub threads: u32,
}

/// Why the flags of `serve` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The model file is missing.
    #[error("model file {0} does not exist; run scripts/setup to install the default model, or pass --model PATH")]
    MissingModel(PathBuf),
    /// A numeric flag is out of range.
    #[error("--{flag} must be at least {min}, got {value}")]
    TooSmall { flag: &'static str, min: u32, value: u32 },
}

/// Where `scripts/setup` installs the default model.
pub fn default_model() -> PathBuf {
    let home = std::env::var_os("SUPERFLUID_HOME").map(PathBuf::from).unwrap_or_else(|| {
        let user = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        user.join(".cache").join("superfluid")
    });
    home.join("models").join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn at_least(flag: &'static str, value: u32, min: u32) -> Result<u32, ConfigError> {
    if value < min {
        return Err(ConfigError::TooSmall { flag, min, value });
    }
    Ok(value)
}

impl Config {
    pub fn from_flags(flags: ServeFlags) -> Result<Config> {
        let model = flags.engine.model.unwrap_or_else(default_model);
        if !model.is_file() {
            return Err(ConfigError::MissingModel(model).into());
        }
        let cores = std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
        Ok(Config {
            http: flags.http,
            model,
            slots: at_least("slots", flags.engine.slots, 1)?,
            ctx: at_least("ctx", flags.engine.ctx, 64)?,
            threads: at_least("threads", flags.engine.threads.unwrap_or(cores), 1)?,
        })
    }
}

pub fn run(config: Config) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(config))
}

async fn serve(config: Config) -> Result<()> {
    let backend = Arc::new(LlamaBackend::init().context("initialising llama.cpp")?);
    let _ = (backend, config);
    todo!("wire head and node")
}
