//! `superfluid serve`: one head and one node in one process, joined over
//! loopback Link F with keys made at start-up.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use std::sync::Arc;
use superfluid_head::keys::{self, Keys};
use superfluid_head::server::HeadConfig;
use superfluid_link::{allow_only, Identity};
use superfluid_node::agent::{self, AgentConfig};
use superfluid_node::models::ModelSet;

use crate::cli::ServeFlags;
use crate::engine::{self, EngineConfig};
use crate::runtime::{describe, hash_model, shutdown_signal, until_shutdown};

const JOIN_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn run(flags: ServeFlags) -> Result<()> {
    // One process, no data dir: keys come from --api-key only (as
    // llama-server and vLLM take them); `superfluid keys` needs a head.
    let keys = Keys::in_memory(&flags.access.api_keys)?;
    keys::check_bind(flags.http, &keys, flags.access.insecure_no_auth)?;
    let browser = flags.browser.policy(&keys)?;
    let data_dir = flags.data_dir.unwrap_or_else(engine::home);
    let sessions = open_sessions(&data_dir, flags.session_limits.limits()).await?;
    let config = EngineConfig::from_flags(flags.engine)?;
    let embed_config = match flags.embedding_model {
        Some(path) => Some(EngineConfig {
            model: engine::model_path(Some(path))?,
            ..config.clone()
        }),
        None => None,
    };
    let backend = engine::backend()?;
    let head_identity = Identity::generate().context("making the head's key")?;
    let node_identity = Identity::generate().context("making the node's key")?;
    let mut models = vec![config.model.clone()];
    models.extend(embed_config.as_ref().map(|c| c.model.clone()));
    let head = superfluid_head::server::start(
        &backend,
        HeadConfig {
            http: flags.http,
            link: SocketAddr::from(([127, 0, 0, 1], 0)),
            models,
            identity: head_identity,
            authorizer: allow_only([node_identity.fingerprint()]),
            membership: None,
            route_policy: flags.route_policy,
            keys,
            browser,
            metrics_key: flags.access.metrics_key,
            max_connections: flags.max_connections,
            max_queue: flags.max_queue,
            ollama_port: flags.ollama_port,
            sessions: Some(sessions),
            placement: flags.placement.config(),
        },
    )
    .await?;

    // The node's engine host exits, on the head's metrics page: with
    // `serve` there is no other page to read them on.
    if let Err(e) = head
        .fleet
        .metrics()
        .register(Box::new(crate::host_exits::HostExits::default()))
    {
        tracing::warn!(error = %e, "could not add the engine host exits to the metrics page");
    }

    // One node serves the model (and the embedding model, in a context of
    // its own); a model unloaded when idle loads again from the same file.
    let loader = engine::LlamaLoader {
        backend: backend.clone(),
        config: config.clone(),
    };
    let node_models = Arc::new(ModelSet::new(Some(Arc::new(loader)), None));
    let mut model_ids = Vec::new();
    for engine_config in std::iter::once(&config).chain(embed_config.as_ref()) {
        let engine = engine_config.start(&backend).await?;
        model_ids.push(engine.info().model.id.clone());
        let sha256 = hash_model(&engine_config.model).await?;
        node_models.insert(engine, Some(sha256), Some(engine_config.model.clone()));
    }
    let agent = AgentConfig {
        head_addrs: vec![head.link_addr],
        head_fingerprint: head.fingerprint,
        identity: node_identity,
        name: "local".into(),
        join_token: None,
        model_sha256: None,
        credential_dir: None,
        join_only: false,
    };
    let mut node = tokio::spawn(agent::run_models_until(node_models, agent, shutdown_signal));

    // Say where we listen only once the nodes serve, so that the first
    // request a client sends after that line is answered.
    let joined = async {
        while model_ids
            .iter()
            .any(|id| head.fleet.context_len(id).is_none())
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        () = joined => {}
        ended = &mut node => bail!("the node stopped before joining: {}", describe(ended)),
        () = tokio::time::sleep(JOIN_TIMEOUT) => bail!("the node did not join the head within {JOIN_TIMEOUT:?}"),
    }
    tracing::info!(
        "serving {} ({} slots x {} tokens, {} threads) on http://{}",
        model_ids.join(" and "),
        config.slots,
        config.ctx,
        config.threads,
        head.http_addr
    );
    if let Some(addr) = head.ollama_addr {
        tracing::info!("the Ollama API also on port {} ({addr})", addr.port());
    }
    until_shutdown(head, Some(node)).await
}

/// The session store in `data_dir`; a damaged database stops the process
/// with the store's message, which names the file and what to do. Turns
/// that were generating when the head last stopped are ended as failed.
pub async fn open_sessions(
    data_dir: &std::path::Path,
    limits: superfluid_head::sessions::SessionLimits,
) -> Result<superfluid_head::sessions::SessionStore> {
    let path = data_dir.join(superfluid_head::sessions::DB_FILE);
    let store = superfluid_head::sessions::SessionStore::open_with(&path, limits)?;
    let ended = store
        .end_interrupted_turns(superfluid_head::api::sessions::bodies::interrupted)
        .await?;
    if ended > 0 {
        tracing::warn!(
            turns = ended,
            "ended the turns that were generating when the head last stopped; they read as failed"
        );
    }
    tracing::info!("sessions stored in {}", path.display());
    Ok(store)
}
