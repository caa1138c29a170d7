//! The engine host's side of the socket: load the model, say it is ready,
//! then run what the agent asks and send back every event, KV change and
//! load figure the engine makes.
//!
//! The host ends when the agent closes its side (the node stopped, or
//! unloaded the model), or at once if the agent's frames make no sense.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use superfluid_link::sync::lock;
use superfluid_proto::{EmbedReply, FailureKind, GenerateEvent};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::UnixStream;
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::task::AbortHandle;

use super::wire::{self, FrameSource, FromHost, ToHost, WireError, HOST_PROTOCOL_VERSION};
use crate::engine::Engine;

/// How often the host looks for a changed load to send. The agent relays
/// load to the head every 250 ms; this keeps its copy well fresher.
const LOAD_POLL: Duration = Duration::from_millis(50);

/// Requests running in the engine, by the agent's number: aborting one
/// drops its generation, which cancels it at the engine's next step.
type Running = Arc<Mutex<HashMap<u64, AbortHandle>>>;

/// Serves the agent on `socket` with the engine `load` starts (on a
/// blocking thread: loading reads the whole model), until the agent closes
/// the socket. A model that cannot load is reported as
/// [`FromHost::LoadFailed`].
///
/// # Errors
/// When the socket fails or the agent sends a bad frame.
pub async fn run<L>(socket: UnixStream, load: L) -> Result<(), WireError>
where
    L: FnOnce() -> Result<Arc<dyn Engine>, String> + Send + 'static,
{
    let (read, write) = socket.into_split();
    let (out, out_rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(wire::write_all(write, out_rx));
    let mut source = FrameSource::new(read);
    let loaded = tokio::select! {
        loaded = tokio::task::spawn_blocking(load) => loaded,
        // The agent says nothing before the host is ready: this is its
        // end (it stopped while the model loaded), or a bad frame.
        _ = source.next::<ToHost>() => return Ok(()),
    };
    let engine = match loaded {
        Ok(Ok(engine)) => engine,
        Ok(Err(message)) => return refuse(out, writer, message).await,
        Err(e) => return refuse(out, writer, format!("loading the model failed: {e}")).await,
    };
    let _ = out.send(FromHost::Ready {
        version: HOST_PROTOCOL_VERSION,
        model: engine.info().model.clone(),
    });
    tokio::spawn(relay_ledger(engine.clone(), out.clone()));
    let result = serve(&*engine, &mut source, &out).await;
    drop(out);
    result
}

/// Sends [`FromHost::LoadFailed`] and waits for it to leave.
async fn refuse(
    out: UnboundedSender<FromHost>,
    writer: tokio::task::JoinHandle<Result<(), WireError>>,
    message: String,
) -> Result<(), WireError> {
    tracing::error!("{message}");
    let _ = out.send(FromHost::LoadFailed { message });
    drop(out);
    match writer.await {
        Ok(result) => result,
        Err(_) => Ok(()),
    }
}

/// Runs the agent's requests until it closes the socket.
async fn serve(
    engine: &dyn Engine,
    source: &mut FrameSource<OwnedReadHalf>,
    out: &UnboundedSender<FromHost>,
) -> Result<(), WireError> {
    let running: Running = Arc::default();
    while let Some(message) = source.next::<ToHost>().await? {
        match message {
            ToHost::Generate { id, request } => match engine.submit(request) {
                Ok(generation) => {
                    let mut held = lock(&running);
                    let task =
                        tokio::spawn(forward(id, generation.events, out.clone(), running.clone()));
                    held.insert(id, task.abort_handle());
                }
                Err(err) => {
                    let event = GenerateEvent::Failed {
                        kind: err.failure_kind(),
                        message: err.to_string(),
                    };
                    let _ = out.send(FromHost::Event { id, event });
                }
            },
            ToHost::Cancel { id } => {
                if let Some(task) = lock(&running).remove(&id) {
                    task.abort();
                }
            }
            ToHost::Embed { id, request } => match engine.embed(request) {
                Ok(pending) => {
                    let out = out.clone();
                    let mut held = lock(&running);
                    let done = running.clone();
                    let task = tokio::spawn(async move {
                        let reply = pending.await.unwrap_or_else(|_| EmbedReply::Failed {
                            kind: FailureKind::Stopped,
                            message: "the engine stopped while computing the embeddings".into(),
                        });
                        lock(&done).remove(&id);
                        let _ = out.send(FromHost::Embedded { id, reply });
                    });
                    held.insert(id, task.abort_handle());
                }
                Err(err) => {
                    let reply = EmbedReply::Failed {
                        kind: err.failure_kind(),
                        message: err.to_string(),
                    };
                    let _ = out.send(FromHost::Embedded { id, reply });
                }
            },
        }
    }
    Ok(())
}

/// Sends generation `id`'s events to the agent as the engine makes them.
async fn forward(
    id: u64,
    mut events: mpsc::UnboundedReceiver<GenerateEvent>,
    out: UnboundedSender<FromHost>,
    running: Running,
) {
    let mut ended = false;
    while let Some(event) = events.recv().await {
        ended = !matches!(event, GenerateEvent::Tokens(_) | GenerateEvent::Logprobs(_));
        if out.send(FromHost::Event { id, event }).is_err() || ended {
            break;
        }
    }
    if !ended {
        let event = GenerateEvent::Failed {
            kind: FailureKind::Stopped,
            message: "the engine stopped mid-generation".into(),
        };
        let _ = out.send(FromHost::Event { id, event });
    }
    lock(&running).remove(&id);
}

/// Sends the engine's KV caches (in full first, then each change) and its
/// load whenever it changed, until the agent is gone.
async fn relay_ledger(engine: Arc<dyn Engine>, out: UnboundedSender<FromHost>) {
    let ledger = engine.ledger();
    let mut load = ledger.load_report();
    if out.send(FromHost::Kv(ledger.snapshot())).is_err()
        || out.send(FromHost::Load(load.clone())).is_err()
    {
        return;
    }
    let mut poll = tokio::time::interval(LOAD_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = ledger.changed() => {
                if let Some(update) = ledger.take() {
                    if out.send(FromHost::Kv(update)).is_err() {
                        return;
                    }
                }
            }
            _ = poll.tick() => {}
            () = out.closed() => return,
        }
        let now = ledger.load_report();
        if now != load {
            if out.send(FromHost::Load(now.clone())).is_err() {
                return;
            }
            load = now;
        }
    }
}
