//! The registry of connected nodes and the choice of a node for a request.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::{Duration, SystemTime},
};
use superfluid_link::sync::lock;
use superfluid_link::Fingerprint;
use superfluid_proto::{ControlMsg, ModelDescription};

use super::serving::{self, LastUsed, Served};
use crate::routing::NodeKey;

/// Whether a node takes new work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// Connected and taking new generations.
    Up,
    /// Connected; running generations finish, no new ones are sent.
    Draining,
    /// Enrolled but not connected (only in [`crate::fleet::Fleet::roster`]).
    Down,
}

impl NodeState {
    /// `up` or `draining`, as listings print it.
    pub fn as_str(&self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Draining => "draining",
            NodeState::Down => "down",
        }
    }
}

/// A connected node as listings show it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSnapshot {
    /// The id the head gave the node for this connection.
    pub node_id: String,
    /// The node's name, from its hello.
    pub name: String,
    /// The node's key.
    pub fingerprint: Fingerprint,
    /// The node's address as the head sees it.
    pub address: SocketAddr,
    /// The models it serves, with context and slots.
    pub models: Vec<ModelDescription>,
    /// Its machine as its hello described it (CPU, RAM, GPU backend);
    /// empty if it said nothing.
    pub hardware: String,
    /// When it connected.
    pub connected_since: SystemTime,
    /// Generations running on it now: the router's open tickets there.
    pub in_flight: u32,
    /// Generations it finished since it connected.
    pub served: u64,
    /// Up or draining.
    pub state: NodeState,
    /// When the node's last heartbeat (or its hello) arrived.
    pub last_heartbeat: SystemTime,
    /// Sequences it runs at once (the sum over its models).
    pub slots: u32,
    /// Tokens per sequence (the smallest over its models).
    pub ctx: u32,
    /// Labels from the join token it enrolled with.
    pub labels: Vec<(String, String)>,
    /// Why some or all of its models get no work (their file differs from
    /// the head's, or the head does not serve them); `None` if all do.
    pub ineligible: Option<String>,
    /// Its load and measured speed, as the router sees them.
    pub load: NodeLoadSnapshot,
    /// Link F's current estimate of the round-trip time to it (zero for a
    /// node that is not connected).
    pub link_rtt: Duration,
}

/// A node's load and speed: what it last reported, and what the router's
/// index knows it holds in cache.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeLoadSnapshot {
    /// Slots running a sequence (prefilling or decoding).
    pub busy_slots: u32,
    /// Slots free for a new sequence.
    pub idle_slots: u32,
    /// Requests waiting on the node for a free slot.
    pub queued: u32,
    /// Prompt tokens the node still has to compute.
    pub queued_prompt_tokens: u64,
    /// Measured prompt tokens per second; `None` until measured.
    pub prefill_tokens_per_sec: Option<f64>,
    /// Measured tokens per second of one generation; `None` until measured.
    pub decode_tokens_per_sec: Option<f64>,
    /// Average seconds from dispatch to the end of a generation; `None`
    /// until one finished.
    pub mean_generation_secs: Option<f64>,
    /// Prompt blocks the head's index knows the node holds.
    pub cached_blocks: usize,
}

impl NodeLoadSnapshot {
    pub(crate) fn new(load: &crate::routing::NodeLoad, slots: u32) -> Self {
        let busy = load.reported_running.min(slots);
        Self {
            busy_slots: busy,
            idle_slots: slots - busy,
            queued: load.reported_queued,
            queued_prompt_tokens: load.reported_queued_prompt_tokens,
            prefill_tokens_per_sec: load.prefill_tokens_per_sec,
            decode_tokens_per_sec: load.decode_tokens_per_sec,
            mean_generation_secs: load.mean_generation_secs,
            cached_blocks: load.indexed_blocks,
        }
    }
}

/// One connected node.
#[derive(Debug)]
pub(crate) struct NodeEntry {
    /// The router's number for this connection.
    pub(crate) key: NodeKey,
    pub(crate) node_id: String,
    pub(crate) name: String,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) address: SocketAddr,
    /// What it serves now: its hello's models, then its models reports.
    pub(super) serving: Mutex<Served>,
    pub(crate) hardware: String,
    pub(crate) connected_since: SystemTime,
    pub(crate) connection: quinn::Connection,
    pub(crate) labels: Vec<(String, String)>,
    /// Where placements for the node go (its control stream's writer).
    pub(crate) placements: tokio::sync::mpsc::UnboundedSender<ControlMsg>,
    /// When each model was last routed here (or loaded), for unloading
    /// idle ones.
    pub(crate) used: Mutex<LastUsed>,
    draining: AtomicBool,
    /// Milliseconds since the Unix epoch of the last heartbeat.
    last_heartbeat_ms: AtomicU64,
    served: AtomicU64,
}

/// A connection whose last heartbeat is older than this (two heartbeat
/// intervals and a second) no longer blocks a new one with the same key.
const STALE_MS: u64 = 2 * superfluid_link::control::HEARTBEAT_INTERVAL.as_millis() as u64 + 1000;

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl NodeEntry {
    /// What the node serves now.
    pub(crate) fn serving(&self) -> Served {
        lock(&self.serving).clone()
    }

    /// Replaces what the node serves (after it loaded or unloaded a model),
    /// checked against `expected` as at its hello; returns what it served
    /// before.
    pub(crate) fn set_models(
        &self,
        report: superfluid_proto::ModelsReport,
        expected: &[ModelDescription],
    ) -> Served {
        serving::replace_models(&self.serving, &self.used, report, expected)
    }

    /// Records that a generation of `model` was routed here now.
    pub(crate) fn used(&self, model: &str) {
        serving::mark_used(&self.used, model);
    }

    /// Whether the head routes `model` here (draining or not).
    pub(crate) fn serves(&self, model: &str) -> bool {
        lock(&self.serving).eligible.iter().any(|m| m == model)
    }

    /// Records a heartbeat from the node now.
    pub(crate) fn heartbeat(&self) {
        self.last_heartbeat_ms
            .store(unix_ms(SystemTime::now()), Ordering::Relaxed);
    }

    /// Stops (or resumes) sending new generations to this node.
    pub(crate) fn set_draining(&self, draining: bool) {
        self.draining.store(draining, Ordering::Relaxed);
    }

    /// Records that a generation finished on the node.
    pub(crate) fn served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the node is draining.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The node as listings show it, with `in_flight` generations (the
    /// router's count) and the load of a node nothing is known of yet.
    pub(crate) fn snapshot(&self, in_flight: u32) -> NodeSnapshot {
        let served = self.serving();
        NodeSnapshot {
            node_id: self.node_id.clone(),
            name: self.name.clone(),
            fingerprint: self.fingerprint,
            address: self.address,
            models: served.models.clone(),
            hardware: self.hardware.clone(),
            connected_since: self.connected_since,
            in_flight,
            served: self.served.load(Ordering::Relaxed),
            state: if self.draining.load(Ordering::Relaxed) {
                NodeState::Draining
            } else {
                NodeState::Up
            },
            last_heartbeat: SystemTime::UNIX_EPOCH
                + Duration::from_millis(self.last_heartbeat_ms.load(Ordering::Relaxed)),
            slots: served.models.iter().map(|m| m.slots).sum(),
            ctx: served.models.iter().map(|m| m.ctx).min().unwrap_or(0),
            labels: self.labels.clone(),
            ineligible: served.ineligible.clone(),
            load: NodeLoadSnapshot {
                idle_slots: served.models.iter().map(|m| m.slots).sum(),
                ..NodeLoadSnapshot::default()
            },
            link_rtt: self.connection.rtt(),
        }
    }

    /// Slots for `model` if the head may route it here now.
    fn slots_for(&self, model: &str) -> Option<u32> {
        if self.draining.load(Ordering::Relaxed) {
            return None;
        }
        let served = lock(&self.serving);
        if !served.eligible.iter().any(|m| m == model) {
            return None;
        }
        served
            .models
            .iter()
            .find(|m| m.id == model)
            .map(|m| m.slots.max(1))
    }
}

/// What a node said about itself, plus what the head learned from the connection.
#[derive(Debug)]
pub(crate) struct Joining {
    pub(crate) name: String,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) models: Vec<ModelDescription>,
    pub(crate) hardware: String,
    pub(crate) free_memory: u64,
    pub(crate) on_disk: Vec<String>,
    pub(crate) connection: quinn::Connection,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) placements: tokio::sync::mpsc::UnboundedSender<ControlMsg>,
}

/// Another live connection holds the key a joining node presents.
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) node_id: String,
    pub(crate) name: String,
}

/// All connected nodes.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    nodes: Mutex<Vec<Arc<NodeEntry>>>,
    next_id: AtomicU64,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Vec<Arc<NodeEntry>>> {
        // A panic while holding the lock leaves the list itself consistent.
        lock(&self.nodes)
    }

    /// A fresh key and node id for a connection.
    pub(crate) fn next_node(&self) -> (NodeKey, String) {
        let key = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        (key, format!("node-{key}"))
    }

    /// Adds a node whose models are checked against `expected` (see
    /// `fleet/models.rs`). With `unique` (membership), a live connection with
    /// the same key, heard from within [`STALE_MS`], makes this one [`Taken`];
    /// a closed or silent one is replaced. Without, an older connection from
    /// the same key and name is closed and replaced: the same node
    /// reconnecting before its old connection timed out.
    pub(crate) fn register(
        &self,
        (key, node_id): (NodeKey, String),
        joining: Joining,
        expected: &[ModelDescription],
        unique: bool,
    ) -> Result<Arc<NodeEntry>, Taken> {
        let (eligible, ineligible) = super::models::eligibility(&joining.models, expected);
        let now = SystemTime::now();
        let started = std::time::Instant::now();
        let used = joining
            .models
            .iter()
            .map(|m| (m.id.clone(), started))
            .collect();
        let entry = Arc::new(NodeEntry {
            key,
            node_id,
            name: joining.name,
            fingerprint: joining.fingerprint,
            address: joining.connection.remote_address(),
            serving: Mutex::new(Served {
                models: joining.models,
                eligible,
                ineligible,
                free_memory: joining.free_memory,
                on_disk: joining.on_disk,
            }),
            hardware: joining.hardware,
            connected_since: now,
            connection: joining.connection,
            labels: joining.labels,
            placements: joining.placements,
            used: Mutex::new(used),
            draining: AtomicBool::new(false),
            last_heartbeat_ms: AtomicU64::new(unix_ms(now)),
            served: AtomicU64::new(0),
        });
        let mut nodes = self.lock();
        if unique {
            // A closed connection, or one silent for two heartbeats, is the
            // same node coming back: the old one is replaced below.
            let stale_before = unix_ms(now).saturating_sub(STALE_MS);
            nodes.retain(|old| old.connection.close_reason().is_none());
            if let Some(old) = nodes.iter().find(|o| {
                o.fingerprint == entry.fingerprint
                    && o.last_heartbeat_ms.load(Ordering::Relaxed) >= stale_before
            }) {
                return Err(Taken {
                    node_id: old.node_id.clone(),
                    name: old.name.clone(),
                });
            }
        }
        nodes.retain(|old| {
            let same = old.fingerprint == entry.fingerprint && (unique || old.name == entry.name);
            if same {
                tracing::info!(node = %old.name, old_id = %old.node_id, "node reconnected; closing its old connection");
                old.connection.close(superfluid_link::control::CLOSE_NORMAL, b"replaced by a newer connection from this node");
            }
            !same
        });
        nodes.push(entry.clone());
        Ok(entry)
    }

    /// The connected nodes whose id, name or key fingerprint is `node`.
    pub(crate) fn find(&self, node: &str) -> Vec<Arc<NodeEntry>> {
        let nodes = self.lock();
        if let Some(n) = nodes.iter().find(|n| n.node_id == node) {
            return vec![n.clone()];
        }
        nodes
            .iter()
            .filter(|n| n.name == node || n.fingerprint.to_string() == node)
            .cloned()
            .collect()
    }

    /// The connected nodes with this key.
    pub(crate) fn with_key(&self, fingerprint: &Fingerprint) -> Vec<Arc<NodeEntry>> {
        self.lock()
            .iter()
            .filter(|n| n.fingerprint == *fingerprint)
            .cloned()
            .collect()
    }

    /// Removes the node with this id, if still registered. A node leaves
    /// the fleet through `fleet/member.rs`, which also takes it out of the
    /// router.
    pub(crate) fn remove(&self, node_id: &str) {
        self.lock().retain(|n| n.node_id != node_id);
    }

    /// The nodes the head may send a generation of `model` to now (up,
    /// serving a matching file), except the ids in `skip`.
    pub(crate) fn candidates(&self, model: &str, skip: &[String]) -> Vec<Arc<NodeEntry>> {
        self.lock()
            .iter()
            .filter(|n| !skip.contains(&n.node_id) && n.slots_for(model).is_some())
            .cloned()
            .collect()
    }

    /// Closes a node's connection without removing it, as a silently dead node looks.
    #[cfg(test)]
    pub(crate) fn close_connection(&self, name: &str) {
        for node in self.lock().iter().filter(|n| n.name == name) {
            node.connection.close(0u32.into(), b"test");
        }
    }

    /// Whether nodes serve `model`, none takes work but those in `skip`,
    /// and at least one is draining.
    pub(crate) fn only_draining(&self, model: &str, skip: &[String]) -> bool {
        let nodes = self.lock();
        let serving: Vec<_> = nodes.iter().filter(|n| n.serves(model)).collect();
        let draining = |n: &&Arc<NodeEntry>| n.draining.load(Ordering::Relaxed);
        serving.iter().any(draining)
            && serving
                .iter()
                .all(|n| draining(n) || skip.contains(&n.node_id))
    }

    /// The smallest context among nodes serving `model`.
    pub(crate) fn context_len(&self, model: &str) -> Option<u32> {
        self.lock()
            .iter()
            .filter(|n| n.serves(model))
            .filter_map(|n| {
                let served = lock(&n.serving);
                served.models.iter().find(|m| m.id == model).map(|m| m.ctx)
            })
            .min()
    }

    /// Every connected node, oldest first.
    pub(crate) fn entries(&self) -> Vec<Arc<NodeEntry>> {
        self.lock().clone()
    }
}
