//! The head's counters and histograms: requests by endpoint, model and
//! status, latencies by model, prompt and generated tokens, routing
//! decisions, retries, reconnects and refused connections.
//!
//! They live in one [`prometheus::Registry`] the request path and the fleet
//! update; they know nothing of the fleet. The page `GET /metrics` serves
//! adds each connected node's gauges, read from the fleet at scrape time, and
//! is written above the fleet, in [`crate::api::metrics_page`].
//!
//! Label values stay bounded: models are the served ids (or empty when the
//! request named none the head serves), endpoints the router's fixed routes,
//! status codes numbers, nodes the fleet's names.

use std::collections::HashSet;
use std::sync::Mutex;
use superfluid_link::sync::lock;

use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};

use crate::routing::{Reason, RoutePolicy};
pub use failover::FailoverMetrics;

mod failover;

mod overload;
mod transfer;
pub use overload::{OverloadMetrics, Refusal};
pub use transfer::{TransferMetrics, TransferOutcome, Transport};

/// Buckets (seconds) for time to first token, request duration and queue
/// wait: a cached prompt's first token in milliseconds, a long prompt on a
/// CPU in tens of seconds, a long answer in minutes.
pub const LATENCY_BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
];

/// Buckets (seconds) for the time between two generated tokens: a GPU's
/// few milliseconds to a loaded CPU's second.
pub const INTER_TOKEN_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Why the head closed a node's connection before it joined, other than
/// the membership's refusals (which the membership counts itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRefusal {
    /// The TLS handshake failed (its key is not authorised, or it is not a
    /// node).
    Handshake,
    /// No valid hello arrived in time.
    Hello,
    /// The node speaks another protocol version.
    Version,
}

impl LinkRefusal {
    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkRefusal::Handshake => "handshake",
            LinkRefusal::Hello => "hello",
            LinkRefusal::Version => "version",
        }
    }
}

/// One model's latency histograms, looked up once per generation.
#[derive(Debug, Clone)]
pub struct Latency {
    /// From the request's arrival to its first generated token.
    pub ttft: Histogram,
    /// Between consecutive generated tokens.
    pub inter_token: Histogram,
    /// From the request's arrival to the generation's end.
    pub duration: Histogram,
    /// From the request's arrival until a node's stream carries it.
    pub queue: Histogram,
}

/// The head's counters and histograms. One per fleet; cheap to update from
/// any thread.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    decisions: IntCounterVec,
    predicted_cached_tokens: IntCounter,
    prompt_tokens: IntCounterVec,
    generated_tokens: IntCounterVec,
    generations: IntCounter,
    failed_generations: IntCounter,
    retried_generations: IntCounter,
    ttft: HistogramVec,
    inter_token: HistogramVec,
    duration: HistogramVec,
    queue: HistogramVec,
    reconnects: IntCounterVec,
    link_refusals: IntCounterVec,
    /// Requests refused with 429 and generations cancelled on their node.
    pub overload: OverloadMetrics,
    /// Generations moved off lost or stalled nodes.
    pub failover: FailoverMetrics,
    /// Model files sent to nodes.
    pub transfer: TransferMetrics,
    /// Node names that have joined, to tell a reconnect from a first join.
    joined: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Registers `collector` and hands it back. The names and labels are
/// constants of this file, each registered once, so this cannot fail; the
/// metrics tests build a [`Metrics`] to prove it.
fn registered<C: Collector + Clone + 'static>(registry: &Registry, collector: C) -> C {
    registry
        .register(Box::new(collector.clone()))
        .expect("metric names are constant and registered once");
    collector
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("a constant, valid metric name");
    registered(registry, c)
}

fn counters(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("a constant, valid name");
    registered(registry, c)
}

fn histograms(registry: &Registry, name: &str, help: &str, buckets: &[f64]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    let h = HistogramVec::new(opts, &["model"]).expect("a constant, valid name");
    registered(registry, h)
}

impl Default for Metrics {
    fn default() -> Self {
        let r = Registry::new();
        let decisions = counters(
            &r,
            "superfluid_route_decisions_total",
            "Generations routed, by policy and the reason for the node chosen.",
            &["policy", "reason"],
        );
        // Every policy and reason is listed from the start, at 0.
        for policy in RoutePolicy::ALL {
            for reason in Reason::ALL {
                decisions.with_label_values(&[policy.to_string().as_str(), reason.as_str()]);
            }
        }
        Metrics {
            requests: counters(
                &r,
                "superfluid_http_requests_total",
                "HTTP requests answered, by endpoint (route), model and status code.",
                &["endpoint", "model", "code"],
            ),
            decisions,
            predicted_cached_tokens: counter(
                &r,
                "superfluid_route_predicted_cached_tokens_total",
                "Prompt tokens the router expected the chosen nodes to hold in cache.",
            ),
            prompt_tokens: counters(
                &r,
                "superfluid_prompt_tokens_total",
                "Prompt tokens of generations that finished, by model and source: cached (found in the node's KV cache) or computed.",
                &["model", "source"],
            ),
            generated_tokens: counters(
                &r,
                "superfluid_generated_tokens_total",
                "Tokens generated, by node and model, counted as they arrive.",
                &["node", "model"],
            ),
            generations: counter(
                &r,
                "superfluid_generations_total",
                "Generations that finished on a node.",
            ),
            failed_generations: counter(
                &r,
                "superfluid_generations_failed_total",
                "Generations that failed on a node or lost their node.",
            ),
            retried_generations: counter(
                &r,
                "superfluid_generations_retried_total",
                "Generations sent to another node because theirs was lost before the first token.",
            ),
            ttft: histograms(
                &r,
                "superfluid_time_to_first_token_seconds",
                "Seconds from a request's arrival at the head to its first generated token, by model.",
                &LATENCY_BUCKETS,
            ),
            inter_token: histograms(
                &r,
                "superfluid_inter_token_latency_seconds",
                "Seconds between consecutive generated tokens of a generation, by model.",
                &INTER_TOKEN_BUCKETS,
            ),
            duration: histograms(
                &r,
                "superfluid_request_duration_seconds",
                "Seconds from a generation request's arrival at the head to its end, by model.",
                &LATENCY_BUCKETS,
            ),
            queue: histograms(
                &r,
                "superfluid_queue_wait_seconds",
                "Seconds from a request's arrival until a node's stream carries it (tokenizing, routing, dispatch), by model.",
                &LATENCY_BUCKETS,
            ),
            reconnects: counters(
                &r,
                "superfluid_node_reconnects_total",
                "Times a node joined again under a name that had joined before.",
                &["node"],
            ),
            link_refusals: counters(
                &r,
                "superfluid_node_connection_refusals_total",
                "Node connections closed before joining: failed TLS handshake, no valid hello, another protocol version.",
                &["reason"],
            ),
            overload: OverloadMetrics::new(&r),
            failover: FailoverMetrics::new(&r),
            transfer: TransferMetrics::new(&r),
            registry: r,
            joined: Mutex::default(),
        }
    }
}

impl Metrics {
    /// Counts one HTTP response.
    pub fn record_request(&self, endpoint: &str, model: &str, code: u16) {
        let code = code.to_string();
        self.requests
            .with_label_values(&[endpoint, model, code.as_str()])
            .inc();
    }

    /// Counts one routing decision and the prompt tokens it expected cached.
    pub fn record_route(&self, policy: RoutePolicy, reason: Reason, predicted_cached: usize) {
        self.decisions
            .with_label_values(&[policy.to_string().as_str(), reason.as_str()])
            .inc();
        self.predicted_cached_tokens.inc_by(predicted_cached as u64);
    }

    /// Counts a generation of `model` that finished on a node, with its
    /// prompt's size and how much of it was already in the node's cache.
    pub fn record_finished(&self, model: &str, prompt_tokens: u32, cached_tokens: u32) {
        self.generations.inc();
        let cached = cached_tokens.min(prompt_tokens);
        self.prompt_tokens
            .with_label_values(&[model, "cached"])
            .inc_by(u64::from(cached));
        self.prompt_tokens
            .with_label_values(&[model, "computed"])
            .inc_by(u64::from(prompt_tokens - cached));
    }

    /// The counter of tokens `node` generates for `model`.
    pub fn generated_tokens(&self, node: &str, model: &str) -> IntCounter {
        self.generated_tokens.with_label_values(&[node, model])
    }

    /// Counts a generation that failed on a node or lost its node.
    pub fn record_failed(&self) {
        self.failed_generations.inc();
    }

    /// Counts a generation sent to another node because its node was lost
    /// before the first token.
    pub fn record_retried(&self) {
        self.retried_generations.inc();
    }

    /// `model`'s latency histograms.
    pub fn latency(&self, model: &str) -> Latency {
        Latency {
            ttft: self.ttft.with_label_values(&[model]),
            inter_token: self.inter_token.with_label_values(&[model]),
            duration: self.duration.with_label_values(&[model]),
            queue: self.queue.with_label_values(&[model]),
        }
    }

    /// Counts a node named `name` joining; a name seen before is a reconnect.
    pub fn record_join(&self, name: &str) {
        let mut joined = lock(&self.joined);
        let counter = self.reconnects.with_label_values(&[name]);
        if !joined.insert(name.to_owned()) {
            counter.inc();
        }
    }

    /// Counts a node connection closed before it joined.
    pub fn record_link_refusal(&self, reason: LinkRefusal) {
        self.link_refusals
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    /// Every family with at least one series, as the exposition writes them.
    pub fn families(&self) -> Vec<MetricFamily> {
        self.registry.gather()
    }

    /// Adds `collector`'s families to the metrics page beside the head's
    /// own: what the process running the head knows that no node reports
    /// (`serve` adds its node's engine host exits).
    ///
    /// # Errors
    /// When a family of the same name is registered already.
    pub fn register(&self, collector: Box<dyn Collector>) -> prometheus::Result<()> {
        self.registry.register(collector)
    }

    /// The names of every family registered here, series or not.
    pub fn names(&self) -> Vec<String> {
        let collectors: [&dyn Collector; 17] = [
            &self.requests,
            &self.decisions,
            &self.predicted_cached_tokens,
            &self.prompt_tokens,
            &self.generated_tokens,
            &self.generations,
            &self.failed_generations,
            &self.retried_generations,
            &self.ttft,
            &self.inter_token,
            &self.duration,
            &self.queue,
            &self.reconnects,
            &self.link_refusals,
            &self.failover.moves,
            &self.failover.detection,
            &self.failover.gap,
        ];
        let mut names: Vec<String> = collectors
            .iter()
            .flat_map(|c| c.desc().into_iter().map(|d| d.fq_name.clone()))
            .collect();
        names.extend(self.overload.names());
        names.extend(self.transfer.names());
        names.sort();
        names.dedup();
        names
    }

    /// Generations sent to another node so far.
    pub fn retried(&self) -> u64 {
        self.retried_generations.get()
    }

    /// Prompt tokens the router expected the chosen nodes to hold cached.
    pub fn predicted_cached_tokens(&self) -> u64 {
        self.predicted_cached_tokens.get()
    }

    /// Decisions so far with this policy and reason.
    pub fn decisions(&self, policy: RoutePolicy, reason: Reason) -> u64 {
        self.decisions
            .with_label_values(&[policy.to_string().as_str(), reason.as_str()])
            .get()
    }
}

#[cfg(test)]
mod tests;
