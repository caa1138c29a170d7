//! `superfluid fleet join` and `superfluid node`: a node of a fleet.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use std::sync::Arc;
use superfluid_link::{token, Fingerprint};
use superfluid_node::agent::{self, AgentConfig};
use superfluid_node::credential::{self, Credential};
use superfluid_node::model_cache::ModelCache;
use superfluid_node::models::ModelSet;

use crate::cli::{EngineFlags, NodeFlags};
use crate::engine::{self, EngineConfig};
use crate::runtime::{hash_model, shutdown_signal};

/// How long `fleet join` listens for the head's mDNS announcement.
const MDNS_WAIT: Duration = Duration::from_secs(3);

/// What `fleet join` was asked to do.
pub struct Join {
    pub token: String,
    pub data_dir: Option<PathBuf>,
    pub name: Option<String>,
    pub no_run: bool,
    pub no_mdns: bool,
    /// Where to serve the engine's own metrics, if anywhere.
    pub metrics: Option<SocketAddr>,
    pub engine: EngineFlags,
}

fn node_dir(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| engine::home().join("node"))
}

/// `superfluid fleet join TOKEN`.
pub async fn join(join: Join) -> Result<()> {
    let claims = token::parse(join.token.trim())
        .context("this is not a join token from `superfluid fleet token`")?;
    let pinned: Fingerprint = claims.head_fingerprint.parse().context(
        "the join token names no valid head key; mint a new one with `superfluid fleet token`",
    )?;
    let mut head_addrs: Vec<SocketAddr> = claims
        .head_addrs
        .iter()
        .filter_map(|a| a.parse().ok())
        .collect();
    if !join.no_mdns {
        match superfluid_link::discovery::browse_head(&claims.fleet_id, MDNS_WAIT, None).await {
            Ok(found) if found.fingerprint.is_none_or(|fp| fp == pinned) => {
                tracing::info!(
                    "found the head by mDNS at {}",
                    found
                        .addrs
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let mut addrs = found.addrs;
                for a in head_addrs {
                    if !addrs.contains(&a) {
                        addrs.push(a);
                    }
                }
                head_addrs = addrs;
            }
            Ok(found) => {
                tracing::warn!(instance = %found.instance, "an mDNS answer for this fleet has another key; ignoring it")
            }
            Err(e) => tracing::info!("{e}"),
        }
    }
    if head_addrs.is_empty() {
        bail!("the head was not found by mDNS and the token names no address; mint a token on a head whose Link F address nodes can reach");
    }
    let dir = node_dir(join.data_dir);
    let name = join.name.unwrap_or_else(engine::host_name);
    let agent = AgentConfig {
        head_addrs,
        head_fingerprint: pinned,
        identity: credential::load_or_create_identity(&dir)?,
        name,
        join_token: Some(join.token.trim().to_owned()),
        model_sha256: None,
        credential_dir: Some(dir.clone()),
        join_only: join.no_run,
    };
    let metrics = if join.no_run { None } else { join.metrics };
    run_agent(agent, join.engine, metrics).await?;
    if join.no_run {
        let credential = Credential::load(&dir)?;
        println!(
            "joined fleet {}; credential saved in {}",
            credential.fleet_id,
            dir.display()
        );
        println!(
            "run the node with: superfluid node --data-dir {}",
            dir.display()
        );
    }
    Ok(())
}

/// `superfluid node`: runs from the credential `fleet join` stored.
pub async fn run(flags: NodeFlags) -> Result<()> {
    let dir = node_dir(flags.data_dir);
    let credential = Credential::load(&dir)?;
    let agent = AgentConfig {
        head_addrs: credential.head_addrs.clone(),
        head_fingerprint: credential.head_fingerprint,
        identity: credential::load_or_create_identity(&dir)?,
        name: credential.name.clone(),
        join_token: None,
        model_sha256: None,
        credential_dir: Some(dir),
        join_only: false,
    };
    tracing::info!(fleet = %credential.fleet_id, name = %credential.name, "starting the node");
    if flags.fake_engine {
        return crate::fake_node::run(agent, flags.engine).await;
    }
    run_agent(agent, flags.engine, flags.metrics).await
}

/// Starts the engine (and its metrics page at `metrics`, if given) and
/// serves the head until the agent gives up. A node
/// given no model, and without the default one on disk, first fetches the
/// head's model into `$SUPERFLUID_HOME/models` (see `docs/models.md`).
async fn run_agent(
    mut agent: AgentConfig,
    mut flags: EngineFlags,
    metrics: Option<SocketAddr>,
) -> Result<()> {
    let mut model_id = None;
    if flags.model.is_none() && !engine::default_model().is_file() {
        let cache = ModelCache::new(engine::models_dir());
        tracing::info!(cache = %cache.dir().display(), "no model on this machine; fetching the head's");
        let fetched = agent::fetch_models(&agent, &cache).await?;
        // The first connection enrolled this node's key.
        agent.join_token = None;
        if agent.join_only {
            return Ok(());
        }
        let Some(first) = fetched.into_iter().next() else {
            bail!("the head offered no model to fetch; start the head with --model, or this node with --model PATH");
        };
        flags.model = Some(first.path);
        agent.model_sha256 = Some(first.offer.sha256);
        model_id = Some(first.offer.id);
    }
    let mut config = EngineConfig::from_flags(flags)?;
    config.model_id = model_id;
    if agent.model_sha256.is_none() {
        agent.model_sha256 = Some(hash_model(&config.model).await?);
    }
    let backend = engine::backend()?;
    let engine = config.start(&backend).await?;
    // The models the head places here later load with the same flags.
    let loader = engine::LlamaLoader {
        backend: backend.clone(),
        config: config.clone(),
    };
    let models = ModelSet::new(
        Some(Arc::new(loader)),
        Some(ModelCache::new(engine::models_dir())),
    );
    models.insert(
        engine,
        agent.model_sha256.clone(),
        Some(config.model.clone()),
    );
    let models = Arc::new(models);
    if let Some(addr) = metrics {
        crate::node_metrics::serve(addr, models.clone()).await?;
    }
    agent::run_models_until(models, agent, shutdown_signal).await?;
    Ok(())
}
