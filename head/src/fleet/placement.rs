//! Placement: which of the head's models each node keeps loaded.
//!
//! A request for a model that no node has loaded loads it on the node best
//! able to hold it ([`Fleet::ready`]): the head sends that node
//! [`Placement::Load`] and the request waits, at most the load timeout, for
//! the node's models report to list it. A model a node has not been asked
//! for in `--unload-after` is unloaded there ([`Fleet::unload_idle`]), and a
//! node too short of memory for a new model first unloads the one it used
//! least recently. `superfluid models load|unload` place models by hand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use superfluid_link::sync::lock;
use superfluid_link::{quinn::SendStream, write_frame};
use superfluid_proto::{ControlMsg, KvEvent, KvUpdate, ModelOffer, ModelsReport, Placement};
use tokio::sync::mpsc;

use super::registry::NodeEntry;
use super::{Fleet, FleetError};

/// How long a request waits for its model to load, unless configured.
pub const DEFAULT_LOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a model stays loaded on a node that is not asked for it.
pub const DEFAULT_UNLOAD_AFTER: Duration = Duration::from_secs(15 * 60);
/// How often a waiting request looks whether its model is loaded.
pub(super) const POLL: Duration = Duration::from_millis(25);
/// Slots a node's report may clear for a model it unloaded, at most.
const MAX_CLEARED_SLOTS: u32 = 1024;

/// How the head places models on nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementConfig {
    /// How long a request waits for its model to load on a node.
    pub load_timeout: Duration,
    /// How long a model stays loaded on a node that is not asked for it;
    /// `None`: until the node stops.
    pub unload_after: Option<Duration>,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            load_timeout: DEFAULT_LOAD_TIMEOUT,
            unload_after: Some(DEFAULT_UNLOAD_AFTER),
        }
    }
}

/// How long a model stays loaded after a request, as the request asked
/// (Ollama's `keep_alive`), instead of `--unload-after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// Until a later request says otherwise.
    Forever,
    /// This long without a request; zero unloads it once nothing runs.
    For(Duration),
}

/// The head's placement settings and the loads in progress.
#[derive(Debug)]
pub(crate) struct Placements {
    pub(crate) load_timeout: Duration,
    pub(crate) unload_after: Option<Duration>,
    /// Model id -> the load in progress for it.
    pub(super) pending: Mutex<HashMap<String, Pending>>,
    /// Model id -> how long its last request asked it to stay loaded.
    keep_alive: Mutex<HashMap<String, KeepAlive>>,
}

impl Default for Placements {
    fn default() -> Self {
        Self {
            load_timeout: DEFAULT_LOAD_TIMEOUT,
            unload_after: Some(DEFAULT_UNLOAD_AFTER),
            pending: Mutex::default(),
            keep_alive: Mutex::default(),
        }
    }
}

impl Placements {
    pub(crate) fn new(config: PlacementConfig) -> Self {
        Self {
            load_timeout: config.load_timeout,
            unload_after: config.unload_after,
            pending: Mutex::default(),
            keep_alive: Mutex::default(),
        }
    }
}

/// A load the head asked a node for.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub(super) node_id: String,
    /// Set when the node reports it could not load the model.
    pub(super) failure: Option<String>,
}

/// The head's side of a node's control stream: heartbeats, and the
/// placements queued for the node.
pub(crate) async fn write_control(
    mut send: SendStream,
    mut queued: mpsc::UnboundedReceiver<ControlMsg>,
) {
    let mut tick = tokio::time::interval(superfluid_link::control::HEARTBEAT_INTERVAL);
    loop {
        let msg = tokio::select! {
            _ = tick.tick() => ControlMsg::Heartbeat,
            msg = queued.recv() => match msg {
                Some(msg) => msg,
                None => return,
            },
        };
        if write_frame(&mut send, &msg).await.is_err() {
            return;
        }
    }
}

impl Fleet {
    /// Takes a node's models report: what it serves now replaces what it
    /// served, the blocks of a model it unloaded are forgotten, and a load
    /// it could not do ends the wait for it.
    pub(crate) fn models_changed(&self, entry: &NodeEntry, report: ModelsReport) {
        let failed = report.failed.clone();
        let models = report.models.clone();
        let before = entry.set_models(report, &self.models);
        {
            let mut router = self.router.lock();
            for gone in before
                .models
                .iter()
                .filter(|m| !models.iter().any(|n| n.id == m.id))
            {
                let events = (0..gone.slots.min(MAX_CLEARED_SLOTS))
                    .map(|slot| KvEvent::Cleared { slot })
                    .collect();
                router.apply_kv(
                    entry.key,
                    &KvUpdate {
                        model: gone.id.clone(),
                        events,
                    },
                );
                tracing::info!(node = %entry.name, model = %gone.id, "model unloaded");
            }
            let slots = models
                .iter()
                .fold(0u32, |sum, m| sum.saturating_add(m.slots));
            router.add_node(entry.key, slots);
            router.describe_node(entry.key, &models);
        }
        for new in models
            .iter()
            .filter(|m| !before.models.iter().any(|b| b.id == m.id))
        {
            tracing::info!(node = %entry.name, model = %new.id, "model loaded");
            // That load is over: the next request that finds the model
            // unloaded again starts another.
            let mut pending = lock(&self.placements.pending);
            if pending
                .get(&new.id)
                .is_some_and(|p| p.node_id == entry.node_id)
            {
                pending.remove(&new.id);
            }
        }
        if let Some((model, reason)) = failed {
            if let Some(p) = lock(&self.placements.pending).get_mut(&model) {
                if p.node_id == entry.node_id {
                    p.failure = Some(reason);
                }
            }
        }
    }

    /// The context length of `model`, loading it on a node first if none
    /// has it loaded. Waits at most the load timeout.
    ///
    /// # Errors
    /// [`FleetError::NoNode`] when the head does not serve the model to
    /// nodes or no node is connected; [`FleetError::NotLoaded`] when no
    /// node loaded it in time, with why.
    pub async fn ready(&self, model: &str) -> Result<u32, FleetError> {
        if let Some(ctx) = self.context_len(model) {
            return Ok(ctx);
        }
        let no_node = || FleetError::NoNode {
            model: model.to_owned(),
        };
        let offer = self.offer(model).ok_or_else(no_node)?;
        let deadline = Instant::now() + self.placements.load_timeout;
        let mut tried: Vec<String> = Vec::new();
        let mut last_failure: Option<String> = None;
        loop {
            if let Some(ctx) = self.context_len(model) {
                lock(&self.placements.pending).remove(model);
                return Ok(ctx);
            }
            let pending = lock(&self.placements.pending).get(model).cloned();
            match pending {
                Some(Pending {
                    node_id,
                    failure: Some(reason),
                }) => {
                    lock(&self.placements.pending).remove(model);
                    tried.push(node_id);
                    last_failure = Some(reason);
                }
                // A node that left takes its load with it.
                Some(p) if self.registry().find(&p.node_id).is_empty() => {
                    lock(&self.placements.pending).remove(model);
                    tried.push(p.node_id);
                }
                Some(_) => {}
                None => {
                    let Some(node) = self.best_node_for(&offer, &tried) else {
                        return Err(match last_failure {
                            Some(reason) => FleetError::NotLoaded {
                                model: model.to_owned(),
                                reason,
                            },
                            None => no_node(),
                        });
                    };
                    self.send_load(&node, &offer);
                }
            }
            if Instant::now() >= deadline {
                return Err(FleetError::NotLoaded {
                    model: model.to_owned(),
                    reason: format!(
                        "no node finished loading it within {} s (--load-timeout); it may still be loading: retry in a moment",
                        self.placements.load_timeout.as_secs()
                    ),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Whether a request for `model`, which no node has loaded, would try
    /// to load it: the head serves its file and a node takes work.
    pub fn can_load(&self, model: &str) -> bool {
        self.offer(model).is_some() && self.best_node_for_any()
    }

    fn best_node_for_any(&self) -> bool {
        self.registry()
            .entries()
            .iter()
            .any(|n| !n.is_draining() && n.connection.close_reason().is_none())
    }

    /// The head's file of `model`, as nodes fetch it.
    pub(super) fn offer(&self, model: &str) -> Option<ModelOffer> {
        self.store.offers().into_iter().find(|o| o.id == model)
    }

    /// Asks `node` to load `offer`, first unloading its least recently used
    /// idle model if the node says it lacks the memory.
    pub(super) fn send_load(&self, node: &Arc<NodeEntry>, offer: &ModelOffer) {
        let served = node.serving();
        if served.free_memory != 0 && served.free_memory < needed(offer) {
            if let Some(lru) = self.least_recently_used(node) {
                tracing::info!(node = %node.name, model = %lru, "unloading to make room for {}", offer.id);
                let _ = node
                    .placements
                    .send(ControlMsg::Place(Placement::Unload(lru)));
            }
        }
        tracing::info!(node = %node.name, model = %offer.id, "loading a model no node has loaded");
        lock(&self.placements.pending).insert(
            offer.id.clone(),
            Pending {
                node_id: node.node_id.clone(),
                failure: None,
            },
        );
        let _ = node
            .placements
            .send(ControlMsg::Place(Placement::Load(offer.clone())));
    }

    /// The node that should load `offer`: one taking work, not in `tried`,
    /// preferring those with the memory for it, then those with its file
    /// on disk (no transfer), then fewer loaded models, then more free memory.
    fn best_node_for(&self, offer: &ModelOffer, tried: &[String]) -> Option<Arc<NodeEntry>> {
        let need = needed(offer);
        self.registry()
            .entries()
            .into_iter()
            .filter(|n| !n.is_draining() && !tried.contains(&n.node_id))
            .filter(|n| n.connection.close_reason().is_none())
            .max_by_key(|n| {
                let served = n.serving();
                let fits = served.free_memory == 0 || served.free_memory >= need;
                let has_file = served.on_disk.contains(&offer.sha256);
                (
                    fits,
                    has_file,
                    std::cmp::Reverse(served.models.len()),
                    served.free_memory,
                )
            })
    }

    /// The model on `node` asked for least recently, if nothing runs there.
    fn least_recently_used(&self, node: &NodeEntry) -> Option<String> {
        if self.router.lock().in_flight(node.key) > 0 {
            return None;
        }
        lock(&node.used)
            .iter()
            .min_by_key(|(_, at)| **at)
            .map(|(id, _)| id.clone())
    }

    /// How long `model` stays loaded after its last request: as that
    /// request asked (`Some`), or `--unload-after` (`None`).
    pub fn set_keep_alive(&self, model: &str, keep: Option<KeepAlive>) {
        let mut kept = lock(&self.placements.keep_alive);
        match keep {
            Some(keep) => kept.insert(model.to_owned(), keep),
            None => kept.remove(model),
        };
    }

    /// Unloads every model that no request has asked a node for in its
    /// keep-alive (`--unload-after`, or what its last request asked), where
    /// nothing runs on that node now.
    pub fn unload_idle(&self) {
        let kept = lock(&self.placements.keep_alive).clone();
        let idle_after = |model: &str| match kept.get(model) {
            Some(KeepAlive::Forever) => None,
            Some(KeepAlive::For(d)) => Some(*d),
            None => self.placements.unload_after,
        };
        let now = Instant::now();
        for node in self.registry().entries() {
            if self.router.lock().in_flight(node.key) > 0 {
                continue;
            }
            let idle: Vec<(String, Duration)> = {
                let mut used = lock(&node.used);
                let idle: Vec<(String, Duration)> = used
                    .iter()
                    .filter_map(|(id, at)| {
                        let after = idle_after(id)?;
                        (now.duration_since(*at) >= after).then(|| (id.clone(), after))
                    })
                    .collect();
                // Not again until another idle period has passed.
                for (id, _) in &idle {
                    used.insert(id.clone(), now);
                }
                idle
            };
            for (model, after) in idle {
                tracing::info!(node = %node.name, %model, idle_secs = after.as_secs_f64(), "unloading an idle model");
                let _ = node
                    .placements
                    .send(ControlMsg::Place(Placement::Unload(model)));
            }
        }
    }

    /// Runs [`Fleet::unload_idle`] about every second (more often for a
    /// short `--unload-after`), forever.
    pub async fn unload_idle_forever(self) {
        let every = self
            .placements
            .unload_after
            .map_or(Duration::from_secs(1), |after| after / 4)
            .clamp(Duration::from_millis(250), Duration::from_secs(1));
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            self.unload_idle();
        }
    }
}

/// Memory a node needs free to load `offer`: its file and a tenth more.
fn needed(offer: &ModelOffer) -> u64 {
    offer.size.saturating_add(offer.size / 10)
}
