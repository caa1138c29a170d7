//! Counters and histograms of generations moved off a lost or stalled node.

use prometheus::{Histogram, HistogramOpts, IntCounterVec, Opts, Registry};

use super::registered;

/// Buckets (seconds) for failover detection and gap: a connection closed at
/// once in milliseconds, a silent node at Link F's 2-2.5 s idle timeout, a
/// stalled stream at the watchdog's 5 s or more.
pub const FAILOVER_BUCKETS: [f64; 13] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 3.5, 4.0, 5.0, 10.0, 30.0,
];

/// The causes a generation leaves its node for, listed at 0 from the start.
pub const CAUSES: [&str; 3] = ["node_lost", "stalled", "node_stopping"];

/// How generations left their nodes, and what it cost their clients.
#[derive(Debug, Clone)]
pub struct FailoverMetrics {
    /// `superfluid_failovers_total{cause}`.
    pub moves: IntCounterVec,
    /// `superfluid_failover_detection_seconds`.
    pub detection: Histogram,
    /// `superfluid_failover_gap_seconds`.
    pub gap: Histogram,
}

impl FailoverMetrics {
    /// Registers the failover families in `registry`.
    pub fn new(registry: &Registry) -> FailoverMetrics {
        let moves = IntCounterVec::new(
            Opts::new(
                "superfluid_failovers_total",
                "Generations moved to another node, by cause: node_lost (connection or stream failed), stalled (no progress within the node's own step time), node_stopping.",
            ),
            &["cause"],
        )
        .expect("a constant, valid name");
        for cause in CAUSES {
            moves.with_label_values(&[cause]);
        }
        FailoverMetrics {
            moves: registered(registry, moves),
            detection: histogram(
                registry,
                "superfluid_failover_detection_seconds",
                "Seconds from the last event a lost node sent on a generation's stream until the head gave the node up.",
            ),
            gap: histogram(
                registry,
                "superfluid_failover_gap_seconds",
                "Seconds a client waited across a failover: from the last token of the lost node to the first of the next.",
            ),
        }
    }

    /// Counts one move for `cause`, detected `detection` seconds after the
    /// node's last event.
    pub fn record_move(&self, cause: &str, detection: f64) {
        self.moves.with_label_values(&[cause]).inc();
        self.detection.observe(detection);
    }

    /// Moves counted for `cause` so far.
    pub fn moves(&self, cause: &str) -> u64 {
        self.moves.with_label_values(&[cause]).get()
    }
}

fn histogram(registry: &Registry, name: &str, help: &str) -> Histogram {
    let opts = HistogramOpts::new(name, help).buckets(FAILOVER_BUCKETS.to_vec());
    registered(
        registry,
        Histogram::with_opts(opts).expect("a constant, valid name"),
    )
}
