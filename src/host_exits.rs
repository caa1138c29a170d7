//! `superfluid_engine_host_exits_total{model,reason}`: the engine hosts of
//! this process's node that ended while the node still wanted them, read
//! from the node's counts at each scrape. The node's metrics page shows it,
//! and `serve` adds it to the head's.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, Opts};
use superfluid_node::host::exits;

/// The family, with the counts as they are when it is gathered.
#[derive(Clone)]
pub struct HostExits {
    /// The family's description, the same at every scrape.
    shape: IntCounterVec,
}

impl Default for HostExits {
    fn default() -> Self {
        Self { shape: family() }
    }
}

fn family() -> IntCounterVec {
    let opts = Opts::new(
        "superfluid_engine_host_exits_total",
        "Engine hosts (a model's llama.cpp in a child process) that ended while the node still wanted them, by model and reason (signal, failed, exited, bad_frame, stalled, load_failed).",
    );
    IntCounterVec::new(opts, &["model", "reason"]).expect("a constant, valid name and labels")
}

impl Collector for HostExits {
    fn desc(&self) -> Vec<&Desc> {
        self.shape.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let counters = family();
        for (model, reason, n) in exits::counts() {
            counters
                .with_label_values(&[model.as_str(), reason.as_str()])
                .inc_by(n);
        }
        counters.collect()
    }
}
