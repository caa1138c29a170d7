//! `GET /v1/fleet`: the fleet at a glance, for the status page and
//! `superfluid top`. Each node's state, models, load and speed, and the
//! last requests the head answered. It holds no secrets: no keys, no key
//! names, no addresses, no prompts.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use superfluid_proto::BLOCK_TOKENS;

use super::auth::{self, Caller};
use super::recent::{Recent, RecentRequest};
use super::AppState;
use crate::fleet::{NodeSnapshot, NodeState};

/// The answer of `GET /v1/fleet`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FleetView {
    /// The head's version.
    pub version: String,
    /// The routing policy, as `--route` names it.
    pub policy: String,
    /// The models the head serves.
    pub models: Vec<String>,
    /// The connected nodes, in the order they joined, then the enrolled
    /// ones that are down.
    pub nodes: Vec<NodeView>,
    /// The last requests answered, newest first.
    pub recent: Vec<RecentRequest>,
}

/// One node's state, load and speed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeView {
    /// The id the head gave its connection (empty while it is down).
    pub id: String,
    /// Its name.
    pub name: String,
    /// `up`, `draining` or `down`.
    pub state: String,
    /// The models it serves.
    pub models: Vec<String>,
    /// The memory each of those models takes on it, in the same order.
    #[serde(default)]
    pub model_memory: Vec<ModelMemory>,
    /// Its machine (CPU, RAM, GPU backend) as it described it; empty if
    /// unknown.
    #[serde(default)]
    pub hardware: String,
    /// Slots running a sequence, as it last reported.
    pub slots_busy: u32,
    /// Sequences it runs at once.
    pub slots: u32,
    /// Generations the head sent it that have not ended.
    pub in_flight: u32,
    /// Sequences waiting on it for a slot.
    pub queued: u32,
    /// Prompt tokens it still has to compute.
    pub queued_prompt_tokens: u64,
    /// KV cache cells (tokens) holding prompt blocks the head knows of.
    pub kv_cells_used: u64,
    /// KV cache cells it holds: its slots times their context.
    pub kv_cells: u64,
    /// Measured prompt tokens per second; `None` until measured.
    pub prefill_tokens_per_sec: Option<f64>,
    /// Measured tokens per second of one generation; `None` until measured.
    pub decode_tokens_per_sec: Option<f64>,
    /// Generations it finished since it connected.
    pub served: u64,
    /// Seconds since it connected (0 while it is down).
    pub connected_secs: u64,
}

/// The memory one model takes on a node, as the node measured it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelMemory {
    /// The model id.
    pub id: String,
    /// The type of its KV cache (`f16`, `q8_0`, `q4_0`); empty if unknown
    /// or the model keeps no KV cache (an embedding model).
    pub kv_cache_type: String,
    /// Bytes its KV cache takes for all its slots at full context; 0 if
    /// unknown or it keeps none.
    pub kv_bytes: u64,
}

impl NodeView {
    /// What the view shows of `node`.
    pub fn new(node: &NodeSnapshot) -> NodeView {
        let kv_cells: u64 = node
            .models
            .iter()
            .map(|m| u64::from(m.slots) * u64::from(m.ctx))
            .sum();
        let cached = u64::try_from(node.load.cached_blocks * BLOCK_TOKENS).unwrap_or(u64::MAX);
        let connected_secs = match node.state {
            NodeState::Down => 0,
            _ => SystemTime::now()
                .duration_since(node.connected_since)
                .map_or(0, |d| d.as_secs()),
        };
        NodeView {
            id: node.node_id.clone(),
            name: node.name.clone(),
            state: node.state.as_str().to_owned(),
            models: node.models.iter().map(|m| m.id.clone()).collect(),
            model_memory: node
                .models
                .iter()
                .map(|m| ModelMemory {
                    id: m.id.clone(),
                    kv_cache_type: m.kv_cache_type.clone(),
                    kv_bytes: m.kv_bytes,
                })
                .collect(),
            hardware: node.hardware.clone(),
            slots_busy: node.load.busy_slots,
            slots: node.slots,
            in_flight: node.in_flight,
            queued: node.load.queued,
            queued_prompt_tokens: node.load.queued_prompt_tokens,
            kv_cells_used: cached.min(kv_cells),
            kv_cells,
            prefill_tokens_per_sec: node.load.prefill_tokens_per_sec,
            decode_tokens_per_sec: node.load.decode_tokens_per_sec,
            served: node.served,
            connected_secs,
        }
    }
}

/// `GET /v1/fleet`. A key limited to some models sees only those: in the
/// head's and the nodes' model lists and in the recent requests.
pub async fn fleet(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    recent: Option<Extension<Arc<Recent>>>,
) -> Json<FleetView> {
    let visible = |model: &str| auth::may_list(caller.as_ref(), model);
    // With a membership, enrolled nodes that are not connected show as down.
    let nodes = match state.fleet.membership() {
        Some(_) => state.fleet.roster(),
        None => state.fleet.nodes(),
    };
    Json(FleetView {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        policy: state.fleet.policy().as_str().to_owned(),
        models: state
            .catalog
            .ids()
            .into_iter()
            .filter(|m| visible(m))
            .collect(),
        nodes: nodes
            .iter()
            .map(|node| {
                let mut view = NodeView::new(node);
                view.models.retain(|m| visible(m));
                view.model_memory.retain(|m| visible(&m.id));
                view
            })
            .collect(),
        recent: recent
            .map(|Extension(r)| r.list())
            .unwrap_or_default()
            .into_iter()
            .filter(|r| visible(&r.model))
            .collect(),
    })
}

#[cfg(test)]
mod tests;
