//! Model files the head sent to nodes: bytes by model and transport, and
//! transfers by how they ended.

use prometheus::core::Collector;
use prometheus::{IntCounterVec, Registry};

use super::counters;

/// How a model file went to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The transfer port: TLS over TCP.
    Tcp,
    /// A stream of the node's Link F connection.
    Quic,
}

/// How a transfer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferOutcome {
    /// Every byte asked for was handed to the link.
    Sent,
    /// It ended early: the node went away or stopped reading.
    Cut,
    /// Nothing was sent: an unknown hash, an offset past the end, a bad
    /// request, a key with no Link F connection.
    Refused,
}

impl Transport {
    const ALL: [Transport; 2] = [Transport::Tcp, Transport::Quic];

    fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Quic => "quic",
        }
    }
}

impl TransferOutcome {
    const ALL: [TransferOutcome; 3] = [
        TransferOutcome::Sent,
        TransferOutcome::Cut,
        TransferOutcome::Refused,
    ];

    fn as_str(self) -> &'static str {
        match self {
            TransferOutcome::Sent => "sent",
            TransferOutcome::Cut => "cut",
            TransferOutcome::Refused => "refused",
        }
    }
}

/// Counters of model files sent to nodes.
#[derive(Debug, Clone)]
pub struct TransferMetrics {
    bytes: IntCounterVec,
    transfers: IntCounterVec,
}

impl TransferMetrics {
    /// The counters, registered in `registry`.
    pub(super) fn new(registry: &Registry) -> Self {
        let bytes = counters(
            registry,
            "superfluid_model_transfer_bytes_total",
            "Bytes of model files sent to nodes, by model and transport: tcp (the transfer port) or quic (a Link F stream, where the port does not answer).",
            &["model", "transport"],
        );
        let transfers = counters(
            registry,
            "superfluid_model_transfers_total",
            "Model file transfers to nodes, by transport and outcome: sent (every byte), cut (the node went away or stopped reading; it resumes), refused (nothing sent).",
            &["transport", "outcome"],
        );
        for over in Transport::ALL {
            for outcome in TransferOutcome::ALL {
                transfers.with_label_values(&[over.as_str(), outcome.as_str()]);
            }
        }
        Self { bytes, transfers }
    }

    /// Counts `n` bytes of `model` handed to the link.
    pub fn record_bytes(&self, model: &str, over: Transport, n: u64) {
        self.bytes
            .with_label_values(&[model, over.as_str()])
            .inc_by(n);
    }

    /// Counts a transfer that ended.
    pub fn record_transfer(&self, over: Transport, outcome: TransferOutcome) {
        self.transfers
            .with_label_values(&[over.as_str(), outcome.as_str()])
            .inc();
    }

    /// Bytes of `model` sent so far over `over`.
    pub fn bytes(&self, model: &str, over: Transport) -> u64 {
        self.bytes.with_label_values(&[model, over.as_str()]).get()
    }

    /// Transfers so far over `over` that ended so.
    pub fn transfers(&self, over: Transport, outcome: TransferOutcome) -> u64 {
        self.transfers
            .with_label_values(&[over.as_str(), outcome.as_str()])
            .get()
    }

    /// The names of these families.
    pub(super) fn names(&self) -> Vec<String> {
        let collectors: [&dyn Collector; 2] = [&self.bytes, &self.transfers];
        collectors
            .iter()
            .flat_map(|c| c.desc().into_iter().map(|d| d.fq_name.clone()))
            .collect()
    }
}
