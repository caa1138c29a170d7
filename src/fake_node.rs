//! `superfluid node --fake-engine` (hidden): a node whose engine computes
//! nothing. It announces the model file's id and hash like a real node, so
//! the head routes to it, and answers with the fake engine's tokens: a pure
//! function of the sequence so far, so that a generation moved to another
//! node mid-answer goes on with exactly the tokens it would have had. Fleet
//! tests and benchmarks run many of these on a machine with few cores.

use std::sync::Arc;

use anyhow::Result;
use superfluid_node::agent::{self, AgentConfig};
use superfluid_node::fake::{FakeCosts, FakeEngine};
use superfluid_proto::{model_id_from_path, ModelDescription};

use crate::cli::EngineFlags;
use crate::engine::EngineConfig;
use crate::runtime::{hash_model, shutdown_signal};

/// Serves the head with a fake engine for the model `flags` name.
pub async fn run(mut agent: AgentConfig, flags: EngineFlags) -> Result<()> {
    let config = EngineConfig::from_flags(flags)?;
    let sha256 = hash_model(&config.model).await?;
    agent.model_sha256 = Some(sha256.clone());
    let model = ModelDescription {
        id: model_id_from_path(&config.model),
        ctx: config.ctx,
        slots: config.slots,
        sha256,
        ..Default::default()
    };
    tracing::info!(model = %model.id, "serving with the fake engine: no model is computed");
    let engine = Arc::new(FakeEngine::new(model, FakeCosts::default()));
    agent::run_until(engine, agent, shutdown_signal).await?;
    Ok(())
}
