//! Prometheus metrics of the head: routing decisions, prompt tokens served
//! from cache, and each connected node's load and measured speed.
//!
//! Counters are plain atomics updated on the request path; [`render`] writes
//! them, with the fleet's gauges, in the Prometheus text exposition format
//! for `GET /metrics`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fleet::{Fleet, NodeSnapshot};
use crate::routing::{Reason, RoutePolicy};

/// The head's counters. One per fleet; cheap to update from any thread.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Decisions by policy (index into [`RoutePolicy::ALL`]) and reason
    /// (index into [`Reason::ALL`]).
    decisions: [[AtomicU64; Reason::ALL.len()]; RoutePolicy::ALL.len()],
    predicted_cached_tokens: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generations: AtomicU64,
    failed_generations: AtomicU64,
    retried_generations: AtomicU64,
}

fn position<T: PartialEq>(all: &[T], item: &T) -> usize {
    all.iter().position(|x| x == item).unwrap_or(0)
}

impl Metrics {
    /// Counts one routing decision and the prompt tokens it expected cached.
    pub fn record_route(&self, policy: RoutePolicy, reason: Reason, predicted_cached: usize) {
        let p = position(&RoutePolicy::ALL, &policy);
        let r = position(&Reason::ALL, &reason);
        self.decisions[p][r].fetch_add(1, Ordering::Relaxed);
        self.predicted_cached_tokens
            .fetch_add(predicted_cached as u64, Ordering::Relaxed);
    }

    /// Counts a generation that finished on a node, with its prompt's size
    /// and how much of it was already in the node's cache.
    pub fn record_finished(&self, prompt_tokens: u32, cached_tokens: u32) {
        self.generations.fetch_add(1, Ordering::Relaxed);
        self.prompt_tokens
            .fetch_add(u64::from(prompt_tokens), Ordering::Relaxed);
        self.cached_tokens
            .fetch_add(u64::from(cached_tokens), Ordering::Relaxed);
    }

    /// Counts a generation that failed on a node or lost its node.
    pub fn record_failed(&self) {
        self.failed_generations.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a generation sent to another node because its node was lost
    /// before the first token.
    pub fn record_retried(&self) {
        self.retried_generations.fetch_add(1, Ordering::Relaxed);
    }

    /// Generations sent to another node so far.
    pub fn retried(&self) -> u64 {
        self.retried_generations.load(Ordering::Relaxed)
    }

    /// Decisions so far with this policy and reason.
    pub fn decisions(&self, policy: RoutePolicy, reason: Reason) -> u64 {
        let p = position(&RoutePolicy::ALL, &policy);
        let r = position(&Reason::ALL, &reason);
        self.decisions[p][r].load(Ordering::Relaxed)
    }
}

/// Escapes a label value for the text format.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The metrics page: the fleet's counters and a gauge family per node figure.
pub fn render(fleet: &Fleet) -> String {
    let m = fleet.metrics();
    let mut out = String::with_capacity(4096);
    let name = "superfluid_route_decisions_total";
    family(
        &mut out,
        name,
        "counter",
        "Generations routed, by policy and the reason for the node chosen.",
    );
    for (p, policy) in RoutePolicy::ALL.iter().enumerate() {
        for (r, reason) in Reason::ALL.iter().enumerate() {
            let n = m.decisions[p][r].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}{{policy=\"{policy}\",reason=\"{}\"}} {n}",
                reason.as_str()
            );
        }
    }
    let counters = [
        (
            "superfluid_route_predicted_cached_tokens_total",
            "Prompt tokens the router expected the chosen nodes to hold in cache.",
            &m.predicted_cached_tokens,
        ),
        (
            "superfluid_prompt_tokens_total",
            "Prompt tokens of generations that finished.",
            &m.prompt_tokens,
        ),
        (
            "superfluid_cached_prompt_tokens_total",
            "Prompt tokens nodes found in their KV cache and did not compute again.",
            &m.cached_tokens,
        ),
        (
            "superfluid_generations_total",
            "Generations that finished on a node.",
            &m.generations,
        ),
        (
            "superfluid_generations_failed_total",
            "Generations that failed on a node or lost their node.",
            &m.failed_generations,
        ),
        (
            "superfluid_generations_retried_total",
            "Generations sent to another node because theirs was lost before the first token.",
            &m.retried_generations,
        ),
    ];
    for (name, help, value) in counters {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
    }
    let nodes = fleet.nodes();
    family(&mut out, "superfluid_nodes", "gauge", "Connected nodes.");
    let _ = writeln!(out, "superfluid_nodes {}", nodes.len());
    node_gauges(&mut out, &nodes);
    out
}

type Gauge = (&'static str, &'static str, fn(&NodeSnapshot) -> Option<f64>);

/// One family per node figure, one sample per node that has it.
fn node_gauges(out: &mut String, nodes: &[NodeSnapshot]) {
    let gauges: [Gauge; 7] = [
        (
            "superfluid_node_slots",
            "Sequences the node runs at once.",
            |n| Some(f64::from(n.slots)),
        ),
        (
            "superfluid_node_in_flight",
            "Generations the head has sent to the node that have not ended.",
            |n| Some(f64::from(n.in_flight)),
        ),
        (
            "superfluid_node_busy_slots",
            "Slots running a sequence, as the node last reported.",
            |n| Some(f64::from(n.load.busy_slots)),
        ),
        (
            "superfluid_node_queued",
            "Requests waiting for a slot on the node, as it last reported.",
            |n| Some(f64::from(n.load.queued)),
        ),
        (
            "superfluid_node_prefill_tokens_per_second",
            "The node's measured prompt processing speed.",
            |n| n.load.prefill_tokens_per_sec,
        ),
        (
            "superfluid_node_decode_tokens_per_second",
            "The node's measured generation speed of one stream.",
            |n| n.load.decode_tokens_per_sec,
        ),
        (
            "superfluid_node_cached_blocks",
            "Prompt blocks the head's index knows the node holds in KV cache.",
            |n| Some(n.load.cached_blocks as f64),
        ),
    ];
    for (name, help, get) in gauges {
        family(out, name, "gauge", help);
        for n in nodes {
            if let Some(v) = get(n) {
                let _ = writeln!(
                    out,
                    "{name}{{node=\"{}\",node_id=\"{}\"}} {v}",
                    label(&n.name),
                    label(&n.node_id)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn decisions_are_counted_by_policy_and_reason() {
        let m = Metrics::default();
        m.record_route(RoutePolicy::LeastTtft, Reason::Warm, 64);
        m.record_route(RoutePolicy::LeastTtft, Reason::Warm, 32);
        m.record_route(RoutePolicy::RoundRobin, Reason::RoundRobin, 0);
        assert_eq!(m.decisions(RoutePolicy::LeastTtft, Reason::Warm), 2);
        assert_eq!(m.decisions(RoutePolicy::LeastTtft, Reason::Cold), 0);
        assert_eq!(m.decisions(RoutePolicy::RoundRobin, Reason::RoundRobin), 1);
        assert_eq!(m.predicted_cached_tokens.load(Ordering::Relaxed), 96);
    }

    #[test]
    fn the_page_has_every_family_with_help_and_type() {
        let fleet = Fleet::new();
        fleet
            .metrics()
            .record_route(RoutePolicy::LeastTtft, Reason::Cold, 0);
        fleet.metrics().record_finished(100, 64);
        let page = render(&fleet);
        assert!(page.contains(
            "superfluid_route_decisions_total{policy=\"least-ttft\",reason=\"cold\"} 1\n"
        ));
        assert!(page.contains("superfluid_prompt_tokens_total 100\n"));
        assert!(page.contains("superfluid_cached_prompt_tokens_total 64\n"));
        assert!(page.contains("superfluid_nodes 0\n"));
        for line in page.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            assert!(
                page.contains(&format!("# TYPE {name} ")),
                "{name} has no TYPE line"
            );
        }
    }
}
