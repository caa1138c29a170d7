//! Operator actions on connected nodes: drain and revoke.

use super::{
    member, registry::NodeEntry, Fleet, FleetError, NodeLoadSnapshot, NodeSnapshot, NodeState,
};
use crate::membership::Refusal;
use std::{net::SocketAddr, sync::Arc, time::SystemTime};
use superfluid_link::{control::CLOSE_REFUSED, Fingerprint};

/// What [`Fleet::revoke`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Revoked {
    /// The revoked key.
    pub fingerprint: Fingerprint,
    /// The node's name (from its connection or its enrolment).
    pub name: String,
    /// The connections that were closed, as they were just before.
    pub closed: Vec<NodeSnapshot>,
}

impl Fleet {
    /// Every node: the connected ones (as [`Fleet::nodes`]), then the
    /// enrolled keys that are not connected, as [`NodeState::Down`] with
    /// their enrolment's name and labels, an empty `node_id`, address
    /// `0.0.0.0:0`, no models or hardware, and times at the Unix epoch.
    pub fn roster(&self) -> Vec<NodeSnapshot> {
        let mut nodes = self.nodes();
        let Some(membership) = &self.membership else {
            return nodes;
        };
        for e in membership.enrolled() {
            if nodes.iter().any(|n| n.fingerprint == e.fingerprint) {
                continue;
            }
            nodes.push(NodeSnapshot {
                node_id: String::new(),
                name: e.name,
                fingerprint: e.fingerprint,
                address: SocketAddr::from(([0, 0, 0, 0], 0)),
                models: Vec::new(),
                hardware: String::new(),
                connected_since: SystemTime::UNIX_EPOCH,
                in_flight: 0,
                served: 0,
                state: NodeState::Down,
                last_heartbeat: SystemTime::UNIX_EPOCH,
                slots: 0,
                ctx: 0,
                labels: e.labels,
                ineligible: None,
                load: NodeLoadSnapshot::default(),
                link_rtt: std::time::Duration::ZERO,
            });
        }
        nodes
    }

    /// Stops sending new generations to the node with this id, name or key
    /// fingerprint; generations already running there finish.
    pub fn drain(&self, node: &str) -> Result<NodeSnapshot, FleetError> {
        let entry = self.one(node)?;
        entry.set_draining(true);
        tracing::info!(node = %entry.name, node_id = %entry.node_id, "draining a node: no new generations go there");
        Ok(self.snapshot(&entry))
    }

    /// Sends new generations to a drained node again.
    pub fn undrain(&self, node: &str) -> Result<NodeSnapshot, FleetError> {
        let entry = self.one(node)?;
        entry.set_draining(false);
        tracing::info!(node = %entry.name, node_id = %entry.node_id, "node takes new generations again");
        Ok(self.snapshot(&entry))
    }

    /// Revokes the key of the node with this id, name or fingerprint (a
    /// connected node, or an enrolled one that is away) and closes its
    /// connections at once. It is refused from then on, even with a token.
    pub fn revoke(&self, node: &str) -> Result<Revoked, FleetError> {
        let membership = self.membership.as_ref().ok_or(FleetError::NoMembership)?;
        let (fingerprint, name) = match self.one(node) {
            Ok(entry) => (entry.fingerprint, entry.name.clone()),
            Err(FleetError::UnknownNode { .. }) => membership
                .enrolled()
                .into_iter()
                .find(|e| e.name == node || e.fingerprint.to_string() == node)
                .map(|e| (e.fingerprint, e.name))
                .or_else(|| {
                    node.parse::<Fingerprint>()
                        .ok()
                        .map(|fp| (fp, String::new()))
                })
                .ok_or_else(|| FleetError::UnknownNode {
                    node: node.to_owned(),
                })?,
            Err(other) => return Err(other),
        };
        membership.revoke(&fingerprint)?;
        let reason = Refusal::Revoked {
            fingerprint,
            fleet: membership.fleet_id(),
        }
        .to_string();
        let mut closed = Vec::new();
        for entry in self.registry().with_key(&fingerprint) {
            entry.set_draining(true);
            closed.push(self.snapshot(&entry));
            entry.connection.close(CLOSE_REFUSED, reason.as_bytes());
            // Out of the fleet at once, not when its connection task ends.
            member::leave(self.registry(), self.router(), &entry);
        }
        tracing::warn!(node = %name, %fingerprint, connections = closed.len(), "revoked a node");
        Ok(Revoked {
            fingerprint,
            name,
            closed,
        })
    }

    /// Exactly one connected node named `node`.
    pub(super) fn one(&self, node: &str) -> Result<Arc<NodeEntry>, FleetError> {
        let mut found = self.registry().find(node);
        match found.len() {
            0 => Err(FleetError::UnknownNode {
                node: node.to_owned(),
            }),
            1 => Ok(found.remove(0)),
            count => Err(FleetError::Ambiguous {
                node: node.to_owned(),
                count,
                ids: found
                    .iter()
                    .map(|n| n.node_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}
