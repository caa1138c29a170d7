//! Overload counters: requests refused with 429 by reason, and generations
//! cancelled on their node before they ended. The queue depth is a node
//! figure read at scrape time (`superfluid_node_queue_depth`).

use prometheus::core::Collector;
use prometheus::{IntCounter, IntCounterVec, Registry};

use super::{counter, counters};

/// Why a request was refused with 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every node serving the model had its slots and queue full.
    FleetBusy,
}

impl Refusal {
    /// Every reason, each listed from the start at 0.
    pub const ALL: [Refusal; 1] = [Refusal::FleetBusy];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::FleetBusy => "fleet_busy",
        }
    }
}

/// Counters of a fleet under more load than it takes.
#[derive(Debug, Clone)]
pub struct OverloadMetrics {
    refused: IntCounterVec,
    cancelled: IntCounter,
}

impl OverloadMetrics {
    /// The counters, registered in `registry`.
    pub(super) fn new(registry: &Registry) -> Self {
        let refused = counters(
            registry,
            "superfluid_requests_refused_total",
            "Requests refused with 429, by reason: fleet_busy (every node serving the model had its slots and queue full). An API key's own limits show as code 429 in superfluid_http_requests_total.",
            &["reason"],
        );
        for reason in Refusal::ALL {
            refused.with_label_values(&[reason.as_str()]);
        }
        let cancelled = counter(
            registry,
            "superfluid_generations_cancelled_total",
            "Generations the head cancelled on their node before they ended: the client went away, or a stop string ended the text.",
        );
        Self { refused, cancelled }
    }

    /// Counts a request refused with 429.
    pub fn record_refused(&self, reason: Refusal) {
        self.refused.with_label_values(&[reason.as_str()]).inc();
    }

    /// Requests refused so far for `reason`.
    pub fn refused(&self, reason: Refusal) -> u64 {
        self.refused.with_label_values(&[reason.as_str()]).get()
    }

    /// Counts a generation cancelled on its node.
    pub fn record_cancelled(&self) {
        self.cancelled.inc();
    }

    /// Generations cancelled so far.
    pub fn cancelled(&self) -> u64 {
        self.cancelled.get()
    }

    /// The names of these families.
    pub(super) fn names(&self) -> Vec<String> {
        let collectors: [&dyn Collector; 2] = [&self.refused, &self.cancelled];
        collectors
            .iter()
            .flat_map(|c| c.desc().into_iter().map(|d| d.fq_name.clone()))
            .collect()
    }
}
