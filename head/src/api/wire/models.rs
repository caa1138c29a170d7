//! `/v1/models`: the models this head serves.

use super::Object;
use serde::{Deserialize, Serialize};

/// The list of served models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    /// Always [`Object::List`].
    pub object: Object,
    /// One card per model.
    pub data: Vec<ModelCard>,
}

/// One served model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCard {
    /// The id to put in a request's `model`.
    pub id: String,
    /// Always [`Object::Model`].
    pub object: Object,
    /// Unix seconds.
    pub created: u64,
    /// Always `superfluid`.
    pub owned_by: String,
    /// An extension: the names of the nodes that have the model loaded now
    /// (empty: the first request for it loads it on a node).
    pub loaded_on: Vec<String>,
}
