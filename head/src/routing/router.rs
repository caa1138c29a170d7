//! The stateful router: the block index, each node's load, and the policy.
//!
//! The router is not shared by itself; the head wraps it in a mutex. Every
//! generation it routes is recorded on its node until its [`Ticket`] is
//! finished: that is the load [`super::route`] predicts from.
//!
//! The router never reads the clock: each entry point that records a moment
//! takes it as `now` (as quinn-proto does), so tests and simulations drive
//! it on their own time.

use super::index::BlockIndex;
use super::policy::{route, Reason, RoutePolicy, RouteRequest, RouterState};
use super::predict::NodeView;
use super::NodeKey;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use superfluid_proto::{block_hashes, model_seed, KvUpdate, LoadReport, ModelDescription};

/// Weight of the newest generation in a node's mean generation time.
const EWMA_ALPHA: f64 = 0.2;

/// A routed generation: where it goes and the ticket that tracks it.
#[derive(Debug, Clone)]
pub struct Routed {
    /// The node.
    pub node: NodeKey,
    /// The node's slot believed to hold the longest prefix of the prompt.
    pub slot: Option<u32>,
    /// Prompt tokens the node is believed to hold cached.
    pub cached_tokens: usize,
    /// Predicted time to first token.
    pub predicted_ttft_secs: f64,
    /// Why this node.
    pub reason: Reason,
    /// Hand back to [`Router::first_token`] and [`Router::finished`].
    pub ticket: Ticket,
}

/// One generation dispatched to a node. A plain value: give it back to
/// [`Router::first_token`] when the first token arrives and to
/// [`Router::finished`] when the generation ends, however it ends. Tickets
/// of a node that was removed are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    node: NodeKey,
    id: u64,
    uncached_tokens: u64,
    dispatched: Instant,
}

impl Ticket {
    /// The node the generation went to.
    pub fn node(&self) -> NodeKey {
        self.node
    }

    /// Prompt tokens the node was expected to compute.
    pub fn uncached_tokens(&self) -> u64 {
        self.uncached_tokens
    }

    /// Time from the generation's dispatch to `now` (zero if `now` is
    /// earlier).
    pub fn elapsed(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.dispatched)
    }
}

/// One node's load, as the router knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeLoad {
    /// The node.
    pub key: NodeKey,
    /// Sequences its engine runs at once.
    pub slots: u32,
    /// Generations routed to it and not finished.
    pub in_flight: u32,
    /// Uncached prompt tokens of those that have no first token yet.
    pub pending_prefill_tokens: u64,
    /// Sequences running, as the node last reported.
    pub reported_running: u32,
    /// Requests queued, as the node last reported.
    pub reported_queued: u32,
    /// Prompt tokens still to compute, as the node last reported.
    pub reported_queued_prompt_tokens: u64,
    /// Measured prompt tokens per second, once reported.
    pub prefill_tokens_per_sec: Option<f64>,
    /// Measured tokens per second of one stream, once reported.
    pub decode_tokens_per_sec: Option<f64>,
    /// Moving average of how long its completed generations held a slot:
    /// their prefill at the node's rate, then first token to last.
    pub mean_generation_secs: Option<f64>,
    /// Moving average of the time from first token to last of its
    /// completed generations.
    pub mean_decode_secs: Option<f64>,
    /// Cached blocks the index holds for it.
    pub indexed_blocks: usize,
}

/// A generation routed to a node and not finished.
#[derive(Debug)]
struct Open {
    /// Its uncached prompt tokens, counted in the node's pending prefill
    /// until the first token arrives.
    uncached: u64,
    /// When its first token arrived.
    first_token: Option<Instant>,
}

/// What the router records for one node.
#[derive(Debug)]
struct NodeRecord {
    slots: u32,
    /// Unfinished generations by ticket id: whether each still awaits its
    /// first token, and its uncached prompt tokens. Ordered by id, so the
    /// slot wait reads them oldest first and a seeded simulation decides
    /// the same way on every run.
    open: BTreeMap<u64, Open>,
    pending_prefill: u64,
    running: u32,
    queued: u32,
    queued_prompt_tokens: u64,
    prefill_rate: Option<f64>,
    decode_rate: Option<f64>,
    mean_generation_secs: Option<f64>,
    mean_decode_secs: Option<f64>,
}

impl NodeRecord {
    fn new(slots: u32) -> Self {
        Self {
            slots,
            open: BTreeMap::new(),
            pending_prefill: 0,
            running: 0,
            queued: 0,
            queued_prompt_tokens: 0,
            prefill_rate: None,
            decode_rate: None,
            mean_generation_secs: None,
            mean_decode_secs: None,
        }
    }

    fn in_flight(&self) -> u32 {
        u32::try_from(self.open.len()).unwrap_or(u32::MAX)
    }

    fn view(&self, key: NodeKey, now: Instant) -> NodeView {
        NodeView {
            key,
            slots: self.slots,
            in_flight: self.in_flight(),
            pending_prefill_tokens: self.pending_prefill,
            prefill_tokens_per_sec: self.prefill_rate.unwrap_or(0.0),
            decode_tokens_per_sec: self.decode_rate.unwrap_or(0.0),
            mean_decode_secs: self.mean_decode_secs.unwrap_or(0.0),
            // Only a full node's slot wait needs them: no allocation per
            // node and decision otherwise.
            decoding_secs: if self.in_flight() < self.slots.max(1) {
                Vec::new()
            } else {
                self.open
                    .values()
                    .filter_map(|o| o.first_token)
                    .map(|t| now.saturating_duration_since(t).as_secs_f64())
                    .collect()
            },
        }
    }
}

/// The routing state of one head: block index, per-node load and policy.
#[derive(Debug)]
pub struct Router {
    policy: RoutePolicy,
    state: RouterState,
    index: BlockIndex,
    nodes: HashMap<NodeKey, NodeRecord>,
    next_ticket: u64,
}

impl Router {
    /// A router with no nodes; `seed` seeds the random policy.
    pub fn new(policy: RoutePolicy, seed: u64) -> Self {
        Self {
            policy,
            state: RouterState::new(seed),
            index: BlockIndex::new(),
            nodes: HashMap::new(),
            next_ticket: 0,
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> RoutePolicy {
        self.policy
    }

    /// Changes the policy for later decisions.
    pub fn set_policy(&mut self, policy: RoutePolicy) {
        self.policy = policy;
    }

    /// The block index.
    pub fn index(&self) -> &BlockIndex {
        &self.index
    }

    /// Makes `key` a node with `slots` slots. For a node already known, only
    /// its slot count changes.
    pub fn add_node(&mut self, key: NodeKey, slots: u32) {
        self.nodes
            .entry(key)
            .and_modify(|r| r.slots = slots)
            .or_insert_with(|| NodeRecord::new(slots));
    }

    /// Caps what the index keeps for `key` to what the models it described
    /// can hold; see [`BlockIndex::describe_node`].
    pub fn describe_node(&mut self, key: NodeKey, models: &[ModelDescription]) {
        self.index.describe_node(key, models);
    }

    /// Forgets `key`: its cached blocks and its load. Its outstanding
    /// tickets become no-ops, even if the same key is added again.
    pub fn remove_node(&mut self, key: NodeKey) {
        self.nodes.remove(&key);
        self.index.remove_node(key);
    }

    /// Replays a node's cache changes into the index; ignored for nodes not
    /// added.
    pub fn apply_kv(&mut self, key: NodeKey, update: &KvUpdate) {
        if self.nodes.contains_key(&key) {
            self.index.apply(key, update);
        }
    }

    /// Records a node's load report: its measured rates (those that are
    /// measured) and, for display, its running, queued and queued prompt
    /// tokens. A node serving several models keeps its latest report.
    pub fn apply_load(&mut self, key: NodeKey, report: &LoadReport) {
        let Some(record) = self.nodes.get_mut(&key) else {
            return;
        };
        let rate = |x: f32| {
            let x = f64::from(x);
            (x.is_finite() && x > 0.0).then_some(x)
        };
        if let Some(r) = rate(report.prefill_tokens_per_sec) {
            record.prefill_rate = Some(r);
        }
        if let Some(r) = rate(report.decode_tokens_per_sec) {
            record.decode_rate = Some(r);
        }
        record.running = report.running;
        record.queued = report.queued;
        record.queued_prompt_tokens = report.queued_prompt_tokens;
    }

    /// Picks a node among `candidates` (keys not added are skipped) for a
    /// generation of `model` with token ids `prompt`, and records it as in
    /// flight there, dispatched at `now`. `None` if no candidate is known.
    pub fn route(
        &mut self,
        model: &str,
        prompt: &[u32],
        candidates: &[NodeKey],
        now: Instant,
    ) -> Option<Routed> {
        let blocks = block_hashes(model_seed(model), prompt);
        let views: Vec<NodeView> = candidates
            .iter()
            .filter_map(|&key| self.nodes.get(&key).map(|r| r.view(key, now)))
            .collect();
        let request = RouteRequest {
            blocks: &blocks,
            prompt_tokens: prompt.len(),
        };
        let decision = route(self.policy, &request, &views, &self.index, &mut self.state)?;
        let key = views.get(decision.index)?.key;
        let record = self.nodes.get_mut(&key)?;
        let uncached = prompt.len().saturating_sub(decision.cached_tokens) as u64;
        let id = self.next_ticket;
        self.next_ticket += 1;
        record.open.insert(
            id,
            Open {
                uncached,
                first_token: None,
            },
        );
        record.pending_prefill += uncached;
        Some(Routed {
            node: key,
            slot: decision.slot,
            cached_tokens: decision.cached_tokens,
            predicted_ttft_secs: decision.predicted_ttft_secs,
            reason: decision.reason,
            ticket: Ticket {
                node: key,
                id,
                uncached_tokens: uncached,
                dispatched: now,
            },
        })
    }

    /// The generation produced its first token at `now`: its prompt no
    /// longer delays its node's queue. Calling it again for a ticket does
    /// nothing.
    pub fn first_token(&mut self, ticket: &Ticket, now: Instant) {
        let Some(record) = self.nodes.get_mut(&ticket.node) else {
            return;
        };
        if let Some(open) = record.open.get_mut(&ticket.id) {
            if open.first_token.is_none() {
                open.first_token = Some(now);
                record.pending_prefill = record.pending_prefill.saturating_sub(open.uncached);
            }
        }
    }

    /// The generation ended at `now`. If it `completed` (it was not
    /// cancelled and did not fail), the time it held a slot updates the
    /// node's mean generation time.
    pub fn finished(&mut self, ticket: Ticket, completed: bool, now: Instant) {
        let Some(record) = self.nodes.get_mut(&ticket.node) else {
            return;
        };
        let Some(open) = record.open.remove(&ticket.id) else {
            return;
        };
        let Some(first_token) = open.first_token else {
            record.pending_prefill = record.pending_prefill.saturating_sub(open.uncached);
            return;
        };
        if completed {
            // How long the generation held a slot: its prefill, at the
            // node's rate, and its decoding. Time queued before it is the
            // queue's, which the prediction counts separately.
            let prefill = open.uncached as f64
                / record
                    .prefill_rate
                    .unwrap_or(super::DEFAULT_PREFILL_TOKENS_PER_SEC);
            let decode = now.saturating_duration_since(first_token).as_secs_f64();
            record.mean_generation_secs = Some(ewma(record.mean_generation_secs, decode + prefill));
            record.mean_decode_secs = Some(ewma(record.mean_decode_secs, decode));
        }
    }

    /// Generations routed to `key` and not finished (0 for a node not
    /// added).
    pub fn in_flight(&self, key: NodeKey) -> u32 {
        self.nodes.get(&key).map_or(0, NodeRecord::in_flight)
    }

    /// Every node's load, ordered by key.
    pub fn nodes(&self) -> Vec<NodeLoad> {
        let mut loads: Vec<NodeLoad> = self
            .nodes
            .iter()
            .map(|(&key, r)| self.load_of(key, r))
            .collect();
        loads.sort_unstable_by_key(|l| l.key);
        loads
    }

    /// The load of `key`, if it was added.
    pub fn load(&self, key: NodeKey) -> Option<NodeLoad> {
        self.nodes.get(&key).map(|r| self.load_of(key, r))
    }

    fn load_of(&self, key: NodeKey, r: &NodeRecord) -> NodeLoad {
        NodeLoad {
            key,
            slots: r.slots,
            in_flight: r.in_flight(),
            pending_prefill_tokens: r.pending_prefill,
            reported_running: r.running,
            reported_queued: r.queued,
            reported_queued_prompt_tokens: r.queued_prompt_tokens,
            prefill_tokens_per_sec: r.prefill_rate,
            decode_tokens_per_sec: r.decode_rate,
            mean_generation_secs: r.mean_generation_secs,
            mean_decode_secs: r.mean_decode_secs,
            indexed_blocks: self.index.node_blocks(key),
        }
    }
}

/// `mean` moved towards `sample` by [`EWMA_ALPHA`], or `sample` if there is
/// no mean yet.
fn ewma(mean: Option<f64>, sample: f64) -> f64 {
    match mean {
        Some(mean) => mean + EWMA_ALPHA * (sample - mean),
        None => sample,
    }
}
