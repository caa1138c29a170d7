//! `superfluid serve`: one head and one node in one process, joined over
//! loopback Link F with keys made at start-up.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use std::time::Duration;

use anyhow::{bail, Context, Result};
use llama_cpp_2::llama_backend::LlamaBackend;
use superfluid_head::server::HeadConfig;
use superfluid_link::{allow_only, digest::sha256_file, Identity};
use superfluid_node::agent::{self, AgentConfig};
use superfluid_node::llama::{LlamaConfig, LlamaEngine};
use superfluid_node::Engine;

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
    TooSmall {
        flag: &'static str,
        min: u32,
        value: u32,
    },
}

/// Where `scripts/setup` installs the default model.
pub fn default_model() -> PathBuf {
    let home = std::env::var_os("SUPERFLUID_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let user = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
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
        let cores = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
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
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
    let backend = Arc::new(LlamaBackend::init().context("initialising llama.cpp")?);
    let head_identity = Identity::generate().context("making the head's key")?;
    let node_identity = Identity::generate().context("making the node's key")?;
    let head = superfluid_head::server::start(
        &backend,
        HeadConfig {
            http: config.http,
            link: SocketAddr::from(([127, 0, 0, 1], 0)),
            models: vec![config.model.clone()],
            identity: head_identity,
            authorizer: allow_only([node_identity.fingerprint()]),
            membership: None,
        },
    )
    .await?;

    let engine = LlamaEngine::start(
        backend.clone(),
        LlamaConfig {
            model_path: config.model.clone(),
            slots: config.slots,
            ctx: config.ctx,
            threads: config.threads,
            ..LlamaConfig::default()
        },
    )?;
    let model_id = engine.info().model.id.clone();
    let model_path = config.model.clone();
    let model_sha256 = tokio::task::spawn_blocking(move || sha256_file(&model_path))
        .await
        .context("hashing the model file")?
        .with_context(|| format!("reading {} to hash it", config.model.display()))?;
    let agent = AgentConfig {
        head_addrs: vec![head.link_addr],
        head_fingerprint: head.fingerprint,
        identity: node_identity,
        name: "local".into(),
        join_token: None,
        model_sha256: Some(model_sha256),
        credential_dir: None,
    };
    let mut node = tokio::spawn(agent::run(Arc::new(engine), agent));

    // Say where we listen only once the node serves, so that the first
    // request a client sends after that line is answered.
    let joined = async {
        while head.fleet.context_len(&model_id).is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        () = joined => {}
        ended = &mut node => bail!("the node stopped before joining: {}", describe(ended)),
        () = tokio::time::sleep(JOIN_TIMEOUT) => bail!("the node did not join the head within {JOIN_TIMEOUT:?}"),
    }
    tracing::info!(
        "serving {model_id} ({} slots x {} tokens, {} threads) on http://{}",
        config.slots,
        config.ctx,
        config.threads,
        head.http_addr
    );

    let http = head.http;
    tokio::select! {
        ended = http => bail!("the HTTP server stopped: {}", describe(ended.map(|r| r.map_err(anyhow::Error::from)))),
        ended = node => bail!("the node stopped: {}", describe(ended)),
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("shutting down");
            Ok(())
        }
    }
}

const JOIN_TIMEOUT: Duration = Duration::from_secs(30);

fn describe<E: std::fmt::Display, F: std::fmt::Display>(ended: Result<Result<(), E>, F>) -> String {
    match ended {
        Ok(Ok(())) => "it ended".into(),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    }
}
