//! How much of a node's cache the index keeps: no more than the models the
//! node described can hold, so that a broken or hostile node cannot grow
//! the head's memory by reporting blocks without end.

use std::collections::HashMap;
use superfluid_proto::{ModelDescription, BLOCK_TOKENS};

/// Slots numbered this high or higher are ignored: no engine has that many,
/// and a chain per slot costs memory.
pub(crate) const MAX_SLOTS: u32 = 4096;

/// The longest chain kept for one slot, whatever context a node describes:
/// four million tokens.
pub(crate) const MAX_CHAIN_BLOCKS: usize = (1 << 22) / BLOCK_TOKENS;

/// The most blocks kept for one node over all its models and slots: 64
/// million tokens of cache, more than any node holds, and a few hundred
/// megabytes of the head's memory.
pub(crate) const MAX_NODE_BLOCKS: usize = (1 << 26) / BLOCK_TOKENS;

/// What one model's slots may hold.
#[derive(Debug, Clone, Copy)]
struct ModelLimit {
    /// Slots are numbered below this.
    slots: u32,
    /// Blocks one slot's chain may hold.
    chain: usize,
}

/// Why blocks were not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The node did not describe this model.
    UnknownModel,
    /// The slot is numbered past the model's slots.
    NoSuchSlot {
        /// Slots the model has.
        slots: u32,
    },
    /// The slot's chain is as long as the model's context allows.
    ChainFull {
        /// The most blocks a chain may hold.
        chain: usize,
    },
    /// The node holds as many blocks as the index keeps for one node.
    NodeFull,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownModel => write!(f, "the node did not describe this model"),
            Self::NoSuchSlot { slots } => write!(f, "the model has only {slots} slots"),
            Self::ChainFull { chain } => write!(
                f,
                "a slot holds at most {chain} blocks in the model's context"
            ),
            Self::NodeFull => write!(
                f,
                "the index keeps at most {MAX_NODE_BLOCKS} blocks for one node"
            ),
        }
    }
}

/// The index's limits for one node.
#[derive(Debug)]
pub(crate) struct NodeLimits {
    /// Per model the node described; `None` for a node that described none,
    /// which is held to the absolute limits only.
    models: Option<HashMap<String, ModelLimit>>,
    /// A refusal was logged as a warning; later ones are logged quietly.
    warned: bool,
}

impl NodeLimits {
    /// Limits for a node that described nothing: the absolute ones.
    pub(crate) fn absolute() -> Self {
        Self {
            models: None,
            warned: false,
        }
    }

    /// Limits from the models a node described in its hello: per slot at
    /// most its context's blocks, plus one as slack for a node that counts
    /// its context a little differently, and only the slots it has.
    pub(crate) fn described(models: &[ModelDescription]) -> Self {
        let models = models
            .iter()
            .map(|m| {
                let chain = (m.ctx as usize / BLOCK_TOKENS + 1).min(MAX_CHAIN_BLOCKS);
                let limit = ModelLimit {
                    slots: m.slots.min(MAX_SLOTS),
                    chain,
                };
                (m.id.clone(), limit)
            })
            .collect();
        Self {
            models: Some(models),
            warned: false,
        }
    }

    /// How many blocks may be appended to `slot` of `model`, whose chain
    /// holds `chain_len`, on a node holding `node_blocks`; never more than
    /// `offered`.
    pub(crate) fn room(
        &self,
        model: &str,
        slot: u32,
        chain_len: usize,
        node_blocks: usize,
        offered: usize,
    ) -> Result<usize, Refusal> {
        let limit = match &self.models {
            None => ModelLimit {
                slots: MAX_SLOTS,
                chain: MAX_CHAIN_BLOCKS,
            },
            Some(models) => *models.get(model).ok_or(Refusal::UnknownModel)?,
        };
        if slot >= limit.slots {
            return Err(Refusal::NoSuchSlot { slots: limit.slots });
        }
        let chain_room = limit.chain.saturating_sub(chain_len);
        if chain_room == 0 {
            return Err(Refusal::ChainFull { chain: limit.chain });
        }
        let node_room = MAX_NODE_BLOCKS.saturating_sub(node_blocks);
        if node_room == 0 {
            return Err(Refusal::NodeFull);
        }
        Ok(offered.min(chain_room).min(node_room))
    }

    /// Whether this is the node's first refusal, to be logged as a warning.
    pub(crate) fn first_refusal(&mut self) -> bool {
        !std::mem::replace(&mut self.warned, true)
    }
}
