//! Engine hosts: each loaded model's llama.cpp in a child process of its
//! own, so that an abort in llama.cpp (a failed assertion, a failed GPU
//! allocation) ends only that model's host, never the node or, in
//! `superfluid serve`, the head beside it.
//!
//! ```text
//! node agent (superfluid node | serve)      Link F, placement, supervision
//!   |-- superfluid engine-host  model A     llama.cpp, slots, KV
//!   |-- superfluid engine-host  model B
//! ```
//!
//! A host is the same binary started as `superfluid engine-host` with one
//! end of a Unix socket pair as its stdin; over it the two speak postcard
//! frames ([`wire`]). The host side ([`serve`]) loads the model, says it is
//! ready, and then relays every event its engine makes. The agent side is
//! [`HostEngine`], an [`Engine`] like the in-process ones: the agent, the
//! head and the benchmarks see no difference, but for the process
//! boundary. Its supervisor ([`supervise`]) notices a host's end at once
//! (socket closed, child reaped, a bad frame, a stall the
//! [`superfluid_proto::watchdog::Watchdog`] sees), logs its exit status and
//! last output, counts it ([`exits`]), fails the host's generations as the
//! node's stopping (so the head moves them to another node), and starts a
//! new host after a backoff; a model whose hosts keep dying is given up on
//! ([`HostEngine::failure`]), and the agent unloads it.

pub mod exits;
mod process;
pub mod serve;
mod shared;
pub mod supervise;
#[cfg(test)]
mod tests;
pub mod wire;

use std::sync::Arc;

use superfluid_proto::{EmbedRequest, GenerateRequest};
use tokio::sync::{mpsc, oneshot};

use crate::engine::{Embedding, Engine, EngineError, EngineInfo, Generation};
use crate::ledger::Ledger;
use crate::schedule::validate;
pub use process::HostCommand;
use shared::Shared;
pub use supervise::RestartPolicy;

/// A model served by an engine host process; see the module docs.
pub struct HostEngine {
    info: EngineInfo,
    ledger: Arc<Ledger>,
    shared: Arc<Shared>,
    /// Dropped with the engine: the supervisor then closes the host's
    /// socket, and the host exits.
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for HostEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostEngine")
            .field("model", &self.info.model.id)
            .finish_non_exhaustive()
    }
}

impl HostEngine {
    /// Starts the model's host and waits until it has loaded the model.
    ///
    /// # Errors
    /// [`EngineError::Load`] with the host's reason and last output when it
    /// could not start or load the model.
    pub async fn start(command: HostCommand, policy: RestartPolicy) -> Result<Self, EngineError> {
        let started = supervise::start(&command, policy.ready_timeout)
            .await
            .map_err(|failed| EngineError::Load {
                path: command.model_id.clone(),
                reason: failed.message,
            })?;
        let model = started.model.clone();
        tracing::info!(model = %model.id, pid = started.process.id(), "the engine host of model {} is ready", model.id);
        let ledger = Arc::new(Ledger::new(&model.id, model.slots as usize));
        let shared = Shared::new(model.id.clone(), ledger.clone(), started.process.id());
        let (stop, stopped) = oneshot::channel();
        tokio::spawn(supervise::supervise(
            shared.clone(),
            command,
            policy,
            started,
            stopped,
        ));
        Ok(Self {
            info: EngineInfo { model },
            ledger,
            shared,
            _stop: stop,
        })
    }
}

impl HostEngine {
    /// The process id of the model's host while one is up (for tests and
    /// the node's log).
    pub fn host_pid(&self) -> Option<u32> {
        self.shared.pid()
    }
}

impl Engine for HostEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn submit(&self, request: GenerateRequest) -> Result<Generation, EngineError> {
        validate(&self.info.model, &request)?;
        let (events, rx) = mpsc::unbounded_channel();
        self.shared
            .generate(request, events)
            .map_err(|reason| EngineError::HostFailed {
                model: self.info.model.id.clone(),
                reason,
            })?;
        Ok(Generation { events: rx })
    }

    fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    fn embed(&self, request: EmbedRequest) -> Result<Embedding, EngineError> {
        let (reply, rx) = oneshot::channel();
        self.shared
            .embed(request, reply)
            .map_err(|reason| EngineError::HostFailed {
                model: self.info.model.id.clone(),
                reason,
            })?;
        Ok(rx)
    }

    fn failure(&self) -> Option<String> {
        self.shared.failure()
    }
}
