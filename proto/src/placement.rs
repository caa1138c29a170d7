//! Placement: which of the head's models each node keeps loaded.
//!
//! The head decides; a node obeys and reports. On the control stream the
//! head sends [`ControlMsg::Place`](crate::ControlMsg::Place) with a
//! [`Placement`]; the node loads the model (fetching its file from the head
//! first if it lacks it, see [`crate::transfer`]) or unloads it, and then
//! sends [`ControlMsg::Models`](crate::ControlMsg::Models) with every model
//! it now serves, which replaces what its hello said. A node that cannot
//! load a model says why in a [`ModelsReport`] too, so the head stops
//! waiting for it.

use serde::{Deserialize, Serialize};

use crate::messages::ModelDescription;
use crate::transfer::ModelOffer;

/// Model files a node lists as on disk, at most; the head reads no more.
pub const MAX_ON_DISK: usize = 256;

/// Head to node: a change to the models the node keeps loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// Load this model of the head's, fetching its file first if the node
    /// does not have it.
    Load(ModelOffer),
    /// Unload the model with this id once its running generations end.
    Unload(String),
}

/// Node to head: the models the node serves now, after a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelsReport {
    /// Every model the node serves, as a hello lists them.
    pub models: Vec<ModelDescription>,
    /// Memory the machine has free for another model, in bytes; 0 if unknown.
    pub free_memory: u64,
    /// The sha256 of every verified model file the node has on disk, loaded
    /// or not (at most [`MAX_ON_DISK`]): a model placed there loads without
    /// a transfer.
    pub on_disk: Vec<String>,
    /// A load the node could not do: the model id and why.
    pub failed: Option<(String, String)>,
}
