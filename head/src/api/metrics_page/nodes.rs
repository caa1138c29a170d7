//! The node families of the metrics page, read from the fleet at scrape
//! time: what the head knows of each connected node now. Nothing here is
//! kept between scrapes, so a node that left is gone from the next one.

use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use superfluid_proto::{BLOCK_TOKENS, PROTOCOL_VERSION};

use crate::fleet::{NodeSnapshot, NodeState};

type Figure = (
    &'static str,
    &'static str,
    MetricType,
    fn(&NodeSnapshot) -> Option<f64>,
);

/// One family per node figure, one sample per connected node that has it.
const FIGURES: [Figure; 13] = [
    (
        "superfluid_node_slots",
        "Sequences the node runs at once.",
        MetricType::GAUGE,
        |n| Some(f64::from(n.slots)),
    ),
    (
        "superfluid_node_busy_slots",
        "Slots running a sequence, as the node last reported.",
        MetricType::GAUGE,
        |n| Some(f64::from(n.load.busy_slots)),
    ),
    (
        "superfluid_node_in_flight",
        "Generations the head has sent to the node that have not ended.",
        MetricType::GAUGE,
        |n| Some(f64::from(n.in_flight)),
    ),
    (
        "superfluid_node_queued",
        "Sequences waiting for a slot on the node, as it last reported.",
        MetricType::GAUGE,
        |n| Some(f64::from(n.load.queued)),
    ),
    (
        "superfluid_node_queue_depth",
        "Generations the head has sent to the node beyond its slots: waiting in its queue, bounded by --max-queue.",
        MetricType::GAUGE,
        |n| Some(f64::from(n.in_flight.saturating_sub(n.slots.max(1)))),
    ),
    (
        "superfluid_node_queued_prompt_tokens",
        "Prompt tokens the node still has to compute, queued or prefilling, as it last reported.",
        MetricType::GAUGE,
        |n| Some(n.load.queued_prompt_tokens as f64),
    ),
    (
        "superfluid_node_kv_cells",
        "KV cache cells (tokens) the node holds: its slots times their context.",
        MetricType::GAUGE,
        |n| Some(kv_cells(n)),
    ),
    (
        "superfluid_node_kv_cells_used",
        "KV cache cells holding prompt blocks the head's index knows of (whole blocks of cached prompts).",
        MetricType::GAUGE,
        |n| Some(((n.load.cached_blocks * BLOCK_TOKENS) as f64).min(kv_cells(n))),
    ),
    (
        "superfluid_node_cached_blocks",
        "Prompt blocks the head's index knows the node holds in KV cache.",
        MetricType::GAUGE,
        |n| Some(n.load.cached_blocks as f64),
    ),
    (
        "superfluid_node_prefill_tokens_per_second",
        "The node's measured prompt processing speed.",
        MetricType::GAUGE,
        |n| n.load.prefill_tokens_per_sec,
    ),
    (
        "superfluid_node_decode_tokens_per_second",
        "The node's measured generation speed of one stream.",
        MetricType::GAUGE,
        |n| n.load.decode_tokens_per_sec,
    ),
    (
        "superfluid_node_link_rtt_seconds",
        "Link F's current estimate of the round-trip time to the node.",
        MetricType::GAUGE,
        |n| Some(n.link_rtt.as_secs_f64()),
    ),
    (
        "superfluid_node_generations_served_total",
        "Generations the node finished since it connected (starts again at 0 when it reconnects).",
        MetricType::COUNTER,
        |n| Some(n.served as f64),
    ),
];

const STATES: &str = "superfluid_nodes";
const INFO: &str = "superfluid_node_info";

/// The names of every node family, whether or not a node is connected.
pub fn names() -> impl Iterator<Item = &'static str> {
    [STATES, INFO]
        .into_iter()
        .chain(FIGURES.iter().map(|(name, ..)| *name))
}

/// The node families for `nodes` (those connected, and any enrolled but
/// down); a family no node has a sample for is left out.
pub fn families(nodes: &[NodeSnapshot]) -> Vec<MetricFamily> {
    let connected: Vec<&NodeSnapshot> = nodes
        .iter()
        .filter(|n| n.state != NodeState::Down)
        .collect();
    let mut out = vec![states(nodes), info(&connected)];
    for (name, help, kind, get) in FIGURES {
        let samples = connected
            .iter()
            .filter_map(|n| get(n).map(|v| sample(node_labels(n), kind, v)))
            .collect();
        out.push(family(name, help, kind, samples));
    }
    out.retain(|f| !f.get_metric().is_empty());
    out
}

fn kv_cells(n: &NodeSnapshot) -> f64 {
    n.models
        .iter()
        .map(|m| f64::from(m.slots) * f64::from(m.ctx))
        .sum()
}

/// Nodes by state; every state is listed, at 0 if no node is in it.
fn states(nodes: &[NodeSnapshot]) -> MetricFamily {
    let samples = [NodeState::Up, NodeState::Draining, NodeState::Down]
        .into_iter()
        .map(|state| {
            let count = nodes.iter().filter(|n| n.state == state).count();
            sample(
                vec![pair("state", state.as_str())],
                MetricType::GAUGE,
                count as f64,
            )
        })
        .collect();
    family(
        STATES,
        "Nodes by state: up, draining (finishing its generations, taking no new ones), down (enrolled, not connected).",
        MetricType::GAUGE,
        samples,
    )
}

/// What the head knows of each connected node, as labels of a constant 1.
fn info(nodes: &[&NodeSnapshot]) -> MetricFamily {
    let version = PROTOCOL_VERSION.to_string();
    let samples = nodes
        .iter()
        .map(|n| {
            let models: Vec<&str> = n.models.iter().map(|m| m.id.as_str()).collect();
            let mut labels = node_labels(n);
            labels.push(pair("address", &n.address.to_string()));
            labels.push(pair("models", &models.join(",")));
            labels.push(pair("hardware", &n.hardware));
            labels.push(pair("protocol_version", &version));
            sample(labels, MetricType::GAUGE, 1.0)
        })
        .collect();
    family(
        INFO,
        "A connected node: its name, id, address, models, hardware and Link F protocol version, as labels; always 1.",
        MetricType::GAUGE,
        samples,
    )
}

fn node_labels(n: &NodeSnapshot) -> Vec<LabelPair> {
    vec![pair("node", &n.name), pair("node_id", &n.node_id)]
}

fn pair(name: &str, value: &str) -> LabelPair {
    let mut pair = LabelPair::default();
    pair.set_name(name.to_owned());
    pair.set_value(value.to_owned());
    pair
}

fn sample(labels: Vec<LabelPair>, kind: MetricType, value: f64) -> Metric {
    let mut metric = Metric::from_label(labels);
    if kind == MetricType::COUNTER {
        let mut counter = Counter::default();
        counter.set_value(value);
        metric.set_counter(counter);
    } else {
        let mut gauge = Gauge::default();
        gauge.set_value(value);
        metric.set_gauge(gauge);
    }
    metric
}

/// A family of `samples`.
pub fn family(name: &str, help: &str, kind: MetricType, samples: Vec<Metric>) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(name.to_owned());
    family.set_help(help.to_owned());
    family.set_field_type(kind);
    family.set_metric(samples);
    family
}

/// `sample` for callers beside this one (the join refusals).
pub fn counter_sample(labels: &[(&str, &str)], value: f64) -> Metric {
    let labels = labels.iter().map(|(k, v)| pair(k, v)).collect();
    sample(labels, MetricType::COUNTER, value)
}
