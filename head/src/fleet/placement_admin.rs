//! Placement by hand: which nodes hold each model, and loading or
//! unloading one where an operator says (`superfluid models`).

use std::time::Instant;

use superfluid_link::sync::lock;
use superfluid_proto::{ControlMsg, Placement};

use super::placement::POLL;
use super::{Fleet, FleetError};

/// One of the head's models and where it is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPlacement {
    /// The model id.
    pub id: String,
    /// The sha256 of the head's file.
    pub sha256: String,
    /// The file's length in bytes.
    pub size: u64,
    /// The nodes that have it loaded: (node id, name).
    pub loaded_on: Vec<(String, String)>,
}

impl Fleet {
    /// The names of the nodes that have `model` loaded.
    pub fn loaded_on(&self, model: &str) -> Vec<String> {
        self.registry()
            .entries()
            .iter()
            .filter(|n| n.serves(model))
            .map(|n| n.name.clone())
            .collect()
    }

    /// Every model the head serves and where each is loaded.
    pub fn placements(&self) -> Vec<ModelPlacement> {
        let nodes = self.registry().entries();
        self.store
            .offers()
            .into_iter()
            .map(|offer| ModelPlacement {
                loaded_on: nodes
                    .iter()
                    .filter(|n| n.serves(&offer.id))
                    .map(|n| (n.node_id.clone(), n.name.clone()))
                    .collect(),
                id: offer.id,
                sha256: offer.sha256,
                size: offer.size,
            })
            .collect()
    }

    /// Loads `model` on the node with this id, name or key (or, with none,
    /// where a request for it would), and waits for it, at most the load
    /// timeout. Returns the node's name.
    ///
    /// # Errors
    /// An unknown model or node, or a load that failed or timed out.
    pub async fn load_model(&self, model: &str, node: Option<&str>) -> Result<String, FleetError> {
        let offer = self.offer(model).ok_or_else(|| FleetError::NotLoaded {
            model: model.to_owned(),
            reason: "the head does not serve it; start the head with --model FILE for it".into(),
        })?;
        let Some(node) = node else {
            self.ready(model).await?;
            return Ok(self.loaded_on(model).join(", "));
        };
        let entry = self.one(node)?;
        if !entry.serves(model) {
            self.send_load(&entry, &offer);
        }
        let deadline = Instant::now() + self.placements.load_timeout;
        loop {
            if entry.serves(model) {
                return Ok(entry.name.clone());
            }
            let failure = {
                let pending = lock(&self.placements.pending);
                pending
                    .get(model)
                    .filter(|p| p.node_id == entry.node_id)
                    .and_then(|p| p.failure.clone())
            };
            let reason = if let Some(reason) = failure {
                Some(reason)
            } else if entry.connection.close_reason().is_some() {
                Some(format!("node {} left the fleet", entry.name))
            } else if Instant::now() >= deadline {
                Some(format!(
                    "node {} did not finish loading it within {} s (--load-timeout)",
                    entry.name,
                    self.placements.load_timeout.as_secs()
                ))
            } else {
                None
            };
            if let Some(reason) = reason {
                lock(&self.placements.pending).remove(model);
                return Err(FleetError::NotLoaded {
                    model: model.to_owned(),
                    reason,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Unloads `model` from the node named `node`, or from every node that
    /// has it. Returns the names of the nodes told to.
    ///
    /// # Errors
    /// An unknown or ambiguous node.
    pub fn unload_model(&self, model: &str, node: Option<&str>) -> Result<Vec<String>, FleetError> {
        let nodes = match node {
            Some(node) => vec![self.one(node)?],
            None => self.registry().entries(),
        };
        let mut told = Vec::new();
        for entry in nodes.iter().filter(|n| n.serves(model)) {
            tracing::info!(node = %entry.name, %model, "unloading a model by hand");
            let _ = entry
                .placements
                .send(ControlMsg::Place(Placement::Unload(model.to_owned())));
            told.push(entry.name.clone());
        }
        Ok(told)
    }
}
